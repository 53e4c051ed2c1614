package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"sextant.io/sextant/internal/flagcheck"
	"sextant.io/sextant/internal/httpbound"
	"sextant.io/sextant/internal/kubeclient"
	"sextant.io/sextant/internal/version"
	"sextant.io/sextant/sidecars/virtualnode"
	"sextant.io/sextant/sidecars/webhook"
)

type webhookOptions struct {
	kubeconfig     string
	bandwidthQuota bool
	listenAddr     string
	metricsAddr    string
	metricsLimits  httpbound.Limits
	// serving bounds the webhook's server; maxBodyBytes each review's body and
	// maxInFlightBodyBytes the bodies of the reviews being served at once.
	serving              httpbound.Limits
	maxBodyBytes         int64
	maxInFlightBodyBytes int64
	certFile, keyFile    string
	cert                 selfCertOptions
	wrapperImage         string
	wrapperPullPolicy    string
	installCPU           string
	installMemory        string
	imagePullSecrets     []string
	exitImage            string
	exitCommand          []string
	virtualNodes         bool
	podSelector          string
	leaderElect          bool
	leaseNamespace       string
	leaseName            string
	leaseDuration        time.Duration
	renewDeadline        time.Duration
	retryPeriod          time.Duration
	logging              *logsapi.LoggingConfiguration
}

// addLoggingFlags adds kube-scheduler's logging flags (-v, --logging-format, …): every
// sextant-sidecars command logs through klog, as the ranker does.
func (o *webhookOptions) addLoggingFlags(f *pflag.FlagSet) {
	o.logging = logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(o.logging, f)
}

// logger applies the logging flags and returns the command's logger.
func (o *webhookOptions) logger(name string) (logr.Logger, error) {
	if err := logsapi.ValidateAndApply(o.logging, nil); err != nil {
		return logr.Logger{}, fmt.Errorf("logging flags: %w", err)
	}
	return klog.Background().WithName(name), nil
}

// addLeaderFlags adds the lease's flags, named as kube-scheduler names its own.
func (o *webhookOptions) addLeaderFlags(f *pflag.FlagSet, what string) {
	f.BoolVar(&o.leaderElect, "leader-elect", true, "run "+what+" only on the replica holding the lease")
	f.StringVar(&o.leaseNamespace, "leader-elect-namespace", envOr("POD_NAMESPACE", "sextant-system"), "namespace of the lease ($POD_NAMESPACE when set)")
	f.StringVar(&o.leaseName, "leader-elect-name", "sextant-sidecar-controller", "name of the lease")
	f.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a lease not renewed stops other replicas from taking it")
	f.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew before it stops leading (less than the lease duration)")
	f.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "how often replicas try to take or renew the lease")
}

func newSidecarWebhookCommand() *cobra.Command {
	cmd, _ := sidecarWebhookCommand()
	return cmd
}

// sidecarWebhookCommand is newSidecarWebhookCommand with the options its flags set.
func sidecarWebhookCommand() (*cobra.Command, *webhookOptions) {
	o := &webhookOptions{}
	cmd := command("webhook",
		"Serve sextant's admission webhook for pods and run the virtual-node sidecar controller",
		`webhook serves, over TLS on --listen-addr:

  `+webhook.PathMutate+`    prepares the sidecars of Job-like pods (restartPolicy Never or OnFailure;
                 containers with env SEXTANT_SIDECAR=true or
                 KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT=true): converts them to native
                 sidecars and runs them under sextant-sidecar-wrapper, with their command
                 moved into a pod annotation the downward API hands back to them.
  `+webhook.PathValidate+`   refuses malformed bandwidth.sextant.io/* and numa.sextant.io/policy
                 annotations, naming the annotation and its accepted form, and (with
                 --bandwidth-quota) pods whose required rates would take their
                 namespace past one of its BandwidthQuotas, naming the quota.

With --virtual-nodes (the default) it also runs, on the replica that holds the lease
--leader-elect-name, the controller that stops finished sidecars on virtual-kubelet
nodes (label type=virtual-kubelet or taint virtual-kubelet.io/provider) by swapping
them in place to --exit-image.`,
		// Closures, not method values: those would copy o before its flags are parsed.
		func() error { return o.validateWebhook() },
		func(ctx context.Context) error { return runSidecarWebhook(ctx, *o) })
	cmd.Aliases = []string{"sidecar-webhook"}
	f := cmd.Flags()
	o.addKubeconfigFlag(f)
	f.StringVar(&o.listenAddr, "listen-addr", ":9443", "address the webhook serves HTTPS on")
	o.serving = httpbound.Limits{
		// The API server calls the webhook with a deadline of the configuration's
		// timeoutSeconds (at most 30 s, the chart's 5 s) and sends a review at once; a
		// client slower than this is not the API server.
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		IdleTimeout: 90 * time.Second,
		// Reviews are answered in well under a millisecond each: 64 at once is a burst
		// of pod creations far beyond what the API server sends one replica. A 429
		// fails the call, which the failure policy then decides.
		MaxInFlight: 64,
	}
	o.serving.AddFlags(f, "", "the webhook (--listen-addr)")
	f.Int64Var(&o.maxBodyBytes, "max-body-bytes", webhook.MaxReviewBytes, "longest AdmissionReview read; a longer one gets 413 (the default holds an UPDATE's two objects at the API server's 3 MiB limit)")
	f.Int64Var(&o.maxInFlightBodyBytes, "max-inflight-body-bytes", 32<<20, "bytes of the reviews being served at once (a review of undeclared length counts as --max-body-bytes); a review beyond gets 429. With what decoding a review takes, about 3 times this is the most memory reviews hold at once")
	addMetricsFlags(f, o)
	f.StringVar(&o.certFile, "tls-cert-file", "/etc/sextant-webhook/tls.crt", "serving certificate (PEM); read again when it changes")
	f.StringVar(&o.keyFile, "tls-key-file", "/etc/sextant-webhook/tls.key", "serving certificate's key (PEM)")
	o.cert.addFlags(f)
	f.StringVar(&o.wrapperImage, "wrapper-image", "", "image holding /sextant-sidecar-wrapper, which the injected init container copies into the pod (required)")
	f.StringVar(&o.wrapperPullPolicy, "wrapper-pull-policy", string(corev1.PullIfNotPresent), "imagePullPolicy of the injected init container")
	f.StringVar(&o.installCPU, "install-cpu", webhook.DefaultInstallCPU.String(), "CPU request and limit of the injected init container; a pod requests at least this much, so on a node of many Jobs that request little, less lets more run at once (and copies the wrapper slower)")
	f.StringVar(&o.installMemory, "install-memory", webhook.DefaultInstallMemory.String(), "memory request and limit of the injected init container (it copies a static binary of a few MiB)")
	f.StringSliceVar(&o.imagePullSecrets, "image-pull-secrets", nil, "names of Secrets added to the imagePullSecrets of each pod given the init container, where absent (those that pull --wrapper-image)")
	f.BoolVar(&o.virtualNodes, "virtual-nodes", true, "run the virtual-node sidecar controller")
	f.BoolVar(&o.bandwidthQuota, "bandwidth-quota", true, "refuse pods that would take their namespace past one of its BandwidthQuotas (reads the namespace's quotas and its pods' metadata from the API server for each pod that requires bandwidth)")
	o.addControllerFlags(f, "required with --virtual-nodes", "the virtual-node controller", "the virtual-node controller")
	o.addLoggingFlags(f)
	return cmd, o
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// validateWebhook checks the flags of the webhook command before anything starts.
func (o webhookOptions) validateWebhook() error {
	// net.Listen takes "" (and a host without a port) as any port on every address.
	if _, port, err := net.SplitHostPort(o.listenAddr); err != nil || port == "" {
		return fmt.Errorf("--listen-addr %q: want [host]:port, such as :9443", o.listenAddr)
	}
	if err := o.serving.Validate(""); err != nil {
		return err
	}
	if o.maxBodyBytes < 64<<10 {
		return fmt.Errorf("--max-body-bytes %d: want at least 65536, room for an AdmissionReview of a pod (default %d)", o.maxBodyBytes, webhook.MaxReviewBytes)
	}
	if o.maxInFlightBodyBytes < o.maxBodyBytes {
		return fmt.Errorf("--max-inflight-body-bytes %d: want at least --max-body-bytes (%d), or no review that long is ever read", o.maxInFlightBodyBytes, o.maxBodyBytes)
	}
	if err := o.validateMetrics(); err != nil {
		return err
	}
	switch corev1.PullPolicy(o.wrapperPullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--wrapper-pull-policy %q: want Always, IfNotPresent or Never", o.wrapperPullPolicy)
	}
	if _, err := installQuantity("--install-cpu", o.installCPU, "100m"); err != nil {
		return err
	}
	if _, err := installQuantity("--install-memory", o.installMemory, "32Mi"); err != nil {
		return err
	}
	if o.wrapperImage == "" {
		return errors.New("--wrapper-image is required")
	}
	if err := flagcheck.Image("--wrapper-image", o.wrapperImage); err != nil {
		return err
	}
	for _, s := range o.imagePullSecrets {
		if err := flagcheck.Name("--image-pull-secrets", s, "a Secret name", validation.IsDNS1123Subdomain); err != nil {
			return err
		}
	}
	if o.virtualNodes && o.exitImage == "" {
		return errors.New("--exit-image is required with --virtual-nodes")
	}
	if o.virtualNodes {
		if err := o.validateController(); err != nil {
			return err
		}
	}
	return o.cert.validate()
}

// validateController checks the flags of the virtual-node controller (in
// virtual-node-controller, or in the webhook command with --virtual-nodes) before anything
// starts.
func (o webhookOptions) validateController() error {
	if o.exitImage == "" {
		return errors.New("--exit-image is required")
	}
	if err := flagcheck.Image("--exit-image", o.exitImage); err != nil {
		return err
	}
	if len(o.exitCommand) == 0 || o.exitCommand[0] == "" {
		return fmt.Errorf("--exit-command %q: want the command of --exit-image that exits 0, such as /exit0", strings.Join(o.exitCommand, ","))
	}
	if o.podSelector != "" {
		if err := flagcheck.Selector("--pod-selector", o.podSelector); err != nil {
			return err
		}
	}
	if !o.leaderElect {
		return nil
	}
	if err := flagcheck.Name("--leader-elect-namespace", o.leaseNamespace, "a namespace", validation.IsDNS1123Label); err != nil {
		return err
	}
	if err := flagcheck.Name("--leader-elect-name", o.leaseName, "a Lease name", validation.IsDNS1123Subdomain); err != nil {
		return err
	}
	if err := flagcheck.Positive("--leader-elect-retry-period", o.retryPeriod, "2s"); err != nil {
		return err
	}
	if float64(o.renewDeadline) <= leaderelection.JitterFactor*float64(o.retryPeriod) {
		return fmt.Errorf("--leader-elect-renew-deadline %v: want more than %v x --leader-elect-retry-period (%v)", o.renewDeadline, leaderelection.JitterFactor, o.retryPeriod)
	}
	if o.leaseDuration <= o.renewDeadline {
		return fmt.Errorf("--leader-elect-lease-duration %v: want more than --leader-elect-renew-deadline (%v)", o.leaseDuration, o.renewDeadline)
	}
	return nil
}

// installQuantity parses the quantity of flag, which must be positive.
func installQuantity(flag, value, example string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(value)
	if err != nil || q.Sign() <= 0 {
		return resource.Quantity{}, fmt.Errorf("%s %q: want a positive quantity, such as %s", flag, value, example)
	}
	return q, nil
}

func runSidecarWebhook(ctx context.Context, o webhookOptions) error {
	installCPU, _ := installQuantity("--install-cpu", o.installCPU, "100m")
	installMemory, _ := installQuantity("--install-memory", o.installMemory, "32Mi")
	// Bound before anything else, so that an address that cannot be served fails the
	// start, naming the flag.
	ln, err := net.Listen("tcp", o.listenAddr)
	if err != nil {
		return fmt.Errorf("--listen-addr %q: %w", o.listenAddr, err)
	}
	defer ln.Close()
	log, err := o.logger("sidecar-webhook")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := newMetricsRegistry()
	stopMetrics, err := o.startMetrics(reg, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	var wg sync.WaitGroup
	if o.virtualNodes {
		ctrl, elect, err := o.newController(reg, log.WithName("virtual-node-controller"))
		if err != nil {
			return err
		}
		wg.Go(func() { runLeading(ctx, elect, ctrl, log) })
	}

	reviews := httpbound.NewInFlight(o.serving.MaxInFlight)
	bodies := httpbound.NewBodies(o.maxBodyBytes, o.maxInFlightBodyBytes)
	probes := httpbound.NewInFlight(o.serving.MaxInFlight)
	noBody := httpbound.NewBodies(httpbound.NoBodyBytes, 0)
	h := &webhook.Handler{
		Mutator: webhook.MutatorConfig{WrapperImage: o.wrapperImage, WrapperPullPolicy: corev1.PullPolicy(o.wrapperPullPolicy), ImagePullSecrets: o.imagePullSecrets,
			InstallCPU: installCPU, InstallMemory: installMemory},
		Log:          log,
		Metrics:      webhook.NewMetrics(reg),
		Limit:        func(h http.Handler) http.Handler { return reviews.Limit(bodies.Limit(h)) },
		Probes:       func(h http.Handler) http.Handler { return probes.Limit(noBody.Limit(h)) },
		MaxBodyBytes: o.maxBodyBytes,
	}
	if o.bandwidthQuota {
		quotas, err := apiQuotas(o.kubeconfig)
		if err != nil {
			return err
		}
		h.Quotas = quotas
	}
	cert, err := o.servingCertificate(ctx, &wg, log)
	if err != nil {
		stop()
		wg.Wait()
		return err
	}
	log.Info("sidecar webhook serving", "addr", ln.Addr().String(), "version", version.Version, "virtualNodes", o.virtualNodes, "certSecret", o.cert.secret)
	err = webhook.Serve(ctx, ln, cert, h.ServeMux(), o.serving, log)
	stop()
	wg.Wait()
	return err
}

// election is the leader election of the virtual-node controller; nil without
// --leader-elect. It is checked here, once: leaderelection.RunOrDie panics on a bad one.
func (o webhookOptions) election(kube kubernetes.Interface) (*leaderelection.LeaderElectionConfig, error) {
	if !o.leaderElect {
		return nil, nil
	}
	id, err := os.Hostname()
	if err != nil {
		id = "sidecar-controller"
	}
	id += fmt.Sprintf("_%d", os.Getpid())
	cfg := &leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.leaseNamespace, Name: o.leaseName},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		ReleaseOnCancel: true, Name: o.leaseName,
		LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
	}
	check := *cfg
	check.Callbacks = leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}}
	if _, err := leaderelection.NewLeaderElector(check); err != nil {
		return nil, fmt.Errorf("leader election (--leader-elect-lease-duration > --leader-elect-renew-deadline > 1.2 x --leader-elect-retry-period): %w", err)
	}
	return cfg, nil
}

// runLeading runs the controller whenever this replica holds the lease, until ctx ends;
// without an election (elect nil), always.
//
// A replica that loses its lease stops the controller and campaigns again, in this
// process. It does not exit for the kubelet to restart it: in the webhook command the same
// process serves the admission webhook, which must not go down with a lease, and a
// process that exits on every lost lease ends in CrashLoopBackOff on a flapping API
// server, minutes with no replica campaigning. Each term runs the controller afresh
// (Controller.Run starts from new informers and a new queue) and only once the last
// term's run has returned, so two never overlap in one process.
func runLeading(ctx context.Context, elect *leaderelection.LeaderElectionConfig, ctrl *virtualnode.Controller, log logr.Logger) {
	run := func(ctx context.Context) {
		if err := ctrl.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "virtual-node controller stopped")
		}
	}
	if elect == nil {
		run(ctx)
		return
	}
	id := elect.Lock.Identity()
	// One goroutine runs the terms one after another. leaderelection starts
	// OnStartedLeading in a goroutine of its own and returns without waiting for it.
	terms := make(chan context.Context)
	var runner sync.WaitGroup
	runner.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case term := <-terms:
				log.Info("leading: virtual-node controller running", "lease", elect.Lock.Describe(), "identity", id)
				run(term)
				log.Info("virtual-node controller stopped for the end of the term", "identity", id)
			}
		}
	})
	defer runner.Wait()
	cfg := *elect
	cfg.Callbacks = leaderelection.LeaderCallbacks{
		OnStartedLeading: func(term context.Context) {
			select {
			case terms <- term:
			case <-term.Done():
			}
		},
		OnStoppedLeading: func() { log.Info("not leading", "lease", elect.Lock.Describe(), "identity", id) },
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, cfg)
		if ctx.Err() == nil {
			log.Info("lost the lease; campaigning again", "lease", elect.Lock.Describe(), "identity", id)
		}
	}
}

// apiQuotas reads BandwidthQuotas and pods for the webhook's quota check.
func apiQuotas(kubeconfig string) (webhook.APIQuotas, error) {
	cfg, err := kubeclient.Config(kubeconfig)
	if err != nil {
		return webhook.APIQuotas{}, fmt.Errorf("--bandwidth-quota: %w", err)
	}
	cfg.UserAgent = "sextant-sidecar-webhook/" + version.Version
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return webhook.APIQuotas{}, fmt.Errorf("--bandwidth-quota: dynamic client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return webhook.APIQuotas{}, fmt.Errorf("--bandwidth-quota: metadata client: %w", err)
	}
	return webhook.APIQuotas{Dynamic: dyn, Metadata: meta}, nil
}
