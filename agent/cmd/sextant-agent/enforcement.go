package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"sextant.io/sextant/agent/bandwidth"
	"sextant.io/sextant/agent/enforce"
	"sextant.io/sextant/agent/report"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/bandwidthclaim"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/liveness"
)

// enforcementOptions are the flags of bandwidth enforcement.
type enforcementOptions struct {
	networks        []string
	shapedShare     float64
	unreservedShare float64
	stateDir        string
	resync          time.Duration
	onExit          string
	// releaseAfter is bandwidthclaim's ReleaseAfter: the ranker's notStartedReleaseAfter.
	releaseAfter time.Duration
}

// On-exit behaviours of --enforcement-on-exit.
const (
	onExitAuto    = "auto"
	onExitKeep    = "keep"
	onExitRestore = "restore"
)

func (e *enforcementOptions) addFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&e.networks, "enforce", nil, "networks (pod, or one named by --network) whose guarantees the agent keeps: it shapes their interfaces so that every pod gets its bandwidth.sextant.io/*-required rate and no pod exceeds its limit; comma-separated or repeated (default: none, metering only)")
	f.Float64Var(&e.shapedShare, "enforcement-shaped-share", enforce.DefaultShares.Shaped, "the fraction of an interface's capacity the agent shapes it to; below 1 the queue forms where the agent shapes, not in the NIC or upstream")
	f.Float64Var(&e.unreservedShare, "enforcement-unreserved-share", enforce.DefaultShares.Unreserved, "the fraction of the shaped rate kept for traffic no pod reserved (the node's own, pods without annotations); guarantees add up to at most the rest")
	f.StringVar(&e.stateDir, "state-dir", "/var/lib/sextant-agent", "where the agent keeps what it must know again after a restart: what each shaped interface held before (a host directory in a container)")
	f.DurationVar(&e.resync, "enforcement-resync", 10*time.Second, "check the shaping against the pods and the kernel at least this often")
	f.DurationVar(&e.releaseAfter, "enforcement-not-started-release-after", bandwidthclaim.DefaultDeadlines.ReleaseAfter, "a pod bound this long ago that has not started every container holds no guarantee until it starts; give it the ranker's notStartedReleaseAfter (--bandwidth-not-started-release-after), so both admit the same pods; 0: never")
	f.StringVar(&e.onExit, "enforcement-on-exit", onExitAuto, "what happens to the shaping when the agent stops: keep (a restarted agent takes it over, guarantees hold meanwhile), restore (every interface gets back its previous qdisc), or auto (restore when the agent's DaemonSet is gone or being deleted, as on uninstall; keep otherwise)")
}

// validate checks the enforcement flags against the networks the agent knows.
func (e enforcementOptions) validate(networks []bandwidth.NetworkSpec, heartbeats bool) error {
	if len(e.networks) > 0 && !heartbeats {
		return errors.New("--enforce needs --heartbeats: the meter finds the networks' interfaces and their capacities")
	}
	for _, n := range e.networks {
		named := slices.ContainsFunc(networks, func(s bandwidth.NetworkSpec) bool { return s.Name == n })
		if n != annotations.PodNetwork && !named {
			return fmt.Errorf("--enforce %q: not a network of the node (want pod, or a name given by --network NAME=IFACE)", n)
		}
	}
	if err := (enforce.Shares{Shaped: e.shapedShare, Unreserved: e.unreservedShare}).Validate(); err != nil {
		return fmt.Errorf("--enforcement-shaped-share/--enforcement-unreserved-share: %w", err)
	}
	switch {
	case e.stateDir == "" && len(e.networks) > 0:
		return errors.New("--state-dir is empty: want a directory that outlives the agent, e.g. /var/lib/sextant-agent")
	case e.releaseAfter < 0:
		return fmt.Errorf("--enforcement-not-started-release-after %s: want 0 (never) or a positive duration, e.g. 5m", e.releaseAfter)
	case e.resync <= 0:
		return fmt.Errorf("--enforcement-resync %s: want a positive duration, e.g. 10s", e.resync)
	case e.onExit != onExitAuto && e.onExit != onExitKeep && e.onExit != onExitRestore:
		return fmt.Errorf("--enforcement-on-exit %q: want %s, %s or %s", e.onExit, onExitAuto, onExitKeep, onExitRestore)
	}
	return nil
}

// enforcement is the enforcer of the enforced networks and its shaper.
type enforcement struct {
	enforcer *enforce.Enforcer
	shaper   *enforce.Shaper
	networks []string
	stateDir string
	onExit   string
	kube     kubernetes.Interface
	log      logr.Logger
}

// newEnforcement makes the enforcer that keeps the guarantees of the enforced networks,
// reading meter's snapshots; nil without any (restoreEarlierShaping then gives back
// what an earlier run shaped).
func (a *agent) newEnforcement(meter *bandwidth.Meter) (*enforcement, error) {
	o, e := a.o, a.o.enforcement
	if len(e.networks) == 0 {
		return nil, nil
	}
	log := a.log.WithName("enforcement")
	shaper, err := enforce.NewShaper(o.netns, e.stateDir, log)
	if err != nil {
		return nil, fmt.Errorf("bandwidth enforcement: %w", err)
	}
	enforcer, err := enforce.New(enforce.Config{
		NodeName: o.nodeName, Networks: e.networks, Resync: e.resync, SampleInterval: o.sampleInterval, Window: o.window,
		Shares:     enforce.Shares{Shaped: e.shapedShare, Unreserved: e.unreservedShare},
		Cgroup:     enforce.HostNetworkCgroups(o.cgroupRoot, o.kubepodsCgroup),
		NotStarted: bandwidthclaim.Deadlines{ReleaseAfter: e.releaseAfter},
	}, a.kube, a.pods, meter.Snapshot, shaper, a.reg, log)
	if err != nil {
		shaper.Close()
		return nil, err
	}
	return &enforcement{enforcer: enforcer, shaper: shaper, networks: e.networks, stateDir: e.stateDir, onExit: e.onExit, kube: a.kube, log: log}, nil
}

// start starts keeping the guarantees; the enforcer failing fails the agent.
func (e *enforcement) start(ctx context.Context, g *group, loops *liveness.Checker) {
	loops.Add("bandwidth-enforcement", liveness.Bound(e.enforcer.LivenessInterval()), e.enforcer.LastAlive)
	g.goFatal(ctx, "bandwidth enforcement", e.enforcer.Run)
	e.log.Info("keeping bandwidth guarantees", "networks", e.networks, "stateDir", e.stateDir)
}

// close releases the shaper; stop, if the enforcer ran, has decided what stays.
func (e *enforcement) close() { e.shaper.Close() }

// restoreEarlierShaping gives back the interfaces an earlier run shaped, if its state
// says there are any.
func restoreEarlierShaping(o runOptions, log logr.Logger) error {
	if o.enforcement.stateDir == "" {
		return nil
	}
	state, err := enforce.LoadState(o.enforcement.stateDir)
	if err != nil || len(state.Interfaces) == 0 {
		return err
	}
	shaper, err := enforce.NewShaper(o.netns, o.enforcement.stateDir, log)
	if err != nil {
		return fmt.Errorf("give back the interfaces an earlier run shaped: %w", err)
	}
	defer shaper.Close()
	log.Info("bandwidth enforcement is off: giving back the interfaces an earlier run shaped", "interfaces", shaper.Shaped())
	return enforce.Teardown(shaper)
}

// stop ends enforcement as the agent stops: the shaping stays for the next agent, or
// goes when the agent is being removed from the node (see --enforcement-on-exit).
func (e *enforcement) stop() {
	restore := e.onExit == onExitRestore
	if e.onExit == onExitAuto {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		removed, why, err := agentRemoved(ctx, e.kube)
		if err != nil {
			e.log.Error(err, "could not tell whether the agent is being removed from the node; keeping the shaping for the next agent")
		}
		restore = removed
		if removed {
			e.log.Info("the agent is being removed from the node: giving back every interface it shaped", "why", why)
		}
	}
	if !restore {
		e.log.Info("keeping the shaping for the next agent")
		return
	}
	if err := e.enforcer.Teardown(); err != nil {
		e.log.Error(err, "could not give back every shaped interface; `sextant-agent unshape` does it by hand")
	}
}

// agentRemoved reports whether the agent's pod belongs to a DaemonSet that is gone or
// being deleted (helm uninstall deletes the DaemonSet before its pods), with why. Outside
// a pod (no $POD_NAME and $POD_NAMESPACE) the agent is never being removed.
//
// helm uninstall deletes the agent's RBAC and service account right after its DaemonSet,
// while the agent is still stopping: an API server that no longer knows or allows the
// agent's account says the same as a missing DaemonSet. Other errors (a timeout) say
// nothing, and the shaping stays.
func agentRemoved(ctx context.Context, kube kubernetes.Interface) (bool, string, error) {
	name, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if name == "" || ns == "" {
		return false, "", nil
	}
	pod, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		return true, "the API server no longer lets the agent's account read its pod: " + err.Error(), nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read the agent's pod %s/%s: %w", ns, name, err)
	}
	var owner *metav1.OwnerReference
	for i, ref := range pod.OwnerReferences {
		if ref.Kind == "DaemonSet" && ref.Controller != nil && *ref.Controller {
			owner = &pod.OwnerReferences[i]
		}
	}
	if owner == nil {
		return false, "", nil
	}
	ds, err := kube.AppsV1().DaemonSets(ns).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, "DaemonSet " + ns + "/" + owner.Name + " is gone", nil
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return true, "the API server no longer lets the agent's account read its DaemonSet: " + err.Error(), nil
	case err != nil:
		return false, "", fmt.Errorf("read the agent's DaemonSet %s/%s: %w", ns, owner.Name, err)
	case ds.UID != owner.UID:
		return true, "DaemonSet " + ns + "/" + owner.Name + " was made again", nil
	case ds.DeletionTimestamp != nil:
		return true, "DaemonSet " + ns + "/" + owner.Name + " is being deleted", nil
	}
	return false, "", nil
}

// reportEnforcement turns the enforcer's view into what NodeBandwidth says of each
// enforced network.
func reportEnforcement(e *enforce.Enforcer) func() map[string]report.Enforcement {
	return func() map[string]report.Enforcement {
		out := map[string]report.Enforcement{}
		for _, st := range e.Status() {
			c := metav1.Condition{
				Type: v1alpha1.ConditionGuaranteesEnforced, Status: metav1.ConditionFalse,
				Reason: st.Reason, Message: truncateMessage(st.Message), LastTransitionTime: metav1.NewTime(st.Since.UTC().Truncate(time.Second)),
			}
			r := report.Enforcement{Condition: c}
			if st.Enforced {
				r.Condition.Status = metav1.ConditionTrue
				q := func(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }
				r.Guarantees = &v1alpha1.Guarantees{
					Ingress: v1alpha1.GuaranteedDirection{Capacity: q(st.Capacity[enforce.Ingress]), Guaranteed: q(st.Guaranteed[enforce.Ingress])},
					Egress:  v1alpha1.GuaranteedDirection{Capacity: q(st.Capacity[enforce.Egress]), Guaranteed: q(st.Guaranteed[enforce.Egress])},
				}
			}
			out[st.Network] = r
		}
		return out
	}
}

// truncateMessage keeps a condition's message within the API's 32768 bytes.
func truncateMessage(s string) string {
	const limit = 4096
	if len(s) <= limit {
		return s
	}
	return strings.ToValidUTF8(s[:limit], "") + "…"
}

// newUnshapeCommand is `sextant-agent unshape`: what an agent stopped with
// --enforcement-on-exit=keep, or killed, left shaped, given back by hand.
func newUnshapeCommand() *cobra.Command {
	var netnsPath, stateDir string
	cmd := &cobra.Command{
		Use:   "unshape",
		Short: "Give every interface the agent shaped back the root qdisc it had before, and remove the agent's IFBs and filters",
		Long: `unshape undoes bandwidth enforcement on this node without a cluster: for each
interface the state in --state-dir names, it removes the ingress redirect, the
classifier's filters and the IFB, and puts back the root qdisc the interface had
before the agent shaped it. Run it where an agent was removed while it could not
clean up (killed, or stopped with --enforcement-on-exit=keep). It is safe to run
twice; an agent that still enforces shapes the interfaces again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkNetns(netnsPath); err != nil {
				return err
			}
			shaper, err := enforce.NewShaper(netnsPath, stateDir, logr.Discard())
			if err != nil {
				return err
			}
			defer shaper.Close()
			shaped := shaper.Shaped()
			if err := enforce.Teardown(shaper); err != nil {
				return err
			}
			if len(shaped) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no interface is shaped (state in %s)\n", stateDir)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "gave back %s\n", strings.Join(shaped, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&netnsPath, "netns", "", "network namespace of the shaped interfaces, as a path such as /var/run/netns/NAME (default: this process's)")
	cmd.Flags().StringVar(&stateDir, "state-dir", "/var/lib/sextant-agent", "the agent's state directory (its --state-dir)")
	return cmd
}
