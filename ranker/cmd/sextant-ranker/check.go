package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	sextantv1 "sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/flagcheck"
	"sextant.io/sextant/internal/kubeclient"
	"sextant.io/sextant/internal/version"
)

// checkOptions are the flags of `sextant-ranker check`, the chart's helm test.
type checkOptions struct {
	kubeconfig     string
	namespace      string
	probeNamespace string
	agentSelector  string
	freshWithin    time.Duration
	schedulerName  string
	image          string
	command        []string
	timeout        time.Duration
}

func newCheckCommand() *cobra.Command {
	cmd, _ := checkCommand()
	return cmd
}

// checkCommand is newCheckCommand with the options its flags set.
func checkCommand() (*cobra.Command, *checkOptions) {
	o := &checkOptions{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check an installation: every agent's node has a fresh NodeBandwidth, and the ranker places a pod (the chart's helm test)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printVersion(cmd) {
				return nil
			}
			if err := o.validate(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			cfg, err := kubeclient.Config(o.kubeconfig)
			if err != nil {
				return err
			}
			cfg.UserAgent = "sextant-check/" + version.Version
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			return runCheck(ctx, kube, dyn, *o, cmd.OutOrStdout())
		},
	}
	plain := &cobra.Command{}
	cmd.SetUsageFunc(plain.UsageFunc())
	cmd.SetHelpFunc(plain.HelpFunc())
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster configuration)")
	f.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the release's namespace, where its agent pods run (default $POD_NAMESPACE)")
	f.StringVar(&o.probeNamespace, "probe-namespace", "", "where the test pod runs (default: --namespace). The chart gives a namespace of its own, under the restricted Pod Security level, so that the check's right to create pods cannot start one as a sextant service account")
	f.StringVar(&o.agentSelector, "agent-selector", "app.kubernetes.io/name=sextant,app.kubernetes.io/component=agent", "label selector of the agent pods")
	f.DurationVar(&o.freshWithin, "fresh-within", 90*time.Second, "a NodeBandwidth sampled longer ago than this is stale")
	f.StringVar(&o.schedulerName, "scheduler-name", "sextant", "the ranker's profile, which the test pod names")
	f.StringVar(&o.image, "image", "", "image of the test pod (required)")
	f.StringSliceVar(&o.command, "command", []string{"/usr/local/bin/sextant-ranker", "--version"}, "command of the test pod: one that exits 0")
	f.DurationVar(&o.timeout, "timeout", 3*time.Minute, "give up after this long")
	return cmd, o
}

// validate checks the flags of check before any client is made.
func (o checkOptions) validate() error {
	if o.namespace == "" {
		return errors.New("--namespace (or $POD_NAMESPACE) is required: the release's namespace")
	}
	if err := flagcheck.Name("--namespace", o.namespace, "a namespace", validation.IsDNS1123Label); err != nil {
		return err
	}
	if o.probeNamespace != "" {
		if err := flagcheck.Name("--probe-namespace", o.probeNamespace, "a namespace", validation.IsDNS1123Label); err != nil {
			return err
		}
	}
	if o.image == "" {
		return errors.New("--image is required: the image of the test pod, such as the ranker's")
	}
	if err := flagcheck.Image("--image", o.image); err != nil {
		return err
	}
	if o.agentSelector == "" {
		return errors.New("--agent-selector is empty: want a label selector of the agent pods such as app.kubernetes.io/component=agent")
	}
	if err := flagcheck.Selector("--agent-selector", o.agentSelector); err != nil {
		return err
	}
	if err := flagcheck.Name("--scheduler-name", o.schedulerName, "a scheduler name", validation.IsDNS1123Subdomain); err != nil {
		return err
	}
	if len(o.command) == 0 || o.command[0] == "" {
		return fmt.Errorf("--command %q: want a command of --image that exits 0, such as /usr/local/bin/sextant-ranker,--version", strings.Join(o.command, ","))
	}
	if err := flagcheck.Positive("--fresh-within", o.freshWithin, "90s"); err != nil {
		return err
	}
	return flagcheck.Positive("--timeout", o.timeout, "3m")
}

var nodeBandwidths = sextantv1.GroupVersion.WithResource("nodebandwidths")

// runCheck waits until every running agent's node has a NodeBandwidth sampled within
// freshWithin (agents that just started publish within seconds), then creates a pod for
// the ranker's profile and waits until it is bound, and deletes it. The error names
// what is missing when ctx ends first.
func runCheck(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, o checkOptions, out interface{ Write([]byte) (int, error) }) error {
	if o.namespace == "" || o.image == "" {
		return errors.New("check: --namespace (or $POD_NAMESPACE) and --image are required")
	}
	var missing []string
	// listErr is the last failure to list the agent pods: then the API server, not the
	// agents, is what did not answer.
	var listErr error
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: o.agentSelector})
		if err != nil {
			listErr = err
			return false, nil
		}
		listErr, missing = nil, nil
		nodes := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				continue
			}
			nodes++
			if why := staleness(ctx, dyn, p.Spec.NodeName, o.freshWithin); why != "" {
				missing = append(missing, p.Spec.NodeName+": "+why)
			}
		}
		if nodes == 0 {
			missing = []string{"no running agent pods (" + o.agentSelector + ")"}
		}
		return len(missing) == 0, nil
	})
	switch {
	case err != nil && listErr != nil:
		return fmt.Errorf("could not list the agent pods in %s (is the API server reachable?): %w", o.namespace, listErr)
	case err != nil:
		return fmt.Errorf("agents not reporting: %s", strings.Join(missing, "; "))
	}
	fmt.Fprintln(out, "every agent's node has a fresh NodeBandwidth")

	ns := o.probeNamespace
	if ns == "" {
		ns = o.namespace
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sextant-check-", Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/name": "sextant", "app.kubernetes.io/component": "check"}},
		Spec: corev1.PodSpec{
			SchedulerName: o.schedulerName, RestartPolicy: corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			// What the restricted Pod Security level asks, so that the probe runs there.
			SecurityContext: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "check", Image: o.image, Command: o.command,
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
					AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	created, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the test pod: %w", err)
	}
	defer func() {
		_ = kube.CoreV1().Pods(ns).Delete(context.WithoutCancel(ctx), created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	var node string
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = p.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		return fmt.Errorf("the ranker (schedulerName %s) did not place pod %s/%s", o.schedulerName, ns, created.Name)
	}
	fmt.Fprintf(out, "the ranker placed pod %s on %s\n", created.Name, node)
	return nil
}

// staleness says why a node's NodeBandwidth is not fresh, "" when it is.
func staleness(ctx context.Context, dyn dynamic.Interface, node string, within time.Duration) string {
	u, err := dyn.Resource(nodeBandwidths).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "no NodeBandwidth: " + err.Error()
	}
	var nb sextantv1.NodeBandwidth
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nb); err != nil {
		return "NodeBandwidth does not decode: " + err.Error()
	}
	if nb.Status.SampleTime == nil {
		return "NodeBandwidth has no sample"
	}
	if age := time.Since(nb.Status.SampleTime.Time); age > within {
		return fmt.Sprintf("NodeBandwidth sampled %s ago (more than %s)", age.Round(time.Second), within)
	}
	return ""
}
