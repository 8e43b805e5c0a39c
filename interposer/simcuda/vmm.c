// SPDX-License-Identifier: Apache-2.0
/*
 * Virtual memory management: physical handles (cuMemCreate), reserved
 * virtual ranges and the mappings between them. As in the real driver,
 * physical memory is given back only once its handle has been released
 * AND no mapping uses it any more. These calls name their device in the
 * allocation properties, so they need cuInit but no current context.
 */
#include <stdlib.h>

#include "sim.h"

struct sim_vmm {
	uint64_t size;
	int dev;	/* -1 for host memory, which costs no device memory */
	int maps;
	int refs;	/* handle references: cuMemCreate, cuMemRetain... */
};

static void vmm_put(struct sim_vmm *v)
{
	if (v->refs || v->maps)
		return;
	if (v->dev >= 0)
		sim_uncharge(v->dev, v->size);
	free(v);
}

static struct sim_vmm *vmm_lookup(CUmemGenericAllocationHandle h)
{
	return sim_handle_get((const void *)(uintptr_t)h, SH_VMM);
}

/* Checks allocation properties and says which device they charge. */
static CUresult check_prop(const CUmemAllocationProp *p, int *dev)
{
	if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	switch (p->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		if (!sim_dev_ok(p->location.id))
			return CUDA_ERROR_INVALID_DEVICE;
		*dev = p->location.id;
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		*dev = -1;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

SIM_API CUresult cuMemGetAllocationGranularity(
	size_t *granularity, const CUmemAllocationProp *prop,
	CUmemAllocationGranularity_flags option)
{
	CUresult rc = sim_enter();
	int dev;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!granularity || !prop ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = check_prop(prop, &dev);
	if (rc == CUDA_SUCCESS)
		*granularity = SIM_GRAN;
	return sim_leave_rc(rc);
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle,
			     size_t size, const CUmemAllocationProp *prop,
			     unsigned long long flags)
{
	CUresult rc = sim_enter();
	struct sim_vmm *v;
	int dev;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!handle || !prop || !size || size % SIM_GRAN || flags)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = check_prop(prop, &dev);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	v = calloc(1, sizeof(*v));
	if (!v)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	v->size = size;
	v->dev = dev;
	v->refs = 1;
	rc = dev >= 0 ? sim_charge(dev, size) : CUDA_SUCCESS;
	if (rc == CUDA_SUCCESS && sim_handle_add(v, SH_VMM, NULL, dev)) {
		if (dev >= 0)
			sim_uncharge(dev, size);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc != CUDA_SUCCESS) {
		free(v);
		return sim_leave_rc(rc);
	}
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult rc = sim_enter();
	struct sim_vmm *v;

	if (rc != CUDA_SUCCESS)
		return rc;
	v = vmm_lookup(handle);
	if (!v)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (--v->refs == 0)
		sim_handle_del(v);
	vmm_put(v);
	return sim_leave_rc(CUDA_SUCCESS);
}

/* A new reference to the handle mapped at addr, even one released. */
SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle,
					     void *addr)
{
	CUresult rc = sim_enter();
	struct sim_entry *e;
	struct sim_vmm *v;

	if (rc != CUDA_SUCCESS)
		return rc;
	e = sim_table_covering(&sim.mem, (uint64_t)(uintptr_t)addr);
	if (!handle || !e || e->kind != SM_MAPPED)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	v = e->owner;
	if (!v->refs && sim_handle_add(v, SH_VMM, NULL, v->dev))
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	v->refs++;
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
				     size_t alignment, CUdeviceptr addr,
				     unsigned long long flags)
{
	CUresult rc = sim_enter();
	struct sim_entry e = { 0 };

	(void)addr;	/* only a hint; ranges come from one growing window */
	(void)flags;
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!ptr || !size || size % SIM_GRAN ||
	    (alignment & (alignment - 1)))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (alignment < SIM_GRAN)
		alignment = SIM_GRAN;
	e.key = sim_table_gap(&sim.vas, SIM_VA_BASE, SIM_VA_BASE + SIM_VA_WINDOW,
			      &sim.next_va, size, alignment);
	e.len = size;
	e.dev = -1;
	if (!e.key || sim_table_add(&sim.vas, &e))
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	*ptr = (CUdeviceptr)e.key;
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Unmaps every mapping that starts in [ptr, ptr + size); returns how many. */
static int unmap_range(uint64_t ptr, uint64_t size)
{
	size_t i = sim_table_lower(&sim.mem, ptr);
	int n = 0;

	while (i < sim.mem.n && sim.mem.v[i].key - ptr < size) {
		struct sim_entry *e = &sim.mem.v[i];
		struct sim_vmm *v = e->owner;

		if (e->kind != SM_MAPPED) {
			i++;
			continue;
		}
		sim_table_del(&sim.mem, e);
		v->maps--;
		vmm_put(v);
		n++;
	}
	return n;
}

/* Freeing a range also drops the mappings still in it. */
SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult rc = sim_enter();
	struct sim_entry *e;

	if (rc != CUDA_SUCCESS)
		return rc;
	e = sim_table_get(&sim.vas, ptr);
	if (!e || e->len != size)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	sim_table_del(&sim.vas, e);
	unmap_range(ptr, size);
	return sim_leave_rc(CUDA_SUCCESS);
}

/* [ptr, ptr + size) lies in one reserved range and overlaps no mapping. */
static int map_target_ok(uint64_t ptr, uint64_t size)
{
	struct sim_entry *va = sim_table_covering(&sim.vas, ptr);
	size_t i;

	if (!va || size > va->len - (ptr - va->key))
		return 0;
	if (sim_table_covering(&sim.mem, ptr))
		return 0;
	i = sim_table_lower(&sim.mem, ptr);
	return i == sim.mem.n || sim.mem.v[i].key - ptr >= size;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle handle,
			  unsigned long long flags)
{
	CUresult rc = sim_enter();
	struct sim_entry e = { .key = ptr, .len = size, .kind = SM_MAPPED };
	struct sim_vmm *v;

	if (rc != CUDA_SUCCESS)
		return rc;
	v = vmm_lookup(handle);
	if (!v || flags || !size || size % SIM_GRAN || offset % SIM_GRAN ||
	    ptr % SIM_GRAN || offset > v->size || size > v->size - offset ||
	    !map_target_ok(ptr, size))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	e.owner = v;
	e.dev = v->dev;
	if (sim_table_add(&sim.mem, &e))
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	v->maps++;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!size || !unmap_range(ptr, size))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	return sim_leave_rc(CUDA_SUCCESS);
}

static int access_desc_ok(const CUmemAccessDesc *d)
{
	if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    !sim_dev_ok(d->location.id))
		return 0;
	return d->flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ||
	       d->flags == CU_MEM_ACCESS_FLAGS_PROT_READ ||
	       d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* Succeeds when every byte of the range is mapped. */
SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
				const CUmemAccessDesc *desc, size_t count)
{
	CUresult rc = sim_enter();
	uint64_t at = ptr, end = ptr + size;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!desc || !count || !size || end < ptr)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	for (size_t i = 0; i < count; i++)
		if (!access_desc_ok(&desc[i]))
			return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	while (at < end) {
		struct sim_entry *e = sim_table_covering(&sim.mem, at);

		if (!e || e->kind != SM_MAPPED)
			return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
		at = e->key + e->len;
	}
	return sim_leave_rc(CUDA_SUCCESS);
}
