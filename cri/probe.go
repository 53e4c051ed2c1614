package cri

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"sextant.io/sextant/internal/liveness"
)

// DefaultLivenessDeadline is how long the runtime may go without answering before the
// agent's /healthz fails (the agent's --cri-liveness-deadline).
const DefaultLivenessDeadline = time.Minute

// Versioner is the one call Prober makes: CRI Version, which containerd answers from
// memory.
type Versioner interface {
	Version(ctx context.Context) (string, error)
}

// Prober asks the runtime for its version every interval and remembers when it last
// answered. It is the agent's liveness check of its runtime connection: the client
// reconnects by itself when containerd restarts, but only to the socket file it can
// reach, and an agent that mounts the socket file alone (sidecar.criMount: socket) keeps
// the old, dead one until its container restarts. That restart is the cure, so the
// agent's /healthz fails once the runtime has not answered for the deadline
// (liveness.Checker), whatever the reason.
type Prober struct {
	rt       Versioner
	interval time.Duration
	answered liveness.Beat
	failures prometheus.Counter
	log      logr.Logger
}

// NewProber makes a Prober of rt that asks every interval, each call bounded by the
// interval too (and by the client's own timeout). Its failures are counted in
// sextant_cri_probe_failures_total, registered with reg (nil: not registered).
func NewProber(rt Versioner, interval time.Duration, reg prometheus.Registerer, log logr.Logger) *Prober {
	p := &Prober{rt: rt, interval: interval, log: log,
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sextant_cri_probe_failures_total",
			Help: "CRI Version calls, made every few seconds to tell whether the agent still reaches its container runtime, that failed.",
		})}
	if reg != nil {
		reg.MustRegister(p.failures)
	}
	return p
}

// ProbeInterval is how often a Prober with that deadline asks: three tries or more
// within the deadline, at most every 10s.
func ProbeInterval(deadline time.Duration) time.Duration {
	return max(min(deadline/3, 10*time.Second), 10*time.Millisecond)
}

// LastAnswered is when the runtime last answered; zero if never.
func (p *Prober) LastAnswered() time.Time { return p.answered.Last() }

// Run probes until ctx ends: at once, then every interval.
func (p *Prober) Run(ctx context.Context) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	failing := false
	for {
		err := p.probe(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			p.failures.Inc()
			if !failing {
				p.log.Error(err, "the container runtime does not answer; the agent's /healthz fails once it has not for the liveness deadline", "since", p.LastAnswered())
			}
			failing = true
		case failing:
			p.log.Info("the container runtime answers again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *Prober) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.interval)
	defer cancel()
	if _, err := p.rt.Version(ctx); err != nil {
		return err
	}
	p.answered.Mark(time.Now())
	return nil
}
