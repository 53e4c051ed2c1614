//go:build tools

// Package runc only anchors the runc command scripts/runc.sh builds, so that
// `go mod tidy` keeps its dependencies in go.sum.
package runc

import _ "github.com/opencontainers/runc"
