package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/apis/core"
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarcommand"
	"sextant.io/sextant/api/sidecarrules"
)

// What a fuzzed pod has, one bit each.
const (
	fzSetup      = 1 << iota // an init container before everything
	fzRegular                // a marked regular container
	fzKruise                 // marked with the Kruise variable instead
	fzRegularCmd             // the regular sidecar has a command
	fzAnnotation             // the command annotation of the regular sidecar is set
	fzNative                 // a marked native sidecar
	fzNativeCmd              // the native sidecar has a command
	fzNativeAnn              // sidecar.sextant.io/native is set
	fzOwnVolume              // the pod already has a volume named like the wrapper's
	fzOwnEnv                 // the regular sidecar already has $SEXTANT_SIDECAR_COMMAND
	fzOwnMount               // the regular sidecar already mounts something at the wrapper's path
	fzSecondMain             // a second main container
	fzWindows                // spec.os.name is windows
)

// fuzzPod builds a pod from the fuzzer's choices. Words of a command are separated
// by newlines.
func fuzzPod(policy uint8, flags uint16, mainName, sidecarName, nativeName, command, annotation, native string) *corev1.Pod {
	words := func() []string {
		if command == "" {
			return nil
		}
		return strings.Split(command, "\n")
	}
	marker := corev1.EnvVar{Name: sidecarrules.EnvSidecar, Value: "true"}
	if flags&fzKruise != 0 {
		marker = corev1.EnvVar{Name: sidecarrules.EnvKruise, Value: "TRUE"}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{"keep": "me"}},
		Spec: corev1.PodSpec{
			RestartPolicy: []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure, corev1.RestartPolicyAlways, ""}[policy%4],
			Containers:    []corev1.Container{{Name: mainName, Image: "busybox", Command: []string{"work"}}},
		},
	}
	if flags&fzSetup != 0 {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: "setup", Image: "busybox"})
	}
	if flags&fzSecondMain != 0 {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "second", Image: "busybox"})
	}
	if flags&fzNative != 0 {
		c := corev1.Container{Name: nativeName, Image: "envoy", Env: []corev1.EnvVar{marker},
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
		if flags&fzNativeCmd != 0 {
			c.Command = words()
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	}
	if flags&fzRegular != 0 {
		c := corev1.Container{Name: sidecarName, Image: "envoy", Env: []corev1.EnvVar{marker}, Args: []string{"--port", "$(PORT)"}}
		if flags&fzRegularCmd != 0 {
			c.Command = words()
		}
		if flags&fzOwnEnv != 0 {
			c.Env = append(c.Env, corev1.EnvVar{Name: EnvCommand, Value: `["mine"]`})
		}
		if flags&fzOwnMount != 0 {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: WrapperDir})
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
		if flags&fzAnnotation != 0 {
			pod.Annotations[annotations.SidecarCommand(sidecarName)] = annotation
		}
	}
	if flags&fzNativeAnn != 0 {
		pod.Annotations[annotations.SidecarNative] = native
	}
	if flags&fzWindows != 0 {
		pod.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
	}
	if flags&fzOwnVolume != 0 {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: WrapperVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	return pod
}

// validPod reports the API server's own validation of a new pod, after its defaults.
func validPod(t *testing.T, in *corev1.Pod) string {
	t.Helper()
	pod := in.DeepCopy()
	k8sv1.SetObjectDefaults_Pod(pod)
	var internal core.Pod
	if err := k8sv1.Convert_v1_Pod_To_core_Pod(pod, &internal, nil); err != nil {
		t.Fatalf("convert: %v", err)
	}
	if errs := validation.ValidatePodCreate(&internal, validation.PodValidationOptions{}); len(errs) > 0 {
		return errs.ToAggregate().Error()
	}
	return ""
}

func podJSON(t *testing.T, pod *corev1.Pod) []byte {
	t.Helper()
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzMutatePatch: for any pod, Mutate leaves its argument alone; the JSON patch the
// webhook sends, applied as the API server applies it, gives exactly Mutate's pod; a
// pod the API server would take is still one it takes after Mutate; Mutate of its own
// output changes nothing (a reinvocation); and every command annotation it writes is
// one the validating webhook accepts.
func FuzzMutatePatch(f *testing.F) {
	f.Add(uint8(0), uint16(fzSetup|fzRegular|fzRegularCmd), "main", "proxy", "logs", "sleep\n3600", "", "")
	f.Add(uint8(1), uint16(fzRegular|fzNative|fzNativeCmd|fzRegularCmd), "main", "proxy", "logs", "envoy\n-c\n/etc/envoy.yaml", "", "")
	f.Add(uint8(0), uint16(fzRegular|fzAnnotation), "main", "proxy", "logs", "", `["/usr/local/bin/envoy"]`, "")
	f.Add(uint8(0), uint16(fzRegular|fzAnnotation), "main", "proxy", "logs", "", `not json`, "")
	f.Add(uint8(0), uint16(fzRegular), "main", "proxy", "logs", "", "", "")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd|fzNativeAnn), "main", "proxy", "logs", "sleep", "", "false")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd|fzKruise|fzSecondMain), "main", "proxy", "logs", "sleep", "", "")
	f.Add(uint8(2), uint16(fzRegular|fzRegularCmd), "main", "proxy", "logs", "sleep", "", "")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd), "main", strings.Repeat("a", 63), "logs", "sleep", "", "")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd|fzOwnVolume|fzOwnEnv), "main", "proxy", "logs", "sleep", "", "")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd|fzOwnMount), "main", "proxy", "logs", "sleep", "", "")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd), "main", "proxy", "logs", "\n", "", "")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd), InstallContainer, "proxy", "logs", "sleep", "", "")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd|fzNative), "main", "proxy", InstallContainer, "sleep", "", "")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd|fzNative|fzNativeCmd), "main", "proxy", "proxy", "sleep", "", "")
	f.Add(uint8(0), uint16(fzNative|fzNativeCmd), "main", "proxy", "logs", WrapperPath, "", "")
	f.Add(uint8(0), uint16(fzRegular|fzRegularCmd|fzWindows), "main", "proxy", "logs", "sleep", "", "")
	// With pull secrets, which the patch must carry too.
	cfg := cfg
	cfg.ImagePullSecrets = []string{"regcred"}
	f.Fuzz(func(t *testing.T, policy uint8, flags uint16, mainName, sidecarName, nativeName, command, annotation, native string) {
		// As the webhook gets it: decoded from JSON, so every string is valid UTF-8.
		in, err := decodePod(podJSON(t, fuzzPod(policy, flags, mainName, sidecarName, nativeName, command, annotation, native)))
		if err != nil {
			t.Fatal(err)
		}
		before := podJSON(t, in)
		res, err := cfg.Mutate(in)
		if after := podJSON(t, in); string(after) != string(before) {
			t.Fatalf("Mutate changed its argument:\n%s\n%s", before, after)
		}
		if err != nil {
			if !strings.Contains(err.Error(), annotations.SidecarCommandPrefix) {
				t.Fatalf("Mutate refused the pod without naming a command annotation: %v", err)
			}
			return
		}
		out := res.Pod
		if !res.Changed {
			if string(podJSON(t, out)) != string(before) {
				t.Fatal("Mutate says unchanged but its pod differs")
			}
			return
		}
		// The webhook's patch, applied as the API server applies it.
		patch, err := podPatch(in, out)
		if err != nil {
			t.Fatalf("podPatch: %v", err)
		}
		patched := before
		if patch != nil {
			p, err := jsonpatch.DecodePatch(patch)
			if err != nil {
				t.Fatalf("decode the patch %s: %v", patch, err)
			}
			if patched, err = p.Apply(before); err != nil {
				t.Fatalf("apply the patch %s: %v", patch, err)
			}
		}
		var got corev1.Pod
		if err := json.Unmarshal(patched, &got); err != nil {
			t.Fatalf("the patched pod does not decode: %v\n%s", err, patched)
		}
		if a, b := string(podJSON(t, &got)), string(podJSON(t, out)); a != b {
			t.Fatalf("the patched pod differs from Mutate's:\n%s\n%s", a, b)
		}
		// A reinvocation changes nothing.
		again, err := cfg.Mutate(out)
		if err != nil {
			t.Fatalf("Mutate of its own output: %v", err)
		}
		if p, _ := podPatch(out, again.Pod); p != nil {
			t.Fatalf("Mutate of its own output patches again: %s", p)
		}
		// What it writes, the validating webhook accepts.
		for k, v := range out.Annotations {
			if strings.HasPrefix(k, annotations.SidecarCommandPrefix) && in.Annotations[k] != v {
				if _, err := sidecarcommand.Parse(v); err != nil {
					t.Fatalf("Mutate wrote %s=%s, which the validating webhook refuses: %v", k, v, err)
				}
			}
		}
		// A pod the API server takes, it still takes.
		if validPod(t, in) == "" {
			if msg := validPod(t, out); msg != "" {
				t.Fatalf("a valid pod is invalid after Mutate: %s\nin:  %s\nout: %s", msg, before, podJSON(t, out))
			}
		}
	})
}
