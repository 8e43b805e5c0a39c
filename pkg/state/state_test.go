package state

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func alloc(id string, cards ...int) Allocation {
	a := Allocation{Container: id, Name: "ctr-" + id, Pod: "pod", Namespace: "ns",
		Enforce: "file", Created: time.Unix(1700000000, 0).UTC()}
	for _, c := range cards {
		a.VGPUs = append(a.VGPUs, VGPU{Card: c, MemoryBytes: 1 << 30, Cores: 30, KmodID: -1})
	}
	return a
}

func TestPersistAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	assert.Empty(t, s.All())
	require.NoError(t, s.Put(alloc("b", 1)))
	require.NoError(t, s.Put(alloc("a", 0, 1)))
	require.NoError(t, s.Put(alloc("c", 0)))
	require.NoError(t, s.Delete("c"))
	require.NoError(t, s.Delete("never-there"))

	// A new agent reads exactly what the old one left.
	require.NoError(t, s.Close()) // the agent is gone, its lock with it
	s2, err := Open(dir)
	require.NoError(t, err)
	all := s2.All()
	require.Len(t, all, 2)
	assert.Equal(t, alloc("a", 0, 1), all[0])
	assert.Equal(t, alloc("b", 1), all[1])
	got, ok := s2.Get("a")
	require.True(t, ok)
	assert.Equal(t, alloc("a", 0, 1), got)
	_, ok = s2.Get("c")
	assert.False(t, ok)

	// No temporary files left behind.
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{FileName, JournalName, LockName}, names)
}

// Callers get copies: changing one does not change the store.
func TestCopies(t *testing.T) {
	s, err := Open(t.TempDir())
	require.NoError(t, err)
	a := alloc("a", 0)
	require.NoError(t, s.Put(a))
	a.VGPUs[0].Card = 7
	got, _ := s.Get("a")
	assert.Equal(t, 0, got.VGPUs[0].Card)
	got.VGPUs[0].Card = 9
	again, _ := s.Get("a")
	assert.Equal(t, 0, again.VGPUs[0].Card)
}

// A failed write changes nothing, and the store recovers.
func TestWriteFailureKeepsState(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, s.Put(alloc("a", 0)))
	// The journal's descriptor, swapped for a read-only one: writes fail.
	ro, err := os.Open(filepath.Join(dir, JournalName))
	require.NoError(t, err)
	s.journal.Close()
	s.journal = ro
	assert.Error(t, s.Put(alloc("b", 1)))
	all := s.All()
	require.Len(t, all, 1)
	assert.Equal(t, "a", all[0].Container)
	// The failure compacted the journal afresh: the store goes on.
	require.NoError(t, s.Put(alloc("c", 1)))
	require.NoError(t, s.Close()) // the agent is gone, its lock with it
	s2, err := Open(dir)
	require.NoError(t, err)
	assert.Len(t, s2.All(), 2)
}

// A new agent replays what the old one journalled without compacting
// (it was killed), dropping only a torn last line.
func TestJournalReplay(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, s.Put(alloc("a", 0)))
	require.NoError(t, s.Put(alloc("b", 1)))
	require.NoError(t, s.Delete("a"))
	// A write cut short by the kill.
	f, err := os.OpenFile(filepath.Join(dir, JournalName), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"put":{"container":"torn"`)
	require.NoError(t, err)
	f.Close()

	// An observer reads the same without touching the files.
	seen, err := Read(dir)
	require.NoError(t, err)
	assert.Equal(t, map[string]Allocation{"b": alloc("b", 1)}, seen)

	require.NoError(t, s.Close()) // the agent is gone, its lock with it
	s2, err := Open(dir)
	require.NoError(t, err)
	all := s2.All()
	require.Len(t, all, 1)
	assert.Equal(t, alloc("b", 1), all[0])
	// Opening compacted: the snapshot holds it all, the journal is empty.
	st, err := os.Stat(filepath.Join(dir, JournalName))
	require.NoError(t, err)
	assert.Zero(t, st.Size())
}

func TestJournalCorruptInTheMiddle(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, JournalName),
		[]byte("{\"del\":\"x\"}\nnot json\n{\"del\":\"y\"}\n"), 0o600))
	_, err := Open(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 2")
}

// The journal is compacted as it grows: it never holds much more than
// twice the live allocations.
func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	for i := range 1000 {
		require.NoError(t, s.Put(alloc("a", i%8)))
		require.NoError(t, s.Put(alloc("b", 0)))
		require.NoError(t, s.Delete("b"))
	}
	assert.LessOrEqual(t, s.records, 64+2*len(s.allocs))
	require.NoError(t, s.Close()) // the agent is gone, its lock with it
	s2, err := Open(dir)
	require.NoError(t, err)
	all := s2.All()
	require.Len(t, all, 1)
	assert.Equal(t, alloc("a", 999%8), all[0])
}

func TestCorruptFileIsAnError(t *testing.T) {
	tests := map[string]string{
		"not json":      "{",
		"wrong version": `{"version": 99, "allocations": {}}`,
		"key mismatch":  `{"version": 1, "allocations": {"x": {"container": "y"}}}`,
		"null entry":    `{"version": 1, "allocations": {"x": null}}`,
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600))
			_, err := Open(dir)
			require.Error(t, err)
			assert.Contains(t, err.Error(), filepath.Join(dir, FileName))
		})
	}
}

// One agent per state directory: a second one is refused, with the reason.
func TestOneStorePerDirectory(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	_, err = Open(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use by another agent")
	require.NoError(t, s.Close())
	s2, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, s2.Close())
}

// A claim's record, with its claim and its vGPUs' requests and shares,
// survives a restart through the journal and the snapshot, and callers
// get copies of its claim too.
func TestClaimRecord(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	a := alloc(ClaimKey("5f1c"), 1)
	a.Claim = &Claim{UID: "5f1c", Namespace: "ns", Name: "train-gpu", Pool: "node-a"}
	a.VGPUs[0].Request, a.VGPUs[0].ShareID = "gpu", "8d2a"
	require.NoError(t, s.Put(a))

	got, ok := s.Get("claim-5f1c")
	require.True(t, ok)
	got.Claim.Name = "changed"
	again, _ := s.Get("claim-5f1c")
	assert.Equal(t, "train-gpu", again.Claim.Name)

	require.NoError(t, s.Close())
	s2, err := Open(dir) // replays the journal, then compacts
	require.NoError(t, err)
	got, ok = s2.Get("claim-5f1c")
	require.True(t, ok)
	assert.Equal(t, a, got)
	require.NoError(t, s2.Close())
	s3, err := Open(dir) // from the snapshot
	require.NoError(t, err)
	got, _ = s3.Get("claim-5f1c")
	assert.Equal(t, a, got)
}
