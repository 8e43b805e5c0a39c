// SPDX-License-Identifier: Apache-2.0
/*
 * Stream capture (CUDA graphs: PyTorch's torch.cuda.graph, vLLM, SGLang,
 * TensorRT-LLM, llama.cpp). Between cuStreamBeginCapture and
 * cuStreamEndCapture a capturing stream's work is recorded into a graph,
 * not run, and the driver forbids what would observe or wait for it: a
 * synchronisation of the stream or of its context, a query of an event
 * recorded in it, work on the legacy stream while a blocking stream
 * captures, and, by the thread's capture mode, "potentially unsafe" calls
 * such as event queries from any thread. Any of those fails and
 * invalidates the application's capture. So the shim, while anything
 * captures:
 *
 *  - lets captured launches through ungated and unbudgeted: they run at
 *    cuGraphLaunch, which is gated like a kernel (gs_captured);
 *  - makes its own driver calls in relaxed mode, where the thread is not
 *    prohibited from unsafe calls (gs_relaxed_enter/leave), and never
 *    synchronises a context (the gate's fence waits for events recorded on
 *    the streams it launched in, gate_fence.c);
 *  - records nothing on a capturing stream (stream-ordered frees under
 *    capture are graph nodes, pool.c);
 *  - before a capture begins, records the fence's event on the stream
 *    (and, for a blocking stream, on the legacy stream), so that what was
 *    queued there before the capture is still waited for.
 *
 * The count of captures under way costs every launch one load; the
 * per-launch question to the driver is asked only while it is not zero.
 */
#include "shim.h"

static int captures;	/* begun and not seen ended (atomic) */

void gs_relaxed_enter(struct gs_relaxed *r)
{
	r->mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	r->swapped = gs_real.cuThreadExchangeStreamCaptureMode &&
		     gs_real.cuThreadExchangeStreamCaptureMode(&r->mode) ==
			     CUDA_SUCCESS;
}

void gs_relaxed_leave(struct gs_relaxed *r)
{
	if (r->swapped)
		gs_real.cuThreadExchangeStreamCaptureMode(&r->mode);
}

bool gs_capture_any(void)
{
	return __atomic_load_n(&captures, __ATOMIC_ACQUIRE) > 0;
}

/*
 * Whether work for s is captured. An error (the legacy stream while a
 * blocking stream captures) says no: such a launch fails in the driver,
 * and gating it costs nothing.
 */
bool gs_captured(CUstream s, bool ptsz)
{
	__typeof__(&cuStreamIsCapturing) is =
		ptsz ? gs_real.cuStreamIsCapturing_ptsz :
		       gs_real.cuStreamIsCapturing;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

	if (__builtin_expect(!gs_capture_any(), 1) || !is)
		return false;
	return is(s, &st) == CUDA_SUCCESS &&
	       st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* A capture began (rc from the driver): counted until seen ended. */
static CUresult begun(CUresult rc)
{
	if (rc == CUDA_SUCCESS)
		__atomic_add_fetch(&captures, 1, __ATOMIC_ACQ_REL);
	return rc;
}

/*
 * Whether s still captures after cuStreamEndCapture: an unmatched or
 * wrong-thread end leaves the capture under way.
 */
static CUresult ended(CUstream s, bool ptsz, CUresult rc)
{
	__typeof__(&cuStreamIsCapturing) is =
		ptsz ? gs_real.cuStreamIsCapturing_ptsz :
		       gs_real.cuStreamIsCapturing;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

	if (rc == CUDA_ERROR_STREAM_CAPTURE_UNMATCHED ||
	    rc == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD ||
	    rc == CUDA_ERROR_ILLEGAL_STATE)
		return rc;
	if (rc != CUDA_SUCCESS && is && is(s, &st) == CUDA_SUCCESS &&
	    st != CU_STREAM_CAPTURE_STATUS_NONE)
		return rc;
	if (__atomic_load_n(&captures, __ATOMIC_ACQUIRE) > 0)
		__atomic_sub_fetch(&captures, 1, __ATOMIC_ACQ_REL);
	return rc;
}

static void before(CUstream s, bool ptsz)
{
	if (gs_enabled())
		gs_gate_before_capture(s, ptsz);
}

GS_EXPORT CUresult cuStreamBeginCapture(CUstream hStream)
{
	__typeof__(&cuStreamBeginCapture) real = REAL(cuStreamBeginCapture);

	before(hStream, false);
	return begun(real(hStream));
}

GS_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
	__typeof__(&cuStreamBeginCapture_ptsz) real =
		REAL(cuStreamBeginCapture_ptsz);

	before(hStream, true);
	return begun(real(hStream));
}

GS_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream,
					   CUstreamCaptureMode mode)
{
	__typeof__(&cuStreamBeginCapture_v2) real =
		REAL(cuStreamBeginCapture_v2);

	before(hStream, false);
	return begun(real(hStream, mode));
}

GS_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream,
						CUstreamCaptureMode mode)
{
	__typeof__(&cuStreamBeginCapture_v2_ptsz) real =
		REAL(cuStreamBeginCapture_v2_ptsz);

	before(hStream, true);
	return begun(real(hStream, mode));
}

GS_EXPORT CUresult cuStreamBeginCaptureToGraph(
	CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
	const CUgraphEdgeData *dependencyData, size_t numDependencies,
	CUstreamCaptureMode mode)
{
	__typeof__(&cuStreamBeginCaptureToGraph) real =
		REAL(cuStreamBeginCaptureToGraph);

	before(hStream, false);
	return begun(real(hStream, hGraph, dependencies, dependencyData,
			  numDependencies, mode));
}

GS_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(
	CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
	const CUgraphEdgeData *dependencyData, size_t numDependencies,
	CUstreamCaptureMode mode)
{
	__typeof__(&cuStreamBeginCaptureToGraph_ptsz) real =
		REAL(cuStreamBeginCaptureToGraph_ptsz);

	before(hStream, true);
	return begun(real(hStream, hGraph, dependencies, dependencyData,
			  numDependencies, mode));
}

GS_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	__typeof__(&cuStreamEndCapture) real = REAL(cuStreamEndCapture);

	return ended(hStream, false, real(hStream, phGraph));
}

GS_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	__typeof__(&cuStreamEndCapture_ptsz) real =
		REAL(cuStreamEndCapture_ptsz);

	return ended(hStream, true, real(hStream, phGraph));
}

/* A forked child has no capture under way (the driver does not carry over). */
void gs_capture_after_fork_child(void)
{
	captures = 0;
}
