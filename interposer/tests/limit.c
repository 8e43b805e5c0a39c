// SPDX-License-Identifier: Apache-2.0
/*
 * gstest limit: context limits that take device memory are held to the
 * cap. The malloc heap raised by exactly the vGPU's free bytes fits and one
 * byte more is refused; the stack, reserved for every resident thread,
 * likewise by its smallest step; lowering a limit or destroying its context
 * gives the memory back.
 */
#include "common.h"

/* The device bytes one byte of stack takes: every resident thread's. */
static size_t resident_threads(void)
{
	int sms = 0, threads = 0;

	CHECK(cu.cuDeviceGetAttribute(
		&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
	CHECK(cu.cuDeviceGetAttribute(
		&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 0));
	return (size_t)sms * threads;
}

/* Raises limit by exactly free bytes, then by one unit more. */
static void fill_limit(CUlimit limit, const char *name, size_t unit,
		       size_t step, size_t f0)
{
	size_t v0, units = f0 / unit / step * step;

	if (!CHECK(cu.cuCtxGetLimit(&v0, limit)))
		return;
	if (CHECK(cu.cuCtxSetLimit(limit, v0 + units)))
		expect_free(f0 - units * unit, name);
	EXPECT(cu.cuCtxSetLimit(limit, v0 + units + step),
	       CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(cu.cuCtxSetLimit(limit, v0));
	expect_free(f0, name);
}

int cmd_limit(int argc, char **argv)
{
	size_t f0, heap0, ctxb;
	CUcontext a, c;

	(void)argv;
	if (argc)
		dief("usage: limit");
	load_cuda();
	NEED(cuCtxSetLimit);
	NEED(cuCtxGetLimit);
	a = open_primary(0);
	f0 = mem_free();
	printf("free=%zu\n", f0);
	fill_limit(CU_LIMIT_MALLOC_HEAP_SIZE, "limit: malloc heap", 1, 1, f0);
	fill_limit(CU_LIMIT_STACK_SIZE, "limit: stack", resident_threads(),
		   16, f0);

	/* A context's limits go with it. */
	if (CHECK(cu.cuCtxCreate_v2(&c, 0, 0))) {
		ctxb = f0 - mem_free();
		CHECK(cu.cuCtxGetLimit(&heap0, CU_LIMIT_MALLOC_HEAP_SIZE));
		if (CHECK(cu.cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE,
					   heap0 + f0 - ctxb)))
			expect_free(0, "limit: a second context's heap");
		CHECK(cu.cuCtxDestroy_v2(c));
		CHECK(cu.cuCtxSetCurrent(a));
		expect_free(f0, "limit: after destroying that context");
	}
	close_primary(0);
	return finish("limit");
}
