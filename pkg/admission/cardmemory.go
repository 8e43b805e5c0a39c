package admission

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/pkg/draapi"
)

// CardMemory tells the memory of the cards a pod may be placed on: a
// fraction f of nvidia.com/gpu is f x that memory, and a whole card all
// of it.
type CardMemory interface {
	// For returns the cards' memory in bytes; a *Refusal when it cannot
	// tell (no such cards, or cards of several sizes), another error when
	// it could not ask.
	For(ctx context.Context, pod *corev1.Pod) (int64, error)
}

// DefaultModelLabel is the reference's node label of the card model
// (accelerator: nvidia-tesla-t4).
const DefaultModelLabel = "accelerator"

// Cards finds the memory from the pod's nodeSelector: in Models when the
// selector names a card model there (the value of ModelLabel), else in
// the ResourceSlices of the driver on the nodes the selector matches (all
// nodes without one), which carry each card's memory capacity as the node
// agent found it. The cards found must all have the same memory: a
// fraction of cards of different sizes is not one size, and the pod's
// author is asked to pin a model.
type Cards struct {
	Client     kubernetes.Interface
	ModelLabel string           // DefaultModelLabel when empty
	Models     map[string]int64 // model label value -> bytes; may be nil
}

// For implements CardMemory.
func (c *Cards) For(ctx context.Context, pod *corev1.Pod) (int64, error) {
	label := c.ModelLabel
	if label == "" {
		label = DefaultModelLabel
	}
	if model, ok := pod.Spec.NodeSelector[label]; ok {
		if m, ok := c.Models[model]; ok {
			return m, nil
		}
	}
	nodes, where, err := c.scope(ctx, pod)
	if err != nil {
		return 0, err
	}
	sizes, err := c.sizes(ctx, nodes)
	if err != nil {
		return 0, err
	}
	switch len(sizes) {
	case 0:
		return 0, refusef("cannot tell the card's memory: no %s devices are published %s (and %s names no model of --card-memory)",
			draapi.DriverName, where, label)
	case 1:
		return sizes[0], nil
	}
	text := make([]string, len(sizes))
	for i, s := range sizes {
		text[i] = resource.NewQuantity(s, resource.BinarySI).String()
	}
	return 0, refusef("the cards %s differ in memory (%s); pin one card model with a nodeSelector, e.g. %s: nvidia-<model>",
		where, strings.Join(text, ", "), label)
}

// scope is the nodes the pod may run on, nil for any, and their
// description for messages: its node, or those of its nodeSelector
// (node affinity is not read).
func (c *Cards) scope(ctx context.Context, pod *corev1.Pod) (map[string]bool, string, error) {
	switch {
	case pod.Spec.NodeName != "":
		return map[string]bool{pod.Spec.NodeName: true}, "on node " + pod.Spec.NodeName, nil
	case len(pod.Spec.NodeSelector) > 0:
		sel := labels.SelectorFromSet(pod.Spec.NodeSelector)
		nodes, err := c.nodes(ctx, sel)
		return nodes, "on the nodes of nodeSelector " + sel.String(), err
	}
	return nil, "on any node", nil
}

// nodes lists the names of the nodes a selector matches.
func (c *Cards) nodes(ctx context.Context, sel labels.Selector) (map[string]bool, error) {
	names := map[string]bool{}
	opts := metav1.ListOptions{LabelSelector: sel.String(), Limit: 500}
	for {
		list, err := c.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		for _, n := range list.Items {
			names[n.Name] = true
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return names, nil
		}
	}
}

// sizes lists the distinct memory sizes of the driver's devices, on the
// given nodes only when nodes is not nil, in ascending order.
func (c *Cards) sizes(ctx context.Context, nodes map[string]bool) ([]int64, error) {
	var sizes []int64
	opts := metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorDriver, draapi.DriverName).String(),
		Limit:         500,
	}
	for {
		list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing ResourceSlices: %w", err)
		}
		for _, s := range list.Items {
			if s.Spec.Driver != draapi.DriverName || nodes != nil && (s.Spec.NodeName == nil || !nodes[*s.Spec.NodeName]) {
				continue
			}
			for _, d := range s.Spec.Devices {
				if m := deviceMemory(d); m > 0 && !slices.Contains(sizes, m) {
					sizes = append(sizes, m)
				}
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	return sizes, nil
}

// deviceMemory is a card's memory: its memory capacity, else its memory
// attribute; 0 when it has neither.
func deviceMemory(d resourcev1.Device) int64 {
	if c, ok := d.Capacity[draapi.CapacityMemory]; ok {
		return c.Value.Value()
	}
	if a, ok := d.Attributes[draapi.AttrMemory]; ok && a.IntValue != nil {
		return *a.IntValue
	}
	return 0
}
