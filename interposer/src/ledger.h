/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The memory ledger: one per card per vGPU, shared by every process of the
 * container. The shim charges each device allocation before the driver is
 * asked and uncharges it when it is freed; a charge that would take the
 * vGPU past its cap is refused, so the ledger is never over the cap.
 *
 * Two backends implement it: the kernel module's ledger (ioctl on
 * /dev/gpuslice, ledger_kmod.c) and the shared ledger file of the
 * no-module mode (ledger_file.c).
 */
#ifndef GPUSLICE_LEDGER_H
#define GPUSLICE_LEDGER_H

#include <stdint.h>

struct gs_ledger;

struct gs_ledger_ops {
	const char *name;
	/* 0, -ENOMEM when the charge would pass the cap, or another -errno. */
	int (*charge)(struct gs_ledger *l, uint64_t bytes);
	void (*uncharge)(struct gs_ledger *l, uint64_t bytes);
	/*
	 * What the vGPU uses (all processes' charges, and the bytes the
	 * agent found the driver holds beyond them) and its cap.
	 */
	int (*usage)(struct gs_ledger *l, uint64_t *used, uint64_t *cap);
	/* Called in the child after fork(): it owns none of the parent's bytes. */
	void (*after_fork_child)(struct gs_ledger *l);
	void (*close)(struct gs_ledger *l);
};

struct gs_ledger {
	const struct gs_ledger_ops *ops;
};

static inline int gs_ledger_charge(struct gs_ledger *l, uint64_t bytes)
{
	return l->ops->charge(l, bytes);
}

static inline void gs_ledger_uncharge(struct gs_ledger *l, uint64_t bytes)
{
	l->ops->uncharge(l, bytes);
}

static inline int gs_ledger_usage(struct gs_ledger *l, uint64_t *used,
				  uint64_t *cap)
{
	return l->ops->usage(l, used, cap);
}

/* Open flags of the file ledger. */
#define GS_LEDGER_OBSERVE 0x1 /* inspect only: takes no process slot */

/*
 * Opens (creating it if needed) the shared ledger file at path. cap_bytes
 * is recorded when the file is created; an existing file keeps its cap.
 * Returns 0 or -errno.
 */
int gs_file_ledger_open(const char *path, uint64_t cap_bytes, unsigned flags,
			struct gs_ledger **out);

/*
 * Attaches to the vGPU of the caller's cgroup on card through the kernel
 * module's device; *cap is the kernel's cap for it. device must outlive
 * the ledger. Returns 0 or -errno (-ENOENT: the cgroup has no vGPU there).
 */
int gs_kmod_ledger_open(const char *device, int card, uint64_t *cap,
			struct gs_ledger **out);

/* One process's share of a file ledger, for inspection. */
struct gs_ledger_proc {
	int32_t pid;
	uint64_t bytes;
};

/*
 * Reclaims the bytes of processes that died without uncharging (the
 * survivors call it on their own at least every 250 ms and before refusing
 * a charge). Returns the number of processes reclaimed, or -errno.
 */
int gs_file_ledger_reap(struct gs_ledger *l);

/*
 * Fills procs (up to max entries) with the live processes holding a slot.
 * Returns the number of such processes, or -errno.
 */
int gs_file_ledger_procs(struct gs_ledger *l, struct gs_ledger_proc *procs,
			 int max);

#endif /* GPUSLICE_LEDGER_H */
