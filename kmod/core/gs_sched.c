// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * gpuslice scheduler core: policies 0-6 over a unit table (README.md).
 *
 * A card's period is max_inst units. Adding, changing or removing a vGPU
 * rebuilds the table: which vGPU (or nobody, or the quota-0 pool of policy
 * 5) owns each unit, the units of each owner interleaved across the period
 * by smooth weighted round robin. At each slice boundary gs_tick walks the
 * table from the unit served last and hands the card to the first unit the
 * policy does not skip; an active high-priority vGPU goes first. What
 * happens at a held slice's end (the drain, its debt, the debt's
 * repayment) and priority cuts are in gs_drain.c.
 */
#include "gs_sched.h"
#include "gs_sched_int.h"

/* 64-bit division: div64_u64 in the kernel, plain division elsewhere. */
#ifdef __KERNEL__
#include <linux/math64.h>
#define gs_div64(a, b) div64_u64((a), (b))
#else
static inline u64 gs_div64(u64 a, u64 b)
{
	return a / b;
}
#endif

bool gs_policy_skips_free(u32 policy)
{
	return policy == GS_POLICY_PREEMPTIVE || policy == GS_POLICY_WEIGHTED ||
	       policy == GS_POLICY_WEIGHTED_WEAK;
}

static bool gs_policy_skips_idle(u32 policy)
{
	return policy == GS_POLICY_PREEMPTIVE ||
	       policy == GS_POLICY_WEIGHTED_WEAK;
}

/* Policies whose units follow the quota, and whose quotas must fit. */
static bool gs_policy_by_quota(u32 policy)
{
	return policy == GS_POLICY_FIXED || policy == GS_POLICY_WEIGHTED ||
	       policy == GS_POLICY_HYBRID || policy == GS_POLICY_WEIGHTED_WEAK;
}

bool gs_policy_has_priority(u32 policy)
{
	return policy != GS_POLICY_NATIVE && policy != GS_POLICY_HYBRID;
}

/* Units a vGPU of this quota owns: quota * max_inst / 100, rounded down, at least 1. */
static u32 gs_units(const struct gs_card *c, u32 quota)
{
	u32 u;

	switch (c->cfg.policy) {
	case GS_POLICY_AVERAGE:
	case GS_POLICY_PREEMPTIVE:
		return 1;
	case GS_POLICY_NATIVE:
		return 0;
	}
	if (quota == 0)
		return 0;
	u = quota * c->cfg.max_inst / GS_QUOTA_MAX;
	return u ? u : 1;
}

int gs_config_check(const struct gs_sched_config *cfg)
{
	if (cfg->max_inst < GS_MAX_INST_MIN || cfg->max_inst > GS_MAX_INST_MAX)
		return -GS_EINVAL;
	if (cfg->policy > GS_POLICY_MAX)
		return -GS_EINVAL;
	if (cfg->slice_ns < GS_SLICE_MIN_NS || cfg->slice_ns > GS_SLICE_MAX_NS)
		return -GS_EINVAL;
	if (cfg->reclaim_ns < GS_RECLAIM_MIN_NS ||
	    cfg->reclaim_ns > GS_RECLAIM_MAX_NS)
		return -GS_EINVAL;
	return 0;
}

bool gs_valid_id(const struct gs_card *c, int id)
{
	return id >= 0 && id < GS_MAX_VGPUS && c->vgpu[id].in_use;
}

void gs_config_default(struct gs_sched_config *cfg)
{
	cfg->max_inst = GS_MAX_INST_DEFAULT;
	cfg->policy = GS_POLICY_NATIVE;
	cfg->slice_ns = GS_SLICE_DEFAULT_NS;
	cfg->reclaim_ns = GS_RECLAIM_DEFAULT_NS;
}

/*
 * Rebuilds the unit table. Each owner (a vGPU, and the units of nobody or
 * of policy 5's quota-0 pool) with k units wants them at the ideal points
 * (j + 1/2) * max_inst / k of the period, j = 0..k-1; the table lists all
 * wanted points in order (ties: lowest vGPU id first, nobody last). So an
 * owner's units are spread evenly across the period, and with the units of
 * nobody skipped, the vGPUs still alternate.
 */
static void gs_rebuild(struct gs_card *c)
{
	u8 taken[GS_MAX_VGPUS + 1];
	u8 who[GS_MAX_VGPUS + 1];
	u8 weight[GS_MAX_VGPUS + 1];
	u32 m = c->cfg.max_inst;
	u32 rest = m;
	u32 n = 0, i, e, best;

	for (i = 0; i < GS_MAX_VGPUS; i++) {
		const struct gs_vgpu *v = &c->vgpu[i];

		if (!v->in_use || !v->units)
			continue;
		who[n] = (u8)i;
		weight[n] = v->units;
		rest -= v->units;
		n++;
	}
	if (rest) {
		who[n] = c->cfg.policy == GS_POLICY_HYBRID ? GS_UNIT_SHARED :
							     GS_UNIT_FREE;
		weight[n] = (u8)rest;
		n++;
	}
	for (e = 0; e < n; e++)
		taken[e] = 0;
	for (i = 0; i < m; i++) {
		best = n;
		for (e = 0; e < n; e++) {
			if (taken[e] == weight[e])
				continue;
			/* (2 taken + 1) / weight, smallest first */
			if (best == n ||
			    (2u * taken[e] + 1) * weight[best] <
				    (2u * taken[best] + 1) * weight[e])
				best = e;
		}
		c->table[i] = who[best];
		taken[best]++;
	}
	for (; i < GS_MAX_INST_MAX; i++)
		c->table[i] = GS_UNIT_FREE;
	if (c->pos >= m)
		c->pos = 0;
}

static void gs_reset(struct gs_card *c, const struct gs_sched_config *cfg)
{
	u8 *p = (u8 *)c;
	unsigned long i;

	for (i = 0; i < sizeof(*c); i++)
		p[i] = 0;
	c->cfg = *cfg;
	/* The last unit "was served", so the first slice is unit 0. */
	c->pos = cfg->max_inst - 1;
	c->shared_rr = GS_MAX_VGPUS - 1;
	c->high_rr = GS_MAX_VGPUS - 1;
	c->owner = cfg->policy == GS_POLICY_NATIVE ? GS_OWNER_ALL :
						     GS_OWNER_NONE;
	c->drainer = GS_OWNER_NONE;
	gs_rebuild(c);
}

int gs_card_init(struct gs_card *c, const struct gs_sched_config *cfg)
{
	struct gs_sched_config def;
	int rc;

	if (!cfg) {
		gs_config_default(&def);
		cfg = &def;
	}
	rc = gs_config_check(cfg);
	if (rc)
		return rc;
	gs_reset(c, cfg);
	return 0;
}

int gs_card_configure(struct gs_card *c, const struct gs_sched_config *cfg)
{
	int rc = gs_config_check(cfg);

	if (rc)
		return rc;
	if (c->nvgpus)
		return -GS_EBUSY;
	gs_reset(c, cfg);
	return 0;
}

/*
 * Would the card accept a vGPU of (quota, high), once vGPU skip (or -1)
 * is gone? Returns its units, or a negative error.
 */
static int gs_check_vgpu(const struct gs_card *c, int skip, u32 quota,
			 u32 high)
{
	u32 policy = c->cfg.policy;
	u32 qsum = c->quota_sum, used = c->units_used, units;

	if (quota > GS_QUOTA_MAX || quota % GS_QUOTA_STEP || high > 1)
		return -GS_EINVAL;
	if (high && policy == GS_POLICY_HYBRID)
		return -GS_EOPNOTSUPP;
	if (quota == 0 && (policy == GS_POLICY_FIXED ||
			   policy == GS_POLICY_WEIGHTED ||
			   policy == GS_POLICY_WEIGHTED_WEAK))
		return -GS_EINVAL;
	if (skip < 0 && c->nvgpus >= c->cfg.max_inst)
		return -GS_ENOSPC;
	units = gs_units(c, quota);
	if (gs_policy_by_quota(policy)) {
		if (skip >= 0) {
			qsum -= c->vgpu[skip].quota;
			used -= c->vgpu[skip].units;
		}
		if (qsum + quota > GS_QUOTA_MAX || used + units > c->cfg.max_inst)
			return -GS_ENOSPC;
	}
	return (int)units;
}

static void gs_account(struct gs_card *c, const struct gs_vgpu *v, bool add)
{
	u32 by_quota = gs_policy_by_quota(c->cfg.policy);

	if (add) {
		c->nvgpus++;
		c->nhigh += v->high;
		c->quota_sum += by_quota ? v->quota : 0;
		c->units_used += by_quota ? v->units : 0;
	} else {
		c->nvgpus--;
		c->nhigh -= v->high;
		c->quota_sum -= by_quota ? v->quota : 0;
		c->units_used -= by_quota ? v->units : 0;
	}
}

int gs_vgpu_add(struct gs_card *c, u32 quota, u32 high)
{
	struct gs_vgpu *v;
	int units = gs_check_vgpu(c, -1, quota, high);
	int id;

	if (units < 0)
		return units;
	for (id = 0; id < GS_MAX_VGPUS; id++)
		if (!c->vgpu[id].in_use)
			break;
	if (id == GS_MAX_VGPUS)
		return -GS_ENOSPC;
	v = &c->vgpu[id];
	v->in_use = 1;
	v->quota = (u8)quota;
	v->high = (u8)high;
	v->units = (u8)units;
	v->pending = 0;
	v->worked = 0;
	v->nprocs = 0;
	v->last_work_ns = 0;
	v->slices = 0;
	v->holding = 0;
	v->watches = 0;
	v->debt_ns = 0;
	v->credit_ns = 0;
	v->prepaid_ns = 0;
	v->last_drain_ns = 0;
	v->tail_ns = 0;
	v->overrun_ns = 0;
	v->granted_ns = 0;
	v->lapsed = 0;
	v->outran = 0;
	v->creditor = GS_UNIT_FREE;
	v->owed_ns = 0;
	gs_account(c, v, true);
	gs_rebuild(c);
	return id;
}

int gs_vgpu_update(struct gs_card *c, int id, u32 quota, u32 high)
{
	struct gs_vgpu *v;
	int units;

	if (!gs_valid_id(c, id))
		return -GS_ENOENT;
	units = gs_check_vgpu(c, id, quota, high);
	if (units < 0)
		return units;
	v = &c->vgpu[id];
	gs_account(c, v, false);
	v->quota = (u8)quota;
	v->high = (u8)high;
	v->units = (u8)units;
	gs_account(c, v, true);
	gs_rebuild(c);
	return 0;
}

int gs_vgpu_remove(struct gs_card *c, int id)
{
	struct gs_vgpu *v;
	int i;

	if (!gs_valid_id(c, id))
		return -GS_ENOENT;
	v = &c->vgpu[id];
	gs_account(c, v, false);
	v->in_use = 0;
	v->units = 0;
	v->nprocs = 0;
	v->pending = 0;
	v->holding = 0;
	/* The id may be reused at once: it must not inherit what is owed. */
	for (i = 0; i < GS_MAX_VGPUS; i++) {
		if (c->vgpu[i].creditor == id)
			c->vgpu[i].creditor = GS_UNIT_FREE;
		if (c->vgpu[i].victim == id)
			c->vgpu[i].victim = GS_UNIT_FREE;
	}
	/* ... nor the slice. */
	if (c->owner == id) {
		c->owner = GS_OWNER_NONE;
		c->vacated = 1;
	}
	/* Its tail went with its processes: nobody waits for it. */
	if (c->drainer == id) {
		c->drainer = GS_OWNER_NONE;
		c->drain_cut = 0;
		c->closed = 0;
	}
	gs_rebuild(c);
	return 0;
}

/*
 * A vGPU's first process arriving while the current slice idles in a unit
 * that is now the vGPU's (it had no process, or no vGPU owned the unit
 * yet when the slice began) takes the rest of that slice: otherwise the
 * unit passes idle, which cost two tenants started together 5-7 ms of
 * their first 100 ms (the schedule file adds a vGPU at its first
 * process, so the first to join began the card in a unit of nobody). Not
 * a slice whose owner was removed in it: a reused id must not inherit
 * it. Not under the work-conserving policies (3, 4, 6): there it took a
 * deep queue of 20 ms kernels past its bound (kmod/core/README.md). The
 * slice's start and end stay.
 */
int gs_vgpu_set_procs(struct gs_card *c, int id, u32 nprocs)
{
	struct gs_vgpu *v;
	bool takes;

	if (!gs_valid_id(c, id))
		return -GS_ENOENT;
	v = &c->vgpu[id];
	takes = !v->nprocs && nprocs && c->started && !c->vacated &&
		!gs_policy_skips_free(c->cfg.policy) &&
		c->owner == GS_OWNER_NONE && c->table[c->pos] == id;
	v->nprocs = nprocs;
	if (!takes)
		return 0;
	c->owner = id;
	c->idle_slices--;
	v->slices++;
	v->lapsed = 0;
	return 1;
}

int gs_vgpu_note_work(struct gs_card *c, int id, u64 now, bool pending)
{
	struct gs_vgpu *v;

	if (!gs_valid_id(c, id))
		return -GS_ENOENT;
	v = &c->vgpu[id];
	v->pending = pending ? 1 : 0;
	v->worked = 1;
	v->last_work_ns = now;
	return 0;
}

static bool gs_active(const struct gs_vgpu *v, u64 now, u64 reclaim_ns)
{
	if (!v->in_use || !v->nprocs)
		return false;
	if (v->pending)
		return true;
	if (!v->worked)
		return false;
	return now <= v->last_work_ns || now - v->last_work_ns < reclaim_ns;
}

bool gs_vgpu_active(const struct gs_card *c, int id, u64 now)
{
	return gs_valid_id(c, id) && gs_active(&c->vgpu[id], now,
					      c->cfg.reclaim_ns);
}

/*
 * The next active high-priority vGPU after *rr, or GS_OWNER_NONE. Active,
 * not only waiting: a high-priority service between two requests keeps
 * the card for the reclaim window, so that its next kernel finds an empty
 * engine rather than a low-priority neighbour's queue, which no cut can
 * take back (a GPU's compute preemption only takes turns with it). A
 * shorter reclaim window lends the gaps to the neighbours, at that price.
 */
static int gs_next_high(const struct gs_card *c, u64 now, u32 *rr)
{
	u32 i, id;

	for (i = 1; i <= GS_MAX_VGPUS; i++) {
		id = (*rr + i) % GS_MAX_VGPUS;
		if (c->vgpu[id].high &&
		    gs_active(&c->vgpu[id], now, c->cfg.reclaim_ns)) {
			*rr = id;
			return (int)id;
		}
	}
	return GS_OWNER_NONE;
}

static int gs_next_shared(const struct gs_card *c, u64 now, u32 *rr)
{
	u32 i, id;

	for (i = 1; i <= GS_MAX_VGPUS; i++) {
		id = (*rr + i) % GS_MAX_VGPUS;
		if (c->vgpu[id].quota == 0 &&
		    gs_active(&c->vgpu[id], now, c->cfg.reclaim_ns)) {
			*rr = id;
			return (int)id;
		}
	}
	return GS_OWNER_NONE;
}

/*
 * The owner of the next slice, from the positions in *pos, *shared_rr and
 * *high_rr, which it advances, and the vGPUs' debts, which it pays when
 * commit is set. Pure otherwise: gs_peek_next runs it on copies of the
 * positions, without commit (c is then only read).
 */
static int gs_pick(struct gs_card *c, u64 now, u32 *pos, u32 *shared_rr,
		   u32 *high_rr, bool commit)
{
	u32 policy = c->cfg.policy, m = c->cfg.max_inst;
	bool skip_free = gs_policy_skips_free(policy);
	bool skip_idle = gs_policy_skips_idle(policy);
	u32 step, p;
	u8 u;
	int id;

	if (policy == GS_POLICY_NATIVE)
		return GS_OWNER_ALL;
	if (c->nhigh && gs_policy_has_priority(policy)) {
		id = gs_next_high(c, now, high_rr);
		if (id >= 0) {
			/* Priority goes first, whatever it owes. */
			if (commit)
				c->vgpu[id].debt_ns = 0;
			return id;
		}
	}
	p = *pos;
	for (step = 0; step < m; step++) {
		p = p + 1 == m ? 0 : p + 1;
		u = c->table[p];
		if (u == GS_UNIT_FREE) {
			if (skip_free)
				continue;
			*pos = p;
			return GS_OWNER_NONE;
		}
		if (u == GS_UNIT_SHARED) {
			id = gs_next_shared(c, now, shared_rr);
			/* The quota-0 vGPUs pay their debts in shared units. */
			if (id >= 0 && gs_pays_debt(c, id, now, commit))
				continue;
			*pos = p;
			return id;
		}
		if (skip_idle && !gs_active(&c->vgpu[u], now, c->cfg.reclaim_ns))
			continue;
		if (c->vgpu[u].nprocs && gs_pays_debt(c, u, now, commit)) {
			id = gs_repaid(c, u, now, commit);
			if (id < 0)
				continue;
			*pos = p;
			return id;
		}
		*pos = p;
		/* Kept for a vGPU with no process: nobody runs, nobody gets it. */
		return c->vgpu[u].nprocs ? u : GS_OWNER_NONE;
	}
	/* Every unit skipped: one idle slice, and the period moves on. */
	*pos = *pos + 1 == m ? 0 : *pos + 1;
	return GS_OWNER_NONE;
}

/*
 * Starts the slice at c->slice_start, one slice long; a debtor's unit that
 * gs_pick gave to its victim is as long as is owed, and none of the
 * victim's own debt or prepayment is taken from it. Its owner was
 * granted a new slice: a late release of an earlier lapsed drain owes
 * nothing more. An owner that is the drainer takes its drain back into
 * its own slice.
 */
void gs_begin(struct gs_card *c, u64 now)
{
	struct gs_vgpu *v;

	c->gift_ns = 0;
	c->owner = gs_pick(c, now, &c->pos, &c->shared_rr, &c->high_rr, true);
	c->slice_len = c->gift_ns ? c->gift_ns : c->cfg.slice_ns;
	c->handovers++;
	c->vacated = 0;
	if (c->owner == GS_OWNER_NONE)
		c->idle_slices++;
	if (c->owner >= 0 && !c->gift_ns)
		gs_pay_rest(c, c->owner, now);
	if (c->owner >= 0 && !c->gift_ns && c->owner != c->drainer)
		gs_prepay(c, c->owner, c->slice_start);
	c->slice_end = c->slice_start + c->slice_len;
	if (c->owner < 0)
		return;
	v = &c->vgpu[c->owner];
	v->slices++;
	/*
	 * Its earlier drains are over: a late release owes nothing now. A
	 * tail that ran on this far is a long one (gs_vgpu_drained).
	 */
	if (v->lapsed) {
		v->outran = 1;
		v->outran_from = gs_lapse_start(v);
	}
	v->lapsed = 0;
	if (c->owner == c->drainer) {
		gs_drain_end(c, c->slice_start);
		v->holding = 1;
	}
}

/*
 * The current slice is over at now (now >= slice_end): begins the slice
 * covering now. A holding owner drains: behind the next owner, who may
 * launch at once, or, its tail long, alone (the drain is closed: the next
 * owner waits for it, gs_drain_closes). The next owner's slice is
 * provisionally a drain bound longer (gs_vgpu_drained moves its end
 * earlier); picked again, the holder keeps the card. A late caller skips
 * the slices it missed.
 */
static void gs_handover(struct gs_card *c, u64 now)
{
	u64 e = c->slice_end, slice = c->cfg.slice_ns, bound = 0, k;
	u64 s = c->slice_start;
	int old = c->owner;
	bool held = old >= 0 && c->vgpu[old].holding;

	if (held)
		bound = gs_bound_of(c, old, false);
	gs_slice_close(c, e);
	if (held && now < e + bound + slice) {
		c->slice_start = e;
		gs_begin(c, now);
		if (c->owner != old) {
			gs_drain_begin(c, old, s, e, false);
			c->slice_end = e + c->drain_bound + c->slice_len;
		}
		return;
	}
	if (held && gs_peek_next(c, now) != old) {
		/* So late that the drain lapsed unreleased long ago. */
		gs_drain_begin(c, old, s, e, false);
		gs_drain_lapse(c, e + c->drain_bound);
		e += c->drain_bound;
	}
	k = gs_div64(now - e, slice);
	c->missed_slices += k;
	c->slice_start = e + k * slice;
	gs_begin(c, now);
}

int gs_tick(struct gs_card *c, u64 now)
{
	u64 lapse;

	if (!c->started) {
		c->started = 1;
		c->slice_start = now;
		gs_begin(c, now);
		return c->owner;
	}
	for (;;) {
		lapse = c->drain_start + gs_drain_bound(c);
		/* It never said its work ran: the whole bound is its debt. */
		if (c->drainer >= 0 && now >= lapse)
			gs_drain_lapse(c, lapse);
		if (now < c->slice_end)
			return c->owner;
		gs_handover(c, now);
	}
}

/*
 * Does the slice's owner wait for a closed drain? Only while there is a
 * drainer: a closed flag left behind must never keep a card shut.
 */
bool gs_waits(const struct gs_card *c)
{
	return c->closed && c->drainer >= 0;
}

int gs_owner(const struct gs_card *c)
{
	return gs_waits(c) ? GS_OWNER_NONE : c->owner;
}

u64 gs_slice_end(const struct gs_card *c)
{
	return c->slice_end;
}

int gs_peek_next(const struct gs_card *c, u64 now)
{
	u32 pos = c->pos, shared_rr = c->shared_rr, high_rr = c->high_rr;

	/* Without commit gs_pick writes nothing through c. */
	return gs_pick((struct gs_card *)c, now, &pos, &shared_rr, &high_rr,
		       false);
}

bool gs_may_run(const struct gs_card *c, int id, u64 now)
{
	if (c->cfg.policy == GS_POLICY_NATIVE)
		return true;
	return c->started && id >= 0 && !gs_waits(c) && c->owner == id &&
	       now < c->slice_end;
}
