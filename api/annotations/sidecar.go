package annotations

const (
	// SidecarCommandPrefix + container name holds a sidecar's command as a JSON array;
	// the webhook moves it there and the wrapper reads it back.
	SidecarCommandPrefix = "sidecar.sextant.io/command-"
	// SidecarNative set to "false" keeps the pod's sidecars regular containers (they
	// are still wrapped, so their exit after a stop is 0).
	SidecarNative = "sidecar.sextant.io/native"
	// SidecarPrepared is a label: it marks a pod the webhook prepared, and the
	// virtual-node controller watches only these.
	SidecarPrepared = "sidecar.sextant.io/prepared"
)

// SidecarCommand is the annotation that holds the named container's command.
func SidecarCommand(container string) string { return SidecarCommandPrefix + container }
