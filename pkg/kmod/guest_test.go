package kmod

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cgroup makes a cgroup v2 directory for the test and returns its id.
func cgroup(t *testing.T, name string) (string, uint64) {
	dir := filepath.Join("/sys/fs/cgroup", name)
	require.NoError(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() { os.Remove(dir) })
	id, err := CgroupID(dir)
	require.NoError(t, err)
	require.NotZero(t, id)
	return dir, id
}

// enter moves this process into the cgroup at dir until the test ends.
func enter(t *testing.T, dir string) {
	pid := []byte(strconv.Itoa(os.Getpid()))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0))
	t.Cleanup(func() { _ = os.WriteFile("/sys/fs/cgroup/cgroup.procs", pid, 0) })
}

func TestGuestAdminCalls(t *testing.T) {
	testenv.InGuest(t)
	c, err := Open("")
	require.NoError(t, err)
	defer c.Close()

	v, err := c.Version()
	require.NoError(t, err)
	assert.Equal(t, Version{ABIVersion: ABIVersion, MaxCards: MaxCards, MaxVGPUs: MaxVGPUs,
		PageSize: uint32(os.Getpagesize())}, v)

	require.NoError(t, c.SetCard(Card{Card: 3, Policy: PolicyWeighted, MaxInst: 20}))
	card, err := c.GetCard(3)
	require.NoError(t, err)
	assert.Equal(t, Card{Card: 3, Policy: PolicyWeighted, MaxInst: 20, SliceNs: 5e6,
		ReclaimNs: 100e6, Mode: ModeNone}, card)

	_, idA := cgroup(t, "gokmodA")
	_, idB := cgroup(t, "gokmodB")
	a, err := c.CreateVGPU(VGPU{Card: 3, CgroupID: idA, MemCap: 64 << 20, Quota: 30, Mode: ModeCompute})
	require.NoError(t, err)
	defer c.DestroyVGPU(3, a)

	// The module's refusals arrive as *Error, errno and explanation.
	_, err = c.CreateVGPU(VGPU{Card: 3, CgroupID: idA, MemCap: 1 << 20, Quota: 10, Mode: ModeCompute})
	var kerr *Error
	require.ErrorAs(t, err, &kerr)
	assert.ErrorIs(t, err, syscall.EEXIST)
	assert.Contains(t, err.Error(), "already has a vGPU")
	_, err = c.CreateVGPU(VGPU{Card: 3, CgroupID: idB, MemCap: 1 << 20, Mode: ModeMemory})
	assert.ErrorIs(t, err, syscall.EXDEV)
	_, err = c.CreateVGPU(VGPU{Card: 3, CgroupID: idB, MemCap: 1 << 20, Quota: 33, Mode: ModeCompute})
	assert.ErrorIs(t, err, syscall.EINVAL)
	assert.ErrorIs(t, c.SetCard(Card{Card: 3, Policy: PolicyFixed, MaxInst: 20}), syscall.EBUSY)

	require.NoError(t, c.UpdateVGPU(VGPU{Card: 3, ID: a, CgroupID: idA, MemCap: 128 << 20, Quota: 40, Mode: ModeCompute}))
	s, err := c.Stats(3, a)
	require.NoError(t, err)
	assert.Equal(t, VGPU{Card: 3, ID: a, CgroupID: idA, MemCap: 128 << 20, Quota: 40, Mode: ModeCompute}, s.Spec)

	require.NoError(t, c.DestroyVGPU(3, a))
	assert.ErrorIs(t, c.DestroyVGPU(3, a), syscall.ENOENT)
}

// memoryVGPU is an 8 MiB memory vGPU on card, bound to a new cgroup
// name: the admin's client, the cgroup's directory and the vGPU's id.
func memoryVGPU(t *testing.T, card uint32, name string) (*Client, string, uint32) {
	c, err := Open("")
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetCard(Card{Card: card, Policy: PolicyNative, MaxInst: 20}))
	dir, id := cgroup(t, name)
	vid, err := c.CreateVGPU(VGPU{Card: card, CgroupID: id, MemCap: 8 << 20, Mode: ModeMemory})
	require.NoError(t, err)
	t.Cleanup(func() { c.DestroyVGPU(card, vid) })
	return c, dir, vid
}

// A process in the vGPU's cgroup attaches and is held to the cap.
func TestGuestClientCalls(t *testing.T) {
	testenv.InGuest(t)
	c, dir, vid := memoryVGPU(t, 4, "gokmodC")

	_, err := c.Attach(4)
	assert.ErrorIs(t, err, syscall.ENOENT, "not in the cgroup yet")
	enter(t, dir)
	cl, err := Open("")
	require.NoError(t, err)
	defer cl.Close()
	at, err := cl.Attach(4)
	require.NoError(t, err)
	assert.Equal(t, Attach{Card: 4, ID: vid, MemCap: 8 << 20, Mode: ModeMemory, Policy: PolicyNative}, at)

	ch, err := cl.Charge(4, 8<<20)
	require.NoError(t, err)
	assert.Equal(t, uint64(8<<20), ch.MemUsed)
	_, err = cl.Charge(4, 1)
	assert.True(t, errors.Is(err, syscall.ENOMEM), "%v", err)
	ch, err = cl.Uncharge(4, 3<<20)
	require.NoError(t, err)
	assert.Equal(t, uint64(5<<20), ch.MemUsed)

	// Closing the file gives the rest back.
	require.NoError(t, cl.Close())
	s, err := c.Stats(4, vid)
	require.NoError(t, err)
	assert.Zero(t, s.MemUsed)
	assert.Zero(t, s.NProcs)
}

// The unseen bytes the agent sets count against the cap of the vGPU's
// processes, and read back with their charges.
func TestGuestUnseen(t *testing.T) {
	testenv.InGuest(t)
	c, dir, vid := memoryVGPU(t, 5, "gokmodU")
	require.NoError(t, c.SetUnseen(5, vid, 3<<20))

	enter(t, dir)
	cl, err := Open("")
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.Attach(5)
	require.NoError(t, err)
	_, err = cl.Charge(5, 5<<20+1)
	assert.ErrorIs(t, err, syscall.ENOMEM, "3 MiB unseen leave 5 MiB")
	ch, err := cl.Charge(5, 5<<20)
	require.NoError(t, err)
	assert.Equal(t, uint64(8<<20), ch.MemUsed, "the usage counts the unseen bytes")

	u, err := c.Unseen(5, vid)
	require.NoError(t, err)
	assert.Equal(t, VGPUUnseen{Card: 5, ID: vid, Bytes: 3 << 20, MemUsed: 5 << 20, MemCap: 8 << 20}, u)
	assert.ErrorIs(t, c.SetUnseen(5, vid, 1<<63), syscall.EINVAL)
	assert.ErrorIs(t, c.SetUnseen(5, 63, 0), syscall.ENOENT)
	require.NoError(t, c.SetUnseen(5, vid, 0))
	_, err = cl.Charge(5, 3<<20)
	require.NoError(t, err, "nothing unseen: the whole cap")
}
