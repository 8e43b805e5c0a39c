// SPDX-License-Identifier: Apache-2.0
/*
 * Events. Each cuEventRecord starts a new generation of the event; the
 * record operation completes it when its stream reaches it, stamping the
 * CLOCK_MONOTONIC time. Queries and waits concern the latest generation,
 * as in CUDA, where an event always reflects its most recent record.
 *
 * Recorded on a capturing stream, an event becomes a captured event: a
 * stream that waits on it joins the capture (capture.c), and querying,
 * synchronising or timing it is illegal (CUDA_ERROR_CAPTURED_EVENT, and
 * the capture, still under way, is invalidated) until it is recorded
 * again outside a capture.
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
	uint64_t cap_id;	/* last recorded in this capture (0: none) */
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

int sim_event_wait(struct sim_event *ev, uint64_t gen)
{
	int waited = ev->done_gen < gen;

	while (ev->done_gen < gen)
		pthread_cond_wait(&sim.progress, &sim.lock);
	return waited;
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
	if (kind == OP_WAIT && ev->cap_id)
		return sim_leave_rc(sim_capture_join(st, ev->cap_id));
	if (sim_capture_redirect(st, &rc)) {
		/* A record in a capture marks the event, a wait changes nothing. */
		if (rc == CUDA_SUCCESS && kind == OP_RECORD)
			ev->cap_id = sim_capture_id(st);
		return sim_leave_rc(rc);
	}
	if (kind == OP_RECORD)
		ev->cap_id = 0;
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

/*
 * Whether ev may be queried or waited for now (entered): not a captured
 * event, and not a call the capture mode prohibits (an unsafe call).
 */
static CUresult observable(const struct sim_event *ev)
{
	if (ev->cap_id) {
		sim_capture_invalidate_id(ev->cap_id);
		return CUDA_ERROR_CAPTURED_EVENT;
	}
	return sim_capture_unsafe();
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
	rc = observable(ev);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
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
	rc = observable(ev);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
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
	if (a && b && (a->cap_id || b->cap_id))
		return sim_leave_rc(CUDA_ERROR_CAPTURED_EVENT);
	if (!a || !b || !a->rec_gen || !b->rec_gen ||
	    ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING))
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	if (!complete(a) || !complete(b))
		return sim_leave_rc(CUDA_ERROR_NOT_READY);
	*pMilliseconds = (float)((double)((int64_t)(b->t_ns - a->t_ns)) / 1e6);
	return sim_leave_rc(CUDA_SUCCESS);
}
