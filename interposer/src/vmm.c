// SPDX-License-Identifier: Apache-2.0
/*
 * Virtual memory management (cuMemCreate and friends; PyTorch's expandable
 * segments use it). A physical allocation on a device is charged when it is
 * created and uncharged when the driver frees it: once its handle is
 * released and it is mapped nowhere.
 *
 * One lock is held across each of these calls and its bookkeeping: once
 * the driver frees a handle it may hand the same value to another thread's
 * cuMemCreate, which must not be recorded before the old one is forgotten.
 * These calls grow and shrink allocators, they are not a hot path.
 */
#include <stdlib.h>

#include "shim.h"

/* Live mappings: few, short-lived, looked up by range on unmap. */
struct mapping {
	CUdeviceptr ptr;
	CUmemGenericAllocationHandle handle;
	struct mapping *next;
};

static struct mapping *mappings;
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult create_locked(CUmemGenericAllocationHandle *handle,
			      size_t size, const CUmemAllocationProp *prop,
			      unsigned long long flags)
{
	struct gs_card *c = gs_card_for_device(prop->location.id);
	CUresult r;

	if (!gs_charge(c, size, "cuMemCreate"))
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = gs_real.cuMemCreate(handle, size, prop, flags);
	if (r != CUDA_SUCCESS) {
		gs_uncharge(c, size);
		return r;
	}
	gs_track_add(&(struct gs_alloc){ .kind = GS_HANDLE, .key = *handle,
					 .bytes = size, .card = c });
	return r;
}

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle,
			       size_t size, const CUmemAllocationProp *prop,
			       unsigned long long flags)
{
	__typeof__(&cuMemCreate) real = REAL(cuMemCreate);
	CUresult r;

	if (!gs_enabled() || !handle || !prop || !size ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return real(handle, size, prop, flags);
	pthread_mutex_lock(&vmm_lock);
	r = create_locked(handle, size, prop, flags);
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

/* Counts a mapping in (+1) or out (-1), or the release (0); false once
 * the handle is freed: released and unmapped. */
static bool handle_ref(struct gs_alloc *a, void *arg)
{
	int delta = *(int *)arg;

	if (delta)
		a->maps += delta;
	else
		a->released = true;
	if (!a->released || a->maps > 0)
		return true;
	gs_uncharge(a->card, a->bytes);
	return false;
}

static void handle_update(CUmemGenericAllocationHandle handle, int delta)
{
	gs_track_update(GS_HANDLE, handle, handle_ref, &delta);
}

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	__typeof__(&cuMemRelease) real = REAL(cuMemRelease);
	CUresult r;

	if (!gs_enabled())
		return real(handle);
	pthread_mutex_lock(&vmm_lock);
	r = real(handle);
	if (r == CUDA_SUCCESS)
		handle_update(handle, 0);
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

static void map_locked(CUdeviceptr ptr, CUmemGenericAllocationHandle handle)
{
	struct mapping *m;
	int one = 1;

	if (!gs_track_update(GS_HANDLE, handle, handle_ref, &one))
		return;		/* not device memory: not charged */
	m = malloc(sizeof(*m));
	if (!m) {
		/* Unknown to unmap: the handle's bytes stay charged. */
		gs_err("out of host memory recording a mapping");
		return;
	}
	m->ptr = ptr;
	m->handle = handle;
	m->next = mappings;
	mappings = m;
}

GS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			    CUmemGenericAllocationHandle handle,
			    unsigned long long flags)
{
	__typeof__(&cuMemMap) real = REAL(cuMemMap);
	CUresult r;

	if (!gs_enabled())
		return real(ptr, size, offset, handle, flags);
	pthread_mutex_lock(&vmm_lock);
	r = real(ptr, size, offset, handle, flags);
	if (r == CUDA_SUCCESS)
		map_locked(ptr, handle);
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

/* The mappings starting in [ptr, ptr + size) are gone. */
static void unmapped_locked(CUdeviceptr ptr, size_t size)
{
	struct mapping **p = &mappings;

	while (*p) {
		struct mapping *m = *p;

		if (m->ptr >= ptr && m->ptr - ptr < size) {
			*p = m->next;
			handle_update(m->handle, -1);
			free(m);
		} else {
			p = &m->next;
		}
	}
}

/* cuMemUnmap, and cuMemAddressFree, which unmaps what is left in range. */
static CUresult unmap(CUresult (*real)(CUdeviceptr, size_t), CUdeviceptr ptr,
		      size_t size)
{
	CUresult r;

	if (!gs_enabled())
		return real(ptr, size);
	pthread_mutex_lock(&vmm_lock);
	r = real(ptr, size);
	if (r == CUDA_SUCCESS)
		unmapped_locked(ptr, size);
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

GS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	return unmap(REAL(cuMemUnmap), ptr, size);
}

GS_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	return unmap(REAL(cuMemAddressFree), ptr, size);
}

void gs_vmm_before_fork(void)
{
	pthread_mutex_lock(&vmm_lock);
}

void gs_vmm_after_fork_parent(void)
{
	pthread_mutex_unlock(&vmm_lock);
}

void gs_vmm_after_fork_child(void)
{
	while (mappings) {
		struct mapping *m = mappings;

		mappings = m->next;
		free(m);
	}
	pthread_mutex_init(&vmm_lock, NULL);
}
