// SPDX-License-Identifier: Apache-2.0
/*
 * Contexts. A context occupies device memory of its own (GPUSLICE_CONTEXT_MIB
 * per context, charged before the driver creates it), and destroying a
 * context frees every allocation made in it, so their charges go with it.
 * The primary context (what the runtime API uses) is charged on its first
 * retain and uncharged when its last reference is released; a reset frees
 * what was made in it but leaves it retained.
 */
#include "shim.h"

static struct {
	int refs;
	CUcontext ctx;
	struct gs_card *card;
} primary[GS_MAX_CARDS * 4];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

#define NPRIMARY ((int)(sizeof(primary) / sizeof(primary[0])))

static CUresult created(struct gs_card *c, CUcontext *pctx, CUresult r)
{
	if (r != CUDA_SUCCESS) {
		gs_uncharge(c, gs_config()->context_bytes);
		return r;
	}
	gs_track_add(&(struct gs_alloc){ .kind = GS_CONTEXT,
					 .key = (uint64_t)(uintptr_t)*pctx,
					 .bytes = gs_config()->context_bytes,
					 .card = c });
	return r;
}

/* The card a new context on dev is charged to, or NULL when refused. */
static struct gs_card *charge_context(CUdevice dev, const char *what)
{
	struct gs_card *c = gs_card_for_device(dev);

	return gs_charge(c, gs_config()->context_bytes, what) ? c : NULL;
}

GS_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags,
				  CUdevice dev)
{
	__typeof__(&cuCtxCreate_v2) real = REAL(cuCtxCreate_v2);
	struct gs_card *c;

	if (!gs_enabled() || !pctx)
		return real(pctx, flags, dev);
	if (!(c = charge_context(dev, "cuCtxCreate (context)")))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return created(c, pctx, real(pctx, flags, dev));
}

GS_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx,
				  CUexecAffinityParam *paramsArray,
				  int numParams, unsigned int flags,
				  CUdevice dev)
{
	__typeof__(&cuCtxCreate_v3) real = REAL(cuCtxCreate_v3);
	struct gs_card *c;

	if (!gs_enabled() || !pctx)
		return real(pctx, paramsArray, numParams, flags, dev);
	if (!(c = charge_context(dev, "cuCtxCreate (context)")))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return created(c, pctx, real(pctx, paramsArray, numParams, flags, dev));
}

GS_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx,
				  CUctxCreateParams *ctxCreateParams,
				  unsigned int flags, CUdevice dev)
{
	__typeof__(&cuCtxCreate_v4) real = REAL(cuCtxCreate_v4);
	struct gs_card *c;

	if (!gs_enabled() || !pctx)
		return real(pctx, ctxCreateParams, flags, dev);
	if (!(c = charge_context(dev, "cuCtxCreate (context)")))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return created(c, pctx, real(pctx, ctxCreateParams, flags, dev));
}

/*
 * The records go before the driver is asked: once it has destroyed the
 * context it may hand the same handle to another thread's new context.
 */
GS_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	__typeof__(&cuCtxDestroy_v2) real = REAL(cuCtxDestroy_v2);
	void *owned, *queued;
	struct gs_alloc a;
	bool have;
	CUresult r;

	if (!gs_enabled())
		return real(ctx);
	gs_card_forget_ctx();
	gs_stream_forget();
	gs_gate_forget_ctx(ctx);
	owned = gs_track_detach_context(ctx);
	queued = gs_pending_detach_context(ctx);
	have = gs_track_take(GS_CONTEXT, (uint64_t)(uintptr_t)ctx, &a);
	r = real(ctx);
	gs_track_settle_detached(owned, r == CUDA_SUCCESS);
	gs_pending_settle_detached(queued);
	if (have && r == CUDA_SUCCESS)
		gs_uncharge(a.card, a.bytes);
	else if (have)
		gs_track_add(&a);
	return r;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	__typeof__(&cuDevicePrimaryCtxRetain) real =
		REAL(cuDevicePrimaryCtxRetain);
	struct gs_card *c = NULL;
	CUresult r;

	if (!gs_enabled() || !pctx || dev < 0 || dev >= NPRIMARY)
		return real(pctx, dev);
	pthread_mutex_lock(&primary_lock);
	if (!primary[dev].refs &&
	    !(c = charge_context(dev, "cuDevicePrimaryCtxRetain (context)"))) {
		pthread_mutex_unlock(&primary_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r = real(pctx, dev);
	if (r == CUDA_SUCCESS) {
		if (!primary[dev].refs++) {
			primary[dev].ctx = *pctx;
			primary[dev].card = c;
		}
	} else if (c) {
		gs_uncharge(c, gs_config()->context_bytes);
	}
	pthread_mutex_unlock(&primary_lock);
	return r;
}

/*
 * Asks the driver to release or reset the primary context of dev. A reset
 * frees everything made in the context but does not release it: whoever
 * retained it keeps a fresh one, and its footprint. The last release
 * destroys it, with everything made in it. The primary lock is held, so
 * no other thread retains it meanwhile.
 */
static CUresult primary_drop_locked(CUdevice dev, CUresult (*real)(CUdevice),
				    bool reset)
{
	bool last = !reset && primary[dev].refs == 1;
	void *owned = NULL, *queued = NULL;
	CUresult r;

	if (primary[dev].refs && (reset || last)) {
		gs_card_forget_ctx();
		gs_stream_forget();
		gs_gate_forget_ctx(primary[dev].ctx);
		owned = gs_track_detach_context(primary[dev].ctx);
		queued = gs_pending_detach_context(primary[dev].ctx);
	}
	r = real(dev);
	gs_track_settle_detached(owned, r == CUDA_SUCCESS);
	gs_pending_settle_detached(queued);
	if (r != CUDA_SUCCESS || reset || !primary[dev].refs)
		return r;
	if (last) {
		gs_uncharge(primary[dev].card, gs_config()->context_bytes);
		primary[dev].ctx = NULL;
		primary[dev].card = NULL;
	}
	primary[dev].refs--;
	return r;
}

static CUresult primary_drop(CUdevice dev, CUresult (*real)(CUdevice),
			     bool reset)
{
	CUresult r;

	if (!gs_enabled() || dev < 0 || dev >= NPRIMARY)
		return real(dev);
	pthread_mutex_lock(&primary_lock);
	r = primary_drop_locked(dev, real, reset);
	pthread_mutex_unlock(&primary_lock);
	return r;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	return primary_drop(dev, REAL(cuDevicePrimaryCtxRelease_v2), false);
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	return primary_drop(dev, REAL(cuDevicePrimaryCtxReset_v2), true);
}

void gs_contexts_before_fork(void)
{
	pthread_mutex_lock(&primary_lock);
}

void gs_contexts_after_fork_parent(void)
{
	pthread_mutex_unlock(&primary_lock);
}

void gs_contexts_after_fork_child(void)
{
	for (int i = 0; i < NPRIMARY; i++) {
		primary[i].refs = 0;
		primary[i].ctx = NULL;
		primary[i].card = NULL;
	}
	pthread_mutex_init(&primary_lock, NULL);
}
