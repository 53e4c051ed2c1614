package selfcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const ns = "sextant-system"

func fixture() (*fake.Clientset, Config) {
	ours := &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "sextant-webhook"}
	other := &admissionregistrationv1.ServiceReference{Namespace: "elsewhere", Name: "other"}
	kube := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sextant-webhook-cert"}, Type: corev1.SecretTypeOpaque},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "sextant-sidecar"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{
				{Name: "sidecar.sextant.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: ours}},
				{Name: "someone.else", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: other, CABundle: []byte("theirs")}},
			}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "sextant-annotations"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{
				{Name: "annotations.sextant.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: ours}},
			}},
	)
	return kube, Config{Namespace: ns, Secret: "sextant-webhook-cert", Service: "sextant-webhook",
		MutatingWebhooks: []string{"sextant-sidecar"}, ValidatingWebhooks: []string{"sextant-annotations"},
		Validity: 365 * 24 * time.Hour, RenewBefore: 120 * 24 * time.Hour}
}

func newManager(t *testing.T, kube *fake.Clientset, cfg Config) *Manager {
	t.Helper()
	m, err := New(cfg, kube, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writes(kube *fake.Clientset) int {
	n := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "update" || a.GetVerb() == "create" || a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

// bundles returns the caBundles of the three webhooks: ours (mutating), someone else's
// (mutating), ours (validating).
func bundles(t *testing.T, kube *fake.Clientset) [3][]byte {
	t.Helper()
	ctx := context.Background()
	mc, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "sextant-sidecar", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vc, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "sextant-annotations", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return [3][]byte{mc.Webhooks[0].ClientConfig.CABundle, mc.Webhooks[1].ClientConfig.CABundle, vc.Webhooks[0].ClientConfig.CABundle}
}

// A client that trusts the caBundle the Manager injected completes a TLS handshake with
// a server serving GetCertificate, under the Service's DNS name.
func handshake(t *testing.T, m *Manager, bundle []byte, now time.Time) error {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{GetCertificate: m.GetCertificate}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatal("the caBundle holds no certificate")
	}
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "sextant-webhook." + ns + ".svc", Time: func() time.Time { return now }})
	if err != nil {
		return err
	}
	return conn.Close()
}

func TestSyncIssuesAndInjects(t *testing.T) {
	kube, cfg := fixture()
	m := newManager(t, kube, cfg)
	if _, err := m.GetCertificate(nil); err == nil {
		t.Error("a certificate before the first Sync")
	}
	ctx := context.Background()
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, cfg.Secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := bundles(t, kube)
	if !bytes.Equal(b[0], s.Data[KeyCA]) || !bytes.Equal(b[2], s.Data[KeyCA]) {
		t.Error("our webhooks' caBundle is not the Secret's CA")
	}
	if string(b[1]) != "theirs" {
		t.Errorf("another service's webhook got caBundle %q", b[1])
	}
	if err := handshake(t, m, b[0], time.Now()); err != nil {
		t.Errorf("TLS with the injected caBundle: %v", err)
	}
	// A second replica, or the next round, reads the same pair and writes nothing.
	before := writes(kube)
	m2 := newManager(t, kube, cfg)
	if err := m2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := writes(kube) - before; n != 0 {
		t.Errorf("a Sync with a usable pair wrote %d times", n)
	}
	c1, _ := m.GetCertificate(nil)
	c2, _ := m2.GetCertificate(nil)
	if !bytes.Equal(c1.Certificate[0], c2.Certificate[0]) {
		t.Error("two replicas serve different certificates")
	}
	// The chart's upgrade of an older release dropped the caBundle: the next Sync puts
	// it back.
	mc, _ := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "sextant-sidecar", metav1.GetOptions{})
	mc.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if b := bundles(t, kube); !bytes.Equal(b[0], s.Data[KeyCA]) {
		t.Error("the dropped caBundle was not restored")
	}
}

// Near its end the pair is replaced; the bundle holds the new CA and the old one, so a
// replica still serving the old certificate stays trusted, and the new one is trusted.
func TestSyncRenews(t *testing.T) {
	kube, cfg := fixture()
	now := time.Now()
	cfg.Now = func() time.Time { return now }
	m := newManager(t, kube, cfg)
	ctx := context.Background()
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	old, _ := m.GetCertificate(nil)
	stale := newManager(t, kube, cfg)
	if err := stale.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	now = now.Add(cfg.Validity - cfg.RenewBefore + time.Hour) // due, not expired
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	renewed, _ := m.GetCertificate(nil)
	if bytes.Equal(old.Certificate[0], renewed.Certificate[0]) {
		t.Fatal("a certificate within RenewBefore of its end was not renewed")
	}
	b := bundles(t, kube)
	var n int
	for rest := b[0]; ; n++ {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
	}
	if n != 2 {
		t.Errorf("the bundle after a renewal holds %d CAs, want the new and the old", n)
	}
	if err := handshake(t, m, b[0], now); err != nil {
		t.Errorf("the renewed certificate: %v", err)
	}
	if err := handshake(t, stale, b[0], now); err != nil {
		t.Errorf("a replica still serving the old certificate: %v", err)
	}
}

// Two replicas issuing at once: the one whose update conflicts takes the other's pair.
func TestSyncConflictTakesTheWinnersPair(t *testing.T) {
	ctx := context.Background()
	// The winner's pair, issued against a cluster of its own.
	elsewhere, cfg := fixture()
	winner := newManager(t, elsewhere, cfg)
	if err := winner.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	won, err := elsewhere.CoreV1().Secrets(ns).Get(ctx, cfg.Secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kube, _ := fixture()
	conflicted := false
	kube.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicted {
			return false, nil, nil
		}
		conflicted = true
		// The winner writes between the loser's read and its update. (Reactors run
		// under the fake's lock: write through its tracker.)
		if err := kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("secrets"), won.DeepCopy(), ns); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, cfg.Secret, nil)
	})
	loser := newManager(t, kube, cfg)
	if err := loser.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	w, _ := winner.GetCertificate(nil)
	l, _ := loser.GetCertificate(nil)
	if !conflicted || !bytes.Equal(w.Certificate[0], l.Certificate[0]) {
		t.Errorf("after a conflict the replicas serve different certificates (conflicted %v)", conflicted)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	kube, cfg := fixture()
	cfg.RenewBefore = cfg.Validity
	if _, err := New(cfg, kube, logr.Discard()); err == nil {
		t.Error("renew-before equal to the validity accepted")
	}
	_, cfg = fixture()
	cfg.Secret = ""
	if _, err := New(cfg, kube, logr.Discard()); err == nil {
		t.Error("no secret accepted")
	}
}
