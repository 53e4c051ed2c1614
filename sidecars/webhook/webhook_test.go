package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/apis/core"
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	quotacore "k8s.io/kubernetes/pkg/quota/v1/evaluator/core"
	"k8s.io/kubernetes/plugin/pkg/admission/limitranger"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarrules"
)

var cfg = MutatorConfig{WrapperImage: "sextant.local/sextant-sidecar-wrapper:test", WrapperPullPolicy: corev1.PullNever}

func sidecar(name string, command ...string) corev1.Container {
	return corev1.Container{Name: name, Image: "busybox", Command: command, Args: []string{"--port", "$(PORT)"},
		Env: []corev1.EnvVar{{Name: sidecarrules.EnvSidecar, Value: "true"}}}
}

func jobPod(policy corev1.RestartPolicy, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{"keep": "me"}},
		Spec: corev1.PodSpec{RestartPolicy: policy,
			InitContainers: []corev1.Container{{Name: "setup", Image: "busybox"}},
			Containers:     append([]corev1.Container{{Name: "main", Image: "busybox", Command: []string{"work"}}}, containers...)},
	}
}

func find(list []corev1.Container, name string) *corev1.Container {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func TestMutateConvertsAndWraps(t *testing.T) {
	in := jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sleep", "3600"))
	res, err := cfg.Mutate(in)
	if err != nil || !res.Changed {
		t.Fatalf("Mutate: changed %v, err %v", res.Changed, err)
	}
	out := res.Pod
	if find(in.Spec.Containers, "proxy") == nil || len(in.Spec.InitContainers) != 1 {
		t.Fatal("Mutate changed its argument")
	}
	if names := containerNames(out.Spec.Containers); names != "main" {
		t.Errorf("containers = %s, want main only", names)
	}
	if names := containerNames(out.Spec.InitContainers); names != InstallContainer+",setup,proxy" {
		t.Errorf("initContainers = %s, want the installer first, then setup, then the sidecar", names)
	}
	proxy := find(out.Spec.InitContainers, "proxy")
	if !sidecarrules.IsNativeSidecar(proxy) {
		t.Error("the sidecar is not a native sidecar (restartPolicy Always)")
	}
	if len(proxy.Command) != 1 || proxy.Command[0] != WrapperPath {
		t.Errorf("command = %q, want the wrapper", proxy.Command)
	}
	if strings.Join(proxy.Args, " ") != "--port $(PORT)" {
		t.Errorf("args = %q, want them unchanged for the kubelet to expand", proxy.Args)
	}
	key := annotations.SidecarCommand("proxy")
	if got := out.Annotations[key]; got != `["sleep","3600"]` {
		t.Errorf("annotation %s = %q, want the original command", key, got)
	}
	if out.Annotations["keep"] != "me" {
		t.Error("an existing annotation was lost")
	}
	var env *corev1.EnvVar
	for i := range proxy.Env {
		if proxy.Env[i].Name == EnvCommand {
			env = &proxy.Env[i]
		}
	}
	if env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil ||
		env.ValueFrom.FieldRef.FieldPath != "metadata.annotations['"+key+"']" {
		t.Errorf("env %s = %+v, want a downward-API reference to the annotation", EnvCommand, env)
	}
	if !sidecarrules.IsSidecar(proxy) {
		t.Error("the marker env was lost: the agent would not know it is a sidecar")
	}
	if len(proxy.VolumeMounts) != 1 || proxy.VolumeMounts[0].MountPath != WrapperDir || !proxy.VolumeMounts[0].ReadOnly {
		t.Errorf("volume mounts = %+v, want the wrapper dir read-only", proxy.VolumeMounts)
	}
	install := out.Spec.InitContainers[0]
	if install.Image != cfg.WrapperImage || install.ImagePullPolicy != corev1.PullNever ||
		strings.Join(install.Command, " ") != "/sextant-sidecar-wrapper install "+WrapperPath {
		t.Errorf("installer = %s %s %q", install.Image, install.ImagePullPolicy, install.Command)
	}
	if len(out.Spec.Volumes) != 1 || out.Spec.Volumes[0].EmptyDir == nil {
		t.Errorf("volumes = %+v, want one emptyDir", out.Spec.Volumes)
	}
	if out.Labels[annotations.SidecarPrepared] != "true" {
		t.Error("no prepared label")
	}

	// A second pass (reinvocation) changes nothing.
	again, err := cfg.Mutate(out)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, again.Pod), mustJSON(t, out); a != b {
		t.Errorf("second pass changed the pod:\n%s\n%s", a, b)
	}
}

func TestMutateLeavesAlone(t *testing.T) {
	kruise := sidecar("logs", "tail", "-f")
	kruise.Env = []corev1.EnvVar{{Name: sidecarrules.EnvKruise, Value: "true"}}
	for name, pod := range map[string]*corev1.Pod{
		"Always pod with a marker": jobPod(corev1.RestartPolicyAlways, sidecar("proxy", "sleep")),
		"Job pod without a marker": jobPod(corev1.RestartPolicyNever, corev1.Container{Name: "proxy", Command: []string{"sleep"}}),
		"marker set to false": jobPod(corev1.RestartPolicyNever, corev1.Container{Name: "proxy", Command: []string{"sleep"},
			Env: []corev1.EnvVar{{Name: sidecarrules.EnvSidecar, Value: "false"}}}),
	} {
		res, err := cfg.Mutate(pod)
		if err != nil || res.Changed {
			t.Errorf("%s: changed %v, err %v; want untouched", name, res.Changed, err)
		}
	}
	// Only sidecars: nothing would ever stop them; left as written, with a warning.
	only := jobPod(corev1.RestartPolicyNever)
	only.Spec.Containers = []corev1.Container{sidecar("proxy", "sleep")}
	if res, err := cfg.Mutate(only); err != nil || res.Changed || len(res.Warnings) != 1 {
		t.Errorf("pod of sidecars only: changed %v, %d warnings, err %v", res.Changed, len(res.Warnings), err)
	}
	// The Kruise marker counts.
	if res, err := cfg.Mutate(jobPod(corev1.RestartPolicyOnFailure, kruise)); err != nil || !res.Changed {
		t.Errorf("Kruise marker: changed %v, err %v", res.Changed, err)
	}
}

func TestMutateCommandless(t *testing.T) {
	pod := jobPod(corev1.RestartPolicyNever, sidecar("envoy"), sidecar("proxy", "sleep"))
	res, err := cfg.Mutate(pod)
	if err != nil {
		t.Fatal(err)
	}
	envoy := find(res.Pod.Spec.InitContainers, "envoy")
	if envoy == nil || !sidecarrules.IsNativeSidecar(envoy) || len(envoy.Command) != 0 {
		t.Errorf("command-less sidecar: %+v; want converted to native, command untouched", envoy)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], annotations.SidecarCommand("envoy")) {
		t.Errorf("warnings = %q, want one naming %s", res.Warnings, annotations.SidecarCommand("envoy"))
	}

	// With the entrypoint named in the annotation, it is wrapped.
	pod.Annotations[annotations.SidecarCommand("envoy")] = `["/usr/local/bin/envoy"]`
	res, err = cfg.Mutate(pod)
	if err != nil {
		t.Fatal(err)
	}
	envoy = find(res.Pod.Spec.InitContainers, "envoy")
	if len(envoy.Command) != 1 || envoy.Command[0] != WrapperPath || len(res.Warnings) != 0 {
		t.Errorf("annotated sidecar: command %q, warnings %q", envoy.Command, res.Warnings)
	}

	pod.Annotations[annotations.SidecarCommand("envoy")] = `/usr/local/bin/envoy`
	if _, err := cfg.Mutate(pod); err == nil || !strings.Contains(err.Error(), annotations.SidecarCommand("envoy")) {
		t.Errorf("malformed command annotation: err %v, want one naming it", err)
	}
}

func TestMutateNativeOptOut(t *testing.T) {
	pod := jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sleep"))
	pod.Annotations[annotations.SidecarNative] = "false"
	res, err := cfg.Mutate(pod)
	if err != nil {
		t.Fatal(err)
	}
	proxy := find(res.Pod.Spec.Containers, "proxy")
	if proxy == nil || proxy.RestartPolicy != nil || proxy.Command[0] != WrapperPath {
		t.Errorf("opted out: %+v; want a wrapped regular container", proxy)
	}
}

// A regular sidecar that cannot be wrapped is not stopped by the agent in an OnFailure
// pod: the warning says so, and what to do.
func TestMutateWarnsUnwrappedRegularSidecar(t *testing.T) {
	cases := []struct {
		name        string
		policy      corev1.RestartPolicy
		native      string
		wantStopped bool
	}{
		{"onfailure, opted out", corev1.RestartPolicyOnFailure, "false", false},
		{"onfailure, native", corev1.RestartPolicyOnFailure, "", true},
		{"never, opted out", corev1.RestartPolicyNever, "false", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := jobPod(c.policy, sidecar("envoy"))
			if c.native != "" {
				pod.Annotations[annotations.SidecarNative] = c.native
			}
			res, err := cfg.Mutate(pod)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Warnings) != 1 {
				t.Fatalf("warnings = %q, want one", res.Warnings)
			}
			if notStopped := strings.Contains(res.Warnings[0], "not stopped again"); notStopped == c.wantStopped {
				t.Errorf("warning %q: says it is not stopped %v, want %v", res.Warnings[0], notStopped, !c.wantStopped)
			}
		})
	}
}

func TestMutateWrapsExistingNativeSidecar(t *testing.T) {
	pod := jobPod(corev1.RestartPolicyNever)
	native := sidecar("proxy", "sleep")
	native.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, native)
	res, err := cfg.Mutate(pod)
	if err != nil {
		t.Fatal(err)
	}
	if names := containerNames(res.Pod.Spec.InitContainers); names != InstallContainer+",setup,proxy" {
		t.Errorf("initContainers = %s", names)
	}
	if c := find(res.Pod.Spec.InitContainers, "proxy"); c.Command[0] != WrapperPath {
		t.Errorf("native sidecar not wrapped: %q", c.Command)
	}
}

func TestValidateAnnotations(t *testing.T) {
	good := map[string]string{
		"bandwidth.sextant.io/ingress-required": "400M", "bandwidth.sextant.io/ingress-expected": "500M",
		"bandwidth.sextant.io/strategy": "most-headroom", "numa.sextant.io/policy": "single-numa-node",
		"bandwidth.sextant.io/network": "storage", "unrelated": "x",
	}
	if err := ValidateAnnotations(good); err != nil {
		t.Errorf("good annotations refused: %v", err)
	}
	cases := map[string][2]string{
		"bandwidth.sextant.io/egress-required":  {"fast", "bits/s"},
		"bandwidth.sextant.io/strategy":         {"cheapest", "best-fit or most-headroom"},
		"numa.sextant.io/policy":                {"best-effort", "single-numa-node"},
		"bandwidth.sextant.io/ingress-requried": {"1G", "unknown annotation"},
		"bandwidth.sextant.io/network":          {"Storage_1", "DNS label"},
		annotations.SidecarCommand("proxy"):     {"envoy", "JSON array"},
	}
	for key, c := range cases {
		err := ValidateAnnotations(map[string]string{key: c[0]})
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), c[1]) {
			t.Errorf("%s=%s: err %v; want one naming the annotation and %q", key, c[0], err, c[1])
		}
	}
	err := ValidateAnnotations(map[string]string{
		"bandwidth.sextant.io/ingress-required": "500M", "bandwidth.sextant.io/ingress-expected": "400M"})
	if err == nil || !strings.Contains(err.Error(), "ingress-expected") {
		t.Errorf("expected < required: err %v", err)
	}
}

func review(t *testing.T, h *Handler, path string, op admissionv1.Operation, pod, old *corev1.Pod) *admissionv1.AdmissionResponse {
	t.Helper()
	req := &admissionv1.AdmissionRequest{UID: "u1", Operation: op, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Object: runtime.RawExtension{Raw: []byte(mustJSON(t, pod))}}
	if old != nil {
		req.OldObject = runtime.RawExtension{Raw: []byte(mustJSON(t, old))}
	}
	body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	rec := httptest.NewRecorder()
	h.ServeMux().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: HTTP %d %s", path, rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID != "u1" {
		t.Fatalf("%s: bad review %s", path, rec.Body)
	}
	return out.Response
}

func TestHandlerMutatePatchApplies(t *testing.T) {
	// With pull secrets, which Mutate adds beside the pod's own.
	cfg := cfg
	cfg.ImagePullSecrets = []string{"regcred"}
	h := &Handler{Mutator: cfg}
	pod := jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sleep", "3600"))
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "own"}}
	resp := review(t, h, PathMutate, admissionv1.Create, pod, nil)
	if !resp.Allowed || resp.PatchType == nil {
		t.Fatalf("response %+v, want allowed with a patch", resp)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply([]byte(mustJSON(t, pod)))
	if err != nil {
		t.Fatalf("apply the patch: %v", err)
	}
	want, _ := cfg.Mutate(pod)
	var got corev1.Pod
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, &got), mustJSON(t, want.Pod); a != b {
		t.Errorf("patched pod differs from Mutate's:\n%s\n%s", a, b)
	}
	if a := mustJSON(t, got.Spec.ImagePullSecrets); a != `[{"name":"own"},{"name":"regcred"}]` {
		t.Errorf("patched pod's imagePullSecrets = %s, want own and regcred", a)
	}
	// An untouched pod gets no patch.
	resp = review(t, h, PathMutate, admissionv1.Create, jobPod(corev1.RestartPolicyNever), nil)
	if !resp.Allowed || resp.Patch != nil {
		t.Errorf("plain pod: %+v", resp)
	}
}

func TestHandlerValidate(t *testing.T) {
	h := &Handler{Mutator: cfg}
	bad := jobPod(corev1.RestartPolicyNever)
	bad.Annotations["bandwidth.sextant.io/ingress-required"] = "lots"
	resp := review(t, h, PathValidate, admissionv1.Create, bad, nil)
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "bandwidth.sextant.io/ingress-required") {
		t.Errorf("malformed annotation on create: %+v", resp)
	}
	// An update that leaves the bad annotation as it was is allowed (the pod slipped in
	// while the webhook was down, and must stay manageable); one that introduces it is not.
	changed := bad.DeepCopy()
	changed.Labels = map[string]string{"x": "y"}
	if resp := review(t, h, PathValidate, admissionv1.Update, changed, bad); !resp.Allowed {
		t.Errorf("unrelated update of a pod that slipped in refused: %+v", resp.Result)
	}
	good := jobPod(corev1.RestartPolicyNever)
	if resp := review(t, h, PathValidate, admissionv1.Update, bad, good); resp.Allowed {
		t.Error("update introducing a malformed annotation allowed")
	}
	if resp := review(t, h, PathValidate, admissionv1.Create, good, nil); !resp.Allowed {
		t.Errorf("good pod refused: %+v", resp.Result)
	}

	// The CNI bandwidth plugin's cap is a sextant pod's limit too: below its expected rate,
	// the pod is refused naming both; on a pod that asks sextant for nothing it is the
	// CNI's business, even malformed.
	capped := jobPod(corev1.RestartPolicyNever)
	capped.Annotations["bandwidth.sextant.io/egress-expected"] = "200M"
	capped.Annotations["kubernetes.io/egress-bandwidth"] = "100M"
	resp = review(t, h, PathValidate, admissionv1.Create, capped, nil)
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "bandwidth.sextant.io/egress-expected") ||
		!strings.Contains(resp.Result.Message, "at most kubernetes.io/egress-bandwidth") {
		t.Errorf("expected above the CNI's cap: %+v", resp.Result)
	}
	cniOnly := jobPod(corev1.RestartPolicyNever)
	cniOnly.Annotations["kubernetes.io/egress-bandwidth"] = "fast"
	if resp := review(t, h, PathValidate, admissionv1.Create, cniOnly, nil); !resp.Allowed {
		t.Errorf("a pod with only the CNI's annotation refused: %+v", resp.Result)
	}
}

func containerNames(list []corev1.Container) string {
	names := make([]string, len(list))
	for i, c := range list {
		names[i] = c.Name
	}
	return strings.Join(names, ",")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The chart's pull secrets reach a pod given the wrapper's init container, once each,
// beside the pod's own; a pod without a wrapped sidecar gets none.
func TestMutateAddsImagePullSecrets(t *testing.T) {
	c := cfg
	c.ImagePullSecrets = []string{"regcred", "mirror"}
	in := jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sleep", "3600"))
	in.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "own"}, {Name: "mirror"}}
	res, err := c.Mutate(in)
	if err != nil || !res.Changed {
		t.Fatalf("Mutate: changed %v, err %v", res.Changed, err)
	}
	var got []string
	for _, r := range res.Pod.Spec.ImagePullSecrets {
		got = append(got, r.Name)
	}
	if strings.Join(got, ",") != "own,mirror,regcred" {
		t.Errorf("imagePullSecrets %v, want own,mirror,regcred", got)
	}
	if len(in.Spec.ImagePullSecrets) != 2 {
		t.Error("Mutate changed its argument's imagePullSecrets")
	}
	again, err := c.Mutate(res.Pod)
	if err != nil || len(again.Pod.Spec.ImagePullSecrets) != 3 {
		t.Errorf("Mutate again: %v, err %v", again.Pod.Spec.ImagePullSecrets, err)
	}
	plain := jobPod(corev1.RestartPolicyNever)
	if res, err := c.Mutate(plain); err != nil || len(res.Pod.Spec.ImagePullSecrets) != 0 {
		t.Errorf("a pod without sidecars got imagePullSecrets %v (err %v)", res.Pod.Spec.ImagePullSecrets, err)
	}
}

// The install container gets the configured resources, requests equal to limits, and the
// defaults when none are configured.
func TestInstallContainerResources(t *testing.T) {
	for _, c := range []struct {
		name        string
		cpu, memory resource.Quantity
		want        corev1.ResourceList
	}{
		{"defaults", resource.Quantity{}, resource.Quantity{}, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
		{"configured", resource.MustParse("10m"), resource.MustParse("16Mi"), corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
	} {
		mc := cfg
		mc.InstallCPU, mc.InstallMemory = c.cpu, c.memory
		res, err := mc.Mutate(jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sleep", "3600")))
		if err != nil || !res.Changed {
			t.Fatalf("%s: Mutate: changed %v, err %v", c.name, res.Changed, err)
		}
		i := slices.IndexFunc(res.Pod.Spec.InitContainers, func(ic corev1.Container) bool { return ic.Name == InstallContainer })
		if i < 0 {
			t.Fatalf("%s: no install container", c.name)
		}
		got := res.Pod.Spec.InitContainers[i].Resources
		for name, want := range c.want {
			if r, l := got.Requests[name], got.Limits[name]; r.Cmp(want) != 0 || l.Cmp(want) != 0 {
				t.Errorf("%s: install container %s request %s limit %s, want both %s", c.name, name, r.String(), l.String(), want.String())
			}
		}
	}
}

// The install container must not be why a namespace's ResourceQuota or LimitRange refuses
// a pod, nor why a Guaranteed pod becomes Burstable: its requests equal its limits.
func TestInstallContainerAdmittedByQuotaAndLimitRange(t *testing.T) {
	guaranteed := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	pod := jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sleep", "3600"))
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Resources = guaranteed
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Resources = guaranteed
	}
	res, err := cfg.Mutate(pod)
	if err != nil || !res.Changed {
		t.Fatalf("Mutate: changed %v, err %v", res.Changed, err)
	}
	ratio := func(r corev1.ResourceName) *corev1.LimitRange {
		return &corev1.LimitRange{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			MaxLimitRequestRatio: corev1.ResourceList{r: resource.MustParse("1")}}}}}
	}
	quota := quotacore.NewPodEvaluator(nil, clock.RealClock{})
	cases := []struct {
		name  string
		admit func(*corev1.Pod) error
	}{
		{"quota on limits.cpu", func(p *corev1.Pod) error { return quota.Constraints([]corev1.ResourceName{"limits.cpu"}, p) }},
		{"quota on limits.memory", func(p *corev1.Pod) error { return quota.Constraints([]corev1.ResourceName{"limits.memory"}, p) }},
		{"quota on requests", func(p *corev1.Pod) error {
			return quota.Constraints([]corev1.ResourceName{"requests.cpu", "requests.memory"}, p)
		}},
		{"limit range, cpu limit/request ratio 1", func(p *corev1.Pod) error {
			return limitranger.PodValidateLimitFunc(ratio(corev1.ResourceCPU), internalPod(t, p))
		}},
		{"limit range, memory limit/request ratio 1", func(p *corev1.Pod) error {
			return limitranger.PodValidateLimitFunc(ratio(corev1.ResourceMemory), internalPod(t, p))
		}},
		{"guaranteed QoS", func(p *corev1.Pod) error {
			if q := qos.GetPodQOS(p); q != corev1.PodQOSGuaranteed {
				return fmt.Errorf("QoS class %s", q)
			}
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.admit(pod); err != nil {
				t.Fatalf("the pod as written is refused: %v", err)
			}
			if err := c.admit(res.Pod); err != nil {
				t.Errorf("the prepared pod is refused: %v", err)
			}
		})
	}
}

func internalPod(t *testing.T, in *corev1.Pod) *core.Pod {
	t.Helper()
	pod := in.DeepCopy()
	k8sv1.SetObjectDefaults_Pod(pod)
	var out core.Pod
	if err := k8sv1.Convert_v1_Pod_To_core_Pod(pod, &out, nil); err != nil {
		t.Fatalf("convert: %v", err)
	}
	return &out
}

// A command moves into its annotation as JSON that the wrapper can be handed in an env
// variable and the API server takes: without HTML escaping, and not at all (the sidecar
// left unwrapped, with a warning) when it would be too long for either.
func TestMutateCommandSize(t *testing.T) {
	script := strings.Repeat("echo hello > /dev/null && ", 4000) + "true" // 104 KB, 192 KB HTML-escaped
	long := strings.Repeat("x", 100<<10)
	cases := []struct {
		name        string
		pod         func() *corev1.Pod
		wantWrapped map[string]bool
		wantWarning string // in the one warning; none if empty
	}{
		{
			name: "a shell script with <, > and &",
			pod: func() *corev1.Pod {
				return jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sh", "-c", "a > b && c < d"))
			},
			wantWrapped: map[string]bool{"proxy": true},
		},
		{
			name:        "a script within the env limit unescaped, over it escaped",
			pod:         func() *corev1.Pod { return jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sh", "-c", script)) },
			wantWrapped: map[string]bool{"proxy": true},
		},
		{
			name: "a command over the env limit",
			pod: func() *corev1.Pod {
				return jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sh", "-c", script, script))
			},
			wantWrapped: map[string]bool{"proxy": false},
			wantWarning: "more than the 122880 the wrapper can be handed",
		},
		{
			name: "an annotation over the env limit",
			pod: func() *corev1.Pod {
				p := jobPod(corev1.RestartPolicyNever, sidecar("envoy"))
				p.Annotations[annotations.SidecarCommand("envoy")] = mustJSON(t, []string{"envoy", long, long})
				return p
			},
			wantWrapped: map[string]bool{"envoy": false},
			wantWarning: "more than the 122880 the wrapper can be handed",
		},
		{
			name: "commands over the API server's total for annotations",
			pod: func() *corev1.Pod {
				p := jobPod(corev1.RestartPolicyNever, sidecar("a", "sh", "-c", long), sidecar("b", "sh", "-c", long))
				p.Annotations["big"] = strings.Repeat("y", 60<<10)
				return p
			},
			wantWrapped: map[string]bool{"a": true, "b": false},
			wantWarning: "more than the API server's limit of 262144",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := c.pod()
			if msg := validPod(t, pod); msg != "" {
				t.Fatalf("the pod as written is invalid: %s", msg)
			}
			res, err := cfg.Mutate(pod)
			if err != nil || !res.Changed {
				t.Fatalf("Mutate: changed %v, err %v", res.Changed, err)
			}
			if msg := validPod(t, res.Pod); msg != "" {
				t.Errorf("the prepared pod is invalid: %.300s", msg)
			}
			switch {
			case c.wantWarning == "" && len(res.Warnings) > 0:
				t.Errorf("warnings %.300q, want none", res.Warnings)
			case c.wantWarning != "" && (len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], c.wantWarning)):
				t.Errorf("warnings %.300q, want one saying %q", res.Warnings, c.wantWarning)
			}
			for name, want := range c.wantWrapped {
				ctr := find(res.Pod.Spec.InitContainers, name)
				if got := sidecarrules.IsWrapped(ctr); got != want {
					t.Errorf("%s wrapped %v, want %v", name, got, want)
				}
				if !want {
					continue
				}
				raw := res.Pod.Annotations[annotations.SidecarCommand(name)]
				var cmd []string
				if err := json.Unmarshal([]byte(raw), &cmd); err != nil || !slices.Equal(cmd, find(pod.Spec.Containers, name).Command) {
					t.Errorf("%s: annotation does not decode to the command (err %v)", name, err)
				}
				if strings.Contains(raw, `\u00`) {
					t.Errorf("%s: annotation %.100s has HTML escapes", name, raw)
				}
				// As the kubelet hands it to the wrapper: the kernel must take it.
				self, err := os.Executable()
				if err != nil {
					t.Fatal(err)
				}
				run := exec.Command(self, "-test.run=^$")
				run.Env = []string{EnvCommand + "=" + raw}
				if err := run.Run(); err != nil {
					t.Errorf("%s: a process with $%s of %d bytes does not start: %v", name, EnvCommand, len(raw), err)
				}
			}
		})
	}
}

// A sidecar without command or args ran its image's ENTRYPOINT and CMD; wrapped, it
// runs the annotation alone, so what the annotation must hold depends on its args.
func TestMutateCommandlessAdvice(t *testing.T) {
	cases := []struct {
		name        string
		args        []string
		annotation  string
		wantWrapped bool
		wantWarning string // in the one warning; none if empty
	}{
		{"no annotation, args", []string{"--port", "1"}, "", false, "the image's ENTRYPOINT (the container's args follow it)"},
		{"no annotation, no args", nil, "", false, "the image's ENTRYPOINT followed by its CMD"},
		{"annotation, args", []string{"--port", "1"}, `["/usr/local/bin/envoy"]`, true, ""},
		{"annotation, no args", nil, `["/usr/local/bin/envoy"]`, true, "must hold the image's ENTRYPOINT followed by its CMD"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			envoy := sidecar("envoy")
			envoy.Args = c.args
			pod := jobPod(corev1.RestartPolicyNever, envoy)
			if c.annotation != "" {
				pod.Annotations[annotations.SidecarCommand("envoy")] = c.annotation
			}
			res, err := cfg.Mutate(pod)
			if err != nil {
				t.Fatal(err)
			}
			if got := sidecarrules.IsWrapped(find(res.Pod.Spec.InitContainers, "envoy")); got != c.wantWrapped {
				t.Errorf("wrapped %v, want %v", got, c.wantWrapped)
			}
			switch {
			case c.wantWarning == "" && len(res.Warnings) > 0:
				t.Errorf("warnings %q, want none", res.Warnings)
			case c.wantWarning != "" && (len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], c.wantWarning)):
				t.Errorf("warnings %q, want one saying %q", res.Warnings, c.wantWarning)
			}
		})
	}
}

// The wrapper is a Linux binary and its install container has Linux-only security
// settings: a pod for Windows is left as written, with a warning.
func TestMutateLeavesWindowsPodsAlone(t *testing.T) {
	cases := []struct {
		name        string
		os          *corev1.PodOS
		selector    map[string]string
		wantChanged bool
	}{
		{"spec.os windows", &corev1.PodOS{Name: corev1.Windows}, nil, false},
		{"nodeSelector windows", nil, map[string]string{corev1.LabelOSStable: "windows"}, false},
		{"spec.os linux", &corev1.PodOS{Name: corev1.Linux}, map[string]string{corev1.LabelOSStable: "linux"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sleep", "3600"))
			pod.Spec.OS, pod.Spec.NodeSelector = c.os, c.selector
			res, err := cfg.Mutate(pod)
			if err != nil {
				t.Fatal(err)
			}
			if msg := validPod(t, res.Pod); msg != "" {
				t.Errorf("the pod Mutate returns is invalid: %.300s", msg)
			}
			if res.Changed != c.wantChanged {
				t.Errorf("changed %v, want %v", res.Changed, c.wantChanged)
			}
			windowsWarned := len(res.Warnings) == 1 && strings.Contains(res.Warnings[0], "Windows")
			if windowsWarned == c.wantChanged {
				t.Errorf("warnings %q; want one about Windows: %v", res.Warnings, !c.wantChanged)
			}
		})
	}
}
