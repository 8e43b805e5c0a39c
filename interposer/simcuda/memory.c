// SPDX-License-Identifier: Apache-2.0
/*
 * Linear device memory. Pointers are fake (never backed, never
 * dereferenced) but unique within the process and 512-byte aligned; each
 * device hands them out from its own 1 TiB window so a pointer tells its
 * device at a glance. Every allocation charges exactly its size to the
 * shared machine, which is what a per-container cap has to see.
 */
#include "sim.h"

/*
 * dev is an ordinal, as everywhere in the driver; the machine's is
 * physical. Device -1 is host memory (host and managed pools): no
 * device's.
 */
CUresult sim_charge(int dev, uint64_t bytes)
{
	if (dev < 0)
		return CUDA_SUCCESS;
	return simst_charge(sim_phys(dev), bytes) ? CUDA_ERROR_OUT_OF_MEMORY
						  : CUDA_SUCCESS;
}

void sim_uncharge(int dev, uint64_t bytes)
{
	if (dev >= 0)
		simst_uncharge(sim_phys(dev), bytes);
}

/* Gives [*out, *out + size) a fresh address and records it. */
CUresult sim_mem_insert(int dev, uint64_t size, int kind, void *owner,
			CUdeviceptr *out)
{
	uint64_t lo = dev < 0 ? SIM_HOST_BASE
			      : SIM_ADDR_BASE + (uint64_t)dev * SIM_ADDR_WINDOW;
	uint64_t win = dev < 0 ? SIM_HOST_WINDOW : SIM_ADDR_WINDOW;
	struct sim_entry e = {
		.len = size,
		.owner = owner,
		.kind = kind,
		.dev = dev,
	};

	e.key = sim_table_gap(&sim.mem, lo, lo + win,
			      dev < 0 ? &sim.next_host : &sim.next_addr[dev],
			      size ? size : 1, SIM_ADDR_ALIGN);
	if (!e.key || sim_table_add(&sim.mem, &e))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = (CUdeviceptr)e.key;
	return CUDA_SUCCESS;
}

/* Frees what was allocated in a context that is going away. */
void sim_mem_drop_ctx(struct sim_ctx *ctx)
{
	size_t i = sim.mem.n;

	while (i-- > 0) {
		struct sim_entry *e = &sim.mem.v[i];

		if (e->owner != ctx || (e->kind != SM_LINEAR &&
		    e->kind != SM_MANAGED && e->kind != SM_PITCH))
			continue;
		sim_uncharge(e->dev, e->len);
		sim_table_del(&sim.mem, e);
	}
}

/*
 * Called entered, with the current context; leaves. Allocating is a
 * potentially unsafe call while a stream captures (capture.c).
 */
static CUresult alloc_in(struct sim_ctx *c, CUdeviceptr *dptr, uint64_t size,
			 int kind)
{
	CUresult rc = sim_capture_unsafe();

	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	rc = sim_charge(c->dev, size);

	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	rc = sim_mem_insert(c->dev, size, kind, c, dptr);
	if (rc != CUDA_SUCCESS)
		sim_uncharge(c->dev, size);
	return sim_leave_rc(rc);
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || !bytesize)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	return alloc_in(c, dptr, bytesize, SM_LINEAR);
}

/* Managed memory is resident on the device here, so it costs device memory. */
SIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
				   unsigned int flags)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || !bytesize || (flags != CU_MEM_ATTACH_GLOBAL &&
	    flags != 0x2 /* CU_MEM_ATTACH_HOST */))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	return alloc_in(c, dptr, bytesize, SM_MANAGED);
}

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch,
				    size_t WidthInBytes, size_t Height,
				    unsigned int ElementSizeBytes)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);
	uint64_t pitch;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || !pPitch || !WidthInBytes || !Height ||
	    WidthInBytes > UINT64_MAX / 2 ||
	    (ElementSizeBytes != 4 && ElementSizeBytes != 8 &&
	     ElementSizeBytes != 16))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	pitch = sim_roundup(WidthInBytes, 512);
	if (Height > UINT64_MAX / pitch)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	rc = alloc_in(c, dptr, pitch * Height, SM_PITCH);
	if (rc == CUDA_SUCCESS)
		*pPitch = (size_t)pitch;
	return rc;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);
	struct sim_entry *e;

	if (rc != CUDA_SUCCESS)
		return rc;
	e = sim_table_get(&sim.mem, dptr);
	if (!e || e->kind == SM_MAPPED)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_capture_unsafe();
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	/* A graph allocation's lifetime ends; its graph keeps the memory. */
	if (e->kind == SM_GRAPH)
		return sim_leave_rc(CUDA_SUCCESS);
	/* A stream-ordered allocation freed directly goes back to its pool. */
	if (e->kind == SM_POOL)
		sim_pool_put(e->owner, e->len);
	else
		sim_uncharge(e->dev, e->len);
	sim_table_del(&sim.mem, e);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize,
					 CUdeviceptr dptr)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);
	struct sim_entry *e;

	if (rc != CUDA_SUCCESS)
		return rc;
	e = sim_table_covering(&sim.mem, dptr);
	if (!e)
		return sim_leave_rc(CUDA_ERROR_NOT_FOUND);
	if (pbase)
		*pbase = (CUdeviceptr)e->key;
	if (psize)
		*psize = (size_t)e->len;
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Free memory is what all processes together leave on the device. */
SIM_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);
	uint64_t cap, used = 0;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!free || !total)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	cap = simst_capacity(sim_phys(c->dev));
	simst_used(sim_phys(c->dev), &used);
	*total = (size_t)cap;
	*free = (size_t)(used < cap ? cap - used : 0);
	return sim_leave_rc(CUDA_SUCCESS);
}
