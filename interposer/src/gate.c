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
 *  1. the fence: cuCtxSynchronize on each context the process launched
 *     in since the last fence, so that what it queued in its slice has
 *     run before it lets the card go and, as long as it waits, before it
 *     queues anything more. The card waits for the fence (the drain:
 *     ACQUIRE_HOLD in module mode, the slot's hold in the schedule file)
 *     and the overrun is the vGPU's debt (kmod/core), and a fencer thread
 *     fences at the slice's end whether the application launches again
 *     or not;
 *  2. RELEASE with RELEASE_IDLE and the busy time: from the first launch
 *     of each slice to the slice's end, and for the last one to the
 *     fence's end when the fence had work to wait for. A span, not engine
 *     time: gaps between kernels count;
 *  3. ACQUIRE, blocking until the vGPU owns the card (EINTR: again). Any
 *     other error (ENODEV: the vGPU was removed) fails the launch with
 *     CUDA_ERROR_NOT_PERMITTED and one line on stderr: a gated launch never
 *     runs ungated.
 *
 * Multi-threaded launches share the per-card state: the fast path only
 * reads it; what changes, changes under the card's lock, taken once per
 * slice and on the slow path.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>

#include "kmod.h"
#include "sched_file.h"
#include "shim.h"

int gs_gate_mode;

/* A fence that returned sooner found nothing of ours still running. */
#define GS_FENCE_WAITED_NS 100000ULL
/* Refusals of one card logged at most once a second. */
#define GS_REFUSAL_LOG_NS 1000000000ULL
/* A budget this large admits anything: the limit is lifted. */
#define GS_BUDGET_MAX 1024U
/* A process's first slices admit this many launches (doubling). */
#define GS_BUDGET_START 4U

static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;
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

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The child of a fork has not launched anything, nor acquired. */
static void gate_after_fork_child(void)
{
	for (int i = 0; i < ngated; i++) {
		struct gs_gate_card *g = gated[i];

		pthread_mutex_init(&g->lock, NULL);
		pthread_cond_init(&g->fence_cv, NULL);
		g->seen_end = 0;
		g->acq_end = 0;
		g->first_ns = 0;
		g->busy_ns = 0;
		g->active = false;
		g->nctx = 0;
		g->ctx[0] = NULL;
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

/* The card's settings from the environment, NULL when not listed. */
static const struct gs_card_config *card_config(const struct gs_card *c)
{
	const struct gs_config *cfg = gs_config();

	for (int i = 0; i < cfg->ncards; i++)
		if (cfg->cards[i].index == c->index)
			return &cfg->cards[i];
	return NULL;
}

/*
 * No module: the card's schedule file decides (sched_file.c). Only cards
 * with a GPU_POLICY are looked at; the file's card settings win over the
 * environment's. Returns the card's GS_GATE_CARD_* state.
 */
static int resolve_file_card(struct gs_card *c)
{
	const struct gs_config *cfg = gs_config();
	const struct gs_card_config *cc = card_config(c);
	struct gs_gate_card *g = &c->gate;
	struct gs_sf_want want;
	struct gs_sf_info info;
	struct gs_sf *sf;
	char path[512], msg[512] = "";
	int rc;

	if (cfg->compute_invalid) {
		gs_err("card %d: kernel launches are refused: %s", c->index,
		       cfg->compute_err);
		return GS_GATE_CARD_REFUSED;
	}
	if (!cc || cc->policy < 0)
		return GS_GATE_CARD_UNGATED;
	snprintf(path, sizeof(path), "%s/card%d.sched", cfg->sched_dir,
		 c->index);
	want.policy = (uint32_t)cc->policy;
	want.max_inst = cfg->max_inst;
	want.slice_ns = cfg->slice_ns;
	want.quota = cc->quota;
	want.high = cfg->high;
	want.key = cfg->vgpu_key;
	rc = gs_sf_open(path, &want, &sf, &info, msg, sizeof(msg));
	if (rc < 0) {
		gs_err("card %d: kernel launches are refused: %s (GPUSLICE_SCHED_DIR)",
		       c->index, msg);
		return GS_GATE_CARD_REFUSED;
	}
	if (info.differs)
		gs_warn("card %d: the schedule file %s says policy %u, %u units of %llu ms; the environment's policy %u, %u units of %llu ms do not apply",
			c->index, path, info.policy, info.max_inst,
			(unsigned long long)(info.slice_ns / 1000000),
			want.policy, want.max_inst,
			(unsigned long long)(want.slice_ns / 1000000));
	if (rc == 0) {
		gs_info("card %d: kernel launches are not gated (quota %u%%, policy %u)",
			c->index, want.quota, info.policy);
		return GS_GATE_CARD_UNGATED;
	}
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->fence_cv, NULL);
	g->sf = sf;
	g->id = info.id;
	g->page = gs_sf_page(sf);
	g->budget = GS_BUDGET_START;
	if (ngated < GS_MAX_CARDS)
		gated[ngated++] = g;
	gs_info("card %d: kernel launches gated by the schedule file %s (vGPU %s as %d, quota %u%%, policy %u)",
		c->index, path, cfg->vgpu_key, info.id, info.quota,
		info.policy);
	return GS_GATE_CARD_GATED;
}

/* Decides whether card c's launches are gated; resolve_lock held. */
static void resolve_card_locked(struct gs_card *c)
{
	struct gs_gate_card *g = &c->gate;
	const struct gs_kmod_card *kc;
	struct gs_ledger *l;
	int state;

	if (__atomic_load_n(&g->state, __ATOMIC_ACQUIRE) !=
	    GS_GATE_CARD_UNRESOLVED)
		return;
	if (!gs_use_module()) {
		__atomic_store_n(&g->state, resolve_file_card(c),
				 __ATOMIC_RELEASE);
		return;
	}
	l = gs_card_ledger(c);
	kc = gs_kmod_ledger_card(l);
	if (!l) {
		state = GS_GATE_CARD_REFUSED;
		gs_err("card %d: kernel launches are refused: no vGPU is attached through " GPUSLICE_DEVICE " (see above)",
		       c->index);
	} else if (!kc || kc->att.mode != GPUSLICE_MODE_COMPUTE ||
		   kc->att.policy == GPUSLICE_POLICY_NATIVE) {
		state = GS_GATE_CARD_UNGATED;
		if (kc)
			gs_info("card %d: kernel launches are not gated (%s vGPU, policy %u)",
				c->index,
				kc->att.mode == GPUSLICE_MODE_COMPUTE ?
					"compute" : "memory",
				kc->att.policy);
	} else {
		state = GS_GATE_CARD_GATED;
		pthread_mutex_init(&g->lock, NULL);
		pthread_cond_init(&g->fence_cv, NULL);
		g->kc = kc;
		g->id = (int32_t)kc->att.id;
		g->page = kc->page;
		g->budget = GS_BUDGET_START;
		if (ngated < GS_MAX_CARDS)
			gated[ngated++] = g;
		gs_info("card %d: kernel launches gated by the module's schedule (vGPU %d, quota %u%%, policy %u)",
			c->index, g->id, kc->att.quota, kc->att.policy);
		if (!g->page)
			gs_warn("card %d: the schedule page cannot be mapped: every slice is checked with ACQUIRE",
				c->index);
	}
	__atomic_store_n(&g->state, state, __ATOMIC_RELEASE);
}

/* No module: a card with a GPU_POLICY (or a malformed compute setting). */
static bool file_gate_wanted(void)
{
	const struct gs_config *cfg = gs_config();

	if (cfg->compute_invalid)
		return true;
	for (int i = 0; i < cfg->ncards; i++)
		if (cfg->cards[i].policy > 0)
			return true;
	return false;
}

/*
 * Decides for every card the process sees, once the driver can say how
 * many there are (it can once a context exists, which a launch needs).
 */
static int resolve(void)
{
	static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
	int mode, n = 0, on = 0;

	pthread_mutex_lock(&resolve_lock);
	mode = __atomic_load_n(&gs_gate_mode, __ATOMIC_ACQUIRE);
	if (mode != GS_GATE_UNKNOWN)
		goto out;
	if (!gs_enabled() || gs_config()->invalid ||
	    (!gs_use_module() && !file_gate_wanted())) {
		mode = GS_GATE_OFF;
		goto store;
	}
	if (!gs_real.cuDeviceGetCount ||
	    gs_real.cuDeviceGetCount(&n) != CUDA_SUCCESS)
		goto out;	/* no driver yet: nothing can launch; ask again */
	pthread_once(&fork_once, register_fork_handler);
	for (int d = 0; d < n; d++) {
		struct gs_card *c = gs_card_for_device(d);

		if (c->index < 0)
			continue;	/* not the container's: no vGPU */
		resolve_card_locked(c);
		if (c->gate.state != GS_GATE_CARD_UNGATED)
			on = 1;
	}
	mode = on ? GS_GATE_ON : GS_GATE_OFF;
store:
	__atomic_store_n(&gs_gate_mode, mode, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&resolve_lock);
	return mode;
}

static CUresult refuse(struct gs_card *c, const char *what, const char *why)
{
	struct gs_gate_card *g = &c->gate;
	uint64_t now = now_ns();
	uint64_t prev = __atomic_load_n(&g->last_log, __ATOMIC_RELAXED);

	if ((!prev || now - prev >= GS_REFUSAL_LOG_NS) &&
	    __atomic_compare_exchange_n(&g->last_log, &prev, now, false,
					__ATOMIC_RELAXED, __ATOMIC_RELAXED))
		gs_warn("%s refused on card %d: %s", what, c->index, why);
	return CUDA_ERROR_NOT_PERMITTED;
}

/* A consistent (owner, end) of the card's slice; false when torn too often. */
static bool read_slice(const struct gs_gate_card *g, int32_t *owner,
		       uint64_t *end)
{
	const struct gpuslice_sched_page *p = g->page;

	if (__builtin_expect(!p, 0)) {
		/* No page: the slice ACQUIRE answered is the one we know of. */
		*end = __atomic_load_n(&g->acq_end, __ATOMIC_ACQUIRE);
		*owner = *end ? g->id : GPUSLICE_OWNER_NONE;
		return true;
	}
	for (int i = 0; i < 1000; i++) {
		uint32_t seq = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);

		if (seq & 1) {
			cpu_relax();
			continue;
		}
		*owner = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
		*end = __atomic_load_n(&p->slice_end_ns, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == seq)
			return true;
	}
	return false;
}

/*
 * The fast check. OWNER_ALL does not pass it: on a card whose vGPU was
 * gated the page says so only once the card was emptied (OWNER_NONE) and
 * configured anew, this process's vGPU gone, and ACQUIRE is the one to
 * say what then holds (-ENODEV for a vGPU removed).
 */
static bool may_run(const struct gs_gate_card *g, int32_t owner,
		    uint64_t end, uint64_t now)
{
	return owner == __atomic_load_n(&g->id, __ATOMIC_RELAXED) && now < end;
}

/* The fence will wait for ctx too; the card's lock held. */
static void note_ctx_locked(struct gs_gate_card *g, CUcontext ctx)
{
	for (int i = 0; i < g->nctx; i++)
		if (g->ctx[i] == ctx)
			return;
	if (!ctx || g->nctx == GS_GATE_FENCE_CTXS)
		return;	/* more: the fence waits for the current one only */
	g->ctx[g->nctx++] = ctx;
	if (g->nctx == 1)
		__atomic_store_n(&g->ctx[0], ctx, __ATOMIC_RELAXED);
}

/*
 * A launch in the slice ending at end, at now, from context ctx; the
 * card's lock held. Closes the span of an earlier slice of ours that
 * ended without a fence (the process went on in its next slice without
 * waiting in between). The first launch since a fence wakes the fencer.
 */
static void launch_in_slice_locked(struct gs_gate_card *g, uint64_t end,
				   uint64_t now, CUcontext ctx)
{
	if (g->seen_end != end) {
		if (g->first_ns) {
			uint64_t stop = now < g->seen_end ? now : g->seen_end;

			if (stop > g->first_ns)
				g->busy_ns += stop - g->first_ns;
			g->first_ns = 0;
		}
		__atomic_store_n(&g->seen_end, end, __ATOMIC_RELEASE);
	}
	if (!g->first_ns)
		g->first_ns = now;
	__atomic_add_fetch(&g->nlaunch, 1, __ATOMIC_RELAXED);
	note_ctx_locked(g, ctx);
	if (!g->active && g->fencer)
		pthread_cond_signal(&g->fence_cv);
	g->active = true;
}

/* The module's file of a gated card, -1 without the module. */
static int kmod_fd(const struct gs_gate_card *g)
{
	return g->kc ? g->kc->fd : -1;
}

/*
 * ACQUIRE with flags, HOLD added unless the module is too old for it;
 * 0 or an errno. EINTR is the caller's to retry.
 */
static int kmod_acquire(struct gs_gate_card *g, uint32_t flags,
			struct gpuslice_acquire *a)
{
	int fd = kmod_fd(g);

	for (;;) {
		memset(a, 0, sizeof(*a));
		a->card = (__u32)g->kc->card;
		a->flags = flags | (g->no_hold ? 0 : GPUSLICE_ACQUIRE_HOLD);
		if (fd < 0)
			return EBADF;
		if (ioctl(fd, GPUSLICE_IOC_ACQUIRE, a) == 0)
			return 0;
		if (errno != EINVAL || g->no_hold)
			return errno;
		/* A module before ACQUIRE_HOLD: its card never waits for us. */
		g->no_hold = true;
	}
}

/*
 * Module mode, a slice of ours we did not acquire: say we hold it, so
 * that its end waits for our fence. Not ours any more: the launch goes
 * on anyway, as the page said it could.
 */
static void kmod_hold(struct gs_gate_card *g)
{
	struct gpuslice_acquire a;

	kmod_acquire(g, GPUSLICE_ACQUIRE_NONBLOCK, &a);
}

/*
 * Module mode: sleeps until the slice ending at end is over or was cut
 * short (WAIT); an older module has no WAIT: until its end.
 */
static void kmod_wait_slice(struct gs_gate_card *g, uint64_t end)
{
	struct gpuslice_wait w = { .slice_end_ns = end };
	struct timespec ts;

	if (!g->no_wait && kmod_fd(g) >= 0) {
		w.card = (__u32)g->kc->card;
		if (ioctl(kmod_fd(g), GPUSLICE_IOC_WAIT, &w) == 0)
			return;
		if (errno == ENOTTY)
			g->no_wait = true;
	}
	ts.tv_sec = (time_t)(end / 1000000000ULL);
	ts.tv_nsec = (long)(end % 1000000000ULL);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/*
 * Over its budget the process launches nothing more in this slice: it
 * sleeps, the card's lock held, until the slice ends or is cut (the page's
 * futex without the module, WAIT with it); the slow path then fences,
 * releases and acquires the next one as usual.
 */
static void wait_out_slice_locked(struct gs_gate_card *g)
{
	int32_t owner;
	uint64_t end;
	uint32_t seq;

	for (;;) {
		seq = g->sf ? __atomic_load_n(&g->page->seq, __ATOMIC_ACQUIRE) :
			      0;
		if (!read_slice(g, &owner, &end) ||
		    !may_run(g, owner, end, now_ns()))
			return;
		if (g->sf)
			gs_sf_page_wait(g->page, seq & ~1u, end);
		else
			kmod_wait_slice(g, end);
	}
}

/*
 * A launch in a slice of ours we did not acquire (the page says it is
 * ours); the card's lock held. No module: we hold the card in it as if
 * we had acquired it, so that its end waits for our fence.
 */
static void launch_in_found_slice_locked(struct gs_gate_card *g, uint64_t end,
					 uint64_t now, CUcontext ctx)
{
	if (__atomic_load_n(&g->seen_end, __ATOMIC_RELAXED) != end) {
		if (g->sf)
			gs_sf_hold(g->sf);
		else
			kmod_hold(g);
	}
	launch_in_slice_locked(g, end, now, ctx);
}

/*
 * The first launch of a slice this process did not have to acquire, or
 * the first from another context.
 */
static CUresult slice_begins(struct gs_gate_card *g, uint64_t end,
			     uint64_t now, CUcontext ctx)
{
	pthread_mutex_lock(&g->lock);
	launch_in_found_slice_locked(g, end, now, ctx);
	pthread_mutex_unlock(&g->lock);
	return CUDA_SUCCESS;
}

/*
 * Waits for what the process queued since the last fence: each context
 * it launched in, made current on this thread for the while (push/pop
 * leave the thread's own stack as it was).
 */
static void fence_locked(struct gs_gate_card *g)
{
	CUcontext out;

	if (!g->nctx || !gs_real.cuCtxPushCurrent_v2 ||
	    !gs_real.cuCtxPopCurrent_v2) {
		if (gs_real.cuCtxSynchronize)
			gs_real.cuCtxSynchronize();
		return;
	}
	for (int i = 0; i < g->nctx; i++) {
		if (gs_real.cuCtxPushCurrent_v2(g->ctx[i]) != CUDA_SUCCESS)
			continue;
		gs_real.cuCtxSynchronize();	/* its error: the app's */
		gs_real.cuCtxPopCurrent_v2(&out);
	}
}

void gs_gate_forget_ctx(CUcontext ctx)
{
	for (int i = 0; i < ngated; i++) {
		struct gs_gate_card *g = gated[i];

		/* Waits for a fence of ctx in progress to end. */
		pthread_mutex_lock(&g->lock);
		for (int j = 0; j < g->nctx; j++) {
			if (g->ctx[j] != ctx)
				continue;
			g->ctx[j] = g->ctx[--g->nctx];
			break;
		}
		__atomic_store_n(&g->ctx[0], g->nctx ? g->ctx[0] : NULL,
				 __ATOMIC_RELAXED);
		pthread_mutex_unlock(&g->lock);
	}
}

/*
 * Admission. The drain charges what a slice's work runs past its end, at
 * most 100 ms of it; a process that queues far more than a slice can run
 * (20 ms kernels, 64 in flight) would still take its neighbours' time.
 * So a slice admits a budget of launches: when the last fence found work
 * running more than a slice past the slice's end, the budget is the
 * launches of that slice scaled to what one slice runs (at least one);
 * while fences find less, it doubles, and past GS_BUDGET_MAX it is lifted.
 * A process starts at GS_BUDGET_START, so that its first slice cannot
 * queue seconds of work before any fence has measured it (lifted after
 * eight slices of short work). Kernel lengths are not known to the gate;
 * the fence measures them.
 */
static void budget_update(struct gs_gate_card *g, uint32_t n, uint64_t spill)
{
	uint64_t slice = g->page ? __atomic_load_n(&g->page->slice_ns,
						   __ATOMIC_RELAXED) : 0;
	uint32_t b = __atomic_load_n(&g->budget, __ATOMIC_RELAXED);

	if (!slice || !n)
		return;
	if (spill > slice) {
		uint64_t fit = (uint64_t)n * slice / (slice + spill);

		b = fit ? (uint32_t)fit : 1;
	} else if (b) {
		b = b >= GS_BUDGET_MAX / 2 ? 0 : b * 2;
	}
	__atomic_store_n(&g->budget, b, __ATOMIC_RELAXED);
}

/*
 * One launch more in the slice; false when it is over the budget. A plain
 * load and store, not a locked add: threads launching at the same moment
 * may count one launch for two, which the budget, an estimate, tolerates,
 * and the fast path stays free of bus locks.
 */
static inline bool within_budget(struct gs_gate_card *g)
{
	uint32_t n = __atomic_load_n(&g->nlaunch, __ATOMIC_RELAXED) + 1;
	uint32_t b = __atomic_load_n(&g->budget, __ATOMIC_RELAXED);

	__atomic_store_n(&g->nlaunch, n, __ATOMIC_RELAXED);
	return !b || n <= b;
}

static bool over_budget(const struct gs_gate_card *g)
{
	uint32_t b = __atomic_load_n(&g->budget, __ATOMIC_RELAXED);

	return b && __atomic_load_n(&g->nlaunch, __ATOMIC_RELAXED) > b;
}

/*
 * The slice is over: fence the context's queued work, report it and
 * declare the queue empty. The card's lock held.
 */
static void fence_and_release_locked(struct gs_gate_card *g, int fd)
{
	struct gpuslice_release rel = { .flags = GPUSLICE_RELEASE_IDLE };
	uint64_t t0 = now_ns(), t1, busy = g->busy_ns;

	fence_locked(g);
	t1 = now_ns();
	if (g->first_ns) {
		uint64_t stop = t1 - t0 >= GS_FENCE_WAITED_NS ? t1 :
				t0 < g->seen_end ? t0 : g->seen_end;

		if (stop > g->first_ns)
			busy += stop - g->first_ns;
	}
	budget_update(g, __atomic_exchange_n(&g->nlaunch, 0, __ATOMIC_RELAXED),
		      t1 - t0 >= GS_FENCE_WAITED_NS && t1 > g->seen_end ?
		      t1 - g->seen_end : 0);
	rel.busy_ns = busy;
	if (g->sf) {
		/* The card waits for this (the drain) before passing on. */
		gs_sf_release(g->sf, busy);
	} else if (fd >= 0) {
		rel.card = (__u32)g->kc->card;
		ioctl(fd, GPUSLICE_IOC_RELEASE, &rel);
	}
	g->busy_ns = 0;
	g->first_ns = 0;
	g->active = false;
	g->nctx = 0;
	__atomic_store_n(&g->ctx[0], NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&g->seen_end, 0, __ATOMIC_RELEASE);
}

/*
 * The fencer. A thread per gated card that, once the process launched in
 * a slice, sleeps until the slice ends or is cut short by a high-priority
 * neighbour (no module: the page's sequence changes, a futex; module:
 * WAIT), then fences and releases, so that the card, which waits for our
 * drain, passes on as soon as our work has run, whether the application
 * launches again or not. The slow path still fences first when it gets
 * there first.
 */
static void *fencer_main(void *arg)
{
	struct gs_gate_card *g = arg;
	int32_t owner;
	uint64_t end;
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
		seq = g->sf ? __atomic_load_n(&g->page->seq, __ATOMIC_ACQUIRE) :
			      0;
		if (!read_slice(g, &owner, &end) ||
		    !may_run(g, owner, end, now_ns())) {
			fence_and_release_locked(g, kmod_fd(g));
			continue;
		}
		pthread_mutex_unlock(&g->lock);
		if (g->sf)
			gs_sf_page_wait(g->page, seq & ~1u, end);
		else
			kmod_wait_slice(g, end);
		pthread_mutex_lock(&g->lock);
	}
	return NULL;
}

/* Starts the card's fencer, its signals blocked; the card's lock held. */
static void start_fencer_locked(struct gs_card *c)
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

/*
 * The slow path over the schedule file (no module): fence and release
 * what an earlier slice left (the fencer usually did), then acquire. What
 * our work ran past a slice's end is the core's business (the drain and
 * the vGPU's debt, kmod/core), not ours.
 */
static CUresult slow_path_file(struct gs_card *c, const char *what,
			       CUcontext ctx)
{
	struct gs_gate_card *g = &c->gate;
	int32_t owner, id;
	uint64_t start, end, now;
	int err;

	pthread_mutex_lock(&g->lock);
	if (over_budget(g))
		wait_out_slice_locked(g);
	else if (read_slice(g, &owner, &end) &&
		 may_run(g, owner, end, now = now_ns())) {
		launch_in_found_slice_locked(g, end, now, ctx);
		pthread_mutex_unlock(&g->lock);
		return CUDA_SUCCESS;
	}
	if (g->active)
		fence_and_release_locked(g, -1);
	err = gs_sf_acquire(g->sf, &id, &start, &end);
	if (err) {
		pthread_mutex_unlock(&g->lock);
		return refuse(c, what, strerror(-err));
	}
	if (!g->fencer)
		start_fencer_locked(c);
	/* A recovered file may have renumbered the vGPUs. */
	__atomic_store_n(&g->id, id, __ATOMIC_RELAXED);
	__atomic_store_n(&g->acq_end, end, __ATOMIC_RELEASE);
	launch_in_slice_locked(g, end, now_ns(), ctx);
	pthread_mutex_unlock(&g->lock);
	return CUDA_SUCCESS;
}

static CUresult slow_path(struct gs_card *c, const char *what, CUcontext ctx)
{
	struct gs_gate_card *g = &c->gate;
	struct gpuslice_acquire a;
	int32_t owner;
	uint64_t end, now;
	int err;

	pthread_mutex_lock(&g->lock);
	/*
	 * Another thread may have acquired the slice meanwhile, or the card
	 * came back to us while the fencer held the lock: held either way.
	 * Over the budget: not in this slice.
	 */
	if (over_budget(g))
		wait_out_slice_locked(g);
	else if (read_slice(g, &owner, &end) &&
		 may_run(g, owner, end, now = now_ns())) {
		launch_in_found_slice_locked(g, end, now, ctx);
		pthread_mutex_unlock(&g->lock);
		return CUDA_SUCCESS;
	}
	if (g->active)
		fence_and_release_locked(g, kmod_fd(g));
	while ((err = kmod_acquire(g, 0, &a)) == EINTR)
		;
	if (err) {
		pthread_mutex_unlock(&g->lock);
		return refuse(c, what,
			      err == ENODEV ?
			      "its vGPU was removed from " GPUSLICE_DEVICE :
			      strerror(err));
	}
	if (!g->fencer)
		start_fencer_locked(c);
	__atomic_store_n(&g->acq_end, a.slice_end_ns, __ATOMIC_RELEASE);
	/*
	 * The kernel granted the slice: launch in it however little of it is
	 * left, or a slow process would never launch at all.
	 */
	launch_in_slice_locked(g, a.slice_end_ns, now_ns(), ctx);
	pthread_mutex_unlock(&g->lock);
	return CUDA_SUCCESS;
}

CUresult gs_gate_launch(const char *what)
{
	int mode = __atomic_load_n(&gs_gate_mode, __ATOMIC_ACQUIRE);
	struct gs_gate_card *g;
	struct gs_card *c;
	CUcontext ctx;
	int32_t owner;
	uint64_t end, now;
	int state;

	if (mode == GS_GATE_UNKNOWN)
		mode = resolve();
	if (mode != GS_GATE_ON)
		return CUDA_SUCCESS;
	c = gs_current_card(&ctx);
	if (!c || c->index < 0)
		return CUDA_SUCCESS;	/* no context, or no vGPU on it */
	g = &c->gate;
	state = __atomic_load_n(&g->state, __ATOMIC_ACQUIRE);
	if (__builtin_expect(state == GS_GATE_CARD_UNRESOLVED, 0)) {
		pthread_mutex_lock(&resolve_lock);
		resolve_card_locked(c);
		pthread_mutex_unlock(&resolve_lock);
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
	    may_run(g, owner, end, now = now_ns())) {
		if (__builtin_expect(
			    __atomic_load_n(&g->seen_end, __ATOMIC_RELAXED) ==
					    end &&
				    __atomic_load_n(&g->ctx[0],
						    __ATOMIC_RELAXED) == ctx,
			    1)) {
			if (__builtin_expect(within_budget(g), 1))
				return CUDA_SUCCESS;
		} else {
			return slice_begins(g, end, now, ctx);
		}
	}
	return g->sf ? slow_path_file(c, what, ctx) :
		       slow_path(c, what, ctx);
}

/*
 * A launch on several devices at once would need the slices of several
 * cards at the same moment, which the module does not hand out: refused
 * while any card is gated rather than run ungated. One device: its gate.
 */
CUresult gs_gate_multi(unsigned int ndev, const char *what)
{
	int mode = __atomic_load_n(&gs_gate_mode, __ATOMIC_ACQUIRE);

	if (mode == GS_GATE_UNKNOWN)
		mode = resolve();
	if (mode != GS_GATE_ON)
		return CUDA_SUCCESS;
	if (ndev <= 1)
		return gs_gate_launch(what);
	gs_warn("%s across %u devices refused: this container's launches are gated by time slices, one card at a time",
		what, ndev);
	return CUDA_ERROR_NOT_SUPPORTED;
}
