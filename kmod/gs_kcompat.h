/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * The few kernel interfaces that changed between 5.10 and today, in one
 * place: the module is built out of tree against whatever kernel a node
 * runs.
 */
#ifndef GS_KCOMPAT_H
#define GS_KCOMPAT_H

#include <linux/cgroup.h>
#include <linux/err.h>
#include <linux/hrtimer.h>
#include <linux/mm.h>
#include <linux/proc_fs.h>
#include <linux/version.h>

/* hrtimer_setup() replaced hrtimer_init() + .function in 6.13. */
static inline void gs_hrtimer_setup(struct hrtimer *timer,
				    enum hrtimer_restart (*fn)(struct hrtimer *),
				    clockid_t clock, enum hrtimer_mode mode)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
	hrtimer_setup(timer, fn, clock, mode);
#else
	hrtimer_init(timer, clock, mode);
	timer->function = fn;
#endif
}

/* vm_flags became read-only behind vm_flags_mod() in 6.3. */
static inline void gs_vm_flags_mod(struct vm_area_struct *vma,
				   unsigned long set, unsigned long clear)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_mod(vma, set, clear);
#else
	vma->vm_flags = (vma->vm_flags | set) & ~clear;
#endif
}

/* PDE_DATA() became pde_data() in 5.17. */
static inline void *gs_pde_data(const struct inode *inode)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(5, 17, 0)
	return pde_data(inode);
#else
	return PDE_DATA(inode);
#endif
}

/*
 * 0 when a cgroup v2 with this id exists, else -ENOENT. cgroup_get_from_id()
 * came with 5.14 (NULL on failure until 6.0, an ERR_PTR since); before,
 * the id is not checked and a wrong one simply matches no process. From
 * 6.1 it resolves ids in the caller's cgroup namespace: the agent runs in
 * the initial one.
 */
static inline int gs_cgroup_exists(u64 id)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(5, 14, 0)
	struct cgroup *cgrp = cgroup_get_from_id(id);

	if (IS_ERR_OR_NULL(cgrp))
		return -ENOENT;
	cgroup_put(cgrp);
#endif
	return 0;
}

#endif /* GS_KCOMPAT_H */
