/* SPDX-License-Identifier: (GPL-2.0-only WITH Linux-syscall-note) OR Apache-2.0 */
/*
 * gpuslice.ko user-space ABI: the ioctls of /dev/gpuslice and the layout of
 * the read-only schedule page each card exposes through mmap.
 *
 * Every struct has a fixed size, 64-bit fields on 8-byte boundaries and
 * explicit padding; padding and reserved fields must be zero on input
 * (-EINVAL otherwise) so that they can carry meaning in later versions.
 * GPUSLICE_IOC_VERSION tells which version of this file the module speaks.
 * See kmod/README.md for the semantics of each call.
 */
#ifndef _UAPI_LINUX_GPUSLICE_H
#define _UAPI_LINUX_GPUSLICE_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define GPUSLICE_ABI_VERSION	1
#define GPUSLICE_DEVICE		"/dev/gpuslice"

#define GPUSLICE_MAX_CARDS	32	/* card indices 0..31 */
#define GPUSLICE_MAX_VGPUS	64	/* per card; max_inst bounds it further */

/*
 * Per-vGPU bounds on what its processes can make the kernel hold: files
 * attached to one vGPU (ATTACH past it: -EUSERS, nothing attached), and
 * threads of one vGPU blocked in ACQUIRE or WAIT at once (the one past
 * it: -EUSERS at once, nothing waits). A vGPU's processes use one file
 * per process and card, and a few threads each.
 */
#define GPUSLICE_MAX_VGPU_FILES		1024
#define GPUSLICE_MAX_VGPU_WAITERS	256

/* Card scheduling policies (reference.md section 3). */
#define GPUSLICE_POLICY_NATIVE		0
#define GPUSLICE_POLICY_FIXED		1
#define GPUSLICE_POLICY_AVERAGE		2
#define GPUSLICE_POLICY_PREEMPTIVE	3
#define GPUSLICE_POLICY_WEIGHTED	4
#define GPUSLICE_POLICY_HYBRID		5
#define GPUSLICE_POLICY_WEIGHTED_WEAK	6

/* Isolation mode of a vGPU; a card runs vGPUs of one mode at a time. */
#define GPUSLICE_MODE_NONE	0	/* card: no vGPU yet */
#define GPUSLICE_MODE_MEMORY	1	/* memory cap only, compute shared */
#define GPUSLICE_MODE_COMPUTE	2	/* memory cap and compute quota */

/* Owners in the schedule page and acquire's answer that are not a vGPU. */
#define GPUSLICE_OWNER_NONE	(-1)	/* idle slice: nobody may run */
#define GPUSLICE_OWNER_ALL	(-2)	/* no gating: everybody may run */

struct gpuslice_version {
	__u32 abi_version;	/* out: GPUSLICE_ABI_VERSION */
	__u32 max_cards;	/* out: GPUSLICE_MAX_CARDS */
	__u32 max_vgpus;	/* out: GPUSLICE_MAX_VGPUS */
	__u32 page_size;	/* out: length to mmap per card */
	__u64 reserved[2];	/* out: zero */
};

struct gpuslice_card {
	__u32 card;		/* in: index */
	__u32 policy;		/* GPUSLICE_POLICY_* */
	__u32 max_inst;		/* compute units per period, 1..64 */
	__u32 mode;		/* out: GPUSLICE_MODE_* of the card's vGPUs */
	__u64 slice_ns;		/* one unit, 1 ms..100 ms; 0: default 5 ms */
	__u64 reclaim_ns;	/* idle after, 1 ms..10 s; 0: default 100 ms */
	__u32 nvgpus;		/* out: vGPUs on the card */
	__u32 pad;
};

struct gpuslice_vgpu {
	__u32 card;		/* in */
	__u32 id;		/* out of CREATE; in otherwise */
	__u64 cgroup_id;	/* cgroup v2 id its processes live under */
	__u64 mem_cap;		/* bytes, at least 1 */
	__u32 quota;		/* percent, 0..100, multiple of 5 */
	__u32 priority;		/* 0 low, 1 high */
	__u32 mode;		/* GPUSLICE_MODE_MEMORY or _COMPUTE */
	__u32 pad;
};

/* Statistics of one vGPU (GPUSLICE_IOC_VGPU_STATS); all out but card/id. */
struct gpuslice_vgpu_stats {
	__u32 card;		/* in */
	__u32 id;		/* in */
	struct gpuslice_vgpu spec;
	__u64 mem_used;		/* bytes charged now */
	__u64 busy_ns;		/* GPU busy time reported by its processes */
	__u64 wait_ns;		/* time its processes spent blocked in acquire */
	__u64 slices;		/* slices granted by the scheduler */
	__u64 acquires;		/* acquire calls */
	__u32 nprocs;		/* processes attached */
	__u32 pad;
};

struct gpuslice_attach {
	__u32 card;		/* in */
	__u32 id;		/* out: the caller's vGPU on that card */
	__u64 mem_cap;		/* out */
	__u32 quota;		/* out */
	__u32 priority;		/* out */
	__u32 mode;		/* out */
	__u32 policy;		/* out: the card's */
};

struct gpuslice_charge {
	__u32 card;		/* in */
	__u32 pad;
	__u64 bytes;		/* in (ignored by MEMINFO) */
	__u64 mem_used;		/* out: the vGPU's usage after the call, unseen bytes included */
	__u64 mem_cap;		/* out */
};

#define GPUSLICE_ACQUIRE_NONBLOCK	(1U << 0)	/* -EAGAIN, not sleep */
/*
 * The caller fences its work at the slice's end and then RELEASEs. The
 * next owner runs from the slice's end, its work queued behind the
 * caller's, or, where the vGPU's drains were long (over half a slice),
 * from that RELEASE: the page names no owner meanwhile. Until that
 * RELEASE (at most one slice, or for a long tail one slice plus twice
 * its length, at most 100 ms; 5 ms after a priority cut) the next
 * owner's slice does not start counting, and the time past the end is
 * owed by the vGPU's later slices (a later RELEASE owes the rest, up to
 * 100 ms). Without it the card moves on at the slice's end.
 */
#define GPUSLICE_ACQUIRE_HOLD		(1U << 1)

struct gpuslice_acquire {
	__u32 card;		/* in */
	__u32 flags;		/* in: GPUSLICE_ACQUIRE_* */
	__u64 timeout_ns;	/* in: 0 waits without limit, else -ETIMEDOUT */
	__u64 slice_end_ns;	/* out: CLOCK_MONOTONIC; ~0 when ungated */
	__s32 owner;		/* out: the vGPU id, or GPUSLICE_OWNER_ALL */
	__u32 pad;
};

#define GPUSLICE_RELEASE_IDLE		(1U << 0)	/* no more work queued */
/*
 * Only reports busy_ns; the hold goes on (the caller keeps the card into
 * its next slice, its work still running). Not with RELEASE_IDLE.
 */
#define GPUSLICE_RELEASE_REPORT		(1U << 1)

struct gpuslice_release {
	__u32 card;		/* in */
	__u32 flags;		/* in: GPUSLICE_RELEASE_* */
	__u64 busy_ns;		/* in: GPU time used since the last report */
};

/*
 * Sleeps while the caller's vGPU owns the card, the current slice has not
 * ended and it ends at slice_end_ns (ACQUIRE's answer) or earlier (a drain
 * that ended moves it earlier): returns 0 at its end, or as soon as it was
 * cut short (a high-priority vGPU took the card) or the card moved on. A
 * holder's fencer waits here for the moment to fence. -EUSERS:
 * GPUSLICE_MAX_VGPU_WAITERS threads of the vGPU block already.
 */
struct gpuslice_wait {
	__u32 card;		/* in */
	__u32 flags;		/* in: zero */
	__u64 slice_end_ns;	/* in: CLOCK_MONOTONIC */
};

/*
 * The schedule page of a card: mmap(NULL, page_size, PROT_READ, MAP_SHARED,
 * fd, card * page_size). The module writes it under a sequence count:
 * seq is odd while an update is in progress; readers retry until they see
 * the same even value before and after reading the fields.
 */
struct gpuslice_sched_page {
	__u32 seq;
	__u32 abi_version;
	__s32 owner;		/* vGPU id, GPUSLICE_OWNER_NONE or _ALL */
	__u32 policy;
	__u64 slice_start_ns;	/* CLOCK_MONOTONIC */
	__u64 slice_end_ns;	/* the owner may run while now < slice_end */
	__u64 slice_ns;
	__u32 max_inst;
	__u32 mode;
	__u64 handovers;
};

/*
 * Device memory the driver holds for a vGPU's processes beyond what they
 * charged (contexts larger than the shim's estimate, loaded images, the
 * stack grown at launch, a process without the shim): the agent reconciles
 * the vGPU's charges with the driver's per-process figures every window and
 * sets it (VGPU_SET_UNSEEN, administrators). CHARGE counts it against the
 * cap, and the mem_used CHARGE, UNCHARGE and MEMINFO answer includes it;
 * VGPU_UNSEEN reads it. Added to ABI 1 after its first release: an older
 * module answers -ENOTTY.
 */
struct gpuslice_vgpu_unseen {
	__u32 card;		/* in */
	__u32 id;		/* in */
	__u64 bytes;		/* in (SET): at most 2^63 - 1; out: the value now */
	__u64 mem_used;		/* out: bytes charged now */
	__u64 mem_cap;		/* out */
};

#define GPUSLICE_IOC_MAGIC	0xB6

/*
 * Anyone; VGPU_STATS and VGPU_UNSEEN answer a caller without CAP_SYS_ADMIN
 * only for the vGPU its cgroup (or nearest ancestor) is bound to, and
 * -ENOENT for any other.
 */
#define GPUSLICE_IOC_VERSION	_IOR(GPUSLICE_IOC_MAGIC, 0x00, struct gpuslice_version)
#define GPUSLICE_IOC_CARD_GET	_IOWR(GPUSLICE_IOC_MAGIC, 0x01, struct gpuslice_card)
#define GPUSLICE_IOC_VGPU_STATS	_IOWR(GPUSLICE_IOC_MAGIC, 0x02, struct gpuslice_vgpu_stats)
#define GPUSLICE_IOC_VGPU_UNSEEN _IOWR(GPUSLICE_IOC_MAGIC, 0x03, struct gpuslice_vgpu_unseen)

/* CAP_SYS_ADMIN only (-EPERM). */
#define GPUSLICE_IOC_CARD_SET	_IOW(GPUSLICE_IOC_MAGIC, 0x10, struct gpuslice_card)
#define GPUSLICE_IOC_VGPU_CREATE _IOWR(GPUSLICE_IOC_MAGIC, 0x11, struct gpuslice_vgpu)
#define GPUSLICE_IOC_VGPU_UPDATE _IOW(GPUSLICE_IOC_MAGIC, 0x12, struct gpuslice_vgpu)
#define GPUSLICE_IOC_VGPU_DESTROY _IOW(GPUSLICE_IOC_MAGIC, 0x13, struct gpuslice_vgpu)
#define GPUSLICE_IOC_VGPU_SET_UNSEEN _IOWR(GPUSLICE_IOC_MAGIC, 0x14, struct gpuslice_vgpu_unseen)

/* Clients: the vGPU is the one bound to the caller's cgroup (or an ancestor). */
#define GPUSLICE_IOC_ATTACH	_IOWR(GPUSLICE_IOC_MAGIC, 0x20, struct gpuslice_attach)
#define GPUSLICE_IOC_CHARGE	_IOWR(GPUSLICE_IOC_MAGIC, 0x21, struct gpuslice_charge)
#define GPUSLICE_IOC_UNCHARGE	_IOWR(GPUSLICE_IOC_MAGIC, 0x22, struct gpuslice_charge)
#define GPUSLICE_IOC_MEMINFO	_IOWR(GPUSLICE_IOC_MAGIC, 0x23, struct gpuslice_charge)
#define GPUSLICE_IOC_ACQUIRE	_IOWR(GPUSLICE_IOC_MAGIC, 0x24, struct gpuslice_acquire)
#define GPUSLICE_IOC_RELEASE	_IOW(GPUSLICE_IOC_MAGIC, 0x25, struct gpuslice_release)
#define GPUSLICE_IOC_WAIT	_IOW(GPUSLICE_IOC_MAGIC, 0x26, struct gpuslice_wait)

#endif /* _UAPI_LINUX_GPUSLICE_H */
