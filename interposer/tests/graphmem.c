// SPDX-License-Identifier: Apache-2.0
/*
 * gstest graphmem: graph memory is charged when it really exists, to the
 * byte, and held to the cap.
 *
 * Graph allocations (cuMemAllocAsync under capture, cuGraphAddMemAllocNode)
 * take no memory until their executable graph is first launched or
 * uploaded; the memory stays the graph allocator's after the graph goes
 * and returns to the device at cuDeviceGraphMemTrim (the programming
 * guide's "Graph Memory Nodes"). What cuMemGetInfo says is free is checked
 * exactly at each step:
 *
 *  1. a captured graph of 64 MiB, instantiated: nothing charged yet;
 *  2. launched: 64 MiB charged;
 *  3. the rest filled but 64 MiB with cuMemAlloc; a built graph of 128 MiB:
 *     its launch is refused (CUDA_ERROR_OUT_OF_MEMORY), nothing charged;
 *  4. a built graph of 64 MiB instantiated with the upload flag: charged
 *     at instantiation, the vGPU full; a 2 MiB graph's launch is refused;
 *  5. the first graph destroyed: its memory stays with the allocator (no
 *     change), so the 2 MiB graph now launches, from it;
 *  6. all graphs destroyed and the allocator trimmed: all of it back.
 * Every size is a multiple of 2 MiB, the granule graph memory is
 * reserved in.
 */
#include "common.h"

static const size_t M64 = 64 * MIB;

/* A graph of one allocation of bytes on device 0, freed in the graph. */
static CUgraph built(size_t bytes)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p = { 0 };
	CUgraphNode a, f;
	CUgraph g;

	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = 0;
	p.bytesize = bytes;
	if (!CHECK(cu.cuGraphCreate(&g, 0)) ||
	    !CHECK(cu.cuGraphAddMemAllocNode(&a, g, NULL, 0, &p)) ||
	    !CHECK(cu.cuGraphAddMemFreeNode(&f, g, &a, 1, p.dptr)))
		dief("graphmem: cannot build a graph");
	return g;
}

/* The same by stream capture, with a kernel between. */
static CUgraph captured(CUstream s, CUfunction fn, size_t bytes)
{
	uint64_t ns = 100000;
	void *params[] = { &ns };
	CUdeviceptr p;
	CUgraph g = NULL;

	if (!CHECK(cu.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL)) ||
	    !CHECK(cu.cuMemAllocAsync(&p, bytes, s)) ||
	    !CHECK(cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, params,
				     NULL)) ||
	    !CHECK(cu.cuMemFreeAsync(p, s)) ||
	    !CHECK(cu.cuStreamEndCapture(s, &g)) || !g)
		dief("graphmem: cannot capture a graph");
	return g;
}

static CUgraphExec instantiate(CUgraph g)
{
	CUgraphExec x;

	if (!CHECK(cu.cuGraphInstantiateWithFlags(&x, g, 0)))
		dief("graphmem: cannot instantiate");
	cu.cuGraphDestroy(g);
	return x;
}

int cmd_graphmem(int argc, char **argv)
{
	CUDA_GRAPH_INSTANTIATE_PARAMS up = {
		.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD,
	};
	CUgraphExec x1, x2, x3, x4;
	CUdeviceptr fill;
	size_t free0;
	CUmodule mod;
	CUfunction fn;
	CUstream s;
	CUgraph g;

	(void)argv;
	if (argc)
		dief("usage: graphmem");
	load_cuda();
	open_primary(0);
	if (!CHECK(cu.cuModuleLoadData(&mod, spin_ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&fn, mod, "spin")) ||
	    !CHECK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)))
		return finish("graphmem");
	free0 = mem_free();

	x1 = instantiate(captured(s, fn, M64));
	expect_free(free0, "a captured graph instantiated");
	CHECK(cu.cuGraphLaunch(x1, s));
	CHECK(cu.cuStreamSynchronize(s));
	expect_free(free0 - M64, "its first launch");
	CHECK(cu.cuGraphLaunch(x1, s));
	CHECK(cu.cuStreamSynchronize(s));
	expect_free(free0 - M64, "its second launch");

	if (!CHECK(cu.cuMemAlloc_v2(&fill, free0 - 2 * M64)))
		return finish("graphmem");
	expect_free(M64, "filled but 64 MiB");
	x2 = instantiate(built(2 * M64));
	EXPECT(cu.cuGraphLaunch(x2, s), CUDA_ERROR_OUT_OF_MEMORY);
	expect_free(M64, "a 128 MiB graph refused");

	g = built(M64);
	CHECK(cu.cuGraphInstantiateWithParams(&x3, g, &up));
	cu.cuGraphDestroy(g);
	expect_free(0, "a 64 MiB graph instantiated with upload");
	x4 = instantiate(built(2 * MIB));
	EXPECT(cu.cuGraphLaunch(x4, s), CUDA_ERROR_OUT_OF_MEMORY);
	expect_free(0, "a 2 MiB graph refused");

	CHECK(cu.cuGraphExecDestroy(x1));
	expect_free(0, "the first graph destroyed (its memory cached)");
	CHECK(cu.cuGraphLaunch(x4, s));
	CHECK(cu.cuStreamSynchronize(s));
	expect_free(0, "the 2 MiB graph from the cache");

	CHECK(cu.cuGraphExecDestroy(x2));
	CHECK(cu.cuGraphExecDestroy(x3));
	CHECK(cu.cuGraphExecDestroy(x4));
	CHECK(cu.cuDeviceGraphMemTrim(0));
	expect_free(2 * M64, "every graph destroyed, the allocator trimmed");
	CHECK(cu.cuMemFree_v2(fill));
	expect_free(free0, "all freed");
	cu.cuStreamDestroy_v2(s);
	cu.cuModuleUnload(mod);
	close_primary(0);
	return finish("graphmem");
}
