// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * /proc/gpuslice/: the module's state as tables, one line per card, vGPU
 * or attached file, each under a header naming its columns (README.md).
 *
 * vgpus and procs list only the reader's own vGPU (its cgroup's or the
 * nearest ancestor's, per card) unless the file was opened with
 * CAP_SYS_ADMIN: the opener's credentials decide, as for any file, so a
 * descriptor passed to a privileged process shows it no more than its
 * opener could see. They are walked one record at a time under RCU (the
 * vGPUs and files are freed after a grace period), with no lock held
 * between records, so a reader never delays a tenant's calls and one
 * read() does work bounded by the records it returns.
 */
#include <linux/capability.h>
#include <linux/pid_namespace.h>
#include <linux/proc_fs.h>
#include <linux/rcupdate.h>
#include <linux/seq_file.h>
#include <linux/user_namespace.h>

#include "gs_kcompat.h"
#include "gs_kmod.h"

/* Records are numbered by card, vGPU id and (procs) file slot. */
#define GS_PROC_VGPUS	(GPUSLICE_MAX_CARDS * GPUSLICE_MAX_VGPUS)
#define GS_PROC_FILES	((loff_t)GS_PROC_VGPUS * GPUSLICE_MAX_VGPU_FILES)

static struct proc_dir_entry *gs_proc_dir;

/* An open vgpus or procs file. */
struct gs_proc_iter {
	bool admin;		/* opened with CAP_SYS_ADMIN: sees all */
	/* The record at the seq_file position (valid start to stop). */
	struct gs_kvgpu *kv;
	struct gs_client *cl;
	pid_t pid;
};

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

/* The cards' settings, for anyone: at most GPUSLICE_MAX_CARDS lines. */
static int gs_proc_cards(struct seq_file *m, void *v)
{
	struct gs_kcard *card;
	int i, err;

	seq_puts(m, "card policy max_inst slice_us reclaim_us mode vgpus owner handovers idle_slices\n");
	for (i = 0; i < GPUSLICE_MAX_CARDS; i++) {
		card = gs_card_lookup(i, &err);
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
	return 0;
}

/*
 * The first vGPU numbered *idx or later that the reader may see, with
 * *idx its number, or NULL; under RCU. Bounded by the cards' vGPU slots
 * (GS_PROC_VGPUS), whatever their files; a reader without admin looks
 * only at its own vGPU of each card.
 */
static struct gs_kvgpu *gs_proc_vgpu_from(struct gs_proc_iter *it, loff_t *idx)
{
	struct gs_kcard *card;
	struct gs_kvgpu *kv;
	loff_t i = *idx;
	int err, id;

	for (; i < GS_PROC_VGPUS; i++) {
		id = i % GPUSLICE_MAX_VGPUS;
		card = gs_card_lookup(i / GPUSLICE_MAX_VGPUS, &err);
		if (!card) {
			i += GPUSLICE_MAX_VGPUS - 1 - id;
			continue;
		}
		if (!it->admin) {
			kv = gs_find_vgpu(card);
			if (!kv || kv->id < id) {
				i += GPUSLICE_MAX_VGPUS - 1 - id;
				continue;
			}
			i += kv->id - id;
		} else {
			kv = rcu_dereference(card->vgpu[id]);
		}
		/* A destroyed vGPU's id may already name another. */
		if (!kv || READ_ONCE(kv->dead))
			continue;
		*idx = i;
		return kv;
	}
	*idx = GS_PROC_VGPUS;
	return NULL;
}

/* seq_file positions: 0 the header, n + 1 the record numbered n. */
static void *gs_proc_vgpus_find(struct seq_file *m, loff_t *pos)
{
	struct gs_proc_iter *it = m->private;
	loff_t idx = *pos - 1;

	it->kv = gs_proc_vgpu_from(it, &idx);
	*pos = idx + 1;
	return it->kv ? it : NULL;
}

static void *gs_proc_start(struct seq_file *m, loff_t *pos)
	__acquires(RCU)
{
	rcu_read_lock();
	return *pos ? m->op->next(m, NULL, pos) : SEQ_START_TOKEN;
}

static void gs_proc_stop(struct seq_file *m, void *v)
	__releases(RCU)
{
	rcu_read_unlock();
}

/* start() passes v NULL and the record's position; next() the one after. */
static void *gs_proc_vgpus_next(struct seq_file *m, void *v, loff_t *pos)
{
	if (v)
		++*pos;
	return gs_proc_vgpus_find(m, pos);
}

static void gs_proc_vgpu(struct seq_file *m, struct gs_kvgpu *kv)
{
	struct gs_kcard *card = kv->card;
	u64 slices;

	seq_printf(m, "%d %d %llu %s %lld %llu", card->index, kv->id,
		   kv->cgroup_id, gs_mode_name(kv->mode),
		   (long long)atomic64_read(gs_used(kv)),
		   READ_ONCE(kv->mem_cap));
	/* card->lock for one record's counters: O(1) work. */
	spin_lock_irq(&card->lock);
	slices = kv->mode == GPUSLICE_MODE_COMPUTE ?
		 card->core.vgpu[kv->id].slices : 0;
	seq_printf(m, " %u %u %u %u %llu %llu %llu %llu", kv->quota,
		   kv->priority, kv->nprocs, kv->npending, gs_vgpu_busy(kv),
		   kv->wait_ns, slices, kv->acquires);
	spin_unlock_irq(&card->lock);
	seq_printf(m, " %lld\n", (long long)atomic64_read(&kv->mem_unseen));
}

static int gs_proc_vgpus_show(struct seq_file *m, void *v)
{
	struct gs_proc_iter *it = m->private;

	if (v == SEQ_START_TOKEN)
		seq_puts(m, "card id cgroup mode mem_used mem_cap quota priority procs pending busy_ns wait_ns slices acquires mem_unseen\n");
	else
		gs_proc_vgpu(m, it->kv);
	return 0;
}

static const struct seq_operations gs_proc_vgpus_ops = {
	.start = gs_proc_start,
	.next = gs_proc_vgpus_next,
	.stop = gs_proc_stop,
	.show = gs_proc_vgpus_show,
};

/*
 * The first file numbered *pos - 1 or later (vGPU number, then slot) of
 * a vGPU the reader may see and of a process visible in its pid
 * namespace, with *pos its position; under RCU.
 */
static void *gs_proc_procs_find(struct seq_file *m, loff_t *pos)
{
	struct pid_namespace *ns = task_active_pid_ns(current);
	struct gs_proc_iter *it = m->private;
	loff_t idx = *pos - 1, vidx;
	unsigned long slot;

	while (idx < GS_PROC_FILES) {
		vidx = idx / GPUSLICE_MAX_VGPU_FILES;
		slot = idx % GPUSLICE_MAX_VGPU_FILES;
		it->kv = gs_proc_vgpu_from(it, &vidx);
		if (!it->kv)
			break;
		if (vidx != idx / GPUSLICE_MAX_VGPU_FILES)
			slot = 0;
		it->cl = xa_find(&it->kv->files, &slot,
				 GPUSLICE_MAX_VGPU_FILES - 1, XA_PRESENT);
		if (!it->cl) {
			idx = (vidx + 1) * GPUSLICE_MAX_VGPU_FILES;
			continue;
		}
		idx = vidx * GPUSLICE_MAX_VGPU_FILES + slot;
		/* Not visible in the reader's pid namespace: not listed. */
		it->pid = pid_nr_ns(it->cl->pid, ns);
		if (it->pid) {
			*pos = idx + 1;
			return it;
		}
		idx++;
	}
	*pos = GS_PROC_FILES + 1;
	return NULL;
}

static void *gs_proc_procs_next(struct seq_file *m, void *v, loff_t *pos)
{
	if (v)
		++*pos;
	return gs_proc_procs_find(m, pos);
}

static int gs_proc_procs_show(struct seq_file *m, void *v)
{
	struct gs_proc_iter *it = m->private;
	int card;

	if (v == SEQ_START_TOKEN) {
		seq_puts(m, "pid card id mem_charged\n");
		return 0;
	}
	card = it->kv->card->index;
	seq_printf(m, "%d %d %d %lld\n", it->pid, card, it->kv->id,
		   (long long)atomic64_read(&it->cl->att[card].charged));
	return 0;
}

static const struct seq_operations gs_proc_procs_ops = {
	.start = gs_proc_start,
	.next = gs_proc_procs_next,
	.stop = gs_proc_stop,
	.show = gs_proc_procs_show,
};

/* The opener's credentials decide what the file shows (file->f_cred). */
static int gs_proc_open(struct inode *inode, struct file *file)
{
	const struct seq_operations *ops = gs_pde_data(inode);
	struct gs_proc_iter *it;

	it = __seq_open_private(file, ops, sizeof(*it));
	if (!it)
		return -ENOMEM;
	it->admin = file_ns_capable(file, &init_user_ns, CAP_SYS_ADMIN);
	return 0;
}

static const struct proc_ops gs_proc_table_ops = {
	.proc_open = gs_proc_open,
	.proc_read = seq_read,
	.proc_lseek = seq_lseek,
	.proc_release = seq_release_private,
};

int gs_proc_init(void)
{
	gs_proc_dir = proc_mkdir("gpuslice", NULL);
	if (!gs_proc_dir)
		return -ENOMEM;
	if (!proc_create_single("version", 0444, gs_proc_dir, gs_proc_version) ||
	    !proc_create_single("cards", 0444, gs_proc_dir, gs_proc_cards) ||
	    !proc_create_data("vgpus", 0444, gs_proc_dir, &gs_proc_table_ops,
			      (void *)&gs_proc_vgpus_ops) ||
	    !proc_create_data("procs", 0444, gs_proc_dir, &gs_proc_table_ops,
			      (void *)&gs_proc_procs_ops)) {
		gs_proc_exit();
		return -ENOMEM;
	}
	return 0;
}

void gs_proc_exit(void)
{
	proc_remove(gs_proc_dir);
}
