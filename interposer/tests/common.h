/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared helpers of gstest, the end-to-end test program of the shim.
 *
 * gstest reaches the driver the way frameworks do: dlopen("libcuda.so.1")
 * and dlsym(), with the prototypes of cuda_api.h taken by __typeof__. It
 * depends on nothing of the simulated driver, so the same binary runs on a
 * real GPU; simcuda's extension functions are used only when dlsym finds
 * them.
 *
 * Conventions: every failed check prints one "FAIL ..." line on stderr and
 * makes the program exit 1. Exit 2 is reserved for "the device allocation
 * was refused with CUDA_ERROR_OUT_OF_MEMORY" in the probes (alloc, hold).
 * Results meant for the Go tests are printed as key=value lines on stdout.
 */
#ifndef GSTEST_COMMON_H
#define GSTEST_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gpuslice/cuda_api.h"
#include "gpuslice/nvml.h"

#define MIB (1024ULL * 1024ULL)

/* Driver entry points gstest calls. Optional ones may be NULL. */
#define GSTEST_CU_FUNCS(X)                  \
	X(cuInit)                           \
	X(cuDriverGetVersion)               \
	X(cuGetErrorName)                   \
	X(cuGetProcAddress)                 \
	X(cuGetProcAddress_v2)              \
	X(cuDeviceGet)                      \
	X(cuDeviceGetCount)                 \
	X(cuDeviceTotalMem_v2)              \
	X(cuCtxCreate_v2)                   \
	X(cuCtxCreate_v3)                   \
	X(cuCtxCreate_v4)                   \
	X(cuCtxDestroy_v2)                  \
	X(cuCtxGetCurrent)                  \
	X(cuCtxSetCurrent)                  \
	X(cuCtxPopCurrent_v2)               \
	X(cuCtxSynchronize)                 \
	X(cuCtxSetLimit)                    \
	X(cuCtxGetLimit)                    \
	X(cuDeviceGetAttribute)             \
	X(cuDevicePrimaryCtxRetain)         \
	X(cuDevicePrimaryCtxRelease_v2)     \
	X(cuDevicePrimaryCtxReset_v2)       \
	X(cuMemGetInfo_v2)                  \
	X(cuMemAlloc_v2)                    \
	X(cuMemAllocPitch_v2)               \
	X(cuMemFree_v2)                     \
	X(cuMemAllocManaged)                \
	X(cuMemAllocAsync)                  \
	X(cuMemAllocAsync_ptsz)             \
	X(cuMemAllocFromPoolAsync)          \
	X(cuMemAllocFromPoolAsync_ptsz)     \
	X(cuMemFreeAsync)                   \
	X(cuMemFreeAsync_ptsz)              \
	X(cuMemPoolCreate)                  \
	X(cuMemPoolDestroy)                 \
	X(cuMemPoolTrimTo)                  \
	X(cuMemPoolSetAttribute)            \
	X(cuMemPoolGetAttribute)            \
	X(cuDeviceGetDefaultMemPool)        \
	X(cuDeviceGetMemPool)               \
	X(cuDeviceSetMemPool)               \
	X(cuMemGetDefaultMemPool)           \
	X(cuMemGetMemPool)                  \
	X(cuMemSetMemPool)                  \
	X(cuMemCreate)                      \
	X(cuMemRelease)                     \
	X(cuMemRetainAllocationHandle)      \
	X(cuMemAddressReserve)              \
	X(cuMemAddressFree)                 \
	X(cuMemMap)                         \
	X(cuMemUnmap)                       \
	X(cuMemSetAccess)                   \
	X(cuMemGetAllocationGranularity)    \
	X(cuArrayCreate_v2)                 \
	X(cuArray3DCreate_v2)               \
	X(cuArrayDestroy)                   \
	X(cuMipmappedArrayCreate)           \
	X(cuMipmappedArrayDestroy)          \
	X(cuStreamCreate)                   \
	X(cuStreamDestroy_v2)               \
	X(cuStreamSynchronize)              \
	X(cuStreamSynchronize_ptsz)         \
	X(cuStreamQuery)                    \
	X(cuModuleLoadData)                 \
	X(cuModuleUnload)                   \
	X(cuModuleGetFunction)              \
	X(cuLaunchKernel)                   \
	X(cuLaunchKernel_ptsz)              \
	X(cuEventCreate)                    \
	X(cuEventRecord)                    \
	X(cuEventRecord_ptsz)               \
	X(cuEventSynchronize)               \
	X(cuEventQuery)                     \
	X(cuEventDestroy_v2)                \
	/* Device identity (devices.c). */  \
	X(cuDeviceGetUuid_v2)               \
	X(cuDeviceGetPCIBusId)              \
	GSTEST_GRAPH_FUNCS(X)

/* Stream capture, graphs, libraries, the legacy launches (cuda_graph.h). */
#define GSTEST_GRAPH_FUNCS(X)               \
	X(cuCtxPushCurrent_v2)              \
	X(cuStreamWaitEvent)                \
	X(cuStreamGetCtx)                   \
	X(cuStreamBeginCapture_v2)          \
	X(cuStreamEndCapture)               \
	X(cuStreamIsCapturing)              \
	X(cuThreadExchangeStreamCaptureMode) \
	X(cuLaunchHostFunc)                 \
	X(cuGraphCreate)                    \
	X(cuGraphDestroy)                   \
	X(cuGraphAddKernelNode_v2)          \
	X(cuGraphAddMemAllocNode)           \
	X(cuGraphAddMemFreeNode)            \
	X(cuGraphInstantiateWithFlags)      \
	X(cuGraphInstantiateWithParams)     \
	X(cuGraphExecDestroy)               \
	X(cuGraphLaunch)                    \
	X(cuGraphUpload)                    \
	X(cuDeviceGetGraphMemAttribute)     \
	X(cuDeviceGraphMemTrim)             \
	X(cuLibraryLoadData)                \
	X(cuLibraryUnload)                  \
	X(cuLibraryGetKernel)               \
	X(cuFuncSetBlockShape)              \
	X(cuParamSetSize)                   \
	X(cuParamSetv)                      \
	X(cuLaunch)                         \
	X(cuLaunchGrid)                     \
	X(cuLaunchGridAsync)

#define GSTEST_NVML_FUNCS(X)             \
	X(nvmlInit_v2)                   \
	X(nvmlShutdown)                  \
	X(nvmlDeviceGetCount_v2)         \
	X(nvmlDeviceGetHandleByIndex_v2) \
	X(nvmlDeviceGetMemoryInfo)       \
	X(nvmlDeviceGetMemoryInfo_v2)    \
	X(nvmlDeviceGetUUID)             \
	X(nvmlDeviceGetPciInfo_v3)

struct cu_api {
#define X(n) __typeof__(&n) n;
	GSTEST_CU_FUNCS(X)
#undef X
	/* simcuda extension: physical bytes in use on a device. */
	int (*simcudaDeviceUsed)(int dev, uint64_t *used);
};

struct nvml_api {
#define X(n) __typeof__(&n) n;
	GSTEST_NVML_FUNCS(X)
#undef X
};

extern struct cu_api cu;
extern struct nvml_api nv;

/* dlopen()s libcuda.so.1 and fills cu; exits 1 when it cannot. */
void load_cuda(void);
/* The same for libnvidia-ml.so.1 and nv. */
void load_nvml(void);
/*
 * load_nvml, nvmlInit_v2 and NVML's device count, printed as nvml.count=;
 * 0 (and a failed check) when NVML cannot say. nv.nvmlShutdown ends it.
 */
unsigned int nvml_begin(void);
/* NVML's device i, or false (and a failed check). */
bool nvml_device(unsigned int i, nvmlDevice_t *h);
/* The handle of libcuda.so.1 (after load_cuda). */
void *cuda_handle(void);

/* Prints "FAIL <where>: ..." and counts a failure (thread safe). */
void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "gstest: ..." and exits 1. */
void dief(const char *fmt, ...) __attribute__((format(printf, 1, 2),
						 noreturn));
/* Informational line on stderr. */
void notef(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int failures(void);
/* The process exit status: 1 when any check failed, else 0. */
int finish(const char *what);

/* The driver's name for rc, e.g. CUDA_ERROR_OUT_OF_MEMORY. */
const char *rcname(CUresult rc);

/* Checks that a call returned want; counts a failure otherwise. */
bool expect_rc(CUresult got, CUresult want, const char *call,
	       const char *file, int line);
#define EXPECT(call, want) expect_rc((call), (want), #call, __FILE__, __LINE__)
#define CHECK(call) EXPECT(call, CUDA_SUCCESS)

/* A required entry point: exits 1 when the driver lacks it. */
#define NEED(fn)                                                       \
	do {                                                           \
		if (!cu.fn)                                            \
			dief("the driver does not export %s", #fn);    \
	} while (0)

/* load_cuda, then cuInit; exits 1 naming the error when it fails. */
void cuda_init(void);
/*
 * cuInit, then retains device dev's primary context and makes it current.
 * A refusal exits the program: 2 for CUDA_ERROR_OUT_OF_MEMORY (the shim
 * refusing the context), 1 otherwise, after printing ctx.rc=N.
 */
CUcontext open_primary(int dev);
void close_primary(int dev);

/* cuMemGetInfo_v2 of the current context; counts a failure on error. */
void mem_info(size_t *free, size_t *total);
size_t mem_free(void);
/* Checks that cuMemGetInfo's free is want. */
bool expect_free(size_t want, const char *when);

/* The VMM allocation granularity of device dev (2 MiB when unknown). */
size_t vmm_granularity(int dev);

/* CLOCK_MONOTONIC in ns. */
uint64_t now_ns(void);

/* Parses "123", "4K", "16M", "2G" (binary units); exits 1 on junk. */
uint64_t parse_size(const char *s);
long parse_long(const char *s, long min, long max, const char *what);

/* A small, fast, per-thread PRNG (splitmix64). */
static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Subcommands (one source file each). */
int cmd_cap(int argc, char **argv);
int cmd_order(int argc, char **argv);
int cap_context(int dev);	/* cap context, in context.c */
int cmd_meminfo(int argc, char **argv);
int cmd_nvmlinfo(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_managed(int argc, char **argv);
int cmd_alloc(int argc, char **argv);
int cmd_hold(int argc, char **argv);
int cmd_procaddr(int argc, char **argv);
/* Loaded images (module.c). */
int cmd_module(int argc, char **argv);
int cmd_unseen(int argc, char **argv);
int cmd_libgate(int argc, char **argv);
int cmd_storm(int argc, char **argv);
int cmd_fork(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_schedinfo(int argc, char **argv);
int cmd_span(int argc, char **argv);
int cmd_edge(int argc, char **argv);
int cmd_limit(int argc, char **argv);
int cmd_tenant(int argc, char **argv);
/* The spin kernel of tenant.c (PTX: no toolkit needed). */
extern const char spin_ptx[];
int cmd_capture(int argc, char **argv);
int cmd_hostwait(int argc, char **argv);
int cmd_graphmem(int argc, char **argv);
int cmd_paths(int argc, char **argv);
int cmd_procall(int argc, char **argv);
int cmd_ctxfoot(int argc, char **argv);
int cmd_wrap(int argc, char **argv);
int cmd_scope(int argc, char **argv);
int cmd_devopen(int argc, char **argv);

/* CUDA 13 pools (pools.c). */
int cmd_pools(int argc, char **argv);
/*
 * cuMemPoolCreate; with GSTEST_UNSEEN_POOLS=1 (and GSTEST_LATE_SHIM) the
 * driver's own, behind the shim's back: a pool the shim never saw made.
 */
CUresult pool_create(CUmemoryPool *pool, const CUmemPoolProps *props);
/*
 * GSTEST_PROCADDR=v1|v2: the entry points cuGetProcAddress hands out are
 * taken from it (or from cuGetProcAddress_v2) instead of dlsym (via.c).
 */
void load_via_procaddr(void);

#endif /* GSTEST_COMMON_H */
