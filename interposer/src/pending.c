// SPDX-License-Identifier: Apache-2.0
/*
 * Stream-ordered frees (cuMemFreeAsync) that the driver has queued but not
 * yet carried out. The memory is the card's until the stream reaches the
 * free, so the charge stays until the stream is seen past it: checked at
 * synchronisation points and before any charge is refused.
 */
#include <stdlib.h>

#include "shim.h"

struct pending {
	struct pending *next;
	struct gs_alloc a;
	CUstream stream;
	bool ptsz;	/* queued through a per-thread-stream entry point */
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

void gs_pending_add(const struct gs_alloc *a, CUstream stream, bool ptsz)
{
	struct pending *p = malloc(sizeof(*p));

	if (!p) {
		settle(a);	/* cannot wait for it: settle now */
		return;
	}
	p->a = *a;
	p->stream = stream;
	p->ptsz = ptsz;
	pthread_mutex_lock(&pendings_lock);
	p->next = pendings;
	pendings = p;
	pthread_mutex_unlock(&pendings_lock);
}

static bool stream_passed(const struct pending *p)
{
	__typeof__(&cuStreamQuery) query =
		p->ptsz ? gs_real.cuStreamQuery_ptsz : gs_real.cuStreamQuery;

	/* A stream destroyed meanwhile finishes its work on its own. */
	return !query || query(p->stream) != CUDA_ERROR_NOT_READY;
}

void gs_pending_settle(void)
{
	struct pending *done = NULL, **pp;

	if (!__atomic_load_n(&pendings, __ATOMIC_RELAXED))
		return;
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
	while (done) {
		struct pending *p = done;

		done = p->next;
		settle(&p->a);
		free(p);
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
