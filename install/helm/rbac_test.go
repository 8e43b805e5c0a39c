package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// apiCall is one kind of request an identity's code makes, and where: a
// file of this module ("" module) or of a dependency's, and a line of it
// that makes the call (so that the table goes stale loudly when the code
// changes).
type apiCall struct {
	group, resource, verb string
	module, file, code    string
}

const draModule = "k8s.io/dynamic-resource-allocation"

// The agent's DRA driver: nri-plugin/dra and the kubelet plugin library.
var agentCalls = []apiCall{
	{"resource.k8s.io", "resourceslices", "list", draModule, "resourceslice/resourceslicecontroller.go", "c.resourceClient.ResourceSlices().List(ctx, options)"},
	{"resource.k8s.io", "resourceslices", "watch", draModule, "resourceslice/resourceslicecontroller.go", "c.resourceClient.ResourceSlices().Watch(ctx, options)"},
	{"resource.k8s.io", "resourceslices", "create", draModule, "resourceslice/resourceslicecontroller.go", "c.resourceClient.ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})"},
	{"resource.k8s.io", "resourceslices", "update", draModule, "resourceslice/resourceslicecontroller.go", "c.resourceClient.ResourceSlices().Update(ctx, slice, metav1.UpdateOptions{})"},
	{"resource.k8s.io", "resourceslices", "delete", draModule, "resourceslice/resourceslicecontroller.go", "c.resourceClient.ResourceSlices().Delete(ctx, slice.Name, options)"},
	{"", "nodes", "get", draModule, "resourceslice/resourceslicecontroller.go", "c.coreClient.Nodes().Get(ctx, c.owner.Name, metav1.GetOptions{})"},
	{"resource.k8s.io", "resourceclaims", "get", draModule, "kubeletplugin/draplugin.go", "d.resourceClient.ResourceClaims(claimReq.Namespace).Get(ctx, claimReq.Name, metav1.GetOptions{})"},
	{"", "pods", "get", "", "nri-plugin/dra/reschedule.go", "r.client.CoreV1().Pods(ns).Get(ctx, ref.Name, metav1.GetOptions{})"},
	{"", "pods/eviction", "create", "", "nri-plugin/dra/reschedule.go", "r.client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{"},
}

// The webhook: pkg/admission.
var webhookCalls = []apiCall{
	{"resource.k8s.io", "resourceclaimtemplates", "get", "", "pkg/admission/template.go", "got, err := api.Get(ctx, want.Name, metav1.GetOptions{})"},
	{"resource.k8s.io", "resourceclaimtemplates", "create", "", "pkg/admission/template.go", "got, err = api.Create(ctx, want, metav1.CreateOptions{})"},
	{"resource.k8s.io", "resourceclaims", "get", "", "pkg/admission/initclaims.go", "client.ResourceV1().ResourceClaims(namespace).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})"},
	{"resource.k8s.io", "resourceslices", "list", "", "pkg/admission/cardmemory.go", "c.Client.ResourceV1().ResourceSlices().List(ctx, opts)"},
	{"", "nodes", "list", "", "pkg/admission/cardmemory.go", "c.Client.CoreV1().Nodes().List(ctx, opts)"},
}

// The ClusterRoles grant exactly what the code calls: each call is
// allowed, no rule grants a verb or resource no call needs, none grants
// "*", and there are no other roles.
func TestRBACIsWhatTheCodeCalls(t *testing.T) {
	objs := mustTemplate(t)
	for _, c := range []struct {
		role  string
		calls []apiCall
	}{
		{release + "-agent", agentCalls},
		{release + "-webhook", webhookCalls},
	} {
		t.Run(c.role, func(t *testing.T) {
			checkCallsInCode(t, c.calls)
			role := one[rbacv1.ClusterRole](t, objs, "ClusterRole", c.role)
			binding := one[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", c.role)
			if binding.RoleRef.Name != c.role || len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" ||
				binding.Subjects[0].Name != c.role || binding.Subjects[0].Namespace != namespace {
				t.Errorf("ClusterRoleBinding %+v, want %s bound to the ServiceAccount %s/%s", binding, c.role, namespace, c.role)
			}
			checkRules(t, role.Rules, c.calls)
		})
	}
	for _, o := range objs {
		if o.Kind == "Role" || o.Kind == "RoleBinding" || o.Kind == "ClusterRole" && !strings.HasSuffix(o.Metadata.Name, "-agent") &&
			!strings.HasSuffix(o.Metadata.Name, "-webhook") {
			t.Errorf("unexpected %s", o)
		}
	}
}

// checkRules: rules allow every call and nothing else.
func checkRules(t *testing.T, rules []rbacv1.PolicyRule, calls []apiCall) {
	t.Helper()
	needed := map[string]bool{}
	for _, c := range calls {
		needed[c.group+"/"+c.resource+":"+c.verb] = true
	}
	granted := map[string]bool{}
	for _, r := range rules {
		for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
			if slices.Contains(list, "*") {
				t.Errorf("rule %+v grants *", r)
			}
		}
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %+v: unexpected resourceNames or nonResourceURLs", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					k := g + "/" + res + ":" + v
					granted[k] = true
					if !needed[k] {
						t.Errorf("grants %s, which no call of the code needs", k)
					}
				}
			}
		}
	}
	for k := range needed {
		if !granted[k] {
			t.Errorf("the code calls %s, which no rule grants", k)
		}
	}
}

// checkCallsInCode: each call's line is in its file, and this module's
// code (nri-plugin, pkg, cmd) uses no typed client of a resource the
// tables do not list.
func checkCallsInCode(t *testing.T, calls []apiCall) {
	t.Helper()
	for _, c := range calls {
		dir := testenv.Root()
		if c.module != "" {
			out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", c.module).Output()
			if err != nil {
				t.Fatalf("go list -m %s: %v", c.module, err)
			}
			dir = strings.TrimSpace(string(out))
		}
		b, err := os.ReadFile(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), c.code) {
			t.Errorf("%s %s/%s: %s %s no longer has %q: the table is stale", c.verb, c.group, c.resource, c.module, c.file, c.code)
		}
	}
}

// typedClient matches a typed client-go call of a resource:
// CoreV1().Pods(, ResourceV1().ResourceSlices(, PolicyV1().Evictions(.
var typedClient = regexp.MustCompile(`\.([A-Z][A-Za-z]*V[0-9][A-Za-z0-9]*)\(\)\.([A-Z][A-Za-z]*)\(`)

// Every resource this module's code calls through client-go is in one of
// the tables (so a new call cannot go without its RBAC rule).
func TestRBACTablesCoverTheCode(t *testing.T) {
	listed := map[string]bool{}
	for _, c := range append(append([]apiCall{}, agentCalls...), webhookCalls...) {
		listed[strings.Split(c.resource, "/")[0]] = true
	}
	listed["evictions"] = listed["pods"] // PolicyV1().Evictions is pods/eviction
	var found []string
	for _, top := range []string{"nri-plugin", "pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join(testenv.Root(), top), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") ||
				strings.Contains(p, "admissiontest") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range typedClient.FindAllStringSubmatch(string(b), -1) {
				res := strings.ToLower(m[2])
				found = append(found, res)
				if !listed[res] {
					rel, _ := filepath.Rel(testenv.Root(), p)
					t.Errorf("%s calls %s().%s(), which no RBAC table lists", rel, m[1], m[2])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(found)
	if len(slices.Compact(found)) < 5 {
		t.Fatalf("found only the typed calls %v in the code", found)
	}
}
