package heartbeat

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

var (
	sharedMu sync.Mutex
	shared   = map[string]*Store{}
	offline  bool
)

// Offline makes Shared return an empty Store that never watches: for a process that
// builds the plugins only to print the configuration they run with
// (sextant-ranker --write-config-to), which needs no API server.
func Offline() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	offline = true
}

// IsOffline reports whether Offline was called.
func IsOffline() bool {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return offline
}

// SyncTimeout bounds Shared's wait for the first list of heartbeats: past it the ranker
// exits, naming what did not sync (the CRDs not installed, the API server unreachable).
// Long enough to ride out an API server restart; the chart's startup probe allows more.
const SyncTimeout = 3 * time.Minute

// Shared returns the one Store of the process for the API server of cfg, starting and
// syncing it on first use, so that every plugin of every profile reads the same cache.
func Shared(ctx context.Context, cfg *rest.Config) (*Store, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s, ok := shared[cfg.Host]; ok {
		return s, nil
	}
	if offline {
		s := NewFromObjects()
		shared[cfg.Host] = s
		return s, nil
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("heartbeat client: %w", err)
	}
	list, err := RESTRawLister(cfg)
	if err != nil {
		return nil, err
	}
	s := New(client, list, 0)
	// The store lives as long as the process: plugin contexts end with their profile.
	s.Start(context.WithoutCancel(ctx))
	syncCtx, cancel := context.WithTimeout(ctx, SyncTimeout)
	defer cancel()
	if err := s.WaitForSync(syncCtx); err != nil {
		return nil, err
	}
	shared[cfg.Host] = s
	return s, nil
}
