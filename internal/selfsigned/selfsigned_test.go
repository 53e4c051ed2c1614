package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestServesAVerifiableCertificateForTheName(t *testing.T) {
	certs, err := New("node-1")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv.TLS = &tls.Config{GetCertificate: certs.GetCertificate}
	srv.StartTLS()
	defer srv.Close()
	cert, _ := certs.GetCertificate(nil)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "node-1"}}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("a client trusting the certificate, for node-1: %v", err)
	}
	resp.Body.Close()
}

func TestRenewsWithAThirdLeft(t *testing.T) {
	now := time.Now()
	certs, err := newWithClock("node-1", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	first, _ := certs.GetCertificate(nil)
	now = now.Add(Validity / 2)
	if same, _ := certs.GetCertificate(nil); same != first {
		t.Error("renewed with half the validity left")
	}
	now = now.Add(Validity / 4)
	renewed, _ := certs.GetCertificate(nil)
	if renewed == first || !now.Before(renewed.Leaf.NotAfter) || now.Before(renewed.Leaf.NotBefore) {
		t.Errorf("with a quarter left: the same certificate (%v), or one not valid now (%v to %v)", renewed == first, renewed.Leaf.NotBefore, renewed.Leaf.NotAfter)
	}
}
