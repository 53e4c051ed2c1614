package delegatedauth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// apiServer is a fake API server knowing two tokens: reader's user may get /metrics,
// tenant's may not. It counts the reviews it answers.
type apiServer struct {
	mu            sync.Mutex
	tokenReviews  int
	accessReviews int
	down          bool
	lastSAR       authorizationv1.SubjectAccessReviewSpec
}

func (s *apiServer) client() *fake.Clientset {
	kube := fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.down {
			return true, nil, errors.New("connection refused")
		}
		s.tokenReviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		switch tr.Spec.Token {
		case "reader-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
				Username: "system:serviceaccount:monitoring:prometheus", Groups: []string{"system:serviceaccounts"},
				Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}}}}
		case "tenant-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:tenant:default"}}
		default:
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.accessReviews++
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		s.lastSAR = sar.Spec
		n := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:monitoring:prometheus" && n != nil && n.Path == "/metrics" && n.Verb == "get"
		return true, sar, nil
	})
	return kube
}

func (s *apiServer) reviews() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenReviews, s.accessReviews
}

func get(h http.Handler, authorization string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestRequireAnswersByTheAPIServersReviews(t *testing.T) {
	api := &apiServer{}
	clock := testingclock.NewFakeClock(time.Now())
	auth := newWithClock(api.client(), 10*time.Second, clock)
	served := 0
	h := auth.Require("get", "/metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served++ }))

	for _, c := range []struct {
		who, header string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"not a bearer token", "Basic dXNlcjpwYXNz", http.StatusUnauthorized},
		{"an empty bearer token", "Bearer ", http.StatusUnauthorized},
		{"a token the API server does not know", "Bearer made-up", http.StatusUnauthorized},
		{"a tenant's token", "Bearer tenant-token", http.StatusForbidden},
		{"a token allowed to get /metrics", "Bearer reader-token", http.StatusOK},
		{"a token allowed, scheme in lower case", "bearer reader-token", http.StatusOK},
	} {
		if w := get(h, c.header); w.Code != c.want {
			t.Errorf("%s: HTTP %d, want %d: %s", c.who, w.Code, c.want, w.Body)
		}
	}
	if served != 2 {
		t.Errorf("the handler ran %d times, want 2 (the allowed requests only)", served)
	}
	if api.lastSAR.UID != "" || len(api.lastSAR.Extra["authentication.kubernetes.io/pod-name"]) != 1 ||
		api.lastSAR.NonResourceAttributes == nil || *api.lastSAR.NonResourceAttributes != (authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}) {
		t.Errorf("the last SubjectAccessReview asked %+v, want the user's extra and get /metrics", api.lastSAR)
	}
}

func TestRequireAsksNothingWithoutAToken(t *testing.T) {
	api := &apiServer{}
	h := New(api.client(), time.Minute).Require("get", "/metrics", http.NotFoundHandler())
	if w := get(h, ""); w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" {
		t.Errorf("no token: HTTP %d, WWW-Authenticate %q; want 401 asking for a bearer token", w.Code, w.Header().Get("WWW-Authenticate"))
	}
	if tr, sar := api.reviews(); tr+sar != 0 {
		t.Errorf("a request without a token made %d token reviews and %d access reviews, want none", tr, sar)
	}
}

func TestRequireKeepsAnswersForTheTTL(t *testing.T) {
	api := &apiServer{}
	clock := testingclock.NewFakeClock(time.Now())
	auth := newWithClock(api.client(), 10*time.Second, clock)
	h := auth.Require("get", "/metrics", http.NotFoundHandler())
	for range 5 {
		get(h, "Bearer reader-token")
		get(h, "Bearer tenant-token")
	}
	if tr, sar := api.reviews(); tr != 2 || sar != 2 {
		t.Errorf("5 scrapes each of 2 tokens within the TTL: %d token reviews, %d access reviews; want 2 and 2", tr, sar)
	}
	// The API server is down: kept answers still stand, and a new token is refused
	// without anything being kept.
	api.mu.Lock()
	api.down = true
	api.mu.Unlock()
	if w := get(h, "Bearer reader-token"); w.Code != http.StatusNotFound {
		t.Errorf("a kept answer while the API server is down: HTTP %d, want the handler's 404", w.Code)
	}
	if w := get(h, "Bearer other"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("a new token while the API server is down: HTTP %d, want 503", w.Code)
	}
	api.mu.Lock()
	api.down = false
	api.mu.Unlock()
	clock.Step(11 * time.Second)
	get(h, "Bearer reader-token")
	if tr, _ := api.reviews(); tr != 3 {
		t.Errorf("after the TTL: %d token reviews, want 3 (asked again)", tr)
	}
}
