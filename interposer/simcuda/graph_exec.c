// SPDX-License-Identifier: Apache-2.0
/*
 * Executable graphs (graph.c has the model): instantiated from a graph by
 * flattening its nodes, launched or uploaded on a stream, and the graph
 * memory they map from each device's graph allocator.
 */
#include <stdlib.h>
#include <string.h>

#include "graph_int.h"

static int gop_add(struct sim_gexec *x, const struct sim_gnode *n)
{
	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 16;
		struct sim_gop *v = realloc(x->ops, cap * sizeof(*v));

		if (!v)
			return -1;
		x->ops = v;
		x->cap = cap;
	}
	x->ops[x->n++] = (struct sim_gop){ .kind = n->kind, .dev = n->dev,
					   .arg = n->arg, .dptr = n->dptr,
					   .fn = n->fn, .data = n->data };
	return 0;
}

static CUresult flatten(struct sim_gexec *x, const struct sim_graph *g,
			int depth)
{
	if (depth > SIM_GRAPH_DEPTH)
		return CUDA_ERROR_NOT_SUPPORTED;
	for (size_t i = 0; i < g->n; i++) {
		const struct sim_gnode *n = g->nodes[i];
		CUresult rc = CUDA_SUCCESS;

		if (n->kind == GN_CHILD)
			rc = flatten(x, n->child, depth + 1);
		else if (n->kind == GN_ALLOC)
			x->need[n->dev] += sim_roundup(n->arg, SIM_GRAN);
		else if (gop_add(x, n))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}

static void gexec_destroy(struct sim_gexec *x)
{
	if (x->mapped) {
		for (int d = 0; d < SIMST_MAX_DEV; d++)
			sim.gmem[d].used -= x->need[d];
	}
	sim_handle_del(x);
	free(x->ops);
	free(x);
}

void sim_gexec_free(struct sim_entry *e)
{
	gexec_destroy((struct sim_gexec *)(uintptr_t)e->key);
}

/* Entered: an executable graph of g in *out. */
static CUresult instantiate(CUgraphExec *out, CUgraph hGraph)
{
	struct sim_graph *g = sim_handle_get(hGraph, SH_GRAPH);
	struct sim_gexec *x;
	CUresult rc;

	if (!out || !g)
		return CUDA_ERROR_INVALID_VALUE;
	x = calloc(1, sizeof(*x));
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = flatten(x, g, 0);
	if (rc == CUDA_SUCCESS && sim_handle_add(x, SH_GEXEC, NULL, -1))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc != CUDA_SUCCESS) {
		free(x->ops);
		free(x);
		return rc;
	}
	*out = (CUgraphExec)x;
	return CUDA_SUCCESS;
}

/* The flags change nothing here but must be ones the driver knows. */
SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec,
					     CUgraph hGraph,
					     unsigned long long flags)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags & ~0xfULL)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	return sim_leave_rc(instantiate(phGraphExec, hGraph));
}

SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec,
				       CUgraph hGraph,
				       CUgraphNode *phErrorNode,
				       char *logBuffer, size_t bufferSize)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (phErrorNode)
		*phErrorNode = NULL;
	if (logBuffer && bufferSize)
		logBuffer[0] = '\0';
	return sim_leave_rc(instantiate(phGraphExec, hGraph));
}

static CUresult map_memory(struct sim_gexec *x);

static CUresult instantiate_params(CUgraphExec *phGraphExec, CUgraph hGraph,
				   CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!p || (p->flags & ~0xfULL))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = instantiate(phGraphExec, hGraph);
	if (rc == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
		rc = map_memory((struct sim_gexec *)*phGraphExec);
	p->hErrNode_out = NULL;
	p->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS :
					     CUDA_GRAPH_INSTANTIATE_ERROR;
	return sim_leave_rc(rc);
}

SIM_API CUresult cuGraphInstantiateWithParams(
	CUgraphExec *phGraphExec, CUgraph hGraph,
	CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_params(phGraphExec, hGraph, instantiateParams);
}

SIM_API CUresult cuGraphInstantiateWithParams_ptsz(
	CUgraphExec *phGraphExec, CUgraph hGraph,
	CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_params(phGraphExec, hGraph, instantiateParams);
}

SIM_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	CUresult rc = sim_enter();
	struct sim_gexec *x;

	if (rc != CUDA_SUCCESS)
		return rc;
	x = sim_handle_get(hGraphExec, SH_GEXEC);
	if (!x)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	gexec_destroy(x);
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Maps the graph's memory from the graph allocators, charging growth. */
static CUresult map_memory(struct sim_gexec *x)
{
	uint64_t grow[SIMST_MAX_DEV] = { 0 };

	if (x->mapped)
		return CUDA_SUCCESS;
	for (int d = 0; d < sim.ndev; d++) {
		uint64_t spare = sim.gmem[d].reserved - sim.gmem[d].used;

		if (x->need[d] <= spare)
			continue;
		grow[d] = x->need[d] - spare;
		if (sim_charge(d, grow[d]) != CUDA_SUCCESS) {
			while (d-- > 0)
				sim_uncharge(d, grow[d]);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	for (int d = 0; d < sim.ndev; d++) {
		struct sim_gmem *m = &sim.gmem[d];

		m->reserved += grow[d];
		m->used += x->need[d];
		if (m->reserved > m->reserved_high)
			m->reserved_high = m->reserved;
		if (m->used > m->used_high)
			m->used_high = m->used;
	}
	x->mapped = 1;
	return CUDA_SUCCESS;
}

/* A free node of memory from outside graphs frees it now, stream ordered. */
static void push_free(struct sim_stream *st, CUdeviceptr dptr)
{
	struct sim_entry *e = sim_table_get(&sim.mem, dptr);
	struct sim_op *op;

	if (!e || e->kind == SM_GRAPH || e->kind == SM_MAPPED ||
	    !(op = sim_op_new(OP_FREE)))
		return;
	op->pool = e->kind == SM_POOL ? e->owner : NULL;
	op->arg = e->len;
	op->dev = e->dev;
	sim_table_del(&sim.mem, e);
	sim_stream_push(st, op);
}

static CUresult run(struct sim_gexec *x, struct sim_stream *st)
{
	for (size_t i = 0; i < x->n; i++) {
		const struct sim_gop *g = &x->ops[i];
		struct sim_op *op;

		if (g->kind == GN_FREE) {
			push_free(st, g->dptr);
			continue;
		}
		op = sim_op_new(g->kind == GN_KERNEL ? OP_KERNEL : OP_HOST);
		if (!op)
			return CUDA_ERROR_OUT_OF_MEMORY;
		op->dev = g->dev;
		op->arg = g->arg;
		op->fn = g->fn;
		op->data = g->data;
		sim_stream_push(st, op);
	}
	return CUDA_SUCCESS;
}

/* Captured into another capture: the graph's work becomes its nodes. */
static CUresult capture(struct sim_gexec *x, struct sim_stream *st)
{
	struct sim_graph *g = sim_capture_graph(st);
	CUresult rc = CUDA_SUCCESS;

	for (int d = 0; d < SIMST_MAX_DEV; d++)
		if (x->need[d])
			return CUDA_ERROR_NOT_SUPPORTED;
	for (size_t i = 0; i < x->n && rc == CUDA_SUCCESS; i++) {
		const struct sim_gop *o = &x->ops[i];

		rc = o->kind == GN_KERNEL ?
			sim_graph_add_kernel(g, o->dev, o->arg) :
		     o->kind == GN_HOST ? sim_graph_add_host(g, o->fn, o->data) :
					  sim_graph_add_free(g, o->dptr);
	}
	return rc;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream h, int ptds,
			     int upload)
{
	struct sim_stream *st;
	struct sim_gexec *x;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	x = sim_handle_get(hGraphExec, SH_GEXEC);
	if (!x)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(h, ptds, sim_ctx_current(), &st);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	if (sim_capture_redirect(st, &rc)) {
		if (rc == CUDA_SUCCESS && !upload)
			rc = capture(x, st);
		return sim_leave_rc(rc);
	}
	rc = map_memory(x);
	if (rc == CUDA_SUCCESS && !upload)
		rc = run(x, st);
	return sim_leave_rc(rc);
}

SIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, hStream, 0, 0);
}

SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, hStream, 1, 0);
}

SIM_API CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, hStream, 0, 1);
}

SIM_API CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, hStream, 1, 1);
}

SIM_API CUresult cuDeviceGetGraphMemAttribute(CUdevice device,
					      CUgraphMem_attribute attr,
					      void *value)
{
	CUresult rc = sim_enter();
	uint64_t v;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_dev_ok(device))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	switch (attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
		v = sim.gmem[device].used;
		break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
		v = sim.gmem[device].used_high;
		break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
		v = sim.gmem[device].reserved;
		break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
		v = sim.gmem[device].reserved_high;
		break;
	default:
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	}
	if (!value)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	memcpy(value, &v, sizeof(v));
	return sim_leave_rc(CUDA_SUCCESS);
}

/* What no executable graph holds goes back to the device. */
SIM_API CUresult cuDeviceGraphMemTrim(CUdevice device)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_dev_ok(device))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	sim_uncharge(device, sim.gmem[device].reserved - sim.gmem[device].used);
	sim.gmem[device].reserved = sim.gmem[device].used;
	return sim_leave_rc(CUDA_SUCCESS);
}
