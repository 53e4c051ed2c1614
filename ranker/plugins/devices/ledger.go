package devices

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// forgetDelay is how long a reservation outlives the moment its pod shows up bound and
// annotated: the scheduler cache and this plugin hear the same informer event in no
// fixed order, and the delay keeps the devices held until the cache has the annotation.
const forgetDelay = time.Minute

type reservation struct {
	node  string
	alloc Allocation
}

// ledger holds the devices this plugin reserved for pods whose annotation is not visible
// yet. It is consulted only for pods that carry no devices.sextant.io/allocated, so a
// device is never counted twice.
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

func (l *ledger) get(uid types.UID, node string) (Allocation, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r, ok := l.m[uid]
	if !ok || r.node != node {
		return nil, false
	}
	return r.alloc, true
}

// forgetOnPodEvents drops reservations of deleted pods at once and of pods that became
// bound and annotated after forgetDelay.
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
