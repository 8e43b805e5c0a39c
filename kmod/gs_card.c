// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Cards and vGPUs: the administrator's calls, the hrtimer that drives the
 * scheduler core, and the schedule page user space maps.
 */
#include <linux/cgroup.h>
#include <linux/err.h>
#include <linux/gfp.h>
#include <linux/ktime.h>
#include <linux/slab.h>

#include "gs_kcompat.h"
#include "gs_kmod.h"

struct gs_kcard *gs_cards[GPUSLICE_MAX_CARDS];

static bool gs_valid_mode(u32 mode)
{
	return mode == GPUSLICE_MODE_MEMORY || mode == GPUSLICE_MODE_COMPUTE;
}

/* The card at index, or NULL with *err: -EINVAL out of range, -ENODEV unset. */
struct gs_kcard *gs_card_lookup(u32 index, int *err)
{
	struct gs_kcard *card;

	if (index >= GPUSLICE_MAX_CARDS) {
		*err = -EINVAL;
		return NULL;
	}
	/* Pairs with gs_card_set()'s release: the card is initialised. */
	card = smp_load_acquire(&gs_cards[index]);
	if (!card)
		*err = -ENODEV;
	return card;
}

/* Compute is gated: the card runs compute vGPUs under a policy other than 0. */
bool gs_card_gated(const struct gs_kcard *card)
{
	return card->mode == GPUSLICE_MODE_COMPUTE &&
	       card->core.cfg.policy != GS_POLICY_NATIVE;
}

/* Rewrites the schedule page under its sequence count; card->lock held. */
static void gs_page_publish(struct gs_kcard *card)
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

/*
 * Moves the card to the slice covering now; card->lock held. Called by the
 * timer at each slice end and by ACQUIRE, so a late timer never delays a
 * waiter. Wakes the waiters when a new slice begins.
 */
void gs_card_advance(struct gs_kcard *card, u64 now)
{
	u64 handovers = card->core.handovers;

	if (!gs_card_gated(card))
		return;
	gs_tick(&card->core, now);
	if (card->core.handovers == handovers)
		return;
	gs_page_publish(card);
	wake_up_all(&card->wq);
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
	gs_vgpu_set_procs(&card->core, kv->id, kv->nprocs);
}

/* Reports kv's work (pending or drained) at now to the core; card->lock held. */
void gs_card_work(struct gs_kcard *card, struct gs_kvgpu *kv, u64 now)
{
	if (kv->dead || kv->mode != GPUSLICE_MODE_COMPUTE)
		return;
	gs_vgpu_note_work(&card->core, kv->id, now, kv->npending > 0);
}

/*
 * The core began a slice off gs_tick's grid or moved the slice's end (a
 * drain ended early, a high-priority vGPU cut a slice short); card->lock
 * held. Republishes, wakes every sleeper to look again and brings the
 * timer forward to the next change. hrtimer_start() does not wait for a
 * running callback, so it is safe under the lock the callback takes.
 */
void gs_card_kick(struct gs_kcard *card)
{
	gs_page_publish(card);
	wake_up_all(&card->wq);
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
 * att was granted a slice with ACQUIRE_HOLD: the card waits for its
 * RELEASE at the slice's end; card->lock held. A hold is of one slice
 * (known by its start): once the card moved on (the drain's bound ran
 * out), earlier holds lapse, so that a stopped process does not make the
 * card wait at every later slice of its vGPU.
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
 * held. The last holder of the current slice ends the vGPU's drain: the
 * card passes on now if it was waiting, and the time past the slice's
 * end is owed. A lapsed hold ends nothing.
 */
void gs_card_unhold(struct gs_kcard *card, struct gs_attach *att, u64 now)
{
	struct gs_kvgpu *kv = att->kv;

	if (!att->holding)
		return;
	att->holding = false;
	if (kv->dead || att->hold_start != kv->hold_start ||
	    att->hold_start != card->core.slice_start)
		return;
	if (--kv->nholding)
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

static enum hrtimer_restart gs_card_timer(struct hrtimer *timer)
{
	struct gs_kcard *card = container_of(timer, struct gs_kcard, timer);
	enum hrtimer_restart ret = HRTIMER_NORESTART;
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
	spin_unlock_irqrestore(&card->lock, flags);
	return ret;
}

/*
 * Starts or stops the timer to match gs_card_ticks(). Only called under
 * gs_mutex, so a stop has finished before the next start.
 */
void gs_card_retime(struct gs_kcard *card)
{
	bool ticks, stop = false;

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
	spin_unlock_irq(&card->lock);
	if (stop)
		hrtimer_cancel(&card->timer);
}

static void gs_card_config(const struct gpuslice_card *arg,
			   struct gs_sched_config *cfg)
{
	gs_config_default(cfg);
	cfg->policy = arg->policy;
	cfg->max_inst = arg->max_inst;
	if (arg->slice_ns)
		cfg->slice_ns = arg->slice_ns;
	if (arg->reclaim_ns)
		cfg->reclaim_ns = arg->reclaim_ns;
}

static struct gs_kcard *gs_card_alloc(u32 index,
				      const struct gs_sched_config *cfg,
				      int *err)
{
	struct gs_kcard *card = kzalloc(sizeof(*card), GFP_KERNEL);

	*err = -ENOMEM;
	if (!card)
		return NULL;
	card->page = (void *)get_zeroed_page(GFP_KERNEL);
	if (!card->page)
		goto fail;
	*err = gs_card_init(&card->core, cfg);
	if (*err)
		goto fail;
	card->index = index;
	spin_lock_init(&card->lock);
	init_waitqueue_head(&card->wq);
	gs_hrtimer_setup(&card->timer, gs_card_timer, CLOCK_MONOTONIC,
			 HRTIMER_MODE_ABS);
	card->page->abi_version = GPUSLICE_ABI_VERSION;
	gs_page_publish(card);
	return card;
fail:
	free_page((unsigned long)card->page);
	kfree(card);
	return NULL;
}

int gs_card_set(const struct gpuslice_card *arg)
{
	struct gs_sched_config cfg;
	struct gs_kcard *card;
	int err = 0;

	if (arg->pad || arg->mode || arg->nvgpus)
		return -EINVAL;
	if (arg->card >= GPUSLICE_MAX_CARDS)
		return -EINVAL;
	gs_card_config(arg, &cfg);
	err = gs_config_check(&cfg);
	if (err)
		return err;

	mutex_lock(&gs_mutex);
	card = gs_cards[arg->card];
	if (!card) {
		card = gs_card_alloc(arg->card, &cfg, &err);
		if (card) /* lock-free lookups see it fully initialised */
			smp_store_release(&gs_cards[arg->card], card);
		goto out;
	}
	if (!memcmp(&cfg, &card->core.cfg, sizeof(cfg)))
		goto out;
	if (card->nvgpus) {
		err = -EBUSY;
		goto out;
	}
	spin_lock_irq(&card->lock);
	err = gs_card_configure(&card->core, &cfg);
	gs_page_publish(card);
	spin_unlock_irq(&card->lock);
out:
	mutex_unlock(&gs_mutex);
	return err;
}

int gs_card_get(struct gpuslice_card *arg)
{
	struct gs_kcard *card;
	int err = 0;

	if (arg->pad)
		return -EINVAL;
	mutex_lock(&gs_mutex);
	card = gs_card_lookup(arg->card, &err);
	if (card) {
		arg->policy = card->core.cfg.policy;
		arg->max_inst = card->core.cfg.max_inst;
		arg->slice_ns = card->core.cfg.slice_ns;
		arg->reclaim_ns = card->core.cfg.reclaim_ns;
		arg->mode = card->mode;
		arg->nvgpus = card->nvgpus;
	}
	mutex_unlock(&gs_mutex);
	return err;
}

/* Checks a create/update request that the core does not check. */
static int gs_vgpu_check(const struct gpuslice_vgpu *arg)
{
	if (arg->pad || !arg->mem_cap || arg->mem_cap > S64_MAX ||
	    !arg->cgroup_id || !gs_valid_mode(arg->mode))
		return -EINVAL;
	/* A memory vGPU is never scheduled: a quota or priority is a mistake. */
	if (arg->mode == GPUSLICE_MODE_MEMORY && (arg->quota || arg->priority))
		return -EINVAL;
	if (arg->quota > GS_QUOTA_MAX || arg->quota % GS_QUOTA_STEP ||
	    arg->priority > 1)
		return -EINVAL;
	return 0;
}

static int gs_memory_slot(const struct gs_kcard *card)
{
	u32 i;

	if (card->nvgpus >= card->core.cfg.max_inst)
		return -ENOSPC;
	for (i = 0; i < GPUSLICE_MAX_VGPUS; i++)
		if (!card->vgpu[i])
			return i;
	return -ENOSPC;
}

/* Adds kv to the card (gs_mutex held): its id, or a negative errno. */
static int gs_card_add(struct gs_kcard *card, struct gs_kvgpu *kv)
{
	int id;

	spin_lock_irq(&card->lock);
	if (kv->mode == GPUSLICE_MODE_COMPUTE)
		id = gs_vgpu_add(&card->core, kv->quota, kv->priority);
	else
		id = gs_memory_slot(card);
	if (id >= 0) {
		kv->id = id;
		card->vgpu[id] = kv;
		card->nvgpus++;
		card->mode = kv->mode;
	}
	spin_unlock_irq(&card->lock);
	return id;
}

int gs_vgpu_create(struct gpuslice_vgpu *arg)
{
	struct gs_kcard *card;
	struct gs_kvgpu *kv;
	int err, i;

	err = gs_vgpu_check(arg);
	if (err)
		return err;
	err = gs_cgroup_exists(arg->cgroup_id);
	if (err)
		return err;
	kv = kzalloc(sizeof(*kv), GFP_KERNEL);
	if (!kv)
		return -ENOMEM;
	kref_init(&kv->ref);
	kv->cgroup_id = arg->cgroup_id;
	kv->mode = arg->mode;
	kv->quota = arg->quota;
	kv->priority = arg->priority;
	kv->mem_cap = arg->mem_cap;
	atomic64_set(&kv->mem_used, 0);

	mutex_lock(&gs_mutex);
	card = gs_card_lookup(arg->card, &err);
	if (!card)
		goto fail;
	err = -EXDEV;
	if (card->mode != GPUSLICE_MODE_NONE && card->mode != arg->mode)
		goto fail;
	err = -EEXIST;
	for (i = 0; i < GPUSLICE_MAX_VGPUS; i++)
		if (card->vgpu[i] && card->vgpu[i]->cgroup_id == arg->cgroup_id)
			goto fail;
	kv->card = card;
	err = gs_card_add(card, kv);
	if (err < 0)
		goto fail;
	arg->id = err;
	gs_card_retime(card);
	mutex_unlock(&gs_mutex);
	return 0;
fail:
	mutex_unlock(&gs_mutex);
	kfree(kv);
	return err;
}

/* The live vGPU card/id names (gs_mutex held), or NULL with *err. */
struct gs_kvgpu *gs_vgpu_lookup(u32 index, u32 id, int *err)
{
	struct gs_kcard *card = gs_card_lookup(index, err);

	if (!card)
		return NULL;
	if (id >= GPUSLICE_MAX_VGPUS || !card->vgpu[id]) {
		*err = -ENOENT;
		return NULL;
	}
	return card->vgpu[id];
}

int gs_vgpu_update_spec(const struct gpuslice_vgpu *arg)
{
	struct gs_kvgpu *kv;
	int err;

	err = gs_vgpu_check(arg);
	if (err)
		return err;
	mutex_lock(&gs_mutex);
	kv = gs_vgpu_lookup(arg->card, arg->id, &err);
	if (!kv)
		goto out;
	err = -EINVAL;
	if (kv->cgroup_id != arg->cgroup_id || kv->mode != arg->mode)
		goto out;
	err = 0;
	if (kv->mode == GPUSLICE_MODE_COMPUTE) {
		spin_lock_irq(&kv->card->lock);
		err = gs_vgpu_update(&kv->card->core, kv->id, arg->quota,
				     arg->priority);
		spin_unlock_irq(&kv->card->lock);
	}
	if (!err) {
		kv->quota = arg->quota;
		kv->priority = arg->priority;
		WRITE_ONCE(kv->mem_cap, arg->mem_cap);
	}
out:
	mutex_unlock(&gs_mutex);
	return err;
}

static void gs_kvgpu_free(struct kref *ref)
{
	kfree(container_of(ref, struct gs_kvgpu, ref));
}

void gs_kvgpu_put(struct gs_kvgpu *kv)
{
	kref_put(&kv->ref, gs_kvgpu_free);
}

/* Takes kv off its card (gs_mutex held); attached files keep the record. */
static void gs_card_remove(struct gs_kcard *card, struct gs_kvgpu *kv)
{
	spin_lock_irq(&card->lock);
	if (kv->mode == GPUSLICE_MODE_COMPUTE)
		gs_vgpu_remove(&card->core, kv->id);
	card->vgpu[kv->id] = NULL;
	if (kv->mode == GPUSLICE_MODE_COMPUTE)
		card->nattached -= kv->nprocs;
	kv->dead = true;
	if (!--card->nvgpus)
		card->mode = GPUSLICE_MODE_NONE;
	spin_unlock_irq(&card->lock);
	/* Waiters of ACQUIRE see dead and leave with -ENODEV. */
	wake_up_all(&card->wq);
	gs_card_retime(card);
}

int gs_vgpu_destroy(const struct gpuslice_vgpu *arg)
{
	struct gs_kvgpu *kv;
	int err;

	if (arg->pad)
		return -EINVAL;
	mutex_lock(&gs_mutex);
	kv = gs_vgpu_lookup(arg->card, arg->id, &err);
	if (kv)
		gs_card_remove(kv->card, kv);
	mutex_unlock(&gs_mutex);
	if (!kv)
		return err;
	gs_kvgpu_put(kv);
	return 0;
}

void gs_vgpu_spec(const struct gs_kvgpu *kv, struct gpuslice_vgpu *spec)
{
	spec->card = kv->card->index;
	spec->id = kv->id;
	spec->cgroup_id = kv->cgroup_id;
	spec->mem_cap = READ_ONCE(kv->mem_cap);
	spec->quota = kv->quota;
	spec->priority = kv->priority;
	spec->mode = kv->mode;
	spec->pad = 0;
}

int gs_vgpu_stats(struct gpuslice_vgpu_stats *arg)
{
	struct gs_kvgpu *kv;
	int err;

	if (arg->pad)
		return -EINVAL;
	mutex_lock(&gs_mutex);
	kv = gs_vgpu_lookup(arg->card, arg->id, &err);
	if (kv) {
		gs_vgpu_spec(kv, &arg->spec);
		arg->mem_used = atomic64_read(&kv->mem_used);
		spin_lock_irq(&kv->card->lock);
		arg->busy_ns = kv->busy_ns;
		arg->wait_ns = kv->wait_ns;
		arg->acquires = kv->acquires;
		arg->nprocs = kv->nprocs;
		arg->slices = kv->mode == GPUSLICE_MODE_COMPUTE ?
			      kv->card->core.vgpu[kv->id].slices : 0;
		spin_unlock_irq(&kv->card->lock);
	}
	mutex_unlock(&gs_mutex);
	return kv ? 0 : err;
}

/* Module exit: no file is open, so each vGPU's only reference is its card's. */
void gs_cards_free(void)
{
	struct gs_kcard *card;
	int i, j;

	for (i = 0; i < GPUSLICE_MAX_CARDS; i++) {
		card = gs_cards[i];
		if (!card)
			continue;
		card->ticking = false;
		hrtimer_cancel(&card->timer);
		for (j = 0; j < GPUSLICE_MAX_VGPUS; j++)
			if (card->vgpu[j])
				gs_kvgpu_put(card->vgpu[j]);
		free_page((unsigned long)card->page);
		kfree(card);
		gs_cards[i] = NULL;
	}
}
