// SPDX-License-Identifier: Apache-2.0
/*
 * CUDA arrays and mipmapped arrays. Their device memory is the exact texel
 * footprint (no tiling padding), so a cap sees exactly what the caller
 * asked for; cu*GetMemoryRequirements report that same size.
 */
#include <stdlib.h>

#include "gpuslice/cuda_array.h"
#include "sim.h"

#define SIM_ARRAY_ALIGN 512

/* The handle is the address of one of these; size and device live in the
 * handle table entry. */
struct sim_array {
	int mipmap;
};

static uint64_t at_least_1(uint64_t v)
{
	return v ? v : 1;
}

/* *v *= m; nonzero when that overflows. */
static int mul_over(uint64_t *v, uint64_t m)
{
	if (*v > UINT64_MAX / m)
		return 1;
	*v *= m;
	return 0;
}

/*
 * Bytes of a levels-deep mipmap chain (1 for a plain array); 0 when the
 * descriptor is invalid or the size overflows. Each level halves every
 * dimension, down to 1; a 0 height or depth counts as 1.
 */
static uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d,
			    unsigned int levels)
{
	uint64_t texel = cu_array_format_bytes(d->Format) * d->NumChannels;
	uint64_t w = d->Width, h = at_least_1(d->Height);
	uint64_t z = at_least_1(d->Depth), total = 0;

	if (!texel || !w || (d->NumChannels != 1 && d->NumChannels != 2 &&
			     d->NumChannels != 4))
		return 0;
	for (unsigned int l = 0; l < levels; l++) {
		uint64_t b = texel;

		if (mul_over(&b, at_least_1(w >> l)) ||
		    mul_over(&b, at_least_1(h >> l)) ||
		    mul_over(&b, at_least_1(z >> l)) || b > UINT64_MAX - total)
			return 0;
		total += b;
	}
	return total;
}

/* Entered with the current context c; leaves. */
static CUresult create(void **out, const CUDA_ARRAY3D_DESCRIPTOR *d,
		       unsigned int levels, struct sim_ctx *c)
{
	int kind = levels ? SH_MIPMAP : SH_ARRAY;
	uint64_t size = array_bytes(d, levels ? levels : 1);
	struct sim_array *a;
	CUresult rc;

	if (!size)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	a = calloc(1, sizeof(*a));
	if (!a)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	a->mipmap = kind == SH_MIPMAP;
	rc = sim_charge(c->dev, size);
	if (rc == CUDA_SUCCESS && sim_handle_add(a, kind, c, c->dev)) {
		sim_uncharge(c->dev, size);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc != CUDA_SUCCESS) {
		free(a);
		return sim_leave_rc(rc);
	}
	sim_handle_entry(a)->len = size;
	*out = a;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuArrayCreate_v2(CUarray *pHandle,
				  const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	CUDA_ARRAY3D_DESCRIPTOR d = { 0 };
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pHandle || !pAllocateArray)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	d.Width = pAllocateArray->Width;
	d.Height = pAllocateArray->Height;
	d.Format = pAllocateArray->Format;
	d.NumChannels = pAllocateArray->NumChannels;
	return create((void **)pHandle, &d, 0, c);
}

SIM_API CUresult cuArray3DCreate_v2(CUarray *pHandle,
				    const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pHandle || !pAllocateArray)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	return create((void **)pHandle, pAllocateArray, 0, c);
}

SIM_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
					const CUDA_ARRAY3D_DESCRIPTOR *pDesc,
					unsigned int numMipmapLevels)
{
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pHandle || !pDesc || !numMipmapLevels || numMipmapLevels > 64)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	return create((void **)pHandle, pDesc, numMipmapLevels, c);
}

/* Frees an array or mipmapped array given its handle table entry. */
void sim_array_free(struct sim_entry *e)
{
	void *a = (void *)(uintptr_t)e->key;

	sim_uncharge(e->dev, e->len);
	sim_table_del(&sim.handles, e);
	free(a);
}

static CUresult destroy(const void *h, int kind)
{
	CUresult rc = sim_enter();
	struct sim_entry *e;

	if (rc != CUDA_SUCCESS)
		return rc;
	e = sim_handle_entry(h);
	if (!e || e->kind != kind)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	sim_array_free(e);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuArrayDestroy(CUarray hArray)
{
	return destroy(hArray, SH_ARRAY);
}

SIM_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	return destroy(hMipmappedArray, SH_MIPMAP);
}

static CUresult requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *req,
			     const void *h, int kind, CUdevice device)
{
	CUresult rc = sim_enter();
	struct sim_entry *e;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!req)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (!sim_dev_ok(device))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	e = sim_handle_entry(h);
	if (!e || e->kind != kind)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	*req = (CUDA_ARRAY_MEMORY_REQUIREMENTS){
		.size = (size_t)e->len,
		.alignment = SIM_ARRAY_ALIGN,
	};
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuArrayGetMemoryRequirements(
	CUDA_ARRAY_MEMORY_REQUIREMENTS *req, CUarray array, CUdevice device)
{
	return requirements(req, array, SH_ARRAY, device);
}

SIM_API CUresult cuMipmappedArrayGetMemoryRequirements(
	CUDA_ARRAY_MEMORY_REQUIREMENTS *req, CUmipmappedArray mipmap,
	CUdevice device)
{
	return requirements(req, mipmap, SH_MIPMAP, device);
}
