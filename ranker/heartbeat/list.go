package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"sextant.io/sextant/api/v1alpha1"
)

// RawLister returns one page of a resource's list as the API server sends it (JSON).
type RawLister func(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) ([]byte, error)

// RESTRawLister is a RawLister over the API server of cfg.
func RESTRawLister(cfg *rest.Config) (RawLister, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	c.GroupVersion = &schema.GroupVersion{}
	c.ContentType, c.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	// DoRaw decodes nothing; the client only asks for a serializer to exist.
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	client, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("heartbeat list client: %w", err)
	}
	return func(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) ([]byte, error) {
		return client.Get().AbsPath("/apis", gvr.Group, gvr.Version, gvr.Resource).
			SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
			DoRaw(ctx)
	}, nil
}

// listWatch lists gvr a page at a time through list, turning each item into what the
// store holds (transform) before the next one is decoded, and watches it through client.
//
// Why not the dynamic client's List: it decodes a whole page into an UnstructuredList of
// nested maps, many times the size of the JSON, and the informer keeps every page until
// it has them all, which made the ranker's startup its peak of memory
// (docs/design/0061-lean-heartbeat-lists.md).
func listWatch(client dynamic.Interface, list RawLister, gvr schema.GroupVersionResource, kind string, transform func(any) (any, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			raw, err := list(ctx, gvr, opts)
			if err != nil {
				return nil, err
			}
			return decodeList(raw, kind, transform)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return client.Resource(gvr).Watch(ctx, opts)
		},
	}
}

// decodeList decodes a list page of kind's objects item by item into the store's
// objects. An item that does not decode even as an object becomes a Rejected with what
// can be read of its metadata, as a watched one would.
func decodeList(raw []byte, kind string, transform func(any) (any, error)) (*objectList, error) {
	var page struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ListMeta   `json:"metadata"`
		Items           []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, fmt.Errorf("decode list: %w", err)
	}
	out := &objectList{TypeMeta: page.TypeMeta, ListMeta: page.Metadata, Items: make([]runtime.Object, 0, len(page.Items))}
	for i, item := range page.Items {
		// As the watch decodes: numbers as int64 where they are integers.
		var m map[string]any
		err := utiljson.Unmarshal(item, &m)
		page.Items[i] = nil // what is decoded need not stay
		if err != nil || m == nil {
			var meta struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
			_ = json.Unmarshal(item, &meta)
			u := &unstructured.Unstructured{}
			u.SetName(meta.Metadata.Name)
			u.SetResourceVersion(meta.Metadata.ResourceVersion)
			if err == nil {
				err = errors.New("not an object")
			}
			out.Items = append(out.Items, newRejected(kind, u, reject(ReasonUndecodable, "decode %s %s: %v", kind, meta.Metadata.Name, err)))
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		// A list's items may leave their kind to the list.
		if u.GetKind() == "" {
			u.SetKind(kind)
		}
		if u.GetAPIVersion() == "" {
			u.SetAPIVersion(v1alpha1.GroupVersion.String())
		}
		obj, err := transform(u)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, obj.(runtime.Object))
	}
	return out, nil
}

// objectList is a page of the store's objects, as an informer's list expects it.
type objectList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

// DeepCopyObject implements runtime.Object.
func (l *objectList) DeepCopyObject() runtime.Object {
	out := &objectList{TypeMeta: l.TypeMeta, Items: make([]runtime.Object, len(l.Items))}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i, o := range l.Items {
		out.Items[i] = o.DeepCopyObject()
	}
	return out
}
