// SPDX-License-Identifier: Apache-2.0
/*
 * Pools by memory location and allocation type, as CUDA 13 has them:
 * pinned pools on a device (the device's memory), on the host or a host
 * NUMA node (host memory), and managed pools (migratable memory, with a
 * preferred location or none). Each valid (location, type) pair has a
 * default pool, made on first use, and a current pool
 * (cuMemGetDefaultMemPool, cuMemGetMemPool, cuMemSetMemPool); device d's
 * pinned pair is the pool cuDeviceGetMemPool and cuMemAllocAsync use.
 *
 * The rules are NVIDIA's documented ones (CUDA 13 driver API, "Stream
 * Ordered Memory Allocator"); see the README for the list.
 */
#include "sim.h"

#define SIM_VERSION_13 13000		/* the calls and managed pools */
#define SIM_VERSION_POOL_ATTRS 13020	/* the pool's type and location */

static int host_numa_ok(int id)
{
	return id >= 0 && id < SIM_NUMA_NODES;
}

/*
 * The slot of a (location, type) pair the Get/Set calls accept: device,
 * host and host NUMA locations for pinned and managed memory, and no
 * location for managed memory only. Anything else is invalid.
 */
static CUresult loc_slot(const CUmemLocation *loc, CUmemAllocationType type,
			 int *slot)
{
	int managed = type == CU_MEM_ALLOCATION_TYPE_MANAGED;

	if (!loc || (!managed && type != CU_MEM_ALLOCATION_TYPE_PINNED))
		return CUDA_ERROR_INVALID_VALUE;
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		if (!sim_dev_ok(loc->id))
			return CUDA_ERROR_INVALID_DEVICE;
		*slot = (managed ? SIM_SLOT_DEV_MANAGED : 0) + loc->id;
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST:
		*slot = SIM_SLOT_HOST + managed;
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
		if (!host_numa_ok(loc->id))
			return CUDA_ERROR_INVALID_VALUE;
		*slot = SIM_SLOT_NUMA + 2 * loc->id + managed;
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_NONE:
		if (!managed)
			return CUDA_ERROR_INVALID_VALUE;
		*slot = SIM_SLOT_NONE;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* The slot's default pool, made on first use; NULL when out of memory. */
static struct sim_pool *slot_default(int slot, const CUmemLocation *loc,
				     CUmemAllocationType type)
{
	CUmemLocation l = *loc;

	if (sim.def_pool[slot])
		return sim.def_pool[slot];
	/* The id means nothing for the host or no location. */
	if (l.type == CU_MEM_LOCATION_TYPE_HOST ||
	    l.type == CU_MEM_LOCATION_TYPE_NONE)
		l.id = 0;
	sim.def_pool[slot] = sim_pool_new(&l, type, 1);
	sim.cur_pool[slot] = sim.def_pool[slot];
	return sim.def_pool[slot];
}

/* Enters, checks the version and the pair, and makes its default. */
static CUresult enter_slot(const CUmemLocation *loc, CUmemAllocationType type,
			   int *slot)
{
	CUresult rc;

	/* A CUDA 12 driver has no such entry point. */
	if (sim_driver_version() < SIM_VERSION_13)
		return CUDA_ERROR_NOT_FOUND;
	rc = sim_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = loc_slot(loc, type, slot);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	if (!slot_default(*slot, loc, type))
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	return CUDA_SUCCESS;
}

static CUresult get_pool(CUmemoryPool *out, CUmemLocation *location,
			 CUmemAllocationType type, int def)
{
	int slot;
	CUresult rc = enter_slot(location, type, &slot);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	*out = (CUmemoryPool)(def ? sim.def_pool[slot] : sim.cur_pool[slot]);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out,
					CUmemLocation *location,
					CUmemAllocationType type)
{
	return get_pool(pool_out, location, type, 1);
}

SIM_API CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location,
				 CUmemAllocationType type)
{
	return get_pool(pool, location, type, 0);
}

/* Whether the pool is of that location (the id where it means one). */
static int pool_at(const struct sim_pool *p, const CUmemLocation *loc,
		   CUmemAllocationType type)
{
	if (p->type != type || p->loc.type != loc->type)
		return 0;
	return loc->type == CU_MEM_LOCATION_TYPE_HOST ||
	       loc->type == CU_MEM_LOCATION_TYPE_NONE || p->loc.id == loc->id;
}

/*
 * The pool must be of that very location and type. For a device's pinned
 * memory this is cuDeviceSetMemPool: the pool cuMemAllocAsync uses.
 */
SIM_API CUresult cuMemSetMemPool(CUmemLocation *location,
				 CUmemAllocationType type, CUmemoryPool pool)
{
	struct sim_pool *p;
	int slot;
	CUresult rc = enter_slot(location, type, &slot);

	if (rc != CUDA_SUCCESS)
		return rc;
	p = sim_handle_get(pool, SH_POOL);
	if (!p || !pool_at(p, location, type))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	sim.cur_pool[slot] = p;
	return sim_leave_rc(CUDA_SUCCESS);
}

void sim_pool_unslot(const struct sim_pool *p)
{
	for (int s = 0; s < SIM_POOL_SLOTS; s++) {
		if (sim.cur_pool[s] == p)
			sim.cur_pool[s] = sim.def_pool[s];
	}
}

static CUresult check_pinned(const CUmemPoolProps *props)
{
	switch (props->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return sim_dev_ok(props->location.id) ? CUDA_SUCCESS
						      : CUDA_ERROR_INVALID_DEVICE;
	case CU_MEM_LOCATION_TYPE_HOST:
		/* Host pools are not IPC capable; the id is ignored. */
		return props->handleTypes == CU_MEM_HANDLE_TYPE_NONE
			       ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
		return host_numa_ok(props->location.id)
			       ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	default:	/* HOST_NUMA_CURRENT included */
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/*
 * A managed pool: no IPC, no maximum size, a preferred location or none.
 * Every simulated device has concurrent managed access, which the driver
 * requires of all devices (else CUDA_ERROR_NOT_SUPPORTED).
 */
static CUresult check_managed(const CUmemPoolProps *props)
{
	if (sim_driver_version() < SIM_VERSION_13 ||
	    props->handleTypes != CU_MEM_HANDLE_TYPE_NONE || props->maxSize)
		return CUDA_ERROR_INVALID_VALUE;
	switch (props->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return sim_dev_ok(props->location.id) ? CUDA_SUCCESS
						      : CUDA_ERROR_INVALID_DEVICE;
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
		return host_numa_ok(props->location.id)
			       ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_NONE:
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

CUresult sim_pool_props_check(const CUmemPoolProps *props)
{
	switch (props->allocType) {
	case CU_MEM_ALLOCATION_TYPE_PINNED:
		return check_pinned(props);
	case CU_MEM_ALLOCATION_TYPE_MANAGED:
		return check_managed(props);
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* The read-only attributes that say what a pool is. */
CUresult sim_pool_loc_attr(const struct sim_pool *p, CUmemPool_attribute attr,
			   void *value)
{
	if (sim_driver_version() < SIM_VERSION_POOL_ATTRS)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_MEMPOOL_ATTR_ALLOCATION_TYPE:
		*(CUmemAllocationType *)value = p->type;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_EXPORT_HANDLE_TYPES:
		*(CUmemAllocationHandleType *)value = p->handles;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_LOCATION_ID:
		*(int *)value = p->loc.id;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_LOCATION_TYPE:
		*(CUmemLocationType *)value = p->loc.type;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_MAX_POOL_SIZE:
		*(cuuint64_t *)value = p->max_size;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_HW_DECOMPRESS_ENABLED:
		*(int *)value = 0;	/* no decompression engine here */
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}
