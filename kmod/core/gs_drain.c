// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * gpuslice scheduler core: draining, debt and priority cuts (README.md,
 * "Draining"). A holder's slice hands the card on at once when it ends
 * (gs_handover, gs_sched.c); here the drain that follows is waited for,
 * bounded, charged and released, a late release settles what the drain's
 * lapse left open, debt is repaid at the next grants (gs_pick and gs_begin
 * ask), and a high-priority vGPU cuts a slice short.
 */
#include "gs_sched.h"
#include "gs_sched_int.h"

/* The most debt a vGPU carries: a safety net, never reached in use. */
static u64 gs_debt_cap(const struct gs_card *c)
{
	return GS_DRAIN_MAX_NS + (u64)c->cfg.max_inst * c->cfg.slice_ns;
}

/* vGPU id owes ns more, less what it prepaid and did not use. */
static void gs_owe(struct gs_card *c, int id, u64 ns)
{
	struct gs_vgpu *v = &c->vgpu[id];
	u64 cap = gs_debt_cap(c), k = v->credit_ns < ns ? v->credit_ns : ns;

	v->credit_ns -= k;
	ns -= k;
	v->debt_ns = v->debt_ns + ns > cap ? cap : v->debt_ns + ns;
}

/*
 * vGPU id's work ran over ns past its slice's end: owed to its next
 * slices in full (repaid by gs_pays_debt and gs_pay_rest).
 */
static void gs_charge(struct gs_card *c, int id, u64 over)
{
	c->vgpu[id].overrun_ns += over;
	gs_owe(c, id, over);
}

/*
 * vGPU id's drain took over (0: none came): charged, less what its grant
 * prepaid; a prepayment it did not use is given back, against its debt
 * and then its next charges (it never lengthens a slice). drained: a
 * drain ended (or its slice was released in time), so the next grant
 * expects as much.
 */
void gs_settle(struct gs_card *c, int id, u64 over, bool drained)
{
	struct gs_vgpu *v = &c->vgpu[id];
	u64 pre = v->prepaid_ns, back;

	v->prepaid_ns = 0;
	if (drained)
		v->last_drain_ns = over;
	v->overrun_ns += over;
	if (over >= pre) {
		gs_owe(c, id, over - pre);
		return;
	}
	back = pre - over;
	if (back > v->debt_ns) {
		v->credit_ns += back - v->debt_ns;
		back = v->debt_ns;
	}
	v->debt_ns -= back;
}

/* Has a vGPU but id a lapsed drain not released yet (a long tail)? */
static bool gs_others_lapsed(const struct gs_card *c, int id)
{
	int i;

	for (i = 0; i < GS_MAX_VGPUS; i++)
		if (i != id && c->vgpu[i].in_use && c->vgpu[i].lapsed)
			return true;
	return false;
}

/*
 * vGPU id, granted a slice that another vGPU's follows, prepays the drain
 * it had last time: its slice is that much shorter, a quarter of a slice
 * left at least (gs_pay_rest took its debt first). Charged only after the
 * drain, a drain is repaid at the vGPU's next grant, so the card's first
 * period runs long by its drains and every later one starts as late: the
 * first 100 ms miss the shares by the debt outstanding at their end (4
 * points in TestEngineNoIdleGap). Past half a slice (which debt alone may
 * take), a drain longer than that is repaid as it comes, not a whole unit
 * at a time. Not within a period of a lapse, nor while another vGPU's
 * long tail is unreleased: shorter slices would grant that vGPU again
 * sooner, before its late release is charged (kmod/core/README.md,
 * "Prepay").
 */
void gs_prepay(struct gs_card *c, int id, u64 now)
{
	struct gs_vgpu *v = &c->vgpu[id];
	u64 e = v->last_drain_ns, least = c->cfg.slice_ns / 4;

	/* An earlier prepayment no drain settled (it kept the card). */
	if (v->prepaid_ns)
		gs_settle(c, id, 0, false);
	if (c->slice_len <= least)
		return;
	if (e > c->slice_len - least)
		e = c->slice_len - least;
	if (!e || now < c->prepay_from || gs_others_lapsed(c, id) ||
	    gs_peek_next(c, now + c->slice_len) == id)
		return;
	v->prepaid_ns = e;
	c->slice_len -= e;
}

/* Is any vGPU but id active at now (would another one take a slice)? */
static bool gs_others_active(const struct gs_card *c, int id, u64 now)
{
	int i;

	for (i = 0; i < GS_MAX_VGPUS; i++)
		if (i != id && gs_vgpu_active(c, i, now))
			return true;
	return false;
}

/*
 * Does vGPU id give up the unit it would be handed, to pay its debt? A
 * whole slice's worth of debt pays one unit, which then takes no time. A
 * work-conserving policy forgives the debt of a vGPU nobody else is
 * waiting behind: the card would idle instead.
 */
bool gs_pays_debt(struct gs_card *c, int id, u64 now, bool commit)
{
	struct gs_vgpu *v = &c->vgpu[id];

	if (v->debt_ns < c->cfg.slice_ns)
		return false;
	if (gs_policy_skips_free(c->cfg.policy) &&
	    !gs_others_active(c, id, now)) {
		if (commit)
			v->debt_ns = 0;
		return false;
	}
	if (commit)
		v->debt_ns -= c->cfg.slice_ns;
	return true;
}

/*
 * What vGPU id still owes under a slice shortens the slice it is granted
 * (at least half a slice is left), so that a debt is repaid as it comes,
 * not a whole unit at a time: the shares hold in every 100 ms. Forgiven
 * as gs_pays_debt forgives.
 */
void gs_pay_rest(struct gs_card *c, int id, u64 now)
{
	struct gs_vgpu *v = &c->vgpu[id];
	u64 pay = v->debt_ns, most = c->cfg.slice_ns / 2;

	if (!pay || pay >= c->cfg.slice_ns)
		return;
	if (gs_policy_skips_free(c->cfg.policy) &&
	    !gs_others_active(c, id, now)) {
		v->debt_ns = 0;
		return;
	}
	if (pay > most)
		pay = most;
	v->debt_ns -= pay;
	c->slice_len -= pay;
}

/* A slice's drain bound when the drain is open: one slice. */
static u64 gs_open_bound(const struct gs_card *c)
{
	return c->cfg.slice_ns < GS_DRAIN_MAX_NS ? c->cfg.slice_ns :
						  GS_DRAIN_MAX_NS;
}

bool gs_drain_closes(const struct gs_card *c, int id, bool cut)
{
	int next = c->owner;

	/* A high-priority owner waits for no tail, as after a cut. */
	if (cut || (next >= 0 && next != id && c->vgpu[next].high))
		return false;
	return c->vgpu[id].tail_ns > c->cfg.slice_ns / 2;
}

u64 gs_bound_of(const struct gs_card *c, int id, bool cut)
{
	u64 b = gs_open_bound(c);

	if (gs_drain_closes(c, id, cut)) {
		b += 2 * c->vgpu[id].tail_ns;
		return b < GS_DRAIN_MAX_NS ? b : GS_DRAIN_MAX_NS;
	}
	if (cut && b > GS_CUT_DRAIN_MAX_NS)
		b = GS_CUT_DRAIN_MAX_NS;
	return b;
}

u64 gs_drain_bound(const struct gs_card *c)
{
	if (c->drainer >= 0)
		return c->drain_bound;
	return c->owner >= 0 ? gs_bound_of(c, c->owner, false) :
			       gs_open_bound(c);
}

/*
 * vGPU id's drain took d, released: its tail, the decaying maximum of
 * its drains (an eighth lost a drain), says whether its next drain is
 * closed and how long it is waited for.
 */
static void gs_expect(struct gs_card *c, int id, u64 d)
{
	struct gs_vgpu *v = &c->vgpu[id];

	v->tail_ns -= v->tail_ns / 8;
	if (d > v->tail_ns)
		v->tail_ns = d;
}

/*
 * The drainer's work has run at t (or the card stops waiting for it): it
 * had the card since drain_start, and owes that time.
 */
void gs_drain_end(struct gs_card *c, u64 t)
{
	if (t < c->drain_start)
		t = c->drain_start;
	c->vgpu[c->drainer].granted_ns += t - c->drain_start;
	gs_settle(c, c->drainer, t - c->drain_start, true);
	c->drainer = GS_OWNER_NONE;
	c->drain_cut = 0;
	c->closed = 0;
}

/*
 * The card stops waiting for the drainer at t (its bound, or a new drain
 * beginning): it owes the time so far, and a late release may add the
 * rest of its real overrun, up to GS_DRAIN_MAX_NS past drain_start.
 */
void gs_drain_lapse(struct gs_card *c, u64 t)
{
	struct gs_vgpu *v = &c->vgpu[c->drainer];

	v->lapsed = 1;
	v->lapse_slice = c->drain_slice;
	v->lapse_from = t;
	v->lapse_cap = c->drain_start + GS_DRAIN_MAX_NS;
	v->victim = c->owner >= 0 && c->owner != c->drainer ?
		    (u8)c->owner : GS_UNIT_FREE;
	v->victim_start = c->slice_start;
	v->victim_end = c->slice_end;
	gs_drain_end(c, t);
	/*
	 * Its tail's length is not known: nothing to prepay for, and its
	 * next drain open until a release says how long it was (a holder
	 * that never releases never closes a drain).
	 */
	v->last_drain_ns = 0;
	v->tail_ns = 0;
	c->prepay_from = t + (u64)c->cfg.max_inst * c->cfg.slice_ns;
}

/* lapse_cap is GS_DRAIN_MAX_NS past the drain's start (gs_drain_lapse). */
u64 gs_lapse_start(const struct gs_vgpu *v)
{
	return v->lapse_cap - GS_DRAIN_MAX_NS;
}

/*
 * vGPU id's slice, begun at start, ended at t while it held: it drains
 * from t.
 */
void gs_drain_begin(struct gs_card *c, int id, u64 start, u64 t, bool cut)
{
	/* One drain at a time: an earlier one stops being waited for. */
	if (c->drainer >= 0)
		gs_drain_lapse(c, t);
	c->drainer = id;
	c->drain_slice = start;
	c->drain_start = t;
	c->drain_cut = cut ? 1 : 0;
	c->drain_bound = gs_bound_of(c, id, cut);
	c->closed = gs_drain_closes(c, id, cut) ? 1 : 0;
	c->closed_drains += c->closed;
	/* The hold was of the slice that ended; the drain carries it on. */
	c->vgpu[id].holding = 0;
}

/* The current slice ends at t: its owner had the card since its start. */
void gs_slice_close(struct gs_card *c, u64 t)
{
	struct gs_vgpu *v;

	if (c->owner < 0)
		return;
	v = &c->vgpu[c->owner];
	if (t > c->slice_start)
		v->granted_ns += t - c->slice_start;
	/* Released in its slice: nothing drains, nothing to prepay next. */
	if (!v->holding && c->owner != c->drainer)
		gs_settle(c, c->owner, 0, true);
}

/*
 * vGPU id's lapsed tail ran until end. The part of it that ran in the
 * slice it lapsed in, that slice having closed since, was taken from that
 * slice's owner (the victim, whose work queued behind it): owed to it, it
 * is repaid by the units id gives up for its debt (gs_repaid). A part in
 * the current slice lengthens that slice instead (gs_late_release); the
 * slices in between, if the tail outran more than one, are not repaid.
 */
static void gs_owe_victim(struct gs_card *c, int id, u64 end)
{
	struct gs_vgpu *v = &c->vgpu[id];
	u64 to = end < v->victim_end ? end : v->victim_end;

	if (v->victim == GS_UNIT_FREE || to <= v->lapse_from ||
	    (c->owner == v->victim && c->slice_start == v->victim_start))
		return;
	if (v->creditor != v->victim)
		v->owed_ns = 0;
	v->creditor = v->victim;
	v->owed_ns += to - v->lapse_from;
	if (v->owed_ns > v->debt_ns)
		v->owed_ns = v->debt_ns;
}

/*
 * vGPU id gives up a unit to pay its debt (gs_pays_debt took a slice of
 * it): the unit goes to the vGPU its lapsed tail took slice time from, if
 * that one is active, as a slice of what is owed to it (at most a slice;
 * c->gift_ns says how long). Returns that vGPU, or GS_OWNER_NONE: the
 * unit is skipped.
 */
int gs_repaid(struct gs_card *c, int id, u64 now, bool commit)
{
	struct gs_vgpu *v = &c->vgpu[id];
	u64 g = v->owed_ns < c->cfg.slice_ns ? v->owed_ns : c->cfg.slice_ns;
	int to = v->creditor;

	if (to == GS_UNIT_FREE || !g || !gs_vgpu_active(c, to, now) ||
	    c->vgpu[to].lapsed)
		return GS_OWNER_NONE;
	if (commit) {
		v->owed_ns -= g;
		/* Never more than it still owes in all. */
		if (v->owed_ns > v->debt_ns)
			v->owed_ns = v->debt_ns;
		c->gift_ns = g;
	}
	return to;
}

/*
 * A late release at now of vGPU id's lapsed drain, granted no slice
 * since: its work ran until now (at most GS_DRAIN_MAX_NS past its slice's
 * end): it owes the late part. The current slice's owner (or nobody, in
 * an idle slice) lost that part of its slice to it, the engine running
 * its work first: the current slice ends as much later. Returns true when
 * it moved the slice's end.
 */
static bool gs_late_release(struct gs_card *c, int id, u64 now)
{
	struct gs_vgpu *v = &c->vgpu[id];
	u64 end = now < v->lapse_cap ? now : v->lapse_cap, late, from;

	v->lapsed = 0;
	if (end <= v->lapse_from)
		return false;
	late = end - v->lapse_from;
	gs_expect(c, id, end - gs_lapse_start(v));
	v->granted_ns += late;
	gs_charge(c, id, late);
	gs_owe_victim(c, id, end);
	/* The current owner's work waited behind it: its slice is whole. */
	from = v->lapse_from > c->slice_start ? v->lapse_from : c->slice_start;
	if (c->owner != id && end > from && now < c->slice_end) {
		c->slice_end += end - from;
		return true;
	}
	return false;
}

int gs_vgpu_hold(struct gs_card *c, int id, bool holding)
{
	if (!gs_valid_id(c, id))
		return -GS_ENOENT;
	c->vgpu[id].holding = holding ? 1 : 0;
	return 0;
}

int gs_vgpu_watch(struct gs_card *c, int id, bool watches)
{
	if (!gs_valid_id(c, id))
		return -GS_ENOENT;
	c->vgpu[id].watches = watches ? 1 : 0;
	return 0;
}

bool gs_vgpu_drained(struct gs_card *c, int id, u64 now)
{
	u64 handovers = c->handovers, end;
	struct gs_vgpu *v;
	bool moved;

	if (!gs_valid_id(c, id))
		return false;
	v = &c->vgpu[id];
	if (!c->started) {
		v->holding = 0;
		return false;
	}
	/* A slice that ended unticked hands over first (id may drain). */
	gs_tick(c, now);
	/*
	 * Its tail outran its bound and it was granted again before this
	 * release: a tail that ran, at most, from that drain's start until
	 * now (this release may be of the later slice's work too). Its next
	 * drains are closed, long enough for it.
	 */
	if (v->outran) {
		v->outran = 0;
		end = now - v->outran_from;
		gs_expect(c, id, end < GS_DRAIN_MAX_NS ? end : GS_DRAIN_MAX_NS);
	}
	if (c->drainer == id) {
		gs_expect(c, id, now > c->drain_start ? now - c->drain_start : 0);
		gs_drain_end(c, now);
		/* The next owner's slice is whole after the drain. */
		end = now + c->slice_len;
		if (end < c->slice_end)
			c->slice_end = end;
		return true;
	}
	moved = c->owner != id && v->lapsed && gs_late_release(c, id, now);
	/* In its slice, or the card moved on already: nothing more owed. */
	v->holding = 0;
	return moved || c->handovers != handovers;
}

u64 gs_vgpu_granted_ns(const struct gs_card *c, int id, u64 now)
{
	const struct gs_vgpu *v;
	u64 g, end;

	if (!gs_valid_id(c, id))
		return 0;
	v = &c->vgpu[id];
	g = v->granted_ns;
	if (c->started && c->owner == id && now > c->slice_start) {
		end = now < c->slice_end ? now : c->slice_end;
		g += end - c->slice_start;
	}
	if (c->drainer == id && now > c->drain_start) {
		end = c->drain_start + gs_drain_bound(c);
		end = now < end ? now : end;
		g += end - c->drain_start;
	}
	return g;
}

u64 gs_vgpu_overrun_ns(const struct gs_card *c, int id)
{
	return gs_valid_id(c, id) ? c->vgpu[id].overrun_ns : 0;
}

/* Does a high-priority vGPU with a process have work waiting? */
static bool gs_high_waits(const struct gs_card *c)
{
	int i;

	for (i = 0; i < GS_MAX_VGPUS; i++) {
		const struct gs_vgpu *v = &c->vgpu[i];

		if (v->in_use && v->high && v->nprocs && v->pending)
			return true;
	}
	return false;
}

bool gs_preempt(struct gs_card *c, u64 now)
{
	const struct gs_vgpu *o;
	u64 from;
	int old = c->owner;

	if (!c->started || !c->nhigh || now >= c->slice_end ||
	    !gs_policy_has_priority(c->cfg.policy))
		return false;
	/*
	 * The page told the owner's processes they may run until slice_end:
	 * only a holder or processes that watch for the cut (and drain what
	 * they queued) give the slice up early. An owner still waiting for a
	 * closed drain was told nothing yet.
	 */
	if (old >= 0 && !gs_waits(c)) {
		o = &c->vgpu[old];
		if (o->high || !(o->holding || o->watches))
			return false;
	}
	if (!gs_high_waits(c))
		return false;
	/* A closed drain is cut: it is waited for no longer than a cut. */
	if (gs_waits(c)) {
		c->closed = 0;
		c->drain_cut = 1;
		if (c->drain_start + c->drain_bound > now + GS_CUT_DRAIN_MAX_NS)
			c->drain_bound = now + GS_CUT_DRAIN_MAX_NS -
					 c->drain_start;
	}
	/* The card is handed on now: the holder drains behind, briefly. */
	gs_slice_close(c, now);
	if (old >= 0 && c->vgpu[old].holding)
		gs_drain_begin(c, old, c->slice_start, now, true);
	c->slice_start = now;
	gs_begin(c, now);
	from = now;
	if (c->drainer >= 0 && c->drain_start + gs_drain_bound(c) > from)
		from = c->drain_start + gs_drain_bound(c);
	c->slice_end = from + c->slice_len;
	return true;
}

u64 gs_next_change(const struct gs_card *c)
{
	u64 lapse = c->drain_start + gs_drain_bound(c);

	if (c->drainer >= 0 && lapse < c->slice_end)
		return lapse;
	return c->slice_end;
}

int gs_drainer(const struct gs_card *c)
{
	return c->drainer;
}
