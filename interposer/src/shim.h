/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal interfaces of libgpuslice.so, the LD_PRELOAD shim.
 */
#ifndef GPUSLICE_SHIM_H
#define GPUSLICE_SHIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpuslice/cuda_api.h"
#include "gpuslice/nvml.h"
#include "gpuslice/uuid.h"
#include "ledger.h"
#include "log.h"

#define GS_EXPORT __attribute__((visibility("default")))
#define GS_MAX_CARDS 16
#define GS_MIB (1024ULL * 1024ULL)

/* The real driver's functions, one member per entry of hooks.def. */
struct gs_real {
#define CU_HOOK(name) __typeof__(&name) name;
#define CU_CALL(name) __typeof__(&name) name;
#define NVML_HOOK(name) __typeof__(&name) name;
#define NVML_CALL(name) __typeof__(&name) name;
#include "hooks.def"
#undef CU_HOOK
#undef CU_CALL
#undef NVML_HOOK
#undef NVML_CALL
};

extern struct gs_real gs_real;

/* Resolves the real libcuda functions (once; safe from any thread). */
void gs_load_cuda(void);
/* Registers the fork handlers (init.c), after the driver's own. */
void gs_fork_handlers_once(void);
/* Resolves the real libnvidia-ml functions (once). */
void gs_load_nvml(void);
/* The shim's wrapper for a real function pointer, or NULL. */
void *gs_hook_for_real(void *real_fn);
/* The shim's wrapper exported under name, or NULL. */
void *gs_hook_by_name(const char *name);

/*
 * What the shim's dlsym (dlsym_entry.S) does with a lookup from caller (its
 * return address): jump to libc's dlsym with the same arguments, or, when
 * jump is NULL, return value.
 */
struct gs_dlsym_route {
	void *jump;
	void *value;
};

struct gs_dlsym_route gs_dlsym_route(void *handle, const char *symbol,
				     void *caller);

/* Resolves the driver once and fails cleanly if it lacks the entry point. */
#define REAL(name)                                   \
	({                                           \
		gs_load_cuda();                      \
		if (!gs_real.name)                   \
			return CUDA_ERROR_NOT_FOUND; \
		gs_real.name;                        \
	})

/* Configuration from the environment (config.c). */
struct gs_card_config {
	int index;	/* physical card index (GPU_IDX) */
	uint64_t cap;	/* bytes (GPU_CONTAINER_MEM) */
	int policy;	/* GPU_POLICY, -1 when unset (no-module gate) */
	unsigned int quota;	/* GPU_CONTAINER_QUOTA_PERCENT, 0 when unset */
	char uuid[GS_UUID_STR_LEN];	/* GPUSLICE_CARD_UUIDS, "" when unset */
};

/* Who keeps the memory ledger (GPUSLICE_ENFORCE). */
enum gs_enforce {
	GS_ENFORCE_AUTO,	/* the module where /dev/gpuslice exists */
	GS_ENFORCE_MODULE,	/* the kernel module, or refuse */
	GS_ENFORCE_FILE,	/* the shared ledger file (no module) */
};

struct gs_config {
	bool enabled;		/* a cap is set: isolation is on */
	bool invalid;		/* a cap was asked for but is malformed */
	int ncards;
	struct gs_card_config cards[GS_MAX_CARDS];
	bool uuids;		/* GPUSLICE_CARD_UUIDS names every card */
	uint64_t context_bytes;	/* charged per context (GPUSLICE_CONTEXT_MIB) */
	enum gs_enforce enforce;
	char ledger_dir[256];	/* GPUSLICE_LEDGER_DIR */
	char real_libcuda[256];	/* GPUSLICE_REAL_LIBCUDA */
	char real_libnvml[256];	/* GPUSLICE_REAL_LIBNVML */
	/*
	 * The compute settings the no-module gate uses (module mode reads
	 * the kernel's record): a malformed one refuses the container's
	 * launches there (compute_err says why), never its allocations.
	 */
	bool compute_invalid;
	char compute_err[256];
	unsigned int high;	/* GPU_CONTAINER_PRIORITY */
	unsigned int max_inst;	/* GPUSLICE_MAX_INST */
	uint64_t slice_ns;	/* GPUSLICE_SLICE_MS */
	uint64_t reclaim_ns;	/* GPUSLICE_RECLAIM_MS */
	char sched_dir[256];	/* GPUSLICE_SCHED_DIR */
	char vgpu_key[128];	/* GPUSLICE_VGPU, default the hostname */
};

/* Parses env (a NULL-terminated environ-like getter); errors to err. */
int gs_config_parse(struct gs_config *cfg, const char *(*get)(const char *),
		    char *err, size_t errlen);
const struct gs_config *gs_config(void);

static inline bool gs_enabled(void)
{
	return gs_config()->enabled || gs_config()->invalid;
}

struct gpuslice_sched_page;
struct gs_kmod_card;
struct gs_sf;

/*
 * The streams a process launched in during a slice, which the gate's fence
 * waits for (gate_fence.c): the special streams as their context's legacy
 * stream, explicit ones by handle, each with an event of its own.
 */
#define GS_FENCE_STREAMS 64

struct gs_fence_ent {
	CUcontext ctx;
	CUstream stream;	/* CU_STREAM_LEGACY for the special streams */
	CUevent ev;		/* the fence's, made in ev_ctx */
	CUcontext ev_ctx;
	bool recorded;		/* ev recorded and not yet seen passed */
};

struct gs_fence_set {
	int n;
	bool overflow;		/* more streams than it holds */
	struct gs_fence_ent ent[GS_FENCE_STREAMS];
};

/*
 * A card's compute gate (gate.c): decided at the process's first launch
 * from what the kernel module's ATTACH answered; the rest is the state of
 * the slices this process launches in.
 */
struct gs_gate_card {
	int state;		/* GS_GATE_CARD_*, atomic */
	int32_t id;		/* atomic: the vGPU, as the schedule page names it */
	int slot;		/* its place among the gated cards */
	const struct gs_kmod_card *kc;	/* the module's file (ACQUIRE, RELEASE) */
	struct gs_sf *sf;	/* or the schedule file (no-module mode) */
	const struct gpuslice_sched_page *page;	/* NULL: ACQUIRE's answer */
	pthread_mutex_t lock;	/* the slow path: one thread at a time */
	uint64_t seen_end;	/* atomic: the slice of the latest launch, 0 none */
	uint64_t seen_start;	/* its start (the page's), 0 unknown */
	uint64_t acq_end;	/* atomic: the slice end ACQUIRE last answered */
	uint64_t first_ns;	/* first launch in seen_end's slice, 0 none */
	uint64_t busy_ns;	/* earlier slices' busy time, not yet reported */
	bool active;		/* launched or acquired since the last RELEASE */
	uint64_t last_log;	/* atomic: the last refusal logged */
	/*
	 * What the fence waits for: the set launches are noted in
	 * (set[cur]) and the one a fence in flight reads; fence_lock guards
	 * the sets and is held for no driver wait. fencing (under lock):
	 * a fence waits, lock dropped; fenced signals its end.
	 */
	pthread_mutex_t fence_lock;
	struct gs_fence_set set[2];
	int cur;
	unsigned int fence_gen;	/* atomic: bumped as a set is taken */
	bool fencing;
	pthread_cond_t fenced;
	/* The thread that fences at the slice's end. */
	pthread_cond_t fence_cv;	/* signalled when active turns on */
	bool fencer;			/* started in this process */
	/* Module mode, an older module: no ACQUIRE_HOLD, no WAIT. */
	bool no_hold, no_wait;
	/*
	 * Admission: launches since the last fence (atomic), and how many a
	 * slice admits (atomic, 0: any), set from what the last fence found
	 * still running past the slice's end (gate.c, budget_update).
	 */
	uint32_t nlaunch;
	uint32_t budget;
	/*
	 * The warm-up's probe (gate_budget.c): a copy of the noted set with
	 * events of its own, so the slice's fence still finds the set whole.
	 * budget_cut: a fence found work spilling; no more probing.
	 */
	struct gs_fence_set probe;
	bool budget_cut;
};

/* A card of this container: its cap, its ledger and its compute gate. */
struct gs_card {
	int index;		/* physical index, -1 when not assigned */
	uint64_t cap;
	struct gs_ledger *ledger;
	pthread_mutex_t open_lock;
	bool open_failed;
	struct gs_gate_card gate;
};

/* The card behind a device ordinal; never NULL once enabled. */
struct gs_card *gs_card_for_device(CUdevice dev);
/*
 * The card a launch on stream s runs on (ptsz: a _ptsz entry point), by
 * the stream's context, and the context; NULL when neither can be found
 * (stream.c).
 */
struct gs_card *gs_launch_card(CUstream s, bool ptsz, CUcontext *ctx);
/* The context and device work on stream s runs in; false: none. */
bool gs_stream_device(CUstream s, bool ptsz, CUcontext *ctx, CUdevice *dev);
/* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD. */
bool gs_stream_special(CUstream s);
/* A stream or context is going away: gs_launch_card forgets its answers. */
void gs_stream_forget(void);
/* The card behind an NVML device handle. */
struct gs_card *gs_card_for_nvml(nvmlDevice_t dev);
/*
 * Which device is which card (devmap.c): the position in gs_config()->cards
 * of the card behind CUDA device dev (remembered per ordinal) or NVML
 * device h, by their UUID; -1 when it is none of the container's cards.
 */
int gs_devmap_cuda(CUdevice dev);
int gs_devmap_nvml(nvmlDevice_t h);
void gs_devmap_after_fork_child(void);
/* Context ctx is going away: the gate's fences stop waiting for it. */
void gs_gate_forget_ctx(CUcontext ctx);
/* Stream s is going away: the fence no longer records on it. */
void gs_gate_forget_stream(CUstream s);
/* Stream s is about to capture (capture.c has why). */
void gs_gate_before_capture(CUstream s, bool ptsz);
/* The card of the calling thread's current context, and the context. */
struct gs_card *gs_current_card(CUcontext *ctx);
/* A context is going away: gs_current_card forgets what it cached. */
void gs_card_forget_ctx(void);
/* The card's ledger, opened (and, in module mode, attached) on first use. */
struct gs_ledger *gs_card_ledger(struct gs_card *c);
/* Whether the kernel module keeps the ledgers (GPUSLICE_ENFORCE, /dev/gpuslice). */
bool gs_use_module(void);
/*
 * In module mode, attaches every card of the configuration that has not
 * tried yet (devopen.c: before the driver's first open of a node).
 */
void gs_cards_attach(void);

/*
 * The compute gate (gate.c). In module mode, launches on a card whose
 * vGPU is COMPUTE under a policy other than 0 wait for the vGPU's time
 * slice. gs_gate_mode is OFF when no card of the process is gated (no
 * module, memory vGPUs, policy 0): a launch then costs one branch more.
 */
enum { GS_GATE_UNKNOWN, GS_GATE_OFF, GS_GATE_ON };
enum {
	GS_GATE_CARD_UNRESOLVED,
	GS_GATE_CARD_UNGATED,
	GS_GATE_CARD_GATED,
	GS_GATE_CARD_REFUSED,	/* no vGPU attached: launches refused */
};
extern int gs_gate_mode;

/*
 * The gate for a launch named what on stream s (ptsz: of a _ptsz entry
 * point, where 0 is the per-thread stream), once gs_gate_mode is not OFF.
 */
CUresult gs_gate_launch(const char *what, CUstream s, bool ptsz);
/* The gate of a launch across ndev devices at once (one: on stream s). */
CUresult gs_gate_multi(unsigned int ndev, const char *what, CUstream s);

/*
 * Called by every launch hook before the real launch: CUDA_SUCCESS to go
 * on, or the error the launch fails with.
 */
static inline CUresult gs_gate(const char *what, CUstream s, bool ptsz)
{
	if (__builtin_expect(__atomic_load_n(&gs_gate_mode, __ATOMIC_RELAXED) ==
				     GS_GATE_OFF,
			     1))
		return CUDA_SUCCESS;
	return gs_gate_launch(what, s, ptsz);
}

/*
 * Stream capture (capture.c): whether anything captures now, whether work
 * for stream s is captured (it runs when its graph is launched), and the
 * relaxed capture mode the shim's own driver calls are made in, so that
 * they never prohibit or invalidate the application's capture.
 */
bool gs_capture_any(void);
bool gs_captured(CUstream s, bool ptsz);
struct gs_relaxed {
	CUstreamCaptureMode mode;
	bool swapped;
};
void gs_relaxed_enter(struct gs_relaxed *r);
void gs_relaxed_leave(struct gs_relaxed *r);
void gs_capture_after_fork_child(void);

/*
 * Charges bytes to the card before an allocation; on refusal logs one
 * line naming what was refused and why. Returns true when charged.
 */
bool gs_charge(struct gs_card *card, uint64_t bytes, const char *what);
void gs_uncharge(struct gs_card *card, uint64_t bytes);
/* used and cap of the card's vGPU; false when the ledger is unavailable. */
bool gs_card_usage(struct gs_card *card, uint64_t *used, uint64_t *cap);

/* Allocation tracking (track.c). */
enum gs_kind {
	GS_LINEAR = 1,	/* cuMemAlloc, cuMemAllocPitch */
	GS_ASYNC,	/* stream-ordered, charged through its pool */
	GS_ARRAY,
	GS_MIPMAP,
	GS_HANDLE,	/* cuMemCreate */
	GS_CONTEXT,	/* cuCtxCreate */
	GS_LIMIT,	/* cuCtxSetLimit past the context's footprint */
	/* Loaded images (module.c): bound to the context they loaded in. */
	GS_MODULE,	/* cuModuleLoad* */
	GS_LIBRARY,	/* cuLibraryLoad*: the copy of the context at its load */
};

struct gs_alloc {
	enum gs_kind kind;
	uint64_t key;
	uint64_t bytes;
	struct gs_card *card;
	CUcontext ctx;		/* the context whose destruction frees it */
	void *aux;		/* GS_ASYNC: its pool */
	int maps;		/* GS_HANDLE: live mappings */
	int refs;		/* GS_HANDLE: references not yet released */
};

void gs_track_add(const struct gs_alloc *a);
/* Removes the entry and copies it out; false when unknown. */
bool gs_track_take(enum gs_kind kind, uint64_t key, struct gs_alloc *out);
/* Runs fn under the entry's lock; false when unknown. */
bool gs_track_update(enum gs_kind kind, uint64_t key,
		     bool (*fn)(struct gs_alloc *a, void *arg), void *arg);
/*
 * Records go before the driver is asked to free what they record: once it
 * has, it may hand the same handle to another thread, whose new record
 * must not be mistaken for the old one. Unlinks what the driver frees with
 * ctx; settle with freed = whether the driver did (uncharged) or not (put
 * back).
 */
void *gs_track_detach_context(CUcontext ctx);
void gs_track_settle_detached(void *list, bool freed);
void gs_track_before_fork(void);
void gs_track_after_fork_parent(void);
void gs_track_after_fork_child(void);

/* Graph memory (graph.c): settled on the allocators' reservations. */
void gs_graph_mem_reconcile(void);
void gs_graph_before_fork(void);
void gs_graph_after_fork_parent(void);
void gs_graph_after_fork_child(void);

/*
 * Refuses managed (unified) memory asked for by what: one line per
 * process for every path (mem.c); returns CUDA_ERROR_NOT_SUPPORTED.
 */
CUresult gs_managed_refused(const char *what);

/* What a stream-ordered pool's memory is (pool_class.c). */
enum gs_pool_kind {
	GS_POOL_DEVICE,		/* a card's memory: charged to it */
	GS_POOL_HOST,		/* host memory: never charged */
	GS_POOL_MANAGED,	/* unified memory: refused */
};

struct gs_pool_class {
	enum gs_pool_kind kind;
	CUdevice dev;		/* GS_POOL_DEVICE: the pool's device */
};

/*
 * Classifies pool by the driver's attributes; where the driver has none
 * (before CUDA 13), by a search of the devices' default and current pools,
 * else as memory of device fallback.
 */
void gs_pool_classify(CUmemoryPool pool, CUdevice fallback,
		      struct gs_pool_class *pc);
/* The same, falling back to the location and type the pool was made for. */
void gs_pool_classify_at(CUmemoryPool pool, const CUmemLocation *loc,
			 CUmemAllocationType type, struct gs_pool_class *pc);
/* Records pool as classified (pool.c), unless already known. */
void gs_pool_note(CUmemoryPool pool, const struct gs_pool_class *pc);

/* Pools (pool.c). */
void gs_pools_reconcile(struct gs_card *card);
/* Settles a stream-ordered allocation the driver freed (or not). */
void gs_pool_freed(const struct gs_alloc *a, bool freed);
void gs_pools_before_fork(void);
void gs_pools_after_fork_parent(void);
void gs_pools_after_fork_child(void);

/* Stream-ordered frees not yet carried out (pending.c). */
void gs_pending_add(const struct gs_alloc *a, CUstream stream, bool ptsz);
void gs_pending_settle(void);
/*
 * Before the driver destroys or resets ctx: unlinks the frees queued in it
 * and drops their events while the context still exists. Destroying the
 * context waits for its work, so they are settled after it either way.
 */
void *gs_pending_detach_context(CUcontext ctx);
void gs_pending_settle_detached(void *list);
void gs_pending_before_fork(void);
void gs_pending_after_fork_parent(void);
void gs_pending_after_fork_child(void);

/* Context limits (limit.c). */
void gs_limits_before_fork(void);
void gs_limits_after_fork_parent(void);
void gs_limits_after_fork_child(void);

/* Contexts (context.c). */
void gs_contexts_before_fork(void);
void gs_contexts_after_fork_parent(void);
void gs_contexts_after_fork_child(void);
void gs_vmm_before_fork(void);
void gs_vmm_after_fork_parent(void);
void gs_vmm_after_fork_child(void);

#endif /* GPUSLICE_SHIM_H */
