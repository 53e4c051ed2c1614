package nodepods

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestEventName(t *testing.T) {
	for _, c := range []struct {
		name, uid, suffix, want string
	}{
		{"job-x", "1c9d7b9f-6c4f-4d2b-8d7f-3a2e4b5c6d7e", "numa-pinned", "job-x.1c9d7b9f.numa-pinned"},
		{"job-x", "short", "sidecar-not-stopped.proxy", "job-x.short.sidecar-not-stopped.proxy"},
		{strings.Repeat("p", 253), "1c9d7b9f-6c4f", "device-mismatch", strings.Repeat("p", 253-len(".1c9d7b9f.device-mismatch")) + ".1c9d7b9f.device-mismatch"},
		// Cut right after a '-' or '.' (232 characters fit before the tail): the name must
		// still end with an alphanumeric character.
		{strings.Repeat("a", 231) + "-" + strings.Repeat("b", 21), "1c9d7b9f-6c4f", "numa-pinned", strings.Repeat("a", 231) + ".1c9d7b9f.numa-pinned"},
		{strings.Repeat("a", 230) + "--" + strings.Repeat("b", 21), "1c9d7b9f-6c4f", "numa-pinned", strings.Repeat("a", 230) + ".1c9d7b9f.numa-pinned"},
		{strings.Repeat("a", 231) + "." + strings.Repeat("b", 21), "1c9d7b9f-6c4f", "numa-pinned", strings.Repeat("a", 231) + ".1c9d7b9f.numa-pinned"},
	} {
		if errs := validation.IsDNS1123Subdomain(c.name); len(errs) > 0 {
			t.Fatalf("%.20s… is no valid pod name: %v", c.name, errs)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name, UID: k8stypes.UID(c.uid)}}
		got := EventName(pod, c.suffix)
		if got != c.want {
			t.Errorf("EventName(%.20s…, %q) = %.40s…, want %.40s…", c.name, c.suffix, got, c.want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("EventName(%.20s…, %q) = %q is not a valid object name: %v", c.name, c.suffix, got, errs)
		}
	}
}

func TestCreateEvent(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job-x", Namespace: "ns", UID: "1c9d7b9f-6c4f-4d2b-8d7f-3a2e4b5c6d7e"}}
	name := EventName(pod, "device-mismatch")
	event := func(host string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pod.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace,
				Name: pod.Name, UID: pod.UID},
			Reason: "DeviceAllocationMismatch", Message: "from " + host, Type: corev1.EventTypeWarning,
			Source:            corev1.EventSource{Component: "sextant-agent", Host: host},
			ReportingInstance: "sextant-agent-" + host,
		}
	}
	for _, c := range []struct {
		name    string
		held    *corev1.Event // the event already holding the name
		failGet bool
		// want: the events from node-b there afterwards, by name ("generated" for one the
		// server named)
		want    []string
		wantErr string
	}{
		{name: "free", want: []string{name}},
		{name: "held by this node", held: event("node-b"), want: []string{name}},
		{name: "held by another node", held: event("node-a"), want: []string{"generated"}},
		{name: "held by no host", held: event(""), want: []string{"generated"}},
		{name: "held, get fails", held: event("node-a"), failGet: true, wantErr: "apiserver away"},
	} {
		t.Run(c.name, func(t *testing.T) {
			kube := fake.NewClientset()
			if c.held != nil {
				if _, err := kube.CoreV1().Events("ns").Create(context.Background(), c.held, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// The fake does not generate names; the API server does.
			generated := 0
			kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
				ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
				if ev.Name == "" && ev.GenerateName != "" {
					generated++
					ev.Name = ev.GenerateName + "gen" + strconv.Itoa(generated)
				}
				return false, nil, nil
			})
			if c.failGet {
				kube.PrependReactor("get", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("apiserver away")
				})
			}
			err := CreateEvent(context.Background(), kube, "node-b", event("node-b"), logr.Discard())
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), name) {
					t.Fatalf("CreateEvent = %v, want an error naming %s and saying %q", err, name, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateEvent = %v", err)
			}
			list, err := kube.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var ours []string
			for _, ev := range list.Items {
				if ev.Source.Host != "node-b" {
					if ev.Name != name || c.held == nil || ev.Message != c.held.Message {
						t.Errorf("event %s from %q, want only the one held before", ev.Name, ev.Source.Host)
					}
					continue
				}
				if ev.Reason != "DeviceAllocationMismatch" || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.UID != pod.UID ||
					ev.InvolvedObject.Name != pod.Name || ev.ReportingInstance != "sextant-agent-node-b" {
					t.Errorf("event %s: %s %s on %s/%s from %s", ev.Name, ev.Type, ev.Reason, ev.InvolvedObject.Name, ev.InvolvedObject.UID, ev.ReportingInstance)
				}
				switch {
				case ev.Name == name:
					ours = append(ours, ev.Name)
				case strings.HasPrefix(ev.Name, name+"."):
					ours = append(ours, "generated")
				default:
					t.Errorf("event %s, want %s or a name generated from it", ev.Name, name)
				}
			}
			if strings.Join(ours, ",") != strings.Join(c.want, ",") {
				t.Errorf("events from node-b %q, want %q", ours, c.want)
			}
		})
	}
	// An event with only GenerateName (the sidecar terminator's) that meets AlreadyExists
	// gets that error back as it is: there is no name to read the holder by. (Outside the
	// table: its fake create reactor names events in place, which would name ev here.)
	t.Run("generated name taken", func(t *testing.T) {
		kube := fake.NewClientset()
		conflict := apierrors.NewAlreadyExists(corev1.Resource("events"), "job-x.sidecar.abcde")
		kube.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, conflict
		})
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "job-x.sidecar.", Namespace: "ns"}, Reason: "SidecarNotStopped"}
		err := CreateEvent(context.Background(), kube, "node-b", ev, logr.Discard())
		if err != conflict {
			t.Fatalf("CreateEvent = %v, want the create's error %v unchanged", err, conflict)
		}
		for _, a := range kube.Actions() {
			if a.GetVerb() != "create" {
				t.Errorf("CreateEvent did %s %s, want only the create", a.GetVerb(), a.GetResource().Resource)
			}
		}
	})
}

func TestNewPodEvent(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job-x", Namespace: "ns", UID: "1c9d7b9f-6c4f-4d2b-8d7f-3a2e4b5c6d7e"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "proxy"}},
			Containers:     []corev1.Container{{Name: "main"}},
		},
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name                  string
		src                   Source
		e                     PodEvent
		wantName, wantGen     string
		wantField, wantSource string
	}{
		{name: "named", src: Source{Node: "node-b", Controller: "sextant.io/numa-pinning"},
			e:        PodEvent{Type: corev1.EventTypeNormal, Reason: "NUMAPinned", Suffix: "numa-pinned", Message: "m"},
			wantName: "job-x.1c9d7b9f.numa-pinned", wantSource: "sextant-agent"},
		{name: "repeatable", src: Source{Node: "node-b", Component: "agent-x", Controller: "sextant.io/sidecar-terminator"},
			e:       PodEvent{Type: corev1.EventTypeWarning, Reason: "SidecarStopFailed", Suffix: "sidecar-stop-failed", Repeatable: true, Container: "proxy", Message: "m"},
			wantGen: "job-x.sidecar-stop-failed.", wantField: "spec.initContainers{proxy}", wantSource: "agent-x"},
		{name: "on a container", src: Source{Node: "node-b", Controller: "sextant.io/sidecar-terminator"},
			e:        PodEvent{Type: corev1.EventTypeWarning, Reason: "SidecarNotStopped", Suffix: "sidecar-not-stopped.main", Container: "main", Message: "m"},
			wantName: "job-x.1c9d7b9f.sidecar-not-stopped.main", wantField: "spec.containers{main}", wantSource: "sextant-agent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := NewPodEvent(c.src, pod, c.e, now)
			if ev.Name != c.wantName || ev.GenerateName != c.wantGen || ev.Namespace != "ns" {
				t.Errorf("name %q, generated from %q in %q; want %q, %q in ns", ev.Name, ev.GenerateName, ev.Namespace, c.wantName, c.wantGen)
			}
			want := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: "job-x", UID: pod.UID, FieldPath: c.wantField}
			if ev.InvolvedObject != want {
				t.Errorf("involved object %+v, want %+v", ev.InvolvedObject, want)
			}
			if ev.Type != c.e.Type || ev.Reason != c.e.Reason || ev.Message != c.e.Message || ev.Count != 1 {
				t.Errorf("%s %s %q count %d, want %s %s %q count 1", ev.Type, ev.Reason, ev.Message, ev.Count, c.e.Type, c.e.Reason, c.e.Message)
			}
			if ev.Source != (corev1.EventSource{Component: c.wantSource, Host: "node-b"}) ||
				ev.ReportingController != c.src.Controller || ev.ReportingInstance != c.wantSource+"-node-b" {
				t.Errorf("source %+v, reported by %s as %s", ev.Source, ev.ReportingController, ev.ReportingInstance)
			}
			if !ev.FirstTimestamp.Time.Equal(now) || !ev.LastTimestamp.Time.Equal(now) {
				t.Errorf("timestamps %v, %v, want %v", ev.FirstTimestamp, ev.LastTimestamp, now)
			}
		})
	}
}
