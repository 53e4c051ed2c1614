// Command pushimage pushes the image indexes of OCI image layouts that mkimage --layout
// wrote to a registry, as REGISTRY/NAME:TAG where NAME is the layout directory's name,
// and prints each pushed reference with its digest, one a line. Credentials come from
// the Docker config (~/.docker/config.json, `docker login`), as for docker and crane.
//
//	pushimage --registry registry.example.com/sextant --tag v0.1.0 bin/images/sextant-agent ...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pushimage:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pushimage", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: pushimage --registry HOST[/PATH] --tag TAG [--plain-http] LAYOUT...")
		fs.PrintDefaults()
	}
	var (
		registry  = fs.String("registry", "", "registry and path to push to, e.g. registry.example.com/sextant")
		tag       = fs.String("tag", "", "tag to push every image as, e.g. v0.1.0")
		plainHTTP = fs.Bool("plain-http", false, "talk plain HTTP to the registry (localhost and 127.0.0.1 always are)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *registry == "" || *tag == "" || fs.NArg() == 0 {
		fs.Usage()
		return errors.New("--registry, --tag and at least one layout directory are required")
	}
	var opts []name.Option
	if *plainHTTP {
		opts = append(opts, name.Insecure)
	}
	for _, dir := range fs.Args() {
		ref, err := name.NewTag(*registry+"/"+filepath.Base(filepath.Clean(dir))+":"+*tag, opts...)
		if err != nil {
			return fmt.Errorf("image reference for %s (want --registry HOST[/PATH], --tag TAG): %w", dir, err)
		}
		digest, err := push(ctx, dir, ref)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s@%s\n", ref, digest)
	}
	return nil
}

// push writes the one image index of the layout at dir to ref and returns its digest.
func push(ctx context.Context, dir string, ref name.Tag) (string, error) {
	outer, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", fmt.Errorf("read OCI layout %s: %w", dir, err)
	}
	m, err := outer.IndexManifest()
	if err != nil {
		return "", fmt.Errorf("read %s/index.json: %w", dir, err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return "", fmt.Errorf("layout %s holds %d entries; want the one image index mkimage --layout writes", dir, len(m.Manifests))
	}
	idx, err := outer.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return "", fmt.Errorf("read image index of %s: %w", dir, err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return m.Manifests[0].Digest.String(), nil
}
