// Package draapi is gpuslice's side of Kubernetes Dynamic Resource
// Allocation as the cluster sees it: the driver and device class name, the
// names of the capacities and attributes the node agent publishes for each
// card, and the opaque parameters a claim may pass to the driver
// (VGPUConfig). The node agent's DRA driver (nri-plugin/dra) and the
// admission layer that writes claims both build on it, so the names cannot
// drift apart.
//
// It needs no Kubernetes module: a claim's parameters arrive as raw JSON.
package draapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DriverName is the DRA driver's name, the domain of its capacities and
// attributes, and the name of the DeviceClass that selects its devices.
const DriverName = "gpu.gpuslice.io"

// DeviceClassName is the DeviceClass of gpuslice's cards: it selects
// device.driver == DriverName.
const DeviceClassName = DriverName

// CDIKind is the CDI vendor/class of the devices the driver hands to the
// runtime; each prepared claim is one device, named by the claim's UID.
const CDIKind = DriverName + "/vgpu"

// DevicePrefix starts a card's device name in the ResourceSlice:
// gpu-<index>.
const DevicePrefix = "gpu-"

// The capacities of a card, consumed by every claim allocated on it.
const (
	// CapacityMemory is the card's memory in bytes; a claim consumes its
	// vGPU's memory cap (whole MiB).
	CapacityMemory = "memory"
	// CapacityCores is 100 (percent); a claim consumes its compute quota
	// (steps of 5, 0 for memory isolation only).
	CapacityCores = "cores"
	// CapacityVGPUs is the card's max_inst; every claim consumes one.
	CapacityVGPUs = "vgpus"
)

// The attributes of a card.
const (
	AttrIndex         = "index"         // int: GPU_IDX
	AttrUUID          = "uuid"          // string: the driver's UUID
	AttrProductName   = "productName"   // string
	AttrMemory        = "memory"        // int: bytes
	AttrDriverVersion = "driverVersion" // string
	AttrPolicy        = "policy"        // int: the scheduling policy, 0-6
	AttrMaxInst       = "maxInst"       // int: vGPUs and compute units per card
	// AttrMode is the card's isolation mode now (ModeUnused, ModeMemory or
	// ModeCompute), republished when it changes: claims select
	// "mode in ['unused', '<theirs>']" (ModeSelector).
	AttrMode = "mode"
)

// The values of AttrMode, and of VGPUConfig.Mode.
const (
	ModeUnused  = "unused"  // no vGPU yet: either mode may come
	ModeMemory  = "memory"  // memory-only vGPUs: compute shared
	ModeCompute = "compute" // memory and compute isolation
)

// ModeSelector is the CEL expression a claim carries so that the
// scheduler gives it only a card of its isolation mode, or an unused one.
func ModeSelector(mode string) string {
	return fmt.Sprintf("device.attributes['%s'].%s in ['%s', '%s']", DriverName, AttrMode, ModeUnused, mode)
}

// The identity of VGPUConfig.
const (
	APIVersion = DriverName + "/v1alpha1"
	KindVGPU   = "VGPUConfig"
)

// The values of VGPUConfig.Priority.
const (
	PriorityLow  = "low"
	PriorityHigh = "high"
)

// VGPUConfig is the opaque configuration a claim (or a device class) may
// give the driver for its requests:
//
//	config:
//	- requests: [gpu]
//	  opaque:
//	    driver: gpu.gpuslice.io
//	    parameters: {apiVersion: gpu.gpuslice.io/v1alpha1, kind: VGPUConfig, priority: high}
//
// Every field but the identity is optional; "" keeps the default.
type VGPUConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Priority is low (the default) or high; high needs cores above 0.
	Priority string `json:"priority,omitempty"`
	// Mode is memory or compute; by default compute when the claim
	// consumes cores, memory otherwise. compute with 0 cores is the
	// hybrid policy's quota-0 vGPU.
	Mode string `json:"mode,omitempty"`
}

// FieldError is a parameter DecodeConfig refused: the field's path in
// the parameters, its value as written, and what is allowed.
type FieldError struct {
	Field  string // e.g. "parameters.priority"
	Value  string // as written; "" when absent
	Reason string
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("%s=%q: %s", e.Field, e.Value, e.Reason)
}

// DecodeConfig reads a VGPUConfig from a claim's opaque parameters,
// strictly: unknown fields, a wrong identity, values out of range and
// trailing data are each a *FieldError naming the field.
func DecodeConfig(raw []byte) (VGPUConfig, error) {
	var c VGPUConfig
	if len(bytes.TrimSpace(raw)) == 0 {
		return c, &FieldError{Field: "parameters", Reason: fmt.Sprintf("empty: want {apiVersion: %s, kind: %s, ...}", APIVersion, KindVGPU)}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return VGPUConfig{}, decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return VGPUConfig{}, &FieldError{Field: "parameters", Reason: "trailing data after the object"}
	}
	return c, c.Validate()
}

// Validate checks the identity and every value.
func (c VGPUConfig) Validate() error {
	switch {
	case c.APIVersion != APIVersion:
		return &FieldError{Field: "parameters.apiVersion", Value: c.APIVersion, Reason: "want " + APIVersion}
	case c.Kind != KindVGPU:
		return &FieldError{Field: "parameters.kind", Value: c.Kind, Reason: "want " + KindVGPU}
	case c.Priority != "" && c.Priority != PriorityLow && c.Priority != PriorityHigh:
		return &FieldError{Field: "parameters.priority", Value: c.Priority, Reason: "want low or high"}
	case c.Mode != "" && c.Mode != ModeMemory && c.Mode != ModeCompute:
		return &FieldError{Field: "parameters.mode", Value: c.Mode, Reason: "want memory or compute"}
	}
	return nil
}

// decodeError names the field of a JSON decoding error.
func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field := "parameters"
		if typeErr.Field != "" {
			field += "." + typeErr.Field
		}
		return &FieldError{Field: field, Reason: fmt.Sprintf("want a %s, got a JSON %s", typeErr.Type, typeErr.Value)}
	}
	// encoding/json words an unknown field as: json: unknown field "x".
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &FieldError{Field: "parameters." + strings.Trim(name, `"`),
			Reason: "unknown field; the fields of " + KindVGPU + " are apiVersion, kind, priority, mode"}
	}
	return &FieldError{Field: "parameters", Reason: "not a JSON object: " + strings.TrimPrefix(err.Error(), "json: ")}
}
