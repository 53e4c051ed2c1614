package httpbound

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
)

// Bodies reads each request's body whole, before the handler runs, within two limits:
// Max bytes for one body (a longer one gets 413 Request Entity Too Large, before a byte
// of it is read when its length is declared) and, when Budget is above 0, Budget bytes
// for the bodies of every request being served at once (a body that would go past it
// gets 429). A body of undeclared length (chunked) holds Max bytes of the budget while
// it is read. The handler then reads the body from memory, and the bytes stay counted
// until it returns: what it makes of a body (a decoded object) grows with the body.
type Bodies struct {
	max, budget int64
	held        atomic.Int64
}

// NewBodies limits bodies to max bytes each, and budget bytes at once (0: no budget).
func NewBodies(max, budget int64) *Bodies { return &Bodies{max: max, budget: budget} }

// Limit serves h with the request's body read into memory, or refuses the request.
func (b *Bodies) Limit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > b.max {
			Refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes: the limit is %d", r.ContentLength, b.max))
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		hold := r.ContentLength
		if hold < 0 {
			hold = b.max
		}
		if b.budget > 0 {
			if b.held.Add(hold) > b.budget {
				b.held.Add(-hold)
				w.Header().Set("Retry-After", "1")
				Refuse(w, http.StatusTooManyRequests, fmt.Sprintf("too many request bodies in flight (at most %d bytes); retry", b.budget))
				return
			}
			defer b.held.Add(-hold)
		}
		body, err := readBody(w, r, b.max)
		switch {
		case IsTooLarge(err):
			Refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body longer than the limit of %d bytes", b.max))
			return
		case err != nil:
			Refuse(w, http.StatusBadRequest, "read request body: "+err.Error())
			return
		}
		// A copy of the request: the server still reads r.Body, the one on the wire.
		read := *r
		read.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, &read)
	})
}

// readBody reads r's body, at most max bytes, into one buffer of its declared length,
// or of max when it has none: what the budget holds for it, with no garbage of a
// growing buffer beside it.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	size := r.ContentLength
	if size < 0 {
		size = max
	}
	limited := http.MaxBytesReader(w, r.Body, max)
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			// Full: only the end may follow (MaxBytesReader reports more past max; the
			// server's reader ends a declared length).
			var one [1]byte
			n, err := limited.Read(one[:])
			switch {
			case n > 0:
				return nil, &http.MaxBytesError{Limit: max}
			case err == io.EOF:
				return buf, nil
			case err != nil:
				return nil, err
			}
			continue
		}
		n, err := limited.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if int64(len(buf)) < r.ContentLength {
				return nil, io.ErrUnexpectedEOF
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
