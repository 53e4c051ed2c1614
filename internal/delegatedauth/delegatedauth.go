// Package delegatedauth lets through only the callers the API server vouches for, as
// kube-scheduler's and kube-rbac-proxy's secure ports do: the caller's bearer token is
// authenticated with a TokenReview, and its user authorized for the request's
// non-resource path and verb with a SubjectAccessReview (RBAC's nonResourceURLs). A
// request without a token is refused with 401 (no anonymous user), one whose user may
// not with 403.
//
// Each answer is kept for a TTL in a bounded cache keyed by a hash of the token, so that
// a scraper's every scrape does not reach the API server. The reviews go through a
// client of their own: a flood of made-up tokens waits in that client's rate limiter,
// not in the one of the caller's other API requests.
//
// It is a small copy of what k8s.io/apiserver's delegating authenticator and
// authorizer do: importing those adds CEL and its dependencies to a binary, and their
// memory to the agent at start (docs/design/0071-agent-metrics-behind-tokenreview.md).
package delegatedauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"

	"sextant.io/sextant/internal/httpbound"
)

// cacheSize bounds the answers kept: a few bytes each, and a flood of made-up tokens
// pushes out the oldest rather than growing the cache.
const cacheSize = 4096

// reviewTimeout bounds each TokenReview and SubjectAccessReview.
const reviewTimeout = 10 * time.Second

// Authorizer asks the API server who a caller is and what it may do.
type Authorizer struct {
	kube  kubernetes.Interface
	ttl   time.Duration
	cache *cache.LRUExpireCache
}

// New is an Authorizer asking through kube, keeping each answer for ttl (0: none kept).
func New(kube kubernetes.Interface, ttl time.Duration) *Authorizer {
	return newWithClock(kube, ttl, realClock{})
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func newWithClock(kube kubernetes.Interface, ttl time.Duration, clock cache.Clock) *Authorizer {
	return &Authorizer{kube: kube, ttl: ttl, cache: cache.NewLRUExpireCacheWithClock(cacheSize, clock)}
}

// answer is what the API server said of one token for one verb and path.
type answer struct {
	code   int    // http.StatusOK when allowed
	reason string // why not
}

// Require serves h to callers whose token the API server authenticates and whose user
// may verb the non-resource path (in RBAC: nonResourceURLs [path], verbs [verb]); it
// refuses the others before h runs.
func (a *Authorizer) Require(verb, path string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sextant"`)
			httpbound.Refuse(w, http.StatusUnauthorized, "Unauthorized: send a bearer token of an account allowed to get "+path)
			return
		}
		ans, err := a.decide(r.Context(), token, verb, path)
		if err != nil {
			httpbound.Refuse(w, http.StatusServiceUnavailable, "cannot check the caller's token with the API server: "+err.Error())
			return
		}
		if ans.code != http.StatusOK {
			if ans.code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sextant"`)
			}
			httpbound.Refuse(w, ans.code, ans.reason)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearerToken is the request's bearer token, if it has one.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// decide is the cached answer for token, verb and path, or the API server's. Errors
// (the API server did not answer) are not kept.
func (a *Authorizer) decide(ctx context.Context, token, verb, path string) (answer, error) {
	key := fmt.Sprintf("%x\x00%s\x00%s", sha256.Sum256([]byte(token)), verb, path)
	if v, ok := a.cache.Get(key); ok {
		return v.(answer), nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	ans, err := a.review(ctx, token, verb, path)
	if err != nil {
		return answer{}, err
	}
	if a.ttl > 0 {
		a.cache.Add(key, ans, a.ttl)
	}
	return ans, nil
}

func (a *Authorizer) review(ctx context.Context, token, verb, path string) (answer, error) {
	tr, err := a.kube.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return answer{}, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return answer{code: http.StatusUnauthorized, reason: "Unauthorized: the API server does not accept the token"}, nil
	}
	user := tr.Status.User
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return answer{}, fmt.Errorf("subject access review: %w", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		return answer{code: http.StatusForbidden, reason: fmt.Sprintf("Forbidden: user %q may not %s %s", user.Username, verb, path)}, nil
	}
	return answer{code: http.StatusOK}, nil
}
