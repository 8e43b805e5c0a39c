// Package manifests holds gpuslice's admission manifests (the webhook's
// and the ValidatingAdmissionPolicies); its tests run the policies and
// the webhook's match conditions with the API server's own CEL libraries,
// on the webhook's own output among others.
package manifests

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/celpolicy"
)

// The webhook's identity, as webhook.yaml creates it.
const webhookUser = "system:serviceaccount:gpuslice-system:gpuslice-webhook"

var (
	podKind      = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	podResource  = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	claimKind    = schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"}
	claimRes     = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}
	templateKind = schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaimTemplate"}
	templateRes  = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaimtemplates"}
)

// loaded are the manifests, compiled.
type loaded struct {
	*celpolicy.Manifests
	policies map[string]*celpolicy.Policy
	webhook  *admissionregistrationv1.MutatingWebhook
	matcher  *celpolicy.Matcher
}

func load(t *testing.T) *loaded {
	t.Helper()
	m, err := celpolicy.Load("policies.yaml", "webhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := &loaded{Manifests: m, policies: map[string]*celpolicy.Policy{}}
	for i := range m.Policies {
		p, err := celpolicy.Compile(&m.Policies[i])
		if err != nil {
			t.Fatal(err)
		}
		l.policies[m.Policies[i].Name] = p
	}
	if len(m.Webhooks) != 1 || len(m.Webhooks[0].Webhooks) != 1 {
		t.Fatalf("want one MutatingWebhookConfiguration of one webhook, got %+v", m.Webhooks)
	}
	l.webhook = &m.Webhooks[0].Webhooks[0]
	if l.matcher, err = celpolicy.CompileMatchConditions(l.webhook); err != nil {
		t.Fatal(err)
	}
	return l
}

// admit runs a policy as the API server would on the creation of obj,
// a Pod, ResourceClaim or ResourceClaimTemplate, by user; "" when it
// admits, else its message.
func (l *loaded) admit(t *testing.T, policy string, obj runtime.Object, user string) string {
	t.Helper()
	req := celpolicy.Request{Object: obj, Operation: admission.Create, Namespace: "team", User: user}
	switch obj.(type) {
	case *resourcev1.ResourceClaim:
		req.Kind, req.Resource = claimKind, claimRes
	case *resourcev1.ResourceClaimTemplate:
		req.Kind, req.Resource = templateKind, templateRes
	case *corev1.Pod:
		req.Kind, req.Resource = podKind, podResource
	default:
		t.Fatalf("admit: a %T", obj)
	}
	p := l.policies[policy]
	if p == nil {
		t.Fatalf("no policy %s", policy)
	}
	msg, err := p.Validate(req)
	if err != nil {
		t.Fatalf("%s: %v", policy, err)
	}
	return msg
}

// The manifests keep the design's promises: every policy bound to deny;
// the webhook never blocks the cluster's pods (Ignore), leaves the system
// and its own namespace alone, has no side effect on a dry run; the
// webhook's identity is the one the policies name, with no more rights
// than it uses.
func TestManifestsAreWhole(t *testing.T) {
	l := load(t)
	for _, p := range l.Policies {
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("policy %s: failurePolicy %v, want Fail", p.Name, p.Spec.FailurePolicy)
		}
		if !slices.ContainsFunc(l.Bindings, func(b admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
			return b.Spec.PolicyName == p.Name && slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) &&
				b.Spec.ParamRef == nil && b.Spec.MatchResources == nil
		}) {
			t.Errorf("policy %s has no binding that denies everywhere", p.Name)
		}
	}
	w := l.webhook
	switch {
	case w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore:
		t.Errorf("webhook failurePolicy %v, want Ignore (the policies refuse what it missed)", w.FailurePolicy)
	case w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun:
		t.Errorf("webhook sideEffects %v, want NoneOnDryRun", w.SideEffects)
	case w.TimeoutSeconds == nil || *w.TimeoutSeconds > 10:
		t.Errorf("webhook timeoutSeconds %v, want at most 10", w.TimeoutSeconds)
	case w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy:
		t.Errorf("webhook reinvocationPolicy %v, want IfNeeded", w.ReinvocationPolicy)
	case !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}):
		t.Errorf("webhook admissionReviewVersions %v, want v1", w.AdmissionReviewVersions)
	case len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
		!slices.Equal(w.Rules[0].Resources, []string{"pods"}):
		t.Errorf("webhook rules %+v, want pods CREATE", w.Rules)
	case w.NamespaceSelector == nil || len(w.NamespaceSelector.MatchExpressions) != 1 ||
		!slices.Equal(w.NamespaceSelector.MatchExpressions[0].Values, []string{"kube-system", "gpuslice-system"}):
		t.Errorf("webhook namespaceSelector %+v, want kube-system and gpuslice-system left out", w.NamespaceSelector)
	}
	if cond := l.Policies[slices.IndexFunc(l.Policies, func(p admissionregistrationv1.ValidatingAdmissionPolicy) bool {
		return p.Name == "gpuslice-webhook-templates"
	})].Spec.MatchConditions[0].Expression; !bytes.Contains([]byte(cond), []byte("'"+webhookUser+"'")) {
		t.Errorf("gpuslice-webhook-templates matches %s, not the webhook's identity %s", cond, webhookUser)
	}
	checkRBAC(t)
}

// checkRBAC: the webhook's service account and the only rights it has.
func checkRBAC(t *testing.T) {
	docs := documents(t, "webhook.yaml")
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	for _, d := range docs {
		switch d.GetKind() {
		case "ClusterRole":
			convert(t, d, &role)
		case "ClusterRoleBinding":
			convert(t, d, &binding)
		case "Role", "RoleBinding":
			t.Errorf("unexpected %s %s", d.GetKind(), d.GetName())
		}
	}
	want := map[string][]string{
		"resourceclaimtemplates": {"get", "create"},
		"resourceclaims":         {"get"},
		"resourceslices":         {"list"},
		"nodes":                  {"list"},
	}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if !slices.Equal(r.Verbs, want[res]) {
				t.Errorf("ClusterRole: %s %v, want %v", res, r.Verbs, want[res])
			}
			delete(want, res)
		}
	}
	if len(want) > 0 {
		t.Errorf("ClusterRole lacks %v", want)
	}
	if len(binding.Subjects) != 1 || "system:serviceaccount:"+binding.Subjects[0].Namespace+":"+binding.Subjects[0].Name != webhookUser ||
		binding.RoleRef.Name != role.Name {
		t.Errorf("ClusterRoleBinding %+v, want %s bound to %s", binding, role.Name, webhookUser)
	}
}

// documents reads every object of a YAML file.
func documents(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var u unstructured.Unstructured
		if err := r.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if u.Object != nil {
			out = append(out, &u)
		}
	}
}

func convert(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}
