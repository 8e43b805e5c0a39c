//go:build cgo

package agent

import (
	"github.com/gpuslice/gpuslice/pkg/schedfile"
)

// ReadSchedFile is the SchedReader of the real schedule files: each
// vGPU's busy time, as its processes reported it at their fences, by key
// (pkg/schedfile, which reads a copy of the file and takes no lock).
// The schedule directory is writable by every container of the card:
// schedfile.Read opens the file without following a symbolic link and
// without blocking on a FIFO, and reads it only when it is a regular file.
func ReadSchedFile(path string) (map[string]uint64, error) {
	c, err := schedfile.Read(path)
	if err != nil {
		return nil, err
	}
	busy := make(map[string]uint64, len(c.VGPUs))
	for _, v := range c.VGPUs {
		busy[v.Key] = v.BusyNs
	}
	return busy, nil
}
