// Command sextant-sidecars is sextant's sidecar control plane, apart from the ranker:
// sidecars need no special scheduler. `sextant-sidecars webhook` serves the admission
// webhook for pods (sidecar preparation, annotation validation, bandwidth quotas) and,
// unless told otherwise, the virtual-node sidecar controller;
// `sextant-sidecars virtual-node-controller` runs that controller alone, under an
// account of its own.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json, as the ranker's
)

func main() {
	os.Exit(cli.Run(newRootCommand()))
}

func newRootCommand() *cobra.Command {
	root := command("sextant-sidecars",
		"sextant's sidecar control plane: the admission webhook for pods and the virtual-node sidecar controller",
		`sextant-sidecars runs sextant's sidecar control plane. Each command is a Deployment of
the chart: the webhook, and the virtual-node controller.`,
		func() error { return nil },
		func(context.Context) error {
			return fmt.Errorf("sextant-sidecars: a command is required: %s", "webhook, virtual-node-controller")
		})
	addVersionFlag(root)
	root.AddCommand(newSidecarWebhookCommand())
	root.AddCommand(newVirtualNodeControllerCommand())
	return root
}
