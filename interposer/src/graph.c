// SPDX-License-Identifier: Apache-2.0
/*
 * Graph memory. A graph's allocation nodes (cuGraphAddMemAllocNode, and
 * cuMemAllocAsync under stream capture) take no memory when they are made:
 * the driver maps it for an executable graph at its first upload or launch,
 * from the device's graph allocator, keeps it while the executable graph
 * lives, and returns the allocator's unused memory to the device only at
 * cuDeviceGraphMemTrim (the CUDA programming guide, "Graph Memory Nodes").
 * So the ledger holds, per device, what the allocator reserves
 * (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), as it holds a pool's
 * reservation (pool.c):
 *
 *  - at instantiation the graph's allocation nodes are added up (child
 *    graphs included), each rounded up to 2 MiB;
 *  - before the executable graph's first upload or launch (or an
 *    instantiation that uploads), the growth it may need is charged (what
 *    it needs past what the allocator holds unused); refused, the launch
 *    fails with CUDA_ERROR_OUT_OF_MEMORY and never runs;
 *  - afterwards, and at trims, synchronisation points and before any
 *    refusal, the charge is settled on the allocator's reservation.
 */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define GS_GRAPH_GRANULE (2ULL * GS_MIB)
#define GS_GRAPH_DEPTH 8	/* child graphs within child graphs */
#define GS_GRAPH_DEVS 64	/* device ordinals the allocators are kept for */

/* An executable graph with allocation nodes, not yet mapped. */
struct gexec {
	struct gexec *next;
	CUgraphExec exec;
	uint64_t need[GS_GRAPH_DEVS];
};

static struct gexec *unmapped;
static int nunmapped;		/* atomic: the launch hook's one load */
static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
/* Bytes the ledger holds for each device's graph allocator. */
static uint64_t charged[GS_GRAPH_DEVS];
/* Devices whose allocator has held graph memory: the ones settled. */
static bool seen[GS_GRAPH_DEVS];
static bool dirty;		/* some device's charge may need settling */

static uint64_t gmem_attr(CUdevice dev, CUgraphMem_attribute attr)
{
	cuuint64_t v = 0;

	if (gs_real.cuDeviceGetGraphMemAttribute)
		gs_real.cuDeviceGetGraphMemAttribute(dev, attr, &v);
	return v;
}

/* Brings dev's charge to its allocator's reservation; graph_lock held. */
static void settle_locked(CUdevice dev)
{
	struct gs_card *c = gs_card_for_device(dev);
	uint64_t reserved = gmem_attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);

	if (reserved < charged[dev]) {
		gs_uncharge(c, charged[dev] - reserved);
		charged[dev] = reserved;
	} else if (reserved > charged[dev]) {
		if (gs_charge(c, reserved - charged[dev], "graph memory"))
			charged[dev] = reserved;
		else
			gs_warn("device %d's graph memory holds %llu bytes more than its vGPU could be charged",
				dev, (unsigned long long)(reserved - charged[dev]));
	}
}

void gs_graph_mem_reconcile(void)
{
	struct gs_relaxed r;

	if (!__atomic_load_n(&dirty, __ATOMIC_RELAXED) ||
	    pthread_mutex_trylock(&graph_lock))
		return;	/* a thread busy with graphs settles them itself */
	gs_relaxed_enter(&r);
	for (CUdevice d = 0; d < GS_GRAPH_DEVS; d++)
		if (seen[d])
			settle_locked(d);
	gs_relaxed_leave(&r);
	pthread_mutex_unlock(&graph_lock);
}

/* Adds up graph g's allocation nodes into need, by device. */
static void scan(CUgraph g, uint64_t *need, int depth)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUgraphNode *nodes;
	CUgraphNodeType type;
	size_t n = 0;
	CUgraph child;

	if (depth > GS_GRAPH_DEPTH || !gs_real.cuGraphGetNodes ||
	    gs_real.cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS || !n ||
	    !(nodes = calloc(n, sizeof(*nodes))))
		return;
	if (gs_real.cuGraphGetNodes(g, nodes, &n) != CUDA_SUCCESS)
		n = 0;
	for (size_t i = 0; i < n; i++) {
		if (gs_real.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS)
			continue;
		if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
		    gs_real.cuGraphMemAllocNodeGetParams(nodes[i], &p) ==
			    CUDA_SUCCESS &&
		    p.poolProps.location.id >= 0 &&
		    p.poolProps.location.id < GS_GRAPH_DEVS)
			need[p.poolProps.location.id] +=
				(p.bytesize + GS_GRAPH_GRANULE - 1) /
				GS_GRAPH_GRANULE * GS_GRAPH_GRANULE;
		else if (type == CU_GRAPH_NODE_TYPE_GRAPH &&
			 gs_real.cuGraphChildGraphNodeGetGraph(nodes[i],
							       &child) ==
				 CUDA_SUCCESS)
			scan(child, need, depth + 1);
	}
	free(nodes);
}

static bool any(const uint64_t *need)
{
	for (int d = 0; d < GS_GRAPH_DEVS; d++)
		if (need[d])
			return true;
	return false;
}

/*
 * Charges what mapping need may add to the allocators; graph_lock held.
 * false (nothing charged) when a vGPU refuses.
 */
static bool charge_growth_locked(const uint64_t *need, const char *what)
{
	uint64_t grown[GS_GRAPH_DEVS] = { 0 };

	for (CUdevice d = 0; d < GS_GRAPH_DEVS; d++) {
		uint64_t reserved, used, spare;

		if (!need[d])
			continue;
		seen[d] = true;
		settle_locked(d);
		reserved = gmem_attr(d, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
		used = gmem_attr(d, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
		spare = reserved > used ? reserved - used : 0;
		if (need[d] <= spare)
			continue;
		grown[d] = need[d] - spare;
		if (!gs_charge(gs_card_for_device(d), grown[d], what)) {
			while (d-- > 0) {
				gs_uncharge(gs_card_for_device(d), grown[d]);
				charged[d] -= grown[d];
			}
			return false;
		}
		charged[d] += grown[d];
	}
	__atomic_store_n(&dirty, true, __ATOMIC_RELAXED);
	return true;
}

static void settle_need_locked(const uint64_t *need)
{
	for (CUdevice d = 0; d < GS_GRAPH_DEVS; d++)
		if (need[d])
			settle_locked(d);
}

/* Remembers a new executable graph that will map need. */
static void remember(CUgraphExec exec, const uint64_t *need)
{
	struct gexec *x = calloc(1, sizeof(*x));

	if (!x) {
		gs_err("out of host memory recording a graph: its graph memory is charged only when settled after its launch");
		return;
	}
	x->exec = exec;
	memcpy(x->need, need, sizeof(x->need));
	pthread_mutex_lock(&graph_lock);
	x->next = unmapped;
	unmapped = x;
	__atomic_add_fetch(&nunmapped, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&graph_lock);
}

/* Takes exec's record out; graph_lock held. */
static struct gexec *take_locked(CUgraphExec exec)
{
	for (struct gexec **pp = &unmapped; *pp; pp = &(*pp)->next) {
		struct gexec *x = *pp;

		if (x->exec == exec) {
			*pp = x->next;
			__atomic_sub_fetch(&nunmapped, 1, __ATOMIC_RELEASE);
			return x;
		}
	}
	return NULL;
}

/* After an instantiation of g into *exec that did (upload) or did not map. */
static CUresult instantiated(CUgraph g, CUgraphExec *exec, bool upload,
			     CUresult (*inst)(void *), void *arg)
{
	uint64_t need[GS_GRAPH_DEVS] = { 0 };
	struct gs_relaxed r;
	CUresult rc;

	if (!gs_enabled())
		return inst(arg);
	gs_relaxed_enter(&r);
	scan(g, need, 0);
	gs_relaxed_leave(&r);
	if (!any(need))
		return inst(arg);
	if (!upload) {
		rc = inst(arg);
		if (rc == CUDA_SUCCESS)
			remember(*exec, need);
		return rc;
	}
	pthread_mutex_lock(&graph_lock);
	if (!charge_growth_locked(need, "cuGraphInstantiate (graph memory)")) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	rc = inst(arg);
	settle_need_locked(need);
	pthread_mutex_unlock(&graph_lock);
	return rc;
}

struct inst_flags {
	__typeof__(&cuGraphInstantiateWithFlags) real;
	CUgraphExec *exec;
	CUgraph g;
	unsigned long long flags;
};

static CUresult inst_with_flags(void *arg)
{
	struct inst_flags *a = arg;

	return a->real(a->exec, a->g, a->flags);
}

GS_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec,
					       CUgraph hGraph,
					       unsigned long long flags)
{
	struct inst_flags a = { REAL(cuGraphInstantiateWithFlags),
				phGraphExec, hGraph, flags };

	if (!phGraphExec)
		return inst_with_flags(&a);
	return instantiated(hGraph, phGraphExec, false, inst_with_flags, &a);
}

struct inst_v2 {
	__typeof__(&cuGraphInstantiate_v2) real;
	CUgraphExec *exec;
	CUgraph g;
	CUgraphNode *err;
	char *log;
	size_t len;
};

static CUresult inst_v2(void *arg)
{
	struct inst_v2 *a = arg;

	return a->real(a->exec, a->g, a->err, a->log, a->len);
}

GS_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec,
					 CUgraph hGraph,
					 CUgraphNode *phErrorNode,
					 char *logBuffer, size_t bufferSize)
{
	struct inst_v2 a = { REAL(cuGraphInstantiate_v2), phGraphExec, hGraph,
			     phErrorNode, logBuffer, bufferSize };

	if (!phGraphExec)
		return inst_v2(&a);
	return instantiated(hGraph, phGraphExec, false, inst_v2, &a);
}

struct inst_params {
	__typeof__(&cuGraphInstantiateWithParams) real;
	CUgraphExec *exec;
	CUgraph g;
	CUDA_GRAPH_INSTANTIATE_PARAMS *p;
};

static CUresult inst_params(void *arg)
{
	struct inst_params *a = arg;

	return a->real(a->exec, a->g, a->p);
}

static CUresult with_params(struct inst_params *a)
{
	bool upload = a->p &&
		      (a->p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);

	if (!a->exec || !a->p)
		return inst_params(a);
	return instantiated(a->g, a->exec, upload, inst_params, a);
}

GS_EXPORT CUresult cuGraphInstantiateWithParams(
	CUgraphExec *phGraphExec, CUgraph hGraph,
	CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	struct inst_params a = { REAL(cuGraphInstantiateWithParams),
				 phGraphExec, hGraph, instantiateParams };

	return with_params(&a);
}

GS_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(
	CUgraphExec *phGraphExec, CUgraph hGraph,
	CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	struct inst_params a = { REAL(cuGraphInstantiateWithParams_ptsz),
				 phGraphExec, hGraph, instantiateParams };

	return with_params(&a);
}

/*
 * Before exec's first upload or launch: its graph memory's growth charged
 * (*x the record, to settle after), or CUDA_ERROR_OUT_OF_MEMORY.
 */
static CUresult map_begin(CUgraphExec exec, struct gexec **x,
			  const char *what)
{
	*x = NULL;
	if (__builtin_expect(!__atomic_load_n(&nunmapped, __ATOMIC_ACQUIRE),
			     1))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&graph_lock);
	*x = take_locked(exec);
	if (*x && !charge_growth_locked((*x)->need, what)) {
		/* Still unmapped: a later launch may fit. */
		(*x)->next = unmapped;
		unmapped = *x;
		__atomic_add_fetch(&nunmapped, 1, __ATOMIC_RELEASE);
		*x = NULL;
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;	/* graph_lock held when *x */
}

/* After the driver's answer rc: settled, and the record dropped when mapped. */
static CUresult map_end(struct gexec *x, CUresult rc)
{
	if (!x)
		return rc;
	settle_need_locked(x->need);
	if (rc != CUDA_SUCCESS) {
		x->next = unmapped;
		unmapped = x;
		__atomic_add_fetch(&nunmapped, 1, __ATOMIC_RELEASE);
		x = NULL;
	}
	pthread_mutex_unlock(&graph_lock);
	free(x);
	return rc;
}

/*
 * A graph launch: not gated when captured into another graph (it runs
 * with that one); else gated like a kernel (no lock held while it waits
 * for a slice), then its memory mapped if it never was.
 */
static CUresult launch(__typeof__(&cuGraphLaunch) real, CUgraphExec exec,
		       CUstream s, bool ptsz, bool upload)
{
	struct gexec *x;
	CUresult rc;

	if (!gs_enabled() || gs_captured(s, ptsz))
		return real(exec, s);
	if (!upload && (rc = gs_gate("cuGraphLaunch", s, ptsz)) != CUDA_SUCCESS)
		return rc;
	rc = map_begin(exec, &x, upload ? "cuGraphUpload (graph memory)" :
				       "cuGraphLaunch (graph memory)");
	if (rc != CUDA_SUCCESS)
		return rc;
	return map_end(x, real(exec, s));
}

GS_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	return launch(REAL(cuGraphLaunch), hGraphExec, hStream, false, false);
}

GS_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec,
				      CUstream hStream)
{
	return launch(REAL(cuGraphLaunch_ptsz), hGraphExec, hStream, true,
		      false);
}

GS_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
	return launch(REAL(cuGraphUpload), hGraphExec, hStream, false, true);
}

GS_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec,
				      CUstream hStream)
{
	return launch(REAL(cuGraphUpload_ptsz), hGraphExec, hStream, true,
		      true);
}

/* Forgotten first: once destroyed, the handle may be another graph's. */
GS_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	__typeof__(&cuGraphExecDestroy) real = REAL(cuGraphExecDestroy);
	struct gexec *x = NULL;
	CUresult rc;

	if (!gs_enabled())
		return real(hGraphExec);
	pthread_mutex_lock(&graph_lock);
	if (__atomic_load_n(&nunmapped, __ATOMIC_ACQUIRE))
		x = take_locked(hGraphExec);
	pthread_mutex_unlock(&graph_lock);
	rc = real(hGraphExec);
	if (rc != CUDA_SUCCESS && x) {
		pthread_mutex_lock(&graph_lock);
		x->next = unmapped;
		unmapped = x;
		__atomic_add_fetch(&nunmapped, 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&graph_lock);
		x = NULL;
	}
	free(x);
	gs_graph_mem_reconcile();
	return rc;
}

GS_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
	CUresult rc = REAL(cuDeviceGraphMemTrim)(device);

	if (rc == CUDA_SUCCESS && gs_enabled())
		gs_graph_mem_reconcile();
	return rc;
}

void gs_graph_before_fork(void)
{
	pthread_mutex_lock(&graph_lock);
}

void gs_graph_after_fork_parent(void)
{
	pthread_mutex_unlock(&graph_lock);
}

/* The child's driver holds no graph: nothing of the parent's is its own. */
void gs_graph_after_fork_child(void)
{
	while (unmapped) {
		struct gexec *x = unmapped;

		unmapped = x->next;
		free(x);
	}
	nunmapped = 0;
	memset(charged, 0, sizeof(charged));
	memset(seen, 0, sizeof(seen));
	dirty = false;
	pthread_mutex_init(&graph_lock, NULL);
}
