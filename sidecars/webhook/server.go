package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sextant.io/sextant/internal/httpbound"
)

// Paths the webhook configurations point at.
const (
	PathMutate   = "/mutate-pod"
	PathValidate = "/validate-pod"
)

// MaxReviewBytes is the longest AdmissionReview the webhook reads. The API server
// refuses request bodies over 3 MiB, so an object it admits is at most that; an
// UPDATE's review carries the object and the old one, and the review's own fields (the
// user, the options) are kilobytes. 7 MiB holds both objects at the limit, with a MiB
// to spare for what encoding them as JSON adds.
const MaxReviewBytes = 7 << 20

// Handler serves the admission endpoints.
type Handler struct {
	Mutator MutatorConfig
	Log     logr.Logger
	// Metrics, when set, count requests, latency, patches and rejections.
	Metrics *Metrics
	// Quotas, when set, has the validating endpoint refuse pods past their
	// namespace's BandwidthQuotas.
	Quotas Quotas
	// Limit, when set, wraps the handling of each review, inside Metrics (a refused
	// review is counted with its code): the server's in-flight and body limits.
	Limit func(http.Handler) http.Handler
	// Probes, when set, wraps /healthz: the kubelet's probes have a limit of their own,
	// so that reviews held up do not fail them.
	Probes func(http.Handler) http.Handler
	// MaxBodyBytes bounds a review's body; 0: MaxReviewBytes.
	MaxBodyBytes int64
}

// ServeMux returns the webhook's routes, plus /healthz.
func (h *Handler) ServeMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(PathMutate, h.serve(webhookMutate, h.mutate))
	mux.Handle(PathValidate, h.serve(webhookValidate, h.validate))
	var healthz http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if h.Probes != nil {
		healthz = h.Probes(healthz)
	}
	mux.Handle("/healthz", healthz)
	return mux
}

type reviewFunc func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

func (h *Handler) serve(name string, review reviewFunc) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w := &statusRecorder{ResponseWriter: rw, code: http.StatusOK}
		var outcome reviewOutcome
		defer func() { h.Metrics.observe(name, w.code, start, outcome) }()
		if r.Method != http.MethodPost {
			http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
			return
		}
		var reviewing http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			outcome = h.answer(w, r, review)
		})
		if h.Limit != nil {
			reviewing = h.Limit(reviewing)
		}
		reviewing.ServeHTTP(w, r)
	})
}

// answer reads the AdmissionReview of r, writes the review's answer and returns its
// outcome.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, review reviewFunc) reviewOutcome {
	limit := h.MaxBodyBytes
	if limit <= 0 {
		limit = MaxReviewBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	switch {
	case httpbound.IsTooLarge(err):
		httpbound.Refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("AdmissionReview longer than the limit of %d bytes", limit))
		return reviewOutcome{}
	case err != nil:
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return reviewOutcome{}
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
		http.Error(w, "want an admission.k8s.io/v1 AdmissionReview with a request", http.StatusBadRequest)
		return reviewOutcome{}
	}
	resp := review(in.Request)
	resp.UID = in.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: resp}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
	return reviewOutcome{denied: !resp.Allowed, patched: len(resp.Patch) > 0}
}

func allowed() *admissionv1.AdmissionResponse { return &admissionv1.AdmissionResponse{Allowed: true} }

func denied(msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity, Message: msg,
	}}
}

func decodePod(raw []byte) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	return &pod, nil
}

func isPod(req *admissionv1.AdmissionRequest) bool {
	return req.Kind.Group == "" && req.Kind.Kind == "Pod" && req.SubResource == ""
}

func (h *Handler) mutate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if !isPod(req) || req.Operation != admissionv1.Create {
		return allowed()
	}
	pod, err := decodePod(req.Object.Raw)
	if err != nil {
		return denied(err.Error())
	}
	res, err := h.Mutator.Mutate(pod)
	if err != nil {
		return denied(err.Error())
	}
	resp := allowed()
	resp.Warnings = res.Warnings
	if !res.Changed {
		return resp
	}
	patch, err := podPatch(pod, res.Pod)
	if err != nil {
		return denied(err.Error())
	}
	if patch == nil {
		return resp // prepared before: a reinvocation
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	if h.Log.GetSink() != nil {
		h.Log.Info("prepared sidecars", "namespace", req.Namespace, "pod", podName(res.Pod), "patch", string(patch))
	}
	return resp
}

func (h *Handler) validate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if !isPod(req) || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return allowed()
	}
	pod, err := decodePod(req.Object.Raw)
	if err != nil {
		return denied(err.Error())
	}
	mine := sextantAnnotations(pod.Annotations)
	var old *corev1.Pod
	if req.Operation == admissionv1.Update {
		// Only a change is judged: a pod that slipped in while the webhook was down must
		// still be updatable (finalizers, labels, the Job controller's bookkeeping).
		old, err = decodePod(req.OldObject.Raw)
		if err != nil {
			return denied(err.Error())
		}
		if maps.Equal(mine, sextantAnnotations(old.Annotations)) {
			return allowed()
		}
	}
	if err := ValidateAnnotations(mine); err != nil {
		return denied("sextant: " + strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if resp := h.checkQuota(req, pod, old); resp != nil {
		return resp
	}
	return allowed()
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}

// podPatch is a JSON patch from before to after, replacing each changed top-level part
// of the pod the mutation may touch. "add" replaces a member that exists and creates
// one that does not.
func podPatch(before, after *corev1.Pod) ([]byte, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	var ops []op
	same := func(a, b any) bool {
		x, _ := json.Marshal(a)
		y, _ := json.Marshal(b)
		return bytes.Equal(x, y)
	}
	if !same(before.Labels, after.Labels) {
		ops = append(ops, op{"add", "/metadata/labels", after.Labels})
	}
	if !same(before.Annotations, after.Annotations) {
		ops = append(ops, op{"add", "/metadata/annotations", after.Annotations})
	}
	if !same(before.Spec.InitContainers, after.Spec.InitContainers) {
		ops = append(ops, op{"add", "/spec/initContainers", after.Spec.InitContainers})
	}
	if !same(before.Spec.Containers, after.Spec.Containers) {
		ops = append(ops, op{"add", "/spec/containers", after.Spec.Containers})
	}
	if !same(before.Spec.Volumes, after.Spec.Volumes) {
		ops = append(ops, op{"add", "/spec/volumes", after.Spec.Volumes})
	}
	if !same(before.Spec.ImagePullSecrets, after.Spec.ImagePullSecrets) {
		// Mutate adds the wrapper image's pull secrets; without them the install
		// container of a private image never starts (Init:ErrImagePull).
		ops = append(ops, op{"add", "/spec/imagePullSecrets", after.Spec.ImagePullSecrets})
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// certLoader serves the certificate in certFile/keyFile, reading them again when they
// change, so a renewed Secret (mounted as files) is picked up without a restart.
type certLoader struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	modTime           time.Time
}

func (l *certLoader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := os.Stat(l.certFile)
	if err != nil {
		if l.cert != nil {
			return l.cert, nil
		}
		return nil, fmt.Errorf("tls certificate %s: %w", l.certFile, err)
	}
	if l.cert == nil || !st.ModTime().Equal(l.modTime) {
		cert, err := tls.LoadX509KeyPair(l.certFile, l.keyFile)
		if err != nil {
			if l.cert != nil {
				return l.cert, nil // half-written renewal: keep serving the old one
			}
			return nil, fmt.Errorf("load tls key pair %s, %s: %w", l.certFile, l.keyFile, err)
		}
		l.cert, l.modTime = &cert, st.ModTime()
	}
	return l.cert, nil
}

// GetCertificate is tls.Config.GetCertificate.
type GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)

// FileCertificate serves the certificate in certFile and keyFile (PEM), read again when
// they change; it fails when they cannot be read now.
func FileCertificate(certFile, keyFile string) (GetCertificate, error) {
	loader := &certLoader{certFile: certFile, keyFile: keyFile}
	if _, err := loader.get(nil); err != nil {
		return nil, err
	}
	return loader.get, nil
}

// Serve serves h on ln with TLS, with the certificate of cert, within limits' timeouts,
// until ctx ends, and closes ln. The caller listens, so that an address that cannot be
// served fails the start before anything else begins.
func Serve(ctx context.Context, ln net.Listener, cert GetCertificate, h http.Handler, limits httpbound.Limits, log logr.Logger) error {
	srv := limits.Server(h, log.WithName("server"))
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("webhook server on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
