package charttest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Subcommand is a command a chart container runs (its args[0]), as the binary builds it.
type Subcommand struct {
	// Build returns the command and a check of its parsed options, as the command runs
	// it before it starts.
	Build    func() (*cobra.Command, func() error)
	Object   string // Kind/name of the rendered object running it
	Optional bool   // rendered only with some values
}

// SubcommandValues are the value sets CheckSubcommandArgs renders the chart with: the
// defaults, a private registry with digests, and cert-manager serving certificates.
func SubcommandValues() []map[string]any {
	digest := "sha256:" + strings.Repeat("0", 64)
	return []map[string]any{
		nil,
		{
			"imagePullSecrets": []any{map[string]any{"name": "regcred"}, map[string]any{"name": "mirror"}},
			"image": map[string]any{
				"registry": "registry.example.com:5000/sextant", "tag": "v0.1.0",
				"ranker":         map[string]any{"digest": digest},
				"sidecars":       map[string]any{"digest": digest},
				"sidecarWrapper": map[string]any{"digest": digest},
				"exit0":          map[string]any{"digest": digest},
			},
		},
		{"webhook": map[string]any{"tls": map[string]any{"mode": "certManager"}}},
	}
}

// CheckSubcommandArgs renders the chart with each of SubcommandValues and checks that
// every container of an image named image (its repository's last element) whose args
// start with one of subcommands parses the rest and passes the command's own checks:
// a check that refuses what the chart renders fails in a unit test, not in a cluster.
func CheckSubcommandArgs(t *testing.T, image string, subcommands map[string]Subcommand) {
	t.Helper()
	for _, values := range SubcommandValues() {
		objs := Objects(t, Render(t, values))
		found := map[string]bool{}
		for key, obj := range objs {
			for _, c := range Containers(obj) {
				args := Strings(c["args"])
				if len(args) == 0 || imageName(fmt.Sprint(c["image"])) != image {
					continue
				}
				sub, ok := subcommands[args[0]]
				if !ok {
					continue
				}
				found[args[0]] = true
				t.Run(fmt.Sprintf("%s/%v", key, values), func(t *testing.T) {
					// Some flags default to the container's environment.
					SetContainerEnv(t, c)
					cmd, validate := sub.Build()
					if err := cmd.ParseFlags(args[1:]); err != nil {
						t.Fatalf("%s runs %s with args it does not take: %v", key, args[0], err)
					}
					if err := validate(); err != nil {
						t.Errorf("%s runs %s with args its checks refuse: %v", key, args[0], err)
					}
				})
			}
		}
		for name, sub := range subcommands {
			if !found[name] && !sub.Optional {
				t.Errorf("values %v: no rendered container of image %s runs %s (%s)", values, image, name, sub.Object)
			}
		}
	}
}

// imageName is the last element of an image reference's repository:
// "r.example/team/sextant-ranker@sha256:..." and "sextant-ranker:v1" are sextant-ranker.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		ref = ref[i+1:]
	}
	ref, _, _ = strings.Cut(ref, ":")
	return ref
}

// SetContainerEnv sets the container's environment for the rest of the test: literal
// values as they are, downward-API fields as a pod of the release would see them.
func SetContainerEnv(t *testing.T, c map[string]any) {
	t.Helper()
	fields := map[string]string{"metadata.namespace": "sextant-system", "metadata.name": "pod", "spec.nodeName": "node"}
	env, _ := c["env"].([]any)
	for _, e := range env {
		e, _ := e.(map[string]any)
		name, _ := e["name"].(string)
		if v, ok := e["value"]; ok {
			t.Setenv(name, fmt.Sprint(v))
			continue
		}
		from, _ := e["valueFrom"].(map[string]any)
		ref, _ := from["fieldRef"].(map[string]any)
		if v, ok := fields[fmt.Sprint(ref["fieldPath"])]; ok {
			t.Setenv(name, v)
		}
	}
}
