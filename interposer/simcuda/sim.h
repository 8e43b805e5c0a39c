/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal declarations of the simulated libcuda.so.1.
 *
 * Locking: one process-wide mutex, sim.lock, guards every process-local
 * structure (tables, contexts, streams, events, pools). It is never held
 * while a kernel occupies the engine, and the shared state's lock (see
 * state.c) is only ever taken inside it, never the other way round.
 */
#ifndef SIMCUDA_SIM_H
#define SIMCUDA_SIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gpuslice/cuda_api.h>

#include "simcuda.h"
#include "state.h"

#define SIM_API __attribute__((visibility("default")))

#define SIM_GRAN (2ULL << 20)		/* VMM and pool granularity */
#define SIM_SMS 40			/* multiprocessors per device */
#define SIM_THREADS_PER_SM 2048		/* resident threads per SM */
#define SIM_NLIMITS 7			/* CUlimit values */
#define SIM_ADDR_ALIGN 512ULL		/* of every device pointer */
#define SIM_ADDR_BASE 0x7f0000000000ULL	/* + (dev << 40) */
#define SIM_ADDR_WINDOW (1ULL << 40)	/* per device: 4x max capacity */
#define SIM_HOST_BASE 0x100000000000ULL	/* host and managed pools */
#define SIM_HOST_WINDOW (1ULL << 44)
#define SIM_VA_BASE 0x200000000000ULL	/* cuMemAddressReserve ranges */
#define SIM_VA_WINDOW (1ULL << 46)

/* Kinds of handle in sim.handles. */
enum sim_hkind {
	SH_CTX = 1,
	SH_STREAM,
	SH_EVENT,
	SH_MODULE,
	SH_FUNC,
	SH_POOL,
	SH_ARRAY,
	SH_MIPMAP,
	SH_VMM,
	SH_LIBRARY,	/* cuLibraryLoadData */
	SH_KERNEL,	/* a library's CUkernel */
	SH_GRAPH,
	SH_GNODE,
	SH_GEXEC,
};

/* Kinds of device address range in sim.mem. */
enum sim_mkind {
	SM_LINEAR = 1,
	SM_MANAGED,
	SM_PITCH,
	SM_POOL,
	SM_MAPPED,
	SM_GRAPH,	/* a graph allocation's address (graph.c) */
};

/* A sorted table of [key, key + len) ranges, or of handles (len 0). */
struct sim_entry {
	uint64_t key;
	uint64_t len;
	void *owner;	/* context, pool or VMM handle, by kind */
	int kind;
	int dev;
};

struct sim_table {
	struct sim_entry *v;
	size_t n, cap;
};

int sim_table_add(struct sim_table *t, const struct sim_entry *e);
struct sim_entry *sim_table_get(struct sim_table *t, uint64_t key);
struct sim_entry *sim_table_covering(struct sim_table *t, uint64_t addr);
size_t sim_table_lower(const struct sim_table *t, uint64_t key);
void sim_table_del(struct sim_table *t, struct sim_entry *e);
uint64_t sim_table_gap(const struct sim_table *t, uint64_t lo, uint64_t hi,
		       uint64_t *cursor, uint64_t size, uint64_t align);

struct sim_stream;
struct sim_capture;
struct sim_module;

/* A module's function or a library's kernel (module.c). */
#define SIM_PARAM_BYTES 4096

struct sim_func {
	struct sim_module *mod;
	struct sim_ctx *ctx;		/* cuKernelGetFunction's context */
	struct sim_func *per_ctx;	/* a kernel's functions, by context */
	unsigned int block[3];		/* cuFuncSetBlockShape */
	unsigned int param_size;	/* cuParamSetSize */
	uint64_t stack;			/* per thread: its PTX's .local frame */
	unsigned char params[SIM_PARAM_BYTES];	/* cuParamSetv */
	char name[];
};

struct sim_ctx {
	int dev;
	int primary;
	int alive;
	int refs;		/* retains of a primary context */
	unsigned int epoch;	/* bumped at each (re)activation */
	size_t limits[SIM_NLIMITS];	/* cuCtxSetLimit values */
	uint64_t limit_bytes;	/* device memory the limits take past the defaults */
	struct sim_stream *legacy;
	struct sim_ctx *next_free;	/* recycled dead contexts */
};

struct sim_pool {
	struct sim_pool *next;
	int dev;		/* whose memory it takes; -1: none (host, managed) */
	CUmemLocation loc;	/* as created (CU_MEMPOOL_ATTR_LOCATION_*) */
	CUmemAllocationType type;
	CUmemAllocationHandleType handles;
	uint64_t max_size;	/* CUmemPoolProps::maxSize, 0: none */
	int is_default;
	int destroyed;		/* handle gone, waits for its allocations */
	uint64_t reserved, used;
	uint64_t reserved_high, used_high;
	uint64_t threshold;
	int reuse[3];
};

/* The graph allocator of a device (graph.c). */
struct sim_gmem {
	uint64_t reserved, used, reserved_high, used_high;
};

/*
 * The (location, allocation type) pairs that have a default and a current
 * pool: slot d is device d's pinned pool, as cuDeviceGetMemPool sees it.
 */
#define SIM_NUMA_NODES 1	/* host NUMA nodes: one, id 0 */
enum {
	SIM_SLOT_DEV_MANAGED = SIMST_MAX_DEV,	/* + device */
	SIM_SLOT_HOST = 2 * SIMST_MAX_DEV,	/* + 1 when managed */
	SIM_SLOT_NUMA = SIM_SLOT_HOST + 2,	/* + 2 x node, + 1 managed */
	SIM_SLOT_NONE = SIM_SLOT_NUMA + 2 * SIM_NUMA_NODES,	/* managed */
	SIM_POOL_SLOTS
};

struct sim_global {
	pthread_mutex_t lock;
	pthread_cond_t progress;	/* broadcast when any op completes */
	int state;			/* 0 not initialised, 1 up, -1 failed */
	CUresult init_rc;
	unsigned int gen;		/* bumped in each forked child */
	int ndev;			/* visible devices (CUDA_VISIBLE_DEVICES) */
	int phys[SIMST_MAX_DEV];	/* ordinal -> physical device (visible.c) */
	struct sim_table mem;		/* device allocations and mappings */
	struct sim_table handles;	/* every live handle, for validation */
	struct sim_table vas;		/* reserved virtual address ranges */
	uint64_t next_addr[SIMST_MAX_DEV];	/* allocation cursors */
	uint64_t next_host;		/* host pools' cursor */
	uint64_t next_va;
	struct sim_ctx primary[SIMST_MAX_DEV];
	/* Default and current pool of each location and type (SIM_SLOT_*). */
	struct sim_pool *def_pool[SIM_POOL_SLOTS];
	struct sim_pool *cur_pool[SIM_POOL_SLOTS];
	struct sim_pool *pools;
	struct sim_stream *streams;
	struct sim_capture *captures;	/* the process's, under way */
	uint64_t next_capture_id;
	struct sim_gmem gmem[SIMST_MAX_DEV];
};

extern struct sim_global sim;

static inline uint64_t sim_roundup(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* init.c */
CUresult sim_enter(void);
CUresult sim_enter_ctx(struct sim_ctx **ctx);
CUresult sim_leave_rc(CUresult rc);
int sim_dev_ok(CUdevice dev);
/* The CUDA version this driver is (SIMCUDA_DRIVER_VERSION). */
int sim_driver_version(void);

/*
 * How far ahead of now a process's queued kernels hold their place on the
 * engine, and a preempted kernel's part (preempt.c): a GPU runs one
 * context's work at a time and switches to another context that has work
 * at the end of a timeslice (at least 1 ms, a TSG's scheduling parameter;
 * NVIDIA's GPU scheduling documentation).
 */
#define SIM_TIMESLICE_NS 1000000ULL

/* Compute preemption, SIMCUDA_PREEMPT_US (preempt.c). */
int sim_preempt_check(void);
bool sim_preempt_supported(void);
bool sim_preempts(uint64_t duration_ns);
uint64_t sim_run_preempted(int phys, uint64_t duration_ns, uint64_t ready);
void sim_preempt_forked(void);

/* visible.c: the devices CUDA_VISIBLE_DEVICES shows, at cuInit. */
void sim_visible_init(int nphys);

/*
 * The physical device of ordinal dev: what the machine's shared state
 * (state.h) is indexed by. Set at cuInit and never changed after.
 */
static inline int sim_phys(int dev)
{
	return sim.phys[dev];
}

/* Handle registry (table.c). */
int sim_handle_add(const void *h, int kind, void *owner, int dev);
void *sim_handle_get(const void *h, int kind);
struct sim_entry *sim_handle_entry(const void *h);
void sim_handle_del(const void *h);

/* context.c */
struct sim_ctx *sim_ctx_current(void);
/* Limits back to the defaults, and their memory with them (limit.c). */
void sim_limits_reset(struct sim_ctx *c);
/* A launch needing stack bytes per thread raises the limit (limit.c). */
CUresult sim_stack_grow(struct sim_ctx *c, uint64_t stack);

/* memory.c */
CUresult sim_charge(int dev, uint64_t bytes);
void sim_uncharge(int dev, uint64_t bytes);
CUresult sim_mem_insert(int dev, uint64_t size, int kind, void *owner,
			CUdeviceptr *out);
void sim_mem_drop_ctx(struct sim_ctx *ctx);

/* array.c */
void sim_array_free(struct sim_entry *e);

/* pool.c */
CUresult sim_pools_init(void);
void sim_pools_shrink(void);
void sim_pool_put(struct sim_pool *p, uint64_t size);
struct sim_pool *sim_pool_new(const CUmemLocation *loc,
			      CUmemAllocationType type, int is_default);

/* Pools by location and allocation type (pool_loc.c). */
CUresult sim_pool_props_check(const CUmemPoolProps *props);
/* A destroyed pool stops being any location's current pool. */
void sim_pool_unslot(const struct sim_pool *p);
CUresult sim_pool_loc_attr(const struct sim_pool *p,
			   CUmemPool_attribute attr, void *value);

/* stream.c */
enum sim_op_kind { OP_KERNEL, OP_FREE, OP_RECORD, OP_WAIT, OP_HOST };

struct sim_event;

/* Work an op waits for first: the legacy stream's implicit ordering. */
struct sim_dep {
	struct sim_stream *st;
	uint64_t seq;
};

struct sim_op {
	struct sim_op *next;
	int kind;
	int dev;
	uint64_t seq;		/* position in its stream */
	uint64_t arg;		/* kernel duration or freed size */
	uint64_t gen;		/* event generation recorded or waited for */
	uint64_t queued_ns;	/* when it was pushed (the engine's clock) */
	uint64_t end;		/* OP_KERNEL booked at its push: its end */
	int unbooked;		/* counted in its stream's unbooked */
	struct sim_pool *pool;
	struct sim_event *ev;
	CUhostFn fn;		/* OP_HOST */
	void *data;
	int ndeps;
	struct sim_dep *deps;
};

struct sim_stream {
	struct sim_stream *next;	/* in sim.streams */
	struct sim_ctx *ctx;
	unsigned int flags;
	int legacy;		/* the context's legacy (NULL) stream */
	pthread_cond_t work;
	struct sim_op *head, *tail;
	uint64_t enq, done;	/* ops enqueued / completed so far */
	uint64_t ready_ns;	/* when its next op could start: see run_op */
	uint64_t booked_ns;	/* the end of its last kernel booked at push */
	unsigned int unbooked;	/* queued ops that wait for the host */
	int refs;		/* handle, worker thread, waiters */
	int closing;		/* the worker exits once drained */
	struct sim_capture *cap;	/* the capture it is part of */
};

CUresult sim_stream_get(CUstream h, int ptds, struct sim_ctx *ctx,
			struct sim_stream **out);
void sim_stream_ref(struct sim_stream *st);
void sim_stream_unref(struct sim_stream *st);
struct sim_op *sim_op_new(int kind);
void sim_stream_push(struct sim_stream *st, struct sim_op *op);
void sim_stream_sync_ctx(struct sim_ctx *ctx);
void sim_streams_close_ctx(struct sim_ctx *ctx);

/* event.c */
void sim_event_done(struct sim_event *ev, uint64_t gen);
/* Waits for the record of generation gen; whether it had to wait. */
int sim_event_wait(struct sim_event *ev, uint64_t gen);
void sim_event_unref(struct sim_event *ev);
void sim_event_free(struct sim_entry *e);

/* module.c */
void sim_module_free(struct sim_entry *e);
/* A library kernel's copy of its library in c (a lazy load); entered. */
CUresult sim_kernel_load(struct sim_func *k, struct sim_ctx *c);
void sim_libraries_drop_ctx(struct sim_ctx *c);

/* module_mem.c: one copy's device bytes; an image file, NUL-terminated. */
uint64_t sim_image_bytes(const char *text, uint64_t len);
/* The .local bytes (a thread's stack frame) declared in [body, end). */
uint64_t sim_local_bytes(const char *body, const char *end);
CUresult sim_read_image(const char *path, char **text, uint64_t *len);

/*
 * capture.c: stream capture. Called entered (sim.lock held).
 *
 * sim_capture_redirect: whether an operation for st must not be queued:
 * 1 with *rc CUDA_SUCCESS when st captures (the caller adds a node), or an
 * error (an invalidated capture, the legacy stream of a context whose
 * blocking stream captures); 0 to queue it as usual.
 */
int sim_capture_redirect(struct sim_stream *st, CUresult *rc);
/* The capture's graph gains a node (graph.c's nodes). */
CUresult sim_capture_kernel(struct sim_stream *st, uint64_t duration_ns);
struct sim_graph *sim_capture_graph(struct sim_stream *st);
/* A potentially unsafe call (cuMemAlloc, a synchronisation, a query). */
CUresult sim_capture_unsafe(void);
/* Synchronising with or querying st, or every stream of ctx. */
CUresult sim_capture_sync_stream(struct sim_stream *st);
CUresult sim_capture_sync_ctx(struct sim_ctx *ctx);
/* An illegal use of what capture id did: it is invalidated. */
int sim_capture_live(uint64_t id);
void sim_capture_invalidate_id(uint64_t id);
uint64_t sim_capture_id(const struct sim_stream *st);
/* st joins capture id (a wait on an event recorded in it). */
CUresult sim_capture_join(struct sim_stream *st, uint64_t id);
/* st is going away: a capture begun on it ends, invalidated. */
void sim_capture_stream_gone(struct sim_stream *st);

/* graph.c */
struct sim_graph;
void sim_graph_free(struct sim_entry *e);
void sim_gexec_free(struct sim_entry *e);
struct sim_graph *sim_graph_new(void);
void sim_graph_destroy(struct sim_graph *g);
CUresult sim_graph_add_kernel(struct sim_graph *g, int dev, uint64_t ns);
CUresult sim_graph_add_host(struct sim_graph *g, CUhostFn fn, void *data);
CUresult sim_graph_add_alloc(struct sim_graph *g, int dev, uint64_t bytes,
			     CUdeviceptr *dptr);
CUresult sim_graph_add_free(struct sim_graph *g, CUdeviceptr dptr);

#endif /* SIMCUDA_SIM_H */
