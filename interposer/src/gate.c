// SPDX-License-Identifier: Apache-2.0
/*
 * The compute gate, in module mode: kernel launches on a card whose vGPU
 * is COMPUTE under a policy other than 0 (native) run only in the vGPU's
 * time slices, as the kernel module schedules them (kmod/README.md).
 *
 * Deciding. At the process's first launch, every card of the container
 * the process sees is attached (the memory ledger's file, ledger_kmod.c)
 * and ATTACH's answer decides: a compute vGPU under policy 1-6 is gated;
 * a memory vGPU or policy 0 is not; a card without an attachable vGPU has
 * its launches refused, as its allocations are. Without the module (the
 * file ledger's mode) a card with a GPU_POLICY other than 0 is gated by
 * the card's schedule file instead (sched_file.c, slow_path_file below).
 * When no card is gated gs_gate_mode turns OFF and a launch costs one
 * predictable branch more than the bare wrapper.
 *
 * The fast path: no system call. The card's schedule page, read under its
 * sequence count, names the owner and the slice's end; when the owner is
 * this process's vGPU and now (CLOCK_MONOTONIC, the vDSO) is before the
 * end, the launch goes on. (OWNER_ALL, which an ungated card's page shows,
 * appears on this card's only once it was emptied and configured anew,
 * without this process's vGPU: the slow path.) The first launch of each slice
 * takes the card's lock once, to note when the slice's work began.
 *
 * The slow path, one thread of the process at a time (the card's lock):
 *  1. the fence (gate_fence.c): events recorded on every stream the
 *     process launched in during the slice, waited for with no lock held
 *     and at most until the drain's bound, so that it says when what it
 *     queued in its slice has run and, as long as it waits, queues
 *     nothing more. The card is handed on at the slice's end all the same
 *     (the early handover, kmod/core: the next owner's kernels queue
 *     behind our tail; after it, where our vGPU's tails have been long:
 *     a closed drain) and we are its drainer until the release (the
 *     drain: ACQUIRE_HOLD in module mode, the slot's hold in the schedule
 *     file), whose time past the end is the vGPU's debt and which moves
 *     the next owner's end earlier; a fencer thread fences at the slice's
 *     end whether the application launches again or not. A slice is
 *     known by its start: an end moved earlier is the same slice;
 *  2. RELEASE with RELEASE_IDLE and the busy time: from the first launch
 *     of each slice to the slice's end, and for the last one to the
 *     fence's end when the fence had work to wait for. A span, not engine
 *     time: gaps between kernels count;
 *  3. ACQUIRE, blocking until the vGPU owns the card (EINTR: again). Any
 *     other error (ENODEV: the vGPU was removed) fails the launch with
 *     CUDA_ERROR_NOT_PERMITTED and one line on stderr: a gated launch never
 *     runs ungated.
 *
 * A launch is gated on the card of its stream's context (stream.c), and
 * one a stream capture records is not gated at all (capture.c): it runs
 * when its graph is launched, and cuGraphLaunch is gated like a kernel.
 *
 * Multi-threaded launches share the per-card state: the fast path only
 * reads it (counts launches for the budget, and compares its thread's note
 * of the stream it launches on); what changes, changes under the card's
 * lock, taken once per slice and on the slow path.
 *
 * This file launches and takes the slow path; gate_fencer.c runs the
 * fencer thread and the fence-and-release, gate_fence.c fences,
 * gate_budget.c keeps the launch budget, gate_resolve.c decides which
 * cards are gated, gate_kmod.c makes the module's calls.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gate_int.h"
#include "sched_file.h"

/* Refusals of one card logged at most once a second. */
#define GS_REFUSAL_LOG_NS 1000000000ULL
/* The gated cards, for the fork handler. */
static struct gs_gate_card *gated[GS_MAX_CARDS];
static int ngated;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* The child of a fork has not launched anything, nor acquired. */
static void gate_after_fork_child(void)
{
	for (int i = 0; i < ngated; i++) {
		struct gs_gate_card *g = gated[i];

		pthread_mutex_init(&g->lock, NULL);
		pthread_cond_init(&g->fence_cv, NULL);
		g->seen_end = 0;
		g->seen_start = 0;
		g->budget_cut = false;
		g->acq_end = 0;
		g->first_ns = 0;
		g->busy_ns = 0;
		g->active = false;
		gs_fence_after_fork_child(g);
		g->fencer = false;	/* threads do not survive a fork */
		g->nlaunch = 0;
		g->budget = GS_BUDGET_START;
		if (g->sf)
			gs_sf_after_fork_child(g->sf);
	}
}

static void register_fork_handler(void)
{
	pthread_atfork(NULL, NULL, gate_after_fork_child);
}

void gs_gate_track(struct gs_gate_card *g)
{
	static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

	pthread_once(&fork_once, register_fork_handler);
	g->budget = GS_BUDGET_START;
	pthread_mutex_init(&g->fence_lock, NULL);
	pthread_cond_init(&g->fenced, NULL);
	if (ngated < GS_MAX_CARDS) {
		g->slot = ngated;
		gated[ngated++] = g;
	}
}

static CUresult refuse(struct gs_card *c, const char *what, const char *why)
{
	struct gs_gate_card *g = &c->gate;
	uint64_t now = gs_gate_now();
	uint64_t prev = __atomic_load_n(&g->last_log, __ATOMIC_RELAXED);

	if ((!prev || now - prev >= GS_REFUSAL_LOG_NS) &&
	    __atomic_compare_exchange_n(&g->last_log, &prev, now, false,
					__ATOMIC_RELAXED, __ATOMIC_RELAXED))
		gs_warn("%s refused on card %d: %s", what, c->index, why);
	return CUDA_ERROR_NOT_PERMITTED;
}

/*
 * A consistent (owner, start, end) of the card's slice; false when torn
 * too often. start is 0 where there is no page.
 */
bool gs_gate_read_slice(const struct gs_gate_card *g, int32_t *owner,
			uint64_t *start, uint64_t *end)
{
	const struct gpuslice_sched_page *p = g->page;

	if (__builtin_expect(!p, 0)) {
		/* No page: the slice ACQUIRE answered is the one we know of. */
		*end = __atomic_load_n(&g->acq_end, __ATOMIC_ACQUIRE);
		*owner = *end ? g->id : GPUSLICE_OWNER_NONE;
		*start = 0;
		return true;
	}
	for (int i = 0; i < 1000; i++) {
		uint32_t seq = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);

		if (seq & 1) {
			cpu_relax();
			continue;
		}
		*owner = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
		*start = __atomic_load_n(&p->slice_start_ns, __ATOMIC_RELAXED);
		*end = __atomic_load_n(&p->slice_end_ns, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == seq)
			return true;
	}
	return false;
}

static bool read_slice(const struct gs_gate_card *g, int32_t *owner,
		       uint64_t *end)
{
	uint64_t start;

	return gs_gate_read_slice(g, owner, &start, end);
}

/*
 * Whether the slice (start, end) is the one of the latest launch: by its
 * start where the page has one, since an early drain moves the end of a
 * slice earlier (kmod/core: the handover), and that is no new slice.
 */
bool gs_gate_same_slice(const struct gs_gate_card *g, uint64_t start,
		       uint64_t end)
{
	uint64_t seen = __atomic_load_n(&g->seen_end, __ATOMIC_RELAXED);

	if (!seen)
		return false;
	return start && g->seen_start ? start == g->seen_start : end == seen;
}

/*
 * A launch in the slice ending at end, at now, on stream s of context ctx;
 * the card's lock held. Closes the span of an earlier slice of ours that
 * ended without a fence (the process went on in its next slice without
 * waiting in between). The first launch since a fence wakes the fencer.
 */
static void launch_in_slice_locked(struct gs_gate_card *g, uint64_t start,
				   uint64_t end, uint64_t now, CUcontext ctx,
				   CUstream s)
{
	if (!gs_gate_same_slice(g, start, end)) {
		if (g->first_ns) {
			uint64_t stop = now < g->seen_end ? now : g->seen_end;

			if (stop > g->first_ns)
				g->busy_ns += stop - g->first_ns;
			g->first_ns = 0;
		}
		/* A new slice, no fence between: its own budget. */
		__atomic_store_n(&g->nlaunch, 0, __ATOMIC_RELAXED);
	}
	g->seen_start = start;
	__atomic_store_n(&g->seen_end, end, __ATOMIC_RELEASE);
	if (!g->first_ns)
		g->first_ns = now;
	__atomic_add_fetch(&g->nlaunch, 1, __ATOMIC_RELAXED);
	gs_fence_note(g, ctx, s);
	if (!g->active && g->fencer)
		pthread_cond_signal(&g->fence_cv);
	g->active = true;
}

/*
 * Over its budget the process launches nothing more in this slice: it
 * sleeps, the card's lock held, until the slice ends or is cut (the page's
 * futex without the module, WAIT with it); the slow path then fences,
 * releases and acquires the next one as usual. This slice is the latest
 * launch's (known by its start: an end moved earlier is the same slice):
 * when the card goes straight on to our next slice (we are the next pick,
 * no drain between, as for a lone tenant) this one is over too. Waiting
 * on while the card is merely ours would never end for a lone tenant, and
 * with the lock held the fencer could never release.
 */
static void wait_out_slice_locked(struct gs_gate_card *g)
{
	uint64_t start, end;
	int32_t owner;
	uint32_t seq;

	for (;;) {
		seq = g->sf ? __atomic_load_n(&g->page->seq, __ATOMIC_ACQUIRE) :
			      0;
		if (!gs_gate_read_slice(g, &owner, &start, &end) ||
		    !gs_gate_may_run(g, owner, end, gs_gate_now()) ||
		    !gs_gate_same_slice(g, start, end))
			return;
		if (g->sf)
			gs_sf_page_wait(g->page, seq & ~1u, end);
		else
			gs_gate_kmod_wait_slice(g, end);
	}
}

/*
 * A launch in a slice of ours we did not acquire (the page says it is
 * ours); the card's lock held. No module: we hold the card in it as if
 * we had acquired it, so that its end waits for our fence, and the
 * fencer must run to release it: a process whose first launch finds its
 * slice (its vGPU picked as it joined) and launches no more would hold
 * the card until it launched again, its busy time unreported.
 */
static void launch_in_found_slice_locked(struct gs_card *c, uint64_t start,
					 uint64_t end, uint64_t now,
					 CUcontext ctx, CUstream s)
{
	struct gs_gate_card *g = &c->gate;

	if (!g->fencer)
		gs_gate_start_fencer_locked(c);
	gs_gate_hold_new_locked(g, start, end);
	launch_in_slice_locked(g, start, end, now, ctx, s);
}

bool gs_gate_hold_new_locked(struct gs_gate_card *g, uint64_t start,
			     uint64_t end)
{
	if (gs_gate_same_slice(g, start, end))
		return false;
	if (g->sf)
		gs_sf_hold(g->sf);
	else
		gs_gate_kmod_hold(g);
	return true;
}

/*
 * Whether the card's slice is ours now, and it in *start, *end; the
 * card's lock held. In file mode, where no timer advances the schedule,
 * a slice of ours that is over is advanced first (gs_sf_tick): that hands
 * the card on at the slice's end, waking the next owner at once rather
 * than after our drain, or gives us our next slice straight away when we
 * are the next pick, without a drain.
 */
bool gs_gate_slice_ours_locked(struct gs_gate_card *g, int32_t *owner,
			      uint64_t *start, uint64_t *end)
{
	if (gs_gate_read_slice(g, owner, start, end) &&
	    gs_gate_may_run(g, *owner, *end, gs_gate_now()))
		return true;
	if (!g->sf || *owner != __atomic_load_n(&g->id, __ATOMIC_RELAXED))
		return false;
	gs_sf_tick(g->sf);
	return gs_gate_read_slice(g, owner, start, end) &&
	       gs_gate_may_run(g, *owner, *end, gs_gate_now());
}

static CUresult slow_path(struct gs_card *c, const char *what, CUcontext ctx,
			  CUstream s);

/*
 * The first launch of a slice this process did not have to acquire, or
 * the first since its end moved earlier. The page is read again under the
 * lock: the one read outside may be stale by now.
 */
static CUresult slice_begins(struct gs_card *c, const char *what,
			     CUcontext ctx, CUstream s)
{
	struct gs_gate_card *g = &c->gate;
	uint64_t start, end, now;
	int32_t owner;

	pthread_mutex_lock(&g->lock);
	if (!g->fencing && gs_gate_read_slice(g, &owner, &start, &end) &&
	    gs_gate_may_run(g, owner, end, now = gs_gate_now())) {
		launch_in_found_slice_locked(c, start, end, now, ctx, s);
		pthread_mutex_unlock(&g->lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g->lock);
	return slow_path(c, what, ctx, s);
}

/* A fence in flight ends (at its bound at the latest); the lock held. */
static void wait_fence_locked(struct gs_gate_card *g)
{
	while (g->fencing)
		pthread_cond_wait(&g->fenced, &g->lock);
}

void gs_gate_forget_ctx(CUcontext ctx)
{
	for (int i = 0; i < ngated; i++) {
		struct gs_gate_card *g = gated[i];

		/* The fence may have ctx current: wait for it to end. */
		pthread_mutex_lock(&g->lock);
		wait_fence_locked(g);
		gs_fence_forget(g, ctx, NULL);
		pthread_mutex_unlock(&g->lock);
	}
}

void gs_gate_forget_stream(CUstream s)
{
	if (gs_stream_special(s))
		return;
	for (int i = 0; i < ngated; i++)
		gs_fence_forget(gated[i], NULL, s);
}

void gs_gate_before_capture(CUstream s, bool ptsz)
{
	__typeof__(&cuStreamGetCtx) get_ctx =
		ptsz ? gs_real.cuStreamGetCtx_ptsz : gs_real.cuStreamGetCtx;
	unsigned int flags = 0;
	CUcontext ctx = NULL;

	if (__atomic_load_n(&gs_gate_mode, __ATOMIC_ACQUIRE) != GS_GATE_ON ||
	    !get_ctx || get_ctx(s, &ctx) != CUDA_SUCCESS || !ctx)
		return;
	/* Per-thread streams are blocking; explicit ones may not be. */
	if (!gs_stream_special(s) && gs_real.cuStreamGetFlags)
		gs_real.cuStreamGetFlags(s, &flags);
	for (int i = 0; i < ngated; i++)
		gs_fence_before_capture(gated[i], ctx, s,
					!(flags & CU_STREAM_NON_BLOCKING));
}

/*
 * Waits for the vGPU's next slice, from the schedule file or the module:
 * 0 and its end in *end, or an errno and *why for the refusal. EINTR is
 * retried: a signal does not refuse a launch.
 */
static int acquire_slice(struct gs_gate_card *g, uint64_t *start,
			 uint64_t *end, const char **why)
{
	struct gpuslice_acquire a;
	uint64_t pstart, pend;
	int32_t id, owner;
	int err;

	*start = 0;
	if (g->sf) {
		err = -gs_sf_acquire(g->sf, &id, start, end);
		if (!err)	/* a recovered file may have renumbered them */
			__atomic_store_n(&g->id, id, __ATOMIC_RELAXED);
		*why = err ? strerror(err) : NULL;
		return err;
	}
	while ((err = gs_gate_kmod_acquire(g, 0, &a)) == EINTR)
		;
	*end = a.slice_end_ns;
	/* The page says when the slice began, if it still shows it. */
	if (!err && g->page && gs_gate_read_slice(g, &owner, &pstart, &pend) &&
	    owner == g->id && pend <= a.slice_end_ns)
		*start = pstart;
	*why = err == ENODEV ? "its vGPU was removed from " GPUSLICE_DEVICE :
			       err ? strerror(err) : NULL;
	return err;
}

/*
 * The slow path, both modes: fence and release what an earlier slice left
 * (the fencer usually did), then acquire the next slice. What our work
 * ran past a slice's end is the core's business (the drain and the
 * vGPU's debt, kmod/core), not ours.
 */
static CUresult slow_path(struct gs_card *c, const char *what, CUcontext ctx,
			  CUstream s)
{
	struct gs_gate_card *g = &c->gate;
	uint64_t start, end;
	const char *why;
	int32_t owner;

	pthread_mutex_lock(&g->lock);
	wait_fence_locked(g);
	/*
	 * Another thread may have acquired the slice meanwhile, or the card
	 * came back to us while the fencer held the lock: held either way.
	 * Over the budget: not in this slice, unless the warm-up's probe
	 * found the slice's work run.
	 */
	if (gs_over_budget(g) &&
	    !(gs_gate_slice_ours_locked(g, &owner, &start, &end) &&
	      gs_budget_warm_locked(g, end))) {
		wait_out_slice_locked(g);
	} else if (gs_gate_slice_ours_locked(g, &owner, &start, &end)) {
		launch_in_found_slice_locked(c, start, end, gs_gate_now(), ctx,
					     s);
		pthread_mutex_unlock(&g->lock);
		return CUDA_SUCCESS;
	}
	if (g->active)
		gs_gate_fence_and_release_locked(g);
	if (acquire_slice(g, &start, &end, &why)) {
		pthread_mutex_unlock(&g->lock);
		return refuse(c, what, why);
	}
	if (!g->fencer)
		gs_gate_start_fencer_locked(c);
	__atomic_store_n(&g->acq_end, end, __ATOMIC_RELEASE);
	/*
	 * The slice is granted: launch in it however little of it is left,
	 * or a slow process would never launch at all.
	 */
	launch_in_slice_locked(g, start, end, gs_gate_now(), ctx, s);
	pthread_mutex_unlock(&g->lock);
	return CUDA_SUCCESS;
}

CUresult gs_gate_launch(const char *what, CUstream s, bool ptsz)
{
	int mode = __atomic_load_n(&gs_gate_mode, __ATOMIC_ACQUIRE);
	struct gs_gate_card *g;
	struct gs_card *c;
	CUcontext ctx;
	int32_t owner;
	uint64_t end, now;
	int state;

	if (mode == GS_GATE_UNKNOWN)
		mode = gs_gate_resolve();
	if (mode != GS_GATE_ON || gs_captured(s, ptsz))
		return CUDA_SUCCESS;	/* captured: runs at cuGraphLaunch */
	c = gs_launch_card(s, ptsz, &ctx);
	if (!c || c->index < 0)
		return CUDA_SUCCESS;	/* no context, or no vGPU on it */
	g = &c->gate;
	state = __atomic_load_n(&g->state, __ATOMIC_ACQUIRE);
	if (__builtin_expect(state == GS_GATE_CARD_UNRESOLVED, 0)) {
		gs_gate_resolve_card(c);
		state = __atomic_load_n(&g->state, __ATOMIC_ACQUIRE);
	}
	if (state == GS_GATE_CARD_UNGATED)
		return CUDA_SUCCESS;
	if (state != GS_GATE_CARD_GATED)
		return refuse(c, what,
			      gs_use_module() ?
			      "no vGPU of this process's cgroup is attached through " GPUSLICE_DEVICE :
			      "the card's schedule file cannot be used (see above)");
	/* The fast path. */
	if (__builtin_expect(read_slice(g, &owner, &end), 1) &&
	    gs_gate_may_run(g, owner, end, now = gs_gate_now())) {
		if (__builtin_expect(
			    __atomic_load_n(&g->seen_end, __ATOMIC_RELAXED) ==
				    end,
			    1)) {
			gs_fence_note(g, ctx, s);
			if (__builtin_expect(gs_within_budget(g), 1))
				return CUDA_SUCCESS;
		} else {
			return slice_begins(c, what, ctx, s);
		}
	}
	return slow_path(c, what, ctx, s);
}

/*
 * A launch on several devices at once would need the slices of several
 * cards at the same moment, which the module does not hand out: refused
 * while any card is gated rather than run ungated. One device: its gate.
 */
CUresult gs_gate_multi(unsigned int ndev, const char *what, CUstream s)
{
	int mode = __atomic_load_n(&gs_gate_mode, __ATOMIC_ACQUIRE);

	if (mode == GS_GATE_UNKNOWN)
		mode = gs_gate_resolve();
	if (mode != GS_GATE_ON)
		return CUDA_SUCCESS;
	if (ndev <= 1)
		return gs_gate_launch(what, s, false);
	gs_warn("%s across %u devices refused: this container's launches are gated by time slices, one card at a time",
		what, ndev);
	return CUDA_ERROR_NOT_SUPPORTED;
}
