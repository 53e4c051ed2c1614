package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"sextant.io/sextant/internal/httpbound"
)

// newMetricsRegistry is the registry of the webhook and virtual-node-controller commands,
// which do not run kube-scheduler and so do not serve its legacy registry.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// defaultMetricsLimits bound the plain metrics server of the webhook and
// virtual-node-controller, as the agent's: its answers are tens of kilobytes, its
// clients Prometheus and a person or two.
var defaultMetricsLimits = httpbound.Limits{
	ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
	WriteTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second, MaxInFlight: 8,
}

// addMetricsFlags adds --metrics-addr, off by default so that several processes on one
// host (tests, a development machine) do not contend for a port (the chart sets it),
// and the metrics server's --metrics-* limits.
func addMetricsFlags(f *pflag.FlagSet, o *webhookOptions) {
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "address to serve Prometheus /metrics on over plain HTTP, e.g. :9465 (empty: not served)")
	o.metricsLimits = defaultMetricsLimits
	o.metricsLimits.AddFlags(f, "metrics", "the metrics server (--metrics-addr)")
}

// validateMetrics checks the flags of addMetricsFlags.
func (o webhookOptions) validateMetrics() error {
	if o.metricsAddr == "" {
		return nil
	}
	return o.metricsLimits.Validate("metrics")
}

// serveMetrics serves reg's /metrics over plain HTTP on addr, within limits, until
// stop is called. It returns once it listens, or the error of listening.
//
// Plain HTTP, without credentials, unlike the agent's: the webhook with
// webhook.tls.mode certManager has no token to ask the API server about a scraper's
// with, these pods are not in the host network, and their metrics are counts of
// requests and swaps (docs/security.md, "Bounded servers").
func serveMetrics(addr string, reg *prometheus.Registry, limits httpbound.Limits, log logr.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", httpbound.NewInFlight(limits.MaxInFlight).Limit(
		httpbound.NewBodies(httpbound.NoBodyBytes, 0).Limit(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))))
	srv := limits.Server(mux, log.WithName("metrics-server"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "metrics server stopped", "addr", addr)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		<-done
	}, nil
}
