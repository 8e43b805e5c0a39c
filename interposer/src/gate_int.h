/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the compute gate's files: gate.c (launching and
 * the slow path), gate_fence.c (the fence), gate_budget.c (the launch
 * budget), gate_resolve.c (which cards are gated)
 * and gate_kmod.c (the module's calls).
 */
#ifndef GPUSLICE_GATE_INT_H
#define GPUSLICE_GATE_INT_H

#include <stdint.h>

#include "kmod.h"
#include "shim.h"

/*
 * gate.c: card g is gated (its launch budget starts); its state is reset
 * in a forked child.
 */
void gs_gate_track(struct gs_gate_card *g);

#include <time.h>

static inline uint64_t gs_gate_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * The fast check. OWNER_ALL does not pass it: on a card whose vGPU was
 * gated the page says so only once the card was emptied (OWNER_NONE) and
 * configured anew, this process's vGPU gone, and ACQUIRE is the one to
 * say what then holds (-ENODEV for a vGPU removed).
 */
static inline bool gs_gate_may_run(const struct gs_gate_card *g, int32_t owner,
		    uint64_t end, uint64_t now)
{
	return owner == __atomic_load_n(&g->id, __ATOMIC_RELAXED) && now < end;
}

/*
 * gate.c: the card's slice (owner, start, end; start 0 without a page);
 * false when torn too often.
 */
bool gs_gate_read_slice(const struct gs_gate_card *g, int32_t *owner,
			uint64_t *start, uint64_t *end);
/* Whether (start, end) is the slice of the latest launch. */
bool gs_gate_same_slice(const struct gs_gate_card *g, uint64_t start,
			uint64_t end);
/*
 * A slice of ours not the latest launch's: held (its end waits for our
 * fence), and true; the lock held.
 */
bool gs_gate_hold_new_locked(struct gs_gate_card *g, uint64_t start,
			     uint64_t end);
/* Whether the slice is ours now (file mode: advanced first); locked. */
bool gs_gate_slice_ours_locked(struct gs_gate_card *g, int32_t *owner,
			       uint64_t *start, uint64_t *end);

/* gate_fencer.c: fence, report and release the slice's work; locked. */
void gs_gate_fence_and_release_locked(struct gs_gate_card *g);
/* Starts the card's fencer thread, once per process; locked. */
void gs_gate_start_fencer_locked(struct gs_card *c);

/* The launch budget (gate_budget.c): a process's first slices admit
 * GS_BUDGET_START launches, doubling; past GS_BUDGET_MAX it is lifted. */
#define GS_BUDGET_MAX 1024U
#define GS_BUDGET_START 4U
/* The budget after a fence saw n launches run spill ns past the slice. */
void gs_budget_update(struct gs_gate_card *g, uint32_t n, uint64_t spill);
/*
 * Over the budget in a slice of ours ending at end, the card's lock held
 * (dropped while it probes): true when the warm-up's probe found the
 * slice's work run and the budget grew, so the launch goes on in it.
 */
bool gs_budget_warm_locked(struct gs_gate_card *g, uint64_t end);
/*
 * One launch more in the slice; false when it is over the budget. A plain
 * load and store, not a locked add: threads launching at the same moment
 * may count one launch for two, which the budget, an estimate, tolerates,
 * and the fast path stays free of bus locks.
 */
static inline bool gs_within_budget(struct gs_gate_card *g)
{
	uint32_t n = __atomic_load_n(&g->nlaunch, __ATOMIC_RELAXED) + 1;
	uint32_t b = __atomic_load_n(&g->budget, __ATOMIC_RELAXED);

	__atomic_store_n(&g->nlaunch, n, __ATOMIC_RELAXED);
	return !b || n <= b;
}

static inline bool gs_over_budget(const struct gs_gate_card *g)
{
	uint32_t b = __atomic_load_n(&g->budget, __ATOMIC_RELAXED);

	return b && __atomic_load_n(&g->nlaunch, __ATOMIC_RELAXED) > b;
}

/* gate_fence.c: the streams launched in, and the fence over them. */
void gs_fence_note(struct gs_gate_card *g, CUcontext ctx, CUstream s);
/* Takes the set a fence waits for; the card's lock held. */
struct gs_fence_set *gs_fence_take_locked(struct gs_gate_card *g);
/*
 * Waits for set's streams, at most until deadline; no lock held. Whether
 * they all passed.
 */
bool gs_fence_wait(struct gs_fence_set *set, uint64_t deadline);
/*
 * Waits, at most until deadline, for what the streams noted so far have
 * queued, leaving the set to the slice's fence; the card's lock held,
 * dropped meanwhile (fencing, as for a fence). Whether it all ran.
 */
bool gs_fence_probe_locked(struct gs_gate_card *g, uint64_t deadline);
uint64_t gs_fence_deadline(uint64_t slice_end, uint64_t now);
void gs_fence_done_locked(struct gs_gate_card *g);
void gs_fence_before_capture(struct gs_gate_card *g, CUcontext ctx,
			     CUstream s, bool blocking);
void gs_fence_forget(struct gs_gate_card *g, CUcontext ctx, CUstream s);
void gs_fence_after_fork_child(struct gs_gate_card *g);

/* gate_resolve.c */
int gs_gate_resolve(void);
void gs_gate_resolve_card(struct gs_card *c);

/* gate_kmod.c */
int gs_gate_kmod_fd(const struct gs_gate_card *g);
int gs_gate_kmod_acquire(struct gs_gate_card *g, uint32_t flags,
			 struct gpuslice_acquire *a);
void gs_gate_kmod_hold(struct gs_gate_card *g);
void gs_gate_kmod_wait_slice(struct gs_gate_card *g, uint64_t end);
/* RELEASE with RELEASE_IDLE: our work drained, busy_ns of it. */
void gs_gate_kmod_release(struct gs_gate_card *g, uint64_t busy_ns);
/* Reports busy_ns, the hold going on; false: not reported (kept). */
bool gs_gate_kmod_report(struct gs_gate_card *g, uint64_t busy_ns);

#endif /* GPUSLICE_GATE_INT_H */
