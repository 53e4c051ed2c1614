//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarrules"
	"sextant.io/sextant/cri"
	"sextant.io/sextant/internal/charttest"
	"sextant.io/sextant/sidecars/virtualnode"
	"sextant.io/sextant/sidecars/webhook"
)

// The sidecar tests run their own agent (sidecar terminator only) and their own webhook
// as processes, for pods labelled sidecarLabel=<test's id> in namespaces of their own:
// the chart's agent and webhook, if deployed, leave such pods alone (scripts/deploy.sh
// sets their selectors so), and tests running side by side leave each other's alone.
const (
	sidecarLabel   = "sextant.io/e2e-sidecar"
	busyboxImage   = "sextant.local/busybox:dev"
	e2eImageTag    = "e2e"
	wrapperImageE2 = "sextant.local/sextant-sidecar-wrapper:" + e2eImageTag
	exitImageE2    = "sextant.local/exit0:" + e2eImageTag
)

// containerdSocket is the local cluster's containerd socket.
func containerdSocket(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SEXTANT_CLUSTER_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), ".cluster")
	}
	sock := filepath.Join(dir, "run", "containerd.sock")
	if _, err := os.Stat(sock); err != nil {
		t.Skipf("no containerd socket of the local cluster at %s: %v", sock, err)
	}
	return sock
}

var (
	sidecarImagesOnce sync.Once
	sidecarImagesErr  error
)

// importSidecarImages builds the wrapper and exit0 images from this tree and imports them
// under the tag "e2e", once per run, so the tests use the code under test and never
// the tag the chart deploys.
func importSidecarImages(t *testing.T, sock string) {
	t.Helper()
	sidecarImagesOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sextant-e2e-images-")
		if err != nil {
			sidecarImagesErr = err
			return
		}
		defer os.RemoveAll(dir)
		static := func(pkg, out string) error {
			cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", out, pkg)
			cmd.Dir = repoRoot(t)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("build %s: %w\n%s", pkg, err, b)
			}
			return nil
		}
		for _, step := range []func() error{
			func() error { return static("./agent/cmd/sextant-sidecar-wrapper", filepath.Join(dir, "wrapper")) },
			func() error { return static("./scripts/images/exit0", filepath.Join(dir, "exit0")) },
			func() error { return static("./scripts/images/mkimage", filepath.Join(dir, "mkimage")) },
		} {
			if sidecarImagesErr = step(); sidecarImagesErr != nil {
				return
			}
		}
		for _, img := range []struct{ ref, file, path string }{
			{wrapperImageE2, "wrapper", "/sextant-sidecar-wrapper"},
			{exitImageE2, "exit0", "/exit0"},
		} {
			tar := filepath.Join(dir, img.file+".tar")
			out, err := exec.Command(filepath.Join(dir, "mkimage"), "--ref", img.ref, "--out", tar,
				"--file", img.path+"="+filepath.Join(dir, img.file), "--entrypoint", img.path).CombinedOutput()
			if err != nil {
				sidecarImagesErr = fmt.Errorf("mkimage %s: %w\n%s", img.ref, err, out)
				return
			}
			out, err = exec.Command("ctr", "--address", sock, "-n", "k8s.io", "images", "import", "--no-unpack=false", tar).CombinedOutput()
			if err != nil {
				sidecarImagesErr = fmt.Errorf("import %s: %w\n%s", img.ref, err, out)
				return
			}
		}
	})
	if sidecarImagesErr != nil {
		t.Fatal(sidecarImagesErr)
	}
}

// chartRules returns the rules of the ClusterRole named name in a template of the chart,
// rendered with the chart's defaults: the tests' processes get exactly the chart's RBAC.
func chartRules(t *testing.T, template, name string) []rbacv1.PolicyRule {
	t.Helper()
	// The chart's kubeVersion needs a version helm template does not assume.
	cmd := exec.Command("go", "tool", "helm", "template", "sextant", "charts/sextant", "--namespace", "sextant-system",
		"--kube-version", "1.36.0", "--show-only", "templates/"+template)
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v", template, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var role rbacv1.ClusterRole
		if err := dec.Decode(&role); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode %s: %v", template, err)
		}
		if role.Kind == "ClusterRole" && role.Name == name {
			return role.Rules
		}
	}
	t.Fatalf("no ClusterRole %s in %s", name, template)
	return nil
}

// serviceAccountWithRules makes a service account in ns bound to a ClusterRole with the
// rules (and a Role with nsRules in ns), and returns a kubeconfig for it.
func serviceAccountWithRules(t *testing.T, ns, name string, rules, nsRules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	if _, err := local.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	roleName := ns + "-" + name
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}
	if _, err := local.kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: roleName}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := local.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: roleName},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: roleName}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = local.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), roleName, metav1.DeleteOptions{})
		_ = local.kube.RbacV1().ClusterRoles().Delete(context.Background(), roleName, metav1.DeleteOptions{})
	})
	if len(nsRules) > 0 {
		if _, err := local.kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: nsRules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := local.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return serviceAccountKubeconfig(t, ns, name)
}

// leaseRole lets the service account namespace/name hold leases in ns.
func leaseRole(t *testing.T, ns, namespace, name string) {
	t.Helper()
	ctx := context.Background()
	if _, err := local.kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leases"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "update"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := local.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leases"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "leases"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: namespace}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sidecarHarness is one test's namespace, agent and webhook.
type sidecarHarness struct {
	t               *testing.T
	ns              string
	id              string // the value of sidecarLabel on the test's pods
	sock            string
	rt              *cri.Client
	agentKubeconfig string
	// stateDir is the agent's --state-dir, which outlives each agent process: the stop
	// marks are there.
	stateDir string
	// signal is the agent's --sidecar-signal: runtime (the default) or process.
	signal  string
	agent   *process
	webhook *process
}

// newSidecarHarness makes a namespace, starts the webhook (registered for that namespace
// only, failure policy Fail so a webhook that is not called fails the test) and the
// agent for the local node, which stops sidecars through the CRI.
func newSidecarHarness(t *testing.T) *sidecarHarness {
	t.Helper()
	return newSidecarHarnessSignalling(t, "runtime")
}

// newSidecarHarnessSignalling is newSidecarHarness with the agent's --sidecar-signal.
func newSidecarHarnessSignalling(t *testing.T, signal string) *sidecarHarness {
	t.Helper()
	sock := containerdSocket(t)
	importSidecarImages(t, sock)
	ctx := context.Background()
	ns, err := local.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sidecar-e2e-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = local.kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	h := &sidecarHarness{t: t, ns: ns.Name, id: ns.Name, sock: sock, stateDir: t.TempDir(), signal: signal}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := local.kube.CoreV1().ServiceAccounts(h.ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("namespace %s has no default service account: %v", h.ns, err)
	}
	h.rt, err = cri.Dial(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.rt.Close() })

	h.agentKubeconfig = serviceAccountWithRules(t, h.ns, "agent", chartRules(t, "agent-rbac.yaml", "sextant-agent"), nil)
	h.startAgent()
	h.startWebhook()
	return h
}

func (h *sidecarHarness) startAgent() {
	h.t.Helper()
	h.agent = startProcess(h.t, agentBinary(h.t), "run", "--logging-format=json",
		"--kubeconfig", h.agentKubeconfig, "--node-name", local.nodeName, "--heartbeats=false", "--numa-pinning=false", "--metrics-addr", "",
		"--cri-endpoint", "unix://"+h.sock, "--sidecar-pod-selector", sidecarLabel+"="+h.id, "--state-dir", h.stateDir,
		"--sidecar-signal", h.signal)
	waitForOutput(h.t, h.agent, `"msg":"sextant-agent running"`, 30*time.Second)
}

// killAgent ends the agent with SIGKILL: no chance to finish anything.
func (h *sidecarHarness) killAgent() {
	h.t.Helper()
	_ = h.agent.cmd.Process.Kill()
	_ = h.agent.cmd.Wait()
}

func (h *sidecarHarness) startWebhook() {
	t := h.t
	t.Helper()
	ip := nodeInternalIP(t, local.nodeName)
	caPEM, certFile, keyFile := webhookCertificate(t, ip)
	// The virtual-node controller in it runs as the chart's own account: the chart's pod
	// policy lets that account alone swap a command annotation. Its lease is in the
	// test's namespace.
	deployChart(t)
	kubeconfig := serviceAccountKubeconfig(t, releaseNamespace, "sextant-virtual-node-controller")
	leaseRole(t, h.ns, releaseNamespace, "sextant-virtual-node-controller")
	h.webhook = startProcess(t, sidecarsBinary(t), "webhook", "--logging-format=json", "--kubeconfig", kubeconfig,
		"--listen-addr", net.JoinHostPort(ip, "0"), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--wrapper-image", wrapperImageE2, "--wrapper-pull-policy", "Never", "--exit-image", chartExitImage(t),
		// The burst tests run up to 100 Jobs at once on the 2-CPU node: each pod requests
		// what its install container does.
		"--install-cpu", "10m",
		"--pod-selector", sidecarLabel+"="+h.id, "--leader-elect-namespace", h.ns)
	addr := waitForAddress(t, h.webhook, regexp.MustCompile(`"msg":"sidecar webhook serving".*?"addr":"([^"]+)"`), 30*time.Second)

	scope := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": h.ns}}
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	url := func(path string) *string { return ptr.To("https://" + addr + path) }
	ctx := context.Background()
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: h.ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "sidecar.e2e.sextant.io", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none, FailurePolicy: &fail,
			ClientConfig:       admissionregistrationv1.WebhookClientConfig{URL: url(webhook.PathMutate), CABundle: caPEM},
			Rules:              []admissionregistrationv1.RuleWithOperations{podRule(admissionregistrationv1.Create)},
			NamespaceSelector:  scope,
			ReinvocationPolicy: ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
	if _, err := local.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: h.ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "annotations.e2e.sextant.io", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none, FailurePolicy: &fail,
			ClientConfig:      admissionregistrationv1.WebhookClientConfig{URL: url(webhook.PathValidate), CABundle: caPEM},
			Rules:             []admissionregistrationv1.RuleWithOperations{podRule(admissionregistrationv1.Create, admissionregistrationv1.Update)},
			NamespaceSelector: scope,
			MatchConditions:   chartValidatingMatchConditions(t),
		}},
	}
	if _, err := local.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = local.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), h.ns, metav1.DeleteOptions{})
		_ = local.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), h.ns, metav1.DeleteOptions{})
	})
	// The API server loads each configuration on its own, a moment later: wait until a
	// dry-run pod comes back mutated and one with a malformed annotation is refused.
	probe := h.jobPodSpec(corev1.RestartPolicyNever, []corev1.Container{h.main("main", "true")}, []corev1.Container{h.sidecar("proxy", "sleep", "1")})
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: h.ns, Labels: map[string]string{sidecarLabel: h.id}}, Spec: probe}
		out, err := local.kube.CoreV1().Pods(h.ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil || out.Labels[annotations.SidecarPrepared] != "true" {
			last = fmt.Sprintf("a dry-run pod came back unprepared (%v)", err)
			return false, nil
		}
		pod.Annotations = map[string]string{annotations.BandwidthPrefix + "ingress-required": "fast"}
		_, err = local.kube.CoreV1().Pods(h.ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		last = fmt.Sprintf("a dry-run pod with a malformed annotation: %v", err)
		return err != nil && strings.Contains(err.Error(), "annotations.e2e.sextant.io"), nil
	})
	if err != nil {
		t.Fatalf("the webhook at %s is not called: %s", addr, last)
	}
}

func podRule(ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
		APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}
}

// webhookCertificate makes a CA and a serving certificate for ip, and returns the CA
// (PEM) and the certificate's and key's files.
func webhookCertificate(t *testing.T, ip string) ([]byte, string, string) {
	t.Helper()
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sidecar-e2e-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP(ip)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), certFile, keyFile
}

func waitForOutput(t *testing.T, p *process, want string, timeout time.Duration) {
	t.Helper()
	waitForMatch(t, p, regexp.MustCompile(regexp.QuoteMeta(want)), timeout)
}

// waitForAddress waits until p prints a line that re matches, and returns re's first
// group: the address p bound. Each process is told port 0 and the kernel picks the
// port as it binds, so that no other process can take it between a test finding a free
// port and p binding it.
func waitForAddress(t *testing.T, p *process, re *regexp.Regexp, timeout time.Duration) string {
	t.Helper()
	return waitForMatch(t, p, re, timeout)[1]
}

// waitForMatch waits until p's output matches re and returns the match and its groups;
// it fails the test if p exits first or the timeout passes.
func waitForMatch(t *testing.T, p *process, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	var m []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if p.cmd.ProcessState != nil {
			return false, errors.New("exited")
		}
		m = re.FindStringSubmatch(p.output())
		return m != nil, nil
	})
	if err != nil {
		t.Fatalf("%s did not print %s: %v\n%s", filepath.Base(p.cmd.Path), re, err, lastLines(p.output(), 30))
	}
	return m
}

func (h *sidecarHarness) main(name string, script string) corev1.Container {
	return corev1.Container{Name: name, Image: busyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", script}}
}

// sidecar is a container marked as a sidecar running command.
func (h *sidecarHarness) sidecar(name string, command ...string) corev1.Container {
	return corev1.Container{Name: name, Image: busyboxImage, ImagePullPolicy: corev1.PullNever, Command: command,
		Env: []corev1.EnvVar{{Name: sidecarrules.EnvSidecar, Value: "true"}}}
}

func (h *sidecarHarness) jobPodSpec(policy corev1.RestartPolicy, mains, sidecars []corev1.Container) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy: policy,
		NodeSelector:  map[string]string{"sextant.io/local": "true"},
		// Long enough that a sidecar the agent failed to stop quickly shows in the
		// timings, short enough that a stuck test cleans up soon.
		TerminationGracePeriodSeconds: ptr.To[int64](10),
		Containers:                    append(append([]corev1.Container{}, mains...), sidecars...),
	}
}

// job creates a Job of one pod with the given containers.
func (h *sidecarHarness) job(name string, policy corev1.RestartPolicy, annotations map[string]string, mains, sidecars []corev1.Container) *batchv1.Job {
	h.t.Helper()
	return h.jobOf(name, annotations, h.jobPodSpec(policy, mains, sidecars))
}

// jobOf creates a Job of one pod of spec.
func (h *sidecarHarness) jobOf(name string, annotations map[string]string, spec corev1.PodSpec) *batchv1.Job {
	h.t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{sidecarLabel: h.id}, Annotations: annotations},
				Spec:       spec,
			},
		},
	}
	out, err := local.kube.BatchV1().Jobs(h.ns).Create(context.Background(), job, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create job %s: %v", name, err)
	}
	return out
}

// waitJob waits for the Job's Complete or Failed condition and returns which.
func (h *sidecarHarness) waitJob(name string, timeout time.Duration) batchv1.JobConditionType {
	h.t.Helper()
	var got batchv1.JobConditionType
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		job, err := local.kube.BatchV1().Jobs(h.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range job.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				got = c.Type
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		h.t.Fatalf("job %s neither Complete nor Failed after %v; pods:\n%s", name, timeout, h.describePods(name))
	}
	return got
}

func (h *sidecarHarness) jobPod(name string) *corev1.Pod {
	h.t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := local.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
		if err != nil || len(list.Items) == 0 {
			return false, nil
		}
		pod = &list.Items[0]
		return true, nil
	})
	if err != nil {
		h.t.Fatalf("job %s has no pod", name)
	}
	return pod
}

func (h *sidecarHarness) pod(name string) *corev1.Pod {
	h.t.Helper()
	pod, err := local.kube.CoreV1().Pods(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return pod
}

func (h *sidecarHarness) describePods(job string) string {
	list, err := local.kube.CoreV1().Pods(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range list.Items {
		fmt.Fprintf(&b, "%s %s\n", p.Name, p.Status.Phase)
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "  %s restarts=%d %+v\n", cs.Name, cs.RestartCount, cs.State)
		}
	}
	return b.String()
}

// stopEvents are the SidecarStopped events of a pod, by container (field path).
func (h *sidecarHarness) stopEvents(pod *corev1.Pod) map[string]int {
	h.t.Helper()
	return h.eventsOf(pod, "SidecarStopped")
}

// eventsOf counts the pod's Events of reason by the field path they name.
func (h *sidecarHarness) eventsOf(pod *corev1.Pod, reason string) map[string]int {
	h.t.Helper()
	list, err := local.kube.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.uid", string(pod.UID)),
			fields.OneTermEqualSelector("reason", reason)).String(),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]int{}
	for _, ev := range list.Items {
		out[ev.InvolvedObject.FieldPath]++
	}
	return out
}

// containers is the runtime's view of the pod: the latest attempt of each container,
// with the stop mark the agent keeps for it in its state directory.
func (h *sidecarHarness) containers(pod *corev1.Pod) map[string]cri.Container {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := h.rt.PodContainers(ctx, string(pod.UID))
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]cri.Container{}
	for _, c := range list {
		if cur, ok := out[c.Name]; !ok || c.Attempt > cur.Attempt {
			if b, err := os.ReadFile(filepath.Join(h.stateDir, "sidecar-stops", string(pod.UID), c.ID)); err == nil {
				c.StopMark = string(b)
			}
			out[c.Name] = c
		}
	}
	return out
}

// stopDelay is how long after the last of mains finished the sidecar did, by the
// runtime's clock.
func stopDelay(ctrs map[string]cri.Container, sidecar string, mains ...string) time.Duration {
	var last time.Time
	for _, m := range mains {
		if f := ctrs[m].FinishedAt; f.After(last) {
			last = f
		}
	}
	return ctrs[sidecar].FinishedAt.Sub(last)
}

func statusOf(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func findContainer(list []corev1.Container, name string) *corev1.Container {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// mostStops is how many SidecarStopped events a sidecar may have: one for each of its
// containers. The kubelet reads a pod's containers one by one, so a sync that read a
// main container still running and then its native sidecar already stopped restarts
// the sidecar, and the agent stops that container too, with an Event of its own (event
// names derive from container IDs). Attempts count from 0, and c is the latest.
func mostStops(c cri.Container) int {
	return int(c.Attempt) + 1
}

// checkStopped asserts that the agent stopped each sidecar, each of its containers at
// most once, the last after the mains finished, and that it ended with 0.
func (h *sidecarHarness) checkStopped(pod *corev1.Pod, mains []string, sidecars ...string) {
	h.t.Helper()
	ctrs := h.containers(pod)
	// The agent records the event after the stop, through client-go's asynchronous
	// recorder: it may reach the API server after the Job completed.
	var events map[string]int
	eventually(h.t, 30*time.Second, func() (bool, string) {
		events = h.stopEvents(pod)
		return len(events) >= len(sidecars), fmt.Sprintf("SidecarStopped events %v, want one for each of %v", events, sidecars)
	})
	for _, sc := range sidecars {
		c := ctrs[sc]
		if c.State != cri.StateExited {
			h.t.Errorf("sidecar %s is %s, want exited", sc, c.State)
			continue
		}
		path := "spec.containers{" + sc + "}"
		if findContainer(pod.Spec.InitContainers, sc) != nil {
			path = "spec.initContainers{" + sc + "}"
		}
		if n, most := events[path], mostStops(c); n < 1 || n > most {
			h.t.Errorf("sidecar %s: %d SidecarStopped events, want 1 to %d, one at most for each of its containers (events: %v)", sc, n, most, events)
		}
		// After the last main container, never before: how soon after is a figure of the
		// machine, which TestSidecarBench (make bench-sidecar) reports.
		d := stopDelay(ctrs, sc, mains...)
		if d < 0 {
			h.t.Errorf("sidecar %s finished %v before the last main container", sc, -d)
		}
		if c.ExitCode != 0 {
			h.t.Errorf("sidecar %s exited %d, want 0 (the wrapper's)", sc, c.ExitCode)
		}
		h.t.Logf("sidecar %s stopped %v after the last main container finished", sc, d.Round(time.Millisecond))
	}
}

// TestSidecarNeverMainSucceeds: restartPolicy Never, the main container exits 0 after 3s,
// the sidecar is `sleep 3600`, which ignores SIGTERM as PID 1. The Job completes, the
// sidecar is stopped by the agent, promptly.
func TestSidecarNeverMainSucceeds(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	h.job("never", corev1.RestartPolicyNever, nil,
		[]corev1.Container{h.main("main", "sleep 3; exit 0")}, []corev1.Container{h.sidecar("proxy", "sleep", "3600")})
	if got := h.waitJob("never", 2*time.Minute); got != batchv1.JobComplete {
		t.Fatalf("job %s, want Complete\n%s", got, h.describePods("never"))
	}
	pod := h.jobPod("never")
	// The webhook made it a native sidecar run by the wrapper, its command in an
	// annotation the downward API hands back.
	proxy := findContainer(pod.Spec.InitContainers, "proxy")
	if proxy == nil || !sidecarrules.IsNativeSidecar(proxy) || proxy.Command[0] != webhook.WrapperPath {
		t.Errorf("sidecar not prepared by the webhook: %+v", proxy)
	}
	if got := pod.Annotations[annotations.SidecarCommand("proxy")]; got != `["sleep","3600"]` {
		t.Errorf("command annotation = %q", got)
	}
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Errorf("pod phase %s, want Succeeded", pod.Status.Phase)
	}
	h.checkStopped(pod, []string{"main"}, "proxy")
}

// TestSidecarExitsNonZeroOnTerm: a sidecar that exits 1 on SIGTERM, as a native sidecar
// (the default) and as a regular container (sidecar.sextant.io/native: "false", where
// only the wrapper keeps its exit code from failing the pod). Both Jobs complete.
func TestSidecarExitsNonZeroOnTerm(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	script := []string{"sh", "-c", "trap 'exit 1' TERM; while true; do sleep 0.2; done"}
	h.job("native", corev1.RestartPolicyNever, nil,
		[]corev1.Container{h.main("main", "sleep 3; exit 0")}, []corev1.Container{h.sidecar("proxy", script...)})
	h.job("regular", corev1.RestartPolicyNever, map[string]string{annotations.SidecarNative: "false"},
		[]corev1.Container{h.main("main", "sleep 3; exit 0")}, []corev1.Container{h.sidecar("proxy", script...)})
	for _, name := range []string{"native", "regular"} {
		if got := h.waitJob(name, 2*time.Minute); got != batchv1.JobComplete {
			t.Errorf("job %s: %s, want Complete\n%s", name, got, h.describePods(name))
			continue
		}
		pod := h.jobPod(name)
		inInit := findContainer(pod.Spec.InitContainers, "proxy") != nil
		if inInit != (name == "native") {
			t.Errorf("job %s: sidecar among init containers = %v", name, inInit)
		}
		h.checkStopped(pod, []string{"main"}, "proxy")
	}
}

// TestSidecarNeverMainFails: the main container exits 1, backoffLimit 0: the Job fails,
// and the sidecars are stopped all the same.
func TestSidecarNeverMainFails(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	h.job("fails", corev1.RestartPolicyNever, nil, []corev1.Container{h.main("main", "sleep 3; exit 1")},
		[]corev1.Container{h.sidecar("proxy", "sleep", "3600"), h.sidecar("logs", "sleep", "3600")})
	if got := h.waitJob("fails", 2*time.Minute); got != batchv1.JobFailed {
		t.Fatalf("job %s, want Failed", got)
	}
	pod := h.jobPod("fails")
	waitSidecarsExited(t, h, pod, "proxy", "logs")
	h.checkStopped(pod, []string{"main"}, "proxy", "logs")
	if c := h.containers(pod)["main"]; c.ExitCode != 1 {
		t.Errorf("main exited %d, want 1", c.ExitCode)
	}
}

// waitSidecarsExited waits for the runtime to report the sidecars exited: a Failed Job
// does not wait for them.
func waitSidecarsExited(t *testing.T, h *sidecarHarness, pod *corev1.Pod, names ...string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ctrs := h.containers(pod)
		for _, n := range names {
			if ctrs[n].State != cri.StateExited {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("sidecars %v of %s still running", names, pod.Name)
	}
}

// TestSidecarOnFailureRetries: restartPolicy OnFailure, the main container fails once
// and then succeeds. The sidecar keeps running across the restart (same container, no
// restart), is stopped after the success, and the Job completes. Everything is read
// once the Job is done, from what stays: the pod's restart counts and last states, the
// runtime's containers and their times, the Job's counts. Watching for the failed
// attempt while it happens could miss it: the kubelet may replace it between two looks.
func TestSidecarOnFailureRetries(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	main := h.main("main", "if [ -f /data/ran ]; then sleep 4; exit 0; fi; touch /data/ran; sleep 2; exit 1")
	main.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "onfailure", Namespace: h.ns},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](3), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{sidecarLabel: h.id}},
			Spec:       h.jobPodSpec(corev1.RestartPolicyOnFailure, []corev1.Container{main}, []corev1.Container{h.sidecar("proxy", "sleep", "3600")}),
		}},
	}
	job.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if _, err := local.kube.BatchV1().Jobs(h.ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := h.jobPod("onfailure")
	if got := h.waitJob("onfailure", 3*time.Minute); got != batchv1.JobComplete {
		t.Fatalf("job %s, want Complete\n%s", got, h.describePods("onfailure"))
	}
	done, err := local.kube.BatchV1().Jobs(h.ns).Get(context.Background(), "onfailure", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if done.Status.Succeeded != 1 || done.Status.Failed != 0 {
		t.Errorf("job: %d succeeded, %d failed pods; want the one pod, retried in place", done.Status.Succeeded, done.Status.Failed)
	}
	pod = h.pod(pod.Name)
	// The main container's first attempt failed with 1, its second succeeded.
	m := statusOf(pod, "main")
	switch {
	case m == nil:
		t.Fatalf("no status of main:\n%s", h.describePods("onfailure"))
	case m.RestartCount != 1 || m.LastTerminationState.Terminated == nil || m.LastTerminationState.Terminated.ExitCode != 1:
		t.Errorf("main: %d restarts, last state %+v; want 1 restart after an attempt that exited 1", m.RestartCount, m.LastTerminationState)
	case m.State.Terminated == nil || m.State.Terminated.ExitCode != 0:
		t.Errorf("main: state %+v, want terminated with 0", m.State)
	}
	// The sidecar ran through it: one container, never restarted, started before the
	// failed attempt ended and finished after the successful one (checkStopped).
	if p := statusOf(pod, "proxy"); p == nil || p.RestartCount != 0 {
		t.Errorf("sidecar status %+v, want no restart", p)
	}
	ctrs := h.containers(pod)
	if ctrs["main"].Attempt != 1 || ctrs["proxy"].Attempt != 0 {
		t.Errorf("main's last attempt %d (want 1), sidecar's %d (want 0, its only one)", ctrs["main"].Attempt, ctrs["proxy"].Attempt)
	}
	if failed := m.LastTerminationState.Terminated; failed != nil && !ctrs["proxy"].StartedAt.Before(failed.FinishedAt.Time) {
		t.Errorf("sidecar started %s, after main's failed attempt finished (%s)", ctrs["proxy"].StartedAt, failed.FinishedAt)
	}
	h.checkStopped(pod, []string{"main"}, "proxy")
}

// TestSidecarOnFailureUnwrappedStoppedOnce: restartPolicy OnFailure, a sidecar kept a
// regular container (sidecar.sextant.io/native: "false") that runs its image's
// entrypoint, which the webhook cannot wrap: `sh -c "sleep 3600"`, which ignores SIGTERM
// as PID 1. The agent stops
// it once; killed at the end of the grace period it exits 137 and the kubelet starts it
// again. That attempt is left running, with one SidecarNotStopped event: stopped again
// and again, its restarts would use up the Job's backoffLimit.
func TestSidecarOnFailureUnwrappedStoppedOnce(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	sidecar := h.sidecar("proxy")
	sidecar.Args = []string{"-c", "sleep 3600"} // the image's entrypoint is /bin/sh
	spec := h.jobPodSpec(corev1.RestartPolicyOnFailure, []corev1.Container{h.main("main", "sleep 2; exit 0")}, []corev1.Container{sidecar})
	spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "unwrapped", Namespace: h.ns},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](3), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{sidecarLabel: h.id},
				Annotations: map[string]string{annotations.SidecarNative: "false"}},
			Spec: spec,
		}},
	}
	if _, err := local.kube.BatchV1().Jobs(h.ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := h.jobPod("unwrapped")
	if proxy := findContainer(pod.Spec.Containers, "proxy"); proxy == nil || sidecarrules.IsWrapped(proxy) {
		t.Fatalf("sidecar %+v: want a regular container the webhook did not wrap", proxy)
	}
	// Stopped once, killed, started again by the kubelet: the SidecarNotStopped event.
	eventually(t, 2*time.Minute, func() (bool, string) {
		list, err := local.kube.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.uid", string(pod.UID)),
				fields.OneTermEqualSelector("reason", "SidecarNotStopped")).String(),
		})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 1, fmt.Sprintf("%d SidecarNotStopped events, want 1; pods:\n%s", len(list.Items), h.describePods("unwrapped"))
	})
	c := h.containers(pod)["proxy"]
	if c.Attempt < 1 || c.State != cri.StateRunning {
		t.Fatalf("proxy attempt %d is %s, want a later attempt running", c.Attempt, c.State)
	}
	// Left running: two grace periods later it still runs, stopped once in all.
	time.Sleep(5 * time.Second)
	if now := h.containers(pod)["proxy"]; now.ID != c.ID || now.State != cri.StateRunning {
		t.Errorf("proxy is %s as %s, want still running as %s", now.State, now.ID, c.ID)
	}
	if n := h.stopEvents(pod)["spec.containers{proxy}"]; n != 1 {
		t.Errorf("%d SidecarStopped events for proxy, want 1: it is stopped once", n)
	}
	j, err := local.kube.BatchV1().Jobs(h.ns).Get(context.Background(), "unwrapped", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range j.Status.Conditions {
		if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
			t.Errorf("the Job failed (%s): one restart is within its backoffLimit", cond.Message)
		}
	}
}

// TestSidecarTwoMainsTwoSidecars: both sidecars are stopped once, after the later of the
// two main containers.
func TestSidecarTwoMainsTwoSidecars(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	h.job("two", corev1.RestartPolicyNever, nil,
		[]corev1.Container{h.main("short", "sleep 2; exit 0"), h.main("long", "sleep 6; exit 0")},
		[]corev1.Container{h.sidecar("proxy", "sleep", "3600"), h.sidecar("logs", "sh", "-c", "while true; do sleep 1; done")})
	if got := h.waitJob("two", 2*time.Minute); got != batchv1.JobComplete {
		t.Fatalf("job %s, want Complete\n%s", got, h.describePods("two"))
	}
	pod := h.jobPod("two")
	h.checkStopped(pod, []string{"short", "long"}, "proxy", "logs")
	ctrs := h.containers(pod)
	if d := ctrs["proxy"].FinishedAt.Sub(ctrs["long"].FinishedAt); d < 0 {
		t.Errorf("sidecar stopped %v before the longer main container finished", -d)
	}
}

// TestSidecarAlwaysPodUntouched: a restartPolicy Always pod with a marked sidecar is left
// as written by the webhook, and the agent never stops its sidecar, even while its main
// container exits and restarts.
func TestSidecarAlwaysPodUntouched(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	spec := h.jobPodSpec(corev1.RestartPolicyAlways, []corev1.Container{h.main("main", "sleep 2; exit 0")},
		[]corev1.Container{h.sidecar("proxy", "sleep", "3600")})
	spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	pod, err := local.kube.CoreV1().Pods(h.ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "always", Labels: map[string]string{sidecarLabel: h.id}}, Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.InitContainers) != 0 || findContainer(pod.Spec.Containers, "proxy").Command[0] != "sleep" || pod.Labels[annotations.SidecarPrepared] != "" {
		t.Errorf("the webhook changed an Always pod: init %d, containers %+v", len(pod.Spec.InitContainers), pod.Spec.Containers)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		s := statusOf(h.pod("always"), "main")
		return s != nil && s.RestartCount >= 1, nil
	})
	if err != nil {
		t.Fatal("the main container never exited and restarted")
	}
	time.Sleep(3 * time.Second)
	pod = h.pod("always")
	if s := statusOf(pod, "proxy"); s == nil || s.State.Running == nil || s.RestartCount != 0 {
		t.Errorf("sidecar of an Always pod: %+v, want running since its start", s)
	}
	if ev := h.stopEvents(pod); len(ev) != 0 {
		t.Errorf("stop events on an Always pod: %v", ev)
	}
}

// TestSidecarUnmarkedJobUntouched: a Job whose sidecar has no marker is left as it is
// today: not prepared, not stopped, so the Job does not complete.
func TestSidecarUnmarkedJobUntouched(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	plain := corev1.Container{Name: "proxy", Image: busyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}
	h.job("plain", corev1.RestartPolicyNever, nil, []corev1.Container{h.main("main", "sleep 2; exit 0")}, []corev1.Container{plain})
	pod := h.jobPod("plain")
	if len(pod.Spec.InitContainers) != 0 || findContainer(pod.Spec.Containers, "proxy") == nil || pod.Labels[annotations.SidecarPrepared] != "" {
		t.Errorf("the webhook changed a pod without a marker")
	}
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		s := statusOf(h.pod(pod.Name), "main")
		return s != nil && s.State.Terminated != nil, nil
	})
	if err != nil {
		t.Fatal("the main container never finished")
	}
	time.Sleep(5 * time.Second)
	pod = h.pod(pod.Name)
	if s := statusOf(pod, "proxy"); s == nil || s.State.Running == nil {
		t.Errorf("unmarked sidecar: %+v, want still running", s)
	}
	job, err := local.kube.BatchV1().Jobs(h.ns).Get(context.Background(), "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range job.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			t.Errorf("job without a marker reached %s", c.Type)
		}
	}
	if ev := h.stopEvents(pod); len(ev) != 0 {
		t.Errorf("stop events on an unmarked pod: %v", ev)
	}
}

// TestSidecarAgentRestart: the agent is killed (SIGKILL) while a stop is due, once before
// it could act and once in the middle of a stop, and started again: each stop happens
// once. The sidecars are regular containers here (native: "false"), so that no one but
// the agent stops them (the kubelet stops native sidecars itself, if slowly), and they
// log every SIGTERM they get.
func TestSidecarAgentRestart(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	regular := map[string]string{annotations.SidecarNative: "false"}
	// 6 s to act on a SIGTERM, within the pod's 10 s grace period: a window wide enough
	// to kill the agent in the middle of the stop on a busy machine.
	sidecar := h.sidecar("proxy", "sh", "-c", "trap 'echo got TERM; sleep 6; exit 0' TERM; while true; do sleep 0.2; done")

	t.Run("before the stop", func(t *testing.T) {
		h.killAgent()
		h.job("before", corev1.RestartPolicyNever, regular, []corev1.Container{h.main("main", "sleep 2; exit 0")}, []corev1.Container{sidecar})
		pod := h.jobPod("before")
		// The main container's exit is kept by the runtime: a durable state to wait for.
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			return h.containers(pod)["main"].State == cri.StateExited, nil
		})
		if err != nil {
			t.Fatal("the main container never finished")
		}
		restarted := time.Now()
		h.startAgent()
		if got := h.waitJob("before", time.Minute); got != batchv1.JobComplete {
			t.Fatalf("job %s, want Complete", got)
		}
		pod = h.pod(pod.Name)
		h.checkStopped(pod, []string{"main"}, "proxy")
		checkTermsReceived(t, pod, "proxy", 1)
		// Nothing stopped the sidecar while no agent ran: it finished (by the runtime's
		// clock, this machine's) after the agent came back.
		if c := h.containers(pod)["proxy"]; !c.FinishedAt.After(restarted) {
			t.Errorf("the sidecar finished at %s, before the agent was started again at %s", c.FinishedAt, restarted)
		}
	})

	t.Run("during the stop", func(t *testing.T) {
		h.job("during", corev1.RestartPolicyNever, regular, []corev1.Container{h.main("main", "sleep 3; exit 0")}, []corev1.Container{sidecar})
		pod := h.jobPod("during")
		// The agent marks the container before it signals it: kill it right then.
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			return h.containers(pod)["proxy"].StopMark != "", nil
		})
		if err != nil {
			t.Fatal("the agent never began to stop the sidecar")
		}
		// The mark goes on before the signal: wait for the sidecar to log the SIGTERM, so
		// the agent dies in the middle of the stop and not between the two (then the next
		// agent would wait out the grace period before signalling it).
		eventually(t, 30*time.Second, func() (bool, string) {
			logs, err := local.kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "proxy"}).DoRaw(context.Background())
			return err == nil && strings.Contains(string(logs), "got TERM"), fmt.Sprintf("the sidecar has not logged a SIGTERM (logs %q, %v)", logs, err)
		})
		h.killAgent()
		if c := h.containers(pod)["proxy"]; c.State != cri.StateRunning {
			t.Fatalf("the sidecar is %s right after the stop began; the test needs it still stopping", c.State)
		}
		h.startAgent()
		if got := h.waitJob("during", time.Minute); got != batchv1.JobComplete {
			t.Fatalf("job %s, want Complete", got)
		}
		pod = h.pod(pod.Name)
		h.checkStopped(pod, []string{"main"}, "proxy")
		checkTermsReceived(t, pod, "proxy", 1)
		// The mark is completed once the event went out, after the stop itself.
		eventually(t, 30*time.Second, func() (bool, string) {
			c := h.containers(pod)["proxy"]
			return strings.HasSuffix(c.StopMark, ":recorded"), fmt.Sprintf("stop mark %q, want it recorded", c.StopMark)
		})
	})
}

// checkTermsReceived counts the "got TERM" lines the sidecar logged.
func checkTermsReceived(t *testing.T, pod *corev1.Pod, container string, want int) {
	t.Helper()
	logs, err := local.kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of %s: %v", container, err)
	}
	if n := strings.Count(string(logs), "got TERM"); n != want {
		t.Errorf("sidecar %s got SIGTERM %d times, want %d (logs: %q)", container, n, want, logs)
	}
}

// TestSidecarVirtualNode: a pod bound to a virtual-kubelet node, whose container
// statuses the test writes as virtual-kubelet would. While the main container runs
// nothing happens; once it has exited 0, the sidecar's image is swapped to the exit
// image and its command annotation to the exit command.
func TestSidecarVirtualNode(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	node := readyFakeNode(t, "sidecar-e2e-vk-", map[string]string{virtualnode.NodeTypeLabel: virtualnode.NodeTypeVirtual},
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("10")})
	spec := h.jobPodSpec(corev1.RestartPolicyNever, []corev1.Container{h.main("main", "sleep 3")}, []corev1.Container{h.sidecar("proxy", "sleep", "3600")})
	spec.NodeSelector = nil
	spec.NodeName = node.Name
	ctx := context.Background()
	pod, err := local.kube.CoreV1().Pods(h.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virtual", Labels: map[string]string{sidecarLabel: h.id}}, Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := annotations.SidecarCommand("proxy")
	if pod.Annotations[key] != `["sleep","3600"]` {
		t.Fatalf("the webhook did not rewrite the command into %s: %v", key, pod.Annotations)
	}
	now := metav1.Now()
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	setStatus := func(main corev1.ContainerState) {
		t.Helper()
		p := h.pod("virtual")
		p.Status.Phase = corev1.PodRunning
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{
			{Name: webhook.InstallContainer, Image: wrapperImageE2, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: now}}},
			{Name: "proxy", Image: busyboxImage, State: running, Started: ptr.To(true)},
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: busyboxImage, State: main}}
		if _, err := local.kube.CoreV1().Pods(h.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setStatus(running)
	time.Sleep(2 * time.Second)
	if img := findContainer(h.pod("virtual").Spec.InitContainers, "proxy").Image; img != busyboxImage {
		t.Fatalf("swapped to %s while the main container runs", img)
	}
	swapAt := time.Now()
	setStatus(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: metav1.Now()}})
	// The chart's exit image: its policy lets the controller's account swap to no other.
	exitImage := chartExitImage(t)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return findContainer(h.pod("virtual").Spec.InitContainers, "proxy").Image == exitImage, nil
	})
	if err != nil {
		t.Fatalf("sidecar not swapped to %s\n%s", exitImage, lastLines(h.webhook.output(), 20))
	}
	t.Logf("swapped %v after the status showed the main container done", time.Since(swapAt).Round(time.Millisecond))
	pod = h.pod("virtual")
	if got := pod.Annotations[key]; got != `["/exit0"]` {
		t.Errorf("command annotation %q, want the exit command", got)
	}
	if img := findContainer(pod.Spec.Containers, "main").Image; img != busyboxImage {
		t.Errorf("main container's image changed to %s", img)
	}
	// The downward-API env still points at the annotation, so the restarted container
	// runs the exit command.
	proxy := findContainer(pod.Spec.InitContainers, "proxy")
	var ref string
	for _, e := range proxy.Env {
		if e.Name == webhook.EnvCommand && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			ref = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if ref != "metadata.annotations['"+key+"']" {
		t.Errorf("env %s refers to %q", webhook.EnvCommand, ref)
	}
	// The controller records the event after the swap, asynchronously.
	swapped := func() (int, error) {
		evs, err := local.kube.CoreV1().Events(h.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=SidecarSwapped"})
		if err != nil {
			return 0, err
		}
		return len(evs.Items), nil
	}
	eventually(t, 30*time.Second, func() (bool, string) {
		n, err := swapped()
		return n >= 1, fmt.Sprintf("SidecarSwapped events: %d (%v), want 1", n, err)
	})
	if n, err := swapped(); n != 1 {
		t.Errorf("SidecarSwapped events: %d (%v), want exactly 1", n, err)
	}
}

// TestVirtualNodeControllerReleasesLease: the leading virtual-node controller, run as
// the chart's account, releases its lease when it gets SIGTERM (a rolling update, a
// drained node) and exits 0, so another replica takes over at its next try instead of
// after the lease runs out.
func TestVirtualNodeControllerReleasesLease(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	lease := "sextant-sidecar-controller-" + strings.TrimPrefix(testNamespace(t), "e2e-")
	allowLease(t, "sextant-virtual-node-controller", lease)
	// A selector no pod has keeps it from swapping the sidecars of tests running beside it.
	p := startProcess(t, sidecarsBinary(t), "virtual-node-controller",
		"--kubeconfig", serviceAccountKubeconfig(t, releaseNamespace, "sextant-virtual-node-controller"),
		"--exit-image", chartExitImage(t), "--pod-selector", "e2e.sextant.io/no-pod=true",
		"--leader-elect-name", lease, "--leader-elect-namespace", releaseNamespace)
	self := fmt.Sprintf("_%d", p.cmd.Process.Pid)
	eventually(t, time.Minute, func() (bool, string) {
		h, err := leaseHolder(ctx, lease)
		return err == nil && strings.HasSuffix(h, self), fmt.Sprintf("lease %s held by %q (%v), want the controller (*%s)", lease, h, err, self)
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	// Not a speed bound: a controller that does not exit hangs a rolling update.
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the controller ended with %v after SIGTERM, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-exited
		t.Fatalf("the controller still ran 30s after SIGTERM\n%s", lastLines(p.output(), 20))
	}
	if h, err := leaseHolder(ctx, lease); err != nil || h != "" {
		t.Errorf("lease %s held by %q (%v) after the controller exited, want no holder", lease, h, err)
	}
}

// TestSidecarWebhookDown: with the webhooks registered as the chart registers them
// (failure policy Ignore) and the webhook process gone, pods are still created, and
// the agent still stops the sidecar of a Job pod, which was left a regular container.
func TestSidecarWebhookDown(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	ctx := context.Background()
	ignore := admissionregistrationv1.Ignore
	mutating, err := local.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, h.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mutating.Webhooks[0].FailurePolicy = &ignore
	if _, err := local.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mutating, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	validating, err := local.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, h.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	validating.Webhooks[0].FailurePolicy = &ignore
	if _, err := local.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, validating, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = h.webhook.cmd.Process.Kill()
	_ = h.webhook.cmd.Wait()

	// The API server loads the changed configurations in its own time: wait until a pod
	// with a sidecar is admitted unprepared rather than refused.
	probe := h.jobPodSpec(corev1.RestartPolicyNever, []corev1.Container{h.main("main", "true")}, []corev1.Container{h.sidecar("proxy", "sleep", "1")})
	eventually(t, 30*time.Second, func() (bool, string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: h.ns, Labels: map[string]string{sidecarLabel: h.id}}, Spec: probe}
		out, err := local.kube.CoreV1().Pods(h.ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, fmt.Sprintf("pod creation with the webhook down: %v", err)
		}
		return out.Labels[annotations.SidecarPrepared] == "", "the pod came back prepared: the webhook still answers"
	})

	sidecar := h.sidecar("proxy", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done")
	h.job("down", corev1.RestartPolicyNever, nil, []corev1.Container{h.main("main", "sleep 3; exit 0")}, []corev1.Container{sidecar})
	if got := h.waitJob("down", 2*time.Minute); got != batchv1.JobComplete {
		t.Fatalf("job %s, want Complete\n%s", got, h.describePods("down"))
	}
	pod := h.jobPod("down")
	if pod.Labels[annotations.SidecarPrepared] != "" || len(pod.Spec.InitContainers) != 0 || findContainer(pod.Spec.Containers, "proxy") == nil {
		t.Errorf("pod prepared although the webhook was down: labels %v, init containers %d", pod.Labels, len(pod.Spec.InitContainers))
	}
	h.checkStopped(pod, []string{"main"}, "proxy")
}

// chartValidatingMatchConditions are the match conditions of the chart's validating
// webhook, so that the harness's webhook is called for what the chart's is.
func chartValidatingMatchConditions(t *testing.T) []admissionregistrationv1.MatchCondition {
	t.Helper()
	for _, obj := range charttest.List(t, charttest.Render(t, nil)) {
		if obj["kind"] != "ValidatingWebhookConfiguration" {
			continue
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Webhooks[0].MatchConditions
	}
	t.Fatal("the chart renders no ValidatingWebhookConfiguration")
	return nil
}

// TestSidecarValidatingWebhookDownUpdates: with the validating webhook failing closed
// (failure policy Fail) and its process gone, a pod update that changes no sextant.io
// annotation still goes through (the chart's match conditions keep it from the
// webhook: the Job controller's finalizer updates, labels), while one that changes a
// sextant.io annotation is refused.
func TestSidecarValidatingWebhookDownUpdates(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	ctx := context.Background()
	pods := local.kube.CoreV1().Pods(h.ns)
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: h.ns, Labels: map[string]string{sidecarLabel: h.id},
			Annotations: map[string]string{annotations.BandwidthPrefix + "ingress-required": "100M"}},
		Spec: corev1.PodSpec{SchedulerName: "sextant-e2e-nobody", Containers: []corev1.Container{h.main("main", "true")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.webhook.cmd.Process.Kill()
	_ = h.webhook.cmd.Wait()

	patch := func(body string) error {
		_, err := pods.Patch(ctx, pod.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	changeAnnotation := `{"metadata":{"annotations":{"bandwidth.sextant.io/ingress-required":"200M"}}}`
	eventually(t, 30*time.Second, func() (bool, string) {
		err := patch(changeAnnotation)
		return err != nil && strings.Contains(err.Error(), "annotations.e2e.sextant.io"),
			fmt.Sprintf("a change of a sextant.io annotation with the webhook down: %v, want the webhook's call to fail", err)
	})
	for what, body := range map[string]string{
		"a label":                           `{"metadata":{"labels":{"e2e.sextant.io/x":"y"}}}`,
		"another annotation":                `{"metadata":{"annotations":{"example.com/note":"x"}}}`,
		"a finalizer":                       `{"metadata":{"finalizers":["e2e.sextant.io/hold"]}}`,
		"a sextant.io annotation unchanged": `{"metadata":{"annotations":{"bandwidth.sextant.io/ingress-required":"100M"}}}`,
	} {
		if err := patch(body); err != nil {
			t.Errorf("an update of %s with the validating webhook down: %v, want it through", what, err)
		}
	}
	removeAnnotation := `{"metadata":{"annotations":{"bandwidth.sextant.io/ingress-required":null}}}`
	if err := patch(removeAnnotation); err == nil || !strings.Contains(err.Error(), "annotations.e2e.sextant.io") {
		t.Errorf("removing a sextant.io annotation with the webhook down: %v, want the webhook's call to fail", err)
	}
}

// TestSidecarWebhookRejectsMalformedAnnotations: the webhook refuses a pod with a
// malformed sextant annotation, naming it and its accepted form.
func TestSidecarWebhookRejectsMalformedAnnotations(t *testing.T) {
	t.Parallel()
	h := newSidecarHarness(t)
	cases := []struct{ key, value, want string }{
		{"bandwidth.sextant.io/ingress-required", "fast", "bits/s"},
		{"bandwidth.sextant.io/strategy", "cheapest", "best-fit or most-headroom"},
		{"numa.sextant.io/policy", "best-effort", "single-numa-node"},
		{"bandwidth.sextant.io/egress-requierd", "1G", "unknown annotation"},
	}
	for i, c := range cases {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i), Labels: map[string]string{sidecarLabel: h.id},
				Annotations: map[string]string{c.key: c.value}},
			Spec: h.jobPodSpec(corev1.RestartPolicyNever, []corev1.Container{h.main("main", "true")}, nil),
		}
		_, err := local.kube.CoreV1().Pods(h.ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: err %v; want a refusal naming the annotation and %q", c.key, c.value, err, c.want)
		}
	}
	good := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "good", Labels: map[string]string{sidecarLabel: h.id}, Annotations: map[string]string{
			"bandwidth.sextant.io/ingress-required": "400M", "bandwidth.sextant.io/ingress-expected": "500M", "numa.sextant.io/policy": "single-numa-node"}},
		Spec: h.jobPodSpec(corev1.RestartPolicyNever, []corev1.Container{h.main("main", "true")}, nil),
	}
	if _, err := local.kube.CoreV1().Pods(h.ns).Create(context.Background(), good, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("well-formed annotations refused: %v", err)
	}
}
