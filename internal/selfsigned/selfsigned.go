// Package selfsigned serves TLS with a certificate made in memory, as kube-scheduler's
// and controller-runtime's secure metrics do when given none: the traffic is encrypted,
// a client cannot verify whom it talks to (scrapers skip verification), and nothing is
// written to disk. A new certificate is made before the current one runs out, so a
// process that runs for years keeps serving a valid one.
package selfsigned

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// Validity is how long each certificate is valid.
const Validity = 365 * 24 * time.Hour

// Certificates serves a self-signed certificate for a name, renewing it with a third
// of its validity left.
type Certificates struct {
	name string
	now  func() time.Time

	mu   sync.Mutex
	cert *tls.Certificate
}

// New makes the first certificate for name (its subject and DNS name).
func New(name string) (*Certificates, error) {
	return newWithClock(name, time.Now)
}

func newWithClock(name string, now func() time.Time) (*Certificates, error) {
	c := &Certificates{name: name, now: now}
	if _, err := c.GetCertificate(nil); err != nil {
		return nil, err
	}
	return c, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (c *Certificates) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.cert != nil && now.Before(c.cert.Leaf.NotAfter.Add(-Validity/3)) {
		return c.cert, nil
	}
	cert, err := issue(c.name, now)
	if err != nil {
		if c.cert != nil {
			return c.cert, nil // still valid for a while; the next handshake tries again
		}
		return nil, err
	}
	c.cert = cert
	return cert, nil
}

func issue(name string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate a serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("generate a serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(Validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make a self-signed serving certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
