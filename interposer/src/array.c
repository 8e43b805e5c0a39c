// SPDX-License-Identifier: Apache-2.0
/*
 * CUDA arrays and mipmapped arrays. Their layout is the driver's own, so
 * the shim charges the plain size of the elements before the driver is
 * asked, then settles on the size the driver reports for the array
 * (cuArrayGetMemoryRequirements, CUDA 11.6 and later).
 */
#include "gpuslice/cuda_array.h"
#include "shim.h"

/* The charge before the driver answers: unknown formats as 4 bytes. */
static uint64_t element_bytes(CUarray_format f)
{
	unsigned int n = cu_array_format_bytes(f);

	return n ? n : 4;
}

static uint64_t dim(size_t n)
{
	return n ? n : 1;
}

static uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
	uint64_t w = dim(d->Width), h = dim(d->Height), z = dim(d->Depth);
	uint64_t total = 0;

	for (unsigned int i = 0; i < (levels ? levels : 1); i++) {
		total += w * h * z * dim(d->NumChannels) *
			 element_bytes(d->Format);
		w = w > 1 ? w / 2 : 1;
		h = h > 1 ? h / 2 : 1;
		z = z > 1 ? z / 2 : 1;
	}
	return total;
}

/* The driver's size of an array or mipmapped array; 0 when unknown. */
static uint64_t driver_size(enum gs_kind kind, void *h)
{
	CUDA_ARRAY_MEMORY_REQUIREMENTS req;
	CUdevice dev;
	CUresult r = CUDA_ERROR_NOT_SUPPORTED;

	if (gs_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
		return 0;
	if (kind == GS_ARRAY && gs_real.cuArrayGetMemoryRequirements)
		r = gs_real.cuArrayGetMemoryRequirements(&req, h, dev);
	else if (kind == GS_MIPMAP &&
		 gs_real.cuMipmappedArrayGetMemoryRequirements)
		r = gs_real.cuMipmappedArrayGetMemoryRequirements(&req, h, dev);
	return r == CUDA_SUCCESS ? req.size : 0;
}

static CUresult destroy_array(void *h)
{
	return gs_real.cuArrayDestroy(h);
}

static CUresult destroy_mipmap(void *h)
{
	return gs_real.cuMipmappedArrayDestroy(h);
}

static void destroy(enum gs_kind kind, void *h)
{
	if (kind == GS_ARRAY)
		destroy_array(h);
	else
		destroy_mipmap(h);
}

/*
 * After the driver answered make() for an array charged guess bytes:
 * settles the charge on the driver's size and records it.
 */
static CUresult charged_array(struct gs_card *c, CUcontext ctx,
			      enum gs_kind kind, void **h, uint64_t guess,
			      CUresult r, const char *what)
{
	uint64_t bytes;

	if (r != CUDA_SUCCESS) {
		gs_uncharge(c, guess);
		return r;
	}
	bytes = driver_size(kind, *h);
	if (!bytes)
		bytes = guess;
	if (bytes < guess) {
		gs_uncharge(c, guess - bytes);
	} else if (bytes > guess && !gs_charge(c, bytes - guess, what)) {
		destroy(kind, *h);
		gs_uncharge(c, guess);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	gs_track_add(&(struct gs_alloc){ .kind = kind,
					 .key = (uint64_t)(uintptr_t)*h,
					 .bytes = bytes, .card = c, .ctx = ctx });
	return r;
}

static CUresult create_array(CUarray *pHandle,
			     const CUDA_ARRAY3D_DESCRIPTOR *d,
			     CUresult (*make)(CUarray *, const void *),
			     const void *desc, const char *what)
{
	uint64_t bytes = array_bytes(d, 1);
	struct gs_card *c;
	CUcontext ctx;

	if (!gs_enabled() || !pHandle || !(c = gs_current_card(&ctx)))
		return make(pHandle, desc);
	if (!gs_charge(c, bytes, what))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return charged_array(c, ctx, GS_ARRAY, (void **)pHandle, bytes,
			     make(pHandle, desc), what);
}

static CUresult make_2d(CUarray *p, const void *desc)
{
	return gs_real.cuArrayCreate_v2(p, desc);
}

static CUresult make_3d(CUarray *p, const void *desc)
{
	return gs_real.cuArray3DCreate_v2(p, desc);
}

GS_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle,
				    const CUDA_ARRAY_DESCRIPTOR *desc)
{
	CUDA_ARRAY3D_DESCRIPTOR d3 = { 0 };

	REAL(cuArrayCreate_v2);
	if (!desc)
		return gs_real.cuArrayCreate_v2(pHandle, desc);
	d3.Width = desc->Width;
	d3.Height = desc->Height;
	d3.Format = desc->Format;
	d3.NumChannels = desc->NumChannels;
	return create_array(pHandle, &d3, make_2d, desc, "cuArrayCreate");
}

GS_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle,
				      const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
	REAL(cuArray3DCreate_v2);
	if (!desc)
		return gs_real.cuArray3DCreate_v2(pHandle, desc);
	return create_array(pHandle, desc, make_3d, desc, "cuArray3DCreate");
}

/* Takes the record first: once destroyed, the handle may be reused. */
static CUresult destroyed(enum gs_kind kind, void *h,
			  CUresult (*real)(void *h))
{
	struct gs_alloc a;
	CUresult r;

	if (!gs_enabled() || !gs_track_take(kind, (uint64_t)(uintptr_t)h, &a))
		return real(h);
	r = real(h);
	if (r == CUDA_SUCCESS)
		gs_uncharge(a.card, a.bytes);
	else
		gs_track_add(&a);
	return r;
}

GS_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
	REAL(cuArrayDestroy);
	return destroyed(GS_ARRAY, hArray, destroy_array);
}

GS_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
					  const CUDA_ARRAY3D_DESCRIPTOR *desc,
					  unsigned int levels)
{
	__typeof__(&cuMipmappedArrayCreate) real = REAL(cuMipmappedArrayCreate);
	struct gs_card *c;
	CUcontext ctx;
	uint64_t bytes;

	if (!gs_enabled() || !pHandle || !desc ||
	    !(c = gs_current_card(&ctx)))
		return real(pHandle, desc, levels);
	bytes = array_bytes(desc, levels);
	if (!gs_charge(c, bytes, "cuMipmappedArrayCreate"))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return charged_array(c, ctx, GS_MIPMAP, (void **)pHandle, bytes,
			     real(pHandle, desc, levels),
			     "cuMipmappedArrayCreate");
}

GS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
	REAL(cuMipmappedArrayDestroy);
	return destroyed(GS_MIPMAP, h, destroy_mipmap);
}
