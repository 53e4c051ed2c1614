//go:build e2e

package e2e

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestImagesPushAndPull pushes images for linux/amd64 and linux/arm64 and the chart with
// `make push`'s code (scripts/images.sh push) to a registry the test serves, checks the
// index holds both platforms' binaries, and runs a pod on the real node from the pushed
// exit0 image by digest: the node's containerd pulls it from the registry.
func TestImagesPushAndPull(t *testing.T) {
	// Manifest reads of the exit0 repository: the node's pull shows here.
	const exit0Manifests = "/v2/sextant/exit0/manifests/"
	var (
		readsMu sync.Mutex
		reads   []string
	)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, exit0Manifests) {
			readsMu.Lock()
			reads = append(reads, strings.TrimPrefix(r.URL.Path, exit0Manifests))
			readsMu.Unlock()
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://") // 127.0.0.1:PORT, reachable by the node's containerd

	// Two small images keep the test quick; `make images` builds the others the same way.
	dir := t.TempDir()
	images := []string{"exit0", "sextant-sidecar-wrapper"}
	pkgs := map[string]string{"exit0": "./scripts/images/exit0", "sextant-sidecar-wrapper": "./agent/cmd/sextant-sidecar-wrapper"}
	arches := []string{"amd64", "arm64"}
	for _, arch := range arches {
		for _, img := range images {
			cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", filepath.Join(dir, "linux_"+arch, img), pkgs[img])
			cmd.Dir = repoRoot(t)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("build %s for %s: %v\n%s", img, arch, err, out)
			}
		}
		// Bytes after a static binary's segments are never loaded: they make this run's
		// exit0 images new to the node, whose containerd would otherwise find a former
		// run's content and read nothing but the index's existence from the registry.
		f, err := os.OpenFile(filepath.Join(dir, "linux_"+arch, "exit0"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fmt.Fprintf(f, "\nsextant e2e run %d\n", time.Now().UnixNano())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "IMAGE_PLATFORMS=linux/amd64,linux/arm64", "IMAGE_BIN_DIR="+dir,
		"IMAGE_LAYOUT_DIR="+filepath.Join(dir, "images"), "IMAGE_NAMES="+strings.Join(images, " "))
	script := filepath.Join(repoRoot(t), "scripts", "images.sh")
	for _, args := range [][]string{{"oci"}, {"push", host + "/sextant", "e2e"}} {
		cmd := exec.Command(script, args...)
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("scripts/images.sh %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		if args[0] == "push" {
			t.Logf("pushed:\n%s", out)
			checkPushed(t, host, string(out), images, arches)
		}
	}
	exit0 := pushedDigest(t, host+"/sextant/exit0")

	// The node pulls the index by digest and runs its image for the node's platform.
	ns := testNamespace(t)
	readsMu.Lock()
	reads = nil
	readsMu.Unlock()
	image := host + "/sextant/exit0@" + exit0
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pulled"},
		Spec: corev1.PodSpec{
			NodeName:      local.nodeName,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "exit0", Image: image, ImagePullPolicy: corev1.PullAlways,
			}},
		},
	}
	if _, err := local.kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodPhase(t, ns, pod.Name, corev1.PodSucceeded, 3*time.Minute)
	// The node read the index, then the image of its own platform.
	readsMu.Lock()
	pulled := slices.Clone(reads)
	readsMu.Unlock()
	if !slices.Contains(pulled, exit0) || !slices.Contains(pulled, hostImages["exit0"]) {
		t.Fatalf("the pod ran, but the node read exit0's manifests %v from the test's registry; want the index %s and the linux/%s image %s",
			pulled, exit0, runtime.GOARCH, hostImages["exit0"])
	}
	got, err := local.kube.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.ContainerStatuses) != 1 || !strings.HasSuffix(got.Status.ContainerStatuses[0].ImageID, "@"+exit0) {
		t.Fatalf("container statuses %+v: want the image ID of the pushed index %s", got.Status.ContainerStatuses, exit0)
	}
	t.Logf("pod ran %s (image ID %s; manifests read %v)", image, got.Status.ContainerStatuses[0].ImageID, pulled)
}

var (
	pushedLines []string
	// hostImages: each pushed image's manifest digest for this machine's platform.
	hostImages = map[string]string{}
)

// checkPushed checks scripts/images.sh push's output: a line REF@DIGEST per image and
// one for the chart; each image an index of one image per arch, each with its arch's
// binary; the chart a Helm chart artifact.
func checkPushed(t *testing.T, host, out string, images, arches []string) {
	t.Helper()
	pushedLines = strings.Fields(out)
	if len(pushedLines) != len(images)+1 {
		t.Fatalf("push printed %d references, want %d (images and the chart):\n%s", len(pushedLines), len(images)+1, out)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, img := range images {
		ref, err := name.ParseReference(host + "/sextant/" + img + ":e2e")
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("pull index %s: %v", ref, err)
		}
		digest, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if want := pushedDigest(t, host+"/sextant/"+img); digest.String() != want {
			t.Fatalf("%s: the registry has index %s, push printed %s", ref, digest, want)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Manifests) != len(arches) {
			t.Fatalf("%s: index has %d manifests, want %d (%v)", ref, len(m.Manifests), len(arches), arches)
		}
		for i, arch := range arches {
			d := m.Manifests[i]
			if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != arch {
				t.Fatalf("%s: manifest %d has platform %v, want linux/%s", ref, i, d.Platform, arch)
			}
			im, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := im.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Architecture != arch || cfg.OS != "linux" {
				t.Fatalf("%s: linux/%s image's config says %s/%s", ref, arch, cfg.OS, cfg.Architecture)
			}
			machine, err := binaryMachine(im, "/"+img)
			if err != nil {
				t.Fatalf("%s linux/%s: %v", ref, arch, err)
			}
			if machine != machines[arch] {
				t.Fatalf("%s linux/%s: /%s is built for %v, want %v", ref, arch, img, machine, machines[arch])
			}
			if arch == runtime.GOARCH {
				hostImages[img] = d.Digest.String()
				t.Logf("%s: linux/%s image %s", img, arch, d.Digest)
			}
		}
	}
	chart := pushedLines[len(pushedLines)-1]
	ref, err := name.ParseReference(chart)
	if err != nil {
		t.Fatalf("chart reference %q: %v", chart, err)
	}
	mf, err := remote.Get(ref)
	if err != nil {
		t.Fatalf("pull chart %s: %v", ref, err)
	}
	img, err := mf.Image()
	if err != nil {
		t.Fatal(err)
	}
	man, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if man.Config.MediaType != "application/vnd.cncf.helm.config.v1+json" || !strings.HasPrefix(ref.Context().RepositoryStr(), "sextant/sextant") {
		t.Fatalf("chart %s: config media type %q, want a Helm chart in repository sextant/sextant", ref, man.Config.MediaType)
	}
}

// pushedDigest is the digest push printed for the repository.
func pushedDigest(t *testing.T, repo string) string {
	t.Helper()
	for _, l := range pushedLines {
		if r, d, ok := strings.Cut(l, "@"); ok && strings.HasPrefix(r, repo+":") {
			return d
		}
	}
	t.Fatalf("push printed no reference of %s: %v", repo, pushedLines)
	return ""
}

// binaryMachine reads the ELF machine of the file at path in the image's layers.
func binaryMachine(img v1.Image, path string) (elf.Machine, error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				return 0, err
			}
			if "/"+strings.TrimPrefix(h.Name, "/") != path {
				continue
			}
			data, err := io.ReadAll(tr)
			rc.Close()
			if err != nil {
				return 0, err
			}
			f, err := elf.NewFile(strings.NewReader(string(data)))
			if err != nil {
				return 0, fmt.Errorf("%s is not an ELF binary: %w", path, err)
			}
			return f.Machine, nil
		}
		rc.Close()
	}
	return 0, fmt.Errorf("no %s in the image", path)
}
