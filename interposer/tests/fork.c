// SPDX-License-Identifier: Apache-2.0
/*
 * gstest fork: the shim is fork-safe.
 *
 *  1. A child forked while the parent holds memory owns none of it: the
 *     child's own allocations are charged to the child, its exit without
 *     freeing gives back only its own bytes, and the parent's stay.
 *  2. Forking while other threads allocate and free never leaves a child
 *     stuck on a lock one of those threads held: every child can still
 *     allocate (each has 20 s, then SIGALRM kills it).
 *
 * A real driver refuses CUDA in a forked child; such a child reports it
 * and the child-side checks are skipped (exit 77 from the child).
 *
 * gstest fork early: the fork comes right after cuInit, before any call
 * the shim wraps (it has not even loaded the driver then; in module mode
 * it attached at the driver's open of a device node, src/devopen.c). The
 * child still gets a ledger of its own: the parent, opening its context
 * after the child exited holding memory, prints what it finds free.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define SKIP 77

static CUcontext parent_ctx;
static volatile int stop;

/* In the child: CUDA from scratch. Returns SKIP when it cannot be had. */
static int child_open(void)
{
	CUcontext ctx;
	CUresult rc = cu.cuInit(0);

	if (rc == CUDA_SUCCESS)
		rc = cu.cuDevicePrimaryCtxRetain(&ctx, 0);
	if (rc == CUDA_SUCCESS)
		rc = cu.cuCtxSetCurrent(ctx);
	if (rc != CUDA_SUCCESS) {
		notef("fork child: CUDA is not usable after fork here (%d, %s)",
		      (int)rc, rcname(rc));
		return SKIP;
	}
	return 0;
}

/* The child of part 1: allocates y bytes and exits without freeing them. */
static int leaky_child(size_t parent_free, uint64_t y)
{
	size_t f1, f2;
	CUdeviceptr d;

	alarm(20);
	if (child_open())
		return SKIP;
	f1 = mem_free();
	if (f1 >= parent_free)
		failf("fork child: free %zu with its own context, want less than the parent's %zu",
		      f1, parent_free);
	if (CHECK(cu.cuMemAlloc_v2(&d, y))) {
		f2 = mem_free();
		if (f2 != f1 - y)
			failf("fork child: free %zu after allocating %llu, want %zu",
			      f2, (unsigned long long)y,
			      f1 - (size_t)y);
	}
	/* Exit holding d and its context: the ledger must reclaim them. */
	return failures() ? 1 : 0;
}

static int wait_child(pid_t pid, const char *what)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		;
	if (WIFSIGNALED(st)) {
		failf("%s: child killed by signal %d%s", what, WTERMSIG(st),
		      WTERMSIG(st) == SIGALRM ? " (stuck: a lock held at fork?)"
					      : "");
		return -1;
	}
	if (WEXITSTATUS(st) == SKIP)
		return SKIP;
	if (WEXITSTATUS(st))
		failf("%s: child exited with %d", what, WEXITSTATUS(st));
	return WEXITSTATUS(st);
}

/* The parent's free must come back to want once the child is reaped. */
static void await_free(size_t want)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	size_t f = 0;

	for (int i = 0; i < 500; i++) {	/* 10 s */
		CUdeviceptr d;

		/* A charge is what reclaims dead processes' bytes. */
		if (cu.cuMemAlloc_v2(&d, 1) == CUDA_SUCCESS)
			cu.cuMemFree_v2(d);
		f = mem_free();
		if (f > want) {
			failf("fork: free %zu > %zu: the child's exit took the parent's bytes",
			      f, want);
			return;
		}
		if (f == want)
			return;
		nanosleep(&ts, NULL);
	}
	failf("fork: free stuck at %zu, want %zu: the dead child's bytes were not reclaimed",
	      f, want);
}

/*
 * Odd threads go through VMM, where the shim holds a lock of its own
 * across the driver's call: a fork must take the shim's locks before the
 * driver's, or it waits on a thread that waits on it.
 */
static void *busy(void *arg)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED };
	bool vmm = (uintptr_t)arg & 1;

	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	CHECK(cu.cuCtxSetCurrent(parent_ctx));
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		CUmemGenericAllocationHandle h;
		CUdeviceptr d;
		CUresult rc = vmm ? cu.cuMemCreate(&h, 2 * MIB, &prop, 0) :
				    cu.cuMemAlloc_v2(&d, MIB);

		if (rc == CUDA_SUCCESS && vmm)
			CHECK(cu.cuMemRelease(h));
		else if (rc == CUDA_SUCCESS)
			CHECK(cu.cuMemFree_v2(d));
		else if (rc != CUDA_ERROR_OUT_OF_MEMORY)
			failf("fork busy thread: allocation %d", (int)rc);
	}
	return NULL;
}

/* A child of part 2: must not hang in any of the shim's locks. */
static int quick_child(void)
{
	CUdeviceptr d;

	alarm(20);
	if (child_open())
		return SKIP;
	if (CHECK(cu.cuMemAlloc_v2(&d, MIB)))
		CHECK(cu.cuMemFree_v2(d));
	CHECK(cu.cuDevicePrimaryCtxRelease_v2(0));
	return failures() ? 1 : 0;
}

static int fork_early(void)
{
	size_t free, total;
	pid_t pid;
	int skipped;

	cuda_init();
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		dief("fork failed");
	if (pid == 0)
		_exit(leaky_child(SIZE_MAX, 2 * MIB));
	skipped = wait_child(pid, "fork early") == SKIP;
	open_primary(0);
	mem_info(&free, &total);
	printf("early.free=%zu\nearly.total=%zu\nchildren_skipped=%d\n", free,
	       total, skipped);
	close_primary(0);
	return finish("fork early");
}

int cmd_fork(int argc, char **argv)
{
	const uint64_t x = 32 * MIB, y = 16 * MIB;
	pthread_t t[4];
	CUdeviceptr px;
	size_t f0;
	pid_t pid;
	int skipped = 0;

	if (argc == 1 && !strcmp(argv[0], "early"))
		return fork_early();
	if (argc)
		dief("usage: fork [early]");
	parent_ctx = open_primary(0);
	f0 = mem_free();
	if (!CHECK(cu.cuMemAlloc_v2(&px, x)))
		return finish("fork");
	expect_free(f0 - x, "fork: parent after its allocation");

	/* 1 */
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		dief("fork failed");
	if (pid == 0)
		_exit(leaky_child(f0 - x, y));
	if (wait_child(pid, "fork part 1") == SKIP)
		skipped++;
	await_free(f0 - x);

	/* 2 */
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, busy, (void *)(uintptr_t)i);
	for (int i = 0; i < 100; i++) {
		fflush(NULL);
		pid = fork();
		if (pid < 0)
			dief("fork failed");
		if (pid == 0)
			_exit(quick_child());
		if (wait_child(pid, "fork part 2") == SKIP)
			skipped++;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);

	CHECK(cu.cuMemFree_v2(px));
	await_free(f0);
	printf("children_skipped=%d\n", skipped);
	close_primary(0);
	return finish("fork");
}
