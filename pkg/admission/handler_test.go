package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
)

// review is an AdmissionReview of an object, as the API server sends it.
func review(t *testing.T, kind string, op admissionv1.Operation, obj any) []byte {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("review-1"), Kind: metav1.GroupVersionKind{Version: "v1", Kind: kind},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: strings.ToLower(kind) + "s"},
			Namespace: "team", Operation: op, Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends a body to the handler and decodes the review it answers.
func post(t *testing.T, url string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("status %s: %v", resp.Status, err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("answer %+v, want an admission.k8s.io/v1 AdmissionReview with a response", out)
	}
	if out.Response.UID != "review-1" {
		t.Errorf("response UID %q, want the request's", out.Response.UID)
	}
	return out.Response
}

func TestHandlerTranslates(t *testing.T) {
	m, _ := mutator()
	srv := httptest.NewServer(&Handler{Mutator: m})
	defer srv.Close()
	pod := podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=30")}, AnnotationPriority+"=high")
	resp := post(t, srv.URL, review(t, "Pod", admissionv1.Create, pod))
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response %+v, want allowed with a JSON patch", resp)
	}
	var ops []PatchOp
	if err := json.Unmarshal(resp.Patch, &ops); err != nil {
		t.Fatal(err)
	}
	checkTranslated(t, pod, apply(t, pod, ops), []translated{
		{"main", "vgpu-main", vgpuRequest{MemoryBytes: 4 * gib, Cores: 30, Cards: 1, Priority: "high"}}})
}

func TestHandlerRefuses(t *testing.T) {
	m, _ := mutator()
	srv := httptest.NewServer(&Handler{Mutator: m})
	defer srv.Close()
	pod := podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=33")})
	resp := post(t, srv.URL, review(t, "Pod", admissionv1.Create, pod))
	want := `container "main": resource volcano.sh/gpu-core.percentage=33: want 0-100 in steps of 5`
	if resp.Allowed || resp.Patch != nil || resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity ||
		resp.Result.Reason != metav1.StatusReasonInvalid || resp.Result.Message != want {
		t.Errorf("response %+v, want refused (422 Invalid) with %q", resp, want)
	}
}

// An API server that cannot create the template: the pod is refused, not
// admitted untranslated.
func TestHandlerFailsClosed(t *testing.T) {
	m, client := mutator()
	client.PrependReactor("create", "resourceclaimtemplates", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd is down")
	})
	srv := httptest.NewServer(&Handler{Mutator: m})
	defer srv.Close()
	pod := podOf([]corev1.Container{ctr("main", ResourceMemory+"=32")})
	resp := post(t, srv.URL, review(t, "Pod", admissionv1.Create, pod))
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusInternalServerError ||
		!strings.Contains(resp.Result.Message, "etcd is down") ||
		!strings.HasSuffix(resp.Result.Message, "the pod is refused rather than admitted without its vGPU isolation") {
		t.Errorf("response %+v, want refused with the cause", resp)
	}
}

func TestHandlerPassesOthers(t *testing.T) {
	m, client := mutator()
	srv := httptest.NewServer(&Handler{Mutator: m})
	defer srv.Close()
	asking := podOf([]corev1.Container{ctr("main", ResourceMemory+"=32")})
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"a pod update", review(t, "Pod", admissionv1.Update, asking)},
		{"another kind", review(t, "ConfigMap", admissionv1.Create, &corev1.ConfigMap{})},
		{"a pod asking for nothing", review(t, "Pod", admissionv1.Create, podOf([]corev1.Container{ctr("main", "cpu=1")}))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp := post(t, srv.URL, tc.body); !resp.Allowed || resp.Patch != nil || resp.Result != nil {
				t.Errorf("response %+v, want allowed unchanged", resp)
			}
		})
	}
	if a := client.Actions(); len(a) != 0 {
		t.Errorf("API calls: %v", a)
	}
}

func TestHandlerRejectsBadRequests(t *testing.T) {
	m, _ := mutator()
	srv := httptest.NewServer(&Handler{Mutator: m})
	defer srv.Close()
	for _, tc := range []struct {
		name, method, contentType, body string
		want                            int
	}{
		{"GET", http.MethodGet, "", "", http.StatusMethodNotAllowed},
		{"not JSON", http.MethodPost, "text/plain", "{}", http.StatusUnsupportedMediaType},
		{"garbage", http.MethodPost, "application/json", "{", http.StatusBadRequest},
		{"no request", http.MethodPost, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"too large", http.MethodPost, "application/json", `{"x":"` + strings.Repeat("a", maxReview) + `"}`, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.contentType)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}
