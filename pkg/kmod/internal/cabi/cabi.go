// Package cabi exposes kmod/include/uapi/gpuslice.h as cgo sees it, so
// that a test can hold package kmod's Go mirror of the ABI to the header:
// every struct's size, field offsets and sizes, and every ioctl number.
package cabi

/*
#cgo CFLAGS: -I${SRCDIR}/../../../../kmod/include/uapi
#include "gpuslice.h"
*/
import "C"

import "reflect"

// Structs are the header's structs, by their C name.
var Structs = map[string]reflect.Type{
	"gpuslice_version":    reflect.TypeOf(C.struct_gpuslice_version{}),
	"gpuslice_card":       reflect.TypeOf(C.struct_gpuslice_card{}),
	"gpuslice_vgpu":       reflect.TypeOf(C.struct_gpuslice_vgpu{}),
	"gpuslice_vgpu_stats": reflect.TypeOf(C.struct_gpuslice_vgpu_stats{}),
	"gpuslice_attach":     reflect.TypeOf(C.struct_gpuslice_attach{}),
	"gpuslice_charge":     reflect.TypeOf(C.struct_gpuslice_charge{}),
	"gpuslice_acquire":    reflect.TypeOf(C.struct_gpuslice_acquire{}),
	"gpuslice_release":    reflect.TypeOf(C.struct_gpuslice_release{}),
	"gpuslice_sched_page": reflect.TypeOf(C.struct_gpuslice_sched_page{}),

	"gpuslice_vgpu_unseen": reflect.TypeOf(C.struct_gpuslice_vgpu_unseen{}),
}

// Ioctls are the header's ioctl numbers, by macro name.
var Ioctls = map[string]uint{
	"GPUSLICE_IOC_VERSION":      C.GPUSLICE_IOC_VERSION,
	"GPUSLICE_IOC_CARD_GET":     C.GPUSLICE_IOC_CARD_GET,
	"GPUSLICE_IOC_VGPU_STATS":   C.GPUSLICE_IOC_VGPU_STATS,
	"GPUSLICE_IOC_CARD_SET":     C.GPUSLICE_IOC_CARD_SET,
	"GPUSLICE_IOC_VGPU_CREATE":  C.GPUSLICE_IOC_VGPU_CREATE,
	"GPUSLICE_IOC_VGPU_UPDATE":  C.GPUSLICE_IOC_VGPU_UPDATE,
	"GPUSLICE_IOC_VGPU_DESTROY": C.GPUSLICE_IOC_VGPU_DESTROY,
	"GPUSLICE_IOC_ATTACH":       C.GPUSLICE_IOC_ATTACH,
	"GPUSLICE_IOC_CHARGE":       C.GPUSLICE_IOC_CHARGE,
	"GPUSLICE_IOC_UNCHARGE":     C.GPUSLICE_IOC_UNCHARGE,
	"GPUSLICE_IOC_MEMINFO":      C.GPUSLICE_IOC_MEMINFO,
	"GPUSLICE_IOC_ACQUIRE":      C.GPUSLICE_IOC_ACQUIRE,
	"GPUSLICE_IOC_RELEASE":      C.GPUSLICE_IOC_RELEASE,

	"GPUSLICE_IOC_VGPU_UNSEEN":     C.GPUSLICE_IOC_VGPU_UNSEEN,
	"GPUSLICE_IOC_VGPU_SET_UNSEEN": C.GPUSLICE_IOC_VGPU_SET_UNSEEN,
}

// Constants are the header's other numbers, by macro name.
var Constants = map[string]int64{
	"GPUSLICE_ABI_VERSION":          C.GPUSLICE_ABI_VERSION,
	"GPUSLICE_MAX_CARDS":            C.GPUSLICE_MAX_CARDS,
	"GPUSLICE_MAX_VGPUS":            C.GPUSLICE_MAX_VGPUS,
	"GPUSLICE_MODE_NONE":            C.GPUSLICE_MODE_NONE,
	"GPUSLICE_MODE_MEMORY":          C.GPUSLICE_MODE_MEMORY,
	"GPUSLICE_MODE_COMPUTE":         C.GPUSLICE_MODE_COMPUTE,
	"GPUSLICE_OWNER_NONE":           C.GPUSLICE_OWNER_NONE,
	"GPUSLICE_OWNER_ALL":            C.GPUSLICE_OWNER_ALL,
	"GPUSLICE_ACQUIRE_NONBLOCK":     C.GPUSLICE_ACQUIRE_NONBLOCK,
	"GPUSLICE_RELEASE_IDLE":         C.GPUSLICE_RELEASE_IDLE,
	"GPUSLICE_POLICY_NATIVE":        C.GPUSLICE_POLICY_NATIVE,
	"GPUSLICE_POLICY_WEIGHTED_WEAK": C.GPUSLICE_POLICY_WEIGHTED_WEAK,
}
