package admission

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuslice/gpuslice/pkg/draapi"
)

func TestMutateRefuses(t *testing.T) {
	sixteen := []runtime.Object{cardSlice("node-a", 16*gib)}
	const initMsg = ": init containers may not request vGPU resources (the reference product does not support them); " +
		"request the vGPU in a regular container"
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		objects   []runtime.Object
		wholeGPUs bool
		want      string
	}{
		{
			name: "an init container with gpu-mem",
			pod:  withInit(podOf([]corev1.Container{ctr("main")}), ctr("setup", ResourceMemory+"=8")),
			want: `init container "setup": resource volcano.sh/gpu-mem.128Mi` + initMsg,
		},
		{
			name: "an init container with cores only",
			pod:  withInit(podOf([]corev1.Container{ctr("main")}), ctr("setup", ResourceCores+"=5")),
			want: `init container "setup": resource volcano.sh/gpu-core.percentage` + initMsg,
		},
		{
			name: "an init container with a fraction",
			pod:  withInit(podOf([]corev1.Container{ctr("main")}), ctr("setup", ResourceGPU+"=0.5")),
			want: `init container "setup": resource nvidia.com/gpu` + initMsg,
		},
		{
			name:      "an init container with a whole card, when whole cards are vGPUs",
			pod:       withInit(podOf([]corev1.Container{ctr("main")}), ctr("setup", ResourceGPU+"=1")),
			wholeGPUs: true,
			want:      `init container "setup": resource nvidia.com/gpu` + initMsg,
		},
		{
			name: "cores without memory",
			pod:  podOf([]corev1.Container{ctr("main", ResourceCores+"=30")}),
			want: `container "main": resource volcano.sh/gpu-core.percentage=30 without volcano.sh/gpu-mem.128Mi: ` +
				`compute is given only with memory; add volcano.sh/gpu-mem.128Mi (1-16384, units of 128 MiB)`,
		},
		{
			name: "cores with a fraction are cores without memory",
			pod:  podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.5", ResourceCores+"=30")}),
			want: `container "main": resource volcano.sh/gpu-core.percentage=30 without volcano.sh/gpu-mem.128Mi: ` +
				`compute is given only with memory; add volcano.sh/gpu-mem.128Mi (1-16384, units of 128 MiB)`,
		},
		{
			name: "cores not a multiple of 5",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=33")}),
			want: `container "main": resource volcano.sh/gpu-core.percentage=33: want 0-100 in steps of 5`,
		},
		{
			name: "cores over 100",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=105")}),
			want: `container "main": resource volcano.sh/gpu-core.percentage=105: want 0-100 in steps of 5`,
		},
		{
			name: "cores not whole",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=2.5")}),
			want: `container "main": resource volcano.sh/gpu-core.percentage=2500m: want 0-100 in steps of 5`,
		},
		{
			name: "gpu-mem 0",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=0")}),
			want: `container "main": resource volcano.sh/gpu-mem.128Mi=0: want 1-16384 (units of 128 MiB: 128Mi to 2Ti)`,
		},
		{
			name: "gpu-mem over 16384",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=16385")}),
			want: `container "main": resource volcano.sh/gpu-mem.128Mi=16385: want 1-16384 (units of 128 MiB: 128Mi to 2Ti)`,
		},
		{
			name: "the first container wrong, by the policy's order: cores without memory before bad cores",
			pod: podOf([]corev1.Container{
				ctr("a", ResourceMemory+"=8", ResourceCores+"=33"),
				ctr("b", ResourceCores+"=10"),
			}),
			want: `container "b": resource volcano.sh/gpu-core.percentage=10 without volcano.sh/gpu-mem.128Mi: ` +
				`compute is given only with memory; add volcano.sh/gpu-mem.128Mi (1-16384, units of 128 MiB)`,
		},
		{
			name: "requests and limits differ",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", "requests:"+ResourceMemory+"=16")}),
			want: `container "main": resource volcano.sh/gpu-mem.128Mi: requests (16) and limits (32) differ; want one value, in limits`,
		},
		{
			name: "a vGPU both by annotations and by resources",
			pod: podOf([]corev1.Container{ctr("main", ResourceMemory+"=32")},
				"gpuslice.io/gpu-memory/container.side=2Gi", "gpuslice.io/gpu-cores=30", AnnotationPriority+"=high"),
			want: `container "main": resource volcano.sh/gpu-mem.128Mi with annotation gpuslice.io/gpu-cores: a pod asks for ` +
				`vGPUs by gpuslice.io/gpu-* annotations or by resources, not both (only gpuslice.io/gpu-priority goes with resources)`,
		},
		{
			name: "gpu-mem and nvidia.com/gpu in one container",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceGPU+"=1")}),
			want: `container "main": resources volcano.sh/gpu-mem.128Mi and nvidia.com/gpu=1: ask for a vGPU by one of them, not both`,
		},
		{
			name: "a fraction over 1",
			pod:  podOf([]corev1.Container{ctr("main", ResourceGPU+"=1.5")}),
			want: `container "main": resource nvidia.com/gpu=1.5: want a whole number of cards or a fraction between 0 and 1`,
		},
		{
			name:      "too many whole cards",
			pod:       podOf([]corev1.Container{ctr("main", ResourceGPU+"=17")}),
			wholeGPUs: true,
			want:      `container "main": resource nvidia.com/gpu=17: want at most 16 whole cards`,
		},
		{
			name: "a priority neither high nor low",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=32", ResourceCores+"=30")}, AnnotationPriority+"=urgent"),
			want: `annotation gpuslice.io/gpu-priority="urgent": want high or low`,
		},
		{
			name: "high priority without compute",
			pod:  podOf([]corev1.Container{ctr("main", ResourceMemory+"=32")}, AnnotationPriority+"/container.main=high"),
			want: `container "main": annotation gpuslice.io/gpu-priority/container.main="high": high priority is for vGPUs with compute; ` +
				`set volcano.sh/gpu-core.percentage above 0`,
		},
		{
			name:    "a fraction under 128 MiB",
			pod:     podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.005")}),
			objects: sixteen,
			want:    `container "main": resource nvidia.com/gpu=0.005: 0.005 of a 16Gi card is under 128 MiB; want a fraction that gives at least 128Mi`,
		},
		{
			name: "a fraction of cards nobody published",
			pod:  podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.5")}),
			want: `container "main": resource nvidia.com/gpu=0.5: cannot tell the card's memory: no gpu.gpuslice.io devices are ` +
				`published on any node (and accelerator names no model of --card-memory)`,
		},
		{
			name: "a fraction of cards of several sizes",
			pod:  podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.5")}),
			objects: []runtime.Object{cardSlice("node-a", 16*gib), cardSlice("node-b", 80*gib, 16*gib),
				otherDriver(cardSlice("node-c", 40*gib))},
			want: `container "main": resource nvidia.com/gpu=0.5: the cards on any node differ in memory (16Gi, 80Gi); ` +
				`pin one card model with a nodeSelector, e.g. accelerator: nvidia-<model>`,
		},
		{
			name: "a fraction on nodes the selector does not match",
			pod: func() *corev1.Pod {
				p := podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.5")})
				p.Spec.NodeSelector = map[string]string{"accelerator": "nvidia-h100"}
				return p
			}(),
			objects: []runtime.Object{cardSlice("node-a", 16*gib), node("node-a", "accelerator=nvidia-tesla-t4")},
			want: `container "main": resource nvidia.com/gpu=0.5: cannot tell the card's memory: no gpu.gpuslice.io devices are ` +
				`published on the nodes of nodeSelector accelerator=nvidia-h100 (and accelerator names no model of --card-memory)`,
		},
		{
			name:    "an init container using a vGPU claim",
			pod:     withInitClaim(corev1.PodResourceClaim{ResourceClaimTemplateName: ptr("my-vgpu")}),
			objects: []runtime.Object{gpuTemplate("my-vgpu", draapi.DeviceClassName)},
			want: `init container "setup": resources.claims "gpu" (ResourceClaimTemplate "my-vgpu") asks for gpu.gpuslice.io devices: ` +
				`init containers may not request vGPU resources (the reference product does not support them); request the vGPU in a regular container`,
		},
		{
			name: "an init container using a claim that cannot be read",
			pod:  withInitClaim(corev1.PodResourceClaim{ResourceClaimName: ptr("shared")}),
			want: `init container "setup": resources.claims "gpu": ResourceClaim "shared" not found; cannot tell whether it asks for a vGPU`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, client := mutator(tc.objects...)
			m.WholeGPUs = tc.wholeGPUs
			_, err := m.Mutate(context.Background(), tc.pod, "team", false)
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("got %v, want the refusal %q", err, tc.want)
			}
			if r.Message != tc.want {
				t.Errorf("got  %q\nwant %q", r.Message, tc.want)
			}
			for _, a := range client.Actions() {
				if a.GetVerb() == "create" {
					t.Errorf("a refused pod created a %s", a.GetResource().Resource)
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }

func otherDriver(s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	s.Name, s.Spec.Driver = "node-c-gpu.nvidia.com", "gpu.nvidia.com"
	return s
}

// An init container may use claims of other devices.
func TestMutateAllowsInitClaimsOfOtherDevices(t *testing.T) {
	p := withInitClaim(corev1.PodResourceClaim{ResourceClaimTemplateName: ptr("nic")})
	m, _ := mutator(gpuTemplate("nic", "nic.example.com"))
	if ops, err := m.Mutate(context.Background(), p, "team", false); err != nil || ops != nil {
		t.Errorf("got %v, %v; want the pod unchanged", ops, err)
	}
}

// The table of card models answers before the slices are read.
func TestCardsModelTable(t *testing.T) {
	m, client := mutator()
	m.Cards = &Cards{Client: client, Models: map[string]int64{"nvidia-tesla-t4": 15 << 30}}
	p := podOf([]corev1.Container{ctr("main", ResourceGPU+"=0.5")})
	p.Spec.NodeSelector = map[string]string{"accelerator": "nvidia-tesla-t4"}
	if _, err := m.Mutate(context.Background(), p, "team", false); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetResource().Resource != "resourceclaimtemplates" {
			t.Errorf("read %s with the model in the table", a.GetResource().Resource)
		}
	}
	got := templates(t, client)
	want := vgpuRequest{MemoryBytes: 60 * MemoryUnit, Cards: 1, CardMemory: 15 << 30}.template("team").Name
	if len(got) != 1 || got[0].Name != want {
		t.Errorf("templates %v, want %s", got, want)
	}
}
