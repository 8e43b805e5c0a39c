// SPDX-License-Identifier: Apache-2.0
/*
 * CUDA graphs: built node by node (cuGraphAdd*Node) or by stream capture
 * (capture.c), instantiated into executable graphs and launched on a
 * stream, where their kernels and host functions run as the stream's
 * work.
 *
 * Model: a graph's nodes run one after the other in the order they were
 * added (dependencies are accepted and not modelled; the simulated engine
 * runs one kernel at a time anyway). Child graphs are flattened.
 *
 * Graph memory, as the programming guide's "Graph Memory Nodes" describes
 * it: an allocation node gets a fixed virtual address when it is created
 * and no memory. Physical memory is mapped for an executable graph when it
 * is first uploaded or launched, from the device's graph allocator, which
 * reserves (charges) more from the device only when what it holds unused
 * does not cover it, each allocation in 2 MiB units; the graph keeps it
 * until it is destroyed, when it returns to the allocator, which gives it
 * back to the device only on cuDeviceGraphMemTrim.
 * cuDeviceGetGraphMemAttribute reports the allocator's reserved and used
 * bytes. A free node (or cuMemFreeAsync / cuMemFree of a graph address)
 * ends an allocation's lifetime, not its mapping. A free node of memory
 * allocated outside graphs frees it when the graph runs.
 */
#include <stdlib.h>
#include <string.h>

#include "graph_int.h"

struct sim_graph *sim_graph_new(void)
{
	struct sim_graph *g = calloc(1, sizeof(*g));

	if (g && sim_handle_add(g, SH_GRAPH, NULL, -1)) {
		free(g);
		g = NULL;
	}
	return g;
}

static void node_free(struct sim_gnode *n)
{
	struct sim_entry *e;

	if (n->kind == GN_ALLOC && (e = sim_table_get(&sim.mem, n->dptr)) &&
	    e->kind == SM_GRAPH && e->owner == n)
		sim_table_del(&sim.mem, e);
	if (n->child)
		sim_graph_destroy(n->child);
	sim_handle_del(n);
	free(n);
}

void sim_graph_destroy(struct sim_graph *g)
{
	for (size_t i = 0; i < g->n; i++)
		node_free(g->nodes[i]);
	free(g->nodes);
	sim_handle_del(g);
	free(g);
}

void sim_graph_free(struct sim_entry *e)
{
	sim_graph_destroy((struct sim_graph *)(uintptr_t)e->key);
}

static struct sim_gnode *node_add(struct sim_graph *g, int kind)
{
	struct sim_gnode *n;

	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		struct sim_gnode **v = realloc(g->nodes, cap * sizeof(*v));

		if (!v)
			return NULL;
		g->nodes = v;
		g->cap = cap;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	if (sim_handle_add(n, SH_GNODE, g, -1)) {
		free(n);
		return NULL;
	}
	n->graph = g;
	n->kind = kind;
	g->nodes[g->n++] = n;
	return n;
}

CUresult sim_graph_add_kernel(struct sim_graph *g, int dev, uint64_t ns)
{
	struct sim_gnode *n = node_add(g, GN_KERNEL);

	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->dev = dev;
	n->arg = ns;
	return CUDA_SUCCESS;
}

CUresult sim_graph_add_host(struct sim_graph *g, CUhostFn fn, void *data)
{
	struct sim_gnode *n = node_add(g, GN_HOST);

	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->fn = fn;
	n->data = data;
	return CUDA_SUCCESS;
}

CUresult sim_graph_add_alloc(struct sim_graph *g, int dev, uint64_t bytes,
			     CUdeviceptr *dptr)
{
	struct sim_gnode *n;
	CUresult rc;

	if (!bytes || bytes > simst_capacity(sim_phys(dev)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	n = node_add(g, GN_ALLOC);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->dev = dev;
	n->arg = bytes;
	rc = sim_mem_insert(dev, bytes, SM_GRAPH, n, &n->dptr);
	if (rc != CUDA_SUCCESS) {
		g->n--;
		node_free(n);
		return rc;
	}
	*dptr = n->dptr;
	return CUDA_SUCCESS;
}

CUresult sim_graph_add_free(struct sim_graph *g, CUdeviceptr dptr)
{
	struct sim_entry *e = sim_table_get(&sim.mem, dptr);
	struct sim_gnode *n;

	if (!e || e->kind == SM_MAPPED)
		return CUDA_ERROR_INVALID_VALUE;
	n = node_add(g, GN_FREE);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->dptr = dptr;
	return CUDA_SUCCESS;
}

/* Entered: the graph at h and the nodes dependencies names in it. */
static CUresult graph_deps(CUgraph h, const CUgraphNode *deps, size_t ndeps,
			   struct sim_graph **g)
{
	*g = sim_handle_get(h, SH_GRAPH);
	if (!*g || (ndeps && !deps))
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < ndeps; i++) {
		struct sim_gnode *n = sim_handle_get(deps[i], SH_GNODE);

		if (!n || n->graph != *g)
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* The node just added to g, for the caller's handle. */
static CUresult added(struct sim_graph *g, CUresult rc, CUgraphNode *out)
{
	if (rc == CUDA_SUCCESS)
		*out = (CUgraphNode)g->nodes[g->n - 1];
	return sim_leave_rc(rc);
}

SIM_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	CUresult rc = sim_enter();
	struct sim_graph *g;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!phGraph || flags)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	g = sim_graph_new();
	if (!g)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	*phGraph = (CUgraph)g;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphDestroy(CUgraph hGraph)
{
	CUresult rc = sim_enter();
	struct sim_graph *g;

	if (rc != CUDA_SUCCESS)
		return rc;
	g = sim_handle_get(hGraph, SH_GRAPH);
	if (!g)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	sim_graph_destroy(g);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode,
					 CUgraph hGraph,
					 const CUgraphNode *dependencies,
					 size_t numDependencies,
					 const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct sim_ctx *c;
	struct sim_graph *g;
	uint64_t ns = 0;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = graph_deps(hGraph, dependencies, numDependencies, &g);
	if (rc != CUDA_SUCCESS || !phGraphNode || !p)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (!sim_handle_get(p->func, SH_FUNC) &&
	    !sim_handle_get(p->kern, SH_KERNEL))
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	c = p->ctx ? sim_handle_get(p->ctx, SH_CTX) : sim_ctx_current();
	if (!c)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	if (p->kernelParams && p->kernelParams[0] && !p->extra)
		ns = *(const uint64_t *)p->kernelParams[0];
	return added(g, sim_graph_add_kernel(g, c->dev, ns), phGraphNode);
}

SIM_API CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode,
					CUgraph hGraph,
					const CUgraphNode *dependencies,
					size_t numDependencies,
					CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct sim_graph *g;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = graph_deps(hGraph, dependencies, numDependencies, &g);
	if (rc != CUDA_SUCCESS || !phGraphNode || !p || !p->bytesize ||
	    p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (!sim_dev_ok(p->poolProps.location.id))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	rc = sim_graph_add_alloc(g, p->poolProps.location.id, p->bytesize,
				 &p->dptr);
	return added(g, rc, phGraphNode);
}

SIM_API CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode,
				       CUgraph hGraph,
				       const CUgraphNode *dependencies,
				       size_t numDependencies,
				       CUdeviceptr dptr)
{
	struct sim_graph *g;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = graph_deps(hGraph, dependencies, numDependencies, &g);
	if (rc != CUDA_SUCCESS || !phGraphNode)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	return added(g, sim_graph_add_free(g, dptr), phGraphNode);
}

/* A copy of src's nodes (no memory nodes: those cannot be in a child). */
static CUresult graph_copy(const struct sim_graph *src, struct sim_graph *dst)
{
	for (size_t i = 0; i < src->n; i++) {
		const struct sim_gnode *s = src->nodes[i];
		struct sim_gnode *d;

		if (s->kind == GN_ALLOC || s->kind == GN_FREE)
			return CUDA_ERROR_NOT_SUPPORTED;
		d = node_add(dst, s->kind);
		if (!d)
			return CUDA_ERROR_OUT_OF_MEMORY;
		d->dev = s->dev;
		d->arg = s->arg;
		d->fn = s->fn;
		d->data = s->data;
		if (s->child) {
			d->child = sim_graph_new();
			if (!d->child)
				return CUDA_ERROR_OUT_OF_MEMORY;
			if (graph_copy(s->child, d->child) != CUDA_SUCCESS)
				return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode,
					  CUgraph hGraph,
					  const CUgraphNode *dependencies,
					  size_t numDependencies,
					  CUgraph childGraph)
{
	struct sim_graph *g, *child;
	struct sim_gnode *n;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = graph_deps(hGraph, dependencies, numDependencies, &g);
	child = sim_handle_get(childGraph, SH_GRAPH);
	if (rc != CUDA_SUCCESS || !phGraphNode || !child || child == g)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	n = node_add(g, GN_CHILD);
	if (!n || !(n->child = sim_graph_new()))
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	rc = graph_copy(child, n->child);
	if (rc != CUDA_SUCCESS) {
		g->n--;
		node_free(n);
		return sim_leave_rc(rc);
	}
	*phGraphNode = (CUgraphNode)n;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes,
				 size_t *numNodes)
{
	CUresult rc = sim_enter();
	struct sim_graph *g;

	if (rc != CUDA_SUCCESS)
		return rc;
	g = sim_handle_get(hGraph, SH_GRAPH);
	if (!g || !numNodes)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (nodes) {
		for (size_t i = 0; i < *numNodes; i++)
			nodes[i] = i < g->n ? (CUgraphNode)g->nodes[i] : NULL;
	}
	*numNodes = g->n;
	return sim_leave_rc(CUDA_SUCCESS);
}

static const CUgraphNodeType node_types[] = {
	[GN_KERNEL] = CU_GRAPH_NODE_TYPE_KERNEL,
	[GN_HOST] = CU_GRAPH_NODE_TYPE_HOST,
	[GN_ALLOC] = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
	[GN_FREE] = CU_GRAPH_NODE_TYPE_MEM_FREE,
	[GN_CHILD] = CU_GRAPH_NODE_TYPE_GRAPH,
};

SIM_API CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
	CUresult rc = sim_enter();
	struct sim_gnode *n;

	if (rc != CUDA_SUCCESS)
		return rc;
	n = sim_handle_get(hNode, SH_GNODE);
	if (!n || !type)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	*type = node_types[n->kind];
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode,
					      CUDA_MEM_ALLOC_NODE_PARAMS *out)
{
	CUresult rc = sim_enter();
	struct sim_gnode *n;

	if (rc != CUDA_SUCCESS)
		return rc;
	n = sim_handle_get(hNode, SH_GNODE);
	if (!n || n->kind != GN_ALLOC || !out)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	memset(out, 0, sizeof(*out));
	out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	out->poolProps.location.id = n->dev;
	out->bytesize = (size_t)n->arg;
	out->dptr = n->dptr;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode,
					       CUgraph *phGraph)
{
	CUresult rc = sim_enter();
	struct sim_gnode *n;

	if (rc != CUDA_SUCCESS)
		return rc;
	n = sim_handle_get(hNode, SH_GNODE);
	if (!n || n->kind != GN_CHILD || !phGraph)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	*phGraph = (CUgraph)n->child;
	return sim_leave_rc(CUDA_SUCCESS);
}
