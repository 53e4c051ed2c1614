package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarcommand"
	"sextant.io/sextant/api/sidecarrules"
)

const (
	// EnvCommand is where the wrapper finds the command (downward API); the wrapper
	// reads it too, so it is defined in sidecarcommand.
	EnvCommand = sidecarcommand.Env
	// WrapperDir is where the wrapper is mounted in sidecars, WrapperPath the binary;
	// the agent tells a wrapped sidecar by them too, so they are defined in sidecarrules.
	WrapperDir  = sidecarrules.WrapperDir
	WrapperPath = sidecarrules.WrapperPath
	// WrapperVolume is the emptyDir holding the wrapper; InstallContainer copies it in.
	WrapperVolume    = "sextant-sidecar"
	InstallContainer = "sextant-sidecar-install"
	// wrapperInImage is the wrapper's path in its own image.
	wrapperInImage = "/sextant-sidecar-wrapper"

	// maxCommandJSON bounds a command moved into an annotation, as JSON: the wrapper gets
	// it as one env variable, and the kernel fails the exec (E2BIG) of a process whose
	// single env string, name and NUL included, exceeds MAX_ARG_STRLEN (128 KiB).
	maxCommandJSON = 120 << 10
	// maxAnnotationsSize is the API server's limit on all of a pod's annotations
	// together (keys and values): over it, the pod is refused.
	maxAnnotationsSize = apivalidation.TotalAnnotationSizeLimitB
)

// The install container's default resources, requests equal to limits (see
// MutatorConfig.InstallCPU): copying the wrapper, a static binary, needs little of
// either (docs/sidecars.md).
var (
	DefaultInstallCPU    = resource.MustParse("100m")
	DefaultInstallMemory = resource.MustParse("32Mi")
)

// MutatorConfig says what the webhook injects.
type MutatorConfig struct {
	// WrapperImage holds sextant-sidecar-wrapper at /sextant-sidecar-wrapper.
	WrapperImage      string
	WrapperPullPolicy corev1.PullPolicy
	// ImagePullSecrets are added to a pod that gets the wrapper's init container, where
	// it lacks them: WrapperImage may be in a private registry the pod's own images are
	// not.
	ImagePullSecrets []string
	// InstallCPU and InstallMemory are the install container's requests and limits
	// (zero: DefaultInstallCPU, DefaultInstallMemory). Requests equal limits, so a
	// ResourceQuota on limits.cpu or limits.memory, a LimitRange's maxLimitRequestRatio,
	// or a Guaranteed pod's QoS class are not undone by it. A pod requests at least what
	// its largest init container does: on a node that runs many Jobs whose containers
	// request little, a smaller InstallCPU lets more of them run at once, and makes the
	// copy slower.
	InstallCPU, InstallMemory resource.Quantity
}

// Result is what Mutate did.
type Result struct {
	Pod     *corev1.Pod
	Changed bool
	// Warnings go back to the client (kubectl prints them).
	Warnings []string
}

// Mutate prepares the pod's sidecars (see the package comment). It never changes its
// argument. A pod it has prepared already comes out unchanged, so a reinvocation is
// harmless. The error, if any, says which annotation is malformed.
func (cfg MutatorConfig) Mutate(in *corev1.Pod) (Result, error) {
	pod := in.DeepCopy()
	res := Result{Pod: pod}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever && pod.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return res, nil // Always: a service, not a job; sidecars are left alone
	}
	var mains, marked []int
	for i := range pod.Spec.Containers {
		if sidecarrules.IsSidecar(&pod.Spec.Containers[i]) {
			marked = append(marked, i)
		} else {
			mains = append(mains, i)
		}
	}
	var markedNative []int
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if sidecarrules.IsNativeSidecar(c) && sidecarrules.IsSidecar(c) {
			markedNative = append(markedNative, i)
		}
	}
	if len(marked)+len(markedNative) == 0 {
		return res, nil
	}
	if why := windows(pod); why != "" {
		// The wrapper is a Linux binary, and the install container's Linux-only
		// securityContext fields make a pod with spec.os.name windows invalid.
		res.Warnings = append(res.Warnings, "sextant: the pod is for Windows ("+why+"), where the sidecar wrapper cannot run; the pod is left as written")
		return res, nil
	}
	if len(mains) == 0 {
		res.Warnings = append(res.Warnings, "sextant: every container is marked as a sidecar, so none would ever be stopped; the pod is left as written")
		return res, nil
	}
	if clash := nameClash(pod); clash != "" {
		res.Warnings = append(res.Warnings, "sextant: "+clash+", which the webhook needs for its own; the pod is left as written (its sidecars are still stopped, but their exit code counts)")
		return res, nil
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	native := !strings.EqualFold(pod.Annotations[annotations.SidecarNative], "false")

	wrapped := false
	wrap := func(c *corev1.Container, regular bool) error {
		ok, warning, err := cfg.wrap(pod, c)
		if err != nil {
			return err
		}
		if !ok && regular && pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure {
			// Stopped, it may exit non-zero and be restarted, which counts against the
			// Job's backoffLimit: the agent then leaves it running.
			warning += fmt.Sprintf("; as a regular container of an OnFailure pod, sidecar %s is stopped once: if it exits non-zero on SIGTERM, "+
				"the kubelet restarts it, it is not stopped again, and its Job does not complete: give it a command, put what its image runs in the annotation %s "+
				"(its ENTRYPOINT followed by its CMD, or the ENTRYPOINT alone if the container has args), or let it be a native sidecar", c.Name, annotations.SidecarCommand(c.Name))
		}
		if warning != "" {
			res.Warnings = append(res.Warnings, warning)
		}
		wrapped = wrapped || ok
		return nil
	}
	for _, i := range markedNative {
		if err := wrap(&pod.Spec.InitContainers[i], false); err != nil {
			return Result{}, err
		}
	}
	var keep, converted []corev1.Container
	for i := range pod.Spec.Containers {
		c := pod.Spec.Containers[i]
		if !slices.Contains(marked, i) {
			keep = append(keep, c)
			continue
		}
		if err := wrap(&c, !native); err != nil {
			return Result{}, err
		}
		if native {
			c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
			converted = append(converted, c)
		} else {
			keep = append(keep, c)
		}
	}
	pod.Spec.Containers = keep
	// After every init container, as the sidecar started after them before.
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, converted...)

	if wrapped {
		if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == WrapperVolume }) {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: WrapperVolume, VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("32Mi"))},
			}})
		}
		if !slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == InstallContainer }) {
			// First: the wrapper must be in place before any sidecar starts.
			pod.Spec.InitContainers = append([]corev1.Container{cfg.installContainer()}, pod.Spec.InitContainers...)
		}
		for _, name := range cfg.ImagePullSecrets {
			if !slices.ContainsFunc(pod.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == name }) {
				pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
			}
		}
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[annotations.SidecarPrepared] = "true"
	res.Changed = true
	return res, nil
}

// wrap puts the wrapper in front of one sidecar's command. It reports whether the
// container is wrapped (now or already), and a warning when it cannot be.
func (cfg MutatorConfig) wrap(pod *corev1.Pod, c *corev1.Container) (bool, string, error) {
	if len(c.Command) > 0 && c.Command[0] == WrapperPath {
		return true, "", nil // prepared before
	}
	if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return path.Clean(m.MountPath) == WrapperDir }) {
		// A second mount at the same path makes the pod invalid.
		return false, fmt.Sprintf("sextant: sidecar %s mounts something of its own at %s, where the wrapper goes, so it is not wrapped; stopping it may take its grace period", c.Name, WrapperDir), nil
	}
	key := annotations.SidecarCommand(c.Name)
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return false, fmt.Sprintf("sextant: sidecar %s: its name is too long for the annotation %s, so it is not wrapped; stopping it may take its grace period", c.Name, key), nil
	}
	command := c.Command
	fromAnnotation := len(command) == 0
	if fromAnnotation {
		raw, ok := pod.Annotations[key]
		if !ok {
			// With the wrapper as its command, the runtime runs neither the image's
			// ENTRYPOINT nor, without args, its CMD: the annotation must hold what they did.
			what := "the image's ENTRYPOINT followed by its CMD, e.g. [\"/usr/local/bin/envoy\",\"-c\",\"/etc/envoy.yaml\"]"
			if len(c.Args) > 0 {
				what = "the image's ENTRYPOINT (the container's args follow it), e.g. [\"/usr/local/bin/envoy\"]"
			}
			return false, fmt.Sprintf("sextant: sidecar %s has no command in the pod spec, so it runs its image's entrypoint, "+
				"which the webhook cannot see: it is not wrapped (a SIGTERM it ignores delays its stop by the grace period). "+
				"To have it wrapped, put %s in the annotation %s, a JSON array", c.Name, what, key), nil
		}
		parsed, err := sidecarcommand.Parse(raw)
		if err != nil {
			return false, "", fmt.Errorf("annotation %s=%q: %w; want %s", key, raw, err, sidecarcommand.Form)
		}
		command = parsed
	}
	if command[0] == "" {
		// The annotation would hold a command the validating webhook refuses, and the
		// pod with it; unwrapped, the runtime reports the empty command as it would have.
		return false, fmt.Sprintf("sextant: sidecar %s has a command whose first word is empty, so it is not wrapped", c.Name), nil
	}
	b, err := encodeCommand(command)
	if err != nil {
		return false, "", fmt.Errorf("encode the command of %s: %w", c.Name, err)
	}
	if len(b) > maxCommandJSON {
		return false, fmt.Sprintf("sextant: sidecar %s: its command is %d bytes as JSON, more than the %d the wrapper can be handed in an env variable "+
			"(the kernel refuses a longer one), so it is not wrapped; stopping it may take its grace period", c.Name, len(b), maxCommandJSON), nil
	}
	size := annotationsSize(pod.Annotations) + len(b)
	if old, ok := pod.Annotations[key]; ok {
		size -= len(old)
	} else {
		size += len(key)
	}
	if size > maxAnnotationsSize {
		return false, fmt.Sprintf("sextant: sidecar %s: its command in the annotation %s would make the pod's annotations %d bytes, more than the API server's limit of %d, "+
			"so it is not wrapped; stopping it may take its grace period", c.Name, key, size, maxAnnotationsSize), nil
	}
	pod.Annotations[key] = string(b)
	c.Command = []string{WrapperPath}
	c.Env = append(c.Env, corev1.EnvVar{Name: EnvCommand, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fmt.Sprintf("metadata.annotations['%s']", key)},
	}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: WrapperVolume, MountPath: WrapperDir, ReadOnly: true})
	if fromAnnotation && len(c.Args) == 0 {
		// The webhook cannot see the image: it can only say what the annotation must hold.
		return true, fmt.Sprintf("sextant: sidecar %s has neither command nor args, and the wrapper, now its command, runs the annotation %s alone: "+
			"the runtime no longer runs the image's CMD, so the annotation must hold the image's ENTRYPOINT followed by its CMD (or give the container args)", c.Name, key), nil
	}
	return true, "", nil
}

// encodeCommand is the command as its annotation holds it: JSON without json.Marshal's
// HTML escaping, which makes each <, > and & six bytes and a shell script far longer.
func encodeCommand(command []string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(command); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// annotationsSize is what the API server counts against maxAnnotationsSize.
func annotationsSize(a map[string]string) int {
	n := 0
	for k, v := range a {
		n += len(k) + len(v)
	}
	return n
}

// windows says why the pod is for Windows nodes, or "" if it is not known to be.
func windows(pod *corev1.Pod) string {
	if pod.Spec.OS != nil && pod.Spec.OS.Name == corev1.Windows {
		return "spec.os.name"
	}
	if pod.Spec.NodeSelector[corev1.LabelOSStable] == string(corev1.Windows) {
		return "nodeSelector " + corev1.LabelOSStable
	}
	return ""
}

// nameClash says which name of the pod's own is one Mutate adds (the wrapper's init
// container, its volume): adding ours beside it makes the pod invalid. The pod Mutate
// prepared before has both, as its own.
func nameClash(pod *corev1.Pod) string {
	ours := false
	for _, c := range pod.Spec.InitContainers {
		if c.Name == InstallContainer {
			if !slices.Equal(c.Command, installCommand) {
				return "init container " + InstallContainer + " is the pod's own"
			}
			ours = true
		}
	}
	if slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == InstallContainer }) {
		return "container " + InstallContainer + " is the pod's own"
	}
	if !ours && slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == WrapperVolume }) {
		return "volume " + WrapperVolume + " is the pod's own"
	}
	return ""
}

// installCommand is what the wrapper's init container runs.
var installCommand = []string{wrapperInImage, "install", WrapperPath}

func (cfg MutatorConfig) installContainer() corev1.Container {
	policy := cfg.WrapperPullPolicy
	if policy == "" {
		policy = corev1.PullIfNotPresent
	}
	cpu, memory := cfg.InstallCPU, cfg.InstallMemory
	if cpu.IsZero() {
		cpu = DefaultInstallCPU
	}
	if memory.IsZero() {
		memory = DefaultInstallMemory
	}
	return corev1.Container{
		Name:            InstallContainer,
		Image:           cfg.WrapperImage,
		ImagePullPolicy: policy,
		Command:         slices.Clone(installCommand),
		VolumeMounts:    []corev1.VolumeMount{{Name: WrapperVolume, MountPath: WrapperDir}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: cpu.DeepCopy(), corev1.ResourceMemory: memory.DeepCopy()},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: cpu.DeepCopy(), corev1.ResourceMemory: memory.DeepCopy()},
		},
		// Fits the "restricted" Pod Security Standard, so it never makes a pod
		// inadmissible; the emptyDir is world-writable, so any user may copy into it.
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}
