// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * A cgroup's memory ledger on a card: the bytes its vGPU's files charged.
 *
 * Destroying a vGPU leaves the files still attached to it a detached
 * record (README.md), and their bytes stay charged until they uncharge or
 * close: the memory is still allocated on the GPU. Were a new vGPU for the
 * same cgroup to start from zero, the cgroup could hold its old cap and
 * its new one at once. So a vGPU created for a cgroup whose destroyed
 * vGPU's ledger is still alive shares that ledger: the old bytes count
 * against the new cap until they are released.
 *
 * The card's ledgers are listed under card->ledger_lock, a spinlock
 * because the last reference may go from any context that puts a vGPU.
 */
#include <linux/rcupdate.h>
#include <linux/slab.h>
#include <linux/spinlock.h>

#include "gs_kmod.h"

/* The live ledger of cgroup_id on card, with a reference, or NULL. */
static struct gs_ledger *gs_ledger_find(struct gs_kcard *card, u64 cgroup_id)
{
	struct gs_ledger *l;

	list_for_each_entry(l, &card->ledgers, node)
		if (l->cgroup_id == cgroup_id && kref_get_unless_zero(&l->ref))
			return l;
	return NULL;
}

/*
 * The ledger a new vGPU of cgroup_id on card starts with: the one its
 * destroyed predecessor's files still use, else a new one (NULL: no
 * memory). The caller's GFP_KERNEL_ACCOUNT charges the administrator.
 */
struct gs_ledger *gs_ledger_get(struct gs_kcard *card, u64 cgroup_id)
{
	struct gs_ledger *l, *fresh;

	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL_ACCOUNT);
	spin_lock(&card->ledger_lock);
	l = gs_ledger_find(card, cgroup_id);
	if (!l && fresh) {
		l = fresh;
		fresh = NULL;
		kref_init(&l->ref);
		l->cgroup_id = cgroup_id;
		l->card = card;
		atomic64_set(&l->used, 0);
		list_add(&l->node, &card->ledgers);
	}
	spin_unlock(&card->ledger_lock);
	kfree(fresh);
	return l;
}

/* Called with card->ledger_lock held by kref_put_lock(); drops it. */
static void gs_ledger_free(struct kref *ref)
{
	struct gs_ledger *l = container_of(ref, struct gs_ledger, ref);

	list_del(&l->node);
	spin_unlock(&l->card->ledger_lock);
	/* Lock-free readers of a vGPU (RCU) may still read its ledger. */
	kfree_rcu(l, rcu);
}

void gs_ledger_put(struct gs_ledger *l)
{
	kref_put_lock(&l->ref, gs_ledger_free, &l->card->ledger_lock);
}
