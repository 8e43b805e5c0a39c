// SPDX-License-Identifier: Apache-2.0
/*
 * gsdirect [bytes]: the by-symbol path. Linked against libcuda.so.1 (no
 * dlopen), so with LD_PRELOAD=libgpuslice.so the dynamic linker binds
 * these calls to the shim's exports.
 *
 * It prints what cuMemGetInfo and cuDeviceTotalMem say, tries
 * cuMemAllocManaged (prints its result), then allocates bytes (default:
 * free + 1 MiB) and exits 0 when that succeeds, 2 when it is refused with
 * CUDA_ERROR_OUT_OF_MEMORY, 1 on any other error.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpuslice/cuda_api.h"

int main(int argc, char **argv)
{
	unsigned long long bytes;
	CUdeviceptr d = 0, m = 0;
	size_t free, total, dtotal;
	CUcontext ctx;
	CUresult rc;

	if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) ||
	    cuCtxSetCurrent(ctx)) {
		fprintf(stderr, "gsdirect: no context on device 0\n");
		return 1;
	}
	if (cuMemGetInfo_v2(&free, &total) || cuDeviceTotalMem_v2(&dtotal, 0))
		return 1;
	printf("free=%zu\ntotal=%zu\ndevice.total=%zu\n", free, total, dtotal);
	rc = cuMemAllocManaged(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL);
	printf("managed.rc=%d\n", (int)rc);
	if (rc == CUDA_SUCCESS)
		cuMemFree_v2(m);
	bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : free + (1 << 20);
	rc = cuMemAlloc_v2(&d, bytes);
	printf("alloc.rc=%d\n", (int)rc);
	if (rc == CUDA_SUCCESS)
		cuMemFree_v2(d);
	cuDevicePrimaryCtxRelease_v2(0);
	if (rc == CUDA_ERROR_OUT_OF_MEMORY)
		return 2;
	return rc == CUDA_SUCCESS ? 0 : 1;
}
