// Package state keeps the node agent's allocations (which container holds
// which vGPUs) in a JSON file, so that an agent restarted with containers
// running loses nothing and double-books nothing.
//
// Every change rewrites the whole file atomically (a temporary file renamed
// over the old one), so a crash of the agent, kill -9 included, leaves the
// old or the new state, never a torn one. The file is not fsynced: what it
// guards against is the agent dying, not the node; after a power loss no
// container survives, and the agent's reconcile (NRI Synchronize) releases
// every allocation whose container is gone.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// FileName is the state file in the agent's state directory.
const FileName = "allocations.json"

// formatVersion is the layout of the file; bump it on incompatible changes.
const formatVersion = 1

// VGPU is one vGPU of a container: a share of one card.
type VGPU struct {
	Card        int    `json:"card"`
	MemoryBytes uint64 `json:"memoryBytes"`
	Cores       uint32 `json:"cores"`
	Priority    int    `json:"priority"`
	Mode        int    `json:"mode"` // placement.Mode
	// KmodID is the vGPU's id in gpuslice.ko once created there, else -1.
	KmodID int `json:"kmodID"`
}

// Allocation is what one container holds.
type Allocation struct {
	Container string    `json:"container"` // the container's id
	Name      string    `json:"name"`
	Pod       string    `json:"pod"`
	Namespace string    `json:"namespace"`
	PodUID    string    `json:"podUID,omitempty"`
	VGPUs     []VGPU    `json:"vgpus"`
	Enforce   string    `json:"enforce"`             // "module" or "file"
	LedgerDir string    `json:"ledgerDir,omitempty"` // file mode: host path
	CgroupID  uint64    `json:"cgroupID,omitempty"`  // module mode, once bound
	Created   time.Time `json:"created"`
}

type file struct {
	Version     int                    `json:"version"`
	Allocations map[string]*Allocation `json:"allocations"`
}

// Store is the set of allocations and its file. Safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	path   string
	allocs map[string]*Allocation
}

// Open loads the state in dir (creating dir), or starts empty when there
// is no state file yet. A file that cannot be read is an error: starting
// empty would double-book the cards of running containers.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	s := &Store{path: filepath.Join(dir, FileName), allocs: map[string]*Allocation{}}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("state: %s is corrupt (%v): move it aside to start from the containers NRI reports", s.path, err)
	}
	if f.Version != formatVersion {
		return nil, fmt.Errorf("state: %s has format version %d, this agent reads %d", s.path, f.Version, formatVersion)
	}
	for id, a := range f.Allocations {
		if a == nil || a.Container != id {
			return nil, fmt.Errorf("state: %s is corrupt: entry %q", s.path, id)
		}
		s.allocs[id] = a
	}
	return s, nil
}

// Path is the state file's path.
func (s *Store) Path() string { return s.path }

// Get returns a copy of the container's allocation.
func (s *Store) Get(container string) (Allocation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.allocs[container]
	if !ok {
		return Allocation{}, false
	}
	return a.clone(), true
}

// All returns copies of every allocation, by container id.
func (s *Store) All() []Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Allocation, 0, len(s.allocs))
	for _, a := range s.allocs {
		out = append(out, a.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Container < out[j].Container })
	return out
}

// Put records (or replaces) an allocation and persists the state; on a
// write error nothing changes.
func (s *Store) Put(a Allocation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.allocs[a.Container]
	c := a.clone()
	s.allocs[a.Container] = &c
	if err := s.save(); err != nil {
		if had {
			s.allocs[a.Container] = old
		} else {
			delete(s.allocs, a.Container)
		}
		return err
	}
	return nil
}

// Delete forgets a container's allocation and persists the state.
func (s *Store) Delete(container string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.allocs[container]
	if !had {
		return nil
	}
	delete(s.allocs, container)
	if err := s.save(); err != nil {
		s.allocs[container] = old
		return err
	}
	return nil
}

// save writes the file atomically; s.mu held.
func (s *Store) save() error {
	b, err := json.MarshalIndent(file{Version: formatVersion, Allocations: s.allocs}, "", "  ")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), FileName+".*")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("state: writing %s: %w", s.path, err)
	}
	return nil
}

func (a Allocation) clone() Allocation {
	a.VGPUs = append([]VGPU(nil), a.VGPUs...)
	return a
}
