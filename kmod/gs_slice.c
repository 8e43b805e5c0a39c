// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * The scheduler core in the kernel: the hrtimer that drives a card's
 * slices, the schedule page, the per-vGPU wake-ups at a handover, and the
 * activity, holds and drains the client calls report.
 */
#include <linux/ktime.h>
#include <linux/lockdep.h>

#include "gs_kmod.h"

/* Compute is gated: the card runs compute vGPUs under a policy other than 0. */
bool gs_card_gated(const struct gs_kcard *card)
{
	return card->mode == GPUSLICE_MODE_COMPUTE &&
	       card->core.cfg.policy != GS_POLICY_NATIVE;
}

/* Rewrites the schedule page under its sequence count; card->lock held. */
void gs_page_publish(struct gs_kcard *card)
{
	struct gpuslice_sched_page *p = card->page;
	bool gated = gs_card_gated(card);

	/* Ungated: all may run, unless the card has no vGPU (none may). */
	s32 owner = card->nvgpus ? GPUSLICE_OWNER_ALL : GPUSLICE_OWNER_NONE;
	u64 end = card->nvgpus ? U64_MAX : 0;

	if (gated) {
		owner = gs_owner(&card->core);
		end = gs_slice_end(&card->core);
	}
	WRITE_ONCE(p->seq, p->seq + 1);
	/* Readers see the odd count before any field changes. */
	smp_wmb();
	WRITE_ONCE(p->owner, owner);
	WRITE_ONCE(p->slice_start_ns, card->core.slice_start);
	WRITE_ONCE(p->slice_end_ns, end);
	WRITE_ONCE(p->policy, card->core.cfg.policy);
	WRITE_ONCE(p->slice_ns, card->core.cfg.slice_ns);
	WRITE_ONCE(p->max_inst, card->core.cfg.max_inst);
	WRITE_ONCE(p->mode, card->mode);
	WRITE_ONCE(p->handovers, card->core.handovers);
	/* ... and every field before the even count that closes the update. */
	smp_wmb();
	WRITE_ONCE(p->seq, p->seq + 1);
}

/* Wakes one queue of vGPU id, if it names one; card->lock held. */
static void gs_wake_vgpu(struct gs_kcard *card, s32 id, bool acquirers)
{
	struct gs_kvgpu *kv;

	if (id < 0 || id >= GPUSLICE_MAX_VGPUS)
		return;
	kv = card->vgpu[id];
	/* The woken pass it on (gs_wait_chained): O(1) here. */
	if (kv)
		wake_up_nr(acquirers ? &kv->acq_wq : &kv->wait_wq,
			   GS_WAKE_FANOUT);
}

/*
 * The slice changed (a new one, a moved end, a new owner); card->lock
 * held. Only the threads it concerns look again: the WAIT sleepers of the
 * owner woken last (their slice is over or moved) and the ACQUIRE waiters
 * of the owner now (they may run): GS_WAKE_FANOUT threads of each, who
 * wake the others (gs_wait_chained), so this is O(1) whatever the number
 * of waiters on the card. Without force, only an owner change wakes.
 */
static void gs_card_wake(struct gs_kcard *card, bool force)
{
	s32 owner = gs_card_gated(card) ? gs_owner(&card->core) :
					  GPUSLICE_OWNER_ALL;

	if (!force && owner == card->woken)
		return;
	gs_wake_vgpu(card, card->woken, false);
	if (owner != card->woken)
		gs_wake_vgpu(card, owner, false);
	gs_wake_vgpu(card, owner, true);
	card->woken = owner;
}

/*
 * Moves the card to the slice covering now; card->lock held. Called by the
 * timer at each slice end and by ACQUIRE, so a late timer never delays a
 * waiter. Wakes the waiters concerned when a new slice begins, or when the
 * slice's owner may run at last (a closed drain lapsed).
 */
void gs_card_advance(struct gs_kcard *card, u64 now)
{
	u64 handovers = card->core.handovers;
	s32 owner = gs_owner(&card->core);

	if (!gs_card_gated(card))
		return;
	gs_tick(&card->core, now);
	if (card->core.handovers == handovers &&
	    gs_owner(&card->core) == owner)
		return;
	gs_page_publish(card);
	gs_card_wake(card, true);
}

/*
 * A file attached to (delta 1) or detached from (-1) kv; card->lock held.
 * Attaching is not work: only ACQUIRE and RELEASE report work.
 */
void gs_card_procs(struct gs_kcard *card, struct gs_kvgpu *kv, int delta)
{
	kv->nprocs += delta;
	if (kv->dead || kv->mode != GPUSLICE_MODE_COMPUTE)
		return;
	card->nattached += delta;
	if (gs_vgpu_set_procs(&card->core, kv->id, kv->nprocs) > 0)
		gs_card_kick(card);
}

/* Reports kv's work (pending or drained) at now to the core; card->lock held. */
void gs_card_work(struct gs_kcard *card, struct gs_kvgpu *kv, u64 now)
{
	if (kv->dead || kv->mode != GPUSLICE_MODE_COMPUTE)
		return;
	gs_vgpu_note_work(&card->core, kv->id, now, kv->npending > 0);
}

/*
 * The core began a slice off gs_tick's grid, moved the slice's end (a
 * drain ended early, a high-priority vGPU cut a slice short) or gave an
 * idle slice to a vGPU's first process; card->lock held. Republishes,
 * wakes the sleepers concerned and brings the timer forward to the next
 * change. hrtimer_start() does not wait for a running callback, so it is
 * safe under the lock the callback takes.
 */
void gs_card_kick(struct gs_kcard *card)
{
	gs_page_publish(card);
	gs_card_wake(card, true);
	if (card->ticking)
		hrtimer_start(&card->timer,
			      ns_to_ktime(gs_next_change(&card->core)),
			      HRTIMER_MODE_ABS);
}

/*
 * A vGPU may have started waiting at now: a waiting high-priority vGPU
 * ends an idle slice or one a low-priority vGPU holds at once (the holder
 * drains first); card->lock held. A slice nobody holds is kept to its
 * end: the page told its owner's processes they may run until then.
 */
void gs_card_preempt(struct gs_kcard *card, u64 now)
{
	if (!gs_card_gated(card) || !gs_preempt(&card->core, now))
		return;
	gs_tick(&card->core, now);
	gs_card_kick(card);
}

/*
 * att was granted a slice with ACQUIRE_HOLD: at the slice's end its vGPU
 * drains (the next owner launches at once, behind its tail, or after it
 * where its tails are long) until its RELEASE; card->lock held. A hold
 * is of one slice, known by its start: when the vGPU is granted a new
 * slice, the holds of earlier ones are forgotten, so that a stopped
 * process does not make its vGPU drain at every later slice.
 */
void gs_card_hold(struct gs_kcard *card, struct gs_attach *att)
{
	struct gs_kvgpu *kv = att->kv;
	u64 start = card->core.slice_start;

	if (kv->dead || kv->mode != GPUSLICE_MODE_COMPUTE ||
	    !gs_card_gated(card))
		return;
	if (kv->hold_start != start) {
		kv->hold_start = start;
		kv->nholding = 0;
	}
	if (!att->holding || att->hold_start != start) {
		att->holding = true;
		att->hold_start = start;
		kv->nholding++;
	}
	gs_vgpu_hold(&card->core, kv->id, true);
}

/*
 * att's work has run (RELEASE) or its file closed, at now; card->lock
 * held. The last holder of the vGPU's latest held slice tells the core,
 * even after the card moved on: as the drainer it ends the drain (the
 * time past the slice's end is owed, the new owner's slice is whole from
 * now), after its drain lapsed it owes the late part (a late release),
 * in its own slice nothing. A hold of an earlier slice ends nothing.
 */
/*
 * Is a hold of the slice that began at start one the core still counts
 * for vGPU id: of the current slice it owns, of the drain it is the
 * drainer of, or of its lapsed drain? An older one must not end a newer
 * drain. card->lock held.
 */
static bool gs_hold_live(const struct gs_kcard *card, int id, u64 start)
{
	const struct gs_card *c = &card->core;

	return (c->owner == id && c->slice_start == start) ||
	       (c->drainer == id && c->drain_slice == start) ||
	       (c->vgpu[id].lapsed && c->vgpu[id].lapse_slice == start);
}

void gs_card_unhold(struct gs_kcard *card, struct gs_attach *att, u64 now)
{
	struct gs_kvgpu *kv = att->kv;

	if (!att->holding)
		return;
	att->holding = false;
	if (kv->dead || att->hold_start != kv->hold_start)
		return;
	if (--kv->nholding || !gs_hold_live(card, kv->id, att->hold_start))
		return;
	if (gs_vgpu_drained(&card->core, kv->id, now))
		gs_card_kick(card);
}

/*
 * att acquires with (hold) or without ACQUIRE_HOLD (delta 1, once per
 * kind), or its file goes (delta -1); card->lock held. A vGPU whose files
 * all acquire with ACQUIRE_HOLD is the shim's, whose fencers watch for a
 * cut slice: the core may cut its slices before it holds them. One plain
 * client (it runs until the end ACQUIRE or the page told it) and its
 * slices are kept to their end unless held.
 */
void gs_card_acquirer(struct gs_kcard *card, struct gs_attach *att, bool hold,
		      int delta)
{
	struct gs_kvgpu *kv = att->kv;
	bool *seen = hold ? &att->holder : &att->plain;

	if (delta > 0 && *seen)
		return;
	if (delta < 0 && !*seen)
		return;
	*seen = delta > 0;
	if (hold)
		kv->nholders += delta;
	else
		kv->nplain += delta;
	if (!kv->dead && kv->mode == GPUSLICE_MODE_COMPUTE)
		gs_vgpu_watch(&card->core, kv->id,
			      kv->nholders && !kv->nplain);
}

/* The timer runs while the card is gated and a process may wait on it. */
static bool gs_card_ticks(const struct gs_kcard *card)
{
	return gs_card_gated(card) && card->nattached;
}

/*
 * At each change of the slice: O(1) work in the core and at most three
 * times GS_WAKE_FANOUT wake-ups (gs_card_wake). Its longest run and how
 * many ran GS_TIMER_SLOW_NS or longer are kept (logged when the card
 * goes): the kernel's "hrtimer: interrupt took" is the whole interrupt's,
 * these the card's own part.
 */
enum hrtimer_restart gs_card_timer(struct hrtimer *timer)
{
	struct gs_kcard *card = container_of(timer, struct gs_kcard, timer);
	enum hrtimer_restart ret = HRTIMER_NORESTART;
	u64 t0 = ktime_get_ns(), took;
	unsigned long flags;

	spin_lock_irqsave(&card->lock, flags);
	/*
	 * The card may have stopped being gated (its last vGPU went) before
	 * gs_card_retime() got the lock: stop here rather than re-arm on a
	 * slice end in the past.
	 */
	if (!gs_card_ticks(card))
		card->ticking = false;
	if (card->ticking) {
		gs_card_advance(card, ktime_get_ns());
		hrtimer_set_expires(timer,
				    ns_to_ktime(gs_next_change(&card->core)));
		ret = HRTIMER_RESTART;
	}
	took = ktime_get_ns() - t0;
	if (took > card->timer_max_ns)
		card->timer_max_ns = took;
	card->timer_runs++;
	if (took >= GS_TIMER_SLOW_NS)
		card->timer_slow++;
	spin_unlock_irqrestore(&card->lock, flags);
	return ret;
}

/*
 * Starts or stops the timer to match gs_card_ticks(), republishes the
 * page and wakes the owner's waiters if the owner changed (a vGPU came or
 * went). Under card->mutex, so a stop has finished before the next start.
 */
void gs_card_retime(struct gs_kcard *card)
{
	bool ticks, stop = false;

	lockdep_assert_held(&card->mutex);
	spin_lock_irq(&card->lock);
	ticks = gs_card_ticks(card);
	if (ticks && !card->ticking) {
		card->ticking = true;
		gs_card_advance(card, ktime_get_ns());
		hrtimer_start(&card->timer,
			      ns_to_ktime(gs_next_change(&card->core)),
			      HRTIMER_MODE_ABS);
	} else if (!ticks && card->ticking) {
		card->ticking = false;
		stop = true;
	}
	gs_page_publish(card);
	gs_card_wake(card, false);
	spin_unlock_irq(&card->lock);
	if (stop)
		hrtimer_cancel(&card->timer);
}
