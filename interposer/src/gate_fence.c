// SPDX-License-Identifier: Apache-2.0
/*
 * The gate's fence (gate.c): at a slice's end, wait until the work the
 * process queued in the slice has run, so that the card, which waits for
 * the process's release (the drain), passes on with the engine empty.
 *
 * By events, not by cuCtxSynchronize: a context-wide synchronisation is
 * illegal while any stream of the context captures a graph (it would fail
 * and invalidate the application's capture), and it cannot be bounded.
 * Each stream the process launched in during the slice is noted (once per
 * thread and stream: a launch's fast path compares its thread's note), and
 * the fence records an event on each and polls them. The special streams
 * are noted as the context's legacy stream, whose event also waits for
 * every blocking stream of the context, the per-thread default streams of
 * all threads included (the driver's legacy-stream semantics); explicit
 * non-blocking streams each get theirs.
 *
 * What the fence cannot record on it skips: a capturing stream (its work
 * is a graph's, run later) and the legacy stream while a blocking stream
 * captures (the driver forbids the implicit dependency). Before a capture
 * begins, the events of the stream and, for a blocking stream, of the
 * legacy stream are recorded at once (gs_gate_before_capture), so that
 * what was queued before the capture is waited for all the same.
 *
 * The wait is bounded by the drain's bound (GS_DRAIN_MAX_NS past the
 * slice's end, when the card has moved on anyway) and is made with no
 * lock held: queued work may wait for a thread that is itself waiting in
 * the gate (a host function, a stream wait on a value another launch
 * writes), and it must not wait for ever.
 */
#include <time.h>

#include "gate_int.h"
#include "sched_file.h"

/* The per-thread notes: which stream of which context is in the set. */
struct note {
	CUcontext ctx;
	CUstream stream;
	unsigned int gen;	/* the set's generation it was noted in */
};

/*
 * Initial-exec: read at every gated launch, where a __tls_get_addr call
 * would be most of the cost. The shim is preloaded, so its TLS is static
 * (a late dlopen of it takes these bytes from glibc's static TLS surplus).
 */
static __thread struct note notes[GS_MAX_CARDS]
	__attribute__((tls_model("initial-exec")));

/* The special streams are the legacy stream's for the fence. */
static CUstream fence_key(CUstream s)
{
	return gs_stream_special(s) ? CU_STREAM_LEGACY : s;
}

static void note_locked(struct gs_gate_card *g, CUcontext ctx, CUstream key)
{
	struct gs_fence_set *set = &g->set[g->cur];
	struct gs_fence_ent *e;

	for (int i = 0; i < set->n; i++)
		if (set->ent[i].ctx == ctx && set->ent[i].stream == key)
			return;
	if (set->n == GS_FENCE_STREAMS) {
		set->overflow = true;
		return;
	}
	e = &set->ent[set->n++];
	e->ctx = ctx;
	e->stream = key;
	e->recorded = false;
}

void gs_fence_note(struct gs_gate_card *g, CUcontext ctx, CUstream s)
{
	struct note *n = &notes[g->slot];
	unsigned int gen = __atomic_load_n(&g->fence_gen, __ATOMIC_ACQUIRE);
	CUstream key = fence_key(s);

	if (__builtin_expect(n->gen == gen && n->ctx == ctx &&
			     n->stream == key, 1))
		return;
	pthread_mutex_lock(&g->fence_lock);
	note_locked(g, ctx, key);
	pthread_mutex_unlock(&g->fence_lock);
	n->ctx = ctx;
	n->stream = key;
	n->gen = gen;
}

/* Makes ctx current on this thread for a while; false when it cannot. */
static bool enter_ctx(CUcontext ctx, bool *pushed)
{
	CUcontext cur = NULL;

	*pushed = false;
	if (gs_real.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx)
		return true;
	if (gs_real.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS)
		return false;
	*pushed = true;
	return true;
}

static void leave_ctx(bool pushed)
{
	CUcontext out;

	if (pushed)
		gs_real.cuCtxPopCurrent_v2(&out);
}

/* Whether the fence may record on key now (not capturing, no implicit). */
static bool recordable(CUstream key)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

	if (!gs_capture_any())
		return true;
	return gs_real.cuStreamIsCapturing(key, &st) == CUDA_SUCCESS &&
	       st == CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Records e's event on its stream; its context current. */
static void record_in_ctx(struct gs_fence_ent *e)
{
	if (e->ev && e->ev_ctx != e->ctx) {
		gs_real.cuEventDestroy_v2(e->ev);
		e->ev = NULL;
	}
	if (!e->ev) {
		if (gs_real.cuEventCreate(&e->ev, CU_EVENT_DISABLE_TIMING) !=
		    CUDA_SUCCESS) {
			e->ev = NULL;
			return;
		}
		e->ev_ctx = e->ctx;
	}
	if (recordable(e->stream) &&
	    gs_real.cuEventRecord(e->ev, e->stream) == CUDA_SUCCESS)
		e->recorded = true;
}

static void record(struct gs_fence_ent *e)
{
	bool pushed;

	if (e->recorded || !enter_ctx(e->ctx, &pushed))
		return;
	record_in_ctx(e);
	leave_ctx(pushed);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void nap(uint64_t ns)
{
	struct timespec ts = { 0, (long)ns };

	nanosleep(&ts, NULL);
}

/* Whether every recorded event of set has passed. */
static bool passed(struct gs_fence_set *set)
{
	for (int i = 0; i < set->n; i++) {
		struct gs_fence_ent *e = &set->ent[i];

		if (!e->recorded)
			continue;
		if (gs_real.cuEventQuery(e->ev) == CUDA_ERROR_NOT_READY)
			return false;
		e->recorded = false;	/* done: not asked again */
	}
	return true;
}

struct gs_fence_set *gs_fence_take_locked(struct gs_gate_card *g)
{
	struct gs_fence_set *set;

	pthread_mutex_lock(&g->fence_lock);
	set = &g->set[g->cur];
	g->cur ^= 1;
	g->set[g->cur].n = 0;
	g->set[g->cur].overflow = false;
	__atomic_add_fetch(&g->fence_gen, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&g->fence_lock);
	g->fencing = true;
	return set;
}

/*
 * The poll's longest pause: what a drain's end may be noticed late (the
 * drainer's debt and the next owner's slice end are taken at the release).
 */
#define GS_FENCE_POLL_MAX_NS 20000ULL

bool gs_fence_wait(struct gs_fence_set *set, uint64_t deadline)
{
	static bool told;
	struct gs_relaxed r;
	uint64_t pause = 2000;
	bool done;

	if (!set->n)
		return true;
	if (set->overflow && !__atomic_exchange_n(&told, true, __ATOMIC_RELAXED))
		gs_warn("more than %d streams launched in one slice on a card: the fence waits for the first %d",
			GS_FENCE_STREAMS, GS_FENCE_STREAMS);
	gs_relaxed_enter(&r);
	for (int i = 0; i < set->n; i++)
		record(&set->ent[i]);
	while (!(done = passed(set)) && now_ns() < deadline) {
		nap(pause);
		pause = pause * 2 < GS_FENCE_POLL_MAX_NS ? pause * 2 :
							   GS_FENCE_POLL_MAX_NS;
	}
	gs_relaxed_leave(&r);
	return done;
}

bool gs_fence_probe_locked(struct gs_gate_card *g, uint64_t deadline)
{
	struct gs_fence_set *set = &g->set[g->cur], *pr = &g->probe;
	bool done;

	pthread_mutex_lock(&g->fence_lock);
	for (int i = 0; i < set->n; i++) {
		pr->ent[i].ctx = set->ent[i].ctx;
		pr->ent[i].stream = set->ent[i].stream;
		pr->ent[i].recorded = false;
	}
	pr->n = set->n;
	pr->overflow = set->overflow;
	pthread_mutex_unlock(&g->fence_lock);
	g->fencing = true;
	pthread_mutex_unlock(&g->lock);
	done = gs_fence_wait(pr, deadline) && !pr->overflow;
	pthread_mutex_lock(&g->lock);
	gs_fence_done_locked(g);
	return done;
}

uint64_t gs_fence_deadline(uint64_t slice_end, uint64_t now)
{
	return (slice_end && slice_end < now ? slice_end : now) +
	       gs_drain_bound_ns();
}

void gs_fence_done_locked(struct gs_gate_card *g)
{
	g->fencing = false;
	pthread_cond_broadcast(&g->fenced);
}

/*
 * Before stream s begins a capture: the fence's events on it and, for a
 * blocking stream, on the legacy stream of its context are recorded now,
 * while they may be.
 */
static void before_capture_card(struct gs_gate_card *g, CUcontext ctx,
				CUstream key, bool blocking)
{
	struct gs_fence_set *set;
	bool pushed;

	pthread_mutex_lock(&g->fence_lock);
	set = &g->set[g->cur];
	for (int i = 0; i < set->n; i++) {
		struct gs_fence_ent *e = &set->ent[i];

		if (e->ctx != ctx || e->recorded ||
		    (e->stream != key &&
		     !(blocking && e->stream == CU_STREAM_LEGACY)))
			continue;
		if (enter_ctx(ctx, &pushed)) {
			record_in_ctx(e);
			leave_ctx(pushed);
		}
	}
	pthread_mutex_unlock(&g->fence_lock);
}

void gs_fence_before_capture(struct gs_gate_card *g, CUcontext ctx,
			     CUstream s, bool blocking)
{
	struct gs_relaxed r;

	gs_relaxed_enter(&r);
	before_capture_card(g, ctx, fence_key(s), blocking);
	gs_relaxed_leave(&r);
}

static void drop_at(struct gs_fence_set *set, int i, bool destroy)
{
	struct gs_fence_ent gone = set->ent[i];

	set->ent[i] = set->ent[--set->n];
	if (destroy && gone.ev) {
		gs_real.cuEventDestroy_v2(gone.ev);
		gone.ev = NULL;
	}
	set->ent[set->n] = gone;	/* its slot keeps a reusable event */
}

/*
 * Drops what the sets hold of a context that is going away (no fence in
 * flight: both sets are idle) or of a stream (the set being noted only:
 * a fence in flight may be reading the other).
 */
void gs_fence_forget(struct gs_gate_card *g, CUcontext ctx, CUstream s)
{
	pthread_mutex_lock(&g->fence_lock);
	for (int k = 0; k < 3; k++) {
		struct gs_fence_set *set = k < 2 ? &g->set[k] : &g->probe;

		if (!ctx && k != g->cur)
			continue;
		for (int i = 0; i < set->n;) {
			struct gs_fence_ent *e = &set->ent[i];

			if ((ctx && e->ctx == ctx) || (s && e->stream == s))
				drop_at(set, i, ctx != NULL);
			else
				i++;
		}
		/* Events of ctx in unused slots go before ctx does. */
		for (int i = set->n; ctx && i < GS_FENCE_STREAMS; i++) {
			if (set->ent[i].ev && set->ent[i].ev_ctx == ctx) {
				gs_real.cuEventDestroy_v2(set->ent[i].ev);
				set->ent[i].ev = NULL;
			}
		}
	}
	__atomic_add_fetch(&g->fence_gen, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&g->fence_lock);
}

/* In a forked child: the parent's events and notes mean nothing. */
void gs_fence_after_fork_child(struct gs_gate_card *g)
{
	pthread_mutex_init(&g->fence_lock, NULL);
	pthread_cond_init(&g->fenced, NULL);
	for (int k = 0; k < 3; k++) {
		struct gs_fence_set *set = k < 2 ? &g->set[k] : &g->probe;

		set->n = 0;
		set->overflow = false;
		for (int i = 0; i < GS_FENCE_STREAMS; i++)
			set->ent[i].ev = NULL;
	}
	g->fencing = false;
	__atomic_add_fetch(&g->fence_gen, 1, __ATOMIC_ACQ_REL);
}
