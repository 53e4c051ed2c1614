// Package httpbound bounds what one HTTP server may spend on its clients, as
// kube-apiserver bounds itself:
//
//   - time: a client that sends its request, or reads the answer, slowly is cut off by
//     the read-header, read and write timeouts, and a kept-alive connection that brings
//     no new request by the idle timeout;
//   - requests at once: beyond the in-flight limit a request is refused with 429 at
//     once, not queued behind the slow ones (a client that waits is better off retrying);
//   - bodies: a body longer than the limit gets 413, and the bytes of the bodies held
//     at once can be capped too.
//
// Every HTTP server of sextant is made with it (docs/security.md, "Bounded servers").
package httpbound

import (
	"errors"
	"fmt"
	stdlog "log"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
)

// MaxHeaderBytes bounds a request's headers (net/http's default is 1 MiB). What
// sextant's clients send (a bearer token, an API server's call) fits many times over; a
// client trickling megabytes of headers into each of many connections would not.
const MaxHeaderBytes = 64 << 10

// NoBodyBytes is the body limit of endpoints that read no body (/metrics, /healthz).
const NoBodyBytes = 4 << 10

// Limits are one server's timeouts and in-flight limit.
type Limits struct {
	// ReadHeaderTimeout bounds the TLS handshake and reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, its body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from a request's headers to the end of its answer.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that brings no new request.
	IdleTimeout time.Duration
	// MaxInFlight is how many requests are served at once; more get 429.
	MaxInFlight int
}

// AddFlags adds --PREFIX-read-header-timeout, --PREFIX-read-timeout,
// --PREFIX-write-timeout, --PREFIX-idle-timeout and --PREFIX-max-inflight (without
// PREFIX-, for an empty prefix), defaulting to l's values; what names the server in
// their help.
func (l *Limits) AddFlags(fs *pflag.FlagSet, prefix, what string) {
	fs.DurationVar(&l.ReadHeaderTimeout, flagName(prefix, "read-header-timeout"), l.ReadHeaderTimeout,
		"longest a client of "+what+" may take for the TLS handshake and a request's headers; a slower one is cut off")
	fs.DurationVar(&l.ReadTimeout, flagName(prefix, "read-timeout"), l.ReadTimeout,
		"longest a client of "+what+" may take to send a whole request, body included")
	fs.DurationVar(&l.WriteTimeout, flagName(prefix, "write-timeout"), l.WriteTimeout,
		"longest "+what+" spends on one answer, from the request's headers until the client has read it; a slower reader is cut off")
	fs.DurationVar(&l.IdleTimeout, flagName(prefix, "idle-timeout"), l.IdleTimeout,
		"how long "+what+" keeps a kept-alive connection that brings no new request")
	fs.IntVar(&l.MaxInFlight, flagName(prefix, "max-inflight"), l.MaxInFlight,
		"requests "+what+" serves at once; more are refused at once with 429 Too Many Requests")
}

// Validate refuses limits that bound nothing, naming the flag of AddFlags with prefix.
func (l Limits) Validate(prefix string) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read-header-timeout", l.ReadHeaderTimeout}, {"read-timeout", l.ReadTimeout}, {"write-timeout", l.WriteTimeout}, {"idle-timeout", l.IdleTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s %v: want a positive duration, such as 10s", flagName(prefix, d.name), d.v)
		}
	}
	if l.ReadHeaderTimeout > l.ReadTimeout {
		return fmt.Errorf("--%s %v: want at most --%s (%v), which covers the headers too",
			flagName(prefix, "read-header-timeout"), l.ReadHeaderTimeout, flagName(prefix, "read-timeout"), l.ReadTimeout)
	}
	if l.MaxInFlight < 1 {
		return fmt.Errorf("--%s %d: want at least 1", flagName(prefix, "max-inflight"), l.MaxInFlight)
	}
	return nil
}

func flagName(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "-" + name
}

// Server is an http.Server serving h within l's timeouts and MaxHeaderBytes, logging
// its own errors (failed TLS handshakes, mostly) to log. It speaks HTTP/1.1 only: over
// HTTP/2 one connection carries many requests, which ReadHeaderTimeout does not cover,
// and its stream resets have been abused to make servers work for nothing
// (CVE-2023-44487); controller-runtime's webhook and metrics servers turn it off too.
// The in-flight limit is the handler's: wrap h with an InFlight.
func (l Limits) Server(h http.Handler, log logr.Logger) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		Protocols:         &protocols,
		ErrorLog:          stdlog.New(serverErrors{log}, "", 0),
	}
}

// serverErrors writes what net/http logs to a logger.
type serverErrors struct{ log logr.Logger }

func (w serverErrors) Write(p []byte) (int, error) {
	w.log.Info("http server", "error", strings.TrimSpace(string(p)))
	return len(p), nil
}

// InFlight is a limit on requests served at once, shared by every handler it wraps.
type InFlight struct{ slots chan struct{} }

// NewInFlight is a limit of max requests at once.
func NewInFlight(max int) *InFlight { return &InFlight{slots: make(chan struct{}, max)} }

// Limit serves h while a slot is free, and refuses at once with 429 while none is.
func (f *InFlight) Limit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case f.slots <- struct{}{}:
		default:
			w.Header().Set("Retry-After", "1")
			Refuse(w, http.StatusTooManyRequests, fmt.Sprintf("too many requests in flight (at most %d); retry", cap(f.slots)))
			return
		}
		defer func() { <-f.slots }()
		h.ServeHTTP(w, r)
	})
}

// Refuse answers code with msg and closes the connection after the answer: the client
// may still be sending a body nobody will read.
func Refuse(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Connection", "close")
	http.Error(w, msg, code)
}

// IsTooLarge reports whether err is a read past a body limit.
func IsTooLarge(err error) bool {
	var tooLarge *http.MaxBytesError
	return errors.As(err, &tooLarge)
}
