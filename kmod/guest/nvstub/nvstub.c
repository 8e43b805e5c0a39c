// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * A stand-in for NVIDIA's device nodes in the guest, for the eBPF guard's
 * test (pkg/guard): character devices of the NVIDIA majors whose open,
 * ioctl (64- and 32-bit) and mmap succeed, so that the only refusal a test
 * process can meet is the guard's. Major 195 as the real driver
 * ("nvidia", minors 0-255: /dev/nvidia<N>, nvidiactl 255), and
 * "nvidia-uvm" and "nvidia-caps" at dynamic majors, as their drivers
 * register them.
 */
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/module.h>

#define NVSTUB_MAJOR	195

static int nvstub_open(struct inode *inode, struct file *file)
{
	return 0;
}

/* Any command succeeds and returns its number's low byte. */
static long nvstub_ioctl(struct file *file, unsigned int cmd,
			 unsigned long arg)
{
	return cmd & 0xff;
}

/* Maps nothing: a test process calls mmap, it never touches the pages. */
static int nvstub_mmap(struct file *file, struct vm_area_struct *vma)
{
	return 0;
}

/*
 * 32-bit processes' ioctls reach the same handler, as NVIDIA's frontend
 * (nv-frontend.c) sets .compat_ioctl on x86-64: the guard's test issues
 * them through the i386 system call table (file_ioctl_compat).
 */
static const struct file_operations nvstub_fops = {
	.owner = THIS_MODULE,
	.open = nvstub_open,
	.unlocked_ioctl = nvstub_ioctl,
	.compat_ioctl = nvstub_ioctl,
	.mmap = nvstub_mmap,
	.llseek = noop_llseek,
};

static int uvm_major, caps_major;

static int __init nvstub_init(void)
{
	int err;

	err = register_chrdev(NVSTUB_MAJOR, "nvidia", &nvstub_fops);
	if (err)
		return err;
	uvm_major = register_chrdev(0, "nvidia-uvm", &nvstub_fops);
	if (uvm_major < 0) {
		err = uvm_major;
		goto out_nvidia;
	}
	caps_major = register_chrdev(0, "nvidia-caps", &nvstub_fops);
	if (caps_major < 0) {
		err = caps_major;
		goto out_uvm;
	}
	return 0;
out_uvm:
	unregister_chrdev(uvm_major, "nvidia-uvm");
out_nvidia:
	unregister_chrdev(NVSTUB_MAJOR, "nvidia");
	return err;
}

static void __exit nvstub_exit(void)
{
	unregister_chrdev(caps_major, "nvidia-caps");
	unregister_chrdev(uvm_major, "nvidia-uvm");
	unregister_chrdev(NVSTUB_MAJOR, "nvidia");
}

module_init(nvstub_init);
module_exit(nvstub_exit);
MODULE_DESCRIPTION("gpuslice guest test: stand-in NVIDIA device nodes");
MODULE_LICENSE("GPL");
