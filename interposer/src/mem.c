// SPDX-License-Identifier: Apache-2.0
/*
 * Linear device memory, managed memory, and what the application is told
 * about the card's memory.
 */
#include <stdio.h>
#include <unistd.h>

#include "shim.h"

/* Charges, allocates, and records what was charged; uncharges on failure. */
static CUresult charged_linear(struct gs_card *c, CUcontext ctx,
			       CUdeviceptr *dptr, uint64_t bytes,
			       CUresult r)
{
	if (r != CUDA_SUCCESS) {
		gs_uncharge(c, bytes);
		return r;
	}
	gs_track_add(&(struct gs_alloc){ .kind = GS_LINEAR, .key = *dptr,
					 .bytes = bytes, .card = c,
					 .ctx = ctx });
	return r;
}

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	__typeof__(&cuMemAlloc_v2) real = REAL(cuMemAlloc_v2);
	struct gs_card *c;
	CUcontext ctx;

	if (!gs_enabled() || !dptr || !bytesize ||
	    !(c = gs_current_card(&ctx)))
		return real(dptr, bytesize);
	if (!gs_charge(c, bytesize, "cuMemAlloc"))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return charged_linear(c, ctx, dptr, bytesize, real(dptr, bytesize));
}

/* The pitch the driver will pick is unknown until it answers: charge a
 * pitch aligned to 512 bytes first, then settle on the real one. */
#define GS_PITCH_ALIGN 512ULL

GS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch,
				      size_t WidthInBytes, size_t Height,
				      unsigned int ElementSizeBytes)
{
	__typeof__(&cuMemAllocPitch_v2) real = REAL(cuMemAllocPitch_v2);
	uint64_t guess, actual;
	struct gs_card *c;
	CUcontext ctx;
	CUresult r;

	if (!gs_enabled() || !dptr || !pPitch || !WidthInBytes || !Height ||
	    !(c = gs_current_card(&ctx)))
		return real(dptr, pPitch, WidthInBytes, Height,
			    ElementSizeBytes);
	guess = (WidthInBytes + GS_PITCH_ALIGN - 1) / GS_PITCH_ALIGN *
		GS_PITCH_ALIGN * Height;
	if (!gs_charge(c, guess, "cuMemAllocPitch"))
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	if (r != CUDA_SUCCESS) {
		gs_uncharge(c, guess);
		return r;
	}
	actual = (uint64_t)*pPitch * Height;
	if (actual < guess) {
		gs_uncharge(c, guess - actual);
	} else if (actual > guess &&
		   !gs_charge(c, actual - guess, "cuMemAllocPitch")) {
		gs_real.cuMemFree_v2(*dptr);
		gs_uncharge(c, guess);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return charged_linear(c, ctx, dptr, actual, r);
}

GS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	__typeof__(&cuMemFree_v2) real = REAL(cuMemFree_v2);
	struct gs_alloc a;
	CUresult r;

	if (!gs_enabled())
		return real(dptr);
	/* Taken first: once freed, the address may be another thread's. */
	if (gs_track_take(GS_LINEAR, dptr, &a)) {
		r = real(dptr);
		if (r == CUDA_SUCCESS)
			gs_uncharge(a.card, a.bytes);
		else
			gs_track_add(&a);
	} else if (gs_track_take(GS_ASYNC, dptr, &a)) {
		r = real(dptr);
		gs_pool_freed(&a, r == CUDA_SUCCESS);
	} else {
		r = real(dptr);
	}
	return r;
}

/*
 * Managed memory migrates pages behind the driver's back and can
 * oversubscribe the card: it cannot be held to a cap. Every path to it
 * is refused loudly, with one line per process for all of them (a forked
 * child is told too), rather than let it slip past the ledger.
 */
CUresult gs_managed_refused(const char *what)
{
	static int told_pid;
	int pid = (int)getpid();

	if (__atomic_exchange_n(&told_pid, pid, __ATOMIC_RELAXED) != pid)
		gs_err("%s refused: unified memory is not supported under a gpuslice memory cap; allocate with cuMemAlloc (cudaMalloc) instead",
		       what);
	return CUDA_ERROR_NOT_SUPPORTED;
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
				     unsigned int flags)
{
	__typeof__(&cuMemAllocManaged) real = REAL(cuMemAllocManaged);

	if (!gs_enabled())
		return real(dptr, bytesize, flags);
	return gs_managed_refused("cuMemAllocManaged (cudaMallocManaged)");
}

/*
 * The application sees its vGPU, not the card: total = cap and free =
 * cap - used, never more than the card really has free.
 */
GS_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	__typeof__(&cuMemGetInfo_v2) real = REAL(cuMemGetInfo_v2);
	uint64_t used, cap;
	struct gs_card *c;
	CUcontext ctx;
	CUresult r;

	/* The driver judges the arguments and the context as it would. */
	r = real(free, total);
	if (r != CUDA_SUCCESS || !gs_enabled() ||
	    !(c = gs_current_card(&ctx)))
		return r;
	/* Memory queued frees and pools have given back is free again. */
	gs_pools_reconcile(c);
	if (!gs_card_usage(c, &used, &cap))
		used = cap = 0;	/* no ledger: nothing may be allocated */
	if (used > cap)
		used = cap;
	if (free && cap - used < *free)
		*free = cap - used;
	if (total)
		*total = cap;
	return r;
}

GS_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	__typeof__(&cuDeviceTotalMem_v2) real = REAL(cuDeviceTotalMem_v2);
	CUresult r = real(bytes, dev);
	uint64_t used, cap;

	/* The ledger's cap is the one enforced, as cuMemGetInfo reports. */
	if (r == CUDA_SUCCESS && gs_enabled())
		*bytes = gs_card_usage(gs_card_for_device(dev), &used, &cap) ?
				 cap : 0;
	return r;
}
