package bandwidth

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// signerName keys this plugin's part of the pod signature used by opportunistic
// batching. Two pods with equal bandwidth annotations get equal Filter and Score
// results from this plugin on the same cluster state; the scheduler re-runs Filter on
// a batched hint, so ledger changes between them cannot overfill a node.
const signerName = "v1.Pod.Annotations.SextantBandwidth()"

// SignPod implements fwk.SignPlugin, so that enabling this plugin does not switch off
// batching for every pod.
func (pl *BandwidthAware) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{{Key: signerName, Value: bandwidthAnnotations(pod.Annotations)}}, nil
}
