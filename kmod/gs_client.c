// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Client calls: a file attaches to its cgroup's vGPU on a card, charges and
 * uncharges memory against the vGPU's cap, and acquires compute slices.
 * Closing the file (exit and kill -9 included) undoes all of it.
 */
#include <linux/cgroup.h>
#include <linux/ktime.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "gs_kmod.h"

/* Charged to the opener's memcg: a container's opens count in its limit. */
struct gs_client *gs_client_new(void)
{
	struct gs_client *cl = kzalloc(sizeof(*cl), GFP_KERNEL_ACCOUNT);

	if (!cl)
		return NULL;
	cl->guard.magic = GPUSLICE_GUARD_MAGIC;
	cl->pid = get_pid(task_tgid(current));
	return cl;
}

/*
 * Recounts whether this file has work for its vGPU (acquired and not
 * released idle, or a thread waiting in ACQUIRE); card->lock held.
 * Returns true when the file's share of kv->npending changed.
 */
static bool gs_att_recount(struct gs_attach *att)
{
	bool pending = att->pending || att->nwaiting;

	if (pending == att->counted)
		return false;
	att->counted = pending;
	if (pending)
		att->kv->npending++;
	else
		att->kv->npending--;
	return true;
}

/*
 * Undoes one attachment: charges, process count, pending work, its slot
 * in the vGPU's files (a /proc reader may still see the file until a
 * grace period passed: it is freed after one).
 */
static void gs_detach(struct gs_attach *att)
{
	struct gs_kvgpu *kv = att->kv;
	struct gs_kcard *card = kv->card;

	mutex_lock(&card->mutex);
	xa_erase(&kv->files, att->slot);
	atomic64_sub(atomic64_xchg(&att->charged, 0), gs_used(kv));
	spin_lock_irq(&card->lock);
	gs_card_procs(card, kv, -1);
	att->pending = false;
	if (gs_att_recount(att))
		gs_card_work(card, kv, ktime_get_ns());
	/* Its contexts died with it: nothing of its work is left to wait for. */
	gs_card_unhold(card, att, ktime_get_ns());
	gs_card_acquirer(card, att, true, -1);
	gs_card_acquirer(card, att, false, -1);
	spin_unlock_irq(&card->lock);
	gs_card_retime(card);
	mutex_unlock(&card->mutex);
	gs_kvgpu_put(kv);
}

/* After a grace period: no /proc reader holds cl or its pid any more. */
static void gs_client_rcu_free(struct rcu_head *head)
{
	struct gs_client *cl = container_of(head, struct gs_client, rcu);

	put_pid(cl->pid);
	kfree(cl);
}

/* close: each card's lock in turn, never one global to the cards. */
void gs_client_free(struct gs_client *cl)
{
	int i;

	for (i = 0; i < GPUSLICE_MAX_CARDS; i++)
		if (cl->att[i].kv)
			gs_detach(&cl->att[i]);
	call_rcu(&cl->rcu, gs_client_rcu_free);
}

/*
 * The vGPU of current's cgroup or its nearest ancestor with one; under
 * card->mutex (stable) or RCU (the caller's own vGPU of the moment).
 */
struct gs_kvgpu *gs_find_vgpu(struct gs_kcard *card)
{
	struct gs_kvgpu *found = NULL, *kv;
	struct cgroup *cgrp;
	u64 id;
	int i;

	rcu_read_lock();
	for (cgrp = task_dfl_cgroup(current); cgrp && !found;
	     cgrp = cgroup_parent(cgrp)) {
		id = cgroup_id(cgrp);
		for (i = 0; i < GPUSLICE_MAX_VGPUS && !found; i++) {
			kv = rcu_dereference(card->vgpu[i]);
			if (kv && kv->cgroup_id == id)
				found = kv;
		}
	}
	rcu_read_unlock();
	return found;
}

static void gs_attach_reply(const struct gs_kvgpu *kv,
			    struct gpuslice_attach *arg)
{
	arg->id = kv->id;
	arg->mem_cap = READ_ONCE(kv->mem_cap);
	arg->quota = kv->quota;
	arg->priority = kv->priority;
	arg->mode = kv->mode;
	arg->policy = kv->card->core.cfg.policy;
}

/*
 * Takes a slot in kv's files (at most GPUSLICE_MAX_VGPU_FILES: -EUSERS
 * past it), charged to the caller's memcg; card->mutex held.
 */
static int gs_attach_slot(struct gs_client *cl, struct gs_attach *att,
			  struct gs_kvgpu *kv)
{
	int err = xa_alloc(&kv->files, &att->slot, cl,
			   XA_LIMIT(0, GPUSLICE_MAX_VGPU_FILES - 1),
			   GFP_KERNEL_ACCOUNT);

	return err == -EBUSY ? -EUSERS : err;
}

int gs_attach(struct gs_client *cl, struct gpuslice_attach *arg)
{
	struct gs_attach *att;
	struct gs_kcard *card;
	struct gs_kvgpu *kv;
	int err = 0;

	card = gs_card_lookup(arg->card, &err);
	if (!card)
		return err;
	/* The card's lock only: the vGPU set is stable, nothing else waits. */
	mutex_lock(&card->mutex);
	att = &cl->att[arg->card];
	kv = att->kv;
	if (kv && READ_ONCE(kv->dead)) {
		/* Other threads may still use the record: keep it, say so. */
		err = -ENODEV;
		goto out;
	}
	if (!kv) {
		kv = gs_find_vgpu(card);
		if (!kv) {
			err = -ENOENT;
			goto out;
		}
		err = gs_attach_slot(cl, att, kv);
		if (err)
			goto out;
		kref_get(&kv->ref);
		spin_lock_irq(&card->lock);
		gs_card_procs(card, kv, 1);
		spin_unlock_irq(&card->lock);
		gs_card_retime(card);
		/* Publish the attachment to lock-free callers (gs_attached). */
		smp_store_release(&att->kv, kv);
		/*
		 * The guard reads this without a lock: it only ever turns 1,
		 * and only once the attachment is whole.
		 */
		WRITE_ONCE(cl->guard.attached, 1);
	}
	gs_attach_reply(kv, arg);
out:
	mutex_unlock(&card->mutex);
	return err;
}

/* The attachment of cl to a card, or NULL with *err. */
static struct gs_attach *gs_attached(struct gs_client *cl, u32 index, int *err)
{
	struct gs_attach *att;

	if (index >= GPUSLICE_MAX_CARDS) {
		*err = -EINVAL;
		return NULL;
	}
	att = &cl->att[index];
	/* Pairs with gs_attach()'s release: kv and its counts are set. */
	if (!smp_load_acquire(&att->kv)) {
		*err = -ENOTCONN;
		return NULL;
	}
	return att;
}

static void gs_charge_reply(const struct gs_kvgpu *kv,
			    struct gpuslice_charge *arg)
{
	arg->mem_used = gs_vgpu_in_use(kv);
	arg->mem_cap = READ_ONCE(kv->mem_cap);
}

/*
 * The attachment a CHARGE, UNCHARGE or MEMINFO acts on, or NULL with *err;
 * live: the vGPU must not have been destroyed (uncharging one still works).
 */
static struct gs_attach *gs_mem_target(struct gs_client *cl,
				       const struct gpuslice_charge *arg,
				       bool live, int *err)
{
	struct gs_attach *att;

	if (arg->pad) {
		*err = -EINVAL;
		return NULL;
	}
	att = gs_attached(cl, arg->card, err);
	if (att && live && READ_ONCE(att->kv->dead)) {
		*err = -ENODEV;
		return NULL;
	}
	return att;
}

int gs_charge(struct gs_client *cl, struct gpuslice_charge *arg)
{
	struct gs_attach *att;
	struct gs_kvgpu *kv;
	s64 old, cap, unseen;
	int err;

	att = gs_mem_target(cl, arg, true, &err);
	if (!att)
		return err;
	kv = att->kv;
	cap = READ_ONCE(kv->mem_cap);
	unseen = atomic64_read(&kv->mem_unseen);
	old = atomic64_read(gs_used(kv));
	do {
		/* The driver's bytes nobody charged take their share first. */
		if (arg->bytes > cap || unseen > cap - (s64)arg->bytes ||
		    old > cap - (s64)arg->bytes - unseen) {
			gs_charge_reply(kv, arg);
			return -ENOMEM;
		}
	} while (!atomic64_try_cmpxchg(gs_used(kv), &old,
				       old + (s64)arg->bytes));
	atomic64_add(arg->bytes, &att->charged);
	gs_charge_reply(kv, arg);
	return 0;
}

/* Takes up to bytes of what att charged off its ledger; returns what it took. */
static u64 gs_att_uncharge(struct gs_attach *att, u64 bytes)
{
	s64 old, take;

	/* Only what this file charged: no process can free another's bytes. */
	old = atomic64_read(&att->charged);
	do {
		take = min_t(u64, bytes, old);
	} while (!atomic64_try_cmpxchg(&att->charged, &old, old - take));
	atomic64_sub(take, gs_used(att->kv));
	return take;
}

int gs_uncharge(struct gs_client *cl, struct gpuslice_charge *arg, u64 *taken)
{
	struct gs_attach *att;
	int err;

	att = gs_mem_target(cl, arg, false, &err);
	if (!att)
		return err;
	*taken = gs_att_uncharge(att, arg->bytes);
	gs_charge_reply(att->kv, arg);
	return 0;
}

/*
 * Undoes a CHARGE (charged true) or an UNCHARGE of bytes whose answer
 * could not be copied out: a call that fails changes nothing. The bytes
 * an UNCHARGE took go back uncapped: they are still allocated.
 */
void gs_charge_undo(struct gs_client *cl, u32 card, u64 bytes, bool charged)
{
	struct gs_attach *att;
	int err;

	att = gs_attached(cl, card, &err);
	if (!att)
		return;
	if (charged) {
		gs_att_uncharge(att, bytes);
		return;
	}
	atomic64_add(bytes, &att->charged);
	atomic64_add(bytes, gs_used(att->kv));
}

int gs_meminfo(struct gs_client *cl, struct gpuslice_charge *arg)
{
	struct gs_attach *att;
	int err;

	att = gs_mem_target(cl, arg, true, &err);
	if (!att)
		return err;
	gs_charge_reply(att->kv, arg);
	return 0;
}

/*
 * The wait condition of ACQUIRE: true when the vGPU may run now (slice end
 * in *end; with hold, att holds the card from then on) or was destroyed
 * (*err = -ENODEV). Advances the card itself, so a waiter never depends
 * on the timer firing on time.
 */
static bool gs_may_run_now(struct gs_attach *att, bool hold, u64 *end,
			   int *err)
{
	struct gs_kvgpu *kv = att->kv;
	struct gs_kcard *card = kv->card;
	unsigned long flags;
	bool ok = true;
	u64 now;

	spin_lock_irqsave(&card->lock, flags);
	now = ktime_get_ns();
	if (kv->dead) {
		*err = -ENODEV;
	} else if (!gs_card_gated(card)) {
		*end = U64_MAX;
	} else {
		gs_card_advance(card, now);
		ok = gs_may_run(&card->core, kv->id, now);
		*end = gs_slice_end(&card->core);
		if (ok && hold)
			gs_card_hold(card, att);
	}
	spin_unlock_irqrestore(&card->lock, flags);
	return ok;
}

/*
 * A thread of kv is about to block in ACQUIRE or WAIT: false (-EUSERS)
 * when GPUSLICE_MAX_VGPU_WAITERS of its threads already do, so that the
 * queues a handover wakes stay bounded whatever a tenant starts.
 */
static bool gs_waiter_get(struct gs_kvgpu *kv)
{
	return atomic_add_unless(&kv->nwaiters, 1, GPUSLICE_MAX_VGPU_WAITERS);
}

static void gs_waiter_put(struct gs_kvgpu *kv)
{
	atomic_dec(&kv->nwaiters);
}

/*
 * Sleeps on wq until condition, a signal (-ERESTARTSYS) or the deadline
 * (CLOCK_MONOTONIC ns, hrtimer-precise; 0: none) without condition
 * (-ETIME), as an exclusive waiter. A wake-up reaches GS_WAKE_FANOUT
 * sleepers, and each sleeper that leaves passes it on to as many more:
 * the timer's interrupt does constant work at a handover, however many
 * threads sleep, and a queue of n is woken in log2(n) steps, by the
 * woken threads themselves.
 */
#define gs_wait_chained(wq, condition, deadline)			\
({									\
	wait_queue_head_t *__wq = (wq);					\
	u64 __dl = (deadline);						\
	ktime_t __exp = ns_to_ktime(__dl);				\
	bool __expired = false;						\
	DEFINE_WAIT(__w);						\
	long __ret = 0;							\
									\
	for (;;) {							\
		prepare_to_wait_exclusive(__wq, &__w, TASK_INTERRUPTIBLE); \
		if (condition)						\
			break;						\
		if (__expired) {					\
			__ret = -ETIME;					\
			break;						\
		}							\
		if (signal_pending(current)) {				\
			__ret = -ERESTARTSYS;				\
			break;						\
		}							\
		if (!__dl)						\
			schedule();					\
		else							\
			__expired = !schedule_hrtimeout(&__exp,	\
							HRTIMER_MODE_ABS); \
	}								\
	finish_wait(__wq, &__w);					\
	wake_up_nr(__wq, GS_WAKE_FANOUT);				\
	__ret;								\
})

/*
 * Waits for the vGPU's slice on its own queue (a handover wakes the new
 * owner's); never before timeout_ns (0, or past what ktime holds: no
 * limit).
 */
static long gs_acquire_wait(struct gs_attach *att, bool hold, u64 timeout_ns,
			    u64 *end, int *err)
{
	u64 now = ktime_get_ns(), deadline = 0;
	long ret;

	if (timeout_ns && timeout_ns < (u64)KTIME_MAX - now)
		deadline = now + timeout_ns;

	ret = gs_wait_chained(&att->kv->acq_wq,
			      gs_may_run_now(att, hold, end, err), deadline);
	return ret == -ETIME ? -ETIMEDOUT : ret;
}

/* *was_pending: the file's acquired work before the call (to undo it). */
int gs_acquire(struct gs_client *cl, struct gpuslice_acquire *arg,
	       bool *was_pending)
{
	const u32 known = GPUSLICE_ACQUIRE_NONBLOCK | GPUSLICE_ACQUIRE_HOLD;
	bool hold = arg->flags & GPUSLICE_ACQUIRE_HOLD;
	struct gs_attach *att;
	struct gs_kcard *card;
	struct gs_kvgpu *kv;
	u64 start, end = 0;
	int err = 0;
	long ret = 0;

	if (arg->pad || arg->flags & ~known)
		return -EINVAL;
	att = gs_attached(cl, arg->card, &err);
	if (!att)
		return err;
	kv = att->kv;
	card = kv->card;
	start = ktime_get_ns();
	/* Waiting is work: the vGPU is pending while any thread waits. */
	spin_lock_irq(&card->lock);
	kv->acquires++;
	gs_card_acquirer(card, att, hold, 1);
	att->nwaiting++;
	gs_att_recount(att);
	gs_card_work(card, kv, start);
	/* A high-priority waiter takes the card now; a mere poll does not. */
	if (!kv->dead && !(arg->flags & GPUSLICE_ACQUIRE_NONBLOCK))
		gs_card_preempt(card, start);
	spin_unlock_irq(&card->lock);

	if (!gs_may_run_now(att, hold, &end, &err) && !err) {
		if (arg->flags & GPUSLICE_ACQUIRE_NONBLOCK) {
			ret = -EAGAIN;
		} else if (!gs_waiter_get(kv)) {
			ret = -EUSERS;
		} else {
			ret = gs_acquire_wait(att, hold, arg->timeout_ns, &end,
					      &err);
			gs_waiter_put(kv);
		}
	}

	/* Granted: the file has work until RELEASE_IDLE. Not: as before. */
	spin_lock_irq(&card->lock);
	att->nwaiting--;
	*was_pending = att->pending;
	if (!err && !ret)
		att->pending = true;
	if (gs_att_recount(att))
		gs_card_work(card, kv, ktime_get_ns());
	kv->wait_ns += ktime_get_ns() - start;
	spin_unlock_irq(&card->lock);

	if (err)
		return err;
	if (ret)
		return ret == -ERESTARTSYS ? -EINTR : ret;
	arg->slice_end_ns = end;
	arg->owner = end == U64_MAX ? GPUSLICE_OWNER_ALL : kv->id;
	return 0;
}

int gs_release(struct gs_client *cl, const struct gpuslice_release *arg)
{
	struct gs_attach *att;
	struct gs_kcard *card;
	int err;

	if ((arg->flags & ~(GPUSLICE_RELEASE_IDLE | GPUSLICE_RELEASE_REPORT)) ||
	    ((arg->flags & GPUSLICE_RELEASE_IDLE) &&
	     (arg->flags & GPUSLICE_RELEASE_REPORT)))
		return -EINVAL;
	att = gs_attached(cl, arg->card, &err);
	if (!att)
		return err;
	card = att->kv->card;
	spin_lock_irq(&card->lock);
	gs_busy_report(card, att->kv, arg->busy_ns, ktime_get_ns());
	if (arg->flags & GPUSLICE_RELEASE_REPORT) {
		spin_unlock_irq(&card->lock);
		return 0;
	}
	if (arg->flags & GPUSLICE_RELEASE_IDLE) {
		/* Only this file's acquired work: its waiters still wait. */
		att->pending = false;
		gs_att_recount(att);
		gs_card_work(card, att->kv, ktime_get_ns());
	}
	/* What it queued has run: a card waiting for it passes on now. */
	gs_card_unhold(card, att, ktime_get_ns());
	spin_unlock_irq(&card->lock);
	return 0;
}

/*
 * The condition of WAIT(e): over unless kv owns the card, now is before
 * the current slice's end and that end is at most e (an end an early
 * drain moved earlier is waited for; a cut, a new slice or an end moved
 * later returns). Not over: *until is that end. Only kv's own slices are
 * waited for, so a handover needs to wake only the old owner's sleepers.
 */
static bool gs_slice_over(struct gs_kvgpu *kv, u64 e, u64 *until, int *err)
{
	struct gs_kcard *card = kv->card;
	unsigned long flags;
	bool over = true;
	u64 end;

	spin_lock_irqsave(&card->lock, flags);
	end = gs_slice_end(&card->core);
	if (kv->dead) {
		*err = -ENODEV;
	} else if (gs_card_gated(card) && gs_owner(&card->core) == kv->id &&
		   ktime_get_ns() < end && end <= e) {
		over = false;
		*until = end;
	}
	spin_unlock_irqrestore(&card->lock, flags);
	return over;
}

int gs_wait(struct gs_client *cl, const struct gpuslice_wait *arg)
{
	struct gs_attach *att;
	struct gs_kvgpu *kv;
	u64 until, now_until;
	int err = 0;
	long ret;

	if (arg->flags)
		return -EINVAL;
	att = gs_attached(cl, arg->card, &err);
	if (!att)
		return err;
	kv = att->kv;
	if (gs_slice_over(kv, arg->slice_end_ns, &until, &err))
		return err;
	if (!gs_waiter_get(kv))
		return -EUSERS;
	/* Until the slice's end, which a drain may move earlier: then again. */
	do {
		ret = gs_wait_chained(&kv->wait_wq,
				      gs_slice_over(kv, arg->slice_end_ns,
						    &now_until, &err) ||
				      now_until != until, until);
		if (ret == -ERESTARTSYS)
			break;
	} while (!gs_slice_over(kv, arg->slice_end_ns, &until, &err));
	gs_waiter_put(kv);
	if (ret == -ERESTARTSYS)
		return -EINTR;
	return err;
}

/*
 * Undoes a granted ACQUIRE whose answer could not be copied out: the
 * file's work is as before (pending) and the slice it was granted is not
 * held, as if it had never been told it may run.
 */
void gs_acquire_undo(struct gs_client *cl, u32 card, bool pending)
{
	struct gs_attach *att;
	struct gs_kcard *c;
	int err;

	att = gs_attached(cl, card, &err);
	if (!att)
		return;
	c = att->kv->card;
	spin_lock_irq(&c->lock);
	att->pending = pending;
	if (gs_att_recount(att))
		gs_card_work(c, att->kv, ktime_get_ns());
	gs_card_unhold(c, att, ktime_get_ns());
	spin_unlock_irq(&c->lock);
}
