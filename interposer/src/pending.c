// SPDX-License-Identifier: Apache-2.0
/*
 * Stream-ordered frees (cuMemFreeAsync) that the driver has queued but not
 * yet carried out. The memory is the card's until the stream reaches the
 * free, so the charge stays until the stream is seen past it: checked at
 * synchronisation points and before any charge is refused.
 *
 * "Past it" is an event recorded right behind the free, on the freeing
 * thread: the stream handle alone would not do, since 0, CU_STREAM_LEGACY
 * and CU_STREAM_PER_THREAD name a different stream on every thread and in
 * every context, while an event is the same from anywhere. (A free under
 * stream capture is the graph's, pool.c: no event is recorded in a
 * capture.) The events are queried in relaxed capture mode: an event query
 * is a "potentially unsafe" call that would otherwise invalidate another
 * thread's global capture.
 */
#include <stdlib.h>

#include "shim.h"

struct pending {
	struct pending *next;
	struct gs_alloc a;
	CUevent passed;	/* recorded right behind the free */
	CUcontext ctx;	/* the event's: it must go before its context */
};

static struct pending *pendings;
static pthread_mutex_t pendings_lock = PTHREAD_MUTEX_INITIALIZER;

/* The memory a is freed: uncharged, or handed back to its pool. */
static void settle(const struct gs_alloc *a)
{
	if (a->kind == GS_ASYNC)
		gs_pool_freed(a, true);
	else
		gs_uncharge(a->card, a->bytes);
}

/* An event recorded on stream now, or NULL. */
static CUevent mark(CUstream stream, bool ptsz)
{
	__typeof__(&cuEventRecord) record =
		ptsz ? gs_real.cuEventRecord_ptsz : gs_real.cuEventRecord;
	CUevent ev;

	if (!gs_real.cuEventCreate || !record ||
	    gs_real.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
		return NULL;
	if (record(ev, stream) != CUDA_SUCCESS) {
		gs_real.cuEventDestroy_v2(ev);
		return NULL;
	}
	return ev;
}

void gs_pending_add(const struct gs_alloc *a, CUstream stream, bool ptsz)
{
	struct pending *p = malloc(sizeof(*p));
	__typeof__(&cuStreamSynchronize) sync =
		ptsz ? gs_real.cuStreamSynchronize_ptsz :
		       gs_real.cuStreamSynchronize;

	if (p) {
		p->passed = mark(stream, ptsz);
		if (gs_real.cuCtxGetCurrent(&p->ctx) != CUDA_SUCCESS)
			p->ctx = NULL;
	}
	if (!p || !p->passed) {
		struct gs_relaxed r;

		/* Cannot tell when the free happens: wait for it here. */
		gs_warn("cannot track a stream-ordered free: synchronising its stream");
		gs_relaxed_enter(&r);
		if (sync)
			sync(stream);
		gs_relaxed_leave(&r);
		settle(a);
		free(p);
		return;
	}
	p->a = *a;
	pthread_mutex_lock(&pendings_lock);
	p->next = pendings;
	pendings = p;
	pthread_mutex_unlock(&pendings_lock);
}

/*
 * Whether the stream has passed the free. Any answer but "not ready" is
 * final: done, or the event went with its context, and with the context
 * its memory.
 */
static bool stream_passed(const struct pending *p)
{
	return gs_real.cuEventQuery(p->passed) != CUDA_ERROR_NOT_READY;
}

void gs_pending_settle(void)
{
	struct pending *done = NULL, **pp;
	struct gs_relaxed r;

	if (!__atomic_load_n(&pendings, __ATOMIC_RELAXED))
		return;
	gs_relaxed_enter(&r);
	pthread_mutex_lock(&pendings_lock);
	for (pp = &pendings; *pp;) {
		struct pending *p = *pp;

		if (stream_passed(p)) {
			*pp = p->next;
			p->next = done;
			done = p;
		} else {
			pp = &p->next;
		}
	}
	pthread_mutex_unlock(&pendings_lock);
	gs_relaxed_leave(&r);
	while (done) {
		struct pending *p = done;

		done = p->next;
		gs_real.cuEventDestroy_v2(p->passed);
		settle(&p->a);
		free(p);
	}
}

void *gs_pending_detach_context(CUcontext ctx)
{
	struct pending *gone = NULL, **pp;

	pthread_mutex_lock(&pendings_lock);
	for (pp = &pendings; *pp;) {
		struct pending *p = *pp;

		if (p->ctx == ctx) {
			*pp = p->next;
			p->next = gone;
			gone = p;
		} else {
			pp = &p->next;
		}
	}
	pthread_mutex_unlock(&pendings_lock);
	/* Legal even before they complete; after the context, not at all. */
	for (struct pending *p = gone; p; p = p->next)
		gs_real.cuEventDestroy_v2(p->passed);
	return gone;
}

void gs_pending_settle_detached(void *list)
{
	struct pending *p = list;

	while (p) {
		struct pending *next = p->next;

		settle(&p->a);
		free(p);
		p = next;
	}
}

void gs_pending_before_fork(void)
{
	pthread_mutex_lock(&pendings_lock);
}

void gs_pending_after_fork_parent(void)
{
	pthread_mutex_unlock(&pendings_lock);
}

void gs_pending_after_fork_child(void)
{
	while (pendings) {
		struct pending *p = pendings;

		pendings = p->next;
		free(p);
	}
	pthread_mutex_init(&pendings_lock, NULL);
}
