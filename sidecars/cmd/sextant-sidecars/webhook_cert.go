package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"sextant.io/sextant/internal/flagcheck"
	"sextant.io/sextant/internal/kubeclient"
	"sextant.io/sextant/internal/version"
	"sextant.io/sextant/sidecars/webhook"
	"sextant.io/sextant/sidecars/webhook/selfcert"
)

// selfCertOptions are the flags of the webhook's own certificate management
// (package selfcert): with --cert-secret the webhook keeps its serving certificate in
// that Secret and its CA in the webhook configurations, instead of reading
// --tls-cert-file.
type selfCertOptions struct {
	secret, namespace, service string
	mutating, validating       []string
	validity                   time.Duration
	resync                     time.Duration
}

func (o *selfCertOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.secret, "cert-secret", "", "keep the serving certificate in this Secret (made by the webhook when it holds none, renewed when a third of its validity is left) and its CA in the caBundle of the webhook configurations; empty: serve --tls-cert-file")
	f.StringVar(&o.namespace, "cert-namespace", os.Getenv("POD_NAMESPACE"), "namespace of --cert-secret and --cert-service (default $POD_NAMESPACE)")
	f.StringVar(&o.service, "cert-service", "sextant-webhook", "the webhook's Service: the certificate is for its DNS names, and webhooks calling it get the CA")
	f.StringSliceVar(&o.mutating, "cert-mutating-webhook-configurations", []string{"sextant-sidecar"}, "MutatingWebhookConfigurations whose webhooks calling --cert-service get the CA")
	f.StringSliceVar(&o.validating, "cert-validating-webhook-configurations", []string{"sextant-annotations"}, "ValidatingWebhookConfigurations whose webhooks calling --cert-service get the CA")
	f.DurationVar(&o.validity, "cert-validity", 365*24*time.Hour, "validity of a CA and certificate the webhook makes")
	f.DurationVar(&o.resync, "cert-resync", time.Minute, "how often the Secret and the caBundles are checked again (another replica's renewal, a caBundle an upgrade dropped)")
}

// validate checks the --cert-* flags, which apply with --cert-secret, before anything
// starts.
func (o selfCertOptions) validate() error {
	if o.secret == "" {
		return nil
	}
	if err := flagcheck.Name("--cert-secret", o.secret, "a Secret name", validation.IsDNS1123Subdomain); err != nil {
		return err
	}
	if o.namespace == "" {
		return fmt.Errorf("--cert-secret %s: --cert-namespace (or $POD_NAMESPACE) is required", o.secret)
	}
	if err := flagcheck.Name("--cert-namespace", o.namespace, "a namespace", validation.IsDNS1123Label); err != nil {
		return err
	}
	if err := flagcheck.Name("--cert-service", o.service, "a Service name", validation.IsDNS1035Label); err != nil {
		return err
	}
	for _, c := range o.mutating {
		if err := flagcheck.Name("--cert-mutating-webhook-configurations", c, "a MutatingWebhookConfiguration name", validation.IsDNS1123Subdomain); err != nil {
			return err
		}
	}
	for _, c := range o.validating {
		if err := flagcheck.Name("--cert-validating-webhook-configurations", c, "a ValidatingWebhookConfiguration name", validation.IsDNS1123Subdomain); err != nil {
			return err
		}
	}
	if err := flagcheck.Positive("--cert-resync", o.resync, "1m"); err != nil {
		return err
	}
	if err := flagcheck.Positive("--cert-validity", o.validity, "8760h"); err != nil {
		return err
	}
	// Renewed when a third of it is left, which a check every --cert-resync must see.
	if o.validity/3 <= o.resync {
		return fmt.Errorf("--cert-validity %v: want more than 3 x --cert-resync (%v), as the certificate is renewed when a third of its validity is left; such as 8760h", o.validity, o.resync)
	}
	return nil
}

// servingCertificate returns the webhook's certificate source: the files, or, with
// --cert-secret, a selfcert.Manager once its first Sync succeeded (retried until ctx
// ends: the webhook is not ready before it has a certificate), which wg then keeps in
// step.
func (o webhookOptions) servingCertificate(ctx context.Context, wg *sync.WaitGroup, log logr.Logger) (webhook.GetCertificate, error) {
	if o.cert.secret == "" {
		get, err := webhook.FileCertificate(o.certFile, o.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert-file %q, --tls-key-file %q: %w; want a PEM certificate and its PEM key (or --cert-secret, for a certificate the webhook makes itself)", o.certFile, o.keyFile, err)
		}
		return get, nil
	}
	if err := o.cert.validate(); err != nil {
		return nil, err
	}
	cfg, err := kubeclient.Config(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "sextant-webhook/" + version.Version
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	m, err := selfcert.New(selfcert.Config{
		Namespace: o.cert.namespace, Secret: o.cert.secret, Service: o.cert.service,
		MutatingWebhooks: o.cert.mutating, ValidatingWebhooks: o.cert.validating,
		Validity: o.cert.validity, RenewBefore: o.cert.validity / 3,
	}, kube, log.WithName("webhook-certificate"))
	if err != nil {
		return nil, fmt.Errorf("webhook certificate: %w", err)
	}
	for {
		err := m.Sync(ctx)
		if err == nil {
			break
		}
		log.Error(err, "no serving certificate yet", "secret", o.cert.secret)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no serving certificate: %w", err)
		case <-time.After(5 * time.Second):
		}
	}
	wg.Go(func() { m.Run(ctx, o.cert.resync) })
	return m.GetCertificate, nil
}
