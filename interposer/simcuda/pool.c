// SPDX-License-Identifier: Apache-2.0
/*
 * The stream-ordered allocator. A pool holds "reserved" physical memory,
 * charged to its device when it is device memory (pool_loc.c: host and
 * managed pools), of which "used" bytes are handed out. It grows in
 * 2 MiB steps when an allocation does not fit, and gives memory back only
 * at synchronisation points (down to its release threshold) or when
 * trimmed: exactly the behaviour that makes a pool's footprint differ from
 * the sum of live allocations, which a per-container cap has to account.
 *
 * Allocations are usable at once; frees are stream ordered and take effect
 * when the stream reaches them (see stream.c).
 */
#include <stdlib.h>

#include "sim.h"

/*
 * Only pinned memory on a device takes that device's memory: host pools
 * hold host memory, and managed pools migratable memory, which is not
 * modelled as resident anywhere (dev -1).
 */
struct sim_pool *sim_pool_new(const CUmemLocation *loc,
			      CUmemAllocationType type, int is_default)
{
	struct sim_pool *p = calloc(1, sizeof(*p));
	int dev = type == CU_MEM_ALLOCATION_TYPE_PINNED &&
			  loc->type == CU_MEM_LOCATION_TYPE_DEVICE ? loc->id : -1;

	if (!p)
		return NULL;
	if (sim_handle_add(p, SH_POOL, NULL, dev)) {
		free(p);
		return NULL;
	}
	p->dev = dev;
	p->loc = *loc;
	p->type = type;
	p->is_default = is_default;
	p->next = sim.pools;
	sim.pools = p;
	return p;
}

CUresult sim_pools_init(void)
{
	for (int d = 0; d < sim.ndev; d++) {
		CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, d };
		struct sim_pool *p = sim_pool_new(&loc,
						  CU_MEM_ALLOCATION_TYPE_PINNED, 1);

		if (!p)
			return CUDA_ERROR_OUT_OF_MEMORY;
		sim.def_pool[d] = sim.cur_pool[d] = p;
	}
	return CUDA_SUCCESS;
}

static void pool_unlink_free(struct sim_pool *p)
{
	struct sim_pool **pp = &sim.pools;

	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	sim_uncharge(p->dev, p->reserved);
	free(p);
}

/* reserved = max(roundup(used), min(reserved, roundup(keep))) */
static void pool_trim(struct sim_pool *p, uint64_t keep)
{
	uint64_t floor = sim_roundup(p->used, SIM_GRAN);
	uint64_t target = keep >= p->reserved ? p->reserved
					      : sim_roundup(keep, SIM_GRAN);

	if (target > p->reserved)
		target = p->reserved;
	if (target < floor)
		target = floor;
	if (target < p->reserved) {
		sim_uncharge(p->dev, p->reserved - target);
		p->reserved = target;
	}
}

void sim_pools_shrink(void)
{
	struct sim_pool *p = sim.pools, *next;

	for (; p; p = next) {
		next = p->next;
		if (p->destroyed && !p->used)
			pool_unlink_free(p);
		else
			pool_trim(p, p->threshold);
	}
}

/* An allocation of size bytes came back to p. */
void sim_pool_put(struct sim_pool *p, uint64_t size)
{
	p->used = p->used > size ? p->used - size : 0;
	if (p->destroyed && !p->used)
		pool_unlink_free(p);
}

/* Called entered; leaves. */
static CUresult pool_alloc(struct sim_pool *p, uint64_t size,
			   CUdeviceptr *out)
{
	uint64_t avail = p->reserved - p->used;
	CUresult rc;

	if (avail < size) {
		uint64_t grow = size - avail;

		if (p->dev >= 0 && grow > simst_capacity(sim_phys(p->dev)))
			return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
		grow = sim_roundup(grow, SIM_GRAN);
		rc = sim_charge(p->dev, grow);
		if (rc != CUDA_SUCCESS)
			return sim_leave_rc(rc);
		p->reserved += grow;
		if (p->reserved > p->reserved_high)
			p->reserved_high = p->reserved;
	}
	rc = sim_mem_insert(p->dev, size, SM_POOL, p, out);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	p->used += size;
	if (p->used > p->used_high)
		p->used_high = p->used;
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Entered with context c; resolves the stream; leaves on error. */
static CUresult alloc_stream(struct sim_ctx *c, CUdeviceptr *dptr,
			     size_t size, CUstream h, int ptds,
			     struct sim_stream **st)
{
	CUresult rc;

	if (!dptr || !size)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(h, ptds, c, st);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	return CUDA_SUCCESS;
}

/*
 * Called entered; leaves. Under capture the allocation is a node of the
 * graph, with an address and no memory until the graph runs (graph.c).
 */
static CUresult captured_alloc(struct sim_stream *st, int dev, size_t size,
			       CUdeviceptr *dptr, CUresult rc)
{
	/* Graph memory of a host or managed pool (dev -1) is not modelled. */
	if (rc == CUDA_SUCCESS && dev < 0)
		rc = CUDA_ERROR_NOT_SUPPORTED;
	if (rc == CUDA_SUCCESS)
		rc = sim_graph_add_alloc(sim_capture_graph(st), dev, size, dptr);
	return sim_leave_rc(rc);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream h,
			    int ptds)
{
	struct sim_stream *st;
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = alloc_stream(c, dptr, size, h, ptds, &st);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (sim_capture_redirect(st, &rc))
		return captured_alloc(st, st->ctx->dev, size, dptr, rc);
	return pool_alloc(sim.cur_pool[st->ctx->dev], size, dptr);
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize,
				 CUstream hStream)
{
	return alloc_async(dptr, bytesize, hStream, 0);
}

SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
				      CUstream hStream)
{
	return alloc_async(dptr, bytesize, hStream, 1);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size,
				CUmemoryPool pool, CUstream h, int ptds)
{
	struct sim_stream *st;
	struct sim_pool *p;
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	p = sim_handle_get(pool, SH_POOL);
	if (!p)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = alloc_stream(c, dptr, size, h, ptds, &st);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (sim_capture_redirect(st, &rc))
		return captured_alloc(st, p->dev, size, dptr, rc);
	return pool_alloc(p, size, dptr);
}

SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
					 CUmemoryPool pool, CUstream hStream)
{
	return alloc_from_pool(dptr, bytesize, pool, hStream, 0);
}

SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
					      size_t bytesize,
					      CUmemoryPool pool,
					      CUstream hStream)
{
	return alloc_from_pool(dptr, bytesize, pool, hStream, 1);
}

/*
 * The pointer is invalid at once (a second free fails), but its memory
 * returns to the pool only when the stream reaches the free. Linear
 * allocations are accepted too and are freed the same way.
 */
static CUresult free_async(CUdeviceptr dptr, CUstream h, int ptds)
{
	struct sim_stream *st;
	struct sim_entry *e;
	struct sim_op *op;
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = sim_stream_get(h, ptds, c, &st);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	if (sim_capture_redirect(st, &rc)) {
		if (rc == CUDA_SUCCESS)
			rc = sim_graph_add_free(sim_capture_graph(st), dptr);
		return sim_leave_rc(rc);
	}
	e = sim_table_get(&sim.mem, dptr);
	if (!e || e->kind == SM_MAPPED)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	/* A graph allocation's lifetime ends; its graph keeps the memory. */
	if (e->kind == SM_GRAPH)
		return sim_leave_rc(CUDA_SUCCESS);
	op = sim_op_new(OP_FREE);
	if (!op)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	op->pool = e->kind == SM_POOL ? e->owner : NULL;
	op->arg = e->len;
	op->dev = e->dev;
	sim_table_del(&sim.mem, e);
	sim_stream_push(st, op);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream, 0);
}

SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream, 1);
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool,
				 const CUmemPoolProps *poolProps)
{
	CUresult rc = sim_enter();
	struct sim_pool *p;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pool || !poolProps)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_pool_props_check(poolProps);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	p = sim_pool_new(&poolProps->location, poolProps->allocType, 0);
	if (!p)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	p->handles = poolProps->handleTypes;
	p->max_size = poolProps->maxSize;
	*pool = (CUmemoryPool)p;
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Outstanding allocations keep a destroyed pool's memory until freed. */
SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	CUresult rc = sim_enter();
	struct sim_pool *p;

	if (rc != CUDA_SUCCESS)
		return rc;
	p = sim_handle_get(pool, SH_POOL);
	if (!p || p->is_default)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	sim_handle_del(p);
	p->destroyed = 1;
	sim_pool_unslot(p);
	if (!p->used)
		pool_unlink_free(p);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	CUresult rc = sim_enter();
	struct sim_pool *p;

	if (rc != CUDA_SUCCESS)
		return rc;
	p = sim_handle_get(pool, SH_POOL);
	if (!p)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	pool_trim(p, minBytesToKeep);
	return sim_leave_rc(CUDA_SUCCESS);
}

static CUresult set_attr(struct sim_pool *p, CUmemPool_attribute attr,
			 const void *value)
{
	uint64_t v64;

	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		p->reuse[attr - 1] = *(const int *)value;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		p->threshold = *(const cuuint64_t *)value;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		/* Only a reset (to the current value) is allowed. */
		v64 = *(const cuuint64_t *)value;
		if (v64)
			return CUDA_ERROR_INVALID_VALUE;
		if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
			p->reserved_high = p->reserved;
		else
			p->used_high = p->used;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult get_attr(const struct sim_pool *p, CUmemPool_attribute attr,
			 void *value)
{
	cuuint64_t *v64 = value;

	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		*(int *)value = p->reuse[attr - 1];
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		*v64 = p->threshold;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
		*v64 = p->reserved;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		*v64 = p->reserved_high;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		*v64 = p->used;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		*v64 = p->used_high;
		return CUDA_SUCCESS;
	default:
		return sim_pool_loc_attr(p, attr, value);
	}
}

static CUresult pool_attr(CUmemoryPool pool, CUmemPool_attribute attr,
			  void *value, int set)
{
	CUresult rc = sim_enter();
	struct sim_pool *p;

	if (rc != CUDA_SUCCESS)
		return rc;
	p = sim_handle_get(pool, SH_POOL);
	if (!p || !value)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = set ? set_attr(p, attr, value) : get_attr(p, attr, value);
	return sim_leave_rc(rc);
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool,
				       CUmemPool_attribute attr, void *value)
{
	return pool_attr(pool, attr, value, 1);
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool,
				       CUmemPool_attribute attr, void *value)
{
	return pool_attr(pool, attr, value, 0);
}

static CUresult dev_pool(CUmemoryPool *out, CUdevice dev, int def)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (!sim_dev_ok(dev))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	*out = (CUmemoryPool)(def ? sim.def_pool[dev] : sim.cur_pool[dev]);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out,
					   CUdevice dev)
{
	return dev_pool(pool_out, dev, 1);
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	return dev_pool(pool, dev, 0);
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	CUresult rc = sim_enter();
	struct sim_pool *p;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_dev_ok(dev))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	/* Only a pool of the device's own pinned memory ("local to it"). */
	p = sim_handle_get(pool, SH_POOL);
	if (!p || p->dev != dev)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	sim.cur_pool[dev] = p;
	return sim_leave_rc(CUDA_SUCCESS);
}
