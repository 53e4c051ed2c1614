package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// An OCI layout holds one index of one image per platform, each with its own file.
func TestLayoutHasOneImagePerPlatform(t *testing.T) {
	dir := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		if err := os.WriteFile(filepath.Join(dir, "bin-"+arch), []byte("binary for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "exit0")
	for range 2 { // a second run replaces the layout
		if err := run([]string{"--ref", "sextant.local/exit0:dev", "--layout", out, "--platforms", "linux/amd64,linux/arm64",
			"--file", "/exit0=" + filepath.Join(dir, "bin-{arch}"), "--entrypoint", "/exit0"}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(outer.Manifests) != 1 || outer.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "dev" {
		t.Fatalf("index.json: %+v, want one index tagged dev", outer.Manifests)
	}
	idx, err := p.ImageIndex(outer.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("%d images, want 2", len(m.Manifests))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		d := m.Manifests[i]
		if d.Platform == nil || d.Platform.String() != "linux/"+arch {
			t.Fatalf("image %d platform %v, want linux/%s", i, d.Platform, arch)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != arch || strings.Join(cfg.Config.Entrypoint, " ") != "/exit0" {
			t.Fatalf("linux/%s config: arch %s entrypoint %v", arch, cfg.Architecture, cfg.Config.Entrypoint)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("linux/%s: %d layers (%v), want 1", arch, len(layers), err)
		}
		size, err := layers[0].Size()
		if err != nil || size == 0 {
			t.Fatalf("linux/%s layer size %d (%v)", arch, size, err)
		}
	}
	if m.Manifests[0].Digest == m.Manifests[1].Digest {
		t.Fatal("both platforms have the same image: the {arch} file was not substituted")
	}
}

func TestRefusesBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--ref", "a:b"},
		{"--ref", "a:b", "--out", "x.tar", "--layout", "x"},
		{"--ref", "a:b", "--layout", "x", "--platforms", "linux"},
		{"--ref", "a:b", "--layout", "x", "--platforms", "linux/amd64,linux/amd64"},
	} {
		if err := run(args); err == nil {
			t.Errorf("mkimage %v: no error", args)
		}
	}
}
