package guard

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// NvidiaMajor is the character major of /dev/nvidia<N>, /dev/nvidiactl and
// /dev/nvidia-modeset, fixed by NVIDIA's driver.
const NvidiaMajor = 195

// Devices are what the guard's programs compare device files with.
type Devices struct {
	// Majors are the guarded character majors: NvidiaMajor and every
	// major /proc/devices names nvidia* (nvidia-uvm, nvidia-caps,
	// nvidia-caps-imex-channels, nvidia-nvlink...: their majors are
	// dynamic), sorted.
	Majors []uint32
	// Gpuslice is the kernel device number of /dev/gpuslice (major 10, a
	// dynamic misc minor), 0 while gpuslice.ko is not loaded: then no
	// process is attached and vGPU cgroups get no GPU at all.
	Gpuslice uint32
}

// KernelDev is the kernel's encoding of a device number (MKDEV in
// include/linux/kdev_t.h), which the programs read from inodes; user
// space's dev_t encodes it differently.
func KernelDev(major, minor uint32) uint32 { return major<<20 | minor&(1<<20-1) }

// parseProcDevices returns the guarded majors of a /proc/devices text:
// NvidiaMajor and the character devices named nvidia*.
func parseProcDevices(text string) ([]uint32, error) {
	set := map[uint32]bool{NvidiaMajor: true}
	char, seen := false, false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case line == "Character devices:":
			char, seen = true, true
			continue
		case strings.HasSuffix(line, "devices:"):
			char = false
			continue
		}
		if !char {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("/proc/devices: unexpected line %q", line)
		}
		n, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("/proc/devices: unexpected line %q", line)
		}
		if strings.HasPrefix(f[1], "nvidia") {
			set[uint32(n)] = true
		}
	}
	if !seen {
		return nil, fmt.Errorf("/proc/devices has no character devices section")
	}
	majors := make([]uint32, 0, len(set))
	for m := range set {
		majors = append(majors, m)
	}
	sort.Slice(majors, func(i, j int) bool { return majors[i] < majors[j] })
	return majors, nil
}

// parseDevNumber reads the "major:minor" of a sysfs dev file.
func parseDevNumber(text string) (uint32, error) {
	maj, min, ok := strings.Cut(strings.TrimSpace(text), ":")
	a, err1 := strconv.ParseUint(maj, 10, 12)
	b, err2 := strconv.ParseUint(min, 10, 20)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("not a major:minor device number: %q", text)
	}
	return KernelDev(uint32(a), uint32(b)), nil
}

// ReadDevices reads the guarded majors from procDevices (/proc/devices)
// and /dev/gpuslice's number from miscDev (/sys/class/misc/gpuslice/dev;
// absent: 0).
func ReadDevices(procDevices, miscDev string) (Devices, error) {
	b, err := os.ReadFile(procDevices)
	if err != nil {
		return Devices{}, fmt.Errorf("guard: reading the device majors: %w", err)
	}
	majors, err := parseProcDevices(string(b))
	if err != nil {
		return Devices{}, fmt.Errorf("guard: %w", err)
	}
	d := Devices{Majors: majors}
	b, err = os.ReadFile(miscDev)
	switch {
	case os.IsNotExist(err):
		return d, nil
	case err != nil:
		return Devices{}, fmt.Errorf("guard: reading /dev/gpuslice's number: %w", err)
	}
	if d.Gpuslice, err = parseDevNumber(string(b)); err != nil {
		return Devices{}, fmt.Errorf("guard: %s: %w", miscDev, err)
	}
	return d, nil
}
