package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/component-base/metrics/testutil"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// goodBandwidth is a NodeBandwidth as an agent writes it, as JSON.
const goodBandwidth = `{"apiVersion":"sextant.io/v1alpha1","kind":"NodeBandwidth",
 "metadata":{"name":"node-1","uid":"u1","resourceVersion":"10"},
 "status":{"sampleTime":"2026-11-22T10:00:00Z","window":"60s","agentVersion":"v0.1.0",
  "interfaces":[{"name":"eth0","ingress":{"capacity":"10G","rate":"1200M","peak":"2G","remaining":"8G"},
                                "egress":{"capacity":"10G","rate":"300M","peak":"900M","remaining":"9100M"}}],
  "total":{"ingress":{"capacity":"10G","rate":"1200M","peak":"2G","remaining":"8G"},
           "egress":{"capacity":"10G","rate":"300M","peak":"900M","remaining":"9100M"}}}}`

// goodTopology is a NodeTopology as an agent writes it, as JSON.
const goodTopology = `{"apiVersion":"sextant.io/v1alpha1","kind":"NodeTopology",
 "metadata":{"name":"node-1","uid":"u2","resourceVersion":"11"},
 "status":{"updateTime":"2026-11-22T10:00:00Z","agentVersion":"v0.1.0",
  "summary":{"numaNodes":2,"cpus":4,"devices":1,"unhealthyDevices":0},
  "numaNodes":[{"id":0,"cpus":[0,1],"memoryBytes":17149054976,"distances":[10,21]},
               {"id":1,"cpus":[2,3],"memoryBytes":17149054976,"distances":[21,10]}],
  "pciDevices":[{"address":"0000:3b:00.0","class":"0x030200","vendor":"0x10de","device":"0x20b0",
                 "kind":"gpu","numaNode":1,"health":"Healthy"}],
  "nics":[{"name":"eth0","pciAddress":"0000:02:00.0","numaNode":0,"speedMbps":10000}]}}`

// withStatus is good (JSON) with status.<path> set to value (JSON); path is dotted, and
// a numeric element indexes a list.
func withStatus(t testing.TB, good, path, value string) []byte {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal([]byte(good), &obj); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		t.Fatalf("value %s: %v", value, err)
	}
	var cur any = obj["status"]
	parts := strings.Split(path, ".")
	for i, p := range parts {
		last := i == len(parts)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[p] = v
			} else {
				cur = c[p]
			}
		case []any:
			var idx int
			if _, err := fmt.Sscan(p, &idx); err != nil {
				t.Fatalf("path %s: %q indexes a list", path, p)
			}
			if last {
				c[idx] = v
			} else {
				cur = c[idx]
			}
		default:
			t.Fatalf("path %s: nothing at %q", path, p)
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fromJSON decodes data as a watch does (numbers as int64 or float64).
func fromJSON(t testing.TB, data []byte) *unstructured.Unstructured {
	t.Helper()
	obj, _, err := unstructured.UnstructuredJSONScheme.Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return obj.(*unstructured.Unstructured)
}

// poison lists objects the API server accepts, or accepted under a looser CRD schema,
// which the ranker cannot use: each must be rejected with its reason, never an error of
// the informer.
var poison = []struct {
	name, kind, path, value, reason string
}{
	{"window soon", kindBandwidth, "window", `"soon"`, ReasonUndecodable},
	{"window overflows", kindBandwidth, "window", `"99999999999h"`, ReasonUndecodable},
	{"negative window", kindBandwidth, "window", `"-5s"`, ReasonOutOfRange},
	{"quantity 1e.5", kindBandwidth, "total.ingress.capacity", `"1e.5"`, ReasonUndecodable},
	{"interface quantity 1e.5", kindBandwidth, "interfaces.0.egress.peak", `"1e.5"`, ReasonUndecodable},
	{"sampleTime lower-case", kindBandwidth, "sampleTime", `"2026-01-02t15:04:05z"`, ReasonUndecodable},
	{"sampleTime a number", kindBandwidth, "sampleTime", `7`, ReasonUndecodable},
	{"remaining beyond int64", kindBandwidth, "total.egress.remaining", `"99999999999999999999999999999"`, ReasonOutOfRange},
	{"capacity 100E", kindBandwidth, "total.egress.capacity", `"100E"`, ReasonOutOfRange},
	{"negative integer rate", kindBandwidth, "interfaces.0.ingress.rate", `-5`, ReasonOutOfRange},
	{"remaining above capacity", kindBandwidth, "total.ingress.remaining", `"11G"`, ReasonInconsistent},
	{"remaining without capacity", kindBandwidth, "total.ingress.capacity", `null`, ReasonInconsistent},
	{"interfaces not a list", kindBandwidth, "interfaces", `{"name":"eth0"}`, ReasonUndecodable},
	{"network name not a DNS label", kindBandwidth, "networks", `[{"name":"Pod_1","interfaces":["eth0"],"ingress":{},"egress":{}}]`, ReasonOutOfRange},
	{"network twice", kindBandwidth, "networks", `[{"name":"pod","interfaces":["eth0"],"ingress":{},"egress":{}},{"name":"pod","interfaces":["eth1"],"ingress":{},"egress":{}}]`, ReasonInconsistent},
	{"network remaining above capacity", kindBandwidth, "networks", `[{"name":"pod","interfaces":["eth0"],"ingress":{"capacity":"1G","remaining":"2G"},"egress":{}}]`, ReasonInconsistent},
	{"guarantee capacity beyond int64", kindBandwidth, "networks", `[{"name":"pod","interfaces":["eth0"],"ingress":{},"egress":{},"guarantees":{"ingress":{"capacity":"99999999999999999999999999999"},"egress":{}}}]`, ReasonOutOfRange},
	{"guarantee a float", kindBandwidth, "networks", `[{"name":"pod","interfaces":["eth0"],"ingress":{},"egress":{},"guarantees":{"ingress":{},"egress":{"guaranteed":"1e.5"}}}]`, ReasonUndecodable},
	{"updateTime lower-case", kindTopology, "updateTime", `"2026-01-02t15:04:05z"`, ReasonUndecodable},
	{"NUMA ID a float", kindTopology, "numaNodes.0.id", `1.5`, ReasonUndecodable},
	{"NUMA ID beyond the bound", kindTopology, "numaNodes.1.id", `4096`, ReasonOutOfRange},
	{"NUMA node twice", kindTopology, "numaNodes.1.id", `0`, ReasonInconsistent},
	{"CPU twice", kindTopology, "numaNodes.1.cpus", `[1,2]`, ReasonInconsistent},
	{"CPU beyond the bound", kindTopology, "numaNodes.1.cpus", `[8192]`, ReasonOutOfRange},
	{"negative memory", kindTopology, "numaNodes.0.memoryBytes", `-1`, ReasonOutOfRange},
	{"memory overflows in all", kindTopology, "numaNodes.1.memoryBytes", `9223372036854775807`, ReasonOutOfRange},
	{"distance beyond a byte", kindTopology, "numaNodes.0.distances", `[10,1000]`, ReasonOutOfRange},
	{"healthy device on a NUMA node the topology lacks", kindTopology, "pciDevices.0.numaNode", `7`, ReasonInconsistent},
	{"device on a NUMA node beyond the bound", kindTopology, "pciDevices.0.numaNode", `4096`, ReasonOutOfRange},
	{"device twice", kindTopology, "pciDevices", `[{"address":"0000:3b:00.0","kind":"gpu","health":"Healthy"},{"address":"0000:3b:00.0","kind":"gpu","health":"Healthy"}]`, ReasonInconsistent},
}

func goodOf(kind string) string {
	if kind == kindTopology {
		return goodTopology
	}
	return goodBandwidth
}

func TestDecodeRejectsPoison(t *testing.T) {
	if _, err := DecodeBandwidth(fromJSON(t, []byte(goodBandwidth))); err != nil {
		t.Fatalf("an agent's NodeBandwidth rejected: %v", err)
	}
	if _, err := DecodeTopology(fromJSON(t, []byte(goodTopology))); err != nil {
		t.Fatalf("an agent's NodeTopology rejected: %v", err)
	}
	// A device that vanished stays listed, Unhealthy, with the NUMA node it had, which
	// may have gone too: an agent publishes such a topology, and it must be taken.
	vanished := withStatus(t, goodTopology, "pciDevices", `[{"address":"0000:3d:00.0","kind":"accelerator","numaNode":7,"health":"Unhealthy"}]`)
	if _, err := DecodeTopology(fromJSON(t, vanished)); err != nil {
		t.Errorf("a vanished device on a vanished NUMA node rejected the topology: %v", err)
	}
	for _, p := range poison {
		t.Run(p.name, func(t *testing.T) {
			u := fromJSON(t, withStatus(t, goodOf(p.kind), p.path, p.value))
			var err error
			if p.kind == kindBandwidth {
				_, err = DecodeBandwidth(u)
			} else {
				_, err = DecodeTopology(u)
			}
			var r *Rejection
			if !errors.As(err, &r) {
				t.Fatalf("err = %v, want a Rejection", err)
			}
			if r.Reason != p.reason {
				t.Errorf("reason %s (%v), want %s", r.Reason, err, p.reason)
			}
		})
	}
}

func TestValidateTopologyBounds(t *testing.T) {
	many := &v1alpha1.NodeTopology{}
	for i := range MaxNUMANodes + 1 {
		many.Status.NUMANodes = append(many.Status.NUMANodes, v1alpha1.NUMANode{ID: int32(i % MaxNUMANodes)})
	}
	if err := ValidateTopology(many); ReasonOf(err) != ReasonOutOfRange {
		t.Errorf("%d NUMA nodes: %v, want out of range", len(many.Status.NUMANodes), err)
	}
	// 8192 CPUs over two NUMA nodes are allowed; one more is not, though each list is
	// within the CRD's bound.
	cpus := &v1alpha1.NodeTopology{Status: v1alpha1.NodeTopologyStatus{Topology: v1alpha1.Topology{
		NUMANodes: []v1alpha1.NUMANode{{ID: 0}, {ID: 1}}}}}
	for c := range int32(MaxCPUs) {
		n := &cpus.Status.NUMANodes[c%2]
		n.CPUs = append(n.CPUs, c)
	}
	if err := ValidateTopology(cpus); err != nil {
		t.Errorf("%d CPUs: %v", MaxCPUs, err)
	}
	cpus.Status.NUMANodes[1].CPUs = append(cpus.Status.NUMANodes[1].CPUs, 0)
	if err := ValidateTopology(cpus); ReasonOf(err) != ReasonOutOfRange {
		t.Errorf("%d CPUs: %v, want out of range", MaxCPUs+1, err)
	}
	devices := &v1alpha1.NodeTopology{}
	for i := range MaxDevices + 1 {
		devices.Status.PCIDevices = append(devices.Status.PCIDevices, v1alpha1.PCIDevice{Address: fmt.Sprintf("0000:%02x:%02x.%d", i/256, i%256/8, i%8)})
	}
	if err := ValidateTopology(devices); ReasonOf(err) != ReasonOutOfRange {
		t.Errorf("%d devices: %v, want out of range", len(devices.Status.PCIDevices), err)
	}
}

// The informers list and watch whatever exists, and a Store over them syncs, with
// poison among the objects: the poisoned nodes count as having no report, each bad
// version is counted once, and a good version replaces a bad one.
func TestStoreSyncsDespitePoison(t *testing.T) {
	var objs []runtime.Object
	for i, p := range poison {
		u := fromJSON(t, withStatus(t, goodOf(p.kind), p.path, p.value))
		u.SetName(fmt.Sprintf("poison-%d", i))
		objs = append(objs, u)
	}
	good := fromJSON(t, []byte(goodBandwidth))
	good.SetName("good")
	objs = append(objs, good)
	before := map[string]float64{}
	for _, p := range poison {
		before[p.kind+"/"+p.reason], _ = testutil.GetCounterMetricValue(rejectedTotal.WithLabelValues(p.kind, p.reason))
	}
	s, client, err := fakeStore(t, 10*time.Second, nil, objs...)
	if err != nil {
		t.Fatalf("the store did not sync with poison present: %v", err)
	}
	for i, p := range poison {
		name := fmt.Sprintf("poison-%d", i)
		if s.Bandwidth(name) != nil || s.Topology(name) != nil {
			t.Errorf("%s (%s) has a report", name, p.name)
		}
	}
	if b := s.Node("good").Bandwidth(); b == nil || b.Network(annotations.PodNetwork) == nil || b.Network(annotations.PodNetwork).IngressRemaining != 8e9 || b.Received.IsZero() {
		t.Errorf("the good node's report: %+v", b)
	}
	want := map[string]float64{}
	for _, p := range poison {
		want[p.kind+"/"+p.reason]++
	}
	for key, n := range want {
		kind, reason, _ := strings.Cut(key, "/")
		got, _ := testutil.GetCounterMetricValue(rejectedTotal.WithLabelValues(kind, reason))
		if got-before[key] != n {
			t.Errorf("rejected_total{kind=%s,reason=%s} rose by %v, want %v", kind, reason, got-before[key], n)
		}
	}

	// The same version again (a relist) is not counted again; a usable version
	// replaces the rejected one.
	bad := fromJSON(t, withStatus(t, goodBandwidth, "window", `"soon"`))
	bad.SetName("poison-0")
	bad.SetResourceVersion("77")
	r, _ := storeBandwidth(bad.DeepCopy())
	was, _ := testutil.GetCounterMetricValue(rejectedTotal.WithLabelValues(kindBandwidth, ReasonUndecodable))
	s.put(r, time.Now(), false)
	s.put(r, time.Now(), false)
	if got, _ := testutil.GetCounterMetricValue(rejectedTotal.WithLabelValues(kindBandwidth, ReasonUndecodable)); got != was+1 {
		t.Errorf("one rejected version delivered twice counted %v times", got-was)
	}
	fixed := fromJSON(t, []byte(goodBandwidth))
	fixed.SetName("poison-0")
	if _, err := client.Resource(v1alpha1.GroupVersion.WithResource("nodebandwidths")).Update(context.Background(), fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Bandwidth("poison-0") == nil {
		if time.Now().After(deadline) {
			t.Fatal("a usable version of a rejected NodeBandwidth never reached the store")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A store whose lists fail (here NodeTopology's, as without its CRD) does not sync, and
// its error names the kind it waited for and the list's error.
func TestWaitForSyncNamesWhatIsMissing(t *testing.T) {
	_, _, err := fakeStore(t, 3*time.Second, func(gvr schema.GroupVersionResource) error {
		if gvr.Resource == "nodetopologies" {
			return apierrors.NewNotFound(gvr.GroupResource(), "")
		}
		return nil
	})
	if err == nil {
		t.Fatal("the store synced without NodeTopology's list")
	}
	for _, want := range []string{"NodeTopology not listed yet", "nodetopologies.sextant.io", "not found", "kubectl get crd"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q, want it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "NodeBandwidth not listed") {
		t.Errorf("error %q names NodeBandwidth, whose list arrived", err)
	}
}

// fakeStore starts a Store over a fake client holding objs, whose lists fail with
// listErr's error where it returns one, and waits up to timeout for it to sync.
func fakeStore(t *testing.T, timeout time.Duration, listErr func(schema.GroupVersionResource) error, objs ...runtime.Object) (*Store, *dynamicfake.FakeDynamicClient, error) {
	t.Helper()
	gvrs := map[schema.GroupVersionResource]string{
		v1alpha1.GroupVersion.WithResource("nodebandwidths"): "NodeBandwidthList",
		v1alpha1.GroupVersion.WithResource("nodetopologies"): "NodeTopologyList",
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), gvrs, objs...)
	// The fake client's lists, as the API server would send them.
	list := func(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) ([]byte, error) {
		if listErr != nil {
			if err := listErr(gvr); err != nil {
				return nil, err
			}
		}
		l, err := client.Resource(gvr).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		return l.MarshalJSON()
	}
	s := New(client, list, 0)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s.Start(ctx)
	syncCtx, done := context.WithTimeout(ctx, timeout)
	defer done()
	return s, client, s.WaitForSync(syncCtx)
}
