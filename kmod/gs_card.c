// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Cards and vGPUs: the administrator's calls and the statistics; the
 * hrtimer, the page and the wake-ups are gs_slice.c's.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cgroup.h>
#include <linux/err.h>
#include <linux/gfp.h>
#include <linux/ktime.h>
#include <linux/lockdep.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>

#include "gs_kcompat.h"
#include "gs_kmod.h"

struct gs_kcard *gs_cards[GPUSLICE_MAX_CARDS];
/* Serialises the creation of cards, and nothing else (gs_kmod.h). */
static DEFINE_MUTEX(gs_cards_mutex);

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
	mutex_init(&card->mutex);
	spin_lock_init(&card->lock);
	spin_lock_init(&card->ledger_lock);
	INIT_LIST_HEAD(&card->ledgers);
	seqcount_init(&card->cfg_seq);
	card->woken = GPUSLICE_OWNER_NONE;
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

	mutex_lock(&gs_cards_mutex);
	card = gs_cards[arg->card];
	if (!card) {
		card = gs_card_alloc(arg->card, &cfg, &err);
		if (card) /* lock-free lookups see it fully initialised */
			smp_store_release(&gs_cards[arg->card], card);
		mutex_unlock(&gs_cards_mutex);
		return err;
	}
	mutex_unlock(&gs_cards_mutex);

	mutex_lock(&card->mutex);
	if (!memcmp(&cfg, &card->core.cfg, sizeof(cfg)))
		goto out;
	if (card->nvgpus) {
		err = -EBUSY;
		goto out;
	}
	spin_lock_irq(&card->lock);
	write_seqcount_begin(&card->cfg_seq);
	err = gs_card_configure(&card->core, &cfg);
	write_seqcount_end(&card->cfg_seq);
	gs_page_publish(card);
	spin_unlock_irq(&card->lock);
out:
	mutex_unlock(&card->mutex);
	return err;
}

int gs_card_get(struct gpuslice_card *arg)
{
	struct gs_kcard *card;
	int err = 0;

	unsigned int seq;

	if (arg->pad)
		return -EINVAL;
	card = gs_card_lookup(arg->card, &err);
	if (!card)
		return err;
	/* Lock-free: no tenant can delay the agent's look at a card. */
	do {
		seq = read_seqcount_begin(&card->cfg_seq);
		arg->policy = READ_ONCE(card->core.cfg.policy);
		arg->max_inst = READ_ONCE(card->core.cfg.max_inst);
		arg->slice_ns = READ_ONCE(card->core.cfg.slice_ns);
		arg->reclaim_ns = READ_ONCE(card->core.cfg.reclaim_ns);
		arg->mode = READ_ONCE(card->mode);
		arg->nvgpus = READ_ONCE(card->nvgpus);
	} while (read_seqcount_retry(&card->cfg_seq, seq));
	return 0;
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

/* Adds kv to the card (card->mutex held): its id, or a negative errno. */
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
		/* RCU readers see kv initialised. */
		rcu_assign_pointer(card->vgpu[id], kv);
		write_seqcount_begin(&card->cfg_seq);
		card->nvgpus++;
		card->mode = kv->mode;
		write_seqcount_end(&card->cfg_seq);
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
	xa_init_flags(&kv->files, XA_FLAGS_ALLOC);
	init_waitqueue_head(&kv->acq_wq);
	init_waitqueue_head(&kv->wait_wq);
	kv->cgroup_id = arg->cgroup_id;
	kv->mode = arg->mode;
	kv->quota = arg->quota;
	kv->priority = arg->priority;
	kv->mem_cap = arg->mem_cap;
	kv->created_ns = ktime_get_ns();

	card = gs_card_lookup(arg->card, &err);
	if (!card)
		goto free;
	mutex_lock(&card->mutex);
	err = -EXDEV;
	if (card->mode != GPUSLICE_MODE_NONE && card->mode != arg->mode)
		goto fail;
	err = -EEXIST;
	for (i = 0; i < GPUSLICE_MAX_VGPUS; i++)
		if (card->vgpu[i] && card->vgpu[i]->cgroup_id == arg->cgroup_id)
			goto fail;
	kv->card = card;
	/* A destroyed predecessor's bytes still count (gs_ledger.c). */
	kv->ledger = gs_ledger_get(card, kv->cgroup_id);
	err = -ENOMEM;
	if (!kv->ledger)
		goto fail;
	err = gs_card_add(card, kv);
	if (err < 0)
		goto fail;
	arg->id = err;
	gs_card_retime(card);
	mutex_unlock(&card->mutex);
	return 0;
fail:
	mutex_unlock(&card->mutex);
	if (kv->ledger)
		gs_ledger_put(kv->ledger);
free:
	kfree(kv);
	return err;
}

/*
 * The live vGPU card/id names on card (card->mutex or card->lock held, or
 * under RCU), or NULL with *err.
 */
static struct gs_kvgpu *gs_vgpu_lookup(struct gs_kcard *card, u32 id,
				       int *err)
{
	struct gs_kvgpu *kv = NULL;

	if (id < GPUSLICE_MAX_VGPUS)
		kv = rcu_dereference_check(card->vgpu[id],
					   lockdep_is_held(&card->mutex) ||
					   lockdep_is_held(&card->lock));
	if (!kv)
		*err = -ENOENT;
	return kv;
}

/*
 * The vGPU card/id names if the caller may see it (under RCU), or NULL
 * with *err. Without admin (CAP_SYS_ADMIN) only the caller's own vGPU is
 * seen: any other gets -ENOENT, as one that does not exist, so that the
 * answer tells nothing of the card's other tenants.
 */
struct gs_kvgpu *gs_vgpu_visible(u32 index, u32 id, bool admin, int *err)
{
	struct gs_kcard *card = gs_card_lookup(index, err);
	struct gs_kvgpu *kv;

	if (!card)
		return NULL;
	kv = gs_vgpu_lookup(card, id, err);
	if (kv && !admin && gs_find_vgpu(card) != kv) {
		*err = -ENOENT;
		return NULL;
	}
	return kv;
}

/* The card of an admin call on a vGPU, locked (card->mutex), or NULL. */
static struct gs_kcard *gs_card_lock(u32 index, int *err)
{
	struct gs_kcard *card = gs_card_lookup(index, err);

	if (card)
		mutex_lock(&card->mutex);
	return card;
}

int gs_vgpu_update_spec(const struct gpuslice_vgpu *arg)
{
	struct gs_kcard *card;
	struct gs_kvgpu *kv;
	int err;

	err = gs_vgpu_check(arg);
	if (err)
		return err;
	card = gs_card_lock(arg->card, &err);
	if (!card)
		return err;
	kv = gs_vgpu_lookup(card, arg->id, &err);
	if (!kv)
		goto out;
	err = -EINVAL;
	if (kv->cgroup_id != arg->cgroup_id || kv->mode != arg->mode)
		goto out;
	err = 0;
	spin_lock_irq(&card->lock);
	if (kv->mode == GPUSLICE_MODE_COMPUTE)
		err = gs_vgpu_update(&card->core, kv->id, arg->quota,
				     arg->priority);
	if (!err) {
		kv->quota = arg->quota;
		kv->priority = arg->priority;
		WRITE_ONCE(kv->mem_cap, arg->mem_cap);
	}
	spin_unlock_irq(&card->lock);
out:
	mutex_unlock(&card->mutex);
	return err;
}

/* The last file detached: no /proc reader can reach it after a grace period. */
static void gs_kvgpu_free(struct kref *ref)
{
	struct gs_kvgpu *kv = container_of(ref, struct gs_kvgpu, ref);

	xa_destroy(&kv->files);
	gs_ledger_put(kv->ledger);
	kfree_rcu(kv, rcu);
}

void gs_kvgpu_put(struct gs_kvgpu *kv)
{
	kref_put(&kv->ref, gs_kvgpu_free);
}

/* Takes kv off its card (card->mutex held); attached files keep the record. */
static void gs_card_remove(struct gs_kcard *card, struct gs_kvgpu *kv)
{
	spin_lock_irq(&card->lock);
	if (kv->mode == GPUSLICE_MODE_COMPUTE)
		gs_vgpu_remove(&card->core, kv->id);
	RCU_INIT_POINTER(card->vgpu[kv->id], NULL);
	if (kv->mode == GPUSLICE_MODE_COMPUTE)
		card->nattached -= kv->nprocs;
	kv->dead = true;
	write_seqcount_begin(&card->cfg_seq);
	if (!--card->nvgpus)
		card->mode = GPUSLICE_MODE_NONE;
	write_seqcount_end(&card->cfg_seq);
	spin_unlock_irq(&card->lock);
	/* Its waiters of ACQUIRE and WAIT see dead and leave with -ENODEV. */
	wake_up_all(&kv->acq_wq);
	wake_up_all(&kv->wait_wq);
	gs_card_retime(card);
}

int gs_vgpu_destroy(const struct gpuslice_vgpu *arg)
{
	struct gs_kcard *card;
	struct gs_kvgpu *kv;
	int err;

	if (arg->pad)
		return -EINVAL;
	card = gs_card_lock(arg->card, &err);
	if (!card)
		return err;
	kv = gs_vgpu_lookup(card, arg->id, &err);
	if (kv)
		gs_card_remove(card, kv);
	mutex_unlock(&card->mutex);
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

/* admin: the caller has CAP_SYS_ADMIN (else its own vGPU only). */
int gs_vgpu_stats(struct gpuslice_vgpu_stats *arg, bool admin)
{
	struct gs_kvgpu *kv;
	int err = 0;

	if (arg->pad)
		return -EINVAL;
	rcu_read_lock();
	kv = gs_vgpu_visible(arg->card, arg->id, admin, &err);
	if (kv) {
		arg->mem_used = atomic64_read(gs_used(kv));
		/* card->lock: the counters; held for O(1) work by anyone. */
		spin_lock_irq(&kv->card->lock);
		gs_vgpu_spec(kv, &arg->spec);
		arg->busy_ns = gs_vgpu_busy(kv);
		arg->wait_ns = kv->wait_ns;
		arg->acquires = kv->acquires;
		arg->nprocs = kv->nprocs;
		arg->slices = kv->mode == GPUSLICE_MODE_COMPUTE ?
			      kv->card->core.vgpu[kv->id].slices : 0;
		/* Destroyed since the lookup: gone, as for a later call. */
		if (kv->dead)
			err = -ENOENT;
		spin_unlock_irq(&kv->card->lock);
	}
	rcu_read_unlock();
	return err;
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
		if (card->timer_runs)
			pr_info("card %d: the longest timer callback took %llu ns, %llu of %llu took %u ns or more\n",
				i, card->timer_max_ns, card->timer_slow,
				card->timer_runs, GS_TIMER_SLOW_NS);
		for (j = 0; j < GPUSLICE_MAX_VGPUS; j++)
			if (rcu_access_pointer(card->vgpu[j]))
				gs_kvgpu_put(rcu_access_pointer(card->vgpu[j]));
		free_page((unsigned long)card->page);
		kfree(card);
		gs_cards[i] = NULL;
	}
}
