// SPDX-License-Identifier: Apache-2.0
/*
 * gstest procaddr [fill-bytes]: entry points handed out by
 * cuGetProcAddress and cuGetProcAddress_v2 land in the shim.
 *
 * The vGPU is first filled with fill-bytes (default: cuMemGetInfo's free)
 * through cuMemAlloc_v2 from dlsym. Then each allocator is looked up by
 * base name, for several CUDA versions and with each stream flag, through
 * both lookups (and through a cuGetProcAddress that was itself looked up),
 * and called: every call must be refused with CUDA_ERROR_OUT_OF_MEMORY
 * (managed memory: CUDA_ERROR_NOT_SUPPORTED), and the memory queries must
 * show the vGPU. The Go tests pass fill-bytes = cap - context with a
 * device that has physical room to spare, so only the shim can refuse:
 * without it this very program fails.
 *
 * The variant picked (e.g. cuMemAllocAsync_ptsz for the per-thread flag)
 * is checked by name where dladdr() can name the function.
 */
#include <dlfcn.h>
#include <string.h>

#include "common.h"

enum kind {
	K_ALLOC, K_PITCH, K_ASYNC, K_POOL, K_CREATE, K_ARRAY, K_ARRAY3D,
	K_MIPMAP, K_CTX2, K_CTX3, K_CTX4, K_PRIMARY, K_MANAGED, K_MEMINFO,
	K_TOTALMEM,
};

struct query {
	const char *base;
	int version;
	enum kind kind;
	const char *symbol;	/* expected without the per-thread flag */
	const char *ptsz;	/* expected with it, NULL: same as symbol */
};

static const struct query queries[] = {
	{ "cuMemAlloc", 3020, K_ALLOC, "cuMemAlloc_v2", NULL },
	{ "cuMemAlloc", 12000, K_ALLOC, "cuMemAlloc_v2", NULL },
	{ "cuMemAllocPitch", 3020, K_PITCH, "cuMemAllocPitch_v2", NULL },
	{ "cuMemAllocPitch", 12080, K_PITCH, "cuMemAllocPitch_v2", NULL },
	{ "cuMemAllocAsync", 11020, K_ASYNC, "cuMemAllocAsync",
	  "cuMemAllocAsync_ptsz" },
	{ "cuMemAllocAsync", 12000, K_ASYNC, "cuMemAllocAsync",
	  "cuMemAllocAsync_ptsz" },
	{ "cuMemAllocFromPoolAsync", 11020, K_POOL, "cuMemAllocFromPoolAsync",
	  "cuMemAllocFromPoolAsync_ptsz" },
	{ "cuMemAllocFromPoolAsync", 12080, K_POOL, "cuMemAllocFromPoolAsync",
	  "cuMemAllocFromPoolAsync_ptsz" },
	{ "cuMemCreate", 10020, K_CREATE, "cuMemCreate", NULL },
	{ "cuMemCreate", 12000, K_CREATE, "cuMemCreate", NULL },
	{ "cuArrayCreate", 3020, K_ARRAY, "cuArrayCreate_v2", NULL },
	{ "cuArray3DCreate", 3020, K_ARRAY3D, "cuArray3DCreate_v2", NULL },
	{ "cuMipmappedArrayCreate", 5000, K_MIPMAP, "cuMipmappedArrayCreate",
	  NULL },
	{ "cuCtxCreate", 3020, K_CTX2, "cuCtxCreate_v2", NULL },
	{ "cuCtxCreate", 11040, K_CTX3, "cuCtxCreate_v3", NULL },
	{ "cuCtxCreate", 12050, K_CTX4, "cuCtxCreate_v4", NULL },
	{ "cuCtxCreate", 12080, K_CTX4, "cuCtxCreate_v4", NULL },
	{ "cuDevicePrimaryCtxRetain", 7000, K_PRIMARY,
	  "cuDevicePrimaryCtxRetain", NULL },
	{ "cuMemAllocManaged", 6000, K_MANAGED, "cuMemAllocManaged", NULL },
	{ "cuMemGetInfo", 3020, K_MEMINFO, "cuMemGetInfo_v2", NULL },
	{ "cuDeviceTotalMem", 3020, K_TOTALMEM, "cuDeviceTotalMem_v2", NULL },
};

#define NQUERIES (sizeof(queries) / sizeof(queries[0]))

static const cuuint64_t flag_set[] = {
	CU_GET_PROC_ADDRESS_DEFAULT,
	CU_GET_PROC_ADDRESS_LEGACY_STREAM,
	CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
};

static CUdevice dev;
static CUcontext base;		/* a created context: the primary is free */
static CUstream stream;
static CUmemoryPool pool;
static size_t vgpu_total;
static int calls;

/* The library and symbol fn lives at, for the diagnostics. */
static void where(void *fn, const char **lib, const char **sym)
{
	Dl_info info;

	*lib = "?";
	*sym = NULL;
	if (dladdr(fn, &info)) {
		if (info.dli_fname) {
			const char *s = strrchr(info.dli_fname, '/');

			*lib = s ? s + 1 : info.dli_fname;
		}
		*sym = info.dli_sname;
	}
}

static void freed(CUresult rc, const char *what)
{
	if (rc != CUDA_SUCCESS)
		failf("procaddr: freeing the unexpected %s: %d", what, (int)rc);
}

/*
 * Calls fn as the kind says. Allocators must be refused; what one hands
 * out anyway is freed at once so the next call starts from a full vGPU.
 */
static void exercise(const struct query *q, void *fn, bool ptsz,
		     const char *how)
{
	CUresult rc = CUDA_SUCCESS, want = CUDA_ERROR_OUT_OF_MEMORY;
	CUstream s = ptsz ? NULL : stream;
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, dev },
	};
	CUDA_ARRAY3D_DESCRIPTOR d3 = { .Width = 64, .Height = 64, .Depth = 4,
				       .Format = CU_AD_FORMAT_FLOAT,
				       .NumChannels = 1 };
	CUDA_ARRAY_DESCRIPTOR d2 = { .Width = 1024, .Height = 16,
				     .Format = CU_AD_FORMAT_UNSIGNED_INT8,
				     .NumChannels = 1 };
	CUmemGenericAllocationHandle h;
	CUmipmappedArray m;
	CUdeviceptr p = 0;
	CUcontext ctx;
	size_t pitch, f, t;
	CUarray a;

	calls++;
	switch (q->kind) {
	case K_ALLOC:
		rc = ((__typeof__(&cuMemAlloc_v2))fn)(&p, MIB);
		if (!rc)
			freed(cu.cuMemFree_v2(p), how);
		break;
	case K_PITCH:
		rc = ((__typeof__(&cuMemAllocPitch_v2))fn)(&p, &pitch, 4096,
							   16, 4);
		if (!rc)
			freed(cu.cuMemFree_v2(p), how);
		break;
	case K_ASYNC:
		rc = ((__typeof__(&cuMemAllocAsync))fn)(&p, MIB, s);
		if (!rc) {
			freed(ptsz ? cu.cuMemFreeAsync_ptsz(p, s)
				   : cu.cuMemFreeAsync(p, s), how);
			CHECK(cu.cuCtxSynchronize());
		}
		break;
	case K_POOL:
		rc = ((__typeof__(&cuMemAllocFromPoolAsync))fn)(&p, MIB, pool,
								s);
		if (!rc) {
			freed(ptsz ? cu.cuMemFreeAsync_ptsz(p, s)
				   : cu.cuMemFreeAsync(p, s), how);
			CHECK(cu.cuCtxSynchronize());
		}
		break;
	case K_CREATE:
		rc = ((__typeof__(&cuMemCreate))fn)(&h, vmm_granularity(dev),
						    &prop, 0);
		if (!rc)
			freed(cu.cuMemRelease(h), how);
		break;
	case K_ARRAY:
		rc = ((__typeof__(&cuArrayCreate_v2))fn)(&a, &d2);
		if (!rc)
			freed(cu.cuArrayDestroy(a), how);
		break;
	case K_ARRAY3D:
		rc = ((__typeof__(&cuArray3DCreate_v2))fn)(&a, &d3);
		if (!rc)
			freed(cu.cuArrayDestroy(a), how);
		break;
	case K_MIPMAP:
		rc = ((__typeof__(&cuMipmappedArrayCreate))fn)(&m, &d3, 2);
		if (!rc)
			freed(cu.cuMipmappedArrayDestroy(m), how);
		break;
	case K_CTX2:
		rc = ((__typeof__(&cuCtxCreate_v2))fn)(&ctx, 0, dev);
		break;
	case K_CTX3:
		rc = ((__typeof__(&cuCtxCreate_v3))fn)(&ctx, NULL, 0, 0, dev);
		break;
	case K_CTX4:
		rc = ((__typeof__(&cuCtxCreate_v4))fn)(&ctx, NULL, 0, dev);
		break;
	case K_PRIMARY:
		rc = ((__typeof__(&cuDevicePrimaryCtxRetain))fn)(&ctx, dev);
		if (!rc)
			freed(cu.cuDevicePrimaryCtxRelease_v2(dev), how);
		break;
	case K_MANAGED:
		want = CUDA_ERROR_NOT_SUPPORTED;
		rc = ((__typeof__(&cuMemAllocManaged))fn)(
			&p, MIB, CU_MEM_ATTACH_GLOBAL);
		if (!rc)
			freed(cu.cuMemFree_v2(p), how);
		break;
	case K_MEMINFO:
		want = CUDA_SUCCESS;
		rc = ((__typeof__(&cuMemGetInfo_v2))fn)(&f, &t);
		if (!rc && (f != 0 || t != vgpu_total))
			failf("procaddr %s: free %zu total %zu, want 0 and %zu",
			      how, f, t, vgpu_total);
		break;
	case K_TOTALMEM:
		want = CUDA_SUCCESS;
		rc = ((__typeof__(&cuDeviceTotalMem_v2))fn)(&t, dev);
		if (!rc && t != vgpu_total)
			failf("procaddr %s: %zu bytes, want %zu", how, t,
			      vgpu_total);
		break;
	}
	if ((q->kind == K_CTX2 || q->kind == K_CTX3 || q->kind == K_CTX4) &&
	    rc == CUDA_SUCCESS) {
		freed(cu.cuCtxDestroy_v2(ctx), how);
		CHECK(cu.cuCtxSetCurrent(base));
	}
	if (rc != want)
		failf("procaddr %s: returned %d (%s), want %d (%s)", how,
		      (int)rc, rcname(rc), (int)want, rcname(want));
}

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*getproc_v2_fn)(const char *, void **, int, cuuint64_t,
				  CUdriverProcAddressQueryResult *);

/* One lookup: v1 with getproc, or v2 with getproc_v2. */
static void lookup(const struct query *q, cuuint64_t flags, getproc_fn g1,
		   getproc_v2_fn g2, const char *via)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	bool ptsz = flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	const char *want = ptsz && q->ptsz ? q->ptsz : q->symbol;
	const char *lib, *sym;
	char how[256];
	void *fn = NULL;
	CUresult rc;

	snprintf(how, sizeof(how), "%s(%s, %d, flags %llu)", via, q->base,
		 q->version, (unsigned long long)flags);
	rc = g1 ? g1(q->base, &fn, q->version, flags)
		: g2(q->base, &fn, q->version, flags, &st);
	if (rc != CUDA_SUCCESS || !fn) {
		failf("%s: %d (%s), fn %p", how, (int)rc, rcname(rc), fn);
		return;
	}
	if (g2 && st != CU_GET_PROC_ADDRESS_SUCCESS)
		failf("%s: symbol status %d, want CU_GET_PROC_ADDRESS_SUCCESS",
		      how, (int)st);
	where(fn, &lib, &sym);
	if (sym && strcmp(sym, want))
		failf("%s: returned %s (in %s), want %s", how, sym, lib, want);
	exercise(q, fn, ptsz, how);
}

int cmd_procaddr(int argc, char **argv)
{
	CUdeviceptr fill = 0;
	uint64_t bytes;
	getproc_fn nested = NULL;
	void *p = NULL;
	CUresult rc;

	if (argc > 1)
		dief("usage: procaddr [fill-bytes]");
	load_cuda();
	NEED(cuGetProcAddress);
	NEED(cuGetProcAddress_v2);
	NEED(cuCtxCreate_v2);
	NEED(cuDeviceGetDefaultMemPool);
	if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGet(&dev, 0))
		dief("cuInit/cuDeviceGet failed");
	rc = cu.cuCtxCreate_v2(&base, 0, dev);
	if (rc != CUDA_SUCCESS)
		dief("cuCtxCreate_v2: %d (%s)", (int)rc, rcname(rc));
	CHECK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	CHECK(cu.cuDeviceGetDefaultMemPool(&pool, dev));
	mem_info(&bytes, &vgpu_total);
	if (argc > 0)
		bytes = parse_size(argv[0]);
	printf("fill=%llu\ntotal=%zu\n", (unsigned long long)bytes,
	       vgpu_total);
	rc = cu.cuMemAlloc_v2(&fill, bytes);
	if (rc != CUDA_SUCCESS)
		dief("filling the vGPU with %llu bytes: %d (%s)",
		     (unsigned long long)bytes, (int)rc, rcname(rc));
	expect_free(0, "procaddr: after the fill");

	/* cuGetProcAddress itself, looked up through cuGetProcAddress. */
	CHECK(cu.cuGetProcAddress("cuGetProcAddress", &p, 11030, 0));
	nested = (getproc_fn)p;

	for (size_t i = 0; i < NQUERIES; i++) {
		for (size_t f = 0; f < sizeof(flag_set) / sizeof(flag_set[0]);
		     f++) {
			lookup(&queries[i], flag_set[f], cu.cuGetProcAddress,
			       NULL, "cuGetProcAddress");
			lookup(&queries[i], flag_set[f], NULL,
			       cu.cuGetProcAddress_v2, "cuGetProcAddress_v2");
			if (nested)
				lookup(&queries[i], flag_set[f], nested, NULL,
				       "cuGetProcAddress(cuGetProcAddress)");
		}
	}
	printf("calls=%d\n", calls);
	CHECK(cu.cuMemFree_v2(fill));
	CHECK(cu.cuStreamDestroy_v2(stream));
	CHECK(cu.cuCtxDestroy_v2(base));
	return finish("procaddr");
}
