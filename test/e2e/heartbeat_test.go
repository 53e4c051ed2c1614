//go:build e2e

package e2e

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	sextantv1 "sextant.io/sextant/api/v1alpha1"
)

// apiRequest is one request a process made to the API server through a countingProxy.
type apiRequest struct {
	at     time.Time
	method string
	path   string
	query  string
	code   int
}

func (r apiRequest) String() string {
	return fmt.Sprintf("%s %s %s?%s → %d", r.at.Format("15:04:05.000"), r.method, r.path, r.query, r.code)
}

// countingProxy stands between one process and the real API server and records every
// request it makes, so a test can count them by verb and resource. The process keeps its
// own credentials: the proxy forwards its bearer token and adds none.
type countingProxy struct {
	mu   sync.Mutex
	reqs []apiRequest
	srv  *httptest.Server
}

func newCountingProxy(t *testing.T) *countingProxy {
	t.Helper()
	target, err := url.Parse(local.config.Host)
	if err != nil {
		t.Fatalf("API server address %q: %v", local.config.Host, err)
	}
	// Only the cluster's CA: the requests carry the process's token, not the test's.
	transport, err := rest.TransportFor(&rest.Config{Host: local.config.Host, TLSClientConfig: rest.TLSClientConfig{
		CAFile: local.config.CAFile, CAData: local.config.CAData, ServerName: local.config.ServerName,
	}})
	if err != nil {
		t.Fatalf("transport to the API server: %v", err)
	}
	p := &countingProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     transport,
		FlushInterval: -1, // watches stream
	}
	// TLS: client-go sends a kubeconfig's credentials only to an https server.
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		at := time.Now()
		rp.ServeHTTP(rec, r)
		p.mu.Lock()
		p.reqs = append(p.reqs, apiRequest{at: at, method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, code: rec.code})
		p.mu.Unlock()
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// requests returns what was recorded so far, in the order the requests arrived.
func (p *countingProxy) requests() []apiRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]apiRequest(nil), p.reqs...)
}

// kubeconfig writes a kubeconfig that reaches the API server through the proxy with the
// token of the given kubeconfig.
func (p *countingProxy) kubeconfig(t *testing.T, through string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(through)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		*c = clientcmdapi.Cluster{Server: p.srv.URL, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})}
	}
	path := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) { s.code = code; s.ResponseWriter.WriteHeader(code) }

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// TestAgentHeartbeatRequests runs the agent binary with its default reporting flags
// against the real API server, through a proxy that counts its requests, while iperf3
// keeps a 200 Mbit/s veth it meters busy. Once the meter's window is full of that
// traffic, the agent's heartbeat is one status update every --report-max-interval (30s):
// at most 2 requests per minute, none of them a GET. Every GET of its NodeBandwidth over
// the whole run is either the first or follows a conflict or NotFound.
//
// SEXTANT_E2E_AGENT_BINARY runs another build of the agent instead (an older commit, for
// a before figure); the assertions stay the same.
func TestAgentHeartbeatRequests(t *testing.T) {
	requireRoot(t)
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	node := fakeNode(t, "e2e-requests-")
	pair := newVethPair(t, 3, "200mbit")
	proxy := newCountingProxy(t)
	binary := os.Getenv("SEXTANT_E2E_AGENT_BINARY")
	if binary == "" {
		binary = agentBinary(t)
	}
	const (
		window   = 30 * time.Second
		maxEvery = 30 * time.Second // --report-max-interval's default
		measure  = 150 * time.Second
		capacity = 200e6
	)
	// Steady traffic for the whole test: iperf3 stops when the test stops it.
	startProcess(t, "ip", "netns", "exec", pair.nsA, "iperf3", "-c", pair.ipB, "-t", "3600", "-i", "0")
	agent := startProcess(t, binary, "run", "--logging-format=json",
		"--kubeconfig", proxy.kubeconfig(t, agentKubeconfig(t, node.Name)),
		"--node-name", node.Name, "--metrics-addr", "", "--sidecar-terminator=false", "--numa-pinning=false", "--device-plugin=false",
		"--netns", "/var/run/netns/"+pair.nsA, "--interfaces", "veth-a", "--nic-capacity", "veth-a=200M",
		"--window", window.String())

	// The first report over a full window of the traffic.
	busy := func(st sextantv1.NodeBandwidthStatus) bool {
		v := veth(st)
		return st.Window != nil && st.Window.Duration >= window && v != nil && v.Egress.Peak != nil &&
			v.Egress.Peak.AsApproximateFloat64() > 0.75*capacity
	}
	eventually(t, 2*window+30*time.Second, func() (bool, string) {
		nbw, err := getNodeBandwidth(ctx, node.Name)
		if err != nil {
			return false, fmt.Sprintf("NodeBandwidth %s: %v", node.Name, err)
		}
		return busy(nbw.Status), fmt.Sprintf("no full-window report of the traffic yet: %+v", nbw.Status)
	})
	from := time.Now()
	time.Sleep(measure)
	to := time.Now()
	nbw, err := getNodeBandwidth(ctx, node.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !busy(nbw.Status) {
		t.Fatalf("the traffic was not steady to the end: last report %+v", nbw.Status)
	}

	all := proxy.requests()
	var (
		steady []apiRequest
		puts   int
	)
	for _, r := range all {
		if r.at.After(from) && r.at.Before(to) {
			steady = append(steady, r)
			if r.method == http.MethodPut && strings.HasSuffix(r.path, "/nodebandwidths/"+node.Name+"/status") {
				puts++
			}
		}
	}
	perMinute := float64(len(steady)) / to.Sub(from).Minutes()
	t.Logf("steady traffic: %d requests in %v (%.2f per minute), %d of them NodeBandwidth status updates; %d requests in all",
		len(steady), to.Sub(from).Round(time.Second), perMinute, puts, len(all))
	for _, r := range steady {
		t.Logf("  %s", r)
	}
	byKind := map[string]int{}
	for _, r := range all {
		byKind[r.method+" "+strings.Join(strings.Split(strings.TrimPrefix(r.path, "/"), "/")[:min(4, strings.Count(r.path, "/"))], "/")]++
	}
	t.Logf("the whole run, by verb and resource: %v", byKind)
	// Heartbeats every maxEvery: a span of `measure` holds at most measure/maxEvery + 1.
	if limit := int(measure/maxEvery) + 1; len(steady) > limit {
		t.Errorf("%d requests in %v of steady traffic, want at most %d (2 per minute: one status update per %v heartbeat)",
			len(steady), measure, limit, maxEvery)
	}
	if want := int(measure/maxEvery) - 1; puts < want {
		t.Errorf("%d NodeBandwidth status updates in %v, want at least %d: is the agent still writing?\n%s",
			puts, measure, want, lastLines(agent.output(), 20))
	}
	for _, r := range steady {
		if r.method != http.MethodPut {
			t.Errorf("a %s between steady heartbeat writes: %s", r.method, r)
		}
	}
	// Over the whole run, a read of the NodeBandwidth comes first or after a write the
	// server refused as a conflict or because the object was gone.
	var prev *apiRequest
	for i, r := range all {
		if !strings.Contains(r.path, "/nodebandwidths/") {
			continue
		}
		if r.method == http.MethodGet && prev != nil && prev.code != http.StatusConflict && prev.code != http.StatusNotFound {
			t.Errorf("GET of the NodeBandwidth after a %s that went through (%d): %s", prev.method, prev.code, r)
		}
		prev = &all[i]
	}
}

// TestAgentHeartbeatsWithoutKubeletOrContainerd runs the agent with the sidecar
// terminator off but NUMA pinning and the device plugin on, where neither the kubelet
// nor containerd answers: their sockets are missing, or accept connections and never
// answer (a hung daemon); the device-plugins directory and the kubelet's cgroups are not
// there. The parts that need them wait and retry; NodeBandwidth heartbeats keep coming,
// NodeTopology is written, and /healthz stays healthy.
func TestAgentHeartbeatsWithoutKubeletOrContainerd(t *testing.T) {
	requireRoot(t)
	installCRDs(t)
	deployChart(t)
	for i, hung := range []bool{false, true} {
		name := map[bool]string{false: "missing", true: "hung"}[hung]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			criSocket, kubeletSocket := filepath.Join(dir, "containerd.sock"), filepath.Join(dir, "kubelet.sock")
			if hung {
				silentSocket(t, criSocket)
				silentSocket(t, kubeletSocket)
			}
			agentWithoutKubelet(t, 4+i, criSocket, kubeletSocket)
		})
	}
}

// silentSocket listens on a unix socket at path and accepts connections, but never
// reads or writes on them, until the test ends.
func silentSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen on %s: %v", path, err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
}

func agentWithoutKubelet(t *testing.T, n int, criSocket, kubeletSocket string) {
	ctx := context.Background()
	node := fakeNode(t, "e2e-nokubelet-")
	pair := newVethPair(t, n, "200mbit")
	const every = 3 * time.Second
	agent := startProcess(t, agentBinary(t), "run", "--logging-format=json",
		"--kubeconfig", agentKubeconfig(t, node.Name),
		"--node-name", node.Name, "--metrics-addr", "127.0.0.1:0", "--sidecar-terminator=false",
		"--cri-endpoint", criSocket, "--pod-resources-socket", kubeletSocket,
		"--device-plugin-dir", filepath.Join(t.TempDir(), "missing", "device-plugins"),
		"--cgroup-root", t.TempDir(), // no cgroup hierarchy: the kubelet never made its pods' cgroups
		"--netns", "/var/run/netns/"+pair.nsA, "--interfaces", "veth-a", "--nic-capacity", "veth-a=200M",
		"--sample-interval", "1s", "--window", "3s", "--report-min-interval", "1s", "--report-max-interval", every.String())

	// Three writes with sample times apart: the first and two fresh heartbeats after it.
	var seen []metav1.Time
	eventually(t, time.Minute, func() (bool, string) {
		nbw, err := getNodeBandwidth(ctx, node.Name)
		if err != nil || nbw.Status.SampleTime == nil {
			return false, fmt.Sprintf("no NodeBandwidth written (%v); agent output:\n%s", err, lastLines(agent.output(), 20))
		}
		if k := len(seen); k == 0 || nbw.Status.SampleTime.After(seen[k-1].Time) {
			seen = append(seen, *nbw.Status.SampleTime)
		}
		return len(seen) >= 3, fmt.Sprintf("heartbeats sampled at %v, want 3; agent output:\n%s", seen, lastLines(agent.output(), 20))
	})
	t.Logf("heartbeats sampled at %v", seen)
	// NodeTopology too: the device plugin and the device filter sit on its path.
	eventually(t, 30*time.Second, func() (bool, string) {
		nt, err := getNodeTopology(ctx, node.Name)
		if err != nil || nt.Status.UpdateTime == nil {
			return false, fmt.Sprintf("no NodeTopology written (%v); agent output:\n%s", err, lastLines(agent.output(), 20))
		}
		return true, ""
	})
	metricsAddr := waitForAddress(t, agent, regexp.MustCompile(`"msg":"serving metrics".*?"addr":"([^"]+)"`), 30*time.Second)
	eventually(t, 30*time.Second, func() (bool, string) {
		code, body, err := agentGet(metricsAddr, "/healthz", "")
		return code == http.StatusOK, fmt.Sprintf("/healthz answered HTTP %d, %v: %s", code, err, body)
	})
	// The parts that need the kubelet or the runtime said why they wait; a call the hung
	// kubelet never answers times out, and its loop says so.
	for _, want := range []string{"no kubelet pod cgroups yet", "waiting for the kubelet's device-plugins directory",
		"the container runtime does not answer", "device audit failed"} {
		eventually(t, 30*time.Second, func() (bool, string) {
			return strings.Contains(agent.output(), want), fmt.Sprintf("agent log lacks %q:\n%s", want, lastLines(agent.output(), 30))
		})
	}
	// And the heartbeats went on meanwhile.
	eventually(t, 30*time.Second, func() (bool, string) {
		nbw, err := getNodeBandwidth(ctx, node.Name)
		if err != nil || nbw.Status.SampleTime == nil {
			return false, fmt.Sprintf("NodeBandwidth: %v", err)
		}
		return nbw.Status.SampleTime.After(seen[len(seen)-1].Time.Add(5 * time.Second)),
			fmt.Sprintf("no heartbeat since %v; agent output:\n%s", seen[len(seen)-1], lastLines(agent.output(), 20))
	})
}
