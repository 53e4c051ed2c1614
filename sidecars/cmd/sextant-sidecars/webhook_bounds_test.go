package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"

	"sextant.io/sextant/sidecars/webhook"
)

// patience is how long a test waits for what must come about: far longer than the
// timeouts it sets, so a busy machine does not fail it.
const patience = 30 * time.Second

// testCertificateFiles writes a serving certificate and key for 127.0.0.1 (httptest's)
// as PEM files and returns their paths.
func testCertificateFiles(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	srv.Close()
	cert := srv.TLS.Certificates[0]
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startWebhook runs the webhook command with args until the test ends and returns its
// address once it answers.
func startWebhook(t *testing.T, args ...string) string {
	t.Helper()
	certFile, keyFile := testCertificateFiles(t)
	addr := freeAddr(t)
	cmd := newSidecarWebhookCommand()
	cmd.SetArgs(append([]string{"--wrapper-image", "w", "--virtual-nodes=false", "--bandwidth-quota=false", "--metrics-addr", "",
		"--listen-addr", addr, "--tls-cert-file", certFile, "--tls-key-file", keyFile}, args...))
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	// Each run of the command applies the logging flags, the same each time.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	ctx, cancel := context.WithCancel(context.Background())
	var stopErr error
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stopErr = cmd.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	client := tlsClient()
	deadline := time.Now().Add(patience)
	for {
		resp, err := client.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return addr
		}
		select {
		case <-stopped:
			t.Fatalf("the webhook command stopped: %v", stopErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook command does not answer on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tlsClient() *http.Client {
	return &http.Client{Timeout: patience, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

// slowPost keeps a review open until the test ends: it sends headers declaring size
// bytes, then the body a byte at a time, and starts again on a new connection when the
// server refuses it (while another request held the slot it would have taken).
func slowPost(t *testing.T, addr string, size int) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	go func() {
		defer close(done)
		for {
			c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				return
			}
			_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", webhook.PathValidate, size)
			for err == nil {
				select {
				case <-stop:
					c.Close()
					return
				case <-time.After(100 * time.Millisecond):
				}
				_, err = c.Write([]byte(" "))
			}
			c.Close()
		}
	}()
}

func post(t *testing.T, client *http.Client, url string, body io.Reader, length int64) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, body)
	req.ContentLength = length
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// The webhook's server refuses a review over --max-body-bytes with 413, declared or
// not; with --max-inflight reviews held open by slow clients, the next gets 429 while
// the kubelet's probe still answers; a client whose headers never end is cut off.
func TestSidecarWebhookServerIsBounded(t *testing.T) {
	addr := startWebhook(t, "--max-inflight=2", "--max-body-bytes=65536", "--read-header-timeout=1s",
		"--read-timeout=1m", "--write-timeout=1m")
	client := tlsClient()
	url := "https://" + addr + webhook.PathValidate
	big := bytes.Repeat([]byte(" "), 100000)
	if code := post(t, client, url, bytes.NewReader(big), int64(len(big))); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a review of 100000 bytes, declared: HTTP %d, want 413", code)
	}
	if code := post(t, client, url, io.MultiReader(bytes.NewReader(big)), -1); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a review of 100000 bytes, chunked: HTTP %d, want 413", code)
	}
	if code := post(t, client, url, strings.NewReader("{"), 1); code != http.StatusBadRequest {
		t.Errorf("a malformed review within the limits: HTTP %d, want 400", code)
	}

	// Two clients send their reviews a byte at a time, holding both slots for the
	// read timeout (a minute) once they have them: from then a third review is
	// refused, not queued.
	slowPost(t, addr, 1000)
	slowPost(t, addr, 1000)
	deadline := time.Now().Add(patience)
	for code := 0; code != http.StatusTooManyRequests; time.Sleep(50 * time.Millisecond) {
		if code = post(t, client, url, strings.NewReader("{"), 1); code != http.StatusBadRequest && code != http.StatusTooManyRequests {
			t.Fatalf("a review beside two slow ones: HTTP %d, want 400 (served) or 429 (refused)", code)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a review beside two slow ones was still served after %v, want 429", patience)
		}
	}
	resp, err := client.Get("https://" + addr + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz with the reviews' slots full: %v %v, want 200", resp, err)
	}

	// A slow-loris client: headers a byte at a time, never ending.
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := c.Write([]byte("a")); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	got, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(string(got), " 200 ") {
		t.Errorf("a client whose headers never end: %q, %v; want the connection closed", got, err)
	}
}
