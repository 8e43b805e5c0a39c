/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * What the guard's programs and its Go loader share: map value layouts and
 * sizes (bpf2go generates the Go types from the programs' BTF).
 */
#ifndef GUARD_H
#define GUARD_H

#define GUARD_MAX_CGROUPS	4096
#define GUARD_MAX_MAJORS	64
#define GUARD_MAX_FILES		65536
#define GUARD_MAX_LEVELS	32	/* cgroup depth looked at */
#define GUARD_MAX_LEDGER_DIRS	GUARD_MAX_CGROUPS	/* one per vGPU container */
#define GUARD_PROC_FILES	4	/* proving files per process */
#define GUARD_EVENTS_BYTES	(256 * 1024)

enum guard_hook {
	GUARD_HOOK_OPEN = 1,
	GUARD_HOOK_IOCTL = 2,
	GUARD_HOOK_MMAP = 3,
	GUARD_HOOK_IOCTL_COMPAT = 4,	/* a 32-bit ioctl (file_ioctl_compat) */
};

/* What a recorded file proves by (gs_files). */
enum guard_file_kind {
	GUARD_FILE_ATTACH = 1,	/* /dev/gpuslice: ATTACH, if its guard word says so */
	GUARD_FILE_LEDGER = 2,	/* a file of the process's own ledger directory */
};

enum guard_stat {
	GUARD_STAT_LOST_EVENTS,	/* refusals the ring buffer had no room for */
	GUARD_STAT_BAD_MAGIC,	/* a /dev/gpuslice record without the magic */
	GUARD_STAT_FILES_FULL,	/* ATTACHes, ledger opens not recorded: gs_files full */
	GUARD_STAT_MAX,
};

struct guard_cgroup {
	__u64 refused;
};

struct guard_config {
	__u32 gs_dev;		/* kernel dev_t of /dev/gpuslice */
	__u32 pad;
};

/* A ledger directory (file mode), as the kernel names it. */
struct guard_dir {
	__u64 ino;
	__u32 dev;		/* kernel dev_t of its superblock */
	__u32 pad;
};

struct guard_file {
	__u64 cookie;
	__u32 kind;		/* enum guard_file_kind */
	__u32 pad;
};

struct guard_proc {
	__u64 file[GUARD_PROC_FILES];
	__u64 cookie[GUARD_PROC_FILES];
	__u32 next;
	__u32 pad;
};

struct guard_event {
	__u64 cgroup;		/* the vGPU cgroup */
	__u64 own_cgroup;	/* the process's own cgroup */
	__u32 pid;
	__u32 tgid;
	__u32 dev;		/* kernel dev_t */
	__u32 hook;		/* enum guard_hook */
	char comm[16];
};

#endif /* GUARD_H */
