// Package state keeps the node agent's allocations (which container holds
// which vGPUs) on disk, so that an agent restarted with containers running
// loses nothing and double-books nothing.
//
// The state is a snapshot (allocations.json, replaced atomically by a
// rename) and a journal of the changes since (allocations.log, one JSON
// line per change, appended with a single write). A change costs one
// write(2), not a file creation and a rename: the agent answers container
// creations within a millisecond. Opening replays the journal over the
// snapshot and compacts; so does the store whenever the journal grows past
// twice the live allocations. A crash of the agent, kill -9 included,
// leaves every completed change; a torn last line (a write cut short) is
// dropped. Nothing is fsynced: what this guards against is the agent dying,
// not the node; after a power loss no container survives, and the agent's
// reconcile (NRI Synchronize) releases every allocation whose container is
// gone.
package state

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/pkg/atomicfile"
)

// The files in the agent's state directory.
const (
	FileName    = "allocations.json" // the snapshot
	JournalName = "allocations.log"  // the changes since the snapshot
	LockName    = "lock"             // flock: one agent per directory
)

// formatVersion is the layout of the snapshot; bump it on incompatible changes.
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
	// Request and ShareID name a claim's vGPU in its allocation: the
	// claim's request and the share of the device it was given.
	Request string `json:"request,omitempty"`
	ShareID string `json:"shareID,omitempty"`
}

// Allocation is what one container holds, or one DRA claim (Claim set).
type Allocation struct {
	// Container is the record's key: the container's id, or ClaimKey of
	// the claim's UID.
	Container string    `json:"container"`
	Name      string    `json:"name"`
	Pod       string    `json:"pod"`
	Namespace string    `json:"namespace"`
	PodUID    string    `json:"podUID,omitempty"`
	VGPUs     []VGPU    `json:"vgpus"`
	Enforce   string    `json:"enforce"`             // "module" or "file"
	LedgerDir string    `json:"ledgerDir,omitempty"` // file mode: host path
	CgroupID  uint64    `json:"cgroupID,omitempty"`  // module mode, once bound
	Created   time.Time `json:"created"`

	// CgroupPath is the container's cgroup, relative to the cgroup root
	// (as /proc/<pid>/cgroup shows it to the agent): whose processes the
	// driver's per-process figures are. Empty when the runtime gave none.
	CgroupPath string `json:"cgroupPath,omitempty"`

	// Claim is set on the allocation of a DRA ResourceClaim: prepared by
	// the kubelet before any container of its pod exists, it lives until
	// the kubelet unprepares it, whatever its containers do. Pod and
	// Namespace are its pod's, Name the containers using it (comma
	// separated), CgroupPath the pod's cgroup.
	Claim *Claim `json:"claim,omitempty"`
}

// Claim identifies the ResourceClaim of an allocation.
type Claim struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Pool      string `json:"pool"` // the ResourceSlice pool its devices are in
}

// ClaimPrefix starts the key of a claim's allocation.
const ClaimPrefix = "claim-"

// ClaimKey is the key of the allocation of the claim of UID uid.
func ClaimKey(uid string) string { return ClaimPrefix + uid }

type file struct {
	Version     int                    `json:"version"`
	Allocations map[string]*Allocation `json:"allocations"`
}

// record is one line of the journal: a put (Alloc set) or a delete.
type record struct {
	Put *Allocation `json:"put,omitempty"`
	Del string      `json:"del,omitempty"`
}

// Store is the set of allocations and its files. Safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	dir     string
	allocs  map[string]*Allocation
	journal *os.File
	records int      // lines in the journal
	lockf   *os.File // holds the directory's flock
}

// Open loads the state in dir (creating dir), or starts empty when there
// is none yet. A snapshot or journal that cannot be read is an error:
// starting empty would double-book the cards of running containers.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	s := &Store{dir: dir, allocs: map[string]*Allocation{}}
	if err := s.lock(); err != nil {
		return nil, err
	}
	if err := s.loadSnapshot(); err != nil {
		s.unlock()
		return nil, err
	}
	if err := s.replay(); err != nil {
		s.unlock()
		return nil, err
	}
	if err := s.compact(); err != nil {
		s.unlock()
		return nil, err
	}
	return s, nil
}

// lock takes the directory for this store alone (two agents, say a
// service and a pre-registered plugin, would interleave their journals).
func (s *Store) lock() error {
	f, err := os.OpenFile(filepath.Join(s.dir, LockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("state: %s is in use by another agent (%v): run one gpuslice-nri per node", s.dir, err)
	}
	s.lockf = f
	return nil
}

func (s *Store) unlock() {
	if s.lockf != nil {
		s.lockf.Close()
		s.lockf = nil
	}
}

// Read loads the state in dir without changing anything: for observers
// (tests, tools) while an agent owns the directory. Open would compact.
func Read(dir string) (map[string]Allocation, error) {
	var s *Store
	for try := 0; ; try++ {
		before := snapshotID(dir)
		s = &Store{dir: dir, allocs: map[string]*Allocation{}}
		if err := s.loadSnapshot(); err != nil {
			return nil, err
		}
		if err := s.replay(); err != nil {
			return nil, err
		}
		// A compaction between the two reads replaced the snapshot and
		// emptied the journal: read again.
		if snapshotID(dir) == before || try == 100 {
			break
		}
	}
	out := make(map[string]Allocation, len(s.allocs))
	for id, a := range s.allocs {
		out[id] = a.clone()
	}
	return out, nil
}

// snapshotID tells one snapshot file from the next (a rename replaces it).
func snapshotID(dir string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join(dir, FileName), &st) != nil {
		return 0
	}
	return st.Ino
}

// Path is the snapshot's path.
func (s *Store) Path() string { return filepath.Join(s.dir, FileName) }

func (s *Store) journalPath() string { return filepath.Join(s.dir, JournalName) }

func (s *Store) loadSnapshot() error {
	b, err := os.ReadFile(s.Path())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("state: %s is corrupt (%v): move it aside to start from the containers NRI reports", s.Path(), err)
	}
	if f.Version != formatVersion {
		return fmt.Errorf("state: %s has format version %d, this agent reads %d", s.Path(), f.Version, formatVersion)
	}
	for id, a := range f.Allocations {
		if a == nil || a.Container != id {
			return fmt.Errorf("state: %s is corrupt: entry %q", s.Path(), id)
		}
		s.allocs[id] = a
	}
	return nil
}

// replay applies the journal's records in order. Only the last line may
// be torn (no newline, or not JSON): a write the agent did not finish.
func (s *Store) replay() error {
	b, err := os.ReadFile(s.journalPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	r := bufio.NewReader(bytes.NewReader(b))
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return nil // empty, or a torn last line
		}
		var rec record
		if jerr := json.Unmarshal(line, &rec); jerr != nil || (rec.Put == nil) == (rec.Del == "") {
			if _, err := r.Peek(1); err == io.EOF {
				return nil // the torn last line
			}
			return fmt.Errorf("state: %s is corrupt at line %d: move it aside to start from %s and the containers NRI reports", s.journalPath(), n, FileName)
		}
		s.apply(rec)
	}
}

func (s *Store) apply(rec record) {
	if rec.Put != nil {
		s.allocs[rec.Put.Container] = rec.Put
	} else {
		delete(s.allocs, rec.Del)
	}
}

// compact writes the snapshot and starts an empty journal; s.mu held (or
// the store not shared yet). Crashing between the two steps is harmless:
// the old journal replays over the new snapshot to the same state.
func (s *Store) compact() error {
	b, err := json.MarshalIndent(file{Version: formatVersion, Allocations: s.allocs}, "", "  ")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	// Synced before the journal is emptied: a crash leaves the old
	// snapshot and journal or the new snapshot, never an empty one.
	if err := atomicfile.Write(s.Path(), b, 0o600); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if s.journal != nil {
		s.journal.Close()
	}
	s.journal, err = os.OpenFile(s.journalPath(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	s.records = 0
	return nil
}

// Close closes the journal.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unlock()
	if s.journal == nil {
		return nil
	}
	err := s.journal.Close()
	s.journal = nil
	return err
}

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

// EachVGPU calls fn for every vGPU of every allocation, in no order,
// without copying: the cheap way to see the node's load. fn must not call
// the store.
func (s *Store) EachVGPU(fn func(container string, v VGPU)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, a := range s.allocs {
		for _, v := range a.VGPUs {
			fn(id, v)
		}
	}
}

// Put records (or replaces) an allocation; once it returns, the change is
// on disk. On a write error nothing changes.
func (s *Store) Put(a Allocation) error {
	c := a.clone()
	return s.commit(record{Put: &c})
}

// Delete forgets a container's allocation.
func (s *Store) Delete(container string) error {
	s.mu.Lock()
	_, had := s.allocs[container]
	s.mu.Unlock()
	if !had {
		return nil
	}
	return s.commit(record{Del: container})
}

// commit appends rec to the journal in one write, then applies it.
func (s *Store) commit(rec record) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return errors.New("state: the store is closed")
	}
	if _, err := s.journal.Write(append(line, '\n')); err != nil {
		// A partial line would tear the journal: start it afresh; if
		// even that fails, refuse changes rather than risk a journal
		// that does not replay.
		if cerr := s.compact(); cerr != nil && s.journal != nil {
			s.journal.Close()
			s.journal = nil
		}
		return fmt.Errorf("state: writing %s: %w", s.journalPath(), err)
	}
	s.apply(rec)
	if s.records++; s.records > 64+2*len(s.allocs) {
		// The journal is intact: a failed compaction (a full disk, say)
		// only means trying again at the next change.
		_ = s.compact()
	}
	return nil
}

func (a Allocation) clone() Allocation {
	a.VGPUs = append([]VGPU(nil), a.VGPUs...)
	if a.Claim != nil {
		c := *a.Claim
		a.Claim = &c
	}
	return a
}
