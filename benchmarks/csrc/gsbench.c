// SPDX-License-Identifier: Apache-2.0
/*
 * The cost of a driver call, measured from the application's side: run it
 * once bare and once with libgpuslice.so preloaded, and the difference is
 * what the shim adds. Loads the driver with dlopen, as frameworks do, so it
 * runs unchanged against a real libcuda.so.1.
 *
 *   gsbench ITERATIONS
 *
 * Prints "alloc_free_ns=X launch_ns=Y": the mean cost of one cuMemAlloc +
 * cuMemFree pair and of one cuLaunchKernel of an empty kernel, each the
 * best of five rounds (the least disturbed by the rest of the machine).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gpuslice/cuda_api.h"

/* A kernel that does nothing; the simulated driver runs it for the
 * duration in its first parameter (0 here). */
static const char ptx[] =
	".version 7.0\n.target sm_70\n.address_size 64\n"
	".visible .entry gs_empty(.param .u64 ns)\n{\n\tret;\n}\n";

static struct {
	__typeof__(&cuInit) init;
	__typeof__(&cuDevicePrimaryCtxRetain) retain;
	__typeof__(&cuCtxSetCurrent) set_current;
	__typeof__(&cuMemAlloc_v2) alloc;
	__typeof__(&cuMemFree_v2) free;
	__typeof__(&cuModuleLoadData) load;
	__typeof__(&cuModuleGetFunction) function;
	__typeof__(&cuLaunchKernel) launch;
	__typeof__(&cuCtxSynchronize) sync;
} cu;

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);

	if (!p) {
		fprintf(stderr, "gsbench: the driver lacks %s\n", name);
		exit(2);
	}
	return p;
}

static void load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);

	if (!lib) {
		fprintf(stderr, "gsbench: %s\n", dlerror());
		exit(2);
	}
	cu.init = sym(lib, "cuInit");
	cu.retain = sym(lib, "cuDevicePrimaryCtxRetain");
	cu.set_current = sym(lib, "cuCtxSetCurrent");
	cu.alloc = sym(lib, "cuMemAlloc_v2");
	cu.free = sym(lib, "cuMemFree_v2");
	cu.load = sym(lib, "cuModuleLoadData");
	cu.function = sym(lib, "cuModuleGetFunction");
	cu.launch = sym(lib, "cuLaunchKernel");
	cu.sync = sym(lib, "cuCtxSynchronize");
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "gsbench: %s failed: CUresult %d\n", what, r);
		exit(1);
	}
}

static double alloc_free(long n)
{
	double t = now_ns();
	CUdeviceptr p;

	for (long i = 0; i < n; i++) {
		check(cu.alloc(&p, 1 << 20), "cuMemAlloc_v2");
		check(cu.free(p), "cuMemFree_v2");
	}
	return (now_ns() - t) / n;
}

/*
 * Launches in batches of 64 so the queue stays short (under a slice of
 * the simulated engine: a gated process that queues more is held to a
 * launch budget, gate.c); syncs are not timed.
 */
static double launches(CUfunction f, long n)
{
	unsigned long long ns = 0;
	void *params[] = { &ns };
	double spent = 0;

	for (long done = 0; done < n;) {
		long batch = n - done < 64 ? n - done : 64;
		double t = now_ns();

		for (long i = 0; i < batch; i++)
			check(cu.launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, params,
					NULL), "cuLaunchKernel");
		spent += now_ns() - t;
		check(cu.sync(), "cuCtxSynchronize");
		done += batch;
	}
	return spent / n;
}

static double best(double (*fn)(long), long n)
{
	double b = fn(n);

	for (int i = 1; i < 5; i++) {
		double v = fn(n);

		b = v < b ? v : b;
	}
	return b;
}

static CUfunction kernel;

static double launch_round(long n)
{
	return launches(kernel, n);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	CUcontext ctx;
	CUmodule mod;

	if (n <= 0) {
		fprintf(stderr, "usage: gsbench ITERATIONS (a positive count)\n");
		return 2;
	}
	load();
	check(cu.init(0), "cuInit");
	check(cu.retain(&ctx, 0), "cuDevicePrimaryCtxRetain");
	check(cu.set_current(ctx), "cuCtxSetCurrent");
	check(cu.load(&mod, ptx), "cuModuleLoadData");
	check(cu.function(&kernel, mod, "gs_empty"), "cuModuleGetFunction");
	alloc_free(n / 10 + 1);	/* warm up */
	printf("alloc_free_ns=%.1f ", best(alloc_free, n));
	printf("launch_ns=%.1f\n", best(launch_round, n));
	return 0;
}
