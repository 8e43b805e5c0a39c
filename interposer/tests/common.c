// SPDX-License-Identifier: Apache-2.0
/*
 * Loading the driver the way frameworks do (dlopen + dlsym), and the
 * helpers every gstest subcommand uses.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

struct cu_api cu;
struct nvml_api nv;

static void *libcuda;
static int nfail;

static void vline(const char *prefix, const char *fmt, va_list ap)
{
	char buf[1024];
	int n;

	n = snprintf(buf, sizeof(buf), "%s", prefix);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	/* One write per line: threads and processes do not interleave. */
	if (write(STDERR_FILENO, buf, (size_t)n) < 0)
		return;
}

void failf(const char *fmt, ...)
{
	char prefix[64];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "FAIL gstest[%d]: ", (int)getpid());
	__atomic_add_fetch(&nfail, 1, __ATOMIC_RELAXED);
	va_start(ap, fmt);
	vline(prefix, fmt, ap);
	va_end(ap);
}

void dief(const char *fmt, ...)
{
	char prefix[64];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "gstest[%d]: fatal: ", (int)getpid());
	va_start(ap, fmt);
	vline(prefix, fmt, ap);
	va_end(ap);
	exit(1);
}

void notef(const char *fmt, ...)
{
	char prefix[64];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "gstest[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vline(prefix, fmt, ap);
	va_end(ap);
}

int failures(void)
{
	return __atomic_load_n(&nfail, __ATOMIC_RELAXED);
}

int finish(const char *what)
{
	int n = failures();

	fflush(stdout);
	if (n) {
		notef("%s: %d check(s) failed", what, n);
		return 1;
	}
	notef("%s: ok", what);
	return 0;
}

/*
 * GSTEST_LATE_SHIM=<path of libgpuslice.so>: instead of being preloaded,
 * the shim is dlopen()ed after the driver, and every entry point it
 * exports is taken from it. The driver's cuGetProcAddress then hands out
 * its own functions, which the shim must swap for its wrappers.
 */
static void load_late_shim(void)
{
	const char *path = getenv("GSTEST_LATE_SHIM");
	void *h;
	int n = 0;

	if (!path || !*path)
		return;
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		dief("dlopen(%s): %s", path, dlerror());
#define X(name)                                              \
	do {                                                 \
		void *p = dlsym(h, #name);                   \
		if (p) {                                     \
			cu.name = (__typeof__(cu.name))p;    \
			n++;                                 \
		}                                            \
	} while (0);
	GSTEST_CU_FUNCS(X)
#undef X
	notef("late shim %s: %d entry points taken from it", path, n);
}

void load_cuda(void)
{
	if (libcuda)
		return;
	libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!libcuda)
		dief("dlopen(libcuda.so.1): %s", dlerror());
#define X(n) cu.n = (__typeof__(cu.n))dlsym(libcuda, #n);
	GSTEST_CU_FUNCS(X)
#undef X
	cu.simcudaDeviceUsed = (__typeof__(cu.simcudaDeviceUsed))dlsym(
		libcuda, "simcudaDeviceUsed");
	load_late_shim();
	load_via_procaddr();
	NEED(cuInit);
	NEED(cuDeviceGet);
	NEED(cuDevicePrimaryCtxRetain);
	NEED(cuCtxSetCurrent);
	NEED(cuMemGetInfo_v2);
	NEED(cuMemAlloc_v2);
	NEED(cuMemFree_v2);
}

void *cuda_handle(void)
{
	return libcuda;
}

void load_nvml(void)
{
	void *h;

	if (nv.nvmlInit_v2)
		return;
	h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		dief("dlopen(libnvidia-ml.so.1): %s", dlerror());
#define X(n)                                                     \
	nv.n = (__typeof__(nv.n))dlsym(h, #n);                   \
	if (!nv.n)                                               \
		dief("libnvidia-ml.so.1 does not export %s", #n);
	GSTEST_NVML_FUNCS(X)
#undef X
}

unsigned int nvml_begin(void)
{
	unsigned int n = 0;
	nvmlReturn_t rc;

	load_nvml();
	rc = nv.nvmlInit_v2();
	if (rc != NVML_SUCCESS) {
		failf("nvmlInit_v2: %d", (int)rc);
		return 0;
	}
	if (nv.nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS)
		failf("nvmlDeviceGetCount_v2 failed");
	printf("nvml.count=%u\n", n);
	return n;
}

bool nvml_device(unsigned int i, nvmlDevice_t *h)
{
	if (nv.nvmlDeviceGetHandleByIndex_v2(i, h) == NVML_SUCCESS)
		return true;
	failf("nvmlDeviceGetHandleByIndex_v2(%u) failed", i);
	return false;
}

const char *rcname(CUresult rc)
{
	static __thread char buf[32];
	const char *s = NULL;

	if (cu.cuGetErrorName && cu.cuGetErrorName(rc, &s) == CUDA_SUCCESS &&
	    s)
		return s;
	snprintf(buf, sizeof(buf), "CUresult %d", (int)rc);
	return buf;
}

bool expect_rc(CUresult got, CUresult want, const char *call,
	       const char *file, int line)
{
	if (got == want)
		return true;
	failf("%s:%d: %s returned %d (%s), want %d (%s)", file, line, call,
	      (int)got, rcname(got), (int)want, rcname(want));
	return false;
}

void cuda_init(void)
{
	CUresult rc;

	load_cuda();
	rc = cu.cuInit(0);
	if (rc != CUDA_SUCCESS)
		dief("cuInit: %d (%s)", (int)rc, rcname(rc));
}

CUcontext open_primary(int dev)
{
	CUcontext ctx = NULL;
	CUdevice d;
	CUresult rc;

	cuda_init();
	rc = cu.cuDeviceGet(&d, dev);
	if (rc != CUDA_SUCCESS)
		dief("cuDeviceGet(%d): %d (%s)", dev, (int)rc, rcname(rc));
	rc = cu.cuDevicePrimaryCtxRetain(&ctx, d);
	if (rc != CUDA_SUCCESS) {
		printf("ctx.rc=%d\n", (int)rc);
		fflush(stdout);
		notef("cuDevicePrimaryCtxRetain(%d): %d (%s)", dev, (int)rc,
		      rcname(rc));
		exit(rc == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 1);
	}
	rc = cu.cuCtxSetCurrent(ctx);
	if (rc != CUDA_SUCCESS)
		dief("cuCtxSetCurrent: %d (%s)", (int)rc, rcname(rc));
	return ctx;
}

void close_primary(int dev)
{
	if (cu.cuDevicePrimaryCtxRelease_v2)
		CHECK(cu.cuDevicePrimaryCtxRelease_v2(dev));
}

void mem_info(size_t *free, size_t *total)
{
	size_t f = 0, t = 0;

	CHECK(cu.cuMemGetInfo_v2(&f, &t));
	if (free)
		*free = f;
	if (total)
		*total = t;
}

size_t mem_free(void)
{
	size_t f;

	mem_info(&f, NULL);
	return f;
}

bool expect_free(size_t want, const char *when)
{
	size_t f = mem_free();

	if (f == want)
		return true;
	failf("%s: cuMemGetInfo free is %zu bytes, want %zu (%+lld)", when, f,
	      want, (long long)f - (long long)want);
	return false;
}

size_t vmm_granularity(int dev)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, dev },
	};
	size_t g = 0;

	if (!cu.cuMemGetAllocationGranularity ||
	    cu.cuMemGetAllocationGranularity(
		    &g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
		    CUDA_SUCCESS ||
	    !g)
		g = 2 * MIB;
	return g;
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t parse_size(const char *s)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		dief("not a size: %s", s);
	switch (*end) {
	case 'G':
		v <<= 10;
		/* fallthrough */
	case 'M':
		v <<= 10;
		/* fallthrough */
	case 'K':
		v <<= 10;
		end++;
		break;
	}
	if (*end)
		dief("not a size: %s", s);
	return v;
}

long parse_long(const char *s, long min, long max, const char *what)
{
	long v;
	char *end;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		dief("%s: want an integer in %ld..%ld, got %s", what, min, max,
		     s);
	return v;
}
