package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"sextant.io/sextant/internal/version"
)

// addVersionFlag adds --version to root and so to every command under it.
func addVersionFlag(root *cobra.Command) {
	root.PersistentFlags().Bool("version", false, "print sextant-sidecars' version and exit")
}

// printVersion handles --version, in the root command and in each command alike, and
// reports whether the command should then stop.
func printVersion(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup("version")
	if f == nil || f.Value.String() != "true" {
		return false
	}
	fmt.Fprintf(cmd.OutOrStdout(), "sextant-sidecars %s\n", version.Version)
	return true
}
