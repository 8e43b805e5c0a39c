// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * /proc/gpuslice/: the module's state as tables, one line per card, vGPU
 * or attached file, each under a header naming its columns (README.md).
 */
#include <linux/pid_namespace.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>

#include "gs_kmod.h"

static struct proc_dir_entry *gs_proc_dir;

static const char *gs_mode_name(u32 mode)
{
	switch (mode) {
	case GPUSLICE_MODE_MEMORY:
		return "memory";
	case GPUSLICE_MODE_COMPUTE:
		return "compute";
	}
	return "none";
}

static int gs_proc_version(struct seq_file *m, void *v)
{
	seq_printf(m, "abi %d\nmodule %s\n", GPUSLICE_ABI_VERSION,
		   GS_MODULE_VERSION);
	return 0;
}

static void gs_proc_owner(struct seq_file *m, struct gs_kcard *card)
{
	int owner = gs_card_gated(card) ? gs_owner(&card->core) :
					  GPUSLICE_OWNER_ALL;

	if (owner == GPUSLICE_OWNER_ALL)
		seq_puts(m, " all");
	else if (owner == GPUSLICE_OWNER_NONE)
		seq_puts(m, " none");
	else
		seq_printf(m, " %d", owner);
}

static int gs_proc_cards(struct seq_file *m, void *v)
{
	struct gs_kcard *card;
	int i;

	seq_puts(m, "card policy max_inst slice_us reclaim_us mode vgpus owner handovers idle_slices\n");
	mutex_lock(&gs_mutex);
	for (i = 0; i < GPUSLICE_MAX_CARDS; i++) {
		card = gs_cards[i];
		if (!card)
			continue;
		spin_lock_irq(&card->lock);
		seq_printf(m, "%d %u %u %llu %llu %s %u", i,
			   card->core.cfg.policy, card->core.cfg.max_inst,
			   card->core.cfg.slice_ns / NSEC_PER_USEC,
			   card->core.cfg.reclaim_ns / NSEC_PER_USEC,
			   gs_mode_name(card->mode), card->nvgpus);
		gs_proc_owner(m, card);
		seq_printf(m, " %llu %llu\n", card->core.handovers,
			   card->core.idle_slices);
		spin_unlock_irq(&card->lock);
	}
	mutex_unlock(&gs_mutex);
	return 0;
}

static void gs_proc_vgpu(struct seq_file *m, struct gs_kvgpu *kv)
{
	struct gs_kcard *card = kv->card;
	u64 slices;

	seq_printf(m, "%d %d %llu %s %lld %llu %u %u", card->index, kv->id,
		   kv->cgroup_id, gs_mode_name(kv->mode),
		   (long long)atomic64_read(&kv->mem_used),
		   READ_ONCE(kv->mem_cap), kv->quota, kv->priority);
	spin_lock_irq(&card->lock);
	slices = kv->mode == GPUSLICE_MODE_COMPUTE ?
		 card->core.vgpu[kv->id].slices : 0;
	seq_printf(m, " %u %u %llu %llu %llu %llu", kv->nprocs, kv->npending,
		   kv->busy_ns, kv->wait_ns, slices, kv->acquires);
	spin_unlock_irq(&card->lock);
	seq_printf(m, " %lld\n", (long long)atomic64_read(&kv->mem_unseen));
}

static int gs_proc_vgpus(struct seq_file *m, void *v)
{
	int i, j;

	seq_puts(m, "card id cgroup mode mem_used mem_cap quota priority procs pending busy_ns wait_ns slices acquires mem_unseen\n");
	mutex_lock(&gs_mutex);
	for (i = 0; i < GPUSLICE_MAX_CARDS; i++) {
		if (!gs_cards[i])
			continue;
		for (j = 0; j < GPUSLICE_MAX_VGPUS; j++)
			if (gs_cards[i]->vgpu[j])
				gs_proc_vgpu(m, gs_cards[i]->vgpu[j]);
	}
	mutex_unlock(&gs_mutex);
	return 0;
}

static int gs_proc_procs(struct seq_file *m, void *v)
{
	struct gs_client *cl;
	struct gs_kvgpu *kv;
	int i;

	seq_puts(m, "pid card id mem_charged\n");
	mutex_lock(&gs_mutex);
	list_for_each_entry(cl, &gs_clients, node) {
		/* The reader's pid namespace; not visible there: not listed. */
		pid_t pid = pid_nr_ns(cl->pid, task_active_pid_ns(current));

		if (!pid)
			continue;
		for (i = 0; i < GPUSLICE_MAX_CARDS; i++) {
			kv = cl->att[i].kv;
			/* A destroyed vGPU's id may already name another. */
			if (!kv || READ_ONCE(kv->dead))
				continue;
			seq_printf(m, "%d %d %d %lld\n", pid, i, kv->id,
				   (long long)atomic64_read(&cl->att[i].charged));
		}
	}
	mutex_unlock(&gs_mutex);
	return 0;
}

int gs_proc_init(void)
{
	gs_proc_dir = proc_mkdir("gpuslice", NULL);
	if (!gs_proc_dir)
		return -ENOMEM;
	if (!proc_create_single("version", 0444, gs_proc_dir, gs_proc_version) ||
	    !proc_create_single("cards", 0444, gs_proc_dir, gs_proc_cards) ||
	    !proc_create_single("vgpus", 0444, gs_proc_dir, gs_proc_vgpus) ||
	    !proc_create_single("procs", 0444, gs_proc_dir, gs_proc_procs)) {
		gs_proc_exit();
		return -ENOMEM;
	}
	return 0;
}

void gs_proc_exit(void)
{
	proc_remove(gs_proc_dir);
}
