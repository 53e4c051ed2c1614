// Package version carries the build's version, set by the Makefile through -ldflags.
package version

// Version is the sextant release, e.g. v0.1.0; "dev" in builds without -ldflags.
var Version = "dev"
