package numa

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// forgetDelay is how long a reservation outlives the moment its pod shows up bound and
// annotated. The scheduler cache and this plugin hear the same informer event in no fixed
// order; the delay keeps the reservation until the cache surely holds the annotated pod.
const forgetDelay = time.Minute

// reservation is what a pod reserved by this plugin takes until its annotation is visible.
type reservation struct {
	node  string
	nodes []int32
	req   Request
}

// ledger holds the reservations of pods this plugin reserved. It is consulted only for
// pods on a node that do not carry numa.sextant.io/nodes yet, so a pod is never counted
// twice.
type ledger struct {
	mu sync.RWMutex
	m  map[types.UID]reservation
}

func newLedger() *ledger { return &ledger{m: map[types.UID]reservation{}} }

func (l *ledger) reserve(uid types.UID, r reservation) {
	l.mu.Lock()
	l.m[uid] = r
	n := len(l.m)
	l.mu.Unlock()
	reservations.Set(float64(n))
}

func (l *ledger) forget(uid types.UID) {
	l.mu.Lock()
	delete(l.m, uid)
	n := len(l.m)
	l.mu.Unlock()
	reservations.Set(float64(n))
}

func (l *ledger) get(uid types.UID, node string) (reservation, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r, ok := l.m[uid]
	if !ok || r.node != node {
		return reservation{}, false
	}
	return r, true
}

// forgetOnPodEvents drops reservations of deleted pods at once and of pods that became
// bound and annotated after forgetDelay, so the ledger does not grow without bound.
func (l *ledger) forgetOnPodEvents(inf cache.SharedIndexInformer, annotated func(*v1.Pod) bool) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, newObj any) {
			pod, ok := newObj.(*v1.Pod)
			if !ok || !annotated(pod) {
				return
			}
			if _, held := l.get(pod.UID, pod.Spec.NodeName); held {
				uid := pod.UID
				time.AfterFunc(forgetDelay, func() { l.forget(uid) })
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				l.forget(pod.UID)
			}
		},
	})
	return err
}
