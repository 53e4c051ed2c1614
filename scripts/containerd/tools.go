//go:build tools

// Package containerd only anchors the containerd commands scripts/containerd.sh builds,
// so that `go mod tidy` keeps their dependencies in go.sum.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
