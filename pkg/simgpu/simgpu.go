// Package simgpu says what the simulated GPU (interposer/simcuda, the test
// double of the NVIDIA driver) tells of its devices, for the agent's
// simulated cards and the tests that run processes on them. It needs no
// cgo, so the agent's tests build statically for the qemu guest.
package simgpu

import "fmt"

// DriverVersion is the driver version the simulated NVML reports
// (nvmlSystemGetDriverVersion), which simulated cards carry too.
const DriverVersion = "570.00.01"

// UUID is the UUID the simulated driver (simst_uuid) gives its device
// index, in NVML's text form. A simulated card must carry it: the shim
// matches devices to cards by UUID (the agent's GPUSLICE_CARD_UUIDS), and
// a card whose UUID no device has gets nothing. pkg/gpu's test checks the
// simulated NVML's answer against it, so the two cannot drift apart.
func UUID(index int) string {
	h := uint64(0xcbf29ce484222325) ^ uint64(index+1)
	var b [16]byte
	for i := range b {
		h ^= uint64(i) * 0x9e3779b97f4a7c15
		h *= 0x100000001b3
		h ^= h >> 29
		b[i] = byte(h >> 24)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4 and the RFC 4122 variant, as simst_uuid
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
