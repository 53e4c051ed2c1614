package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"sextant.io/sextant/agent/bandwidth"
	"sextant.io/sextant/agent/topology"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/liveness"
)

// apiCallTimeout bounds one round's writes to the API server in the agent's own loops:
// a call that hangs fails, is logged, and the loop goes on to its next round. /healthz
// is the backstop for whatever still blocks.
const apiCallTimeout = 30 * time.Second

// loop is what the agent's own loops share: how often they turn, the beat they mark
// each round, and their clock.
type loop struct {
	every   time.Duration
	beat    *liveness.Beat
	now     func() time.Time
	timeout time.Duration // of each round's API calls
	log     logr.Logger
}

func (l loop) wait(ctx context.Context, t *time.Ticker) bool {
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// publishBandwidth offers the meter's latest snapshot to the NodeBandwidth reporter
// every round until ctx ends; written is set once a write went through.
func (l loop) publishBandwidth(ctx context.Context, snapshot func() bandwidth.Snapshot,
	offer func(context.Context, bandwidth.Snapshot) (bool, error), written *atomic.Bool) {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for l.wait(ctx, t) {
		l.publishOnce(ctx, snapshot, offer, written)
		l.beat.Mark(l.now())
	}
}

func (l loop) publishOnce(ctx context.Context, snapshot func() bandwidth.Snapshot,
	offer func(context.Context, bandwidth.Snapshot) (bool, error), written *atomic.Bool) {
	snap := snapshot()
	if snap.Time.IsZero() {
		return // the meter has not sampled yet: nothing true to publish
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if _, err := offer(cctx, snap); err != nil {
		if ctx.Err() == nil {
			l.log.Error(err, "publishing NodeBandwidth failed")
		}
		return
	}
	written.Store(true)
}

// publishTopology reads the topology every round (at once, then every interval) and
// offers it to the NodeTopology reporter, until ctx ends. It is
// report.TopologyReporter.Run with a beat and a deadline on each round's writes.
func (l loop) publishTopology(ctx context.Context, read func() (*topology.Snapshot, error),
	offer func(context.Context, v1alpha1.Topology) (bool, error), root string) {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		l.topologyOnce(ctx, read, offer, root)
		l.beat.Mark(l.now())
		if !l.wait(ctx, t) {
			return
		}
	}
}

func (l loop) topologyOnce(ctx context.Context, read func() (*topology.Snapshot, error),
	offer func(context.Context, v1alpha1.Topology) (bool, error), root string) {
	snap, err := read()
	if err != nil {
		l.log.Error(err, "reading the topology failed", "root", root)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	wrote, err := offer(cctx, snap.Topology)
	if err != nil && ctx.Err() == nil {
		l.log.Error(err, "publishing NodeTopology failed")
	}
	if wrote {
		for _, w := range snap.Warnings {
			l.log.Info("topology item left out", "reason", w)
		}
	}
}
