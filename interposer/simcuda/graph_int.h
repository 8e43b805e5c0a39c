/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The simulated graphs' insides, shared by graph.c (graphs and their
 * nodes) and graph_exec.c (executable graphs, their launches and memory).
 */
#ifndef SIMCUDA_GRAPH_INT_H
#define SIMCUDA_GRAPH_INT_H

#include "sim.h"

#define SIM_GRAPH_DEPTH 8	/* child graphs within child graphs */

enum { GN_KERNEL, GN_HOST, GN_ALLOC, GN_FREE, GN_CHILD };

struct sim_gnode {
	struct sim_graph *graph;
	int kind;
	int dev;
	uint64_t arg;		/* kernel duration, allocation bytes */
	CUdeviceptr dptr;	/* allocated or freed */
	CUhostFn fn;
	void *data;
	struct sim_graph *child;	/* a copy, owned */
};

struct sim_graph {
	struct sim_gnode **nodes;
	size_t n, cap;
};

struct sim_gop {
	int kind;		/* GN_KERNEL, GN_HOST or GN_FREE */
	int dev;
	uint64_t arg;
	CUdeviceptr dptr;
	CUhostFn fn;
	void *data;
};

struct sim_gexec {
	struct sim_gop *ops;
	size_t n, cap;
	uint64_t need[SIMST_MAX_DEV];	/* graph memory, mapped at first use */
	int mapped;
};

#endif /* SIMCUDA_GRAPH_INT_H */
