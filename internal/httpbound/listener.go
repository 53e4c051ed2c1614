package httpbound

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ConnLimits bound the connections of a server built by someone else (kube-scheduler's
// secure port), where neither the handler chain nor the http.Server's timeouts are ours
// to set: only the listener it serves is.
type ConnLimits struct {
	// MaxConns is the number of connections open at once. A new connection past it
	// closes the oldest one open, rather than being refused: a client holding
	// connections open cannot keep newer ones (the kubelet's probes, a scrape) out, and
	// to crowd them out would have to open connections faster than they are served.
	// Over HTTP/1.1 a connection carries one request at a time, so this is also the
	// limit on requests in flight.
	MaxConns int
	// Lifetime is each connection's absolute deadline for reads and writes, counted from
	// its accept, whatever deadlines the server sets later (net/http clears its read
	// deadline once the headers are in): a client reading or writing a byte a minute
	// holds its slot this long at most. Keep-alive clients reconnect after it.
	Lifetime time.Duration
	// ReadBytes is what one connection may send over its lifetime, TLS records and
	// bodies included; past it the connection's reads fail and the server closes it.
	ReadBytes int64
}

// Validate names the first limit out of range, with the flag that sets it.
func (l ConnLimits) Validate(prefix string) error {
	switch {
	case l.MaxConns < 1:
		return fmt.Errorf("--%s %d: want at least 1", flagName(prefix, "max-connections"), l.MaxConns)
	case l.Lifetime <= 0:
		return fmt.Errorf("--%s %s: want a duration above 0, e.g. 2m", flagName(prefix, "connection-lifetime"), l.Lifetime)
	case l.ReadBytes < 1:
		return fmt.Errorf("--%s %d: want at least 1 byte", flagName(prefix, "connection-read-bytes"), l.ReadBytes)
	}
	return nil
}

// ErrConnReadLimit is a read past ConnLimits.ReadBytes.
var ErrConnReadLimit = errors.New("connection read past its byte limit")

// Listener hands out ln's connections within l. evicted, when not nil, is called for
// each connection closed to make room for a new one.
func (l ConnLimits) Listener(ln net.Listener, evicted func()) net.Listener {
	return &limitListener{Listener: ln, limits: l, open: list.New(), evicted: evicted}
}

type limitListener struct {
	net.Listener
	limits  ConnLimits
	evicted func()

	mu   sync.Mutex
	open *list.List // of *limitConn, oldest first
}

// Open is the number of connections open now.
func (ln *limitListener) Open() int {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.open.Len()
}

func (ln *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// kube-scheduler's server sets TCP keep-alive only on the *net.TCPConn it
		// accepts itself, which this one hides.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetKeepAlive(true)
			_ = tc.SetKeepAlivePeriod(3 * time.Minute)
		}
		lc := &limitConn{Conn: c, ln: ln, end: time.Now().Add(ln.limits.Lifetime)}
		lc.left.Store(ln.limits.ReadBytes)
		if err := c.SetDeadline(lc.end); err != nil {
			_ = c.Close()
			continue
		}
		ln.mu.Lock()
		var oldest *limitConn
		if ln.open.Len() >= ln.limits.MaxConns {
			oldest = ln.open.Remove(ln.open.Front()).(*limitConn)
			oldest.elem = nil
		}
		lc.elem = ln.open.PushBack(lc)
		ln.mu.Unlock()
		if oldest != nil {
			// Its server goroutine sees the error and closes it again, which is then
			// only the socket's.
			_ = oldest.Conn.Close()
			if ln.evicted != nil {
				ln.evicted()
			}
		}
		return lc, nil
	}
}

type limitConn struct {
	net.Conn
	ln   *limitListener
	end  time.Time
	left atomic.Int64
	elem *list.Element // in ln.open while open; guarded by ln.mu
}

func (c *limitConn) Read(p []byte) (int, error) {
	left := c.left.Load()
	if left <= 0 {
		return 0, ErrConnReadLimit
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := c.Conn.Read(p)
	c.left.Add(-int64(n))
	return n, err
}

// within is t, or the connection's end when t is later or none (the zero time).
func (c *limitConn) within(t time.Time) time.Time {
	if t.IsZero() || t.After(c.end) {
		return c.end
	}
	return t
}

func (c *limitConn) SetDeadline(t time.Time) error     { return c.Conn.SetDeadline(c.within(t)) }
func (c *limitConn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.within(t)) }
func (c *limitConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.within(t))
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.ln.mu.Lock()
	if c.elem != nil {
		c.ln.open.Remove(c.elem)
		c.elem = nil
	}
	c.ln.mu.Unlock()
	return err
}
