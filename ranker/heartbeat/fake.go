package heartbeat

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"sextant.io/sextant/api/v1alpha1"
)

// A Store fed by hand instead of by watches: tests of code that reads a Store build one
// with NewFromObjects, and Shared hands an empty one to an Offline process. Put, PutAt
// and Delete are for such a Store only, since a watched Store's objects come from its
// informers alone.

// NewFromObjects returns a Store holding the given objects and nothing else, for tests
// of code that reads a Store and for an Offline process. Put adds or replaces more.
func NewFromObjects(objs ...runtime.Object) *Store {
	registerMetrics()
	s := &Store{
		bandwidth: cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.NodeBandwidth{}, 0, cache.Indexers{}),
		topology:  cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.NodeTopology{}, 0, cache.Indexers{}),
		nodes:     newIndex(),
		now:       time.Now,
		rejected:  map[rejectKey]string{},
	}
	for _, o := range objs {
		s.Put(o)
	}
	return s
}

// Put adds or replaces a heartbeat object of a Store made by NewFromObjects, as an
// informer update would, arriving now. The object is taken as decoded and validated
// (DecodeBandwidth, DecodeTopology); a *Rejected stands for one that was not.
func (s *Store) Put(obj runtime.Object) { s.PutAt(obj, s.now()) }

// PutAt is Put of an object that arrived at received (on the ranker's clock), for
// tests of staleness.
func (s *Store) PutAt(obj runtime.Object, received time.Time) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		_ = s.bandwidth.GetStore().Update(o)
	case *v1alpha1.NodeTopology:
		_ = s.topology.GetStore().Update(o)
	}
	s.put(obj, received, false)
}

// Delete removes a heartbeat object from a Store made by NewFromObjects, as an informer
// delete would.
func (s *Store) Delete(obj runtime.Object) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		_ = s.bandwidth.GetStore().Delete(o)
	case *v1alpha1.NodeTopology:
		_ = s.topology.GetStore().Delete(o)
	}
	s.remove(obj)
}
