/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * gpuslice.ko internals shared by its files (README.md: "Scheduling in the
 * module" and the ABI tables).
 *
 * Locking, outermost first; no lock is global to the cards, and no lock a
 * tenant's call takes is held for work that grows with another tenant's
 * files or waiters:
 *  - gs_cards_mutex (gs_card.c): creating a card (CARD_SET). Nothing else.
 *  - card->mutex: the card's settings, its vGPU set (create, update,
 *    destroy), attach and detach of files, starting and stopping its
 *    timer. Sleeps; taken by ATTACH and close for O(1) work each.
 *  - card->lock (spinlock, irq-safe: the hrtimer callback takes it): the
 *    core's state, card->vgpu[] (written under both card->mutex and it),
 *    the activity counters of the card's vGPUs, the schedule page, the
 *    wake-ups at a handover (GS_WAKE_FANOUT threads of at most three
 *    queues; the woken wake the rest).
 *  - kv->files' xarray lock: a vGPU's attached files (slot allocation).
 * Lock-free: memory charges (atomic64 compare-and-exchange), CARD_GET
 * (card->cfg_seq, a sequence count written under card->lock), the lookups
 * of a card (never freed before module exit) and, under RCU, of a vGPU in
 * card->vgpu[] (freed after a grace period) and of the files in its
 * xarray (a file's gs_client is freed after a grace period): VGPU_STATS'
 * lookup and the /proc readers, which hold no lock between records.
 */
#ifndef GS_KMOD_H
#define GS_KMOD_H

#include <linux/atomic.h>
#include <linux/hrtimer.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/rcupdate.h>
#include <linux/seqlock.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/xarray.h>

#include "gs_sched.h"
#include "uapi/gpuslice.h"
#include "uapi/gpuslice_guard.h"

#define GS_MODULE_VERSION "1.0.0"

/* Sleepers a wake-up reaches, and each woken one wakes (gs_client.c). */
#define GS_WAKE_FANOUT	2

/*
 * A timer callback this long is slow (counted per card, logged when the
 * card goes): its O(1) work takes tens of microseconds, so a slow run is
 * the emulator's or the host's stall when it is rare, and the module's
 * when it recurs (a fault that makes every handover slow).
 */
#define GS_TIMER_SLOW_NS	(1000U * 1000U)

struct gs_kcard;

/* The bytes a cgroup's vGPU(s) on a card charged (gs_ledger.c). */
struct gs_ledger {
	struct kref ref;	/* its vGPUs, live and destroyed */
	struct rcu_head rcu;
	struct list_head node;	/* card->ledgers */
	u64 cgroup_id;
	struct gs_kcard *card;
	atomic64_t used;
};

/*
 * A vGPU; attached files hold references, so it may outlive its destroy.
 * Freed after an RCU grace period (lock-free readers of card->vgpu[]).
 */
struct gs_kvgpu {
	struct kref ref;
	struct rcu_head rcu;
	struct gs_kcard *card;
	int id;
	bool dead;		/* destroyed: a detached record (card->lock) */
	u64 cgroup_id;
	u32 mode;
	u32 quota;		/* written under card->mutex and card->lock */
	u32 priority;		/* written under card->mutex and card->lock */
	u64 mem_cap;		/* written under card->mutex, read lock-free */
	/* Attached files (struct gs_client *), slots 0..MAX_VGPU_FILES-1. */
	struct xarray files;
	/* Threads blocked in ACQUIRE or WAIT, at most MAX_VGPU_WAITERS. */
	atomic_t nwaiters;
	wait_queue_head_t acq_wq;	/* ACQUIRE waiters */
	wait_queue_head_t wait_wq;	/* WAIT sleepers */
	u64 created_ns;
	struct gs_ledger *ledger;	/* its charges, a predecessor's included */
	atomic64_t mem_unseen;	/* the driver's bytes not charged (the agent's) */
	/* card->lock: */
	u32 nprocs;
	u32 npending;
	u32 nholding;		/* files holding the slice of hold_start */
	u64 hold_start;		/* the held slice (its start) */
	u32 nholders;		/* files that ever acquired with ACQUIRE_HOLD */
	u32 nplain;		/* files that ever acquired without it */
	u64 busy_ns;		/* reported, bounded (gs_busy.c) */
	u64 wait_ns;
	u64 acquires;
};

struct gs_kcard {
	int index;
	struct mutex mutex;	/* see the top of this file */
	spinlock_t lock;	/* see the top of this file */
	seqcount_t cfg_seq;	/* core.cfg, mode, nvgpus (CARD_GET) */
	struct gs_card core;
	u32 mode;		/* GPUSLICE_MODE_* of its vGPUs */
	u32 nvgpus;
	u32 nattached;		/* files attached to its live compute vGPUs */
	bool ticking;		/* the hrtimer is (to be) armed */
	s32 woken;		/* the owner whose queues were woken last */
	struct gs_kvgpu *vgpu[GPUSLICE_MAX_VGPUS];	/* RCU-readable */
	struct hrtimer timer;
	u64 timer_max_ns;	/* the longest gs_card_timer run (statistics) */
	u64 timer_runs;		/* gs_card_timer runs (statistics) */
	u64 timer_slow;		/* of those, GS_TIMER_SLOW_NS or longer */
	struct gpuslice_sched_page *page;
	spinlock_t ledger_lock;	/* ledgers */
	struct list_head ledgers;	/* the cgroups' gs_ledger */
};

/* One attachment of a file to a card's vGPU. */
struct gs_attach {
	struct gs_kvgpu *kv;	/* set once by ATTACH, read with acquire */
	u32 slot;		/* its index in kv->files */
	atomic64_t charged;	/* bytes this file charged */
	/* card->lock: */
	bool pending;		/* acquired, no RELEASE_IDLE since */
	bool counted;		/* counted in kv->npending */
	u32 nwaiting;		/* threads blocked in ACQUIRE */
	bool holding;		/* granted with ACQUIRE_HOLD, no RELEASE since */
	u64 hold_start;		/* the slice it holds (its start) */
	bool holder, plain;	/* acquired with / without ACQUIRE_HOLD */
};

/*
 * An open /dev/gpuslice (charged to the opener's memcg). Freed, and its
 * pid put, after an RCU grace period: /proc readers find it in the
 * xarrays of the vGPUs it attached to.
 */
struct gs_client {
	struct gpuslice_guard_word guard;	/* first: the eBPF guard reads it */
	struct rcu_head rcu;
	struct pid *pid;	/* the opener's thread group */
	struct gs_attach att[GPUSLICE_MAX_CARDS];
};

extern struct gs_kcard *gs_cards[GPUSLICE_MAX_CARDS];

/* gs_card.c */
struct gs_kcard *gs_card_lookup(u32 index, int *err);
int gs_card_set(const struct gpuslice_card *arg);
int gs_card_get(struct gpuslice_card *arg);
int gs_vgpu_create(struct gpuslice_vgpu *arg);
int gs_vgpu_update_spec(const struct gpuslice_vgpu *arg);
int gs_vgpu_destroy(const struct gpuslice_vgpu *arg);
int gs_vgpu_stats(struct gpuslice_vgpu_stats *arg, bool admin);
struct gs_kvgpu *gs_vgpu_visible(u32 index, u32 id, bool admin, int *err);
void gs_vgpu_spec(const struct gs_kvgpu *kv, struct gpuslice_vgpu *spec);
void gs_kvgpu_put(struct gs_kvgpu *kv);
void gs_cards_free(void);

/* gs_slice.c */
bool gs_card_gated(const struct gs_kcard *card);
void gs_page_publish(struct gs_kcard *card);
enum hrtimer_restart gs_card_timer(struct hrtimer *timer);
void gs_card_advance(struct gs_kcard *card, u64 now);
void gs_card_procs(struct gs_kcard *card, struct gs_kvgpu *kv, int delta);
void gs_card_work(struct gs_kcard *card, struct gs_kvgpu *kv, u64 now);
void gs_card_retime(struct gs_kcard *card);
void gs_card_kick(struct gs_kcard *card);
void gs_card_preempt(struct gs_kcard *card, u64 now);
void gs_card_hold(struct gs_kcard *card, struct gs_attach *att);
void gs_card_unhold(struct gs_kcard *card, struct gs_attach *att, u64 now);
void gs_card_acquirer(struct gs_kcard *card, struct gs_attach *att, bool hold,
		      int delta);

/* gs_client.c */
struct gs_client *gs_client_new(void);
void gs_client_free(struct gs_client *cl);
struct gs_kvgpu *gs_find_vgpu(struct gs_kcard *card);
int gs_attach(struct gs_client *cl, struct gpuslice_attach *arg);
int gs_charge(struct gs_client *cl, struct gpuslice_charge *arg);
int gs_uncharge(struct gs_client *cl, struct gpuslice_charge *arg, u64 *taken);
void gs_charge_undo(struct gs_client *cl, u32 card, u64 bytes, bool charged);
int gs_meminfo(struct gs_client *cl, struct gpuslice_charge *arg);
int gs_acquire(struct gs_client *cl, struct gpuslice_acquire *arg,
	       bool *was_pending);
int gs_release(struct gs_client *cl, const struct gpuslice_release *arg);
int gs_wait(struct gs_client *cl, const struct gpuslice_wait *arg);
void gs_acquire_undo(struct gs_client *cl, u32 card, bool pending);

/* gs_unseen.c */
int gs_vgpu_unseen(struct gpuslice_vgpu_unseen *arg, bool set, bool admin,
		   u64 *old);
s64 gs_vgpu_in_use(const struct gs_kvgpu *kv);

/* gs_busy.c */
void gs_busy_report(struct gs_kcard *card, struct gs_kvgpu *kv, u64 ns,
		    u64 now);
u64 gs_vgpu_busy(const struct gs_kvgpu *kv);

/* gs_ledger.c */
struct gs_ledger *gs_ledger_get(struct gs_kcard *card, u64 cgroup_id);
void gs_ledger_put(struct gs_ledger *l);

/* The bytes charged against kv's cap (its ledger's). */
static inline atomic64_t *gs_used(const struct gs_kvgpu *kv)
{
	return &kv->ledger->used;
}

/* gs_proc.c */
int gs_proc_init(void);
void gs_proc_exit(void);

#endif /* GS_KMOD_H */
