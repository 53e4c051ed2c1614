// Package webhook is sextant's admission webhook for pods, served by
// `sextant-sidecars webhook`.
//
// Mutation (CREATE): a pod with restartPolicy Never or OnFailure whose containers carry
// a sidecar marker (env SEXTANT_SIDECAR=true or KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT=true)
// is prepared so that stopping a sidecar cannot fail it:
//
//   - each marked regular container becomes a native sidecar (moved to the end of
//     initContainers with restartPolicy: Always), so the pod's phase, and the Job's
//     outcome, are decided by the main containers alone; and
//   - each marked container with a known command runs under sextant-sidecar-wrapper,
//     which an injected init container copies into an emptyDir: a SIGTERM ends the
//     sidecar at once (the command is no longer PID 1) and its exit is 0.
//
// The command moves into the pod annotation sidecar.sextant.io/command-<container>
// (a JSON array), which the downward API hands to the wrapper as an env variable, which
// lets the virtual-node controller change what the container runs
// by changing an annotation. A sidecar without a command in its spec runs its image's
// entrypoint, which the webhook cannot see; the pod may put it in that same annotation
// (the image's ENTRYPOINT followed by its CMD, or the ENTRYPOINT alone when the
// container has args: with the wrapper as the command, the runtime runs neither), else
// the sidecar is converted but not wrapped (see docs/sidecars.md). Nothing is injected
// that would make a pod the API server takes invalid, or that a quota or LimitRange on
// limits refuses (the install container's requests equal its limits): a pod with a
// container or volume of its own under the wrapper's names, or one for Windows, is left
// as written, and a sidecar that mounts something at the wrapper's path, whose command
// begins with an empty word, or whose command is too long for an env variable or the
// pod's annotations, is not wrapped; each with a warning.
//
// Validation (CREATE, UPDATE): sextant's scheduling annotations (bandwidth.sextant.io/*,
// numa.sextant.io/policy) are parsed with the ranker's own parsers, and a malformed one
// is refused with a message naming it and its accepted form.
package webhook
