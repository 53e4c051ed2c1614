// Package bpf holds sextant's eBPF programs and the Go bindings that bpf2go
// generates from them. The generated files are committed so that building the
// agent never needs clang; `go generate ./bpf` rebuilds them.
//
// meter.c counts bytes and packets per interface and direction at tc ingress
// and egress (see the comments there for the map layout and the verdict).
// classify.c tells the agent's shaping qdiscs which pod each packet belongs to.
package bpf

// The -I for the multiarch include directory is where Debian keeps asm/types.h,
// which linux/bpf.h needs; clang does not search it for -target bpf.
//go:generate go tool bpf2go -target bpfel -type counters -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" Meter meter.c
//go:generate go tool bpf2go -target bpfel -type address -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" Classify classify.c

// Direction values, as meter.c stores them in a key.
const (
	DirectionIngress uint32 = 0
	DirectionEgress  uint32 = 1
)
