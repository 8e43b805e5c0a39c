package guard

import (
	"sort"
	"testing"

	"github.com/cilium/ebpf/btf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kernelWith is a kernel BTF that has the functions named and nothing
// else.
func kernelWith(t *testing.T, funcs ...string) *btf.Spec {
	t.Helper()
	b, err := btf.NewBuilder(nil, nil)
	require.NoError(t, err)
	proto := &btf.FuncProto{Return: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}}
	for _, f := range funcs {
		_, err := b.Add(&btf.Func{Name: f, Type: proto, Linkage: btf.GlobalFunc})
		require.NoError(t, err)
	}
	s, err := b.Spec()
	require.NoError(t, err)
	return s
}

// Every hook the embedded programs attach to, compat included.
var allHooks = []string{"bprm_committed_creds", "file_free_security", "file_ioctl",
	"file_ioctl_compat", "file_open", "mmap_file", "task_alloc"}

// lsmFuncs are the kernel functions of the LSM hooks named, the rescan's
// iterator's with them.
func lsmFuncs(hooks ...string) []string {
	funcs := []string{"bpf_iter_task_file"}
	for _, h := range hooks {
		funcs = append(funcs, "bpf_lsm_"+h)
	}
	return funcs
}

// programs are the programs left to load on a kernel with the functions
// named.
func programs(t *testing.T, funcs ...string) ([]string, error) {
	t.Helper()
	spec, err := loadGuard()
	require.NoError(t, err)
	err = dropMissingHooks(spec, kernelWith(t, funcs...))
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
		guardProgGuardIoctl, guardProgGuardIoctlCompat, guardProgGuardMmap, guardProgGuardOpen,
		guardProgGuardRescan}
	names, err := programs(t, lsmFuncs(allHooks...)...)
	require.NoError(t, err)
	assert.Equal(t, all, names, "a kernel with file_ioctl_compat")

	var old []string
	for _, h := range allHooks {
		if h != "file_ioctl_compat" {
			old = append(old, h)
		}
	}
	names, err = programs(t, lsmFuncs(old...)...)
	require.NoError(t, err)
	assert.NotContains(t, names, guardProgGuardIoctlCompat, "a kernel without file_ioctl_compat")
	assert.Len(t, names, len(all)-1)

	var noOpen []string
	for _, h := range allHooks {
		if h != "file_open" {
			noOpen = append(noOpen, h)
		}
	}
	_, err = programs(t, lsmFuncs(noOpen...)...)
	var ue *UnsupportedError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, ue.Reason, "no LSM hook file_open")
}

// A kernel without the task_file iterator (before 5.8) cannot learn the
// attachments made before the guard loaded (Rescan): the guard says so
// rather than load and cut the running processes off later.
func TestMissingIter(t *testing.T) {
	funcs := lsmFuncs(allHooks...)[1:]
	require.NotContains(t, funcs, "bpf_iter_task_file")
	_, err := programs(t, funcs...)
	var ue *UnsupportedError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, ue.Reason, "no BPF iterator task_file")
	assert.Contains(t, ue.Fix, "5.11")
}
