// SPDX-License-Identifier: Apache-2.0
/*
 * cuGetProcAddress. Callers ask by BASE name ("cuMemAlloc") and CUDA
 * version; the driver picks the ABI variant ("cuMemAlloc_v2") that version
 * was built against, and the per-thread-default-stream variant ("_ptsz")
 * when asked to. SIM_PROCS below is the single table all lookups derive
 * from: base name, exported symbol, first CUDA version that uses it, and
 * whether it is the per-thread variant.
 *
 * Like the real driver, the library is linked -Bsymbolic: the table holds
 * this library's own functions, never a preloaded interposer's, so an
 * interposer must wrap what cuGetProcAddress returns itself.
 */
#include <string.h>

#include "sim.h"

#define SIM_PROCS(X)							\
	X(cuInit, cuInit, 2000, 0)					\
	X(cuDriverGetVersion, cuDriverGetVersion, 2000, 0)		\
	X(cuGetErrorString, cuGetErrorString, 2000, 0)			\
	X(cuGetErrorName, cuGetErrorName, 2000, 0)			\
	X(cuGetProcAddress, cuGetProcAddress, 11030, 0)			\
	X(cuGetProcAddress, cuGetProcAddress_v2, 12000, 0)		\
	X(cuDeviceGet, cuDeviceGet, 2000, 0)				\
	X(cuDeviceGetCount, cuDeviceGetCount, 2000, 0)			\
	X(cuDeviceGetName, cuDeviceGetName, 2000, 0)			\
	X(cuDeviceGetUuid, cuDeviceGetUuid, 9020, 0)			\
	X(cuDeviceGetUuid, cuDeviceGetUuid_v2, 11040, 0)		\
	X(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 2000, 0)		\
	X(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020, 0)		\
	X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, 0)		\
	X(cuCtxCreate, cuCtxCreate_v2, 3020, 0)				\
	X(cuCtxCreate, cuCtxCreate_v3, 11040, 0)			\
	X(cuCtxCreate, cuCtxCreate_v4, 12050, 0)			\
	X(cuCtxDestroy, cuCtxDestroy_v2, 4000, 0)			\
	X(cuCtxGetCurrent, cuCtxGetCurrent, 2000, 0)			\
	X(cuCtxSetCurrent, cuCtxSetCurrent, 2000, 0)			\
	X(cuCtxPushCurrent, cuCtxPushCurrent_v2, 4000, 0)		\
	X(cuCtxPopCurrent, cuCtxPopCurrent_v2, 4000, 0)			\
	X(cuCtxGetDevice, cuCtxGetDevice, 2000, 0)			\
	X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0)			\
	X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 2000, 0)	\
	X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000, 0) \
	X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, 11000, 0) \
	X(cuMemGetInfo, cuMemGetInfo_v2, 3020, 0)			\
	X(cuMemAlloc, cuMemAlloc_v2, 3020, 0)				\
	X(cuMemAllocPitch, cuMemAllocPitch_v2, 3020, 0)			\
	X(cuMemFree, cuMemFree_v2, 3020, 0)				\
	X(cuMemAllocManaged, cuMemAllocManaged, 2000, 0)		\
	X(cuMemGetAddressRange, cuMemGetAddressRange_v2, 3020, 0)	\
	X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)			\
	X(cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020, 1)		\
	X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)	\
	X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, 11020, 1) \
	X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)			\
	X(cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020, 1)		\
	X(cuMemPoolCreate, cuMemPoolCreate, 11020, 0)			\
	X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0)			\
	X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, 0)			\
	X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020, 0)	\
	X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020, 0)	\
	X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, 0) \
	X(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, 0)		\
	X(cuDeviceSetMemPool, cuDeviceSetMemPool, 11020, 0)		\
	X(cuMemCreate, cuMemCreate, 10020, 0)				\
	X(cuMemRelease, cuMemRelease, 10020, 0)				\
	X(cuMemAddressReserve, cuMemAddressReserve, 10020, 0)		\
	X(cuMemAddressFree, cuMemAddressFree, 10020, 0)			\
	X(cuMemMap, cuMemMap, 10020, 0)					\
	X(cuMemUnmap, cuMemUnmap, 10020, 0)				\
	X(cuMemSetAccess, cuMemSetAccess, 10020, 0)			\
	X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020, 0) \
	X(cuArrayCreate, cuArrayCreate_v2, 3020, 0)			\
	X(cuArray3DCreate, cuArray3DCreate_v2, 3020, 0)			\
	X(cuArrayDestroy, cuArrayDestroy, 2000, 0)			\
	X(cuArrayGetMemoryRequirements, cuArrayGetMemoryRequirements, 2000, 0) \
	X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 2000, 0)	\
	X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 2000, 0)	\
	X(cuMipmappedArrayGetMemoryRequirements,			\
	  cuMipmappedArrayGetMemoryRequirements, 2000, 0)		\
	X(cuStreamCreate, cuStreamCreate, 2000, 0)			\
	X(cuStreamDestroy, cuStreamDestroy_v2, 4000, 0)			\
	X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0)		\
	X(cuStreamSynchronize, cuStreamSynchronize_ptsz, 7000, 1)	\
	X(cuStreamQuery, cuStreamQuery, 2000, 0)			\
	X(cuStreamQuery, cuStreamQuery_ptsz, 7000, 1)			\
	X(cuStreamWaitEvent, cuStreamWaitEvent, 2000, 0)		\
	X(cuStreamWaitEvent, cuStreamWaitEvent_ptsz, 7000, 1)		\
	X(cuEventCreate, cuEventCreate, 2000, 0)			\
	X(cuEventDestroy, cuEventDestroy_v2, 4000, 0)			\
	X(cuEventRecord, cuEventRecord, 2000, 0)			\
	X(cuEventRecord, cuEventRecord_ptsz, 7000, 1)			\
	X(cuEventSynchronize, cuEventSynchronize, 2000, 0)		\
	X(cuEventQuery, cuEventQuery, 2000, 0)				\
	X(cuEventElapsedTime, cuEventElapsedTime, 2000, 0)		\
	X(cuModuleLoadData, cuModuleLoadData, 2000, 0)			\
	X(cuModuleUnload, cuModuleUnload, 2000, 0)			\
	X(cuModuleGetFunction, cuModuleGetFunction, 2000, 0)		\
	X(cuLaunchKernel, cuLaunchKernel, 2000, 0)			\
	X(cuLaunchKernel, cuLaunchKernel_ptsz, 7000, 1)			\
	X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0)			\
	X(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, 11060, 1)		\
	X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0) \
	X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, 9000, 1)

struct proc {
	const char *base;
	const char *symbol;
	void *fn;
	int version;
	int ptsz;
};

static const struct proc procs[] = {
#define SIM_PROC_ENTRY(base, sym, ver, ptsz) \
	{ #base, #sym, (void *)&sym, ver, ptsz },
	SIM_PROCS(SIM_PROC_ENTRY)
#undef SIM_PROC_ENTRY
};

#define NPROCS (sizeof(procs) / sizeof(procs[0]))

/* The newest variant of base with the given ptsz flag usable at version. */
static const struct proc *pick(const char *base, int version, int ptsz,
			       int *known)
{
	const struct proc *best = NULL;

	for (size_t i = 0; i < NPROCS; i++) {
		const struct proc *p = &procs[i];

		if (strcmp(p->base, base))
			continue;
		*known = 1;
		if (p->ptsz != ptsz || p->version > version)
			continue;
		if (!best || p->version > best->version)
			best = p;
	}
	return best;
}

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion,
		       cuuint64_t flags, CUdriverProcAddressQueryResult *st)
{
	const cuuint64_t known_flags =
		CU_GET_PROC_ADDRESS_LEGACY_STREAM |
		CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	const struct proc *p = NULL;
	int known = 0;

	if (!symbol || !pfn || (flags & ~known_flags))
		return CUDA_ERROR_INVALID_VALUE;
	/* Per-thread when asked, falling back where there is no such variant. */
	if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
		p = pick(symbol, cudaVersion, 1, &known);
	if (!p)
		p = pick(symbol, cudaVersion, 0, &known);
	*pfn = p ? p->fn : NULL;
	if (st)
		*st = p ? CU_GET_PROC_ADDRESS_SUCCESS
			: known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
				: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return p ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn,
				  int cudaVersion, cuuint64_t flags)
{
	return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn,
				     int cudaVersion, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *symbolStatus)
{
	return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
