package admission

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxReview bounds an AdmissionReview's body: a pod is at most 1.5 MiB
// in etcd, and the review carries it with its metadata.
const maxReview = 8 << 20

// DefaultReviewTimeout bounds the API calls of one review, within the
// webhook configuration's timeoutSeconds (10).
const DefaultReviewTimeout = 8 * time.Second

// Handler serves admission reviews (admission.k8s.io/v1, POSTed as
// JSON): pods being created are given to the Mutator, everything else is
// allowed unchanged.
type Handler struct {
	Mutator *Mutator
	Log     *slog.Logger
	Timeout time.Duration // DefaultReviewTimeout when 0
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		http.Error(w, "want Content-Type application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReview))
	if err != nil {
		http.Error(w, "reading the review: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "want an admission.k8s.io/v1 AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	timeout := h.Timeout
	if timeout == 0 {
		timeout = DefaultReviewTimeout
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: h.review(ctx, review.Request)}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&out); err != nil {
		h.log().Warn("writing an admission response", "err", err)
	}
}

// review answers one request.
func (h *Handler) review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(resp, http.StatusBadRequest, metav1.StatusReasonBadRequest, "gpuslice: reading the pod: "+err.Error())
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	log := h.log().With("namespace", req.Namespace, "pod", name, "uid", req.UID)
	ops, err := h.Mutator.Mutate(ctx, &pod, req.Namespace, req.DryRun != nil && *req.DryRun)
	var refusal *Refusal
	switch {
	case errors.As(err, &refusal):
		log.Info("refused", "reason", refusal.Message)
		return deny(resp, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, refusal.Message)
	case err != nil:
		log.Error("failed", "err", err)
		return deny(resp, http.StatusInternalServerError, metav1.StatusReasonInternalError,
			"gpuslice: "+err.Error()+"; the pod is refused rather than admitted without its vGPU isolation")
	case len(ops) == 0:
		return resp
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return deny(resp, http.StatusInternalServerError, metav1.StatusReasonInternalError, "gpuslice: writing the patch: "+err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	log.Info("translated", "patch", string(patch))
	return resp
}

func deny(resp *admissionv1.AdmissionResponse, code int32, reason metav1.StatusReason, msg string) *admissionv1.AdmissionResponse {
	resp.Allowed = false
	resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}
	return resp
}

func (h *Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}
