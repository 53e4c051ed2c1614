// Package selfcert keeps the admission webhook's serving certificate in a Secret and its
// CA in the caBundle of the webhook configurations that call it, so that the chart
// renders the same manifests every time (docs/design/0050-webhook-serving-certificate.md).
//
// Every replica runs a Manager. Sync reads the Secret; when it holds no usable CA and
// certificate for the Service's names, or the certificate is within RenewBefore of its
// end, it makes a new CA and certificate and writes them (an update conflict means
// another replica wrote first: its pair is read back and used). It then serves that
// certificate and sets the caBundle of every webhook of the named configurations whose
// Service is the webhook's. A renewal keeps the previous CA in the bundle beside the new
// one while it is valid, so replicas that still serve the old certificate until their
// next Sync are trusted meanwhile.
package selfcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The Secret's keys.
const (
	KeyCA   = "ca.crt"
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
)

// Config names what the Manager keeps.
type Config struct {
	// Namespace of the Secret and the Service.
	Namespace string
	// Secret holds the pair; it must exist (the chart renders it without data).
	Secret string
	// Service is the webhook's Service; the certificate is for its DNS names.
	Service string
	// MutatingWebhooks and ValidatingWebhooks are the configurations whose webhooks
	// that call Service get the CA.
	MutatingWebhooks, ValidatingWebhooks []string
	// Validity of a new CA and certificate; RenewBefore: a certificate with less
	// left than this is replaced.
	Validity, RenewBefore time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Manager serves the current certificate and keeps Secret and caBundles in step.
type Manager struct {
	cfg  Config
	kube kubernetes.Interface
	log  logr.Logger
	cert atomic.Pointer[tls.Certificate]
}

// New checks cfg and returns a Manager; call Sync before serving.
func New(cfg Config, kube kubernetes.Interface, log logr.Logger) (*Manager, error) {
	switch {
	case cfg.Namespace == "" || cfg.Secret == "" || cfg.Service == "":
		return nil, errors.New("selfcert: namespace, secret and service are required")
	case cfg.Validity <= 0 || cfg.RenewBefore <= 0 || cfg.RenewBefore >= cfg.Validity:
		return nil, fmt.Errorf("selfcert: want 0 < renew-before (%v) < validity (%v)", cfg.RenewBefore, cfg.Validity)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{cfg: cfg, kube: kube, log: log}, nil
}

// DNSNames are the names the certificate is for: the Service's, as the API server and
// clients in the cluster address it.
func (m *Manager) DNSNames() []string {
	svc, ns := m.cfg.Service, m.cfg.Namespace
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"}
}

// GetCertificate is tls.Config.GetCertificate: the certificate of the last Sync.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("selfcert: no certificate yet")
}

// Run calls Sync every interval until ctx ends, logging failures; the certificate of
// the last successful one keeps being served.
func (m *Manager) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := m.Sync(ctx); err != nil && ctx.Err() == nil {
				m.log.Error(err, "webhook certificate sync failed")
			}
		}
	}
}

// Sync makes the Secret hold a usable pair (renewing it when due), serves it, and puts
// its CA into the webhook configurations.
func (m *Manager) Sync(ctx context.Context) error {
	ca, pair, err := m.ensureSecret(ctx)
	if err != nil {
		return err
	}
	m.cert.Store(pair)
	return m.injectCABundle(ctx, ca)
}

func (m *Manager) ensureSecret(ctx context.Context) ([]byte, *tls.Certificate, error) {
	secrets := m.kube.CoreV1().Secrets(m.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		s, err := secrets.Get(ctx, m.cfg.Secret, metav1.GetOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("get secret %s/%s: %w", m.cfg.Namespace, m.cfg.Secret, err)
		}
		pair, why := m.usable(s.Data)
		if why == "" {
			return s.Data[KeyCA], pair, nil
		}
		caPEM, certPEM, keyPEM, err := m.issue(s.Data[KeyCA])
		if err != nil {
			return nil, nil, err
		}
		s = s.DeepCopy()
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[KeyCA], s.Data[KeyCert], s.Data[KeyKey] = caPEM, certPEM, keyPEM
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) && attempt < 3 {
				continue // another replica wrote first: use its pair if it is usable
			}
			return nil, nil, fmt.Errorf("write the webhook certificate into secret %s/%s: %w", m.cfg.Namespace, m.cfg.Secret, err)
		}
		m.log.Info("webhook certificate issued", "secret", m.cfg.Secret, "reason", why, "validity", m.cfg.Validity.String())
		pair, why = m.usable(s.Data)
		if why != "" {
			return nil, nil, fmt.Errorf("the webhook certificate just issued is not usable: %s", why)
		}
		return caPEM, pair, nil
	}
}

// usable returns the serving pair of data, or why there is none to use: missing,
// unparsable, not for the Service's names, not signed by a CA of the bundle, or due
// for renewal.
func (m *Manager) usable(data map[string][]byte) (*tls.Certificate, string) {
	if len(data[KeyCert]) == 0 || len(data[KeyKey]) == 0 || len(data[KeyCA]) == 0 {
		return nil, "none yet"
	}
	pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return nil, "unparsable: " + err.Error()
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, "unparsable: " + err.Error()
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data[KeyCA]) {
		return nil, "no CA"
	}
	now := m.cfg.Now()
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: m.DNSNames()[2], Roots: roots, CurrentTime: now}); err != nil {
		return nil, "does not verify: " + err.Error()
	}
	if leaf.NotAfter.Sub(now) < m.cfg.RenewBefore {
		return nil, "due for renewal, ends " + leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	pair.Leaf = leaf
	return &pair, ""
}

// issue makes a CA and a certificate for the Service signed by it. The bundle is the
// new CA followed by the previous one (oldCA's first certificate) while that is valid.
func (m *Manager) issue(oldCA []byte) (caPEM, certPEM, keyPEM []byte, err error) {
	now := m.cfg.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate the CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "sextant-webhook-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(m.cfg.Validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("make the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate the serving key: %w", err)
	}
	names := m.DNSNames()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: names[2]}, DNSNames: names,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(m.cfg.Validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("make the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if block, _ := pem.Decode(oldCA); block != nil && block.Type == "CERTIFICATE" {
		if old, err := x509.ParseCertificate(block.Bytes); err == nil && now.Before(old.NotAfter) {
			caPEM = append(caPEM, pem.EncodeToMemory(block)...)
		}
	}
	return caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// injectCABundle sets ca as the caBundle of the configurations' webhooks that call the
// Service, updating only configurations where one differs.
func (m *Manager) injectCABundle(ctx context.Context, ca []byte) error {
	mutating := m.kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	validating := m.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	return errors.Join(
		setCABundle(m, ca, "mutatingwebhookconfiguration", m.cfg.MutatingWebhooks,
			func(name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
				return mutating.Get(ctx, name, metav1.GetOptions{})
			},
			func(c *admissionregistrationv1.MutatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
				out := make([]*admissionregistrationv1.WebhookClientConfig, len(c.Webhooks))
				for i := range c.Webhooks {
					out[i] = &c.Webhooks[i].ClientConfig
				}
				return out
			},
			func(c *admissionregistrationv1.MutatingWebhookConfiguration) error {
				_, err := mutating.Update(ctx, c, metav1.UpdateOptions{})
				return err
			}),
		setCABundle(m, ca, "validatingwebhookconfiguration", m.cfg.ValidatingWebhooks,
			func(name string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
				return validating.Get(ctx, name, metav1.GetOptions{})
			},
			func(c *admissionregistrationv1.ValidatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
				out := make([]*admissionregistrationv1.WebhookClientConfig, len(c.Webhooks))
				for i := range c.Webhooks {
					out[i] = &c.Webhooks[i].ClientConfig
				}
				return out
			},
			func(c *admissionregistrationv1.ValidatingWebhookConfiguration) error {
				_, err := validating.Update(ctx, c, metav1.UpdateOptions{})
				return err
			}),
	)
}

// setCABundle gets each named configuration of kind, sets ca on the client configs of
// its webhooks that call the Service, and updates the configuration where one differed.
func setCABundle[C any](m *Manager, ca []byte, kind string, names []string,
	get func(name string) (C, error), clientConfigs func(C) []*admissionregistrationv1.WebhookClientConfig, update func(C) error) error {
	var errs []error
	for _, name := range names {
		c, err := get(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("get %s %s: %w", kind, name, err))
			continue
		}
		changed := false
		for _, cc := range clientConfigs(c) {
			if svc := cc.Service; svc != nil && svc.Namespace == m.cfg.Namespace && svc.Name == m.cfg.Service && !bytes.Equal(cc.CABundle, ca) {
				cc.CABundle, changed = ca, true
			}
		}
		if !changed {
			continue
		}
		if err := update(c); err != nil {
			errs = append(errs, fmt.Errorf("set the caBundle of %s %s: %w", kind, name, err))
			continue
		}
		m.log.Info("caBundle set", kind, name)
	}
	return errors.Join(errs...)
}
