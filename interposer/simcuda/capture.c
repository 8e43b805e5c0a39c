// SPDX-License-Identifier: Apache-2.0
/*
 * Stream capture, as the driver API documents it (cuStreamBeginCapture,
 * cuThreadExchangeStreamCaptureMode, the programming guide's "Prohibited
 * and Unhandled Operations"):
 *
 *  - between cuStreamBeginCapture_v2 and cuStreamEndCapture, work for a
 *    capturing stream is not run but recorded as nodes of the capture's
 *    graph (launches, stream-ordered allocations and frees, host
 *    functions); another stream joins the capture when it waits on an
 *    event recorded in it. The legacy stream cannot be captured;
 *  - synchronising with or querying a capturing stream, a context with a
 *    capturing stream (cuCtxSynchronize), or an event last recorded in a
 *    capture is illegal whatever the mode: the call fails and the capture
 *    is invalidated; so is any work for the legacy stream of a context
 *    whose blocking stream captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
 *  - "potentially unsafe" calls (cuMemAlloc, cuMemFree, synchronisations,
 *    event queries) are prohibited by the calling thread's interaction
 *    mode (cuThreadExchangeStreamCaptureMode, default global): global if
 *    the thread has a capture of its own not begun relaxed, or any other
 *    thread has a global one; thread-local if the thread has such a capture
 *    of its own; relaxed never. A prohibited call fails with
 *    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures
 *    that prohibit it;
 *  - an invalidated capture refuses further work
 *    (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) until cuStreamEndCapture,
 *    which ends it with that error and no graph. A capture not begun
 *    relaxed must be ended by the thread that began it.
 *
 * Everything here runs under sim.lock.
 */
#include <stdlib.h>

#include "sim.h"

struct sim_capture {
	struct sim_capture *next;	/* in sim.captures */
	uint64_t id;
	struct sim_graph *graph;
	int own_graph;		/* made by the capture, not ...ToGraph's */
	struct sim_stream *origin;
	int mode;
	pthread_t thread;	/* who began it */
	int invalid;
};

/* The calling thread's interaction mode; 0 is the default, global. */
static __thread int tls_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

uint64_t sim_capture_id(const struct sim_stream *st)
{
	return st->cap ? st->cap->id : 0;
}

struct sim_graph *sim_capture_graph(struct sim_stream *st)
{
	return st->cap ? st->cap->graph : NULL;
}

static struct sim_capture *by_id(uint64_t id)
{
	struct sim_capture *c;

	for (c = sim.captures; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

int sim_capture_live(uint64_t id)
{
	return id && by_id(id);
}

void sim_capture_invalidate_id(uint64_t id)
{
	struct sim_capture *c = id ? by_id(id) : NULL;

	if (c)
		c->invalid = 1;
}

static int blocking(const struct sim_stream *st)
{
	return !(st->flags & CU_STREAM_NON_BLOCKING);
}

/*
 * Invalidates every capture of a blocking stream of ctx, which the legacy
 * stream of ctx may not come to depend on; 1 when there was one.
 */
static int implicit(struct sim_ctx *ctx)
{
	int found = 0;

	for (struct sim_stream *s = sim.streams; s; s = s->next) {
		if (s->ctx == ctx && s->cap && !s->legacy && blocking(s)) {
			s->cap->invalid = 1;
			found = 1;
		}
	}
	return found;
}

int sim_capture_redirect(struct sim_stream *st, CUresult *rc)
{
	if (st->cap) {
		*rc = st->cap->invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED :
					 CUDA_SUCCESS;
		return 1;
	}
	if (st->legacy && sim.captures && implicit(st->ctx)) {
		*rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
		return 1;
	}
	return 0;
}

CUresult sim_capture_kernel(struct sim_stream *st, uint64_t duration_ns)
{
	return sim_graph_add_kernel(st->cap->graph, st->ctx->dev, duration_ns);
}

CUresult sim_capture_unsafe(void)
{
	pthread_t self = pthread_self();
	int prohibited = 0;

	if (tls_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_SUCCESS;
	for (struct sim_capture *c = sim.captures; c; c = c->next) {
		int mine = pthread_equal(c->thread, self);

		if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
		    (!mine && tls_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
		     c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
			c->invalid = 1;
			prohibited = 1;
		}
	}
	return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED :
			    CUDA_SUCCESS;
}

CUresult sim_capture_sync_stream(struct sim_stream *st)
{
	if (st->cap) {
		st->cap->invalid = 1;
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	if (st->legacy && sim.captures && implicit(st->ctx))
		return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	return sim_capture_unsafe();
}

CUresult sim_capture_sync_ctx(struct sim_ctx *ctx)
{
	int found = 0;

	for (struct sim_stream *s = sim.streams; s; s = s->next) {
		if (s->cap && (!ctx || s->ctx == ctx)) {
			s->cap->invalid = 1;
			found = 1;
		}
	}
	if (found)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	return sim_capture_unsafe();
}

CUresult sim_capture_join(struct sim_stream *st, uint64_t id)
{
	struct sim_capture *c = by_id(id);

	if (!c || st->cap == c)
		return CUDA_SUCCESS;
	if (st->cap) {
		st->cap->invalid = c->invalid = 1;
		return CUDA_ERROR_STREAM_CAPTURE_MERGE;
	}
	if (st->legacy) {
		c->invalid = 1;
		return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	}
	if (c->invalid)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	st->cap = c;
	return CUDA_SUCCESS;
}

/* Takes every stream out of c and c out of the list; frees c. */
static void capture_end(struct sim_capture *c)
{
	struct sim_capture **pp = &sim.captures;

	for (struct sim_stream *s = sim.streams; s; s = s->next)
		if (s->cap == c)
			s->cap = NULL;
	while (*pp != c)
		pp = &(*pp)->next;
	*pp = c->next;
	sim_stream_unref(c->origin);
	free(c);
}

void sim_capture_stream_gone(struct sim_stream *st)
{
	struct sim_capture *c = st->cap;

	if (!c)
		return;
	if (c->origin != st) {
		st->cap = NULL;
		c->invalid = 1;
		return;
	}
	if (c->own_graph)
		sim_graph_destroy(c->graph);
	capture_end(c);
}

/* Entered: begins capturing st into graph g (NULL: a new graph). */
static CUresult begin(struct sim_stream *st, struct sim_graph *g, int mode)
{
	struct sim_capture *c;

	if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL ||
	    mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (st->legacy)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (st->cap)
		return CUDA_ERROR_ILLEGAL_STATE;
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->own_graph = !g;
	c->graph = g ? g : sim_graph_new();
	if (!c->graph) {
		free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	c->id = ++sim.next_capture_id;
	c->mode = mode;
	c->thread = pthread_self();
	c->origin = st;
	sim_stream_ref(st);
	st->cap = c;
	c->next = sim.captures;
	sim.captures = c;
	return CUDA_SUCCESS;
}

static CUresult begin_capture(CUstream h, int ptds, CUgraph hg, int mode)
{
	struct sim_graph *g = NULL;
	struct sim_stream *st;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (hg && !(g = sim_handle_get(hg, SH_GRAPH)))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc == CUDA_SUCCESS)
		rc = begin(st, g, mode);
	return sim_leave_rc(rc);
}

/* The first entry point (CUDA 10.0) had no mode: taken as global. */
SIM_API CUresult cuStreamBeginCapture(CUstream hStream)
{
	return begin_capture(hStream, 0, NULL, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

SIM_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
	return begin_capture(hStream, 1, NULL, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

SIM_API CUresult cuStreamBeginCapture_v2(CUstream hStream,
					 CUstreamCaptureMode mode)
{
	return begin_capture(hStream, 0, NULL, mode);
}

SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream,
					      CUstreamCaptureMode mode)
{
	return begin_capture(hStream, 1, NULL, mode);
}

/* Dependencies are not modelled: nodes run in the order they were added. */
static CUresult begin_to_graph(CUstream h, int ptds, CUgraph hGraph,
			       const CUgraphNode *dependencies,
			       size_t numDependencies, CUstreamCaptureMode mode)
{
	if (!hGraph || (numDependencies && !dependencies))
		return CUDA_ERROR_INVALID_VALUE;
	return begin_capture(h, ptds, hGraph, mode);
}

SIM_API CUresult cuStreamBeginCaptureToGraph(
	CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
	const CUgraphEdgeData *dependencyData, size_t numDependencies,
	CUstreamCaptureMode mode)
{
	(void)dependencyData;
	return begin_to_graph(hStream, 0, hGraph, dependencies,
			      numDependencies, mode);
}

SIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(
	CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
	const CUgraphEdgeData *dependencyData, size_t numDependencies,
	CUstreamCaptureMode mode)
{
	(void)dependencyData;
	return begin_to_graph(hStream, 1, hGraph, dependencies,
			      numDependencies, mode);
}

/* Entered: ends the capture begun on st. */
static CUresult end(struct sim_stream *st, CUgraph *phGraph)
{
	struct sim_capture *c = st->cap;
	struct sim_graph *g;

	if (!c)
		return CUDA_ERROR_ILLEGAL_STATE;
	if (c->origin != st) {
		c->invalid = 1;
		return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
	}
	if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
	    !pthread_equal(c->thread, pthread_self())) {
		c->invalid = 1;
		return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
	}
	g = c->graph;
	if (c->invalid) {
		if (c->own_graph)
			sim_graph_destroy(g);
		capture_end(c);
		*phGraph = NULL;
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	}
	capture_end(c);
	*phGraph = (CUgraph)g;
	return CUDA_SUCCESS;
}

static CUresult end_capture(CUstream h, int ptds, CUgraph *phGraph)
{
	struct sim_stream *st;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!phGraph)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc == CUDA_SUCCESS)
		rc = end(st, phGraph);
	return sim_leave_rc(rc);
}

SIM_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	return end_capture(hStream, 0, phGraph);
}

SIM_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	return end_capture(hStream, 1, phGraph);
}

/*
 * Legal during any capture. The legacy stream of a context whose blocking
 * stream captures answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (a query
 * invalidates nothing).
 */
static CUresult is_capturing(CUstream h, int ptds,
			     CUstreamCaptureStatus *status)
{
	struct sim_stream *st;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!status)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	if (st->legacy) {
		for (struct sim_stream *s = sim.streams; s; s = s->next)
			if (s->ctx == st->ctx && s->cap && blocking(s))
				return sim_leave_rc(
					CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	}
	*status = !st->cap ? CU_STREAM_CAPTURE_STATUS_NONE :
		  st->cap->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED :
				     CU_STREAM_CAPTURE_STATUS_ACTIVE;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuStreamIsCapturing(CUstream hStream,
				     CUstreamCaptureStatus *captureStatus)
{
	return is_capturing(hStream, 0, captureStatus);
}

SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream,
					  CUstreamCaptureStatus *captureStatus)
{
	return is_capturing(hStream, 1, captureStatus);
}

SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	int old;

	if (!mode || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL ||
	    *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	old = tls_mode;
	tls_mode = *mode;
	*mode = (CUstreamCaptureMode)old;
	return CUDA_SUCCESS;
}
