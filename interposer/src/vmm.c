// SPDX-License-Identifier: Apache-2.0
/*
 * Virtual memory management (cuMemCreate and friends; PyTorch's expandable
 * segments use it). A physical allocation on a device is charged when it is
 * created and uncharged when the driver frees it: once its handle is
 * released and it is mapped nowhere.
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
static pthread_mutex_t mappings_lock = PTHREAD_MUTEX_INITIALIZER;

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle,
			       size_t size, const CUmemAllocationProp *prop,
			       unsigned long long flags)
{
	__typeof__(&cuMemCreate) real = REAL(cuMemCreate);
	struct gs_card *c;
	CUresult r;

	if (!gs_enabled() || !handle || !prop || !size ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return real(handle, size, prop, flags);
	c = gs_card_for_device(prop->location.id);
	if (!gs_charge(c, size, "cuMemCreate"))
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = real(handle, size, prop, flags);
	if (r != CUDA_SUCCESS) {
		gs_uncharge(c, size);
		return r;
	}
	gs_track_add(&(struct gs_alloc){ .kind = GS_HANDLE, .key = *handle,
					 .bytes = size, .card = c });
	return r;
}

/* Returns false once the handle is freed: released and unmapped. */
static bool release_handle(struct gs_alloc *a, void *arg)
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

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult r = REAL(cuMemRelease)(handle);
	int release = 0;

	if (r == CUDA_SUCCESS && gs_enabled())
		gs_track_update(GS_HANDLE, handle, release_handle, &release);
	return r;
}

GS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			    CUmemGenericAllocationHandle handle,
			    unsigned long long flags)
{
	CUresult r = REAL(cuMemMap)(ptr, size, offset, handle, flags);
	struct mapping *m;
	int one = 1;

	if (r != CUDA_SUCCESS || !gs_enabled() ||
	    !gs_track_update(GS_HANDLE, handle, release_handle, &one))
		return r;
	m = malloc(sizeof(*m));
	if (!m) {
		/* Unknown to unmap: the handle's bytes stay charged. */
		gs_err("out of host memory recording a mapping");
		return r;
	}
	m->ptr = ptr;
	m->handle = handle;
	pthread_mutex_lock(&mappings_lock);
	m->next = mappings;
	mappings = m;
	pthread_mutex_unlock(&mappings_lock);
	return r;
}

GS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult r = REAL(cuMemUnmap)(ptr, size);
	struct mapping *gone = NULL, **p;
	int minus_one = -1;

	if (r != CUDA_SUCCESS || !gs_enabled())
		return r;
	pthread_mutex_lock(&mappings_lock);
	for (p = &mappings; *p;) {
		struct mapping *m = *p;

		if (m->ptr >= ptr && m->ptr - ptr < size) {
			*p = m->next;
			m->next = gone;
			gone = m;
		} else {
			p = &m->next;
		}
	}
	pthread_mutex_unlock(&mappings_lock);
	while (gone) {
		struct mapping *m = gone;

		gone = m->next;
		gs_track_update(GS_HANDLE, m->handle, release_handle,
				&minus_one);
		free(m);
	}
	return r;
}

void gs_vmm_after_fork_child(void)
{
	while (mappings) {
		struct mapping *m = mappings;

		mappings = m->next;
		free(m);
	}
	pthread_mutex_init(&mappings_lock, NULL);
}
