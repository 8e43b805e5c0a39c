// Package kmod is the Go side of gpuslice.ko's ABI: the structs and ioctl
// numbers of kmod/include/uapi/gpuslice.h, mirrored field for field (a
// cgo test in internal/cabi checks every size, offset and number against
// the header), and a client for the calls the node agent makes.
//
// See kmod/README.md for what each call does and the errors it returns.
package kmod

import "unsafe"

// ABIVersion is the version of gpuslice.h this package speaks.
const ABIVersion = 1

// Device is the module's character device.
const Device = "/dev/gpuslice"

// Limits of the ABI.
const (
	MaxCards = 32 // card indices 0..31
	MaxVGPUs = 64 // per card; the card's max_inst bounds it further
)

// Policy is a card's compute scheduling policy (reference.md section 3).
type Policy uint32

// The policies 0-6.
const (
	PolicyNative Policy = iota
	PolicyFixed
	PolicyAverage
	PolicyPreemptive
	PolicyWeighted
	PolicyHybrid
	PolicyWeightedWeak
)

// Mode is a vGPU's isolation mode; a card runs vGPUs of one mode at a time.
type Mode uint32

// The isolation modes.
const (
	ModeNone    Mode = 0 // a card with no vGPU
	ModeMemory  Mode = 1 // a memory cap, compute shared
	ModeCompute Mode = 2 // a memory cap and a compute quota
)

// Owners in the schedule page that are not a vGPU id.
const (
	OwnerNone = -1 // an idle slice: nobody may run
	OwnerAll  = -2 // no gating: everybody may run
)

// Flags of Acquire and Release.
const (
	AcquireNonblock = 1 << 0
	ReleaseIdle     = 1 << 0
)

// Version is struct gpuslice_version.
type Version struct {
	ABIVersion uint32
	MaxCards   uint32
	MaxVGPUs   uint32
	PageSize   uint32
	Reserved   [2]uint64
}

// Card is struct gpuslice_card: a card's settings.
type Card struct {
	Card      uint32
	Policy    Policy
	MaxInst   uint32
	Mode      Mode // out
	SliceNs   uint64
	ReclaimNs uint64
	NVGPUs    uint32 // out
	Pad       uint32
}

// VGPU is struct gpuslice_vgpu: a vGPU's specification.
type VGPU struct {
	Card     uint32
	ID       uint32
	CgroupID uint64
	MemCap   uint64
	Quota    uint32
	Priority uint32
	Mode     Mode
	Pad      uint32
}

// VGPUStats is struct gpuslice_vgpu_stats.
type VGPUStats struct {
	Card     uint32
	ID       uint32
	Spec     VGPU
	MemUsed  uint64
	BusyNs   uint64
	WaitNs   uint64
	Slices   uint64
	Acquires uint64
	NProcs   uint32
	Pad      uint32
}

// VGPUUnseen is struct gpuslice_vgpu_unseen: the device memory the driver
// holds for a vGPU beyond its processes' charges, which the module counts
// against the cap.
type VGPUUnseen struct {
	Card    uint32
	ID      uint32
	Bytes   uint64
	MemUsed uint64 // out: bytes charged
	MemCap  uint64 // out
}

// Attach is struct gpuslice_attach.
type Attach struct {
	Card     uint32
	ID       uint32
	MemCap   uint64
	Quota    uint32
	Priority uint32
	Mode     Mode
	Policy   Policy
}

// Charge is struct gpuslice_charge.
type Charge struct {
	Card    uint32
	Pad     uint32
	Bytes   uint64
	MemUsed uint64
	MemCap  uint64
}

// Acquire is struct gpuslice_acquire.
type Acquire struct {
	Card       uint32
	Flags      uint32
	TimeoutNs  uint64
	SliceEndNs uint64
	Owner      int32
	Pad        uint32
}

// Release is struct gpuslice_release.
type Release struct {
	Card   uint32
	Flags  uint32
	BusyNs uint64
}

// SchedPage is struct gpuslice_sched_page, the read-only page of a card.
type SchedPage struct {
	Seq          uint32
	ABIVersion   uint32
	Owner        int32
	Policy       Policy
	SliceStartNs uint64
	SliceEndNs   uint64
	SliceNs      uint64
	MaxInst      uint32
	Mode         Mode
	Handovers    uint64
}

// Linux's ioctl number encoding (asm-generic/ioctl.h, used by x86 and arm64).
const (
	iocWrite = 1
	iocRead  = 2
	iocMagic = 0xB6
)

func ioc(dir, nr, size uintptr) uint {
	return uint(dir<<30 | size<<16 | iocMagic<<8 | nr)
}

// The ioctl numbers.
var (
	IocVersion     = ioc(iocRead, 0x00, unsafe.Sizeof(Version{}))
	IocCardGet     = ioc(iocRead|iocWrite, 0x01, unsafe.Sizeof(Card{}))
	IocVGPUStats   = ioc(iocRead|iocWrite, 0x02, unsafe.Sizeof(VGPUStats{}))
	IocCardSet     = ioc(iocWrite, 0x10, unsafe.Sizeof(Card{}))
	IocVGPUCreate  = ioc(iocRead|iocWrite, 0x11, unsafe.Sizeof(VGPU{}))
	IocVGPUUpdate  = ioc(iocWrite, 0x12, unsafe.Sizeof(VGPU{}))
	IocVGPUDestroy = ioc(iocWrite, 0x13, unsafe.Sizeof(VGPU{}))
	IocAttach      = ioc(iocRead|iocWrite, 0x20, unsafe.Sizeof(Attach{}))
	IocCharge      = ioc(iocRead|iocWrite, 0x21, unsafe.Sizeof(Charge{}))
	IocUncharge    = ioc(iocRead|iocWrite, 0x22, unsafe.Sizeof(Charge{}))
	IocMeminfo     = ioc(iocRead|iocWrite, 0x23, unsafe.Sizeof(Charge{}))
	IocAcquire     = ioc(iocRead|iocWrite, 0x24, unsafe.Sizeof(Acquire{}))
	IocRelease     = ioc(iocWrite, 0x25, unsafe.Sizeof(Release{}))

	IocVGPUUnseen    = ioc(iocRead|iocWrite, 0x03, unsafe.Sizeof(VGPUUnseen{}))
	IocVGPUSetUnseen = ioc(iocRead|iocWrite, 0x14, unsafe.Sizeof(VGPUUnseen{}))
)
