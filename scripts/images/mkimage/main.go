// Command mkimage writes a single-layer container image as an image tarball that
// `ctr images import` accepts, from files on this machine. The local cluster has no
// image registry: every image it runs is made this way and imported into containerd.
//
//	mkimage --ref sextant.local/busybox:dev --out busybox.tar \
//	  --file /bin/busybox=/usr/bin/busybox-static --link /bin/sh=busybox --entrypoint /bin/sh
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	var (
		ref        = fs.String("ref", "", "image reference to tag the image with, e.g. sextant.local/busybox:dev")
		out        = fs.String("out", "", "path of the image tarball to write")
		entrypoint = fs.String("entrypoint", "", "entrypoint, words separated by spaces")
		cmd        = fs.String("cmd", "", "default arguments, words separated by spaces")
		files      listFlag
		links      listFlag
	)
	fs.Var(&files, "file", "IMAGEPATH=HOSTPATH: copy a host file into the image (mode kept); repeatable")
	fs.Var(&links, "link", "IMAGEPATH=TARGET: a symlink in the image; repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ref == "" || *out == "" {
		return errors.New("--ref and --out are required")
	}
	tag, err := name.NewTag(*ref)
	if err != nil {
		return fmt.Errorf("parse --ref %q (want REPOSITORY:TAG): %w", *ref, err)
	}
	layer, err := buildLayer(files, links)
	if err != nil {
		return err
	}
	// The config goes on an empty image first: AppendLayers then records the layer's
	// diff ID in it.
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		// A fixed creation time keeps the image's digest the same for the same inputs,
		// so an unchanged image is not imported again.
		Created: v1.Time{Time: time.Unix(0, 0).UTC()},
		RootFS:  v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: strings.Fields(*entrypoint),
			Cmd:        strings.Fields(*cmd),
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"},
		},
	})
	if err != nil {
		return fmt.Errorf("set config: %w", err)
	}
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return fmt.Errorf("append layer: %w", err)
	}
	tmp := *out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return os.Rename(tmp, *out)
}

// buildLayer makes one uncompressed layer holding the files, the symlinks and every
// directory above them.
func buildLayer(files, links []string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	dirs := map[string]bool{}
	var addDirs func(p string) error
	addDirs = func(p string) error {
		d := path.Dir(p)
		if d == "/" || d == "." || dirs[d] {
			return nil
		}
		if err := addDirs(d); err != nil {
			return err
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch})
	}
	type entry struct{ dst, src string }
	parse := func(list []string, what string) ([]entry, error) {
		var es []entry
		for _, f := range list {
			dst, src, ok := strings.Cut(f, "=")
			if !ok || !path.IsAbs(dst) || src == "" {
				return nil, fmt.Errorf("--%s %q: want /IMAGE/PATH=SOURCE", what, f)
			}
			es = append(es, entry{path.Clean(dst), src})
		}
		sort.Slice(es, func(i, j int) bool { return es[i].dst < es[j].dst })
		return es, nil
	}
	fileEntries, err := parse(files, "file")
	if err != nil {
		return nil, err
	}
	linkEntries, err := parse(links, "link")
	if err != nil {
		return nil, err
	}
	for _, e := range fileEntries {
		if err := addDirs(e.dst); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(e.src)
		if err != nil {
			return nil, fmt.Errorf("read --file source: %w", err)
		}
		st, err := os.Stat(e.src)
		if err != nil {
			return nil, fmt.Errorf("stat --file source: %w", err)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(e.dst, "/"), Mode: int64(st.Mode().Perm()), Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	for _, e := range linkEntries {
		if err := addDirs(e.dst); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(e.dst, "/"), Linkname: e.src, Mode: 0o777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	// Containers expect a writable /tmp.
	if !dirs["/tmp"] {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}
