// SPDX-License-Identifier: Apache-2.0
/*
 * gstest cap context [device]: contexts are charged to the vGPU.
 *
 * Every context creation path (cuCtxCreate_v2/v3/v4, the first retain of
 * the primary context) costs the same, measured here as c; with less than
 * c left each is refused with CUDA_ERROR_OUT_OF_MEMORY; destroying a
 * context, releasing the primary context's last reference or resetting it
 * gives back c and everything allocated in that context.
 */
#include <string.h>

#include "common.h"

static CUdevice dev;

static CUresult create(int version, CUcontext *ctx)
{
	switch (version) {
	case 2:
		return cu.cuCtxCreate_v2(ctx, 0, dev);
	case 3:
		return cu.cuCtxCreate_v3(ctx, NULL, 0, 0, dev);
	default:
		return cu.cuCtxCreate_v4(ctx, NULL, 0, dev);
	}
}

/* Creating one more context must be refused (and leave nothing behind). */
static void refused(CUcontext current, const char *when)
{
	CUcontext ctx = NULL;

	for (int v = 2; v <= 4; v++) {
		CUresult rc;

		if (v == 4 && !cu.cuCtxCreate_v4)
			continue;
		rc = create(v, &ctx);
		if (rc == CUDA_ERROR_OUT_OF_MEMORY)
			continue;
		failf("context: cuCtxCreate_v%d %s returned %d (%s), want CUDA_ERROR_OUT_OF_MEMORY",
		      v, when, (int)rc, rcname(rc));
		if (rc == CUDA_SUCCESS) {
			cu.cuCtxDestroy_v2(ctx);
			cu.cuCtxSetCurrent(current);
		}
	}
}

/* bytes of linear memory and arrays in the current context. */
static void fill_ctx(uint64_t bytes, CUdeviceptr *lin, CUarray *arr, int narr)
{
	uint64_t half = bytes / 2 / MIB * MIB, left = bytes - half;
	int i = 0;

	*lin = 0;
	if (half)
		CHECK(cu.cuMemAlloc_v2(lin, half));
	while (left) {
		CUDA_ARRAY_DESCRIPTOR d = {
			.Width = 16384,
			.Height = left / 16384 < 8192 ? left / 16384 : 8192,
			.Format = CU_AD_FORMAT_UNSIGNED_INT8,
			.NumChannels = 1,
		};

		if (left < 16384) {
			d.Width = left;
			d.Height = 0;
		}
		if (i == narr) {
			failf("context: too many arrays");
			return;
		}
		if (!CHECK(cu.cuArrayCreate_v2(&arr[i], &d)))
			return;
		i++;
		left -= d.Width * (d.Height ? d.Height : 1);
	}
}

int cap_context(int device)
{
	CUcontext a = NULL, b = NULL, d = NULL, e = NULL, p = NULL;
	CUdeviceptr lin, x;
	CUarray arrs[64] = { 0 };
	size_t f0, total, c;
	CUresult rc;

	dev = device;
	load_cuda();
	NEED(cuCtxCreate_v2);
	NEED(cuCtxCreate_v3);
	NEED(cuCtxDestroy_v2);
	NEED(cuArrayCreate_v2);
	NEED(cuDevicePrimaryCtxRelease_v2);
	NEED(cuDevicePrimaryCtxReset_v2);
	if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGet(&dev, device))
		dief("cuInit/cuDeviceGet(%d) failed", device);
	rc = cu.cuCtxCreate_v2(&a, 0, dev);
	if (rc != CUDA_SUCCESS) {
		printf("ctx.rc=%d\n", (int)rc);
		notef("cuCtxCreate_v2: %d (%s)", (int)rc, rcname(rc));
		return rc == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 1;
	}
	mem_info(&f0, &total);
	printf("free=%zu\ntotal=%zu\n", f0, total);

	/* What one more context costs. */
	if (!CHECK(cu.cuCtxCreate_v3(&b, NULL, 0, 0, dev)))
		return finish("cap context");
	c = f0 - mem_free();
	printf("ctx_bytes=%zu\n", c);
	CHECK(cu.cuCtxSetCurrent(a));
	CHECK(cu.cuCtxDestroy_v2(b));
	expect_free(f0, "context: after cuCtxDestroy");
	if (!c || f0 < 2 * c)
		dief("context: a context costs %zu bytes of %zu free: need a cap of at least three contexts",
		     c, f0);

	/* Room for exactly one more context. */
	fill_ctx(f0 - c, &lin, arrs, 64);
	expect_free(c, "context: filled to one context");
	if (CHECK(cu.cuDevicePrimaryCtxRetain(&p, dev))) {
		expect_free(0, "context: after the primary context's retain");
		refused(a, "with the vGPU full");
		CHECK(cu.cuDevicePrimaryCtxRelease_v2(dev));
		expect_free(c, "context: after the primary context's release");
	}
	if (CHECK(create(cu.cuCtxCreate_v4 ? 4 : 2, &d))) {
		CUcontext q = NULL;

		expect_free(0, "context: after a cuCtxCreate");
		EXPECT(cu.cuDevicePrimaryCtxRetain(&q, dev),
		       CUDA_ERROR_OUT_OF_MEMORY);
		CHECK(cu.cuCtxSetCurrent(a));
		CHECK(cu.cuCtxDestroy_v2(d));
		expect_free(c, "context: after its cuCtxDestroy");
	}
	CHECK(cu.cuCtxSetCurrent(a));
	if (lin)
		CHECK(cu.cuMemFree_v2(lin));
	for (int i = 0; i < 64 && arrs[i]; i++)
		CHECK(cu.cuArrayDestroy(arrs[i]));
	expect_free(f0, "context: after freeing the fill");

	/* Destroying a context gives back what was allocated in it. */
	memset(arrs, 0, sizeof(arrs));
	if (CHECK(cu.cuCtxCreate_v2(&e, 0, dev))) {
		fill_ctx(f0 - c, &lin, arrs, 64);
		expect_free(0, "context: a second context, filled");
		CHECK(cu.cuCtxDestroy_v2(e));
		CHECK(cu.cuCtxSetCurrent(a));
		expect_free(f0, "context: after destroying a context that held memory");
	}

	/*
	 * So does resetting the primary context, which stays retained (and
	 * usable) until its last release: retain, reset, retain, release
	 * must leave it charged, and the last release must not.
	 */
	if (CHECK(cu.cuDevicePrimaryCtxRetain(&p, dev))) {
		CHECK(cu.cuCtxSetCurrent(p));
		if (CHECK(cu.cuMemAlloc_v2(&x, 8 * MIB)))
			expect_free(f0 - c - 8 * MIB,
				    "context: primary context with 8 MiB");
		CHECK(cu.cuDevicePrimaryCtxReset_v2(dev));
		CHECK(cu.cuCtxSetCurrent(a));
		expect_free(f0 - c, "context: after cuDevicePrimaryCtxReset");
		CHECK(cu.cuDevicePrimaryCtxRetain(&p, dev));
		CHECK(cu.cuDevicePrimaryCtxRelease_v2(dev));
		expect_free(f0 - c, "context: reset, retained twice, released once");
		CHECK(cu.cuDevicePrimaryCtxRelease_v2(dev));
		expect_free(f0, "context: after the last release");
	}

	/* The cap itself, in this context. */
	if (CHECK(cu.cuMemAlloc_v2(&lin, f0))) {
		EXPECT(cu.cuMemAlloc_v2(&x, 1), CUDA_ERROR_OUT_OF_MEMORY);
		CHECK(cu.cuMemFree_v2(lin));
	}
	expect_free(f0, "context: at the end");
	CHECK(cu.cuCtxDestroy_v2(a));
	return finish("cap context");
}
