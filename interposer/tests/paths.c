// SPDX-License-Identifier: Apache-2.0
/*
 * gstest paths <via> <seconds> <kernel_us> <depth> [dev]: kernels of
 * kernel_us launched back to back on device dev (default 0) for seconds,
 * depth in flight (an event behind each), by one launch path:
 *
 *   kernel      cuLaunchKernel of a module function on a stream of dev
 *   launch      cuLaunch (CUDA 1.0: block shape and parameters set first),
 *               on the legacy stream of dev's context
 *   grid        cuLaunchGrid, the same with a grid
 *   gridasync   cuLaunchGridAsync on a stream of dev
 *   ctxless     a CUkernel of a library (cuLibraryLoadData) with no
 *               current context at all, on a stream of dev's context,
 *               which the launch runs in
 *   otherdev    the same CUkernel with device 0's context current
 *   graph       a captured graph of one kernel, replayed on a stream of dev
 *   graphother  the same graph launched with device 0's context current
 *
 * Prints launches, wall_ns and busy_ns (dev's engine time of this
 * process's kernels, simcuda's simcudaEngineStats). On a gated card every
 * path must keep to the vGPU's quota.
 */
#include <dlfcn.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define MAX_DEPTH 64

enum via { KERNEL, LAUNCH, GRID, GRIDASYNC, CTXLESS, OTHERDEV, GRAPH,
	   GRAPHOTHER };

static const char *const vias[] = { "kernel", "launch", "grid", "gridasync",
				    "ctxless", "otherdev", "graph",
				    "graphother" };

struct run {
	enum via via;
	int dev;
	uint64_t ns;
	CUcontext ctx, ctx0;
	CUfunction f;
	CUkernel k;
	CUgraphExec x;
	CUstream s;
};

static enum via parse_via(const char *s)
{
	for (size_t i = 0; i < sizeof(vias) / sizeof(vias[0]); i++)
		if (!strcmp(s, vias[i]))
			return (enum via)i;
	dief("paths: via %s: want kernel, launch, grid, gridasync, ctxless, otherdev, graph or graphother",
	     s);
}

/* One launch by the run's path; the stream its event goes on in *on. */
static CUresult launch_one(struct run *r, CUstream *on)
{
	void *params[] = { &r->ns };

	*on = r->s;
	switch (r->via) {
	case KERNEL:
		return cu.cuLaunchKernel(r->f, 1, 1, 1, 1, 1, 1, 0, r->s,
					 params, NULL);
	case LAUNCH:
		*on = CU_STREAM_LEGACY;
		return cu.cuLaunch(r->f);
	case GRID:
		*on = CU_STREAM_LEGACY;
		return cu.cuLaunchGrid(r->f, 1, 1);
	case GRIDASYNC:
		return cu.cuLaunchGridAsync(r->f, 1, 1, r->s);
	case CTXLESS:
	case OTHERDEV:
		return cu.cuLaunchKernel((CUfunction)r->k, 1, 1, 1, 1, 1, 1, 0,
					 r->s, params, NULL);
	case GRAPH:
	case GRAPHOTHER:
		return cu.cuGraphLaunch(r->x, r->s);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* The graph of one kernel, captured on the run's stream. */
static void capture_graph(struct run *r)
{
	void *params[] = { &r->ns };
	CUgraph g = NULL;

	if (!CHECK(cu.cuStreamBeginCapture_v2(r->s,
					      CU_STREAM_CAPTURE_MODE_GLOBAL)) ||
	    !CHECK(cu.cuLaunchKernel(r->f, 1, 1, 1, 1, 1, 1, 0, r->s, params,
				     NULL)) ||
	    !CHECK(cu.cuStreamEndCapture(r->s, &g)) || !g ||
	    !CHECK(cu.cuGraphInstantiateWithFlags(&r->x, g, 0)))
		dief("paths: cannot capture the graph");
	cu.cuGraphDestroy(g);
}

/* Loads what the path launches; leaves the context the path wants current. */
static void prepare(struct run *r)
{
	CUlibrary lib;
	CUmodule mod;
	CUcontext out;

	if (!CHECK(cu.cuModuleLoadData(&mod, spin_ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&r->f, mod, "spin")) ||
	    !CHECK(cu.cuStreamCreate(&r->s, CU_STREAM_NON_BLOCKING)))
		dief("paths: cannot load the kernel");
	/* The legacy calls take their shape and parameters from the function. */
	if (!CHECK(cu.cuFuncSetBlockShape(r->f, 1, 1, 1)) ||
	    !CHECK(cu.cuParamSetSize(r->f, sizeof(r->ns))) ||
	    !CHECK(cu.cuParamSetv(r->f, 0, &r->ns, sizeof(r->ns))))
		dief("paths: cannot set the legacy parameters");
	if (r->via == CTXLESS || r->via == OTHERDEV) {
		if (!CHECK(cu.cuLibraryLoadData(&lib, spin_ptx, NULL, NULL, 0,
						NULL, NULL, 0)) ||
		    !CHECK(cu.cuLibraryGetKernel(&r->k, lib, "spin")))
			dief("paths: cannot load the library");
	}
	if (r->via == GRAPH || r->via == GRAPHOTHER)
		capture_graph(r);
	if (r->via == CTXLESS)
		CHECK(cu.cuCtxPopCurrent_v2(&out));
	else if (r->via == OTHERDEV || r->via == GRAPHOTHER)
		CHECK(cu.cuCtxSetCurrent(r->ctx0));
}

int cmd_paths(int argc, char **argv)
{
	int (*stats)(int, int, uint64_t *, uint64_t *);
	static CUevent ev[MAX_DEPTH];
	uint64_t b0 = 0, b1 = 0, k = 0, t0, deadline;
	unsigned long long launches = 0;
	struct run r = { 0 };
	long seconds, depth;
	CUstream on;
	CUresult rc;

	if (argc < 4 || argc > 5)
		dief("usage: paths <via> <seconds> <kernel_us> <depth> [dev]");
	r.via = parse_via(argv[0]);
	seconds = parse_long(argv[1], 1, 3600, "seconds");
	r.ns = (uint64_t)parse_long(argv[2], 0, 1000000, "kernel_us") * 1000;
	depth = parse_long(argv[3], 1, MAX_DEPTH, "depth");
	r.dev = argc > 4 ? (int)parse_long(argv[4], 0, 15, "dev") : 0;
	load_cuda();
	stats = (__typeof__(stats))dlsym(cuda_handle(), "simcudaEngineStats");
	r.ctx0 = open_primary(0);
	r.ctx = r.dev ? open_primary(r.dev) : r.ctx0;
	for (long i = 0; i < depth; i++)
		if (!CHECK(cu.cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING)))
			return finish("paths");
	prepare(&r);
	if (stats)
		stats(r.dev, (int)getpid(), &b0, &k);
	t0 = now_ns();
	deadline = t0 + (uint64_t)seconds * 1000000000ULL;
	while (now_ns() < deadline) {
		long slot = (long)(launches % (unsigned long long)depth);

		if (launches >= (unsigned long long)depth &&
		    !CHECK(cu.cuEventSynchronize(ev[slot])))
			break;
		rc = launch_one(&r, &on);
		if (rc != CUDA_SUCCESS) {
			failf("paths: %s launch %llu: %s", vias[r.via], launches,
			      rcname(rc));
			break;
		}
		launches++;
		if (!CHECK(cu.cuEventRecord(ev[slot], on)))
			break;
	}
	for (long i = 0; i < depth; i++)
		CHECK(cu.cuEventSynchronize(ev[i]));
	printf("launches=%llu\n", launches);
	printf("wall_ns=%llu\n", (unsigned long long)(now_ns() - t0));
	if (stats && stats(r.dev, (int)getpid(), &b1, &k) == 0)
		printf("busy_ns=%llu\n", (unsigned long long)(b1 - b0));
	return finish("paths");
}
