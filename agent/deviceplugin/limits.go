package deviceplugin

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// ServerLimits bound each endpoint's gRPC server. Its socket is in the kubelet's
// device-plugins directory, which only root reaches, and its client is the kubelet: one
// connection with one ListAndWatch stream, and one call at a time while it admits pods.
// The limits keep anything else that connects there, or a kubelet gone wrong, from
// growing the agent.
type ServerLimits struct {
	// MaxRecvMsgSize bounds a request. The largest the kubelet sends lists a kind's
	// device IDs (PCI addresses, 12 bytes each) once or twice: 1 MiB holds tens of
	// thousands (gRPC's default is 4 MiB).
	MaxRecvMsgSize int
	// MaxConcurrentStreams bounds the calls and streams one connection carries at once;
	// more wait in the client.
	MaxConcurrentStreams uint32
	// MaxInFlightCalls and MaxInFlightStreams bound the unary calls and the
	// ListAndWatch streams being served at once over every connection; more are refused
	// with ResourceExhausted.
	MaxInFlightCalls, MaxInFlightStreams int
	// ConnectionTimeout bounds a new connection's handshake: a client that connects and
	// says nothing is dropped.
	ConnectionTimeout time.Duration
	// MinPingInterval is the least time between a client's keepalive pings; a client
	// pinging more often is disconnected (too_many_pings). The kubelet does not ping.
	MinPingInterval time.Duration
	// MaxConnectionIdle closes a connection without a call or stream for this long;
	// the kubelet's always has its ListAndWatch stream.
	MaxConnectionIdle time.Duration
}

// DefaultServerLimits are the limits of a Config that sets none.
var DefaultServerLimits = ServerLimits{
	MaxRecvMsgSize:       1 << 20,
	MaxConcurrentStreams: 16,
	MaxInFlightCalls:     16,
	MaxInFlightStreams:   4,
	ConnectionTimeout:    10 * time.Second,
	MinPingInterval:      time.Minute,
	MaxConnectionIdle:    5 * time.Minute,
}

// withDefaults is l with each field not set taken from DefaultServerLimits.
func (l ServerLimits) withDefaults() ServerLimits {
	d := DefaultServerLimits
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setDuration := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.MaxRecvMsgSize, d.MaxRecvMsgSize)
	set(&l.MaxInFlightCalls, d.MaxInFlightCalls)
	set(&l.MaxInFlightStreams, d.MaxInFlightStreams)
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = d.MaxConcurrentStreams
	}
	setDuration(&l.ConnectionTimeout, d.ConnectionTimeout)
	setDuration(&l.MinPingInterval, d.MinPingInterval)
	setDuration(&l.MaxConnectionIdle, d.MaxConnectionIdle)
	return l
}

// serverOptions are the gRPC server options that apply l.
func (l ServerLimits) serverOptions() []grpc.ServerOption {
	calls, streams := make(chan struct{}, l.MaxInFlightCalls), make(chan struct{}, l.MaxInFlightStreams)
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.ConnectionTimeout(l.ConnectionTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.MinPingInterval}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.MaxConnectionIdle}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			select {
			case calls <- struct{}{}:
				defer func() { <-calls }()
				return handler(ctx, req)
			default:
				return nil, status.Errorf(codes.ResourceExhausted, "%d calls in flight already", cap(calls))
			}
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			select {
			case streams <- struct{}{}:
				defer func() { <-streams }()
				return handler(srv, ss)
			default:
				return status.Errorf(codes.ResourceExhausted, "%d streams open already", cap(streams))
			}
		}),
	}
}
