/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * gpuslice.ko internals shared by its files (README.md: "Scheduling in the
 * module" and the ABI tables).
 *
 * Locking, outermost first:
 *  - gs_mutex: cards' settings, creating/updating/destroying vGPUs, attach,
 *    the client list, /proc readers. Sleeps; never taken by the fast paths.
 *  - card->lock (spinlock, irq-safe: the hrtimer callback takes it): the
 *    core's state, card->vgpu[] (written under both locks), the activity
 *    counters of the card's vGPUs, the schedule page.
 * Memory charges are lock-free (atomic64 compare-and-exchange).
 */
#ifndef GS_KMOD_H
#define GS_KMOD_H

#include <linux/atomic.h>
#include <linux/hrtimer.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/wait.h>

#include "gs_sched.h"
#include "uapi/gpuslice.h"

#define GS_MODULE_VERSION "1.0.0"

struct gs_kcard;

/* A vGPU; attached files hold references, so it may outlive its destroy. */
struct gs_kvgpu {
	struct kref ref;
	struct gs_kcard *card;
	int id;
	bool dead;		/* destroyed: a detached record (card->lock) */
	u64 cgroup_id;
	u32 mode;
	u32 quota;		/* gs_mutex */
	u32 priority;		/* gs_mutex */
	u64 mem_cap;		/* written under gs_mutex, read lock-free */
	atomic64_t mem_used;
	atomic64_t mem_unseen;	/* the driver's bytes not charged (the agent's) */
	/* card->lock: */
	u32 nprocs;
	u32 npending;
	u32 nholding;		/* files holding the slice of hold_start */
	u64 hold_start;		/* the held slice (its start) */
	u32 nholders;		/* files that ever acquired with ACQUIRE_HOLD */
	u32 nplain;		/* files that ever acquired without it */
	u64 busy_ns;
	u64 wait_ns;
	u64 acquires;
};

struct gs_kcard {
	int index;
	spinlock_t lock;	/* see the top of this file */
	struct gs_card core;
	u32 mode;		/* GPUSLICE_MODE_* of its vGPUs */
	u32 nvgpus;
	u32 nattached;		/* files attached to its live compute vGPUs */
	bool ticking;		/* the hrtimer is (to be) armed */
	struct gs_kvgpu *vgpu[GPUSLICE_MAX_VGPUS];
	struct hrtimer timer;
	wait_queue_head_t wq;	/* ACQUIRE waiters */
	struct gpuslice_sched_page *page;
};

/* One attachment of a file to a card's vGPU. */
struct gs_attach {
	struct gs_kvgpu *kv;	/* set once by ATTACH, read with acquire */
	atomic64_t charged;	/* bytes this file charged */
	/* card->lock: */
	bool pending;		/* acquired, no RELEASE_IDLE since */
	bool counted;		/* counted in kv->npending */
	u32 nwaiting;		/* threads blocked in ACQUIRE */
	bool holding;		/* granted with ACQUIRE_HOLD, no RELEASE since */
	u64 hold_start;		/* the slice it holds (its start) */
	bool holder, plain;	/* acquired with / without ACQUIRE_HOLD */
};

/* An open /dev/gpuslice. */
struct gs_client {
	struct list_head node;	/* gs_clients, under gs_mutex */
	struct pid *pid;	/* the opener's thread group */
	struct gs_attach att[GPUSLICE_MAX_CARDS];
};

extern struct mutex gs_mutex;
extern struct list_head gs_clients;
extern struct gs_kcard *gs_cards[GPUSLICE_MAX_CARDS];

/* gs_card.c */
struct gs_kcard *gs_card_lookup(u32 index, int *err);
int gs_card_set(const struct gpuslice_card *arg);
int gs_card_get(struct gpuslice_card *arg);
int gs_vgpu_create(struct gpuslice_vgpu *arg);
int gs_vgpu_update_spec(const struct gpuslice_vgpu *arg);
int gs_vgpu_destroy(const struct gpuslice_vgpu *arg);
int gs_vgpu_stats(struct gpuslice_vgpu_stats *arg);
struct gs_kvgpu *gs_vgpu_lookup(u32 index, u32 id, int *err);
void gs_vgpu_spec(const struct gs_kvgpu *kv, struct gpuslice_vgpu *spec);
void gs_kvgpu_put(struct gs_kvgpu *kv);
bool gs_card_gated(const struct gs_kcard *card);
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
void gs_cards_free(void);

/* gs_client.c */
struct gs_client *gs_client_new(void);
void gs_client_free(struct gs_client *cl);
int gs_attach(struct gs_client *cl, struct gpuslice_attach *arg);
int gs_charge(struct gs_client *cl, struct gpuslice_charge *arg);
int gs_uncharge(struct gs_client *cl, struct gpuslice_charge *arg);
int gs_meminfo(struct gs_client *cl, struct gpuslice_charge *arg);
int gs_acquire(struct gs_client *cl, struct gpuslice_acquire *arg);
int gs_release(struct gs_client *cl, const struct gpuslice_release *arg);
int gs_wait(struct gs_client *cl, const struct gpuslice_wait *arg);

/* gs_unseen.c */
int gs_vgpu_unseen(struct gpuslice_vgpu_unseen *arg, bool set);
s64 gs_vgpu_in_use(const struct gs_kvgpu *kv);

/* gs_proc.c */
int gs_proc_init(void);
void gs_proc_exit(void);

#endif /* GS_KMOD_H */
