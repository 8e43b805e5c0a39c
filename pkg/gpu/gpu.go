// Package gpu discovers the node's NVIDIA cards for the gpuslice node agent.
//
// A Discoverer lists the cards as Card values. Two implementations exist:
//
//   - NVML asks the NVIDIA driver through libnvidia-ml.so.1 (go-nvml). The
//     library is loaded only when Cards is called, so constructing an NVML
//     discoverer never fails, even on a machine without a driver.
//   - Static returns a fixed, validated list: the simulated card set of the
//     agent's configuration, used on machines without a GPU (development,
//     CI) and in tests. It never touches NVML.
//
// DevicePaths names the device nodes a container needs to use a card.
package gpu

import (
	"errors"
	"fmt"
	"path"
	"strconv"
)

// MaxCards is the number of cards gpuslice handles on one node: card
// indices are 0..MaxCards-1. It matches gpuslice.ko's card index range
// (GPUSLICE_MAX_CARDS in kmod/include/uapi/gpuslice.h, kmod.MaxCards).
const MaxCards = 32

// Card is one physical GPU of the node.
type Card struct {
	// Index is the card's index in gpuslice and the driver (NVML and CUDA
	// order without CUDA_VISIBLE_DEVICES), 0..MaxCards-1.
	Index int
	// UUID is the driver's identifier, e.g. "GPU-8f6c…"; stable across
	// reboots, unlike Index.
	UUID string
	// Name is the product name, e.g. "NVIDIA H100 80GB HBM3".
	Name string
	// MemoryBytes is the card's total device memory.
	MemoryBytes uint64
	// Minor is the minor number of the card's device node /dev/nvidia<Minor>.
	// It is usually, but not always, equal to Index.
	Minor int
	// DriverVersion is the NVIDIA driver's version, the same for every
	// card of a node; "" when unknown.
	DriverVersion string
}

// Discoverer lists the node's cards.
type Discoverer interface {
	// Cards returns the node's cards in index order. It either returns
	// every card or an error; never a partial list.
	Cards() ([]Card, error)
}

// The device nodes every CUDA process needs besides its card's own
// /dev/nvidia<minor>. They are shared by all cards of the node.
const (
	// ControlDevice is the driver's control node: every NVML and CUDA
	// client opens it first to talk to the kernel module (nvidia.ko).
	ControlDevice = "/dev/nvidiactl"
	// UVMDevice is the unified memory node of nvidia-uvm.ko: CUDA opens it
	// at initialisation (cuInit fails without it), not only for managed
	// memory.
	UVMDevice = "/dev/nvidia-uvm"
	// UVMToolsDevice is nvidia-uvm.ko's tools node, used by profilers and
	// debuggers (CUPTI, Nsight) for unified memory events.
	UVMToolsDevice = "/dev/nvidia-uvm-tools"
)

// DevicePaths returns the device nodes a container needs to use card c:
// the card's own node /dev/nvidia<minor> first, then ControlDevice,
// UVMDevice and UVMToolsDevice. The paths are those inside the container
// and under the host's root; callers prefix a scratch device root (tests)
// themselves.
func DevicePaths(c Card) []string {
	return []string{
		path.Join("/dev", "nvidia"+strconv.Itoa(c.Minor)),
		ControlDevice,
		UVMDevice,
		UVMToolsDevice,
	}
}

// Validate checks a card set: indices in 0..MaxCards-1 and unique, minor
// numbers >= 0 and unique, memory > 0, and UUIDs unique where given. It
// reports every problem, one per line, each naming the card.
func Validate(cards []Card) error {
	var errs []error
	if len(cards) > MaxCards {
		errs = append(errs, fmt.Errorf("%d cards: gpuslice handles at most %d (indices 0-%d)",
			len(cards), MaxCards, MaxCards-1))
	}
	byIndex := map[int]int{}
	byMinor := map[int]int{}
	byUUID := map[string]int{}
	for i, c := range cards {
		where := fmt.Sprintf("card %d (entry %d)", c.Index, i)
		if c.Index < 0 || c.Index >= MaxCards {
			errs = append(errs, fmt.Errorf("%s: index %d is out of range 0-%d: number the cards from 0",
				where, c.Index, MaxCards-1))
		}
		if j, dup := byIndex[c.Index]; dup {
			errs = append(errs, fmt.Errorf("%s: index %d is also entry %d's: give each card its own index",
				where, c.Index, j))
		} else {
			byIndex[c.Index] = i
		}
		if c.Minor < 0 {
			errs = append(errs, fmt.Errorf("%s: minor %d is negative: it must be >= 0 (the N of /dev/nvidiaN)",
				where, c.Minor))
		} else if j, dup := byMinor[c.Minor]; dup {
			errs = append(errs, fmt.Errorf("%s: minor %d is also entry %d's: two cards cannot share /dev/nvidia%d",
				where, c.Minor, j, c.Minor))
		} else {
			byMinor[c.Minor] = i
		}
		if c.MemoryBytes == 0 {
			errs = append(errs, fmt.Errorf("%s: memory is 0: give the card's memory size (> 0)", where))
		}
		if c.UUID != "" {
			if j, dup := byUUID[c.UUID]; dup {
				errs = append(errs, fmt.Errorf("%s: UUID %q is also entry %d's: UUIDs must be unique",
					where, c.UUID, j))
			} else {
				byUUID[c.UUID] = i
			}
		}
	}
	return errors.Join(errs...)
}
