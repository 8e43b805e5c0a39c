// SPDX-License-Identifier: Apache-2.0
/*
 * A driver in two parts, as WSL2 ships it: the libcuda.so.1 that
 * applications load (here $(LIB)/wsl/libcuda.so.1) is a stub that
 * dlopen()s the real driver under another name (here the simulated driver
 * copied to driver/libcuda.so.1.1 beside the stub) and forwards each entry
 * point to it, looking each up with dlsym on that handle at its first
 * call. The shim preloaded in front must let the driver's own lookups
 * through: given the shim's wrapper instead, the stub would forward the
 * shim's call back into the shim, forever.
 *
 * Only the entry points the forwarding tests reach are forwarded (gstest's
 * alloc and meminfo, gsdirect, and those the shim calls for them); the
 * shim finds the others missing and fails them with CUDA_ERROR_NOT_FOUND.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/cuda_api.h"

#define INNER "driver/libcuda.so.1.1"

static void *inner;
static pthread_once_t inner_once = PTHREAD_ONCE_INIT;

/* The inner driver, from the directory this stub was loaded from. */
static void open_inner(void)
{
	char path[PATH_MAX];
	const char *slash;
	Dl_info info;

	if (!dladdr((void *)open_inner, &info) || !info.dli_fname ||
	    !(slash = strrchr(info.dli_fname, '/'))) {
		fprintf(stderr, "wslstub: cannot tell where the stub lives\n");
		abort();
	}
	snprintf(path, sizeof(path), "%.*s/%s",
		 (int)(slash - info.dli_fname), info.dli_fname, INNER);
	inner = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!inner) {
		fprintf(stderr, "wslstub: %s\n", dlerror());
		abort();
	}
	fprintf(stderr, "wslstub: forwarding to %s\n", path);
}

/* The inner driver's entry point name; the stub cannot run without it. */
static void *forward(const char *name)
{
	void *fn;

	pthread_once(&inner_once, open_inner);
	fn = dlsym(inner, name);
	if (!fn) {
		fprintf(stderr, "wslstub: the driver has no %s\n", name);
		abort();
	}
	return fn;
}

/*
 * One forwarder: the prototype is cuda_api.h's (a different parameter list
 * fails the compile), the target is looked up at the first call.
 */
#define FWD(name, params, args)                                             \
	__attribute__((visibility("default"))) CUresult name params         \
	{                                                                   \
		static __typeof__(&name) fn;                                \
		__typeof__(&name) f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE); \
									    \
		if (!f) {                                                   \
			f = (__typeof__(&name))forward(#name);              \
			__atomic_store_n(&fn, f, __ATOMIC_RELEASE);         \
		}                                                           \
		return f args;                                              \
	}

FWD(cuInit, (unsigned int flags), (flags))
FWD(cuDriverGetVersion, (int *version), (version))
FWD(cuGetErrorName, (CUresult error, const char **str), (error, str))
FWD(cuDeviceGet, (CUdevice *device, int ordinal), (device, ordinal))
FWD(cuDeviceGetCount, (int *count), (count))
FWD(cuDeviceGetAttribute, (int *pi, CUdevice_attribute attrib, CUdevice dev),
    (pi, attrib, dev))
FWD(cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev), (bytes, dev))
FWD(cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev), (pctx, dev))
FWD(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), (dev))
FWD(cuCtxGetCurrent, (CUcontext *pctx), (pctx))
FWD(cuCtxSetCurrent, (CUcontext ctx), (ctx))
FWD(cuCtxPushCurrent_v2, (CUcontext ctx), (ctx))
FWD(cuCtxPopCurrent_v2, (CUcontext *pctx), (pctx))
FWD(cuCtxGetDevice, (CUdevice *device), (device))
FWD(cuMemGetInfo_v2, (size_t *free, size_t *total), (free, total))
FWD(cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize))
FWD(cuMemFree_v2, (CUdeviceptr dptr), (dptr))
FWD(cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize, unsigned int flags),
    (dptr, bytesize, flags))
