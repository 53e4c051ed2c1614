package httpbound

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
)

// Short timeouts so the tests end soon; each test waits far longer (patience) for what
// they must bring about, so a busy machine does not fail them.
var testLimits = Limits{
	ReadHeaderTimeout: 300 * time.Millisecond,
	ReadTimeout:       600 * time.Millisecond,
	WriteTimeout:      600 * time.Millisecond,
	IdleTimeout:       600 * time.Millisecond,
	MaxInFlight:       2,
}

const patience = 30 * time.Second

// serve runs l.Server(h) on a loopback port until the test ends and returns its address.
func serve(t *testing.T, l Limits, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := l.Server(h, logr.Discard())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// trickle writes s to c one byte every interval until it is written, a write fails or
// stop is closed.
func trickle(c net.Conn, s string, interval time.Duration, stop <-chan struct{}) {
	for i := 0; i < len(s); i++ {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
	}
}

// readUntilClosed reads c until the server closes it and returns what it read; it
// fails the test if the server keeps the connection open past patience.
func readUntilClosed(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	got, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server still held the connection open after %v; read so far: %q", patience, got)
	}
	return string(got)
}

func TestReadHeaderTimeoutCutsOffSlowHeaders(t *testing.T) {
	addr := serve(t, testLimits, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	// A slow-loris client: a request line, then headers a byte at a time, never ending.
	go trickle(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "+strings.Repeat("a", 100000), 10*time.Millisecond, stop)
	if got := readUntilClosed(t, c); strings.Contains(got, " 200 ") {
		t.Errorf("the server answered a request whose headers never ended: %q", got)
	}
}

func TestReadTimeoutCutsOffSlowBody(t *testing.T) {
	served := make(chan struct{}, 1)
	addr := serve(t, testLimits, NewBodies(1<<20, 0).Limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served <- struct{}{}
	})))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 100000
	if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go trickle(c, strings.Repeat("b", size), 10*time.Millisecond, stop)
	got := readUntilClosed(t, c)
	if strings.Contains(got, " 200 ") || len(served) > 0 {
		t.Errorf("the server served a request whose body never ended: %q", got)
	}
}

func TestWriteTimeoutCutsOffSlowReader(t *testing.T) {
	done := make(chan error, 1)
	addr := serve(t, testLimits, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// Far more than the socket buffers hold, to a client that reads nothing.
		chunk := bytes.Repeat([]byte("c"), 1<<20)
		var err error
		for i := 0; i < 1024 && err == nil; i++ {
			_, err = w.Write(chunk)
		}
		done <- err
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the handler wrote 1 GiB to a client that read nothing")
		}
	case <-time.After(patience):
		t.Fatalf("the handler was still writing to a client that reads nothing after %v", patience)
	}
}

func TestInFlightRefusesBeyondTheLimit(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	limit := NewInFlight(2)
	addr := serve(t, Limits{ReadHeaderTimeout: patience, ReadTimeout: patience, WriteTimeout: 2 * patience, IdleTimeout: patience},
		limit.Limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				entered <- struct{}{}
				<-release
			}
			_, _ = io.WriteString(w, "ok")
		})))
	client := &http.Client{Timeout: 2 * patience}
	get := func(path string) (*http.Response, error) {
		resp, err := client.Get("http://" + addr + path)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	slow := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := get("/slow")
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			slow <- err
		}()
	}
	for i := range 2 {
		select {
		case <-entered:
		case <-time.After(patience):
			t.Fatalf("only %d of 2 slow requests reached the handler after %v", i, patience)
		}
	}
	// Both slots are held until release: the third request must be refused, not queued.
	resp, err := get("/fast")
	if err != nil {
		t.Fatalf("third request: %v", err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third request with 2 in flight: HTTP %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(release)
	for range 2 {
		if err := <-slow; err != nil {
			t.Errorf("a request within the limit: %v", err)
		}
	}
	if resp, err := get("/fast"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("a request after the slots were freed: %v %v, want 200", resp, err)
	}
}

func TestBodiesRefuseBodiesOverTheLimit(t *testing.T) {
	var got []byte
	h := NewBodies(1024, 0).Limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
	}))
	for _, c := range []struct {
		name     string
		size     int
		declared bool
		want     int
	}{
		{"declared, at the limit", 1024, true, http.StatusOK},
		{"declared, over the limit", 1025, true, http.StatusRequestEntityTooLarge},
		{"chunked, at the limit", 1024, false, http.StatusOK},
		{"chunked, over the limit", 4096, false, http.StatusRequestEntityTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			got = nil
			body := strings.Repeat("d", c.size)
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
			if !c.declared {
				r.ContentLength = -1
				r.Body = io.NopCloser(strings.NewReader(body)) // no length to see
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.want {
				t.Fatalf("HTTP %d, want %d: %s", w.Code, c.want, w.Body)
			}
			if c.want == http.StatusOK && string(got) != body {
				t.Errorf("the handler read %d bytes, want the %d sent", len(got), len(body))
			}
			if c.want != http.StatusOK && (got != nil || w.Header().Get("Connection") != "close") {
				t.Errorf("refused, yet the handler ran (%v) or the connection stays open (%q)", got != nil, w.Header().Get("Connection"))
			}
		})
	}
}

func TestBodiesBudgetRefusesBeyondTheBytesInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := NewBodies(2048, 3000).Limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
	}))
	post := func(path string, size int) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(strings.Repeat("e", size))))
		return w.Code
	}
	held := make(chan int, 1)
	go func() { held <- post("/hold", 2048) }()
	select {
	case <-entered:
	case <-time.After(patience):
		t.Fatal("the first request never reached the handler")
	}
	if code := post("/", 2048); code != http.StatusTooManyRequests {
		t.Errorf("2048 bytes more while 2048 of 3000 are held: HTTP %d, want 429", code)
	}
	if code := post("/", 500); code != http.StatusOK {
		t.Errorf("500 bytes more while 2048 of 3000 are held: HTTP %d, want 200", code)
	}
	close(release)
	if code := <-held; code != http.StatusOK {
		t.Errorf("the held request: HTTP %d", code)
	}
	if code := post("/", 2048); code != http.StatusOK {
		t.Errorf("2048 bytes once the budget is free: HTTP %d, want 200", code)
	}
}

// TestServerSpeaksHTTP1Only: a client offering HTTP/2 gets HTTP/1.1 (the bounds above
// are per HTTP/1.1 connection).
func TestServerSpeaksHTTP1Only(t *testing.T) {
	// Only for its certificate.
	certs := httptest.NewTLSServer(http.NotFoundHandler())
	certs.Close()
	srv := testLimits.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}), logr.Discard())
	srv.TLSConfig = &tls.Config{Certificates: certs.TLS.Certificates}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()
	client := &http.Client{Timeout: patience, Transport: &http.Transport{
		ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get("https://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	proto, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 1 || string(proto) != "HTTP/1.1" {
		t.Errorf("served over %s (the handler saw %q), want HTTP/1.1", resp.Proto, proto)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	l := testLimits
	l.AddFlags(fs, "metrics", "the metrics server")
	for _, c := range []struct{ args, want string }{
		{"--metrics-read-timeout=0s", "--metrics-read-timeout 0s"},
		{"--metrics-write-timeout=-1s", "--metrics-write-timeout -1s"},
		{"--metrics-read-header-timeout=1s", "--metrics-read-header-timeout 1s: want at most --metrics-read-timeout"},
		{"--metrics-max-inflight=0", "--metrics-max-inflight 0"},
	} {
		l := testLimits
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		l.AddFlags(fs, "metrics", "the metrics server")
		if err := fs.Parse([]string{c.args}); err != nil {
			t.Fatal(err)
		}
		if err := l.Validate("metrics"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one with %q", c.args, err, c.want)
		}
	}
	if err := testLimits.Validate(""); err != nil {
		t.Errorf("valid limits: %v", err)
	}
	if fs.Lookup("metrics-max-inflight") == nil || fs.Lookup("metrics-idle-timeout") == nil {
		t.Error("AddFlags did not add --metrics-max-inflight and --metrics-idle-timeout")
	}
}
