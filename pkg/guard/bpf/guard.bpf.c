// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * The guard: refuses the NVIDIA device nodes to processes of vGPU cgroups
 * that are not attached to their vGPU.
 *
 * A use is guarded when the file is a character device of a guarded major
 * (the majors map, filled from /proc/devices by the loader) and the
 * calling process's cgroup, or an ancestor of it, is in the vgpu_cgroups
 * map. It is allowed when the process (its thread group: the state lives
 * on the group leader) holds a file that proves it attached:
 *
 *  - module mode: an open /dev/gpuslice on which it issued an ATTACH that
 *    succeeded, which the module's record of the file says
 *    (uapi/gpuslice_guard.h);
 *  - file mode (no module): an open regular file it opened directly inside
 *    its own vGPU cgroup's ledger directory (the ledger_dirs map, filled
 *    by the agent).
 *
 * Opening, ioctl (64- and 32-bit) and mmap are all
 * checked, so that a descriptor passed over a unix socket or inherited
 * across exec carries nothing past the guard. exec forgets the
 * attachment (the new image must ATTACH again); fork copies it (the child
 * shares the attached file); threads share it.
 *
 * See ../README.md for why these hooks and what the guard does not stop.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "uapi/gpuslice_guard.h"

#include "guard.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before the programs load. */
/* volatile: clang must not fold it; the loader rewrites it. */
volatile const __u32 gs_attach_cmd;

/* vGPU cgroup id -> its counters. The agent adds and removes them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GUARD_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct guard_cgroup);
} vgpu_cgroups SEC(".maps");

/* Guarded character majors (value unused). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GUARD_MAX_MAJORS);
	__type(key, __u32);
	__type(value, __u32);
} majors SEC(".maps");

/* [0]: the device number of /dev/gpuslice, 0 while the module is not there. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct guard_config);
} config SEC(".maps");

/* Node-wide counters, indexed by enum guard_stat. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GUARD_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/*
 * Ledger directories of vGPU containers (file mode), by the kernel's
 * (device, inode) -> the cgroup id of the container they belong to.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GUARD_MAX_LEDGER_DIRS);
	__type(key, struct guard_dir);
	__type(value, __u64);
} ledger_dirs SEC(".maps");

/*
 * Open files that may prove an attachment (a /dev/gpuslice that saw an
 * ATTACH, a ledger file), by address -> a cookie and their kind. An entry
 * goes when its file is freed, so a recorded (address, cookie) pair found
 * here is a live file, never a later one at the same address.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GUARD_MAX_FILES);
	__type(key, __u64);
	__type(value, struct guard_file);
} gs_files SEC(".maps");

/* Per thread group (on its leader): the files that may prove it attached. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct guard_proc);
} procs SEC(".maps");

/* One record per refusal, for the agent's log line. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, GUARD_EVENTS_BYTES);
} events SEC(".maps");

__u64 next_cookie;

/* Never set: they put these types into the BTF that bpf2go reads. */
const struct guard_event *unused_event;
const enum guard_stat unused_stat;
const enum guard_hook unused_hook;

static __always_inline void count(__u32 stat)
{
	__u64 *n = bpf_map_lookup_elem(&stats, &stat);

	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline bool is_gpuslice(struct file *file)
{
	__u32 zero = 0;
	struct guard_config *cfg;
	struct inode *inode;

	if (!file)
		return false;
	inode = BPF_CORE_READ(file, f_inode);
	if (!inode)
		return false;
	cfg = bpf_map_lookup_elem(&config, &zero);
	return cfg && cfg->gs_dev &&
	       (BPF_CORE_READ(inode, i_mode) & S_IFMT) == S_IFCHR &&
	       BPF_CORE_READ(inode, i_rdev) == cfg->gs_dev;
}

/* The device number of file when it is a guarded device, else 0. */
static __always_inline dev_t guarded_dev(struct file *file)
{
	struct inode *inode;
	__u32 major;
	dev_t rdev;

	if (!file)
		return 0;
	inode = BPF_CORE_READ(file, f_inode);
	if (!inode || (BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFCHR)
		return 0;
	rdev = BPF_CORE_READ(inode, i_rdev);
	major = MAJOR(rdev);
	return bpf_map_lookup_elem(&majors, &major) ? rdev : 0;
}

/*
 * The vGPU cgroup of the caller: its cgroup or the nearest ancestor in
 * vgpu_cgroups (as the module's ATTACH finds a vGPU), or NULL.
 */
static __always_inline struct guard_cgroup *vgpu_cgroup(__u64 *vgpu, __u64 *own)
{
	struct guard_cgroup *found = NULL, *cg;
	__u64 id;
	int level;

	for (level = 1; level < GUARD_MAX_LEVELS; level++) {
		id = bpf_get_current_ancestor_cgroup_id(level);
		if (!id)
			break;
		*own = id;
		cg = bpf_map_lookup_elem(&vgpu_cgroups, &id);
		if (cg) {
			found = cg;
			*vgpu = id;
		}
	}
	return found;
}

/*
 * The caller's group leader, a BTF pointer (a plain load: the verifier
 * takes it for the task storage helpers, unlike BPF_CORE_READ's copy).
 */
static __always_inline struct task_struct *leader(void)
{
	return bpf_get_current_task_btf()->group_leader;
}

/*
 * The guard word of a /dev/gpuslice file (gpuslice.ko's record of it
 * starts with one): whether it has the magic (a record without it, of a
 * module older than the guard, is counted), and in *attached whether the
 * module says an ATTACH on it completed.
 */
static __always_inline bool guard_word(struct file *file, bool *attached)
{
	struct gpuslice_guard_word w = {};
	void *rec;

	rec = BPF_CORE_READ(file, private_data);
	if (!rec || bpf_probe_read_kernel(&w, sizeof(w), rec))
		return false;
	if (w.magic != GPUSLICE_GUARD_MAGIC) {
		count(GUARD_STAT_BAD_MAGIC);
		return false;
	}
	*attached = w.attached;
	return true;
}

/* Whether one recorded file is live and proves the attachment. */
static __always_inline bool slot_attached(struct guard_proc *p, int i)
{
	bool word = false;
	struct guard_file *f;
	__u64 key;

	key = p->file[i];
	if (!key)
		return false;
	f = bpf_map_lookup_elem(&gs_files, &key);
	if (!f || f->cookie != p->cookie[i])
		return false;
	/* Opened in the process's own ledger directory: that is the proof. */
	if (f->kind == GUARD_FILE_LEDGER)
		return true;
	return guard_word((struct file *)key, &word) && word;
}

static __always_inline bool attached(void)
{
	struct guard_proc *p;
	int i;

	p = bpf_task_storage_get(&procs, leader(), 0, 0);
	if (!p)
		return false;
	for (i = 0; i < GUARD_PROC_FILES; i++)
		if (slot_attached(p, i))
			return true;
	return false;
}

static __always_inline int check(struct file *file, __u32 hook)
{
	struct guard_cgroup *cg;
	__u64 vgpu = 0, own = 0;
	struct guard_event *e;
	dev_t dev;

	dev = guarded_dev(file);
	if (!dev)
		return 0;
	cg = vgpu_cgroup(&vgpu, &own);
	if (!cg || attached())
		return 0;
	__sync_fetch_and_add(&cg->refused, 1);
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(GUARD_STAT_LOST_EVENTS);
		return -EPERM;
	}
	e->cgroup = vgpu;
	e->own_cgroup = own;
	e->tgid = bpf_get_current_pid_tgid() >> 32;
	e->pid = (__u32)bpf_get_current_pid_tgid();
	e->dev = dev;
	e->hook = hook;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	return -EPERM;
}

/*
 * An ATTACH on file is coming, or file was opened in the caller's ledger
 * directory (kind): remember the file for the thread group whose leader
 * is lead. A file recorded already (a rescan's, another thread's) is left
 * as it is.
 */
static __always_inline void record(struct task_struct *lead, struct file *file,
				   __u32 kind)
{
	struct guard_file f = { .kind = kind }, *have;
	__u64 key = (__u64)file, cookie;
	struct guard_proc *p;
	int i, free = -1;

	have = bpf_map_lookup_elem(&gs_files, &key);
	if (have) {
		cookie = have->cookie;
	} else {
		cookie = __sync_fetch_and_add(&next_cookie, 1) + 1;
		f.cookie = cookie;
		if (bpf_map_update_elem(&gs_files, &key, &f, BPF_NOEXIST)) {
			/* Full, or another thread's record won: look again. */
			have = bpf_map_lookup_elem(&gs_files, &key);
			if (!have) {
				count(GUARD_STAT_FILES_FULL);
				return;
			}
			cookie = have->cookie;
		}
	}
	p = bpf_task_storage_get(&procs, lead, 0,
				 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!p)
		return;
	for (i = 0; i < GUARD_PROC_FILES; i++) {
		if (p->file[i] == key && p->cookie[i] == cookie)
			return;
		if (free < 0 && !slot_attached(p, i))
			free = i;
	}
	/* Every slot holds a live proving file: this one replaces the oldest. */
	if (free < 0)
		free = p->next++ % GUARD_PROC_FILES;
	if (free >= 0 && free < GUARD_PROC_FILES) {
		p->file[free] = key;
		p->cookie[free] = cookie;
	}
}

/*
 * The vGPU cgroup whose ledger directory holds file directly (file is in
 * it, not in a directory below it), or 0: the directory is the file's
 * parent dentry, the one the open's path went through (a bind mount of
 * the directory shares its dentries; a symlink's target is looked up, not
 * the link).
 */
static __always_inline __u64 ledger_owner(struct file *file)
{
	struct guard_dir key = {};
	struct inode *dir;
	__u64 *owner;

	dir = BPF_CORE_READ(file, f_path.dentry, d_parent, d_inode);
	if (!dir)
		return 0;
	key.ino = BPF_CORE_READ(dir, i_ino);
	key.dev = BPF_CORE_READ(dir, i_sb, s_dev);
	owner = bpf_map_lookup_elem(&ledger_dirs, &key);
	return owner ? *owner : 0;
}

/*
 * A regular file opened: if it is in the ledger directory of the caller's
 * own vGPU cgroup, it proves the caller asked for its vGPU (file mode).
 * Another container's directory proves nothing, even where a process can
 * reach it.
 */
static __always_inline void ledger_open(struct file *file)
{
	__u64 owner, vgpu = 0, own = 0;

	/* The map lookup first: most opens leave here, before the cgroup walk. */
	owner = ledger_owner(file);
	if (owner && vgpu_cgroup(&vgpu, &own) && vgpu == owner)
		record(leader(), file, GUARD_FILE_LEDGER);
}

static __always_inline bool is_regular(struct file *file)
{
	struct inode *inode = BPF_CORE_READ(file, f_inode);

	return inode && (BPF_CORE_READ(inode, i_mode) & S_IFMT) == S_IFREG;
}

SEC("lsm/file_open")
int BPF_PROG(guard_open, struct file *file, int ret)
{
	if (ret)
		return ret;
	if (is_regular(file)) {
		ledger_open(file);
		return 0;
	}
	return check(file, GUARD_HOOK_OPEN);
}

/* file_ioctl and file_ioctl_compat: the same, but for what they report. */
static __always_inline int ioctl_hook(struct file *file, unsigned int cmd,
				      __u32 hook)
{
	if (cmd == gs_attach_cmd && is_gpuslice(file)) {
		record(leader(), file, GUARD_FILE_ATTACH);
		return 0;
	}
	return check(file, hook);
}

SEC("lsm/file_ioctl")
int BPF_PROG(guard_ioctl, struct file *file, unsigned int cmd,
	     unsigned long arg, int ret)
{
	if (ret)
		return ret;
	return ioctl_hook(file, cmd, GUARD_HOOK_IOCTL);
}

/*
 * A 32-bit process's ioctl (compat_sys_ioctl) goes through this hook, not
 * file_ioctl, on kernels that have it (6.8 on, and the stable kernels it
 * was backported to: Debian 12's 6.1 has it). The loader leaves it out
 * where the kernel has no such hook; there compat ioctls pass file_ioctl.
 */
SEC("lsm/file_ioctl_compat")
int BPF_PROG(guard_ioctl_compat, struct file *file, unsigned int cmd,
	     unsigned long arg, int ret)
{
	if (ret)
		return ret;
	return ioctl_hook(file, cmd, GUARD_HOOK_IOCTL_COMPAT);
}

SEC("lsm/mmap_file")
int BPF_PROG(guard_mmap, struct file *file, unsigned long reqprot,
	     unsigned long prot, unsigned long flags, int ret)
{
	if (ret)
		return ret;
	return check(file, GUARD_HOOK_MMAP);
}

/*
 * A freed recorded file: its address may come back as another file. Every
 * freed file is looked up, not only those that look like one of ours now:
 * a ledger file may have been renamed, or its directory unregistered,
 * since it was recorded.
 */
SEC("lsm/file_free_security")
int BPF_PROG(guard_file_free, struct file *file)
{
	__u64 key = (__u64)file;

	/* A lookup (no lock) first: most freed files were never recorded. */
	if (bpf_map_lookup_elem(&gs_files, &key))
		bpf_map_delete_elem(&gs_files, &key);
	return 0;
}

/* exec: the new image has not attached, whatever files it inherited. */
SEC("lsm/bprm_committed_creds")
int BPF_PROG(guard_exec, struct linux_binprm *bprm)
{
	/* After de_thread(): the caller leads its group. */
	bpf_task_storage_delete(&procs, leader());
	return 0;
}

/* fork: the child shares its parent's proving files, and so the state. */
SEC("lsm/task_alloc")
int BPF_PROG(guard_fork, struct task_struct *task, unsigned long clone_flags,
	     int ret)
{
	struct guard_proc *from, *to;

	if (ret || (clone_flags & CLONE_THREAD))
		return ret;
	from = bpf_task_storage_get(&procs, leader(), 0, 0);
	if (!from)
		return 0;
	to = bpf_task_storage_get(&procs, task, 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (to)
		*to = *from;
	return 0;
}

/*
 * Whether the cgroup id is task's cgroup v2 or an ancestor of it (the
 * vgpu_cgroup walk, for a task that is not the caller: the cgroups are
 * followed up through their css's parents, as the kernel's cgroup_parent).
 */
static __always_inline bool task_under(struct task_struct *task, __u64 id)
{
	struct cgroup *cg = BPF_CORE_READ(task, cgroups, dfl_cgrp);
	int level;

	for (level = 0; level < GUARD_MAX_LEVELS && cg; level++) {
		if (BPF_CORE_READ(cg, kn, id) == id)
			return true;
		cg = BPF_CORE_READ(cg, self.parent, cgroup);
	}
	return false;
}

/*
 * The rescan (Guard.Rescan): every open file of every task, once, when
 * the guard loads. A guard loaded after a process attached has no record
 * of it (the hooks record at the ATTACH, at the ledger's open); this
 * records what they would have, on the task's group leader:
 *
 *  - a /dev/gpuslice whose guard word has the magic, attached or not yet
 *    (an ATTACH begun before the guard loaded may complete after this
 *    read it; as the hook's records, it proves only once the word says
 *    attached, read at each use);
 *  - a regular file directly inside a registered ledger directory whose
 *    cgroup is the task's or an ancestor of it (the task's vGPU cgroup
 *    the hook compares with is not known yet: Rescan runs before the
 *    cgroups are added, so that none is guarded before it is known).
 *
 * record leaves a file recorded already as it is, so a rescan may run
 * again, and threads sharing a file table record it once.
 */
SEC("iter/task_file")
int guard_rescan(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	bool word = false;
	__u64 owner;

	if (!task || !file)
		return 0;
	if (is_gpuslice(file)) {
		if (guard_word(file, &word))
			record(task->group_leader, file, GUARD_FILE_ATTACH);
		return 0;
	}
	if (!is_regular(file))
		return 0;
	owner = ledger_owner(file);
	if (owner && task_under(task, owner))
		record(task->group_leader, file, GUARD_FILE_LEDGER);
	return 0;
}
