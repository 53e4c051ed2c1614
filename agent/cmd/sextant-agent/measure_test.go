//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// TestMeasureJSON runs measure on the loopback of a namespace of its own while UDP
// packets cross it, and checks the JSON shape the design contract gives: whole bits per
// second (a fraction fails to decode into the uint64 below), agreeing with the bytes
// counted over the duration.
func TestMeasureJSON(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root for a network namespace and BPF")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: needs ip on PATH")
	}
	ns := fmt.Sprintf("sextant-measure-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, out)
	}

	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() { sent <- sendUDP(ns, stop) }()
	t.Cleanup(func() {
		close(stop)
		if err := <-sent; err != nil {
			t.Errorf("sending: %v", err)
		}
	})

	var out bytes.Buffer
	err := runMeasure(context.Background(), &out, measureOptions{
		interfaces: []string{"lo"}, duration: 2 * time.Second, output: "json",
		attachMode: "auto", sysfsRoot: "/", netns: "/var/run/netns/" + ns,
	})
	if err != nil {
		t.Fatalf("measure: %v", err)
	}
	var res struct {
		DurationSeconds float64 `json:"durationSeconds"`
		Interfaces      []struct {
			Name    string `json:"name"`
			Ingress struct {
				Bytes, Packets, BitsPerSecond uint64
			} `json:"ingress"`
			Egress struct {
				Bytes, Packets, BitsPerSecond uint64
			} `json:"egress"`
		} `json:"interfaces"`
	}
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("decode %q: %v", out.String(), err)
	}
	if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "lo" {
		t.Fatalf("interfaces %+v, want lo alone", res.Interfaces)
	}
	if res.DurationSeconds < 2 {
		t.Errorf("durationSeconds %v, want at least the 2 s asked", res.DurationSeconds)
	}
	in := res.Interfaces[0].Ingress
	// About 100 datagrams, each over 1000 bytes, cross lo in 2 s.
	if in.Packets < 20 || in.Bytes < 20*1000 {
		t.Errorf("ingress %+v, want the datagrams sent", in)
	}
	want := float64(in.Bytes) * 8 / res.DurationSeconds
	if d := float64(in.BitsPerSecond) - want; d < -1 || d > 1 {
		t.Errorf("ingress bitsPerSecond %d, want %.0f: bytes*8/durationSeconds", in.BitsPerSecond, want)
	}
}

// sendUDP sends a 1000-byte datagram to 127.0.0.1 every 20 ms from inside the
// namespace ns until stop closes. The goroutine's thread enters ns and is never given
// back: the runtime ends it when the goroutine returns locked.
func sendUDP(ns string, stop <-chan struct{}) error {
	runtime.LockOSThread()
	h, err := netns.GetFromName(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return err
	}
	conn, err := net.Dial("udp", "127.0.0.1:9")
	if err != nil {
		return err
	}
	defer conn.Close()
	payload := make([]byte, 1000)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-tick.C:
			// Nothing listens on port 9: the datagram still crosses lo, and the ICMP
			// error it draws makes a later write fail, which does not matter here.
			_, _ = conn.Write(payload)
		}
	}
}
