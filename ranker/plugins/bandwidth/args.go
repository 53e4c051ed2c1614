package bandwidth

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/bandwidthclaim"
	"sextant.io/sextant/ranker/plugins/pluginargs"
)

// Args are the BandwidthAware plugin args of a KubeSchedulerConfiguration profile:
//
//	pluginConfig:
//	- name: BandwidthAware
//	  args: {strategy: most-headroom, ingressWeight: 2, egressWeight: 1, staleAfter: 90s, minWindow: 60s, bestFitWindow: prefer}
//
// They are decoded strictly: an unknown field, or a value of the wrong type (a weight of
// 1.5), stops the ranker at startup with an error naming it.
type Args struct {
	// Strategy is used for pods without the bandwidth.sextant.io/strategy annotation.
	Strategy annotations.Strategy `json:"strategy,omitempty"`
	// IngressWeight and EgressWeight weigh the two directions' scores against each other.
	IngressWeight int64 `json:"ingressWeight"`
	EgressWeight  int64 `json:"egressWeight"`
	// StaleAfter is how long after a NodeBandwidth reached the ranker (on the ranker's
	// clock) its node stays eligible for pods that require bandwidth without a newer
	// one.
	StaleAfter metav1.Duration `json:"staleAfter"`
	// MinWindow is the least peak window (status.window) of a full report: a report
	// over a shorter window, which an agent publishes while it has not yet measured a
	// whole window since it started, is not used (see the package doc, "Full reports").
	// Set it to the agents' --window. 0 takes every report as full.
	MinWindow metav1.Duration `json:"minWindow"`
	// BestFitWindow is how best-fit treats a direction where the pod gives both
	// required and expected rates: prefer (the default) scores nodes by
	// |available - expected| over every node that has the required rate; strict also
	// filters out the nodes outside the pod's best-fit window, where
	// |available - expected| > expected - required, so a pod never lands on a node far
	// roomier than it expects while a closer one exists, and stays Pending when none is
	// within the window.
	BestFitWindow BestFitWindow `json:"bestFitWindow,omitempty"`
	// NotStartedReduceAfter and NotStartedReleaseAfter are how long after it was bound
	// a pod that has not started every container reserves its expected rate, and then
	// its required rate; after the second it reserves nothing and holds no guarantee
	// until it starts (package bandwidthclaim). 0 means never. The agents' enforcement
	// must be given the same NotStartedReleaseAfter (the chart passes both one value).
	NotStartedReduceAfter  metav1.Duration `json:"notStartedReduceAfter"`
	NotStartedReleaseAfter metav1.Duration `json:"notStartedReleaseAfter"`
}

// Deadlines are the args' bandwidthclaim deadlines.
func (a Args) Deadlines() bandwidthclaim.Deadlines {
	return bandwidthclaim.Deadlines{ReduceAfter: a.NotStartedReduceAfter.Duration, ReleaseAfter: a.NotStartedReleaseAfter.Duration}
}

// BestFitWindow is prefer or strict (see Args.BestFitWindow).
type BestFitWindow string

// The best-fit window modes.
const (
	WindowPrefer BestFitWindow = "prefer"
	WindowStrict BestFitWindow = "strict"
)

// valid accepts the modes, and "" for prefer (args built in code without the field).
func (w BestFitWindow) valid() bool { return w == "" || w == WindowPrefer || w == WindowStrict }

// Defaults are the args every profile starts from before its own pluginConfig args are
// applied. RegisterFlags binds the --bandwidth-* flags to it, so explicit plugin args
// override the flags, and the flags override the built-in defaults.
var Defaults = Args{
	Strategy:      annotations.BestFit,
	IngressWeight: 1,
	EgressWeight:  1,
	StaleAfter:    metav1.Duration{Duration: 60 * time.Second},
	// The agent's default --window (and the chart's agent.window).
	MinWindow:     metav1.Duration{Duration: 60 * time.Second},
	BestFitWindow: WindowPrefer,

	NotStartedReduceAfter:  metav1.Duration{Duration: bandwidthclaim.DefaultDeadlines.ReduceAfter},
	NotStartedReleaseAfter: metav1.Duration{Duration: bandwidthclaim.DefaultDeadlines.ReleaseAfter},
}

// RegisterFlags adds the --bandwidth-* flags to fs; they set Defaults. Call it before
// the flags are parsed, e.g. on the scheduler command's flag set.
func RegisterFlags(fs *pflag.FlagSet) {
	fs.Var(strategyFlag{&Defaults.Strategy}, "bandwidth-strategy",
		"BandwidthAware: scoring strategy for pods without the "+annotations.BandwidthStrategy+" annotation ("+annotations.StrategyForm()+"); plugin args override it")
	fs.Int64Var(&Defaults.IngressWeight, "bandwidth-ingress-weight", Defaults.IngressWeight,
		"BandwidthAware: weight of the ingress score against the egress score; plugin args override it")
	fs.Int64Var(&Defaults.EgressWeight, "bandwidth-egress-weight", Defaults.EgressWeight,
		"BandwidthAware: weight of the egress score against the ingress score; plugin args override it")
	fs.DurationVar(&Defaults.StaleAfter.Duration, "bandwidth-stale-after", Defaults.StaleAfter.Duration,
		"BandwidthAware: a node whose latest NodeBandwidth reached the ranker longer ago than this is not eligible for pods that require bandwidth; plugin args override it")
	fs.DurationVar(&Defaults.MinWindow.Duration, "bandwidth-min-window", Defaults.MinWindow.Duration,
		"BandwidthAware: a NodeBandwidth whose peak window is shorter than this (an agent that has not yet measured a whole window since it started) is not used; set it to the agents' --window, 0 to take every report; plugin args override it")
	fs.DurationVar(&Defaults.NotStartedReduceAfter.Duration, "bandwidth-not-started-reduce-after", Defaults.NotStartedReduceAfter.Duration,
		"BandwidthAware: a pod bound this long ago that has not started every container reserves only its required rate, not its expected; 0: never; plugin args override it")
	fs.DurationVar(&Defaults.NotStartedReleaseAfter.Duration, "bandwidth-not-started-release-after", Defaults.NotStartedReleaseAfter.Duration,
		"BandwidthAware: a pod bound this long ago that has not started every container reserves nothing and holds no guarantee until it starts (an Event says so); 0: never; give the agents' --enforcement-not-started-release-after the same value; plugin args override it")
	fs.Var(windowFlag{&Defaults.BestFitWindow}, "bandwidth-best-fit-window",
		"BandwidthAware: for best-fit pods with required and expected rates, prefer (score by closeness to expected) or strict (also filter out nodes where |available - expected| > expected - required); plugin args override it")
}

// windowFlag rejects an unknown best-fit window mode when the flags are parsed.
type windowFlag struct{ w *BestFitWindow }

func (f windowFlag) String() string {
	if f.w == nil {
		return ""
	}
	return string(*f.w)
}

func (f windowFlag) Set(v string) error {
	// valid takes "" for args built in code; on the command line it is a mistake.
	if v == "" || !BestFitWindow(v).valid() {
		return fmt.Errorf("unknown best-fit window %q; want prefer or strict", v)
	}
	*f.w = BestFitWindow(v)
	return nil
}

func (windowFlag) Type() string { return "mode" }

// strategyFlag rejects an unknown strategy when the flags are parsed, so a typo fails
// at startup with the flag's name rather than later as a plugin error.
type strategyFlag struct{ s *annotations.Strategy }

func (f strategyFlag) String() string {
	if f.s == nil {
		return ""
	}
	return string(*f.s)
}

func (f strategyFlag) Set(v string) error {
	st, ok := annotations.ParseStrategy(v)
	if !ok {
		return fmt.Errorf("unknown strategy %q; want %s", v, annotations.StrategyForm())
	}
	*f.s = st
	return nil
}

func (strategyFlag) Type() string { return "strategy" }

// decodeArgs applies the profile's args over Defaults.
// CheckArgs reports what New would refuse in obj, a profile's args for the plugin,
// without building it: the ranker checks its --config before it connects to anything.
func CheckArgs(obj runtime.Object) error {
	_, err := decodeArgs(obj)
	return err
}

func decodeArgs(obj runtime.Object) (Args, error) {
	args := Defaults
	if obj != nil {
		if typed, ok := obj.(*Args); ok {
			// Tests and embedders may pass typed args.
			args = *typed
		} else if err := pluginargs.Decode(Name, obj, &args); err != nil {
			return Args{}, err
		}
	}
	if err := args.Validate(); err != nil {
		return Args{}, fmt.Errorf("%s args: %w", Name, err)
	}
	return args, nil
}

// Validate reports every invalid field, naming the plugin arg and the flag that set it.
func (a Args) Validate() error {
	var errs []error
	if _, ok := annotations.ParseStrategy(string(a.Strategy)); !ok {
		errs = append(errs, fmt.Errorf("strategy (--bandwidth-strategy) %q unknown; want %s", a.Strategy, annotations.StrategyForm()))
	}
	if a.IngressWeight < 0 {
		errs = append(errs, fmt.Errorf("ingressWeight (--bandwidth-ingress-weight) %d is negative; want 0 or more", a.IngressWeight))
	}
	if a.EgressWeight < 0 {
		errs = append(errs, fmt.Errorf("egressWeight (--bandwidth-egress-weight) %d is negative; want 0 or more", a.EgressWeight))
	}
	if a.IngressWeight == 0 && a.EgressWeight == 0 {
		errs = append(errs, errors.New("ingressWeight and egressWeight are both 0; at least one must be positive"))
	}
	if a.StaleAfter.Duration <= 0 {
		errs = append(errs, fmt.Errorf("staleAfter (--bandwidth-stale-after) %s must be positive", a.StaleAfter.Duration))
	}
	if a.MinWindow.Duration < 0 {
		errs = append(errs, fmt.Errorf("minWindow (--bandwidth-min-window) %s is negative; want 0 or more", a.MinWindow.Duration))
	}
	if a.NotStartedReduceAfter.Duration < 0 {
		errs = append(errs, fmt.Errorf("notStartedReduceAfter (--bandwidth-not-started-reduce-after) %s is negative; want 0 (never) or more", a.NotStartedReduceAfter.Duration))
	}
	if a.NotStartedReleaseAfter.Duration < 0 {
		errs = append(errs, fmt.Errorf("notStartedReleaseAfter (--bandwidth-not-started-release-after) %s is negative; want 0 (never) or more", a.NotStartedReleaseAfter.Duration))
	}
	if r, rel := a.NotStartedReduceAfter.Duration, a.NotStartedReleaseAfter.Duration; r > 0 && rel > 0 && rel < r {
		errs = append(errs, fmt.Errorf("notStartedReleaseAfter (--bandwidth-not-started-release-after) %s is shorter than notStartedReduceAfter (--bandwidth-not-started-reduce-after) %s; want it as long or longer", rel, r))
	}
	if !a.BestFitWindow.valid() {
		errs = append(errs, fmt.Errorf("bestFitWindow (--bandwidth-best-fit-window) %q unknown; want prefer or strict", a.BestFitWindow))
	}
	return errors.Join(errs...)
}

// GetObjectKind and DeepCopyObject make *Args a runtime.Object, so it can be passed as
// typed plugin args (tests, embedders).
func (a *Args) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (a *Args) DeepCopyObject() runtime.Object {
	out := *a
	return &out
}
