package heartbeat

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sextant.io/sextant/api/v1alpha1"
)

// A listed page becomes the store's objects item by item: usable items typed, an item
// whose kind the list leaves implicit typed too, and items that cannot be used (a bad
// figure, not an object at all, a status that is not an object) Rejected with the
// identity that can be read.
func TestDecodeList(t *testing.T) {
	var noKind map[string]any
	if err := json.Unmarshal([]byte(goodBandwidth), &noKind); err != nil {
		t.Fatal(err)
	}
	delete(noKind, "kind")
	delete(noKind, "apiVersion")
	noKind["metadata"].(map[string]any)["name"] = "no-kind"
	noKindJSON, _ := json.Marshal(noKind)
	page := `{"kind":"NodeBandwidthList","apiVersion":"sextant.io/v1alpha1","metadata":{"resourceVersion":"42","continue":"c1"},"items":[` +
		goodBandwidth + `,` + string(noKindJSON) + `,` +
		string(withStatus(t, goodBandwidth, "window", `"soon"`)) + `,` +
		`"a string",` + `{"metadata":{"name":"broken","resourceVersion":"9"},"status":[1,2]}]}`
	list, err := decodeList([]byte(page), kindBandwidth, storeBandwidth)
	if err != nil {
		t.Fatal(err)
	}
	if list.ResourceVersion != "42" || list.Continue != "c1" {
		t.Errorf("list metadata %+v, want resourceVersion 42 and continue c1", list.ListMeta)
	}
	if len(list.Items) != 5 {
		t.Fatalf("%d items, want 5", len(list.Items))
	}
	for i, want := range []string{"typed", "typed", ReasonUndecodable, ReasonUndecodable, ReasonUndecodable} {
		switch o := list.Items[i].(type) {
		case *v1alpha1.NodeBandwidth:
			if want != "typed" {
				t.Errorf("item %d: usable (%s), want rejected %s", i, o.Name, want)
			}
			if len(o.Status.Networks) == 0 && o.Status.Total == nil {
				t.Errorf("item %d: no figures held: %+v", i, o.Status)
			}
		case *Rejected:
			if o.Reason() != want || o.Kind != kindBandwidth {
				t.Errorf("item %d: rejected %s (%s, kind %q), want %s of kind %s", i, o.Reason(), o.Err, o.Kind, want, kindBandwidth)
			}
		default:
			t.Errorf("item %d: %T", i, o)
		}
	}
	if n, ok := list.Items[1].(*v1alpha1.NodeBandwidth); ok && n.Name != "no-kind" {
		t.Errorf("item without kind decoded as %s", n.Name)
	}
	if r, ok := list.Items[4].(*Rejected); ok && (r.Name != "broken" || r.ResourceVersion != "9") {
		t.Errorf("rejected item's identity %s/%s, want broken/9", r.Name, r.ResourceVersion)
	}
	if _, err := decodeList([]byte(`{"items":`), kindBandwidth, storeBandwidth); err == nil {
		t.Error("a cut list decoded without error")
	}
}

// RESTRawLister asks the API server for the resource's list as JSON, with the list
// options as query parameters, and returns the body as sent.
func TestRESTRawLister(t *testing.T) {
	body := `{"kind":"NodeBandwidthList","items":[]}`
	var gotPath, gotQuery, gotAccept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery, gotAccept = r.URL.Path, r.URL.RawQuery, r.Header.Get("Accept")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	list, err := RESTRawLister(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := list(context.Background(), v1alpha1.GroupVersion.WithResource("nodebandwidths"), metav1.ListOptions{Limit: 500, ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != body {
		t.Errorf("body %q, want %q", raw, body)
	}
	if gotPath != "/apis/sextant.io/v1alpha1/nodebandwidths" || !strings.Contains(gotQuery, "limit=500") ||
		!strings.Contains(gotQuery, "resourceVersion=0") || !strings.Contains(gotAccept, "application/json") {
		t.Errorf("asked %s?%s (Accept %q)", gotPath, gotQuery, gotAccept)
	}
}
