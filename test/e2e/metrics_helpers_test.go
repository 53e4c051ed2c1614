//go:build e2e

package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// selfSignedClient talks to sextant's HTTPS endpoints whose certificates are made in
// memory (the agent's, the ranker's secure port), skipping verification as the chart's
// ServiceMonitors do.
var selfSignedClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// agentGet GETs path from the agent serving on addr (host:port), over HTTPS, with the
// bearer token ("": none), and returns the status and body.
func agentGet(addr, path, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := selfSignedClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// agentMetrics is the agent's /metrics at addr, read with token (of an account bound to
// sextant-metrics-reader); it fails the test on anything but 200.
func agentMetrics(t *testing.T, addr, token string) string {
	t.Helper()
	code, body, err := agentGet(addr, "/metrics", token)
	if err != nil || code != http.StatusOK {
		t.Fatalf("scrape the agent at %s: HTTP %d, %v: %s", addr, code, err, body)
	}
	return body
}

// metricsReader is a token of a new account in a namespace of its own, bound to the
// chart's ClusterRole sextant-metrics-reader, once its binding is in force at the agent
// at addr.
func metricsReader(t *testing.T, addr string) string {
	t.Helper()
	tok := metricsReaderToken(t, testNamespace(t), "metrics-reader")
	// The API server's authorizer sees the new binding within moments; the agent keeps a
	// refusal for --metrics-auth-cache-ttl (10 s).
	eventually(t, time.Minute, func() (bool, string) {
		code, body, err := agentGet(addr, "/metrics", tok)
		return code == http.StatusOK, fmt.Sprintf("the agent's /metrics with a sextant-metrics-reader token: HTTP %d, %v: %.200s", code, err, body)
	})
	return tok
}
