// Package flagchecktest runs tables of command lines through a command's flag checks.
package flagchecktest

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// ImageForm is what an image flag's error says after the value: the accepted form.
const ImageForm = `: want an image reference [registry/]repository[:tag][@sha256:digest], such as ghcr.io/org/image:v1 (`

// Case is one command line of a flag validation table: Want is the error's start, ""
// for none. An alias of an unnamed struct, so tables may list cases unkeyed.
type Case = struct {
	Name string
	Args []string
	Want string
}

// Run parses each case's flags on a new command and checks what validate says.
func Run[O any](t *testing.T, cases []Case, newCmd func() (*cobra.Command, *O), validate func(O) error) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			cmd, o := newCmd()
			if err := cmd.ParseFlags(tc.Args); err != nil {
				t.Fatalf("parse %q: %v", tc.Args, err)
			}
			err := validate(*o)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tc.Want == "" && got != "" || tc.Want != "" && !strings.HasPrefix(got, tc.Want) {
				t.Errorf("%q: error %q, want %q", tc.Args, got, tc.Want)
			}
		})
	}
}
