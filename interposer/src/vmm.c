// SPDX-License-Identifier: Apache-2.0
/*
 * Virtual memory management (cuMemCreate and friends; PyTorch's expandable
 * segments use it). A physical allocation on a device is charged when it is
 * created and uncharged when the driver frees it: once every reference to
 * its handle (cuMemCreate's, cuMemRetainAllocationHandle's) is released
 * and it is mapped nowhere.
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
					 .bytes = size, .card = c, .refs = 1 });
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

/* A change to a handle's mappings or references. */
struct handle_delta {
	int maps;
	int refs;
};

/* Applies a handle_delta; false once the handle is freed: no reference
 * left and mapped nowhere. */
static bool handle_ref(struct gs_alloc *a, void *arg)
{
	const struct handle_delta *d = arg;

	a->maps += d->maps;
	a->refs += d->refs;
	if (a->refs > 0 || a->maps > 0)
		return true;
	gs_uncharge(a->card, a->bytes);
	return false;
}

static bool handle_update(CUmemGenericAllocationHandle handle, int maps,
			  int refs)
{
	struct handle_delta d = { maps, refs };

	return gs_track_update(GS_HANDLE, handle, handle_ref, &d);
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
		handle_update(handle, 0, -1);
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

GS_EXPORT CUresult cuMemRetainAllocationHandle(
	CUmemGenericAllocationHandle *handle, void *addr)
{
	__typeof__(&cuMemRetainAllocationHandle) real =
		REAL(cuMemRetainAllocationHandle);
	CUresult r;

	if (!gs_enabled())
		return real(handle, addr);
	pthread_mutex_lock(&vmm_lock);
	r = real(handle, addr);
	if (r == CUDA_SUCCESS)
		handle_update(*handle, 0, 1);
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

static void map_locked(CUdeviceptr ptr, CUmemGenericAllocationHandle handle)
{
	struct mapping *m;

	if (!handle_update(handle, 1, 0))
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
			handle_update(m->handle, -1, 0);
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
