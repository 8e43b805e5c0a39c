package guard

import (
	"sort"
	"testing"

	"github.com/cilium/ebpf/btf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kernelWith is a kernel BTF that has the LSM hooks named (their
// bpf_lsm_<hook> functions) and nothing else.
func kernelWith(t *testing.T, hooks ...string) *btf.Spec {
	t.Helper()
	b, err := btf.NewBuilder(nil, nil)
	require.NoError(t, err)
	proto := &btf.FuncProto{Return: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}}
	for _, h := range hooks {
		_, err := b.Add(&btf.Func{Name: "bpf_lsm_" + h, Type: proto, Linkage: btf.GlobalFunc})
		require.NoError(t, err)
	}
	s, err := b.Spec()
	require.NoError(t, err)
	return s
}

// Every hook the embedded programs attach to, compat included.
var allHooks = []string{"bprm_committed_creds", "file_free_security", "file_ioctl",
	"file_ioctl_compat", "file_open", "mmap_file", "task_alloc"}

func programs(t *testing.T, hooks ...string) ([]string, error) {
	t.Helper()
	spec, err := loadGuard()
	require.NoError(t, err)
	err = dropMissingHooks(spec, kernelWith(t, hooks...))
	var names []string
	for n := range spec.Programs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, err
}

// The 32-bit ioctl hook is loaded where the kernel has it (6.8 on, and
// the stable kernels it went back to) and left out where it has not; a
// kernel without one of the others cannot run the guard, and is told so.
func TestDropMissingHooks(t *testing.T) {
	all := []string{guardProgGuardExec, guardProgGuardFileFree, guardProgGuardFork,
		guardProgGuardIoctl, guardProgGuardIoctlCompat, guardProgGuardMmap, guardProgGuardOpen}
	names, err := programs(t, allHooks...)
	require.NoError(t, err)
	assert.Equal(t, all, names, "a kernel with file_ioctl_compat")

	var old []string
	for _, h := range allHooks {
		if h != "file_ioctl_compat" {
			old = append(old, h)
		}
	}
	names, err = programs(t, old...)
	require.NoError(t, err)
	assert.NotContains(t, names, guardProgGuardIoctlCompat, "a kernel without file_ioctl_compat")
	assert.Len(t, names, len(all)-1)

	var noOpen []string
	for _, h := range allHooks {
		if h != "file_open" {
			noOpen = append(noOpen, h)
		}
	}
	_, err = programs(t, noOpen...)
	var ue *UnsupportedError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, ue.Reason, "no LSM hook file_open")
}
