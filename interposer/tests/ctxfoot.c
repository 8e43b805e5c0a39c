// SPDX-License-Identifier: Apache-2.0
/*
 * gstest ctxfoot [device]: the device memory the driver itself takes for a
 * process, as NVML sees the device: its use before cuInit, after the
 * primary context is made current (the context's footprint, what
 * GPUSLICE_CONTEXT_MIB estimates), and after a module is loaded and a
 * kernel has run in it (code, and what the first launch sets up). Run it
 * without the shim, on an otherwise idle card: NVML's figure is the whole
 * device's.
 *
 * Prints before_bytes, context_bytes and module_bytes (each the increase
 * over the step before; 0 when the device's use went down meanwhile).
 */
#include <string.h>

#include "common.h"

static uint64_t used(unsigned int i)
{
	nvmlMemory_t m;
	nvmlDevice_t h;

	if (!nvml_device(i, &h) ||
	    nv.nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS) {
		failf("ctxfoot: nvmlDeviceGetMemoryInfo(%u) failed", i);
		return 0;
	}
	return m.used;
}

static uint64_t delta(uint64_t from, uint64_t to)
{
	return to > from ? to - from : 0;
}

int cmd_ctxfoot(int argc, char **argv)
{
	int dev = argc > 0 ? (int)parse_long(argv[0], 0, 15, "device") : 0;
	uint64_t u0, u1, u2, ns = 1000;
	void *params[] = { &ns };
	CUmodule mod;
	CUfunction f;

	nvml_begin();
	u0 = used((unsigned int)dev);
	load_cuda();
	open_primary(dev);
	u1 = used((unsigned int)dev);
	if (!CHECK(cu.cuModuleLoadData(&mod, spin_ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&f, mod, "spin")) ||
	    !CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params,
				     NULL)) ||
	    !CHECK(cu.cuCtxSynchronize()))
		return finish("ctxfoot");
	u2 = used((unsigned int)dev);
	printf("before_bytes=%llu\n", (unsigned long long)u0);
	printf("context_bytes=%llu\n", (unsigned long long)delta(u0, u1));
	printf("module_bytes=%llu\n", (unsigned long long)delta(u1, u2));
	cu.cuModuleUnload(mod);
	close_primary(dev);
	return finish("ctxfoot");
}
