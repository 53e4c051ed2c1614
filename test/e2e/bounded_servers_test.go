//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/sidecars/webhook"
)

// TestSecurityBoundedServers: from the test process, as any pod could (the agent is in
// the host network, the webhook's NetworkPolicy admits anyone to its port), 300 slow
// scrapes asking for gzip hit the agent's metrics (a quarter each without a token, with
// a tenant's token, with a token allowed to read them, and with headers that never
// end), and 30 slow 8 MiB reviews hit the webhook (half with their length declared, half
// chunked). Afterwards the agent and the webhook still run in the same containers,
// without a restart, Ready, and the high-water mark of their cgroup's memory over the
// storm is under its limit; a scrape without a token gets 401 and the reader's gets
// its metrics. docs/security.md, "Bounded servers".
func TestSecurityBoundedServers(t *testing.T) {
	requireRoot(t) // the containers' cgroups
	installCRDs(t)
	deployChart(t)
	ns := testNamespace(t)
	agentAddr := nodeInternalIP(t, local.nodeName) + ":9464"
	reader := metricsReader(t, agentAddr)
	tenant := plainToken(t, ns, "tenant")

	agentPods := readyPods(t, "app.kubernetes.io/component=agent", local.nodeName)
	webhookPods := readyPods(t, "app.kubernetes.io/component=webhook", "")
	rankerPods := readyPods(t, "app.kubernetes.io/component=ranker", "")
	var watched []*watchedContainer
	for _, p := range slices.Concat(agentPods, webhookPods, rankerPods) {
		watched = append(watched, watchContainer(t, p))
	}

	deadline := time.Now().Add(3 * time.Minute)
	var wg sync.WaitGroup
	scrapes := newTally()
	for i := range 300 {
		kind := []string{"no token", "tenant's token", "reader's token", "endless headers"}[i%4]
		token := map[string]string{"tenant's token": tenant, "reader's token": reader}[kind]
		wg.Go(func() { scrapes.add(kind, slowScrape(agentAddr, token, kind == "endless headers", deadline)) })
	}
	posts := newTally()
	for i := range 30 {
		addr := net.JoinHostPort(webhookPods[(i/2)%len(webhookPods)].Status.PodIP, "9443")
		kind := []string{"declared", "chunked"}[i%2]
		wg.Go(func() { posts.add(kind, slowPost(addr, 8<<20, kind == "chunked", deadline)) })
	}
	// kube-scheduler's secure port, past its --secure-port-max-connections (128): each
	// connection a TLS handshake and headers that never end. Past 128 a new connection
	// closes the oldest, so the kubelet's probes are still served (the containers are
	// checked for restarts below).
	rankerScrapes := newTally()
	for i := range 400 {
		addr := net.JoinHostPort(rankerPods[i%len(rankerPods)].Status.PodIP, "10259")
		wg.Go(func() {
			outcome := slowScrape(addr, "", true, deadline)
			if strings.HasPrefix(outcome, "dial: ") {
				outcome = "refused"
			}
			rankerScrapes.add("ranker, endless headers", outcome)
		})
	}
	wg.Wait()
	t.Logf("agent scrapes by kind and outcome: %s", scrapes)
	t.Logf("webhook reviews of 8 MiB by kind and outcome: %s", posts)
	t.Logf("ranker connections with endless headers by outcome: %s", rankerScrapes)

	// What each kind of client may get: never metrics without the right, never a
	// review of 8 MiB read, never an answer to headers that do not end, and nobody
	// still connected at the deadline. "closed": the server cut the client off (a
	// timeout, or the connection closed after a refusal before its answer was read).
	allowed := map[string][]string{
		"no token":        {"401", "429", "closed"},
		"tenant's token":  {"403", "429", "closed"},
		"reader's token":  {"200", "429", "closed"},
		"endless headers": {"closed"},
		"declared":        {"413", "429", "closed"},
		"chunked":         {"413", "429", "400", "closed"},
		// Evicted during its handshake: refused.
		"ranker, endless headers": {"closed", "refused"},
	}
	for _, tl := range []*tally{scrapes, posts, rankerScrapes} {
		for kind, outcomes := range tl.counts {
			for outcome := range outcomes {
				if !slices.Contains(allowed[kind], outcome) {
					t.Errorf("%s: %d ended %s, want one of %v", kind, outcomes[outcome], outcome, allowed[kind])
				}
			}
		}
	}

	for _, w := range watched {
		w.check(t)
	}
	if code, body, err := agentGet(agentAddr, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("the agent's /metrics without a token after the storm: HTTP %d, %v: %.200s; want 401", code, err, body)
	}
	eventually(t, time.Minute, func() (bool, string) {
		code, body, err := agentGet(agentAddr, "/metrics", reader)
		return code == http.StatusOK && strings.Contains(body, "sextant_report_writes_total"),
			fmt.Sprintf("the agent's /metrics with the reader's token after the storm: HTTP %d, %v", code, err)
	})
	for _, p := range webhookPods {
		metrics := webhookMetrics(t, p)
		t.Logf("webhook %s: %s", p.Name, metrics)
	}
	for _, p := range rankerPods {
		addr := net.JoinHostPort(p.Status.PodIP, "10259")
		eventually(t, time.Minute, func() (bool, string) {
			code, body, err := agentGet(addr, "/metrics", reader)
			evicted := metricValue(body, "sextant_ranker_secure_port_connections_evicted_total")
			t.Logf("ranker %s after the storm: HTTP %d, %v; connections evicted %v", p.Name, code, err, evicted)
			return code == http.StatusOK && evicted > 0, fmt.Sprintf("ranker %s's /metrics with the reader's token after the storm: HTTP %d, %v, connections evicted %v (want some: 200 connections at a secure port holding 128)", p.Name, code, err, evicted)
		})
	}
}

// metricValue is the value of the unlabelled sample name in a Prometheus text body, or
// -1 when there is none.
func metricValue(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// plainToken is a token of a new service account in ns, bound to nothing: a tenant's.
func plainToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	sa, err := local.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := local.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// readyPods are the release's Ready pods of selector (on node, unless empty).
func readyPods(t *testing.T, selector, node string) []*corev1.Pod {
	t.Helper()
	var out []*corev1.Pod
	eventually(t, 2*time.Minute, func() (bool, string) {
		out = nil
		pods, err := local.kube.CoreV1().Pods(releaseNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if (node == "" || p.Spec.NodeName == node) && p.DeletionTimestamp == nil && podReady(p) {
				out = append(out, p)
			}
		}
		return len(out) > 0, fmt.Sprintf("no Ready pod of %s", selector)
	})
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// watchedContainer is a pod's first container as it was before the storm: its ID, its
// restarts, its memory cgroup, the cgroup's limit and how often it was hit.
type watchedContainer struct {
	pod                 *corev1.Pod
	id                  string
	restarts            int32
	cgroup              string
	limit, failsBefore  int64
	peakFile, failsFile string
}

// watchContainer finds the memory cgroup of p's first container on this node and, on
// cgroup v1, resets its high-water mark, so that what it holds afterwards is the peak
// over the storm.
func watchContainer(t *testing.T, p *corev1.Pod) *watchedContainer {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", p.Name)
	}
	st := p.Status.ContainerStatuses[0]
	id := st.ContainerID[strings.Index(st.ContainerID, "://")+3:]
	w := &watchedContainer{pod: p, id: st.ContainerID, restarts: st.RestartCount}
	uid := "pod" + string(p.UID)
	for _, pattern := range []string{
		"/sys/fs/cgroup/memory/kubepods*/" + uid + "/" + id, "/sys/fs/cgroup/memory/kubepods*/*/" + uid + "/" + id, // v1
		"/sys/fs/cgroup/kubepods*/" + uid + "/" + id, "/sys/fs/cgroup/kubepods*/*/" + uid + "/" + id, // v2, cgroupfs
	} {
		if dirs, _ := filepath.Glob(pattern); len(dirs) == 1 {
			w.cgroup = dirs[0]
			break
		}
	}
	if w.cgroup == "" {
		t.Fatalf("no memory cgroup for container %s of pod %s (uid %s) under /sys/fs/cgroup", id, p.Name, p.UID)
	}
	if strings.HasPrefix(w.cgroup, "/sys/fs/cgroup/memory/") {
		w.peakFile, w.failsFile = "memory.max_usage_in_bytes", "memory.failcnt"
		w.limit = readInt(t, filepath.Join(w.cgroup, "memory.limit_in_bytes"))
		if err := os.WriteFile(filepath.Join(w.cgroup, w.peakFile), []byte("0"), 0); err != nil {
			t.Fatalf("reset the memory high-water mark of %s: %v", p.Name, err)
		}
	} else {
		// cgroup v2: the peak since the container started; OOM kills in memory.events.
		w.peakFile, w.failsFile = "memory.peak", ""
		w.limit = readInt(t, filepath.Join(w.cgroup, "memory.max"))
	}
	if w.failsFile != "" {
		w.failsBefore = readInt(t, filepath.Join(w.cgroup, w.failsFile))
	}
	if w.limit <= 0 || w.limit > 1<<40 {
		t.Fatalf("pod %s's container has no memory limit (%d): the chart sets one", p.Name, w.limit)
	}
	return w
}

// check fails the test unless the container is the same, without a new restart, Ready,
// and its memory stayed under its limit, never hitting it.
func (w *watchedContainer) check(t *testing.T) {
	t.Helper()
	peak := readInt(t, filepath.Join(w.cgroup, w.peakFile))
	t.Logf("%s: memory peak over the storm %.1f MiB of a %.0f MiB limit", w.pod.Name, float64(peak)/(1<<20), float64(w.limit)/(1<<20))
	if peak >= w.limit {
		t.Errorf("%s: memory peak %d bytes, at its limit %d", w.pod.Name, peak, w.limit)
	}
	if w.failsFile != "" {
		if fails := readInt(t, filepath.Join(w.cgroup, w.failsFile)); fails != w.failsBefore {
			t.Errorf("%s: the memory limit was hit %d times during the storm", w.pod.Name, fails-w.failsBefore)
		}
	}
	p, err := local.kube.CoreV1().Pods(w.pod.Namespace).Get(context.Background(), w.pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("%s after the storm: %v", w.pod.Name, err)
		return
	}
	st := p.Status.ContainerStatuses[0]
	if st.ContainerID != w.id || st.RestartCount != w.restarts || !podReady(p) {
		t.Errorf("%s after the storm: container %s (was %s), %d restarts (was %d), Ready %v; want the same container, not restarted, Ready",
			p.Name, st.ContainerID, w.id, st.RestartCount, w.restarts, podReady(p))
	}
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 1 << 62
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// tally counts outcomes by kind of client.
type tally struct {
	mu     sync.Mutex
	counts map[string]map[string]int
}

func newTally() *tally { return &tally{counts: map[string]map[string]int{}} }

func (t *tally) add(kind, outcome string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts[kind] == nil {
		t.counts[kind] = map[string]int{}
	}
	t.counts[kind][outcome]++
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for kind, outcomes := range t.counts {
		var o []string
		for outcome, n := range outcomes {
			o = append(o, fmt.Sprintf("%s×%d", outcome, n))
		}
		sort.Strings(o)
		parts = append(parts, kind+": "+strings.Join(o, " "))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// slowScrape asks the agent at addr for /metrics in gzip, with token, sending its
// request in pieces over two seconds and reading the answer 256 bytes every 100 ms.
// With endless, the headers never end: a byte every 100 ms. It returns the answer's
// status code, "closed" when the server closed the connection without one, or
// "still open" when the deadline came first.
func slowScrape(addr, token string, endless bool, deadline time.Time) string {
	c, err := tls.DialWithDialer(&net.Dialer{Deadline: deadline}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	req := "GET /metrics HTTP/1.1\r\nHost: sextant-agent\r\nAccept-Encoding: gzip\r\nUser-Agent: e2e-slow-scraper\r\n"
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	answer := make(chan string, 1)
	go func() { answer <- readSlowly(c) }()
	if endless {
		req += "X-Slow: "
		for _, b := range []byte(req) {
			if _, err := c.Write([]byte{b}); err != nil {
				break
			}
		}
		for {
			select {
			case a := <-answer:
				return a
			case <-time.After(100 * time.Millisecond):
			}
			_, _ = c.Write([]byte("a"))
		}
	}
	req += "\r\n"
	const pieces = 10
	for i := range pieces {
		part := req[i*len(req)/pieces : (i+1)*len(req)/pieces]
		if _, err := io.WriteString(c, part); err != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return <-answer
}

// readSlowly reads an HTTP answer from c, its body 256 bytes every 100 ms, and returns
// its status code, "closed" or "still open" (see slowScrape).
func readSlowly(c net.Conn) string {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return "still open"
		}
		return "closed"
	}
	defer resp.Body.Close()
	buf := make([]byte, 256)
	for {
		if _, err := resp.Body.Read(buf); err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return strconv.Itoa(resp.StatusCode)
}

// reviewPayload is what slowPost sends: the start of a review, then spaces.
var reviewPayload = append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":{"metadata":{"annotations":{"a":"`),
	bytes.Repeat([]byte("a"), 128<<10)...)

// slowPost sends a review of size bytes to the webhook at addr, 128 KiB every 100 ms,
// its length declared or chunked, until the webhook answers, and returns the answer's
// status code, "closed" or "still open" (see slowScrape).
func slowPost(addr string, size int, chunked bool, deadline time.Time) string {
	c, err := tls.DialWithDialer(&net.Dialer{Deadline: deadline}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: sextant-webhook\r\nContent-Type: application/json\r\n", webhook.PathValidate)
	if chunked {
		head += "Transfer-Encoding: chunked\r\n\r\n"
	} else {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
	}
	answer := make(chan string, 1)
	go func() { answer <- readSlowly(c) }()
	if _, err := io.WriteString(c, head); err != nil {
		return <-answer
	}
	for sent := 0; sent < size; {
		piece := reviewPayload[:min(len(reviewPayload), size-sent)]
		var frame []byte
		if chunked {
			frame = append(fmt.Appendf(nil, "%x\r\n", len(piece)), piece...)
			frame = append(frame, "\r\n"...)
		} else {
			frame = piece
		}
		if _, err := c.Write(frame); err != nil {
			return <-answer
		}
		sent += len(piece)
		select {
		case a := <-answer:
			return a
		case <-time.After(100 * time.Millisecond):
		}
	}
	if chunked {
		_, _ = io.WriteString(c, "0\r\n\r\n")
	}
	return <-answer
}

// webhookMetrics is the webhook pod's request counts by code, from its plain metrics
// port.
func webhookMetrics(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	resp, err := http.Get("http://" + net.JoinHostPort(p.Status.PodIP, "9465") + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "sextant_webhook_requests_total{") {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, ", ")
}
