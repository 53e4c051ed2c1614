package bandwidth

import (
	"context"
	"fmt"
	"reflect"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/bandwidthquota"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
)

// Quotas gives a namespace's BandwidthQuotas.
type Quotas interface {
	// Of returns the namespace's quotas; nil without any.
	Of(namespace string) []*v1alpha1.BandwidthQuota
	// Synced reports whether the quotas have been listed.
	Synced() bool
}

var quotaResource = v1alpha1.GroupVersion.WithResource("bandwidthquotas")

// quotaInformer is Quotas from a watch of every namespace's BandwidthQuotas, and writes
// their status.used.
type quotaInformer struct {
	informer cache.SharedIndexInformer
	client   dynamic.NamespaceableResourceInterface
}

// startQuotas watches BandwidthQuotas; tests replace it. Offline (no API server) it
// returns nil: no quotas.
var startQuotas = func(ctx context.Context, cfg *rest.Config) (*quotaInformer, error) {
	if heartbeat.IsOffline() {
		return nil, nil
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("BandwidthQuota client: %w", err)
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	informer := factory.ForResource(quotaResource).Informer()
	// Typed once on arrival, not at every PreFilter.
	if err := informer.SetTransform(func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		var q v1alpha1.BandwidthQuota
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &q); err != nil {
			klog.ErrorS(err, "Ignoring a BandwidthQuota that does not decode", "quota", klog.KObj(u))
			return &v1alpha1.BandwidthQuota{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace()}}, nil
		}
		return &q, nil
	}); err != nil {
		return nil, err
	}
	// The process's lifetime, as the heartbeat store's: plugin contexts end with their
	// profile.
	factory.Start(context.WithoutCancel(ctx).Done())
	return &quotaInformer{informer: informer, client: client.Resource(quotaResource)}, nil
}

// Of implements Quotas.
func (q *quotaInformer) Of(namespace string) []*v1alpha1.BandwidthQuota {
	objs, err := q.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	if err != nil || len(objs) == 0 {
		return nil
	}
	out := make([]*v1alpha1.BandwidthQuota, 0, len(objs))
	for _, o := range objs {
		if bq, ok := o.(*v1alpha1.BandwidthQuota); ok {
			out = append(out, bq)
		}
	}
	return out
}

// Synced implements Quotas.
func (q *quotaInformer) Synced() bool { return q.informer.HasSynced() }

// checkQuota returns PreFilter's refusal of a pod whose required rates would take its
// namespace past a BandwidthQuota beside the pods already placed (by this ranker or
// bound by another scheduler, and not finished), naming the quota; nil where none
// applies. Until the quotas are listed it checks nothing: the webhook has checked the
// pod at admission, and a ranker without the CRD still places pods.
func (pl *BandwidthAware) checkQuota(pod *v1.Pod) *fwk.Status {
	if pl.quotas == nil || !pl.quotas.Synced() {
		return nil
	}
	quotas := pl.quotas.Of(pod.Namespace)
	if len(quotas) == 0 {
		return nil
	}
	network, claim, ok := bandwidthquota.Claim(pod.Annotations)
	if !ok {
		return nil
	}
	used := pl.ledger.NamespaceUsage(pod.Namespace, pod.UID)
	if err := bandwidthquota.Check(quotas, used, network, claim); err != nil {
		filterRejections.WithLabelValues(reasonQuota).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	return nil
}

// quotaStatusEvery is how often the leader writes the quotas' status.used.
const quotaStatusEvery = 15 * time.Second

// writeQuotaStatus keeps each quota's status.used at what the ledger counts, on the
// leader, until ctx ends.
func (pl *BandwidthAware) writeQuotaStatus(ctx context.Context, q *quotaInformer) {
	t := time.NewTicker(quotaStatusEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !pl.scheduling.Load() || !q.Synced() {
			continue
		}
		for _, obj := range q.informer.GetStore().List() {
			bq, ok := obj.(*v1alpha1.BandwidthQuota)
			if !ok || len(bq.Spec.Hard) == 0 {
				continue
			}
			used := bandwidthquota.Status(bq, pl.ledger.NamespaceUsage(bq.Namespace, ""))
			if reflect.DeepEqual(used, bq.Status.Used) {
				continue
			}
			next := bq.DeepCopy()
			next.Status.Used = used
			now := metav1.Now()
			next.Status.UpdateTime = &now
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(next)
			if err != nil {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			u.SetAPIVersion(v1alpha1.GroupVersion.String())
			u.SetKind("BandwidthQuota")
			if _, err := q.client.Namespace(bq.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
				klog.FromContext(ctx).V(2).Info("Could not write a BandwidthQuota's status; trying again later", "quota", klog.KObj(bq), "err", err)
			}
		}
	}
}

// quotaChanged brings back the waiting pods of a namespace whose quota changed.
func (pl *BandwidthAware) quotaChanged(obj any) {
	if pl.waiting == nil {
		return
	}
	ns := ""
	switch o := obj.(type) {
	case *v1alpha1.BandwidthQuota:
		ns = o.Namespace
	case cache.DeletedFinalStateUnknown:
		if bq, ok := o.Obj.(*v1alpha1.BandwidthQuota); ok {
			ns = bq.Namespace
		}
	}
	pl.waiting.Activate(klog.Background(), func(p *v1.Pod) bool { return ns == "" || p.Namespace == ns })
}
