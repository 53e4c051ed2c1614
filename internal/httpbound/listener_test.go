package httpbound

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serveLimited serves h over TLS through l's listener with the timeouts kube-scheduler's
// secure port sets (genericapiserver's SecureServingInfo.Serve), none of which stops a
// slow client once its headers are in. It returns the server, the listener and a count
// of refused connections.
func serveLimited(t *testing.T, l ConnLimits, h http.Handler) (*httptest.Server, *limitListener, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	limited := l.Listener(ln, func() { refused.Add(1) })
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = limited
	srv.Config.ReadHeaderTimeout = 32 * time.Second
	srv.Config.IdleTimeout = 90 * time.Second
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused connections' failed handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, limited.(*limitListener), &refused
}

// eventually polls cond until it holds or patience runs out.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConnLimitsRefuseConnectionsPastMax(t *testing.T) {
	srv, ln, refused := serveLimited(t, ConnLimits{MaxConns: 3, Lifetime: time.Hour, ReadBytes: 1 << 20},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	addr := srv.Listener.Addr().String()
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	eventually(t, "3 connections open", func() bool { return ln.Open() == 3 })

	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(patience))
	if n, err := extra.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a 4th connection past 3 was served: read %d bytes", n)
	}
	eventually(t, "the 4th connection counted as refused", func() bool { return refused.Load() == 1 })

	// A slot freed is a slot served.
	held[0].Close()
	eventually(t, "a slot freed", func() bool { return ln.Open() == 2 })
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatalf("GET after a slot was freed: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("GET after a slot was freed: %q, want ok", body)
	}
}

func TestConnLimitsEndSlowClientsAtTheirLifetime(t *testing.T) {
	handlerErr := make(chan error, 1)
	srv, ln, _ := serveLimited(t, ConnLimits{MaxConns: 4, Lifetime: 500 * time.Millisecond, ReadBytes: 1 << 20},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			handlerErr <- err
		}))
	// Headers whole, then a body one byte a second: past the headers net/http clears
	// its read deadline, and kube-scheduler sets no ReadTimeout.
	c, err := tlsDial(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go trickle(c, strings.Repeat("x", 1000), time.Second, stop)
	select {
	case err := <-handlerErr:
		if err == nil {
			t.Fatal("the handler read a 1000-byte body sent at a byte a second within a 500ms lifetime")
		}
	case <-time.After(patience):
		t.Fatalf("the trickled body was still being read after %s", patience)
	}
	eventually(t, "the slow connection's slot freed", func() bool { return ln.Open() == 0 })
}

func TestConnLimitsEndConnectionsPastTheirReadBytes(t *testing.T) {
	handlerErr := make(chan error, 1)
	srv, ln, _ := serveLimited(t, ConnLimits{MaxConns: 4, Lifetime: time.Hour, ReadBytes: 64 << 10},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			handlerErr <- err
		}))
	c, err := tlsDial(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<20)
		_, _ = c.Write(make([]byte, 1<<20))
	}()
	select {
	case err := <-handlerErr:
		if err == nil {
			t.Fatal("the handler read a 1 MiB body whole on a connection limited to 64 KiB")
		}
	case <-time.After(patience):
		t.Fatalf("the 1 MiB body was still being read after %s", patience)
	}
	eventually(t, "the connection's slot freed", func() bool { return ln.Open() == 0 })
}

func TestConnLimitsServeKeepAliveRequests(t *testing.T) {
	var served atomic.Int64
	srv, ln, refused := serveLimited(t, ConnLimits{MaxConns: 1, Lifetime: time.Hour, ReadBytes: 1 << 20},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1); fmt.Fprint(w, "ok") }))
	c, err := tlsDial(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; i < 20; i++ {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on one connection: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d on one connection: %s", i, resp.Status)
		}
	}
	if served.Load() != 20 || refused.Load() != 0 || ln.Open() != 1 {
		t.Fatalf("served %d, refused %d, open %d; want 20 served on the one connection", served.Load(), refused.Load(), ln.Open())
	}
}

func TestConnLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		l    ConnLimits
		want string
	}{
		{ConnLimits{MaxConns: 1, Lifetime: time.Second, ReadBytes: 1}, ""},
		{ConnLimits{MaxConns: 0, Lifetime: time.Second, ReadBytes: 1}, "--secure-port-max-connections 0"},
		{ConnLimits{MaxConns: 1, Lifetime: 0, ReadBytes: 1}, "--secure-port-connection-lifetime 0s"},
		{ConnLimits{MaxConns: 1, Lifetime: time.Second, ReadBytes: 0}, "--secure-port-connection-read-bytes 0"},
	} {
		err := tc.l.Validate("secure-port")
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.l, err, tc.want)
		}
	}
}

// tlsDial opens a TLS connection to srv trusting its certificate.
func tlsDial(srv *httptest.Server) (net.Conn, error) {
	tr := srv.Client().Transport.(*http.Transport)
	return tls.Dial("tcp", srv.Listener.Addr().String(), tr.TLSClientConfig)
}
