/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * gpuslice scheduler core: which vGPU owns a card's compute, slice by slice,
 * under policies 0-6 (see README.md in this directory).
 *
 * Portable C: no allocation, no locks, no clock reads, no headers beyond
 * gs_compat.h. The caller owns a struct gs_card, serialises every call on
 * it, and passes the time (nanoseconds, any monotonic origin) in. The same
 * source is driven by the kernel module (hrtimers), the shim's no-module
 * mode and the Go tests (pkg/sched, through cgo).
 */
#ifndef GS_SCHED_H
#define GS_SCHED_H

#include "gs_compat.h"

/* Errors: negated, with Linux's errno values so the module can pass them on. */
#define GS_ENOENT	2	/* no such vGPU */
#define GS_EBUSY	16	/* card setting changed while vGPUs exist */
#define GS_EINVAL	22	/* a value out of range */
#define GS_ENOSPC	28	/* too many vGPUs, or quotas over the card */
#define GS_EOPNOTSUPP	95	/* high priority under policy 5 */

/* Policies (reference.md section 3). */
#define GS_POLICY_NATIVE		0
#define GS_POLICY_FIXED			1
#define GS_POLICY_AVERAGE		2
#define GS_POLICY_PREEMPTIVE		3
#define GS_POLICY_WEIGHTED		4
#define GS_POLICY_HYBRID		5
#define GS_POLICY_WEIGHTED_WEAK		6
#define GS_POLICY_MAX			6

/* Card limits and defaults. */
#define GS_MAX_INST_MIN		1
#define GS_MAX_INST_MAX		64
#define GS_MAX_INST_DEFAULT	20
#define GS_MAX_VGPUS		GS_MAX_INST_MAX
#define GS_NS_PER_MS		1000000ULL
#define GS_SLICE_MIN_NS		(1 * GS_NS_PER_MS)
#define GS_SLICE_MAX_NS		(100 * GS_NS_PER_MS)
#define GS_SLICE_DEFAULT_NS	(5 * GS_NS_PER_MS)
#define GS_RECLAIM_MIN_NS	(1 * GS_NS_PER_MS)
#define GS_RECLAIM_MAX_NS	(10000 * GS_NS_PER_MS)
#define GS_RECLAIM_DEFAULT_NS	(100 * GS_NS_PER_MS)
#define GS_QUOTA_STEP		5
/*
 * The most overrun one slice is ever charged: a holder that releases late
 * (its work really ran that long) owes at most this much past the slice's
 * end. How long the card waits for a holder is gs_drain_bound().
 */
#define GS_DRAIN_MAX_NS		(100 * GS_NS_PER_MS)
/* The drain bound of a slice a high-priority vGPU cut short. */
#define GS_CUT_DRAIN_MAX_NS	(5 * GS_NS_PER_MS)
#define GS_QUOTA_MAX		100

/* Owners that are not a vGPU id. */
#define GS_OWNER_NONE	(-1)	/* the card is idle: nobody may run */
#define GS_OWNER_ALL	(-2)	/* policy 0: everybody may run */

/* Unit table entries that are not a vGPU id. */
#define GS_UNIT_FREE	0xff	/* owned by no vGPU */
#define GS_UNIT_SHARED	0xfe	/* policy 5: shared by the quota-0 vGPUs */

struct gs_sched_config {
	u32 max_inst;		/* units per period, GS_MAX_INST_MIN..MAX */
	u32 policy;		/* GS_POLICY_* */
	u64 slice_ns;		/* one unit's length, GS_SLICE_MIN_NS..MAX */
	u64 reclaim_ns;		/* idle after this long without work */
};

struct gs_vgpu {
	u8 in_use;
	u8 quota;		/* percent, multiple of 5 */
	u8 high;		/* priority: 1 = high */
	u8 units;		/* units of the table it owns */
	u8 pending;		/* work waiting (last gs_vgpu_note_work) */
	u8 worked;		/* gs_vgpu_note_work called at least once */
	u8 holding;		/* work queued in its slice may still run */
	u8 watches;		/* its processes drain when a slice is cut */
	u8 lapsed;		/* its last drain lapsed, not released yet */
	u8 outran;		/* granted again before a lapsed release */
	u8 victim;		/* lapsed: whose slice its tail ran on in */
	u8 creditor;		/* owed_ns of its debt is owed to (or FREE) */
	u32 nprocs;		/* processes holding the GPU */
	u64 debt_ns;		/* overrun owed to its next slices */
	u64 credit_ns;		/* prepaid, not drained: set against debt */
	u64 prepaid_ns;		/* charged ahead for its current drain */
	u64 last_drain_ns;	/* its last drain: prepaid at its grants */
	u64 tail_ns;		/* its drains' decaying maximum */
	u64 overrun_ns;		/* overrun charged in all (statistics) */
	u64 last_work_ns;	/* time of the last gs_vgpu_note_work */
	u64 slices;		/* slices granted (statistics) */
	u64 granted_ns;		/* time owned, closed slices and drains */
	u64 lapse_from;		/* lapsed: charged until here so far */
	u64 lapse_cap;		/* lapsed: never charged past here */
	u64 lapse_slice;	/* lapsed: the start of the slice it held */
	u64 outran_from;	/* outran: that drain's start */
	u64 victim_start;	/* lapsed: the victim's slice, start ... */
	u64 victim_end;		/* ... and end when the drain lapsed */
	u64 owed_ns;		/* of its debt, slice time owed to creditor */
};

struct gs_card {
	struct gs_sched_config cfg;
	u32 nvgpus;
	u32 nhigh;		/* vGPUs of high priority */
	u32 quota_sum;
	u32 units_used;		/* units owned by vGPUs (policies 1, 4-6) */
	u32 pos;		/* table index of the unit last served */
	u32 shared_rr;		/* policy 5: quota-0 vGPU served last */
	u32 high_rr;		/* high-priority vGPU served last */
	s32 owner;		/* vGPU id, GS_OWNER_NONE or GS_OWNER_ALL */
	u32 started;		/* the first gs_tick happened */
	u32 vacated;		/* the slice's owner was removed in it */
	u64 slice_start;
	u64 slice_end;		/* the owner may run while now < slice_end */
	s32 drainer;		/* the last owner, draining: GS_OWNER_NONE */
	u32 drain_cut;		/* the drain is of a slice cut by priority */
	u32 closed;		/* the next owner waits for the drain */
	u64 drain_bound;	/* the drain is waited for until start + this */
	u64 drain_start;	/* the drainer's slice ended here */
	u64 drain_slice;	/* ... and began here (its hold's identity) */
	u64 slice_len;		/* the current slice's own length (less debt) */
	u64 prepay_from;	/* no prepaid drains before: a drain lapsed */
	u64 gift_ns;		/* the slice is a debtor's unit, this long */
	u64 handovers;		/* slices begun (statistics) */
	u64 idle_slices;	/* slices with owner GS_OWNER_NONE */
	u64 missed_slices;	/* slices skipped because gs_tick came late */
	u64 closed_drains;	/* drains the next owner waited for */
	u8 table[GS_MAX_INST_MAX];	/* owner of each unit of the period */
	struct gs_vgpu vgpu[GS_MAX_VGPUS];
};

/* Fills *cfg with the defaults: 20 units of 5 ms, policy 0, 100 ms reclaim. */
void gs_config_default(struct gs_sched_config *cfg);

/* 0 when *cfg is within range, else -GS_EINVAL. */
int gs_config_check(const struct gs_sched_config *cfg);

/* Resets *c to an empty card with *cfg (validated; NULL: the defaults). */
int gs_card_init(struct gs_card *c, const struct gs_sched_config *cfg);

/* Changes the card's configuration: -GS_EBUSY while vGPUs exist. */
int gs_card_configure(struct gs_card *c, const struct gs_sched_config *cfg);

/*
 * Adds a vGPU with quota (0-100, step 5) and priority (0 low, 1 high).
 * Returns its id (0..max_inst-1, lowest free) or a negative error.
 */
int gs_vgpu_add(struct gs_card *c, u32 quota, u32 high);
int gs_vgpu_update(struct gs_card *c, int id, u32 quota, u32 high);
int gs_vgpu_remove(struct gs_card *c, int id);

/*
 * Activity: processes holding the GPU, and work submitted/waiting.
 * gs_vgpu_set_procs returns 1 when the vGPU's first process took the rest
 * of its own unit, kept idle for it (the owner changed: republish).
 */
int gs_vgpu_set_procs(struct gs_card *c, int id, u32 nprocs);
int gs_vgpu_note_work(struct gs_card *c, int id, u64 now, bool pending);
/* Active: nprocs > 0 and (work pending or work within reclaim_ns). */
bool gs_vgpu_active(const struct gs_card *c, int id, u64 now);

/*
 * Advances the card to the slice covering now (starting the schedule at
 * now on the first call) and returns the owner of that slice. A late
 * caller moves straight to the slice covering now: missed slices are
 * counted, never granted retroactively.
 */
int gs_tick(struct gs_card *c, u64 now);

/*
 * The current slice: its owner (GS_OWNER_NONE while it waits for a closed
 * drain), and when it ends.
 */
int gs_owner(const struct gs_card *c);
u64 gs_slice_end(const struct gs_card *c);

/*
 * Draining (callers that fence their work at slice ends: the shim, over
 * the schedule file or the module's ACQUIRE_HOLD). gs_vgpu_hold(c, id,
 * true) says vGPU id was granted the current slice and may have work
 * queued in it. When that slice ends while it holds, the holder becomes
 * the card's drainer (c->drainer, from c->drain_start = the old slice's
 * end) and the card goes to the next owner. A drain of a short tail is
 * open (early handover): the next owner may launch at once, its work
 * queued behind the tail. A drain of a long tail (the vGPU's drains'
 * decaying maximum, c->vgpu[id].tail_ns, over half a slice) is closed:
 * the next owner waits for it, gs_owner() says GS_OWNER_NONE meanwhile,
 * so that no other work shares the engine with the tail and the tail's
 * time is the holder's alone. The next owner's slice ends provisionally
 * at drain_start + gs_drain_bound(c) + slice_len (slice_ns less what it
 * owes under a slice, at most half). gs_vgpu_drained(c, id, t) from the
 * drainer ends the drain: t - drain_start is its debt, and the new
 * owner's slice ends at t + slice_len, whole in engine time. Without it
 * the drain lapses at drain_start + bound: the bound is its debt, and a
 * closed drain opens. The debt shortens or skips the vGPU's next slices,
 * so that its share counts the time its work took. When the next pick is
 * the holder itself, it keeps the card: no drain, nothing owed. A vGPU
 * that never holds is never a drainer.
 */
int gs_vgpu_hold(struct gs_card *c, int id, bool holding);

/*
 * How long the card waits for the drainer of the current drain (or, with
 * none, for the owner of the current slice once it ends): an open drain
 * min(slice_ns, GS_DRAIN_MAX_NS), a closed one that plus twice the
 * vGPU's tail, at most GS_DRAIN_MAX_NS; after a priority cut, or in front
 * of a high-priority owner, open, and after a cut at most
 * GS_CUT_DRAIN_MAX_NS.
 */
u64 gs_drain_bound(const struct gs_card *c);

/*
 * vGPU id's work has drained at now (its hold ends). The card is first
 * advanced to now (gs_tick). From the drainer: ends the drain, moves the
 * current slice's end earlier and returns true (callers republish and
 * wake); true too when advancing began a slice. From a vGPU whose drain
 * lapsed and which was granted no slice since (a late release): charges
 * min(now, drain_start + GS_DRAIN_MAX_NS) - (the lapse) more debt, its
 * work having run that long, and moves the current slice's end later by
 * the part of it that ran in the current slice (whose owner's work
 * queued behind it): true. The part that ran in the slice it lapsed in,
 * closed since, is owed to that slice's owner: the units the vGPU gives
 * up for its debt go to it. In its own slice: nothing owed, false.
 *
 * Callers that know which slice a hold was granted (by its start) call it
 * for a hold of the current slice, of c->drain_slice while id is
 * c->drainer, or of c->vgpu[id].lapse_slice while c->vgpu[id].lapsed;
 * the release of any older hold owes nothing and must not end a newer
 * drain.
 */
bool gs_vgpu_drained(struct gs_card *c, int id, u64 now);

/*
 * Time vGPU id owned the card until now: each of its slices from start to
 * end (or cut, or now), the time it drained as drainer, and the late time
 * charged at a late release. Its total drain overrun: gs_vgpu_overrun_ns.
 * 0 for an unknown id.
 */
u64 gs_vgpu_granted_ns(const struct gs_card *c, int id, u64 now);
u64 gs_vgpu_overrun_ns(const struct gs_card *c, int id);

/*
 * vGPU id's processes watch for a cut slice and drain what they queued in
 * it (the shim's fencers): gs_preempt may end its slices early, held or
 * not yet held. Without it a slice the vGPU does not hold is kept to its
 * end, as the page promised its processes. Off for a new vGPU.
 */
int gs_vgpu_watch(struct gs_card *c, int id, bool watches);

/*
 * Priority: when a high-priority vGPU has work waiting and the slice is
 * idle, held by a low-priority vGPU (gs_vgpu_hold) or owned by one whose
 * processes watch (gs_vgpu_watch), ends that slice at now and begins the
 * next at once: the high-priority vGPU may launch now, its work queued
 * behind the holder's, which drains as the drainer, bounded by
 * GS_CUT_DRAIN_MAX_NS. Returns true when it cut the slice short (callers
 * republish and wake).
 */
bool gs_preempt(struct gs_card *c, u64 now);

/*
 * When the card changes next: while a drain is on, its bound
 * (drain_start + gs_drain_bound: a closed drain opens then), else the
 * slice's end. Timers and sleepers wait until then (or for
 * gs_vgpu_drained).
 */
u64 gs_next_change(const struct gs_card *c);

/* The current drainer (GS_OWNER_NONE: none). */
int gs_drainer(const struct gs_card *c);

/* Who gs_tick would hand the card to at slice_end, given activity at now. */
int gs_peek_next(const struct gs_card *c, u64 now);

/*
 * The fast-path check (mirrored by the shim from owner + slice_end): may
 * vGPU id run at now without calling gs_tick? False past slice_end, and
 * while the slice waits for a closed drain.
 */
bool gs_may_run(const struct gs_card *c, int id, u64 now);

#endif /* GS_SCHED_H */
