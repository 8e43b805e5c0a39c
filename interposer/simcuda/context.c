// SPDX-License-Identifier: Apache-2.0
/*
 * Contexts: the per-thread current-context stack, created contexts and the
 * per-device primary contexts. A context costs SIMCUDA_CONTEXT_MIB of
 * device memory while it lives, as a real one does (its local memory,
 * printf buffer and so on). Destroying it frees what was allocated in it.
 *
 * Context structures are never returned to malloc: a dead one may still sit
 * on another thread's stack, where it must stay safe to look at; dead ones
 * are recycled for new contexts instead, as a driver reuses handles.
 *
 * The first context on a device opens the device's node, when it exists,
 * as the real driver does (nodes.c); refused, the context is not made.
 */
#include <stdlib.h>

#include "nodes.h"
#include "sim.h"

#define SIM_CTX_STACK 64

struct sim_tls {
	unsigned int gen;	/* sim.gen when this stack was last valid */
	int depth;
	struct sim_ctx *stack[SIM_CTX_STACK];
};

static __thread struct sim_tls tls;
static struct sim_ctx *ctx_free_list;

static struct sim_tls *tls_get(void)
{
	if (tls.gen != sim.gen) {
		tls.gen = sim.gen;
		tls.depth = 0;
	}
	return &tls;
}

struct sim_ctx *sim_ctx_current(void)
{
	struct sim_tls *t = tls_get();
	struct sim_ctx *c = t->depth ? t->stack[t->depth - 1] : NULL;

	return c && c->alive ? c : NULL;
}

static struct sim_ctx *ctx_lookup(CUcontext h)
{
	return sim_handle_get(h, SH_CTX);
}

static CUresult push(struct sim_ctx *c)
{
	struct sim_tls *t = tls_get();

	if (t->depth == SIM_CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	t->stack[t->depth++] = c;
	return CUDA_SUCCESS;
}

/* Takes c off the calling thread's stack wherever it appears. */
static void unstack(struct sim_ctx *c)
{
	struct sim_tls *t = tls_get();
	int j = 0;

	for (int i = 0; i < t->depth; i++)
		if (t->stack[i] != c)
			t->stack[j++] = t->stack[i];
	t->depth = j;
}

/* Frees the handles that live inside c: arrays, modules and events. */
static void drop_handles(struct sim_ctx *c)
{
	for (;;) {
		struct sim_entry *e = NULL;

		for (size_t i = 0; i < sim.handles.n && !e; i++)
			if (sim.handles.v[i].owner == c)
				e = &sim.handles.v[i];
		if (!e)
			return;
		switch (e->kind) {
		case SH_ARRAY:
		case SH_MIPMAP:
			sim_array_free(e);
			break;
		case SH_MODULE:
			sim_module_free(e);
			break;
		case SH_EVENT:
			sim_event_free(e);
			break;
		default:
			sim_table_del(&sim.handles, e);
			break;
		}
	}
}

/* A context comes (back) to life: default limits, a new epoch (its old
 * per-thread streams are gone). The caller charged its footprint. */
static void activate(struct sim_ctx *c)
{
	sim_limits_reset(c);
	c->alive = 1;
	c->epoch++;
}

/*
 * Ends a live context. Work already queued is not waited for here (the
 * callers synchronise first); streams are closed and finish on their own.
 */
static void teardown(struct sim_ctx *c)
{
	c->alive = 0;
	sim_limits_reset(c);
	sim_streams_close_ctx(c);
	sim_mem_drop_ctx(c);
	drop_handles(c);
	sim_libraries_drop_ctx(c);
	sim_uncharge(c->dev, simst_ctx_bytes());
	c->legacy = NULL;
}

static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
	CUresult rc = sim_enter();
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (!sim_dev_ok(dev))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	if (tls_get()->depth == SIM_CTX_STACK)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	if (simnode_dev(sim_phys(dev)))
		return sim_leave_rc(CUDA_ERROR_OPERATING_SYSTEM);
	c = ctx_free_list;
	if (!c && !(c = calloc(1, sizeof(*c))))
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	if (c == ctx_free_list)
		ctx_free_list = c->next_free;
	rc = sim_charge(dev, simst_ctx_bytes());
	if (rc == CUDA_SUCCESS && sim_handle_add(c, SH_CTX, NULL, dev)) {
		sim_uncharge(dev, simst_ctx_bytes());
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc != CUDA_SUCCESS) {
		c->next_free = ctx_free_list;
		ctx_free_list = c;
		return sim_leave_rc(rc);
	}
	c->dev = dev;
	activate(c);
	push(c);
	*pctx = (CUcontext)c;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags,
				CUdevice dev)
{
	(void)flags;	/* scheduling and mapping flags change nothing here */
	return ctx_create(pctx, dev);
}

SIM_API CUresult cuCtxCreate_v3(CUcontext *pctx,
				CUexecAffinityParam *paramsArray,
				int numParams, unsigned int flags,
				CUdevice dev)
{
	(void)paramsArray;
	(void)numParams;
	(void)flags;
	return ctx_create(pctx, dev);
}

SIM_API CUresult cuCtxCreate_v4(CUcontext *pctx,
				CUctxCreateParams *ctxCreateParams,
				unsigned int flags, CUdevice dev)
{
	(void)ctxCreateParams;
	(void)flags;
	return ctx_create(pctx, dev);
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	CUresult rc = sim_enter();
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	c = ctx_lookup(ctx);
	if (!c || c->primary || !c->alive)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	sim_stream_sync_ctx(c);
	/* Another thread may have destroyed it while we waited. */
	if (ctx_lookup(ctx) != c || !c->alive)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	teardown(c);
	unstack(c);
	sim_handle_del(c);
	c->next_free = ctx_free_list;
	ctx_free_list = c;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	CUresult rc = sim_enter();
	struct sim_tls *t;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	t = tls_get();
	*pctx = t->depth ? (CUcontext)t->stack[t->depth - 1] : NULL;
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Replaces the top of the stack; NULL pops it, as documented. */
SIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	CUresult rc = sim_enter();
	struct sim_tls *t;
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	t = tls_get();
	if (!ctx) {
		if (t->depth)
			t->depth--;
		return sim_leave_rc(CUDA_SUCCESS);
	}
	c = ctx_lookup(ctx);
	if (!c)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	if (t->depth)
		t->stack[t->depth - 1] = c;
	else
		push(c);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	CUresult rc = sim_enter();
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	c = ctx_lookup(ctx);
	if (!c)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	return sim_leave_rc(push(c));
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	CUresult rc = sim_enter();
	struct sim_tls *t;

	if (rc != CUDA_SUCCESS)
		return rc;
	t = tls_get();
	if (!t->depth)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	t->depth--;
	if (pctx)
		*pctx = (CUcontext)t->stack[t->depth];
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuCtxGetDevice(CUdevice *device)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!device)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	*device = c->dev;
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Waits for every stream of the process, then pools give memory back. */
SIM_API CUresult cuCtxSynchronize(void)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = sim_capture_sync_ctx(c);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	sim_stream_sync_ctx(NULL);
	sim_pools_shrink();
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult rc = sim_enter();
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (!sim_dev_ok(dev))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	c = &sim.primary[dev];
	if (c->refs == 0) {
		if (simnode_dev(sim_phys(dev)))
			return sim_leave_rc(CUDA_ERROR_OPERATING_SYSTEM);
		rc = sim_charge(dev, simst_ctx_bytes());
		if (rc != CUDA_SUCCESS)
			return sim_leave_rc(rc);
		activate(c);
	}
	c->refs++;
	*pctx = (CUcontext)c;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult rc = sim_enter();
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_dev_ok(dev))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	c = &sim.primary[dev];
	if (c->refs == 1)
		sim_stream_sync_ctx(c);
	/* Rechecked: the wait above let other threads run. */
	if (c->refs == 0)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	if (--c->refs == 0 && c->alive)
		teardown(c);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CUresult rc = sim_enter();
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_dev_ok(dev))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	c = &sim.primary[dev];
	if (c->alive)
		sim_stream_sync_ctx(c);
	if (c->alive)
		teardown(c);
	/*
	 * A reset does not release the context: whoever retained it still
	 * holds a usable, fresh one.
	 */
	if (c->refs && sim_charge(dev, simst_ctx_bytes()) == CUDA_SUCCESS) {
		activate(c);
	}
	return sim_leave_rc(CUDA_SUCCESS);
}
