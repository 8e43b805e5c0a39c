// Package status is the node's vGPU picture as the agent reports it: what
// `gpuslice status` prints and what the agent's /metrics exports. The agent
// builds a Node from its own records (which container holds which vGPU),
// the enforcement layer's figures (gpuslice.ko's statistics, or the
// no-module ledger and schedule files) and NVML.
//
// A figure a source could not give is nil, never a made-up zero: the
// metrics leave its series out and the table prints "-". Why it is missing
// is in Node.Problems.
package status

import "time"

// Node is one node's cards and vGPUs at one moment.
type Node struct {
	Node     string    `json:"node"`     // host name
	Enforce  string    `json:"enforce"`  // "module" (gpuslice.ko) or "file" (no module)
	Guard    *Guard    `json:"guard"`    // the eBPF guard; nil from an agent without one
	Time     time.Time `json:"time"`     // when the figures were read
	Cards    []Card    `json:"cards"`    // by index
	Problems []string  `json:"problems"` // sources that failed, one line each
}

// The guard's states.
const (
	GuardOn          = "on"          // loaded: processes that bypass the shim get no GPU
	GuardOff         = "off"         // configured off (guard: off)
	GuardUnavailable = "unavailable" // it could not run; Reason says why
)

// Guard is the eBPF guard of the node (pkg/guard): whether a process of a
// vGPU container that bypasses the shim is kept from the GPU.
type Guard struct {
	Mode   string `json:"mode"`             // the configuration: required, optional or off
	State  string `json:"state"`            // GuardOn, GuardOff or GuardUnavailable
	Reason string `json:"reason,omitempty"` // why it is not on, and what to change
	// What the guard lost (nil while it is not on): refusals its ring
	// buffer had no room for (not logged, still refused), /dev/gpuslice
	// files without the guard word (a gpuslice.ko older than the guard:
	// their processes are refused), attachments not recorded (too many
	// attached files on the node: those processes are refused too).
	LostEvents *uint64 `json:"lost_events,omitempty"`
	BadMagic   *uint64 `json:"bad_magic,omitempty"`
	FilesFull  *uint64 `json:"files_full,omitempty"`
}

// Card is one GPU of the node.
type Card struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid"`
	Model  string `json:"model"`
	Policy int    `json:"policy"` // 0-6 (reference.md section 3)
	// MaxInst is the card's vGPU limit and units per scheduling period.
	MaxInst int `json:"max_inst"`
	// Healthy: false after an XID event or the module's marking; nil unknown.
	Healthy          *bool    `json:"healthy"`
	MemoryTotalBytes uint64   `json:"memory_total_bytes"`
	MemoryUsedBytes  *uint64  `json:"memory_used_bytes"` // NVML, all processes
	UtilPercent      *float64 `json:"util_percent"`      // NVML, over its last sample period
	VGPUs            []VGPU   `json:"vgpus"`             // by container, then id
}

// VGPU is one container's share of one card.
type VGPU struct {
	// ID is the vGPU's id in gpuslice.ko; -1 in no-module mode.
	ID        int    `json:"id"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"` // several, comma-separated, for a claim
	// ContainerID is the container's id, or claim-<UID> for a claim.
	ContainerID string `json:"container_id"`
	// Claim is the DRA ResourceClaim of the vGPU, namespace/name; ""
	// for a vGPU asked for by annotations.
	Claim        string `json:"claim,omitempty"`
	Mode         string `json:"mode"` // "compute" or "memory"
	QuotaPercent int    `json:"quota_percent"`
	HighPriority bool   `json:"high_priority"`
	// MemoryCapBytes is the vGPU's memory cap (GPU_CONTAINER_MEM).
	MemoryCapBytes  uint64  `json:"memory_cap_bytes"`
	MemoryUsedBytes *uint64 `json:"memory_used_bytes"`
	// MemoryDriverBytes is the device memory the driver reports for the
	// container's processes on the card (NVML's running processes, by
	// cgroup), everything their contexts took.
	MemoryDriverBytes *uint64 `json:"memory_driver_bytes"`
	// MemoryUnseenBytes is MemoryDriverBytes less what the processes
	// charged (0 when they charged more): the agent counts it against the
	// cap from the next allocation on.
	MemoryUnseenBytes *uint64 `json:"memory_unseen_bytes"`
	// CoreUsedPercent is the card's compute the vGPU used over the
	// collector's window: its busy time over the window's length, 0-100.
	CoreUsedPercent *float64 `json:"core_used_percent"`
	Processes       *int     `json:"processes"` // processes holding the vGPU
	// GuardRefusals counts the opens, ioctls and mmaps of the NVIDIA
	// device nodes the guard refused to the container's processes (those
	// without the shim) since the container started; nil without the
	// guard.
	GuardRefusals *uint64 `json:"guard_refusals"`
}
