// SPDX-License-Identifier: Apache-2.0
/*
 * Streams. Each stream owns a worker thread that executes its operations
 * in FIFO order, so work is genuinely asynchronous: a launch returns at
 * once, and synchronisation, queries and events observe real progress.
 *
 * The NULL stream and CU_STREAM_LEGACY map to one legacy stream per
 * context; CU_STREAM_PER_THREAD (and 0 in the _ptsz entry points) to one
 * stream per thread and context, destroyed when the thread exits. As the
 * driver API documents ("Stream synchronization behavior"), the legacy
 * stream synchronises with the context's blocking streams (those created
 * without CU_STREAM_NON_BLOCKING, per-thread streams included): work
 * queued on it waits for what they queued before, and work queued on them
 * waits for what it queued before. Non-blocking streams are independent.
 *
 * A host function (cuLaunchHostFunc) runs on the stream's worker, in order,
 * without the driver's lock, as a CUDA host function runs on a driver
 * thread.
 *
 * Lifetime: a stream is reference counted (its handle, its worker, and
 * anyone waiting on it) and freed, under sim.lock, when the last goes.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include "sim.h"

#define SIM_WORKER_STACK (256 * 1024)

/* One per-thread default stream of this thread, for one context. */
struct ptds_ent {
	struct ptds_ent *next;
	struct sim_ctx *ctx;
	unsigned int epoch;	/* of ctx when the stream was made */
	unsigned int gen;	/* sim.gen then: stale in a forked child */
	struct sim_stream *st;
};

static __thread struct ptds_ent *ptds_list;
static pthread_key_t ptds_key;
static pthread_once_t ptds_once = PTHREAD_ONCE_INIT;

void sim_stream_ref(struct sim_stream *st)
{
	st->refs++;
}

void sim_stream_unref(struct sim_stream *st)
{
	struct sim_stream **pp = &sim.streams;

	if (--st->refs)
		return;
	while (*pp != st)
		pp = &(*pp)->next;
	*pp = st->next;
	pthread_cond_destroy(&st->work);
	free(st);
}

/* Hands the stream to its worker, which finishes what is queued. */
static void stream_close(struct sim_stream *st)
{
	if (st->closing)
		return;
	st->closing = 1;
	sim_capture_stream_gone(st);
	sim_handle_del(st);
	pthread_cond_signal(&st->work);
	sim_stream_unref(st);
}

/*
 * Runs op, sim.lock held. st->ready_ns is when the stream's next op could
 * start on a GPU, which does not wait for a host thread: at a kernel's
 * end for the kernel queued behind it (so a stream's kernels run back to
 * back on the engine however late the worker wakes), and at the time a
 * host function or an event wait returned for what follows those.
 */
static void run_op(struct sim_stream *st, struct sim_op *op)
{
	uint64_t ready = op->queued_ns > st->ready_ns ? op->queued_ns :
							  st->ready_ns;
	int phys = sim_phys(op->dev);

	switch (op->kind) {
	case OP_KERNEL:
		if (!op->end && sim_preempts(op->arg)) {
			pthread_mutex_unlock(&sim.lock);
			op->end = sim_run_preempted(phys, op->arg, ready);
			pthread_mutex_lock(&sim.lock);
			st->ready_ns = op->end;
			break;
		}
		if (!op->end)
			op->end = simst_engine_book(phys, op->arg, ready, 0);
		pthread_mutex_unlock(&sim.lock);
		simst_engine_finish(phys, op->arg, op->end);
		pthread_mutex_lock(&sim.lock);
		st->ready_ns = op->end;
		break;
	case OP_FREE:
		if (op->pool)
			sim_pool_put(op->pool, op->arg);
		else
			sim_uncharge(op->dev, op->arg);
		break;
	case OP_RECORD:
		sim_event_done(op->ev, op->gen);
		sim_event_unref(op->ev);
		break;
	case OP_WAIT:
		if (sim_event_wait(op->ev, op->gen))
			st->ready_ns = simst_now_ns();
		sim_event_unref(op->ev);
		break;
	case OP_HOST:
		pthread_mutex_unlock(&sim.lock);
		op->fn(op->data);
		pthread_mutex_lock(&sim.lock);
		st->ready_ns = simst_now_ns();
		break;
	}
	if (op->unbooked)
		st->unbooked--;
}

/* Waits, sim.lock held, for the work op was queued behind implicitly. */
static void wait_deps(struct sim_stream *st, struct sim_op *op)
{
	for (int i = 0; i < op->ndeps; i++) {
		struct sim_dep *d = &op->deps[i];

		if (d->st->done >= d->seq)
			continue;
		while (d->st->done < d->seq)
			pthread_cond_wait(&sim.progress, &sim.lock);
		st->ready_ns = simst_now_ns();	/* a wake-up late at most */
		sim_stream_unref(d->st);
	}
	free(op->deps);
	op->deps = NULL;
	op->ndeps = 0;
}

/* The op stays at the head while it runs, so queries see it pending. */
static void *worker(void *arg)
{
	struct sim_stream *st = arg;

	/*
	 * A kernel's end is a sleep on the engine's clock: the default 50 us
	 * of timer slack would leave the engine idle between queued kernels,
	 * which a GPU does not (and a 50 us kernel would run at half speed).
	 */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	pthread_mutex_lock(&sim.lock);
	for (;;) {
		struct sim_op *op;

		while (!st->head && !st->closing)
			pthread_cond_wait(&st->work, &sim.lock);
		op = st->head;
		if (!op)
			break;
		wait_deps(st, op);
		run_op(st, op);
		st->head = op->next;
		if (!st->head)
			st->tail = NULL;
		st->done = op->seq;
		free(op);
		pthread_cond_broadcast(&sim.progress);
	}
	sim_stream_unref(st);
	pthread_mutex_unlock(&sim.lock);
	return NULL;
}

/* Workers block signals: the application's handlers run on its threads. */
static int start_worker(struct sim_stream *st)
{
	pthread_attr_t attr;
	sigset_t all, old;
	pthread_t t;
	int rc;

	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, SIM_WORKER_STACK);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&t, &attr, worker, st);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return rc;
}

static struct sim_stream *stream_new(struct sim_ctx *ctx, unsigned int flags)
{
	struct sim_stream *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->ctx = ctx;
	st->flags = flags;
	st->refs = 2;	/* the owner and the worker */
	pthread_cond_init(&st->work, NULL);
	if (start_worker(st)) {
		pthread_cond_destroy(&st->work);
		free(st);
		return NULL;
	}
	st->next = sim.streams;
	sim.streams = st;
	return st;
}

struct sim_op *sim_op_new(int kind)
{
	struct sim_op *op = calloc(1, sizeof(*op));

	if (op)
		op->kind = kind;
	return op;
}

static int blocking(const struct sim_stream *st)
{
	return !(st->flags & CU_STREAM_NON_BLOCKING);
}

static void add_dep(struct sim_op *op, struct sim_stream *on)
{
	struct sim_dep *v;

	if (on->done >= on->enq)
		return;	/* nothing of it left to wait for */
	v = realloc(op->deps, (size_t)(op->ndeps + 1) * sizeof(*v));
	if (!v)
		return;	/* out of memory: the ordering is lost, not the op */
	op->deps = v;
	v[op->ndeps++] = (struct sim_dep){ on, on->enq };
	on->refs++;
}

/*
 * The legacy stream's implicit ordering: an op for it waits for the
 * blocking streams of its context, an op for one of those for it.
 */
static void implicit_deps(struct sim_stream *st, struct sim_op *op)
{
	if (st->legacy) {
		for (struct sim_stream *s = sim.streams; s; s = s->next)
			if (s != st && s->ctx == st->ctx && blocking(s))
				add_dep(op, s);
	} else if (blocking(st) && st->ctx->legacy) {
		add_dep(op, st->ctx->legacy);
	}
}

/*
 * A process's queued kernels hold their place on the engine a timeslice
 * ahead (SIM_TIMESLICE_NS, sim.h): work queued within about one timeslice
 * runs before work another process submits later, and deeper queues take
 * turns with it.
 */

/*
 * A kernel queued behind nothing that waits for the host is booked on the
 * engine at its push, in the order kernels are submitted, when it starts
 * within a timeslice: a stream is a GPU's hardware queue, whose kernels
 * run back to back, and a kernel another process submits later runs after
 * them. Booked only as its worker reached it, a stream's second queued
 * kernel ran after a kernel submitted after it whenever another process
 * launched in between. What follows a host function, an event wait, an
 * implicit dependency or a deeper queue books when the worker gets to it
 * (first come, first served among the processes' workers).
 */
static void book(struct sim_stream *st, struct sim_op *op)
{
	uint64_t ready;

	if (op->kind == OP_FREE || op->kind == OP_RECORD)
		return;	/* no engine time, nothing after it waits for it */
	/* A kernel that may be preempted books part by part, as it runs. */
	if (op->kind == OP_KERNEL && !op->ndeps && !st->unbooked &&
	    !sim_preempts(op->arg)) {
		ready = st->booked_ns > op->queued_ns ? st->booked_ns :
							op->queued_ns;
		op->end = simst_engine_book(sim_phys(op->dev), op->arg, ready,
					    op->queued_ns + SIM_TIMESLICE_NS);
		if (op->end) {
			st->booked_ns = op->end;
			return;
		}
	}
	op->unbooked = 1;
	st->unbooked++;
}

void sim_stream_push(struct sim_stream *st, struct sim_op *op)
{
	implicit_deps(st, op);
	op->seq = ++st->enq;
	op->queued_ns = simst_now_ns();
	book(st, op);
	if (st->tail)
		st->tail->next = op;
	else
		st->head = op;
	st->tail = op;
	pthread_cond_signal(&st->work);
}

/* Waits, sim.lock held, until the stream completed its op number target. */
static void stream_wait(struct sim_stream *st, uint64_t target)
{
	st->refs++;
	while (st->done < target)
		pthread_cond_wait(&sim.progress, &sim.lock);
	sim_stream_unref(st);
}

/*
 * Waits for the work queued so far on the streams of ctx (all streams when
 * ctx is NULL). The reference on the current stream keeps it, and so its
 * place in the list, valid while the lock is dropped.
 */
void sim_stream_sync_ctx(struct sim_ctx *ctx)
{
	struct sim_stream *st = sim.streams, *next;

	if (st)
		st->refs++;
	for (; st; st = next) {
		if (!ctx || st->ctx == ctx) {
			uint64_t target = st->enq;

			while (st->done < target)
				pthread_cond_wait(&sim.progress, &sim.lock);
		}
		next = st->next;
		if (next)
			next->refs++;
		sim_stream_unref(st);
	}
}

void sim_streams_close_ctx(struct sim_ctx *ctx)
{
	struct sim_stream *st, *next;

	for (st = sim.streams; st; st = next) {
		next = st->next;
		if (st->ctx == ctx)
			stream_close(st);
	}
}

static void ptds_destructor(void *arg)
{
	struct ptds_ent *e = arg, *next;

	pthread_mutex_lock(&sim.lock);
	for (; e; e = next) {
		next = e->next;
		if (e->gen == sim.gen && e->ctx->alive &&
		    e->ctx->epoch == e->epoch)
			stream_close(e->st);
		free(e);
	}
	pthread_mutex_unlock(&sim.lock);
}

static void ptds_key_init(void)
{
	pthread_key_create(&ptds_key, ptds_destructor);
}

static int ptds_valid(const struct ptds_ent *e)
{
	return e->gen == sim.gen && e->ctx->alive &&
	       e->ctx->epoch == e->epoch;
}

/* Drops entries whose context died (their streams were closed with it). */
static void ptds_prune(void)
{
	struct ptds_ent **pp = &ptds_list;

	while (*pp) {
		struct ptds_ent *e = *pp;

		if (ptds_valid(e)) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		free(e);
	}
	/* The destructor walks the list from the key's value: keep it current. */
	pthread_setspecific(ptds_key, ptds_list);
}

static CUresult per_thread(struct sim_ctx *ctx, struct sim_stream **out)
{
	struct ptds_ent *e;

	pthread_once(&ptds_once, ptds_key_init);
	ptds_prune();
	for (e = ptds_list; e; e = e->next) {
		if (e->ctx == ctx) {
			*out = e->st;
			return CUDA_SUCCESS;
		}
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->st = stream_new(ctx, 0);
	if (!e->st) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	e->ctx = ctx;
	e->epoch = ctx->epoch;
	e->gen = sim.gen;
	e->next = ptds_list;
	ptds_list = e;
	pthread_setspecific(ptds_key, ptds_list);
	*out = e->st;
	return CUDA_SUCCESS;
}

static CUresult legacy(struct sim_ctx *ctx, struct sim_stream **out)
{
	if (!ctx->legacy) {
		ctx->legacy = stream_new(ctx, 0);
		if (ctx->legacy)
			ctx->legacy->legacy = 1;
	}
	if (!ctx->legacy)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = ctx->legacy;
	return CUDA_SUCCESS;
}

/*
 * Resolves a stream handle; ptds says whether 0 means the per-thread
 * stream (the _ptsz entry points). The special handles need a context.
 */
CUresult sim_stream_get(CUstream h, int ptds, struct sim_ctx *ctx,
			struct sim_stream **out)
{
	struct sim_stream *st;

	if (!h)
		h = ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
	if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
		if (!ctx)
			return CUDA_ERROR_INVALID_CONTEXT;
		return h == CU_STREAM_LEGACY ? legacy(ctx, out)
					     : per_thread(ctx, out);
	}
	st = sim_handle_get(h, SH_STREAM);
	if (!st)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = st;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int flags)
{
	struct sim_stream *st;
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!phStream || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	st = stream_new(c, flags);
	if (!st)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	if (sim_handle_add(st, SH_STREAM, c, c->dev)) {
		st->closing = 1;	/* never visible: let the worker go */
		pthread_cond_signal(&st->work);
		sim_stream_unref(st);
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	}
	*phStream = (CUstream)st;
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Returns at once; queued work still runs, then the stream goes away. */
SIM_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
	CUresult rc = sim_enter();
	struct sim_stream *st;

	if (rc != CUDA_SUCCESS)
		return rc;
	st = sim_handle_get(hStream, SH_STREAM);
	if (!st)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	stream_close(st);
	return sim_leave_rc(CUDA_SUCCESS);
}

static CUresult stream_sync(CUstream h, int ptds)
{
	CUresult rc = sim_enter();
	struct sim_stream *st;

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc == CUDA_SUCCESS)
		rc = sim_capture_sync_stream(st);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	stream_wait(st, st->enq);
	sim_pools_shrink();
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuStreamSynchronize(CUstream hStream)
{
	return stream_sync(hStream, 0);
}

SIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	return stream_sync(hStream, 1);
}

static CUresult stream_query(CUstream h, int ptds)
{
	CUresult rc = sim_enter();
	struct sim_stream *st;

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc == CUDA_SUCCESS)
		rc = sim_capture_sync_stream(st);
	if (rc == CUDA_SUCCESS && st->done < st->enq)
		rc = CUDA_ERROR_NOT_READY;
	return sim_leave_rc(rc);
}

SIM_API CUresult cuStreamQuery(CUstream hStream)
{
	return stream_query(hStream, 0);
}

SIM_API CUresult cuStreamQuery_ptsz(CUstream hStream)
{
	return stream_query(hStream, 1);
}

static CUresult host_func(CUstream h, int ptds, CUhostFn fn, void *data)
{
	struct sim_stream *st;
	struct sim_op *op;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!fn)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	if (sim_capture_redirect(st, &rc)) {
		if (rc == CUDA_SUCCESS)
			rc = sim_graph_add_host(sim_capture_graph(st), fn, data);
		return sim_leave_rc(rc);
	}
	op = sim_op_new(OP_HOST);
	if (!op)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	op->fn = fn;
	op->data = data;
	sim_stream_push(st, op);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn,
				  void *userData)
{
	return host_func(hStream, 0, fn, userData);
}

SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn,
				       void *userData)
{
	return host_func(hStream, 1, fn, userData);
}

static CUresult stream_ctx(CUstream h, int ptds, CUcontext *pctx)
{
	struct sim_stream *st;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc == CUDA_SUCCESS)
		*pctx = (CUcontext)st->ctx;
	return sim_leave_rc(rc);
}

SIM_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	return stream_ctx(hStream, 0, pctx);
}

SIM_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
	return stream_ctx(hStream, 1, pctx);
}

static CUresult stream_flags(CUstream h, int ptds, unsigned int *flags)
{
	struct sim_stream *st;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc == CUDA_SUCCESS)
		*flags = st->flags;
	return sim_leave_rc(rc);
}

SIM_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	return stream_flags(hStream, 0, flags);
}

SIM_API CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
	return stream_flags(hStream, 1, flags);
}
