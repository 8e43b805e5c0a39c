/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * The scheduler core's functions shared between its two files, gs_sched.c
 * (the unit table, the policies, the slices) and gs_drain.c (draining,
 * debt and priority cuts). Not part of the API (gs_sched.h): callers
 * outside kmod/core never use them.
 */
#ifndef GS_SCHED_INT_H
#define GS_SCHED_INT_H

#include "gs_sched.h"

/* gs_sched.c */
bool gs_policy_has_priority(u32 policy);
/* Policies 3, 4, 6: units of nobody are skipped (work-conserving). */
bool gs_policy_skips_free(u32 policy);
bool gs_valid_id(const struct gs_card *c, int id);
/* Starts the slice at c->slice_start: its owner is picked now. */
void gs_begin(struct gs_card *c, u64 now);
/* Does the slice's owner wait for a closed drain (there is a drainer)? */
bool gs_waits(const struct gs_card *c);

/* gs_drain.c */
/*
 * Is vGPU id's drain closed (the next owner waits for it): its tail is
 * long, and no priority cut.
 */
bool gs_drain_closes(const struct gs_card *c, int id, bool cut);
/*
 * How long vGPU id's drain is waited for: a closed one GS_DRAIN_MAX_NS,
 * else a slice, after a priority cut GS_CUT_DRAIN_MAX_NS at most.
 */
u64 gs_bound_of(const struct gs_card *c, int id, bool cut);
/* The current slice ends at t: its owner had the card since its start. */
void gs_slice_close(struct gs_card *c, u64 t);
/* vGPU id's slice, begun at start, ended at t while it held. */
void gs_drain_begin(struct gs_card *c, int id, u64 start, u64 t, bool cut);
/* The card stops waiting for the drainer at t: it owes the time so far. */
void gs_drain_lapse(struct gs_card *c, u64 t);
/* Where the lapsed drain of v began (its slice's end). */
u64 gs_lapse_start(const struct gs_vgpu *v);
/* Who vGPU id's unit, given up for its debt, goes to (or nobody). */
int gs_repaid(struct gs_card *c, int id, u64 now, bool commit);
/* The drainer's work ran until t: it owes the time since drain_start. */
void gs_drain_end(struct gs_card *c, u64 t);
/* Does vGPU id skip the unit it would be handed, to pay its debt? */
bool gs_pays_debt(struct gs_card *c, int id, u64 now, bool commit);
/* Its debt under a slice shortens the slice it is granted now. */
void gs_pay_rest(struct gs_card *c, int id, u64 now);
/* vGPU id's drain took over: charged, less what it prepaid. */
void gs_settle(struct gs_card *c, int id, u64 over, bool drained);
/* vGPU id, granted a slice, prepays the drain it had last time. */
void gs_prepay(struct gs_card *c, int id, u64 now);

#endif /* GS_SCHED_INT_H */
