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
 * A card's compute gate (gate.c): decided at the process's first launch
 * from what the kernel module's ATTACH answered; the rest is the state of
 * the slices this process launches in.
 */
#define GS_GATE_FENCE_CTXS 4

struct gs_gate_card {
	int state;		/* GS_GATE_CARD_*, atomic */
	int32_t id;		/* atomic: the vGPU, as the schedule page names it */
	const struct gs_kmod_card *kc;	/* the module's file (ACQUIRE, RELEASE) */
	struct gs_sf *sf;	/* or the schedule file (no-module mode) */
	const struct gpuslice_sched_page *page;	/* NULL: ACQUIRE's answer */
	pthread_mutex_t lock;	/* the slow path: one thread at a time */
	uint64_t seen_end;	/* atomic: the slice of the latest launch, 0 none */
	uint64_t acq_end;	/* atomic: the slice end ACQUIRE last answered */
	uint64_t first_ns;	/* first launch in seen_end's slice, 0 none */
	uint64_t busy_ns;	/* earlier slices' busy time, not yet reported */
	bool active;		/* launched or acquired since the last RELEASE */
	uint64_t last_log;	/* atomic: the last refusal logged */
	/* The contexts launched in since the last fence: what it waits for. */
	CUcontext ctx[GS_GATE_FENCE_CTXS];	/* ctx[0] atomic */
	int nctx;
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
};

/* A card of this container: its cap, its ledger and its compute gate. */
struct gs_card {
	int ordinal;		/* device ordinal as the process sees it */
	int index;		/* physical index, -1 when not assigned */
	uint64_t cap;
	struct gs_ledger *ledger;
	pthread_mutex_t open_lock;
	bool open_failed;
	struct gs_gate_card gate;
};

/* The card behind a device ordinal; never NULL once enabled. */
struct gs_card *gs_card_for_device(CUdevice dev);
/* The card behind an NVML device handle. */
struct gs_card *gs_card_for_nvml(nvmlDevice_t dev);
/* Context ctx is going away: the gate's fences stop waiting for it. */
void gs_gate_forget_ctx(CUcontext ctx);
/* The card of the calling thread's current context, and the context. */
struct gs_card *gs_current_card(CUcontext *ctx);
/* A context is going away: gs_current_card forgets what it cached. */
void gs_card_forget_ctx(void);
/* The card's ledger, opened (and, in module mode, attached) on first use. */
struct gs_ledger *gs_card_ledger(struct gs_card *c);
/* Whether the kernel module keeps the ledgers (GPUSLICE_ENFORCE, /dev/gpuslice). */
bool gs_use_module(void);

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

/* The gate for a launch named what, once gs_gate_mode is not OFF. */
CUresult gs_gate_launch(const char *what);
/* The gate of a launch across ndev devices at once. */
CUresult gs_gate_multi(unsigned int ndev, const char *what);

/*
 * Called by every launch hook before the real launch: CUDA_SUCCESS to go
 * on, or the error the launch fails with.
 */
static inline CUresult gs_gate(const char *what)
{
	if (__builtin_expect(__atomic_load_n(&gs_gate_mode, __ATOMIC_RELAXED) ==
				     GS_GATE_OFF,
			     1))
		return CUDA_SUCCESS;
	return gs_gate_launch(what);
}

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
void gs_cards_after_fork_child(void);
void gs_vmm_before_fork(void);
void gs_vmm_after_fork_parent(void);
void gs_vmm_after_fork_child(void);

#endif /* GPUSLICE_SHIM_H */
