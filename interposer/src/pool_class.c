// SPDX-License-Identifier: Apache-2.0
/*
 * What a stream-ordered pool's memory is, by what the driver says of the
 * pool, never by which device happens to be current: pinned memory of a
 * device is charged to that device's card, whichever device's stream
 * allocates it; host memory (the host, a host NUMA node) is not a card's;
 * managed memory is refused, as cuMemAllocManaged is.
 *
 * CUDA 13 drivers answer a pool's allocation type and location
 * (CU_MEMPOOL_ATTR_ALLOCATION_TYPE, _LOCATION_TYPE, _LOCATION_ID). Older
 * ones refuse those attributes; the shim then goes by the location a pool
 * was created or looked up for, else by searching the devices' default
 * and current pools, else it charges the current device: a pool is never
 * taken for host memory on a guess.
 *
 * Here too are the CUDA 13 calls that name a pool by location and
 * allocation type: asking for a managed pool is refused, and the pool
 * they answer is recorded with what it is.
 */
#include "shim.h"

/* The device the calling thread's context is on, else 0. */
static CUdevice current_device(void)
{
	__typeof__(&cuCtxGetDevice) get = gs_real.cuCtxGetDevice;
	CUdevice dev = 0;

	if (get && get(&dev) != CUDA_SUCCESS)
		dev = 0;
	return dev;
}

static void by_location(const CUmemLocation *loc, CUmemAllocationType type,
			struct gs_pool_class *pc)
{
	if (type == CU_MEM_ALLOCATION_TYPE_MANAGED) {
		pc->kind = GS_POOL_MANAGED;
		return;
	}
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		pc->kind = GS_POOL_DEVICE;
		pc->dev = loc->id;
		return;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		pc->kind = GS_POOL_HOST;
		return;
	default:
		/* A location the shim does not know: charged, never passed. */
		pc->kind = GS_POOL_DEVICE;
		pc->dev = current_device();
	}
}

static bool attr(CUmemoryPool pool, CUmemPool_attribute a, void *value)
{
	return gs_real.cuMemPoolGetAttribute(pool, a, value) == CUDA_SUCCESS;
}

/* False when the driver does not know the attributes (before CUDA 13). */
static bool by_attributes(CUmemoryPool pool, struct gs_pool_class *pc)
{
	CUmemAllocationType type = CU_MEM_ALLOCATION_TYPE_INVALID;
	CUmemLocation loc = { CU_MEM_LOCATION_TYPE_INVALID, 0 };

	if (!gs_real.cuMemPoolGetAttribute ||
	    !attr(pool, CU_MEMPOOL_ATTR_ALLOCATION_TYPE, &type) ||
	    !attr(pool, CU_MEMPOOL_ATTR_LOCATION_TYPE, &loc.type) ||
	    !attr(pool, CU_MEMPOOL_ATTR_LOCATION_ID, &loc.id))
		return false;
	by_location(&loc, type, pc);
	return true;
}

/* Before CUDA 13: the device whose default or current pool it is. */
static bool by_search(CUmemoryPool pool, struct gs_pool_class *pc)
{
	CUmemoryPool p;
	int n = 0;

	gs_real.cuDeviceGetCount(&n);
	for (CUdevice d = 0; d < n; d++) {
		if ((gs_real.cuDeviceGetDefaultMemPool(&p, d) == CUDA_SUCCESS &&
		     p == pool) ||
		    (gs_real.cuDeviceGetMemPool(&p, d) == CUDA_SUCCESS &&
		     p == pool)) {
			pc->kind = GS_POOL_DEVICE;
			pc->dev = d;
			return true;
		}
	}
	return false;
}

void gs_pool_classify(CUmemoryPool pool, CUdevice fallback,
		      struct gs_pool_class *pc)
{
	if (by_attributes(pool, pc) || by_search(pool, pc))
		return;
	pc->kind = GS_POOL_DEVICE;
	pc->dev = fallback;
}

void gs_pool_classify_at(CUmemoryPool pool, const CUmemLocation *loc,
			 CUmemAllocationType type, struct gs_pool_class *pc)
{
	if (!by_attributes(pool, pc))
		by_location(loc, type, pc);
}

/* cuMemGetDefaultMemPool and cuMemGetMemPool, which share a prototype. */
static CUresult get_located(__typeof__(&cuMemGetMemPool) real,
			    const char *what, CUmemoryPool *pool,
			    CUmemLocation *loc, CUmemAllocationType type)
{
	struct gs_pool_class pc;
	CUresult r;

	if (!gs_enabled())
		return real(pool, loc, type);
	if (type == CU_MEM_ALLOCATION_TYPE_MANAGED)
		return gs_managed_refused(what);
	r = real(pool, loc, type);
	if (r == CUDA_SUCCESS && pool && loc) {
		gs_pool_classify_at(*pool, loc, type, &pc);
		gs_pool_note(*pool, &pc);
	}
	return r;
}

GS_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out,
					  CUmemLocation *location,
					  CUmemAllocationType type)
{
	__typeof__(&cuMemGetDefaultMemPool) real = REAL(cuMemGetDefaultMemPool);

	return get_located(real,
			   "cuMemGetDefaultMemPool of a managed pool (cudaMemGetDefaultMemPool)",
			   pool_out, location, type);
}

GS_EXPORT CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location,
				   CUmemAllocationType type)
{
	__typeof__(&cuMemGetMemPool) real = REAL(cuMemGetMemPool);

	return get_located(real,
			   "cuMemGetMemPool of a managed pool (cudaMemGetMemPool)",
			   pool, location, type);
}

/*
 * Making a pool current for managed memory is refused whatever the pool:
 * the application cannot have had a managed pool from the shim.
 */
GS_EXPORT CUresult cuMemSetMemPool(CUmemLocation *location,
				   CUmemAllocationType type, CUmemoryPool pool)
{
	__typeof__(&cuMemSetMemPool) real = REAL(cuMemSetMemPool);
	struct gs_pool_class pc;
	CUresult r;

	if (!gs_enabled())
		return real(location, type, pool);
	if (type == CU_MEM_ALLOCATION_TYPE_MANAGED)
		return gs_managed_refused("cuMemSetMemPool of a managed pool (cudaMemSetMemPool)");
	r = real(location, type, pool);
	if (r == CUDA_SUCCESS && location) {
		gs_pool_classify_at(pool, location, type, &pc);
		gs_pool_note(pool, &pc);
	}
	return r;
}
