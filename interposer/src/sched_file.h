/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The schedule file of the no-module mode (sched_file.c): the scheduler
 * core (kmod/core) run over a file per card shared by every container on
 * the card, for the compute gate (gate.c). No timer: whoever arrives after
 * a slice's end advances the schedule.
 */
#ifndef GPUSLICE_SCHED_FILE_H
#define GPUSLICE_SCHED_FILE_H

#include <stddef.h>
#include <stdint.h>

struct gpuslice_sched_page;
struct gs_sf;

/* What the environment asks for. */
struct gs_sf_want {
	uint32_t policy;	/* GPU_POLICY: a new file's */
	uint32_t max_inst;	/* GPUSLICE_MAX_INST: a new file's */
	uint64_t slice_ns;	/* GPUSLICE_SLICE_MS: a new file's */
	uint64_t reclaim_ns;	/* GPUSLICE_RECLAIM_MS: a new file's (0: 100 ms) */
	uint32_t quota;		/* GPU_CONTAINER_QUOTA_PERCENT: a new vGPU's */
	uint32_t high;		/* GPU_CONTAINER_PRIORITY: a new vGPU's */
	const char *key;	/* GPUSLICE_VGPU: the container */
};

/* What the file says. */
struct gs_sf_info {
	uint32_t policy, max_inst;
	uint64_t slice_ns;
	uint64_t reclaim_ns;
	uint32_t quota, high;	/* of the vGPU (an existing one's win) */
	int32_t id;		/* the vGPU's core id */
	int differs;		/* the file's card settings are not want's */
};

/*
 * Opens (creating it with want's settings) the schedule file at path and,
 * when the file's policy gates a vGPU of want->quota (policy 1-6, and a
 * quota other than 0 or policy 5), registers the process: its container's
 * vGPU (added by its first process) and a slot of its own. Returns 1 and
 * *out when gated, 0 when not (nothing kept), or -errno (msg says what).
 */
int gs_sf_open(const char *path, const struct gs_sf_want *want,
	       struct gs_sf **out, struct gs_sf_info *info, char *msg,
	       size_t msglen);

/* The schedule page in the file, read under its sequence count. */
const struct gpuslice_sched_page *gs_sf_page(const struct gs_sf *sf);

/*
 * Blocks until the process's vGPU owns the card (advancing the schedule
 * when it is due, sleeping until the slice's end otherwise). On success
 * *id is the vGPU's core id (the page's owner for it), *start and
 * *end the slice's, and the process is marked pending until gs_sf_release. -errno on
 * failure (the file broken, the vGPU not registrable).
 */
int gs_sf_acquire(struct gs_sf *sf, int32_t *id, uint64_t *start,
		  uint64_t *end);

/*
 * Advances the schedule to now and publishes it: at its slice's end the
 * fencer hands the card on then (there is no timer), which wakes the next
 * owner, and learns whether its vGPU keeps the card (its next slice).
 */
void gs_sf_tick(struct gs_sf *sf);

/*
 * The process launches in a slice of its vGPU that it did not acquire (a
 * neighbour's acquire or its own release began it): it holds the card in
 * it, as after gs_sf_acquire, so that the slice's end waits for its fence.
 */
void gs_sf_hold(struct gs_sf *sf);

/*
 * The queue drained (the fence) at now: not pending nor holding any more;
 * busy_ns is the slice's busy time, added to the vGPU's. When that ends
 * the drain of the vGPU's slice the card passes on at once.
 */
void gs_sf_release(struct gs_sf *sf, uint64_t busy_ns);
/* Adds busy_ns to the vGPU's busy time; its hold goes on. */
void gs_sf_report(struct gs_sf *sf, uint64_t busy_ns);

/*
 * Sleeps until the schedule page changes from seq or until deadline
 * (CLOCK_MONOTONIC ns), whichever comes first: every change to the page
 * wakes its sleepers (a futex on the shared page's sequence count).
 */
void gs_sf_page_wait(const struct gpuslice_sched_page *p, uint32_t seq,
		     uint64_t deadline);

/*
 * The core's drain bound (GS_DRAIN_MAX_NS of kmod/core): how long past a
 * slice's end the card waits for its holder, in both modes; the gate's
 * fence waits no longer.
 */
uint64_t gs_drain_bound_ns(void);

/* In a forked child: the parent's slot is not the child's. */
void gs_sf_after_fork_child(struct gs_sf *sf);

#endif /* GPUSLICE_SCHED_FILE_H */
