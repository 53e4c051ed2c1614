//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWebhookServesItsOwnCertificate: with the chart's builtin TLS, the webhook writes
// its CA and certificate into the Secret the chart rendered empty and the CA into both
// webhook configurations, whose rendered form has none, and the API server then calls
// it over TLS: a pod with a malformed sextant annotation is refused by the webhook
// (failure policy Ignore would let it in were the call to fail).
func TestWebhookServesItsOwnCertificate(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	var ca []byte
	eventually(t, 2*time.Minute, func() (bool, string) {
		s, err := local.kube.CoreV1().Secrets(releaseNamespace).Get(ctx, "sextant-webhook-cert", metav1.GetOptions{})
		if err != nil {
			return false, fmt.Sprintf("the webhook's Secret: %v", err)
		}
		ca = s.Data["ca.crt"]
		if len(ca) == 0 || len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 {
			return false, "the webhook has not written its certificate into sextant-webhook-cert"
		}
		m, err := local.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "sextant-sidecar", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		v, err := local.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "sextant-annotations", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if !bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, ca) || !bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, ca) {
			return false, "the webhook configurations' caBundle is not the Secret's CA"
		}
		return true, ""
	})
	ns := testNamespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "malformed", Namespace: ns,
			Annotations: map[string]string{"bandwidth.sextant.io/ingress-required": "lots"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sextant.local/busybox:dev", Command: []string{"true"}}}},
	}
	_, err := local.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "annotations.sextant.io") || !strings.Contains(err.Error(), "bandwidth.sextant.io/ingress-required") {
		t.Fatalf("a pod with a malformed bandwidth annotation: %v; want the webhook annotations.sextant.io to refuse it", err)
	}
}

// TestChartHelmTest: `helm test` of the release passes on the local cluster: the real
// node's agent reports and the ranker binds the check's pod (the check's failures are
// TestCheck's, in ranker/cmd/sextant-ranker).
func TestChartHelmTest(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	helmTest := func() ([]byte, error) {
		cmd := exec.Command("go", "tool", "helm", "test", "sextant", "--namespace", releaseNamespace,
			"--kubeconfig", os.Getenv("KUBECONFIG"), "--timeout", "4m", "--logs")
		cmd.Dir = repoRoot(t)
		return cmd.CombinedOutput()
	}
	if out, err := helmTest(); err != nil {
		t.Fatalf("helm test: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "the ranker placed pod") {
		t.Errorf("helm test passed without the check's own report:\n%s", out)
	}
}
