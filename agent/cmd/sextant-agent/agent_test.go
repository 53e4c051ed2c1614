package main

import (
	"context"
	"errors"
	"testing"
)

// The first part to fail stops the others, and its error is the group's; a part that
// returns an error once asked to stop fails nothing.
func TestGroupReturnsTheFirstFailure(t *testing.T) {
	first, second := errors.New("first"), errors.New("second")
	for _, tc := range []struct {
		name  string
		parts []error // what each part returns at once; nil: it waits to be stopped
		want  []error // wait's error is one of these; none: nil
	}{
		{"one fails", []error{nil, first}, []error{first}},
		{"two fail", []error{first, second}, []error{first, second}},
		{"none fails, stopped from outside", []error{nil, nil}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g := newGroup(cancel)
			for _, err := range tc.parts {
				g.goFatal(ctx, "part", func(ctx context.Context) error {
					if err != nil {
						return err
					}
					<-ctx.Done()
					return errors.New("stopped")
				})
			}
			if len(tc.want) == 0 {
				cancel()
			}
			got := g.wait()
			ok := got == nil && len(tc.want) == 0
			for _, w := range tc.want {
				ok = ok || errors.Is(got, w)
			}
			if !ok {
				t.Errorf("wait: %v, want one of %v", got, tc.want)
			}
			if ctx.Err() == nil {
				t.Error("the parts' context is live after wait, want it ended")
			}
		})
	}
}

// abort stops the parts started so far and returns the error that stopped the start.
func TestGroupAbort(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGroup(cancel)
	stopped := false
	g.Go(func() { <-ctx.Done(); stopped = true })
	bad := errors.New("bad socket")
	if err := g.abort(bad); !errors.Is(err, bad) {
		t.Errorf("abort: %v, want %v", err, bad)
	}
	if !stopped {
		t.Error("abort returned before the running part did")
	}
}
