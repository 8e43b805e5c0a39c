package admission

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// translated is what one container should become: the pod's claim of that
// name, made from the template of that request.
type translated struct {
	container string
	claim     string
	request   vgpuRequest
}

func TestMutateTranslates(t *testing.T) {
	sixteen := []runtime.Object{cardSlice("node-a", 16*gib, 16*gib)}
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		objects   []runtime.Object
		wholeGPUs bool
		want      []translated
	}{
		{
			name: "memory and cores: a compute vGPU",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=30", "cpu=1")}),
			want: []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 4 * gib, Cores: 30, Cards: 1}}},
		},
		{
			name: "memory alone: a memory-only vGPU",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=64")}),
			want: []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 8 * gib, Cards: 1}}},
		},
		{
			name: "cores 0 is memory only",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=1", ResourceCores+"=0")}),
			want: []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 128 << 20, Cards: 1}}},
		},
		{
			name: "the largest memory",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=16384", ResourceCores+"=100")}),
			want: []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 2048 * gib, Cores: 100, Cards: 1}}},
		},
		{
			name: "requests only, before the API server copies them",
			pod:  podOf([]corev1.Container{ctr("main", "requests:"+ResourceMemory+"=8", "requests:"+ResourceCores+"=5")}),
			want: []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: gib, Cores: 5, Cards: 1}}},
		},
		{
			name: "requests equal to limits",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=8", "requests:"+ResourceMemory+"=8")}),
			want: []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: gib, Cards: 1}}},
		},
		{
			name:    "half a card: half its memory, on cards of that memory",
			pod:     podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.5")}),
			objects: sixteen,
			want:    []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 8 * gib, Cards: 1, CardMemory: 16 * gib}}},
		},
		{
			name:    "a fraction rounded down to 128 MiB",
			pod:     podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.3")}),
			objects: sixteen,
			want:    []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 38 * MemoryUnit, Cards: 1, CardMemory: 16 * gib}}},
		},
		{
			name:    "a fraction of a card whose memory is no multiple of 128 MiB",
			pod:     podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.5")}),
			objects: []runtime.Object{cardSlice("node-a", 16160<<20)},
			want:    []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 63 * MemoryUnit, Cards: 1, CardMemory: 16160 << 20}}},
		},
		{
			name: "the node selector picks the nodes whose cards count",
			pod: func() *corev1.Pod {
				p := podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.25")})
				p.Spec.NodeSelector = map[string]string{"accelerator": "nvidia-tesla-t4"}
				return p
			}(),
			objects: []runtime.Object{cardSlice("t4", 15<<30), cardSlice("a100", 80<<30),
				node("t4", "accelerator=nvidia-tesla-t4"), node("a100", "accelerator=nvidia-a100")},
			want: []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 30 * MemoryUnit, Cards: 1, CardMemory: 15 << 30}}},
		},
		{
			name: "a pod bound to a node: that node's cards",
			pod: func() *corev1.Pod {
				p := podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.5")})
				p.Spec.NodeName = "node-b"
				return p
			}(),
			objects: []runtime.Object{cardSlice("node-a", 16*gib), cardSlice("node-b", 32*gib)},
			want:    []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 16 * gib, Cards: 1, CardMemory: 32 * gib}}},
		},
		{
			name:      "whole cards, when asked to",
			pod:       podOf([]corev1.Container{ctr("main", ResourceGPU+"=2")}),
			objects:   sixteen,
			wholeGPUs: true,
			want:      []translated{{"main", "vgpu-main", vgpuRequest{MemoryBytes: 16 * gib, Cards: 2, CardMemory: 16 * gib}}},
		},
		{
			name: "the pod's priority, and a container's own",
			pod: podOf([]corev1.Container{
				ctr("main", ResourceMemory+"=32", ResourceCores+"=30"),
				ctr("side", ResourceMemory+"=8", ResourceCores+"=10"),
			}, AnnotationPriority+"=high", AnnotationPriority+"/container.side=low"),
			want: []translated{
				{"main", "vgpu-main", vgpuRequest{MemoryBytes: 4 * gib, Cores: 30, Cards: 1, Priority: "high"}},
				{"side", "vgpu-side", vgpuRequest{MemoryBytes: gib, Cores: 10, Cards: 1, Priority: "low"}},
			},
		},
		{
			name: "two containers asking alike share a template, not a claim",
			pod: podOf([]corev1.Container{
				ctr("a", ResourceMemory+"=32", ResourceCores+"=30"),
				ctr("plain", "cpu=1"),
				ctr("b", ResourceMemory+"=32", ResourceCores+"=30"),
			}),
			want: []translated{
				{"a", "vgpu-a", vgpuRequest{MemoryBytes: 4 * gib, Cores: 30, Cards: 1}},
				{"b", "vgpu-b", vgpuRequest{MemoryBytes: 4 * gib, Cores: 30, Cards: 1}},
			},
		},
		{
			name: "beside the pod's own claims, under a name it does not use",
			pod: func() *corev1.Pod {
				c := ctr("main", ResourceMemory+"=32")
				c.Resources.Claims = []corev1.ResourceClaim{{Name: "vgpu-main"}}
				p := podOf([]corev1.Container{c})
				tmpl := "nic"
				p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "vgpu-main", ResourceClaimTemplateName: &tmpl}}
				return p
			}(),
			want: []translated{{"main", "vgpu-main-2", vgpuRequest{MemoryBytes: 4 * gib, Cards: 1}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, client := mutator(tc.objects...)
			m.WholeGPUs = tc.wholeGPUs
			before := tc.pod.DeepCopy()
			ops, err := m.Mutate(context.Background(), tc.pod, "team", false)
			if err != nil {
				t.Fatal(err)
			}
			got := apply(t, tc.pod, ops)
			checkTranslated(t, before, got, tc.want)
			var wantNames []string
			for _, w := range tc.want {
				if n := w.request.template("team").Name; !slices.Contains(wantNames, n) {
					wantNames = append(wantNames, n)
				}
			}
			var names []string
			for _, tmpl := range templates(t, client) {
				names = append(names, tmpl.Name)
				if want := findRequest(tc.want, tmpl.Name); !sameClaimSpec(tmpl.Spec.Spec, want.template("team").Spec.Spec) {
					t.Errorf("template %s: spec %+v, want %+v", tmpl.Name, tmpl.Spec.Spec, want.template("team").Spec.Spec)
				}
			}
			slices.Sort(names)
			slices.Sort(wantNames)
			if !slices.Equal(names, wantNames) {
				t.Errorf("templates %v, want %v", names, wantNames)
			}
		})
	}
}

func findRequest(want []translated, template string) vgpuRequest {
	for _, w := range want {
		if w.request.template("team").Name == template {
			return w.request
		}
	}
	return vgpuRequest{}
}

// checkTranslated checks the patched pod: each translated container uses
// its claim and has no vGPU resource left, the pod names each claim's
// template, the other resources and containers are as they were, and the
// priority annotations are gone.
func checkTranslated(t *testing.T, before, got *corev1.Pod, want []translated) {
	t.Helper()
	for i, c := range got.Spec.Containers {
		w := slices.IndexFunc(want, func(w translated) bool { return w.container == c.Name })
		orig := before.Spec.Containers[i]
		if w < 0 {
			if !equalResources(c.Resources, orig.Resources) {
				t.Errorf("container %s changed: %+v", c.Name, c.Resources)
			}
			continue
		}
		for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
			for _, r := range []corev1.ResourceName{ResourceMemory, ResourceCores, ResourceGPU} {
				if _, ok := list[r]; ok {
					t.Errorf("container %s still has %s", c.Name, r)
				}
			}
		}
		if q, had := orig.Resources.Limits["cpu"]; had {
			if now, ok := c.Resources.Limits["cpu"]; !ok || !now.Equal(q) {
				t.Errorf("container %s: cpu %v, want %v", c.Name, c.Resources.Limits.Cpu(), q.String())
			}
		}
		if n := len(c.Resources.Claims); n == 0 || c.Resources.Claims[n-1].Name != want[w].claim {
			t.Errorf("container %s uses claims %+v, want %s last", c.Name, c.Resources.Claims, want[w].claim)
		}
		tmpl := want[w].request.template("team").Name
		if !slices.ContainsFunc(got.Spec.ResourceClaims, func(pc corev1.PodResourceClaim) bool {
			return pc.Name == want[w].claim && pc.ResourceClaimTemplateName != nil && *pc.ResourceClaimTemplateName == tmpl
		}) {
			t.Errorf("pod claims %+v, want %s from %s", got.Spec.ResourceClaims, want[w].claim, tmpl)
		}
	}
	if n := len(got.Spec.ResourceClaims) - len(before.Spec.ResourceClaims); n != len(want) {
		t.Errorf("%d claims added, want %d", n, len(want))
	}
	for k := range got.Annotations {
		if isPriorityAnnotation(k) {
			t.Errorf("annotation %s left on the pod", k)
		}
	}
}

func equalResources(a, b corev1.ResourceRequirements) bool {
	return a.Limits.Cpu().Equal(*b.Limits.Cpu()) && len(a.Limits) == len(b.Limits) && len(a.Requests) == len(b.Requests) &&
		len(a.Claims) == len(b.Claims)
}

func TestMutateLeavesAlone(t *testing.T) {
	gpuRoute := podOf([]corev1.Container{ctr("main")}, "gpuslice.io/gpu-memory=4Gi", "gpuslice.io/gpu-cores=30")
	plainInitClaim := withInit(podOf([]corev1.Container{ctr("main")}), ctr("setup"))
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{"no resources", podOf([]corev1.Container{ctr("main")})},
		{"cpu and memory", podOf([]corev1.Container{ctr("main", "cpu=2", "memory=1Gi")})},
		{"whole cards are the device plugin's", podOf([]corev1.Container{ctr("main", ResourceGPU+"=1")})},
		{"nvidia.com/gpu 0", podOf([]corev1.Container{ctr("main", ResourceGPU+"=0")})},
		{"the annotation route", gpuRoute},
		{"an init container with no claim", plainInitClaim},
		{"a whole card in an init container", withInit(podOf([]corev1.Container{ctr("main")}), ctr("setup", ResourceGPU+"=1"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, client := mutator()
			ops, err := m.Mutate(context.Background(), tc.pod, "team", false)
			if err != nil || ops != nil {
				t.Fatalf("got %v, %v; want the pod unchanged", ops, err)
			}
			if a := client.Actions(); len(a) != 0 {
				t.Errorf("API calls for a pod asking for nothing: %v", a)
			}
		})
	}
}

func TestMutateDryRunCreatesNothing(t *testing.T) {
	m, client := mutator()
	pod := podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=30")})
	ops, err := m.Mutate(context.Background(), pod, "team", true)
	if err != nil || len(ops) == 0 {
		t.Fatalf("got %v, %v; want a patch", ops, err)
	}
	if got := templates(t, client); len(got) != 0 {
		t.Errorf("a dry run created %d templates", len(got))
	}
}

// Admissions of pods asking alike race to create one template: all of
// them are admitted, and one template exists.
func TestMutateConcurrently(t *testing.T) {
	m, client := mutator()
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() {
			pod := podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=30")})
			_, errs[i] = m.Mutate(context.Background(), pod, "team", false)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := templates(t, client); len(got) != 1 {
		t.Errorf("%d templates, want 1", len(got))
	}
}

// A webhook that loses the race to create a template (another created it
// between its read and its create) takes the winner's as its own.
func TestMutateLosesTheRaceToCreate(t *testing.T) {
	m, client := mutator()
	client.PrependReactor("create", "resourceclaimtemplates", func(a clienttesting.Action) (bool, runtime.Object, error) {
		won := a.(clienttesting.CreateAction).GetObject()
		if err := client.Tracker().Add(won); err != nil {
			return true, nil, err
		}
		tmpl := won.(*resourcev1.ResourceClaimTemplate)
		return true, nil, apierrors.NewAlreadyExists(resourcev1.Resource("resourceclaimtemplates"), tmpl.Name)
	})
	pod := podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=30")})
	if _, err := m.Mutate(context.Background(), pod, "team", false); err != nil {
		t.Fatal(err)
	}
}

// A template under the webhook's name with another spec (a namespace user
// got there first) is not used.
func TestMutateRefusesForeignTemplate(t *testing.T) {
	req := vgpuRequest{MemoryBytes: 4 * gib, Cores: 30, Cards: 1}
	foreign := req.template("team")
	foreign.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = "gpu.nvidia.com"
	m, _ := mutator(foreign)
	pod := podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=30")})
	_, err := m.Mutate(context.Background(), pod, "team", false)
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("got %v, want a refusal", err)
	}
	want := `ResourceClaimTemplate "` + foreign.Name + `" in namespace "team" exists with a spec other than the one gpuslice ` +
		`writes for this request, and is not used; delete it and the webhook creates it again`
	if r.Message != want {
		t.Errorf("got %q\nwant %q", r.Message, want)
	}
	// The same spec written by someone else is the webhook's own.
	m, _ = mutator(req.template("team"))
	if _, err := m.Mutate(context.Background(), pod, "team", false); err != nil {
		t.Errorf("an identical template: %v", err)
	}
}

func gpuTemplate(name string, class string) *resourcev1.ResourceClaimTemplate {
	t := (vgpuRequest{MemoryBytes: gib, Cards: 1}).template("team")
	t.Name = name
	t.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = class
	return t
}
