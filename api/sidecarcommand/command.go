// Package sidecarcommand is the form of a wrapped sidecar's command: the admission
// webhook takes it from the pod (its spec, or the pod author's annotation
// sidecar.sextant.io/command-<container>) and writes it into an annotation, and the
// sidecar wrapper reads it back from there and runs it. It imports only the standard
// library, because the wrapper is a small static binary copied into every sidecar the
// webhook prepares.
package sidecarcommand

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Env is where the wrapper finds the command: the downward API hands it the annotation.
const Env = "SEXTANT_SIDECAR_COMMAND"

// Form says what Parse accepts, for error messages.
const Form = `a non-empty JSON array of strings, e.g. ["/usr/local/bin/envoy","-c","/etc/envoy.yaml"]`

// Parse reads a command: a JSON array of strings, at least one, the first not empty. A
// null, in place of the array or of a word, is refused rather than read as empty.
func Parse(raw string) ([]string, error) {
	var words []*string
	if err := json.Unmarshal([]byte(raw), &words); err != nil || words == nil {
		return nil, errors.New("not a JSON array of strings")
	}
	cmd := make([]string, len(words))
	for i, w := range words {
		if w == nil {
			return nil, fmt.Errorf("word %d is null, not a string", i)
		}
		cmd[i] = *w
	}
	if len(cmd) == 0 || cmd[0] == "" {
		return nil, errors.New("empty command")
	}
	return cmd, nil
}
