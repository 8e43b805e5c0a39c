/* SPDX-License-Identifier: (GPL-2.0-only WITH Linux-syscall-note) OR Apache-2.0 */
/*
 * What gpuslice's eBPF guard (pkg/guard) reads of an open /dev/gpuslice.
 *
 * Not a system call: the guard's BPF programs read the module's record of
 * a file (file->private_data) with bpf_probe_read_kernel() to learn
 * whether the file's ATTACH succeeded, and that record starts with this
 * word. The magic tells the guard that it reads a module that speaks this
 * layout; a record without it counts as not attached (the guard refuses,
 * and counts the mismatch for the agent to report).
 */
#ifndef _UAPI_LINUX_GPUSLICE_GUARD_H
#define _UAPI_LINUX_GPUSLICE_GUARD_H

#include <linux/types.h>

#define GPUSLICE_GUARD_MAGIC	0x31677367	/* "gsg1" in memory order */

struct gpuslice_guard_word {
	__u32 magic;		/* GPUSLICE_GUARD_MAGIC from open on */
	__u32 attached;		/* 1 once an ATTACH of this file succeeded */
};

#endif /* _UAPI_LINUX_GPUSLICE_GUARD_H */
