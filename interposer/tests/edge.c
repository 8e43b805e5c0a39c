// SPDX-License-Identifier: Apache-2.0
/*
 * gstest edge <case>: corners of the accounting where the memory the
 * driver holds and what the vGPU is charged can drift apart. Each case
 * checks that the vGPU never holds more than its cap and that every byte
 * comes back; exit 77 when this driver cannot set the case up.
 *
 *  freeasync_linear  cuMemFreeAsync of cuMemAlloc memory on a busy stream:
 *                    the bytes are in use until the stream reaches the free.
 *  pooldestroy       cuMemPoolDestroy with allocations outstanding: the pool
 *                    keeps its memory until they are freed.
 *  addrfree          cuMemAddressFree of a range still mapped: the mapping
 *                    goes with it, and a released handle's bytes come back.
 *  vmm_retain        a handle retained from its address outlives the
 *                    creator's release and the unmap.
 *  fork_managed      a forked child refused managed memory says so too (the
 *                    Go test counts the lines per pid).
 *  pending_free      a pool settled (at a sync of another stream) while a
 *                    stream-ordered free of it is still queued must still
 *                    give those bytes back once the free has happened.
 *  freeasync_thread  cuMemFreeAsync_ptsz(ptr, 0) queued behind a busy
 *                    per-thread stream; another thread, whose own stream
 *                    is idle, synchronises it: the bytes are still in use,
 *                    whichever thread settles the queued free.
 *  freeasync_ctxdestroy  a free queued in a context that is destroyed
 *                    before its stream gets there: nothing stays charged.
 *  ctxreuse          one thread creates and destroys contexts while another
 *                    allocates in contexts of its own: a destroyed context's
 *                    handle, reused by the driver for the next one, must not
 *                    take that one's allocations with it (statistical: 2 s).
 *  crossdev <bytes>  with the context on device 0, memory of device 1 (VMM,
 *                    device 1's default pool, cuMemAllocAsync on a stream of
 *                    device 1's context: its device's current pool) is
 *                    charged to device 1's card, whose vGPU has bytes free:
 *                    exactly that fits.
 */
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define SKIP 77

static const char ptx[] =
	".version 7.0\n.target sm_70\n.address_size 64\n"
	".visible .entry spin(.param .u64 ns)\n{\n\tret;\n}\n";

/* The device's physical use, when the simulated driver can tell. */
static bool device_used(uint64_t *used)
{
	return cu.simcudaDeviceUsed && cu.simcudaDeviceUsed(0, used) == 0;
}

/* Fails when the device holds more than the vGPU's total. */
static void within_cap(size_t total, const char *when)
{
	uint64_t used;

	if (device_used(&used) && used > total)
		failf("%s: the device holds %llu bytes, more than the vGPU's %zu",
		      when, (unsigned long long)used, total);
}

/*
 * The spin kernel, its module loaded in the current context, or NULL when
 * this driver cannot. A loaded module takes device memory: load it before
 * measuring what the vGPU has free.
 */
static CUfunction spin_kernel(CUmodule *mod)
{
	CUfunction f;

	if (!cu.cuModuleLoadData || cu.cuModuleLoadData(mod, ptx))
		return NULL;
	if (cu.cuModuleGetFunction(&f, *mod, "spin")) {
		cu.cuModuleUnload(*mod);
		return NULL;
	}
	return f;
}

/* Queues a kernel of ns nanoseconds of f on s; false when this driver cannot. */
static bool busy_stream(CUstream s, uint64_t ns, CUfunction f)
{
	void *params[] = { &ns };

	return f && cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params,
				      NULL) == CUDA_SUCCESS;
}

static int freeasync_linear(void)
{
	CUdeviceptr d1, d2;
	size_t f, total;
	CUfunction spin;
	CUmodule mod;
	CUstream s;
	CUresult rc;

	open_primary(0);
	spin = spin_kernel(&mod);
	mem_info(&f, &total);
	CHECK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	if (!CHECK(cu.cuMemAlloc_v2(&d1, f)))
		return finish("edge freeasync_linear");
	if (!busy_stream(s, 1000000000ULL, spin)) {
		notef("edge freeasync_linear: cannot keep a stream busy here");
		return SKIP;
	}
	CHECK(cu.cuMemFreeAsync(d1, s));
	if (cu.cuStreamQuery(s) != CUDA_ERROR_NOT_READY) {
		notef("edge freeasync_linear: the stream finished too soon");
		return SKIP;
	}
	rc = cu.cuMemAlloc_v2(&d2, f);
	if (rc == CUDA_SUCCESS) {
		if (cu.cuStreamQuery(s) == CUDA_ERROR_NOT_READY)
			failf("edge freeasync_linear: cuMemAlloc of the vGPU's %zu free bytes succeeded while the stream-ordered free of the same amount was still queued",
			      f);
		within_cap(total, "edge freeasync_linear");
		CHECK(cu.cuMemFree_v2(d2));
	} else if (rc != CUDA_ERROR_OUT_OF_MEMORY) {
		failf("edge freeasync_linear: cuMemAlloc %d", (int)rc);
	}
	CHECK(cu.cuStreamSynchronize(s));
	expect_free(f, "edge freeasync_linear: after the stream reached the free");
	CHECK(cu.cuModuleUnload(mod));
	CHECK(cu.cuStreamDestroy_v2(s));
	close_primary(0);
	return finish("edge freeasync_linear");
}

static int pooldestroy(void)
{
	CUmemPoolProps props = {
		.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
	};
	CUmemoryPool pool;
	CUdeviceptr d, x;
	size_t f, total;
	CUstream s;
	CUresult rc;

	open_primary(0);
	mem_info(&f, &total);
	CHECK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cu.cuMemPoolCreate(&pool, &props));
	if (!CHECK(cu.cuMemAllocFromPoolAsync(&d, f, pool, s)))
		return finish("edge pooldestroy");
	CHECK(cu.cuMemPoolDestroy(pool));
	/* The allocation, and so its pool's memory, is still there. */
	expect_free(0, "edge pooldestroy: after destroying a pool in use");
	rc = cu.cuMemAlloc_v2(&x, f);
	if (rc == CUDA_SUCCESS) {
		failf("edge pooldestroy: cuMemAlloc of %zu bytes succeeded while the destroyed pool still holds them",
		      f);
		within_cap(total, "edge pooldestroy");
		CHECK(cu.cuMemFree_v2(x));
	}
	CHECK(cu.cuMemFreeAsync(d, s));
	CHECK(cu.cuStreamSynchronize(s));
	expect_free(f, "edge pooldestroy: after its last allocation was freed");
	CHECK(cu.cuStreamDestroy_v2(s));
	close_primary(0);
	return finish("edge pooldestroy");
}

static int addrfree(void)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
	};
	size_t f, g = vmm_granularity(0), size = 8 * g;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CUresult rc;

	open_primary(0);
	f = mem_free();
	if (!CHECK(cu.cuMemCreate(&h, size, &prop, 0)) ||
	    !CHECK(cu.cuMemAddressReserve(&va, size, 0, 0, 0)) ||
	    !CHECK(cu.cuMemMap(va, size, 0, h, 0)))
		return finish("edge addrfree");
	CHECK(cu.cuMemRelease(h));
	expect_free(f - size, "edge addrfree: released but still mapped");
	rc = cu.cuMemAddressFree(va, size);
	if (rc != CUDA_SUCCESS) {
		notef("edge addrfree: this driver refuses to free a mapped range (%d)",
		      (int)rc);
		CHECK(cu.cuMemUnmap(va, size));
		CHECK(cu.cuMemAddressFree(va, size));
	}
	expect_free(f, "edge addrfree: after the range (and its mapping) is gone");
	close_primary(0);
	return finish("edge addrfree");
}

/*
 * NCCL's pattern: a reference retained from the address outlives the
 * creator's release and the unmap; the memory is the card's until the
 * last reference goes.
 */
static int vmm_retain(void)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
	};
	size_t f, size = 8 * vmm_granularity(0);
	CUmemGenericAllocationHandle h, h2;
	CUdeviceptr va;

	open_primary(0);
	f = mem_free();
	if (!CHECK(cu.cuMemCreate(&h, size, &prop, 0)) ||
	    !CHECK(cu.cuMemAddressReserve(&va, size, 0, 0, 0)) ||
	    !CHECK(cu.cuMemMap(va, size, 0, h, 0)) ||
	    !CHECK(cu.cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)va)))
		return finish("edge vmm_retain");
	CHECK(cu.cuMemRelease(h));
	CHECK(cu.cuMemUnmap(va, size));
	expect_free(f - size, "edge vmm_retain: released and unmapped, still retained");
	CHECK(cu.cuMemRelease(h2));
	expect_free(f, "edge vmm_retain: after the last release");
	CHECK(cu.cuMemAddressFree(va, size));
	close_primary(0);
	return finish("edge vmm_retain");
}

static int fork_managed(void)
{
	CUdeviceptr d;
	pid_t pid;
	int st;

	open_primary(0);
	EXPECT(cu.cuMemAllocManaged(&d, MIB, CU_MEM_ATTACH_GLOBAL),
	       CUDA_ERROR_NOT_SUPPORTED);
	printf("parent.pid=%d\n", (int)getpid());
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		dief("fork failed");
	if (pid == 0) {
		CUcontext ctx;

		alarm(20);
		if (cu.cuInit(0) || cu.cuDevicePrimaryCtxRetain(&ctx, 0) ||
		    cu.cuCtxSetCurrent(ctx))
			_exit(SKIP);
		EXPECT(cu.cuMemAllocManaged(&d, MIB, CU_MEM_ATTACH_GLOBAL),
		       CUDA_ERROR_NOT_SUPPORTED);
		printf("child.pid=%d\n", (int)getpid());
		fflush(NULL);
		_exit(failures() ? 1 : 0);
	}
	while (waitpid(pid, &st, 0) < 0)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == SKIP)
		return SKIP;
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		failf("edge fork_managed: child status %d", st);
	close_primary(0);
	return finish("edge fork_managed");
}

static int pending_free(void)
{
	const size_t g = 2 * MIB;
	CUdeviceptr a1, a2;
	CUstream s1, s2;
	CUfunction spin;
	CUmodule mod;
	size_t f;

	open_primary(0);
	spin = spin_kernel(&mod);
	f = mem_free();
	CHECK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CHECK(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
	if (!CHECK(cu.cuMemAllocAsync(&a1, g, s1)) ||
	    !CHECK(cu.cuMemAllocAsync(&a2, g, s2)))
		return finish("edge pending_free");
	if (!busy_stream(s1, 1000000000ULL, spin)) {
		notef("edge pending_free: cannot keep a stream busy here");
		return SKIP;
	}
	CHECK(cu.cuMemFreeAsync(a1, s1));	/* queued behind the kernel */
	CHECK(cu.cuMemFreeAsync(a2, s2));
	CHECK(cu.cuStreamSynchronize(s2));	/* the pool settles, a1 pending */
	if (cu.cuStreamQuery(s1) != CUDA_ERROR_NOT_READY) {
		notef("edge pending_free: the stream finished too soon");
		return SKIP;
	}
	CHECK(cu.cuStreamSynchronize(s1));	/* now a1 is back too */
	expect_free(f, "edge pending_free: after both frees and their syncs");
	CHECK(cu.cuCtxSynchronize());
	expect_free(f, "edge pending_free: after cuCtxSynchronize");
	CHECK(cu.cuModuleUnload(mod));
	CHECK(cu.cuStreamDestroy_v2(s1));
	CHECK(cu.cuStreamDestroy_v2(s2));
	close_primary(0);
	return finish("edge pending_free");
}

static volatile int reuse_stop;
static CUcontext reuse_primary;
static int reuse_hits, reuse_rounds;

static void *ctx_churn(void *arg)
{
	(void)arg;
	CHECK(cu.cuCtxSetCurrent(reuse_primary));
	while (!reuse_stop) {
		CUcontext c;

		if (cu.cuCtxCreate_v2(&c, 0, 0) == CUDA_SUCCESS) {
			CHECK(cu.cuCtxDestroy_v2(c));
			CHECK(cu.cuCtxSetCurrent(reuse_primary));
		}
	}
	return NULL;
}

/* The bytes a context destroy gave back, modulo the context size. */
static void *ctx_alloc(void *arg)
{
	const uint64_t x = MIB + 512, ctxb = *(uint64_t *)arg;

	CHECK(cu.cuCtxSetCurrent(reuse_primary));
	while (!reuse_stop) {
		CUcontext c;
		CUdeviceptr d;
		size_t f1, f2;

		if (cu.cuCtxCreate_v2(&c, 0, 0) != CUDA_SUCCESS)
			continue;
		if (CHECK(cu.cuMemAlloc_v2(&d, x))) {
			f1 = mem_free();
			CHECK(cu.cuCtxDestroy_v2(c));
			f2 = mem_free();
			reuse_rounds++;
			/* The other thread moves free in whole contexts only. */
			if ((f2 - f1) % ctxb != x % ctxb)
				reuse_hits++;
		} else {
			CHECK(cu.cuCtxDestroy_v2(c));
		}
		CHECK(cu.cuCtxSetCurrent(reuse_primary));
	}
	return NULL;
}

static int ctxreuse(void)
{
	struct timespec ts = { 2, 0 };
	pthread_t a, b;
	uint64_t ctxb;
	CUcontext c;
	size_t f0;

	reuse_primary = open_primary(0);
	f0 = mem_free();
	if (!CHECK(cu.cuCtxCreate_v2(&c, 0, 0)))
		return finish("edge ctxreuse");
	ctxb = f0 - mem_free();
	CHECK(cu.cuCtxDestroy_v2(c));
	CHECK(cu.cuCtxSetCurrent(reuse_primary));
	if (!ctxb || ctxb <= MIB + 512) {
		notef("edge ctxreuse: contexts of %llu bytes: cannot tell",
		      (unsigned long long)ctxb);
		return SKIP;
	}
	pthread_create(&a, NULL, ctx_churn, NULL);
	pthread_create(&b, NULL, ctx_alloc, &ctxb);
	nanosleep(&ts, NULL);
	reuse_stop = 1;
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("rounds=%d\nhits=%d\n", reuse_rounds, reuse_hits);
	if (reuse_hits)
		failf("edge ctxreuse: %d of %d context destroys gave back the wrong bytes: another thread's destroy of the same (reused) handle took its allocation",
		      reuse_hits, reuse_rounds);
	expect_free(f0, "edge ctxreuse: at the end");
	close_primary(0);
	return finish("edge ctxreuse");
}

/* Fills device 1's vGPU through one path while device 0's is untouched. */
enum crossdev_kind { XD_VMM, XD_POOL, XD_STREAM };

/* One allocation on device 1 by kind k: 0 or the driver's error. */
static CUresult crossdev_alloc(enum crossdev_kind k, uint64_t bytes,
			       CUstream s1, CUdeviceptr *d,
			       CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, 1 },
	};
	CUmemoryPool p1;

	switch (k) {
	case XD_VMM:
		return cu.cuMemCreate(h, bytes, &prop, 0);
	case XD_POOL:
		if (!CHECK(cu.cuDeviceGetDefaultMemPool(&p1, 1)))
			return CUDA_ERROR_UNKNOWN;
		return cu.cuMemAllocFromPoolAsync(d, bytes, p1, NULL);
	case XD_STREAM:
		return cu.cuMemAllocAsync(d, bytes, s1);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static void crossdev_fill(uint64_t bytes, enum crossdev_kind k, CUstream s1,
			  size_t f0)
{
	static const char *const whats[] = { "edge crossdev (vmm)",
					     "edge crossdev (pool)",
					     "edge crossdev (stream)" };
	const char *what = whats[k];
	CUmemGenericAllocationHandle h, h2;
	CUdeviceptr d, d2;
	CUresult rc;

	rc = crossdev_alloc(k, bytes, s1, &d, &h);
	if (!EXPECT(rc, CUDA_SUCCESS))
		return;
	expect_free(f0, what);
	rc = crossdev_alloc(k, k == XD_VMM ? vmm_granularity(1) : 1, s1, &d2,
			    &h2);
	if (rc != CUDA_ERROR_OUT_OF_MEMORY)
		failf("%s: one more allocation on device 1 returned %d, want CUDA_ERROR_OUT_OF_MEMORY",
		      what, (int)rc);
	if (k == XD_VMM) {
		CHECK(cu.cuMemRelease(h));
	} else {
		CHECK(cu.cuMemFreeAsync(d, k == XD_STREAM ? s1 : NULL));
		CHECK(cu.cuCtxSynchronize());
		if (k == XD_STREAM)
			CHECK(cu.cuStreamSynchronize(s1));
	}
}

static int crossdev(uint64_t bytes)
{
	CUcontext c0;
	CUstream s1;
	size_t f0;

	open_primary(1);
	if (!CHECK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)))
		return finish("edge crossdev");
	c0 = open_primary(0);
	CHECK(cu.cuCtxSetCurrent(c0));
	f0 = mem_free();
	for (int round = 0; round < 2; round++) {
		crossdev_fill(bytes, XD_VMM, s1, f0);
		crossdev_fill(bytes, XD_POOL, s1, f0);
		crossdev_fill(bytes, XD_STREAM, s1, f0);
	}
	cu.cuStreamDestroy_v2(s1);
	close_primary(0);
	close_primary(1);
	return finish("edge crossdev");
}

/*
 * A free queued in a context that is then destroyed: the destruction
 * waits for the free, and the shim must let go of what it tracked for it
 * (its event) before the context goes.
 */
static int freeasync_ctxdestroy(void)
{
	unsigned long long ns = 200000000ULL;
	void *params[] = { &ns };
	CUcontext a, c;
	CUdeviceptr d;
	CUfunction f;
	CUmodule mod;
	size_t f0;

	a = open_primary(0);
	f0 = mem_free();
	if (!CHECK(cu.cuCtxCreate_v2(&c, 0, 0)) ||
	    !CHECK(cu.cuMemAlloc_v2(&d, MIB)) ||
	    !CHECK(cu.cuModuleLoadData(&mod, ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&f, mod, "spin")) ||
	    !CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params,
				      NULL)) ||
	    !CHECK(cu.cuMemFreeAsync(d, NULL)))
		return finish("edge freeasync_ctxdestroy");
	CHECK(cu.cuCtxDestroy_v2(c));
	CHECK(cu.cuCtxSetCurrent(a));
	CHECK(cu.cuCtxSynchronize());	/* settles what is still queued */
	expect_free(f0, "edge freeasync_ctxdestroy: after the context went");
	close_primary(0);
	return finish("edge freeasync_ctxdestroy");
}

struct other_thread {
	CUcontext ctx;
	size_t bytes;
	CUevent freed;		/* recorded behind the queued free */
	size_t total;
};

static void *alloc_from_other_thread(void *arg)
{
	struct other_thread *o = arg;
	CUdeviceptr d;
	CUstream s;
	CUresult rc;

	CHECK(cu.cuCtxSetCurrent(o->ctx));
	CHECK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cu.cuStreamSynchronize(s));	/* a sync point: settles */
	rc = cu.cuMemAlloc_v2(&d, o->bytes);
	if (rc == CUDA_SUCCESS) {
		if (cu.cuEventQuery(o->freed) == CUDA_ERROR_NOT_READY)
			failf("edge freeasync_thread: another thread got the vGPU's %zu bytes while their stream-ordered free was still queued",
			      o->bytes);
		within_cap(o->total, "edge freeasync_thread");
		CHECK(cu.cuMemFree_v2(d));
	} else if (rc != CUDA_ERROR_OUT_OF_MEMORY) {
		failf("edge freeasync_thread: cuMemAlloc %d", (int)rc);
	}
	CHECK(cu.cuStreamDestroy_v2(s));
	return NULL;
}

static int freeasync_thread(void)
{
	struct other_thread o;
	unsigned long long ns = 1000000000ULL;
	void *params[] = { &ns };
	CUdeviceptr d;
	CUfunction f;
	CUmodule mod;
	pthread_t t;

	o.ctx = open_primary(0);
	/* The module first: it takes device memory. */
	if (!CHECK(cu.cuModuleLoadData(&mod, ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&f, mod, "spin")))
		return finish("edge freeasync_thread");
	mem_info(&o.bytes, &o.total);
	if (!CHECK(cu.cuMemAlloc_v2(&d, o.bytes)) ||
	    !CHECK(cu.cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, NULL,
					   params, NULL)) ||
	    !CHECK(cu.cuMemFreeAsync_ptsz(d, NULL)) ||
	    !CHECK(cu.cuEventCreate(&o.freed, CU_EVENT_DISABLE_TIMING)) ||
	    !CHECK(cu.cuEventRecord_ptsz(o.freed, NULL)))
		return finish("edge freeasync_thread");
	pthread_create(&t, NULL, alloc_from_other_thread, &o);
	pthread_join(t, NULL);
	CHECK(cu.cuStreamSynchronize_ptsz(NULL));
	if (mem_free() != o.bytes)
		failf("edge freeasync_thread: after the free ran, %zu bytes free, want %zu",
		      mem_free(), o.bytes);
	CHECK(cu.cuEventDestroy_v2(o.freed));
	close_primary(0);
	return finish("edge freeasync_thread");
}

int cmd_edge(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[0], "crossdev")) {
		load_cuda();
		return crossdev(parse_size(argv[1]));
	}
	if (argc != 1)
		dief("usage: edge <case> [bytes]");
	load_cuda();
	if (!strcmp(argv[0], "freeasync_linear"))
		return freeasync_linear();
	if (!strcmp(argv[0], "pooldestroy"))
		return pooldestroy();
	if (!strcmp(argv[0], "addrfree"))
		return addrfree();
	if (!strcmp(argv[0], "vmm_retain"))
		return vmm_retain();
	if (!strcmp(argv[0], "pending_free"))
		return pending_free();
	if (!strcmp(argv[0], "ctxreuse"))
		return ctxreuse();
	if (!strcmp(argv[0], "freeasync_thread"))
		return freeasync_thread();
	if (!strcmp(argv[0], "freeasync_ctxdestroy"))
		return freeasync_ctxdestroy();
	if (!strcmp(argv[0], "fork_managed"))
		return fork_managed();
	dief("edge: unknown case %s", argv[0]);
}
