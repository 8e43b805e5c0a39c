// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * gpuslice.ko: /dev/gpuslice, its ioctls and the schedule page mapping.
 * See README.md for the ABI and include/uapi/gpuslice.h for its layout.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/rcupdate.h>
#include <linux/uaccess.h>
#include <linux/user_namespace.h>
#include "gs_kcompat.h"
#include "gs_kmod.h"

static int gs_open(struct inode *inode, struct file *file)
{
	struct gs_client *cl = gs_client_new();

	if (!cl)
		return -ENOMEM;
	file->private_data = cl;
	return 0;
}

static int gs_release_file(struct inode *inode, struct file *file)
{
	gs_client_free(file->private_data);
	return 0;
}

/* Every argument the ioctls take; one copy in, one copy out. */
union gs_ioc_arg {
	struct gpuslice_version version;
	struct gpuslice_card card;
	struct gpuslice_vgpu vgpu;
	struct gpuslice_vgpu_stats stats;
	struct gpuslice_attach attach;
	struct gpuslice_charge charge;
	struct gpuslice_acquire acquire;
	struct gpuslice_release release;
	struct gpuslice_wait wait;
	struct gpuslice_vgpu_unseen unseen;
};

static bool gs_admin_ioctl(unsigned int cmd)
{
	switch (cmd) {
	case GPUSLICE_IOC_CARD_SET:
	case GPUSLICE_IOC_VGPU_CREATE:
	case GPUSLICE_IOC_VGPU_UPDATE:
	case GPUSLICE_IOC_VGPU_DESTROY:
	case GPUSLICE_IOC_VGPU_SET_UNSEEN:
		return true;
	}
	return false;
}

static int gs_version(struct gpuslice_version *v)
{
	memset(v, 0, sizeof(*v));
	v->abi_version = GPUSLICE_ABI_VERSION;
	v->max_cards = GPUSLICE_MAX_CARDS;
	v->max_vgpus = GPUSLICE_MAX_VGPUS;
	v->page_size = PAGE_SIZE;
	return 0;
}

/*
 * May the caller see every tenant (VGPU_STATS, VGPU_UNSEEN of any vGPU)?
 * Not audited: a tenant reading its own vGPU is no denial to log.
 */
static bool gs_sees_all(void)
{
	return ns_capable_noaudit(&init_user_ns, CAP_SYS_ADMIN);
}

/*
 * What a call changed, noted by the call itself, to undo it when its
 * answer cannot be copied out.
 */
struct gs_undo {
	u64 taken;		/* UNCHARGE: the bytes it took */
	u64 unseen;		/* SET_UNSEEN: the value before */
	bool pending;		/* ACQUIRE: the file's work before */
};

static int gs_dispatch(struct gs_client *cl, unsigned int cmd,
		       union gs_ioc_arg *a, struct gs_undo *u)
{
	switch (cmd) {
	case GPUSLICE_IOC_VERSION:
		return gs_version(&a->version);
	case GPUSLICE_IOC_CARD_GET:
		return gs_card_get(&a->card);
	case GPUSLICE_IOC_VGPU_STATS:
		return gs_vgpu_stats(&a->stats, gs_sees_all());
	case GPUSLICE_IOC_CARD_SET:
		return gs_card_set(&a->card);
	case GPUSLICE_IOC_VGPU_CREATE:
		return gs_vgpu_create(&a->vgpu);
	case GPUSLICE_IOC_VGPU_UPDATE:
		return gs_vgpu_update_spec(&a->vgpu);
	case GPUSLICE_IOC_VGPU_DESTROY:
		return gs_vgpu_destroy(&a->vgpu);
	case GPUSLICE_IOC_ATTACH:
		return gs_attach(cl, &a->attach);
	case GPUSLICE_IOC_CHARGE:
		return gs_charge(cl, &a->charge);
	case GPUSLICE_IOC_UNCHARGE:
		return gs_uncharge(cl, &a->charge, &u->taken);
	case GPUSLICE_IOC_MEMINFO:
		return gs_meminfo(cl, &a->charge);
	case GPUSLICE_IOC_ACQUIRE:
		return gs_acquire(cl, &a->acquire, &u->pending);
	case GPUSLICE_IOC_RELEASE:
		return gs_release(cl, &a->release);
	case GPUSLICE_IOC_WAIT:
		return gs_wait(cl, &a->wait);
	case GPUSLICE_IOC_VGPU_UNSEEN:
		return gs_vgpu_unseen(&a->unseen, false, gs_sees_all(), NULL);
	case GPUSLICE_IOC_VGPU_SET_UNSEEN:
		return gs_vgpu_unseen(&a->unseen, true, true, &u->unseen);
	}
	return -ENOTTY;
}

static bool gs_known_ioctl(unsigned int cmd)
{
	switch (cmd) {
	case GPUSLICE_IOC_VERSION:
	case GPUSLICE_IOC_CARD_GET:
	case GPUSLICE_IOC_VGPU_STATS:
	case GPUSLICE_IOC_ATTACH:
	case GPUSLICE_IOC_CHARGE:
	case GPUSLICE_IOC_UNCHARGE:
	case GPUSLICE_IOC_MEMINFO:
	case GPUSLICE_IOC_ACQUIRE:
	case GPUSLICE_IOC_RELEASE:
	case GPUSLICE_IOC_WAIT:
	case GPUSLICE_IOC_VGPU_UNSEEN:
		return true;
	}
	return gs_admin_ioctl(cmd);
}

/*
 * The call succeeded but its answer could not be copied out (the caller
 * unmapped or write-protected it after the check in gs_ioctl): take back
 * what it did. ATTACH needs nothing: attaching again answers the same.
 */
static void gs_undo(struct gs_client *cl, unsigned int cmd,
		    union gs_ioc_arg *a, const struct gs_undo *u)
{
	switch (cmd) {
	case GPUSLICE_IOC_CHARGE:
		gs_charge_undo(cl, a->charge.card, a->charge.bytes, true);
		break;
	case GPUSLICE_IOC_UNCHARGE:
		gs_charge_undo(cl, a->charge.card, u->taken, false);
		break;
	case GPUSLICE_IOC_ACQUIRE:
		gs_acquire_undo(cl, a->acquire.card, u->pending);
		break;
	case GPUSLICE_IOC_VGPU_CREATE:
		gs_vgpu_destroy(&a->vgpu);
		break;
	case GPUSLICE_IOC_VGPU_SET_UNSEEN:
		a->unseen.bytes = u->unseen;
		gs_vgpu_unseen(&a->unseen, true, true, NULL);
		break;
	}
}

static long gs_ioctl(struct file *file, unsigned int cmd, unsigned long uarg)
{
	void __user *up = (void __user *)uarg;
	unsigned int size = _IOC_SIZE(cmd);
	struct gs_undo undo = {};
	union gs_ioc_arg a;
	int err;

	/* The size is part of cmd: a known cmd has the size of its struct. */
	if (!gs_known_ioctl(cmd) || size > sizeof(a))
		return -ENOTTY;
	if (gs_admin_ioctl(cmd) && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	memset(&a, 0, sizeof(a));
	if ((_IOC_DIR(cmd) & _IOC_WRITE) && copy_from_user(&a, up, size))
		return -EFAULT;
	/*
	 * A call that fails has changed nothing: the answer's pages are
	 * checked before the call acts (writing back what was read), and
	 * the action is undone should they go in the meantime.
	 */
	if ((_IOC_DIR(cmd) & _IOC_READ) && copy_to_user(up, &a, size))
		return -EFAULT;
	err = gs_dispatch(file->private_data, cmd, &a, &undo);
	if (err)
		return err;
	if ((_IOC_DIR(cmd) & _IOC_READ) && copy_to_user(up, &a, size)) {
		gs_undo(file->private_data, cmd, &a, &undo);
		return -EFAULT;
	}
	return 0;
}

/* One read-only page per configured card, at offset card * PAGE_SIZE. */
static int gs_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct gs_kcard *card;
	int err;

	if (vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	if (vma->vm_pgoff >= GPUSLICE_MAX_CARDS)
		return -EINVAL;
	card = gs_card_lookup(vma->vm_pgoff, &err);
	if (!card)
		return err;
	if (vma->vm_flags & VM_WRITE)
		return -EPERM;
	/* No mprotect(PROT_WRITE) later either. */
	gs_vm_flags_mod(vma, VM_DONTEXPAND | VM_DONTDUMP, VM_MAYWRITE);
	return vm_insert_page(vma, vma->vm_start, virt_to_page(card->page));
}

static const struct file_operations gs_fops = {
	.owner = THIS_MODULE,
	.open = gs_open,
	.release = gs_release_file,
	.unlocked_ioctl = gs_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = gs_mmap,
	.llseek = noop_llseek,
};

static struct miscdevice gs_miscdev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "gpuslice",
	.fops = &gs_fops,
	.mode = 0666,
};

static int __init gs_init(void)
{
	int err;

	err = gs_proc_init();
	if (err)
		return err;
	err = misc_register(&gs_miscdev);
	if (err) {
		gs_proc_exit();
		return err;
	}
	pr_info("ABI %d, /dev/gpuslice ready\n", GPUSLICE_ABI_VERSION);
	return 0;
}

static void __exit gs_exit(void)
{
	misc_deregister(&gs_miscdev);
	gs_proc_exit();
	gs_cards_free();
	/* The files' and vGPUs' RCU frees (this module's code) have run. */
	rcu_barrier();
}

module_init(gs_init);
module_exit(gs_exit);

MODULE_DESCRIPTION("gpuslice: GPU time slices and memory ledger for containers");
MODULE_AUTHOR("The gpuslice authors");
MODULE_LICENSE("GPL");
MODULE_VERSION(GS_MODULE_VERSION);
