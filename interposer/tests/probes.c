// SPDX-License-Identifier: Apache-2.0
/*
 * Small probes the Go tests combine: what the process is told about
 * memory (meminfo, nvmlinfo), single allocations whose outcome is the exit
 * status (alloc, hold), and managed memory (managed).
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"

static void print_nvml(void)
{
	unsigned int n = nvml_begin();

	for (unsigned int i = 0; i < n; i++) {
		nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };
		nvmlDevice_t d;
		nvmlMemory_t m;
		nvmlReturn_t r;

		if (!nvml_device(i, &d))
			continue;
		r = nv.nvmlDeviceGetMemoryInfo(d, &m);
		printf("nvml.%u.rc=%d\n", i, (int)r);
		if (r == NVML_SUCCESS)
			printf("nvml.%u.total=%llu\nnvml.%u.free=%llu\nnvml.%u.used=%llu\n",
			       i, m.total, i, m.free, i, m.used);
		r = nv.nvmlDeviceGetMemoryInfo_v2(d, &m2);
		printf("nvml2.%u.rc=%d\n", i, (int)r);
		if (r == NVML_SUCCESS)
			printf("nvml2.%u.total=%llu\nnvml2.%u.free=%llu\nnvml2.%u.used=%llu\nnvml2.%u.reserved=%llu\n",
			       i, m2.total, i, m2.free, i, m2.used, i,
			       m2.reserved);
	}
	nv.nvmlShutdown();
}

/* meminfo [device] [bytes] */
int cmd_meminfo(int argc, char **argv)
{
	int dev = argc > 0 ? (int)parse_long(argv[0], 0, 255, "device") : 0;
	uint64_t bytes = argc > 1 ? parse_size(argv[1]) : 0;
	CUdeviceptr d = 0;
	size_t free, total;
	CUresult rc;
	int n = 0;

	cuda_init();
	CHECK(cu.cuDeviceGetCount(&n));
	printf("devices=%d\n", n);
	for (int i = 0; i < n; i++) {
		size_t t = 0;

		rc = cu.cuDeviceTotalMem_v2(&t, i);
		printf("device.%d.total=%zu\n", i, rc == CUDA_SUCCESS ? t : 0);
	}
	open_primary(dev);
	printf("ctx.rc=0\n");
	if (bytes) {
		rc = cu.cuMemAlloc_v2(&d, bytes);
		printf("alloc.rc=%d\n", (int)rc);
	}
	mem_info(&free, &total);
	printf("cuda.free=%zu\ncuda.total=%zu\n", free, total);
	print_nvml();
	if (d)
		CHECK(cu.cuMemFree_v2(d));
	close_primary(dev);
	return finish("meminfo");
}

/* nvmlinfo: as nvidia-smi would, without a CUDA context. */
int cmd_nvmlinfo(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	print_nvml();
	return finish("nvmlinfo");
}

/* alloc <bytes> [device] */
int cmd_alloc(int argc, char **argv)
{
	CUdeviceptr d = 0;
	uint64_t bytes;
	size_t free, total;
	CUresult rc;
	int dev;

	if (argc < 1 || argc > 2)
		dief("usage: alloc <bytes> [device]");
	bytes = parse_size(argv[0]);
	dev = argc > 1 ? (int)parse_long(argv[1], 0, 255, "device") : 0;
	open_primary(dev);
	mem_info(&free, &total);
	printf("free=%zu\ntotal=%zu\n", free, total);
	rc = cu.cuMemAlloc_v2(&d, bytes);
	printf("alloc.rc=%d\n", (int)rc);
	if (rc == CUDA_SUCCESS) {
		size_t after;

		CHECK(cu.cuMemFree_v2(d));
		/* More when the charge reclaimed a dead process's bytes. */
		after = mem_free();
		if (after < free)
			failf("alloc: free %zu after the free, was %zu before the allocation",
			      after, free);
	}
	close_primary(dev);
	if (failures())
		return finish("alloc");
	if (rc == CUDA_ERROR_OUT_OF_MEMORY)
		return 2;
	return rc == CUDA_SUCCESS ? 0 : 1;
}

/* hold <bytes> [device]: allocate and wait to be killed. */
int cmd_hold(int argc, char **argv)
{
	CUdeviceptr d = 0;
	uint64_t bytes;
	CUresult rc;
	int dev;

	if (argc < 1 || argc > 2)
		dief("usage: hold <bytes> [device]");
	bytes = parse_size(argv[0]);
	dev = argc > 1 ? (int)parse_long(argv[1], 0, 255, "device") : 0;
	open_primary(dev);
	rc = bytes ? cu.cuMemAlloc_v2(&d, bytes) : CUDA_SUCCESS;
	printf("alloc.rc=%d\n", (int)rc);
	if (rc == CUDA_ERROR_OUT_OF_MEMORY)
		return 2;
	if (rc != CUDA_SUCCESS)
		return 1;
	printf("ready\n");
	fflush(stdout);
	/* Until killed, or until stdin closes (the test is gone). */
	for (;;) {
		char c;

		if (read(STDIN_FILENO, &c, 1) <= 0)
			break;
	}
	CHECK(cu.cuMemFree_v2(d));
	close_primary(dev);
	return finish("hold");
}

#define MANAGED_THREADS 8

static void *managed_thread(void *arg)
{
	CUcontext ctx = arg;
	CUdeviceptr d;

	CHECK(cu.cuCtxSetCurrent(ctx));
	for (int i = 0; i < 4; i++) {
		d = 0;
		EXPECT(cu.cuMemAllocManaged(&d, MIB, CU_MEM_ATTACH_GLOBAL),
		       CUDA_ERROR_NOT_SUPPORTED);
	}
	return NULL;
}

/* managed: refused everywhere, and the process can still allocate. */
int cmd_managed(int argc, char **argv)
{
	pthread_t t[MANAGED_THREADS];
	CUdeviceptr d = 0;
	CUcontext ctx;
	size_t free;

	(void)argc;
	(void)argv;
	ctx = open_primary(0);
	NEED(cuMemAllocManaged);
	free = mem_free();
	for (int i = 0; i < MANAGED_THREADS; i++) {
		if (pthread_create(&t[i], NULL, managed_thread, ctx))
			dief("pthread_create failed");
	}
	for (int i = 0; i < MANAGED_THREADS; i++)
		pthread_join(t[i], NULL);
	expect_free(free, "managed: after the refused managed allocations");
	if (CHECK(cu.cuMemAlloc_v2(&d, MIB)))
		CHECK(cu.cuMemFree_v2(d));
	close_primary(0);
	return finish("managed");
}
