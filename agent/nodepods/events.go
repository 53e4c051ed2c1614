package nodepods

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// EventName is the name of the Event the agent records about pod for what suffix says
// (e.g. "numa-pinned"). It is derived from the pod, its UID's first characters (another
// pod of the same name may come) and suffix, so an agent that restarts and records the
// same again finds the Event there (AlreadyExists) instead of adding one.
func EventName(pod *corev1.Pod, suffix string) string {
	uid := string(pod.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	tail := "." + uid + "." + suffix
	name := pod.Name
	if max := 253 - len(tail); len(name) > max {
		// A name must end alphanumeric: the API server refuses one ending "-" or ".".
		name = strings.TrimRight(name[:max], "-.")
	}
	return name + tail
}

// CreateEvent creates ev as the agent of node, under its fixed name (such as EventName's)
// or, with only GenerateName, under one the server generates: an AlreadyExists then only
// means the server's pick was taken, and is returned as it is (there is no name to look
// up). Every agent may list all pods and so predict the fixed names: an Event already
// holding one stands for ev only if this agent wrote it in an earlier run. The
// sextant-agent-events policy makes an agent's events carry its own node as source.host,
// so one with another host, or none, is someone else's, perhaps another node's agent
// silencing this one's warning; ev is then created again under a name the server
// generates, which no one can take ahead.
func CreateEvent(ctx context.Context, kube kubernetes.Interface, node string, ev *corev1.Event, log logr.Logger) error {
	events := kube.CoreV1().Events(ev.Namespace)
	_, err := events.Create(ctx, ev, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) || ev.Name == "" {
		return err
	}
	held, err := events.Get(ctx, ev.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the event holding the name %s: %w", ev.Name, err)
	}
	if held.Source.Host == node && held.ReportingInstance == ev.ReportingInstance {
		return nil
	}
	again := ev.DeepCopy()
	again.Name, again.GenerateName = "", ev.Name+"."
	created, err := events.Create(ctx, again, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("record the event %s under a generated name: %w", ev.Name, err)
	}
	log.Info("an event this agent did not write held this event's name; recorded it under a generated name",
		"event", ev.Namespace+"/"+ev.Name, "generated", created.Name,
		"heldBy", held.Source.Host, "heldByInstance", held.ReportingInstance, "reason", ev.Reason)
	return nil
}

// Source is the part of a node's agent that records an Event.
type Source struct {
	// Node is the agent's node, the Event's source host: an agent may record Events
	// only as its own node's (the sextant-agent-events policy).
	Node string
	// Component is the Event's source component; empty is Component.
	Component string
	// Controller is the part of the agent that records the Event, its reporting
	// controller, e.g. "sextant.io/numa-pinning".
	Controller string
}

// PodEvent is what an Event on a pod says, and which Event it is.
type PodEvent struct {
	Type, Reason, Message string
	// Suffix says what the Event records, e.g. "numa-pinned": the Event is named
	// EventName(pod, Suffix), so an agent that restarts and records the same again
	// finds it there.
	Suffix string
	// Repeatable says what the Event records may happen again (a failure): each one
	// gets a name the server generates after the pod's name and Suffix.
	Repeatable bool
	// Container is the container of the pod the Event is about; empty for the pod.
	Container string
}

// NewPodEvent builds the Event src records on pod at now.
func NewPodEvent(src Source, pod *corev1.Pod, e PodEvent, now time.Time) *corev1.Event {
	component := src.Component
	if component == "" {
		component = Component
	}
	meta := metav1.ObjectMeta{Name: EventName(pod, e.Suffix), Namespace: pod.Namespace}
	if e.Repeatable {
		meta.Name, meta.GenerateName = "", pod.Name+"."+e.Suffix+"."
	}
	t := metav1.NewTime(now)
	return &corev1.Event{
		ObjectMeta: meta,
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace,
			Name: pod.Name, UID: pod.UID, FieldPath: fieldPath(pod, e.Container)},
		Reason: e.Reason, Message: e.Message, Type: e.Type,
		Source:         corev1.EventSource{Component: component, Host: src.Node},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		ReportingController: src.Controller, ReportingInstance: component + "-" + src.Node,
	}
}

// fieldPath names container within pod as an Event's involved object does; empty for
// the pod itself.
func fieldPath(pod *corev1.Pod, container string) string {
	if container == "" {
		return ""
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == container {
			return "spec.initContainers{" + container + "}"
		}
	}
	return "spec.containers{" + container + "}"
}

// NodeEvent builds an Event the agent records on its own Node, under a name the server
// generates: what it says (enforcement failed on an interface) may happen again. As the
// kubelet's, its object's UID is the node's name, which kubectl describe node looks for.
func NodeEvent(node, controller, typ, reason, msg string, now time.Time) *corev1.Event {
	t := metav1.NewTime(now)
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: node + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)},
		Reason:         reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: Component, Host: node},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		ReportingController: controller, ReportingInstance: Component + "-" + node,
	}
}

// Component is the agent's name as the source of its events.
const Component = "sextant-agent"
