package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"sextant.io/sextant/internal/charttest"
)

// Every sextant-ranker subcommand the chart runs takes the args the chart renders for it,
// with the default values and with the options that add flags, and passes its own
// start-up checks: a check that refuses what the chart renders fails here, not in a
// cluster.
func TestChartSubcommandArgsPassValidation(t *testing.T) {
	type subcommand struct {
		build    func() (*cobra.Command, func() error)
		object   string // Kind/name of the rendered object running it
		optional bool   // rendered only with some values
	}
	subcommands := map[string]subcommand{
		"sidecar-webhook": {build: func() (*cobra.Command, func() error) {
			cmd, o := sidecarWebhookCommand()
			// A closure: a method value would copy the options before parsing.
			return cmd, func() error { return o.validateWebhook() }
		}, object: "Deployment/sextant-webhook"},
		"virtual-node-controller": {build: func() (*cobra.Command, func() error) {
			cmd, o := virtualNodeControllerCommand()
			// A closure: a method value would copy the options before parsing.
			return cmd, func() error {
				if err := o.validateController(); err != nil {
					return err
				}
				return o.validateMetrics()
			}
		}, object: "Deployment/sextant-virtual-node-controller", optional: true},
		"check": {build: func() (*cobra.Command, func() error) {
			cmd, o := checkCommand()
			// A closure: a method value would copy the options before parsing.
			return cmd, func() error { return o.validate() }
		}, object: "Pod/sextant-check", optional: true},
	}
	digest := "sha256:" + strings.Repeat("0", 64)
	for _, values := range []map[string]any{
		nil,
		{
			"imagePullSecrets": []any{map[string]any{"name": "regcred"}, map[string]any{"name": "mirror"}},
			"image": map[string]any{
				"registry": "registry.example.com:5000/sextant", "tag": "v0.1.0",
				"ranker":         map[string]any{"digest": digest},
				"sidecarWrapper": map[string]any{"digest": digest},
				"exit0":          map[string]any{"digest": digest},
			},
		},
		{"webhook": map[string]any{"tls": map[string]any{"mode": "certManager"}}},
	} {
		objs := charttest.Objects(t, charttest.Render(t, values))
		found := map[string]bool{}
		for key, obj := range objs {
			for _, c := range charttest.Containers(obj) {
				args := charttest.Strings(c["args"])
				if len(args) == 0 {
					continue
				}
				sub, ok := subcommands[args[0]]
				if !ok {
					continue
				}
				found[args[0]] = true
				t.Run(fmt.Sprintf("%s/%v", key, values), func(t *testing.T) {
					// Some flags default to the container's environment.
					setContainerEnv(t, c)
					cmd, validate := sub.build()
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
			if !found[name] && !sub.optional {
				t.Errorf("values %v: no rendered container runs %s (%s)", values, name, sub.object)
			}
		}
	}
}

// setContainerEnv sets the container's environment for the rest of the test: literal
// values as they are, downward-API fields as a pod of the release would see them.
func setContainerEnv(t *testing.T, c map[string]any) {
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
