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

// readBody reads r's body, at most max bytes, into a buffer of its declared length
// when it has one.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	limited := http.MaxBytesReader(w, r.Body, max)
	if r.ContentLength < 0 {
		return io.ReadAll(limited)
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(limited, body); err != nil {
		return nil, err
	}
	return body, nil
}
