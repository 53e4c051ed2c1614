package httpbound

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serveLimited serves h over TLS through l's listener with the timeouts kube-scheduler's
// secure port sets (genericapiserver's SecureServingInfo.Serve), none of which stops a
// slow client once its headers are in. It returns the server, the listener and a count
// of evicted connections.
func serveLimited(t *testing.T, l ConnLimits, h http.Handler) (*httptest.Server, *limitListener, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var evicted atomic.Int64
	limited := l.Listener(ln, func() { evicted.Add(1) })
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = limited
	srv.Config.ReadHeaderTimeout = 32 * time.Second
	srv.Config.IdleTimeout = 90 * time.Second
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the evicted connections' failed handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, limited.(*limitListener), &evicted
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

func TestConnLimitsEvictTheOldestPastMax(t *testing.T) {
	srv, ln, evicted := serveLimited(t, ConnLimits{MaxConns: 3, Lifetime: time.Hour, ReadBytes: 1 << 20},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	addr := srv.Listener.Addr().String()
	// Three clients that connect and send nothing, as a slow-loris does, one after the
	// other so that their order is known.
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
		eventually(t, fmt.Sprintf("%d connections open", i+1), func() bool { return ln.Open() == i+1 })
	}

	// A 4th is served, and the oldest closed to make room for it.
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatalf("GET with 3 idle connections holding every slot: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("GET with 3 idle connections holding every slot: %q, want ok", body)
	}
	_ = held[0].SetReadDeadline(time.Now().Add(patience))
	if n, err := held[0].Read(make([]byte, 1)); err == nil {
		t.Fatalf("the oldest connection still open after a 4th past 3: read %d bytes", n)
	}
	if evicted.Load() != 1 {
		t.Fatalf("%d connections evicted, want 1 (the oldest)", evicted.Load())
	}
	// The others are untouched: still open, their deadline an hour away.
	for i, c := range held[1:] {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("connection %d after the eviction of the oldest: %v, want it open (a read deadline of ours exceeded)", i+2, err)
		}
	}
	if n := ln.Open(); n > 3 {
		t.Fatalf("%d connections open, want at most 3", n)
	}
}

func TestConnLimitsEndSlowClientsAtTheirLifetime(t *testing.T) {
	// Headers whole, then a body one byte a second: past the headers net/http clears
	// its read deadline, and kube-scheduler sets no ReadTimeout.
	stop := make(chan struct{})
	defer close(stop)
	requireBodyCutOff(t, ConnLimits{MaxConns: 4, Lifetime: 500 * time.Millisecond, ReadBytes: 1 << 20},
		"a 1000-byte body sent at a byte a second within a 500ms lifetime", func(c net.Conn) {
			fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
			trickle(c, strings.Repeat("x", 1000), time.Second, stop)
		})
}

func TestConnLimitsEndConnectionsPastTheirReadBytes(t *testing.T) {
	requireBodyCutOff(t, ConnLimits{MaxConns: 4, Lifetime: time.Hour, ReadBytes: 64 << 10},
		"a 1 MiB body on a connection limited to 64 KiB", func(c net.Conn) {
			fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<20)
			_, _ = c.Write(make([]byte, 1<<20))
		})
}

// requireBodyCutOff serves a handler reading the body through l's listener, has send
// write a request on a TLS connection, and fails the test unless the handler's read
// fails (the body, what, is not read whole) and the connection's slot is freed.
func requireBodyCutOff(t *testing.T, l ConnLimits, what string, send func(c net.Conn)) {
	t.Helper()
	handlerErr := make(chan error, 1)
	srv, ln, _ := serveLimited(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		handlerErr <- err
	}))
	c, err := tlsDial(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go send(c)
	select {
	case err := <-handlerErr:
		if err == nil {
			t.Fatalf("the handler read %s whole", what)
		}
	case <-time.After(patience):
		t.Fatalf("%s: still being read after %s", what, patience)
	}
	eventually(t, "the connection's slot freed", func() bool { return ln.Open() == 0 })
}

func TestConnLimitsServeKeepAliveRequests(t *testing.T) {
	var served atomic.Int64
	srv, ln, evicted := serveLimited(t, ConnLimits{MaxConns: 1, Lifetime: time.Hour, ReadBytes: 1 << 20},
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
	if served.Load() != 20 || evicted.Load() != 0 || ln.Open() != 1 {
		t.Fatalf("served %d, evicted %d, open %d; want 20 served on the one connection", served.Load(), evicted.Load(), ln.Open())
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
