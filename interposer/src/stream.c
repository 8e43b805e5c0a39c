// SPDX-License-Identifier: Apache-2.0
/*
 * Which card a launch is on. A launch runs in the context of its stream:
 * for the special streams (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD)
 * that is the calling thread's current context; an explicit stream names
 * its own, which may be another device's, and a CUkernel launched with no
 * current context at all (CUDA 12's context-independent loading) runs in
 * it. So the gate asks the stream, not the thread.
 *
 * A stream's context never changes while it lives; each thread keeps the
 * answer for the last explicit stream it launched on, forgotten when any
 * stream or context is destroyed (the driver may hand the same handle out
 * again), so a gated launch on one stream costs no extra driver call.
 */
#include "shim.h"

static unsigned int stream_gen = 1;
static __thread CUstream tls_stream;
static __thread CUcontext tls_stream_ctx;
static __thread CUdevice tls_stream_dev;
static __thread unsigned int tls_stream_gen;

void gs_stream_forget(void)
{
	__atomic_add_fetch(&stream_gen, 1, __ATOMIC_ACQ_REL);
}

bool gs_stream_special(CUstream s)
{
	return !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* The device of ctx, current or not (pushed for the question). */
static bool ctx_device(CUcontext ctx, CUdevice *dev)
{
	CUcontext cur = NULL, out;
	bool ok;

	if (gs_real.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx)
		return gs_real.cuCtxGetDevice(dev) == CUDA_SUCCESS;
	if (!gs_real.cuCtxPushCurrent_v2 || !gs_real.cuCtxPopCurrent_v2 ||
	    gs_real.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS)
		return false;
	ok = gs_real.cuCtxGetDevice(dev) == CUDA_SUCCESS;
	gs_real.cuCtxPopCurrent_v2(&out);
	return ok;
}

bool gs_stream_device(CUstream s, bool ptsz, CUcontext *ctx, CUdevice *dev)
{
	unsigned int gen = __atomic_load_n(&stream_gen, __ATOMIC_ACQUIRE);
	__typeof__(&cuStreamGetCtx) get_ctx =
		ptsz ? gs_real.cuStreamGetCtx_ptsz : gs_real.cuStreamGetCtx;

	*ctx = NULL;
	if (gs_stream_special(s) || !get_ctx) {
		return gs_real.cuCtxGetCurrent &&
		       gs_real.cuCtxGetCurrent(ctx) == CUDA_SUCCESS && *ctx &&
		       gs_real.cuCtxGetDevice(dev) == CUDA_SUCCESS;
	}
	if (s == tls_stream && gen == tls_stream_gen) {
		*ctx = tls_stream_ctx;
		*dev = tls_stream_dev;
		return true;
	}
	if (get_ctx(s, ctx) != CUDA_SUCCESS || !*ctx || !ctx_device(*ctx, dev))
		return false;	/* not a stream: the driver will say so */
	tls_stream_ctx = *ctx;
	tls_stream_dev = *dev;
	tls_stream = s;
	tls_stream_gen = gen;
	return true;
}

struct gs_card *gs_launch_card(CUstream s, bool ptsz, CUcontext *ctx)
{
	CUdevice dev;

	if (gs_stream_special(s))
		return gs_current_card(ctx);	/* cached per thread there */
	return gs_stream_device(s, ptsz, ctx, &dev) ? gs_card_for_device(dev) :
						       NULL;
}

/* Forgotten first: once destroyed, the handle may be another stream's. */
GS_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
	__typeof__(&cuStreamDestroy_v2) real = REAL(cuStreamDestroy_v2);

	if (gs_enabled()) {
		gs_stream_forget();
		gs_gate_forget_stream(hStream);
	}
	return real(hStream);
}
