// SPDX-License-Identifier: Apache-2.0
/*
 * Events. Each cuEventRecord starts a new generation of the event; the
 * record operation completes it when its stream reaches it, stamping the
 * CLOCK_MONOTONIC time. Queries and waits concern the latest generation,
 * as in CUDA, where an event always reflects its most recent record.
 */
#include <stdlib.h>

#include "sim.h"

#define SIM_EVENT_FLAGS (CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | \
			 0x4 /* CU_EVENT_INTERPROCESS */)

struct sim_event {
	unsigned int flags;
	int refs;		/* the handle and each queued op using it */
	uint64_t rec_gen;	/* generations recorded so far */
	uint64_t done_gen;	/* latest generation completed */
	uint64_t t_ns;		/* when done_gen completed */
};

void sim_event_unref(struct sim_event *ev)
{
	if (--ev->refs == 0)
		free(ev);
}

void sim_event_done(struct sim_event *ev, uint64_t gen)
{
	if (gen > ev->done_gen) {
		ev->done_gen = gen;
		ev->t_ns = simst_now_ns();
	}
}

void sim_event_wait(struct sim_event *ev, uint64_t gen)
{
	while (ev->done_gen < gen)
		pthread_cond_wait(&sim.progress, &sim.lock);
}

/* Drops the handle; queued records and waits keep the event until run. */
void sim_event_free(struct sim_entry *e)
{
	struct sim_event *ev = (struct sim_event *)(uintptr_t)e->key;

	sim_table_del(&sim.handles, e);
	sim_event_unref(ev);
}

static int complete(const struct sim_event *ev)
{
	return ev->done_gen >= ev->rec_gen;
}

SIM_API CUresult cuEventCreate(CUevent *phEvent, unsigned int flags)
{
	struct sim_event *ev;
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!phEvent || (flags & ~(unsigned int)SIM_EVENT_FLAGS))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	ev->flags = flags;
	ev->refs = 1;
	if (sim_handle_add(ev, SH_EVENT, c, c->dev)) {
		free(ev);
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	}
	*phEvent = (CUevent)ev;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
	CUresult rc = sim_enter();
	struct sim_entry *e;

	if (rc != CUDA_SUCCESS)
		return rc;
	e = sim_handle_entry(hEvent);
	if (!e || e->kind != SH_EVENT)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	sim_event_free(e);
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Queues an op on ev for stream h; kind is OP_RECORD or OP_WAIT. */
static CUresult event_op(CUevent hEvent, CUstream h, int ptds, int kind)
{
	struct sim_stream *st;
	struct sim_event *ev;
	struct sim_op *op;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	ev = sim_handle_get(hEvent, SH_EVENT);
	if (!ev)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	/* Waiting for an event with nothing pending is a no-op. */
	if (kind == OP_WAIT && complete(ev))
		return sim_leave_rc(CUDA_SUCCESS);
	op = sim_op_new(kind);
	if (!op)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	if (kind == OP_RECORD)
		ev->rec_gen++;
	op->gen = ev->rec_gen;
	op->ev = ev;
	ev->refs++;
	sim_stream_push(st, op);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	return event_op(hEvent, hStream, 0, OP_RECORD);
}

SIM_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	return event_op(hEvent, hStream, 1, OP_RECORD);
}

SIM_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent,
				   unsigned int flags)
{
	if (flags > 1)	/* CU_EVENT_WAIT_DEFAULT or CU_EVENT_WAIT_EXTERNAL */
		return CUDA_ERROR_INVALID_VALUE;
	return event_op(hEvent, hStream, 0, OP_WAIT);
}

SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent,
					unsigned int flags)
{
	if (flags > 1)
		return CUDA_ERROR_INVALID_VALUE;
	return event_op(hEvent, hStream, 1, OP_WAIT);
}

SIM_API CUresult cuEventQuery(CUevent hEvent)
{
	CUresult rc = sim_enter();
	struct sim_event *ev;

	if (rc != CUDA_SUCCESS)
		return rc;
	ev = sim_handle_get(hEvent, SH_EVENT);
	if (!ev)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	return sim_leave_rc(complete(ev) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

SIM_API CUresult cuEventSynchronize(CUevent hEvent)
{
	CUresult rc = sim_enter();
	struct sim_event *ev;

	if (rc != CUDA_SUCCESS)
		return rc;
	ev = sim_handle_get(hEvent, SH_EVENT);
	if (!ev)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	ev->refs++;
	sim_event_wait(ev, ev->rec_gen);
	sim_event_unref(ev);
	sim_pools_shrink();
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart,
				    CUevent hEnd)
{
	CUresult rc = sim_enter();
	struct sim_event *a, *b;

	if (rc != CUDA_SUCCESS)
		return rc;
	a = sim_handle_get(hStart, SH_EVENT);
	b = sim_handle_get(hEnd, SH_EVENT);
	if (!pMilliseconds)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (!a || !b || !a->rec_gen || !b->rec_gen ||
	    ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING))
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	if (!complete(a) || !complete(b))
		return sim_leave_rc(CUDA_ERROR_NOT_READY);
	*pMilliseconds = (float)((double)((int64_t)(b->t_ns - a->t_ns)) / 1e6);
	return sim_leave_rc(CUDA_SUCCESS);
}
