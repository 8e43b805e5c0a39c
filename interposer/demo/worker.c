// SPDX-License-Identifier: Apache-2.0
/*
 * A stand-in for a GPU application in the demo: it loads the driver the way
 * frameworks do (dlopen), shows what it is told about the card, then
 * allocates chunks until the driver says no, and holds its memory until it
 * is told to go (SIGTERM) or killed.
 *
 *   gsdemo-worker NAME CHUNK_MIB [MAX_MIB [managed]]
 *
 * MAX_MIB 0 (the default) allocates until refused.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gpuslice/cuda_api.h"

#define MIB (1024.0 * 1024.0)

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);

	if (!p) {
		fprintf(stderr, "driver lacks %s\n", name);
		exit(2);
	}
	return p;
}

int main(int argc, char **argv)
{
	__typeof__(&cuInit) init;
	__typeof__(&cuDevicePrimaryCtxRetain) retain;
	__typeof__(&cuCtxSetCurrent) set_current;
	__typeof__(&cuMemGetInfo_v2) mem_info;
	__typeof__(&cuMemAlloc_v2) alloc;
	__typeof__(&cuMemAllocManaged) alloc_managed;
	const char *name = argc > 1 ? argv[1] : "worker";
	size_t chunk = (size_t)(argc > 2 ? atoi(argv[2]) : 256) << 20;
	size_t max = (size_t)(argc > 3 ? atoi(argv[3]) : 0) << 20;
	size_t free_b, total_b, held = 0;
	CUdeviceptr p;
	CUcontext ctx;
	CUresult r;
	void *lib;

	setvbuf(stdout, NULL, _IOLBF, 0);
	lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "%s: %s\n", name, dlerror());
		return 2;
	}
	init = sym(lib, "cuInit");
	retain = sym(lib, "cuDevicePrimaryCtxRetain");
	set_current = sym(lib, "cuCtxSetCurrent");
	mem_info = sym(lib, "cuMemGetInfo_v2");
	alloc = sym(lib, "cuMemAlloc_v2");
	alloc_managed = sym(lib, "cuMemAllocManaged");
	if (init(0) || retain(&ctx, 0) || set_current(ctx)) {
		fprintf(stderr, "%s: cannot open the GPU\n", name);
		return 2;
	}
	mem_info(&free_b, &total_b);
	printf("%-8s sees %6.0f MiB total, %6.0f MiB free\n", name,
	       total_b / MIB, free_b / MIB);
	if (argc > 4) {
		r = alloc_managed(&p, chunk, CU_MEM_ATTACH_GLOBAL);
		printf("%-8s cuMemAllocManaged(%.0f MiB) -> CUresult %d\n", name,
		       chunk / MIB, r);
	}
	for (;;) {
		if (max && held + chunk > max) {
			printf("%-8s holds %.0f MiB\n", name, held / MIB);
			break;
		}
		r = alloc(&p, chunk);
		if (r != CUDA_SUCCESS)
			break;
		held += chunk;
		printf("%-8s allocated %4.0f MiB, holds %6.0f MiB\n", name,
		       chunk / MIB, held / MIB);
		usleep(150000);
	}
	mem_info(&free_b, &total_b);
	if (!max || held + chunk <= max)
		printf("%-8s cuMemAlloc(%.0f MiB) -> CUresult %d%s; holds %.0f MiB, free now %.0f MiB\n",
		       name, chunk / MIB, r,
		       r == CUDA_ERROR_OUT_OF_MEMORY ?
			       " (CUDA_ERROR_OUT_OF_MEMORY)" : "",
		       held / MIB, free_b / MIB);
	printf("%-8s ready\n", name);
	pause();
	return 0;
}
