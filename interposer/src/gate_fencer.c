// SPDX-License-Identifier: Apache-2.0
/*
 * The compute gate's fencer (gate.c): the thread that, at a slice's end,
 * fences what the process queued in it and releases the card, and the
 * fence-and-release the slow path shares with it.
 */
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>

#include "gate_int.h"
#include "gate_span.h"
#include "sched_file.h"

/* A fence that returned sooner found nothing of ours still running. */
#define GS_FENCE_WAITED_NS 100000ULL

/*
 * The card goes on to our next slice, beginning at start, with no
 * release between (a lone tenant under a work-conserving policy may never
 * release): the busy time so far is reported now, or it would show in the
 * vGPU's statistics (xgpu_core_percentage_used) only at a release that
 * may not come. The work still running counts from start on.
 */
static void report_kept_locked(struct gs_gate_card *g, uint64_t start)
{
	uint64_t busy = g->busy_ns;
	uint64_t end = __atomic_load_n(&g->seen_end, __ATOMIC_RELAXED);

	if (g->first_ns && end > g->first_ns)
		busy += end - g->first_ns;
	if (!busy)
		return;
	if (g->sf)
		gs_sf_report(g->sf, busy);
	else if (!gs_gate_kmod_report(g, busy))
		return;
	g->busy_ns = 0;
	if (g->first_ns && g->first_ns < start)
		g->first_ns = start;
}

/*
 * The fencer found the card ours with work queued: a slice of ours it did
 * not see begin (we are the next pick) is held, so that its end waits for
 * our fence as if the application had launched in it; the lock held.
 */
static void keep_slice_locked(struct gs_gate_card *g, uint64_t start,
			      uint64_t end)
{
	if (gs_gate_hold_new_locked(g, start, end)) {
		__atomic_store_n(&g->nlaunch, 0, __ATOMIC_RELAXED);
		report_kept_locked(g, start);
	}
	g->seen_start = start;
	__atomic_store_n(&g->seen_end, end, __ATOMIC_RELEASE);
}

/*
 * The slice is over: fence the queued work, report it and declare the
 * queue empty. The card's lock held, dropped while the fence waits (a
 * thread that comes to the slow path meanwhile waits for the fence's
 * end, wait_fence_locked) and held again on return.
 */
void gs_gate_fence_and_release_locked(struct gs_gate_card *g)
{
	uint64_t t0 = gs_gate_now(), t1, busy = g->busy_ns, first = g->first_ns;
	uint64_t seen = __atomic_load_n(&g->seen_end, __ATOMIC_RELAXED);
	uint32_t n = __atomic_exchange_n(&g->nlaunch, 0, __ATOMIC_RELAXED);
	struct gs_fence_set *set = gs_fence_take_locked(g);
	bool waited;

	g->busy_ns = 0;
	g->first_ns = 0;
	g->active = false;
	g->seen_start = 0;
	__atomic_store_n(&g->seen_end, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&g->lock);
	gs_fence_wait(set, gs_fence_deadline(seen, t0));
	t1 = gs_gate_now();
	pthread_mutex_lock(&g->lock);
	waited = t1 - t0 >= GS_FENCE_WAITED_NS;
	busy += gs_gate_span(first, seen, waited ? t1 : t0, waited);
	gs_budget_update(g, n, waited && t1 > seen ? t1 - seen : 0);
	/* The card waits for this (the drain) before passing on. */
	if (g->sf)
		gs_sf_release(g->sf, busy);
	else
		gs_gate_kmod_release(g, busy);
	gs_fence_done_locked(g);
}

/*
 * The fencer. A thread per gated card that, once the process launched in
 * a slice, sleeps until the slice ends or is cut short by a high-priority
 * neighbour (no module: the page's sequence changes, a futex; module:
 * WAIT), then fences and releases, so that the card, which waits for our
 * drain, passes on as soon as our work has run, whether the application
 * launches again or not. The slow path still fences first when it gets
 * there first. A wake-up is not the slice's end: the page is read again,
 * and the thread sleeps on while the card is ours (an early drain moved
 * the end earlier; we are the next pick).
 */
static void *fencer_main(void *arg)
{
	struct gs_gate_card *g = arg;
	uint64_t start, end;
	int32_t owner;
	uint32_t seq;

	/*
	 * The card waits for this thread's release at every slice's end:
	 * the default 50 us of timer slack would be 50 us of idle GPU.
	 */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	pthread_mutex_lock(&g->lock);
	for (;;) {
		while (!g->active)
			pthread_cond_wait(&g->fence_cv, &g->lock);
		/*
		 * A launch's warm-up probe drops the lock while it waits,
		 * the slice still active: not a fence of ours to overlap.
		 */
		if (g->fencing) {
			pthread_cond_wait(&g->fenced, &g->lock);
			continue;
		}
		seq = g->sf ? __atomic_load_n(&g->page->seq, __ATOMIC_ACQUIRE) :
			      0;
		if (!gs_gate_slice_ours_locked(g, &owner, &start, &end)) {
			gs_gate_fence_and_release_locked(g);
			continue;
		}
		/*
		 * Ours: the same slice (its end may have moved earlier: the
		 * sleep below wakes at the new end) or our next one.
		 */
		keep_slice_locked(g, start, end);
		pthread_mutex_unlock(&g->lock);
		if (g->sf)
			gs_sf_page_wait(g->page, seq & ~1u, end);
		else
			gs_gate_kmod_wait_slice(g, end);
		pthread_mutex_lock(&g->lock);
	}
	return NULL;
}

/* Starts the card's fencer, its signals blocked; the card's lock held. */
void gs_gate_start_fencer_locked(struct gs_card *c)
{
	struct gs_gate_card *g = &c->gate;
	sigset_t all, old;
	pthread_t t;
	int err;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, NULL, fencer_main, g);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	g->fencer = true;	/* tried: once per process */
	if (err) {
		gs_warn("card %d: no fencer thread (%s): slices end when this process launches again",
			c->index, strerror(err));
		/* Module: nobody would release at the slice's end; do not hold. */
		g->no_hold = true;
		return;
	}
	pthread_detach(t);
}
