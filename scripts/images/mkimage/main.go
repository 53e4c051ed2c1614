// Command mkimage writes a single-layer container image, from files on this machine,
// either as an image tarball that `ctr images import` accepts (--out; the local cluster
// imports every image it runs this way) or as an OCI image layout holding an image
// index with one image per platform (--layout; what `make push` pushes to a registry).
//
//	mkimage --ref sextant.local/busybox:dev --out busybox.tar \
//	  --file /bin/busybox=/usr/bin/busybox-static --link /bin/sh=busybox --entrypoint /bin/sh
//	mkimage --ref sextant.local/exit0:dev --layout bin/images/exit0 \
//	  --platforms linux/amd64,linux/arm64 --file /exit0=bin/linux_{arch}/exit0 --entrypoint /exit0
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
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
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
		out        = fs.String("out", "", "path of the image tarball to write (one platform: the first of --platforms)")
		layoutDir  = fs.String("layout", "", "directory of the OCI image layout to write, replacing it: an image index with one image per platform")
		platforms  = fs.String("platforms", "linux/"+runtime.GOARCH, "comma-separated OS/ARCH list, e.g. linux/amd64,linux/arm64; {arch} in a --file source is replaced by each ARCH")
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
	if *ref == "" || (*out == "") == (*layoutDir == "") {
		return errors.New("--ref and one of --out and --layout are required")
	}
	tag, err := name.NewTag(*ref)
	if err != nil {
		return fmt.Errorf("parse --ref %q (want REPOSITORY:TAG): %w", *ref, err)
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	spec := imageSpec{files: files, links: links, entrypoint: strings.Fields(*entrypoint), cmd: strings.Fields(*cmd)}
	if *out != "" {
		img, err := spec.image(plats[0], false)
		if err != nil {
			return err
		}
		tmp := *out + ".tmp"
		if err := tarball.WriteToFile(tmp, tag, img); err != nil {
			return fmt.Errorf("write %s: %w", *out, err)
		}
		return os.Rename(tmp, *out)
	}
	return writeLayout(*layoutDir, tag, spec, plats)
}

// parsePlatforms reads --platforms: OS/ARCH entries, at least one, no repeats.
func parsePlatforms(list string) ([]v1.Platform, error) {
	var plats []v1.Platform
	seen := map[string]bool{}
	for _, p := range strings.Split(list, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || osName == "" || arch == "" || strings.Contains(arch, "/") || seen[p] {
			return nil, fmt.Errorf("--platforms %q: want a comma-separated list of distinct OS/ARCH, e.g. linux/amd64,linux/arm64", list)
		}
		seen[p] = true
		plats = append(plats, v1.Platform{OS: osName, Architecture: arch})
	}
	return plats, nil
}

// writeLayout writes an OCI image layout at dir holding one image index, tagged with
// tag's tag, of one image per platform. The directory is replaced whole, through a
// sibling, so a reader never sees a half-written one.
func writeLayout(dir string, tag name.Tag, spec imageSpec, plats []v1.Platform) error {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, plat := range plats {
		img, err := spec.image(plat, true)
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &plat},
		})
	}
	tmp := filepath.Clean(dir) + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("create layout %s: %w", tmp, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
	})); err != nil {
		return fmt.Errorf("write image index to %s: %w", tmp, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// imageSpec is what every platform's image holds; {arch} in a file's source names the
// platform's architecture.
type imageSpec struct {
	files, links    []string
	entrypoint, cmd []string
}

// image is the platform's image: with Docker media types for a tarball to import (as
// before, so the digests of unchanged images stay), with OCI ones in an OCI index.
func (s imageSpec) image(plat v1.Platform, oci bool) (v1.Image, error) {
	files := make([]string, len(s.files))
	for i, f := range s.files {
		files[i] = strings.ReplaceAll(f, "{arch}", plat.Architecture)
	}
	layer, err := buildLayer(files, s.links, oci)
	if err != nil {
		return nil, err
	}
	base := empty.Image
	if oci {
		base = mutate.ConfigMediaType(mutate.MediaType(base, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	// The config goes on an empty image first: AppendLayers then records the layer's
	// diff ID in it.
	img, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: plat.Architecture,
		OS:           plat.OS,
		// A fixed creation time keeps the image's digest the same for the same inputs,
		// so an unchanged image is not imported again.
		Created: v1.Time{Time: time.Unix(0, 0).UTC()},
		RootFS:  v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: s.entrypoint,
			Cmd:        s.cmd,
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	return img, nil
}

// buildLayer makes one uncompressed layer holding the files, the symlinks and every
// directory above them.
func buildLayer(files, links []string, oci bool) (v1.Layer, error) {
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
	var opts []tarball.LayerOption
	if oci {
		opts = append(opts, tarball.WithMediaType(types.OCILayer))
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, opts...)
}
