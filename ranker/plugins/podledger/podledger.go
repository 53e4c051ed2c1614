// Package podledger holds what a plugin reserved for a pod in Reserve (NUMA nodes,
// devices) until the pod's own annotation shows it.
//
// NUMAAware and DeviceAware count a node's pods by their annotations. Between Reserve
// and the moment the annotated pod reaches the scheduler's cache, a pod on the node
// carries no annotation yet, and only the ledger says what it took; the plugins consult
// it for such pods alone, so a pod is never counted twice.
package podledger

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// ForgetDelay is how long a reservation outlives the moment its pod shows up bound and
// annotated. The scheduler cache and the plugin hear the same informer event in no fixed
// order; the delay keeps the reservation until the cache surely holds the annotated pod.
const ForgetDelay = time.Minute

// Ledger maps pods to what they reserved on one node. It is safe for concurrent use.
type Ledger[T any] struct {
	mu sync.RWMutex
	m  map[types.UID]entry[T]
	// size is told the number of reservations after every change (a plugin's gauge).
	size func(n int)
}

type entry[T any] struct {
	node  string
	value T
}

// New returns an empty ledger that reports its size to size, if not nil.
func New[T any](size func(n int)) *Ledger[T] {
	return &Ledger[T]{m: map[types.UID]entry[T]{}, size: size}
}

// Reserve records that the pod took value on node, replacing what it held before.
func (l *Ledger[T]) Reserve(uid types.UID, node string, value T) {
	l.mu.Lock()
	l.m[uid] = entry[T]{node: node, value: value}
	n := len(l.m)
	l.mu.Unlock()
	l.report(n)
}

// Forget drops the pod's reservation, if any.
func (l *Ledger[T]) Forget(uid types.UID) {
	l.mu.Lock()
	delete(l.m, uid)
	n := len(l.m)
	l.mu.Unlock()
	l.report(n)
}

func (l *Ledger[T]) report(n int) {
	if l.size != nil {
		l.size(n)
	}
}

// Get returns what the pod reserved on node; ok is false when it holds nothing there.
func (l *Ledger[T]) Get(uid types.UID, node string) (value T, ok bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	e, ok := l.m[uid]
	if !ok || e.node != node {
		return value, false
	}
	return e.value, true
}

// ForgetOnPodEvents drops the reservations of deleted pods at once and of pods that
// became bound and annotated (annotated reports whether a pod carries the plugin's
// annotation) after ForgetDelay, so the ledger does not grow without bound.
func (l *Ledger[T]) ForgetOnPodEvents(inf cache.SharedIndexInformer, annotated func(*v1.Pod) bool) error {
	return l.forgetOnPodEvents(inf, annotated, ForgetDelay)
}

func (l *Ledger[T]) forgetOnPodEvents(inf cache.SharedIndexInformer, annotated func(*v1.Pod) bool, delay time.Duration) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, newObj any) {
			pod, ok := newObj.(*v1.Pod)
			if !ok || !annotated(pod) {
				return
			}
			if _, held := l.Get(pod.UID, pod.Spec.NodeName); held {
				uid := pod.UID
				time.AfterFunc(delay, func() { l.Forget(uid) })
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				l.Forget(pod.UID)
			}
		},
	})
	return err
}
