package bandwidth

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"sextant.io/sextant/api/bandwidthclaim"
)

// sweepEvery is how often the ledger checks whether a deadline passed: a claim is
// released at most this late, which is small beside the deadlines themselves.
const sweepEvery = 5 * time.Second

// The Events a pod gets when a deadline reduces or releases its claim.
const (
	EventReasonReduced  = "BandwidthClaimReduced"
	EventReasonReleased = "BandwidthClaimReleased"
)

// sweepDeadlines applies the ledger's deadlines as they pass, until ctx ends.
func (pl *BandwidthAware) sweepDeadlines(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pl.ledger.Sweep()
		}
	}
}

// claimsChanged records an Event on each pod whose claim a deadline reduced or
// released (on the leader only) and brings back the waiting pods its node may now
// admit: nothing the scheduler watches changes when a deadline passes.
func (pl *BandwidthAware) claimsChanged(changes []StageChange) {
	nodes := map[string]bool{}
	for _, c := range changes {
		nodes[c.Node] = true
		if pl.events == nil || !pl.scheduling.Load() {
			continue
		}
		ref := &v1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Namespace: c.Pod.Namespace, Name: c.Pod.Name, UID: c.UID}}
		notStarted := fmt.Sprintf("not every container has started %s after the pod was bound to %s",
			pl.now().Sub(c.Bound).Truncate(time.Second), c.Node)
		switch c.Stage {
		case bandwidthclaim.RequiredOnly:
			pl.events.Eventf(ref, nil, v1.EventTypeNormal, EventReasonReduced, "Reduce",
				"%s: its bandwidth reservation on network %q is cut to its required rate until it starts (%s notStartedReduceAfter)",
				notStarted, c.Network, Name)
		case bandwidthclaim.Released:
			pl.events.Eventf(ref, nil, v1.EventTypeWarning, EventReasonReleased, "Release",
				"%s: its bandwidth reservation and guarantee on network %q are released for other pods until it starts (%s notStartedReleaseAfter)",
				notStarted, c.Network, Name)
		}
	}
	if pl.waiting == nil {
		return
	}
	now := pl.now()
	pl.waiting.Activate(klog.Background(), func(pod *v1.Pod) bool {
		for node := range nodes {
			if rec := pl.reports.Node(node); rec != nil {
				if report := rec.Bandwidth(); report != nil && pl.admits(pod, report, now) {
					return true
				}
			}
		}
		return false
	})
}
