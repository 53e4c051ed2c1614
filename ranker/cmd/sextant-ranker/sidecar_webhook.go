package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"sextant.io/sextant/internal/version"
	"sextant.io/sextant/ranker/virtualnode"
	"sextant.io/sextant/ranker/webhook"
)

type webhookOptions struct {
	kubeconfig        string
	listenAddr        string
	certFile, keyFile string
	wrapperImage      string
	wrapperPullPolicy string
	exitImage         string
	exitCommand       []string
	virtualNodes      bool
	podSelector       string
	leaderElect       bool
	leaseNamespace    string
	leaseName         string
}

func newSidecarWebhookCommand() *cobra.Command {
	o := webhookOptions{}
	cmd := &cobra.Command{
		Use:   "sidecar-webhook",
		Short: "Serve sextant's admission webhook for pods and run the virtual-node sidecar controller",
		Long: `sidecar-webhook serves, over TLS on --listen-addr:

  ` + webhook.PathMutate + `    prepares the sidecars of Job-like pods (restartPolicy Never or OnFailure;
                 containers with env SEXTANT_SIDECAR=true or
                 KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT=true): converts them to native
                 sidecars and runs them under sextant-sidecar-wrapper, with their command
                 moved into a pod annotation the downward API hands back to them.
  ` + webhook.PathValidate + `   refuses malformed bandwidth.sextant.io/* and numa.sextant.io/policy
                 annotations, naming the annotation and its accepted form.

With --virtual-nodes (the default) it also runs, on the replica that holds the lease
--leader-elect-name, the controller that stops finished sidecars on virtual-kubelet
nodes (label type=virtual-kubelet or taint virtual-kubelet.io/provider) by swapping
them in place to --exit-image.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSidecarWebhook(cmd.Context(), o)
		},
	}
	// cobra's own help, not the kube-scheduler sections the root command prints.
	plain := &cobra.Command{}
	cmd.SetUsageFunc(plain.UsageFunc())
	cmd.SetHelpFunc(plain.HelpFunc())
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	f.StringVar(&o.listenAddr, "listen-addr", ":9443", "address the webhook serves HTTPS on")
	f.StringVar(&o.certFile, "tls-cert-file", "/etc/sextant-webhook/tls.crt", "serving certificate (PEM); read again when it changes")
	f.StringVar(&o.keyFile, "tls-key-file", "/etc/sextant-webhook/tls.key", "serving certificate's key (PEM)")
	f.StringVar(&o.wrapperImage, "wrapper-image", "", "image holding /sextant-sidecar-wrapper, which the injected init container copies into the pod (required)")
	f.StringVar(&o.wrapperPullPolicy, "wrapper-pull-policy", string(corev1.PullIfNotPresent), "imagePullPolicy of the injected init container")
	f.StringVar(&o.exitImage, "exit-image", "", "image a finished sidecar on a virtual node is swapped to (required with --virtual-nodes)")
	f.StringSliceVar(&o.exitCommand, "exit-command", []string{"/exit0"}, "command of --exit-image that exits 0, written into the sidecar's command annotation")
	f.BoolVar(&o.virtualNodes, "virtual-nodes", true, "run the virtual-node sidecar controller")
	f.StringVar(&o.podSelector, "pod-selector", "", "label selector narrowing the pods the virtual-node controller looks at")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "run the virtual-node controller only on the replica holding the lease")
	f.StringVar(&o.leaseNamespace, "leader-elect-namespace", envOr("POD_NAMESPACE", "sextant-system"), "namespace of the lease ($POD_NAMESPACE when set)")
	f.StringVar(&o.leaseName, "leader-elect-name", "sextant-sidecar-controller", "name of the lease")
	return cmd
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func runSidecarWebhook(ctx context.Context, o webhookOptions) error {
	switch corev1.PullPolicy(o.wrapperPullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--wrapper-pull-policy %q: want Always, IfNotPresent or Never", o.wrapperPullPolicy)
	}
	if o.wrapperImage == "" {
		return errors.New("--wrapper-image is required")
	}
	if o.virtualNodes && o.exitImage == "" {
		return errors.New("--exit-image is required with --virtual-nodes")
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "sidecar-webhook")
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	var wg sync.WaitGroup
	if o.virtualNodes {
		cfg, err := restConfig(o.kubeconfig)
		if err != nil {
			return err
		}
		cfg.UserAgent = "sextant-sidecar-controller/" + version.Version
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		ctrl, err := virtualnode.New(virtualnode.Config{
			ExitImage: o.exitImage, ExitCommand: o.exitCommand, PodSelector: o.podSelector,
		}, kube, log.With("component", "virtual-node-controller"))
		if err != nil {
			return err
		}
		wg.Go(func() { runLeading(ctx, o, kube, ctrl, log) })
	}

	h := &webhook.Handler{
		Mutator: webhook.MutatorConfig{WrapperImage: o.wrapperImage, WrapperPullPolicy: corev1.PullPolicy(o.wrapperPullPolicy)},
		Log:     log,
	}
	log.Info("sidecar webhook serving", "addr", o.listenAddr, "version", version.Version, "virtualNodes", o.virtualNodes)
	err := webhook.Serve(ctx, o.listenAddr, o.certFile, o.keyFile, h.ServeMux(), log)
	stop()
	wg.Wait()
	return err
}

// runLeading runs the controller whenever this replica holds the lease, until ctx ends.
func runLeading(ctx context.Context, o webhookOptions, kube kubernetes.Interface, ctrl *virtualnode.Controller, log *slog.Logger) {
	run := func(ctx context.Context) {
		if err := ctrl.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("virtual-node controller stopped", "err", err)
		}
	}
	if !o.leaderElect {
		run(ctx)
		return
	}
	id, err := os.Hostname()
	if err != nil {
		id = "sidecar-webhook"
	}
	id += fmt.Sprintf("_%d", os.Getpid())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.leaseNamespace, Name: o.leaseName},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true, Name: o.leaseName,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					log.Info("leading: virtual-node controller running", "lease", o.leaseNamespace+"/"+o.leaseName, "identity", id)
					run(ctx)
				},
				OnStoppedLeading: func() { log.Info("not leading: virtual-node controller stopped", "identity", id) },
			},
		})
	}
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load --kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration (outside a cluster, pass --kubeconfig): %w", err)
	}
	return cfg, nil
}
