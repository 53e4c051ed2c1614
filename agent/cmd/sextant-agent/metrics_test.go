package main

import (
	"compress/gzip"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"sextant.io/sextant/internal/liveness"
)

// reviewingAPIServer is a fake API server for the metrics server's reviews: the token
// "reader" belongs to a user allowed to get /metrics, "tenant" to one who is not.
func reviewingAPIServer() *fake.Clientset {
	kube := fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if tr.Spec.Token == "reader" || tr.Spec.Token == "tenant" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: tr.Spec.Token}}
		}
		return true, tr, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		sar.Status.Allowed = sar.Spec.User == "reader" && *sar.Spec.NonResourceAttributes == authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}
		return true, sar, nil
	})
	return kube
}

// gathered counts how often the registry was gathered, and can hold each gathering
// until released.
type gathered struct {
	n       atomic.Int64
	hold    chan struct{} // nil: do not hold
	entered chan struct{}
}

func (g *gathered) Describe(chan<- *prometheus.Desc) {}

func (g *gathered) Collect(ch chan<- prometheus.Metric) {
	g.n.Add(1)
	if g.hold != nil {
		g.entered <- struct{}{}
		<-g.hold
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("sextant_test_gathered", "test", nil, nil), prometheus.GaugeValue, 1)
}

// startMetricsServer serves the agent's metrics server on a loopback port with TLS and
// returns its base URL and a client that skips verifying the self-signed certificate.
func startMetricsServer(t *testing.T, g *gathered, maxInFlight int) (string, *http.Client) {
	t.Helper()
	o := parseRun(t, "--node-name", "n1", fmt.Sprintf("--metrics-max-inflight=%d", maxInFlight))
	reg := prometheus.NewRegistry()
	reg.MustRegister(g)
	srv, err := o.metricsServer(reviewingAPIServer(), reg, liveness.NewChecker(nil), func() bool { return true }, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableCompression: true}}
	return "https://" + ln.Addr().String(), client
}

func get(t *testing.T, client *http.Client, url, token string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		if body, err = gzip.NewReader(resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := io.ReadAll(body)
	return resp, string(b)
}

// Only a token whose user may get /metrics is answered with metrics; a caller without
// one is refused before anything is gathered. The probes' endpoints answer anyone.
func TestMetricsNeedCredentials(t *testing.T) {
	g := &gathered{}
	base, client := startMetricsServer(t, g, 8)
	for _, c := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized}, {"an unknown token", "made-up", http.StatusUnauthorized}, {"a tenant's token", "tenant", http.StatusForbidden}} {
		if resp, body := get(t, client, base+"/metrics", c.token, "Accept-Encoding", "gzip"); resp.StatusCode != c.want {
			t.Errorf("/metrics with %s: HTTP %d, want %d: %s", c.who, resp.StatusCode, c.want, body)
		}
	}
	if n := g.n.Load(); n != 0 {
		t.Errorf("refused scrapes gathered the metrics %d times, want 0", n)
	}
	resp, body := get(t, client, base+"/metrics", "reader", "Accept-Encoding", "gzip")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(body, "sextant_test_gathered 1") {
		t.Errorf("/metrics with the reader's token: HTTP %d, %q encoded: %s", resp.StatusCode, resp.Header.Get("Content-Encoding"), body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, body := get(t, client, base+path, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("%s without a token: HTTP %d, want 200: %s", path, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, client, strings.Replace(base, "https://", "http://", 1)+"/metrics", ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP: HTTP %d, want net/http's 400 for HTTP on a TLS port", resp.StatusCode)
	}
}

// Scrapes held up (here: gathering that does not end) take their slots, and no more:
// the next scrape gets 429 at once, while the kubelet's probes still answer.
func TestMetricsInFlightLimitLeavesProbesAlone(t *testing.T) {
	g := &gathered{hold: make(chan struct{}), entered: make(chan struct{})}
	base, client := startMetricsServer(t, g, 2)
	done := make(chan int, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer reader")
			resp, err := client.Do(req)
			if err != nil {
				done <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for i := range 2 {
		select {
		case <-g.entered:
		case <-time.After(time.Minute):
			t.Fatalf("%d of 2 scrapes reached the registry", i)
		}
	}
	if resp, _ := get(t, client, base+"/metrics", "reader"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a third scrape with 2 in flight: HTTP %d, want 429", resp.StatusCode)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, _ := get(t, client, base+path, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("%s with the scrapes' slots full: HTTP %d, want 200", path, resp.StatusCode)
		}
	}
	close(g.hold)
	for range 2 {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a scrape within the limit: HTTP %d", code)
		}
	}
}
