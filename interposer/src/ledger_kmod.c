// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel module's ledger (kmod/README.md): one /dev/gpuslice file per
 * process and card, attached to the vGPU of the process's cgroup. The
 * kernel owns the cap and the total; the process's charges live in its
 * file, so the kernel releases them when the process exits, however it
 * dies. Nothing here can be edited by the container to raise its cap.
 *
 * The same file serves the compute gate (gate.c, through kmod.h): ATTACH's
 * answer says whether the card's launches are gated (a compute vGPU under
 * a policy other than 0), ACQUIRE and RELEASE go through it, and the card's
 * schedule page is mapped from it once, at attach.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kmod.h"

struct gs_kmod_ledger {
	struct gs_ledger base;
	struct gs_kmod_card kc;	/* kc.fd -1 once broken: charges refused */
	const char *device;
};

/*
 * Above the descriptors programs and the driver open, like the file
 * ledger's, so that at exit it closes after the driver's device files.
 */
static int kmod_fd_high(int fd)
{
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 1024);

	if (high < 0)
		return fd;
	close(fd);
	return high;
}

/* Opens the device and attaches to the caller's vGPU on card. */
static int kmod_attach(const char *device, int card,
		       struct gpuslice_attach *a, int *out)
{
	int fd, err;

	memset(a, 0, sizeof(*a));
	a->card = (__u32)card;
	fd = open(device, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, GPUSLICE_IOC_ATTACH, a) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	*out = kmod_fd_high(fd);
	return 0;
}

/*
 * The card's schedule page, at card * page_size (the module's page size,
 * from VERSION). It stays mapped for the life of the process: a forked
 * child inherits the mapping, which shows the same card.
 */
static const struct gpuslice_sched_page *kmod_map_page(int fd, int card)
{
	struct gpuslice_version v = { 0 };
	long size = sysconf(_SC_PAGESIZE);
	void *p;

	if (ioctl(fd, GPUSLICE_IOC_VERSION, &v) == 0 && v.page_size)
		size = v.page_size;
	if (size <= 0)
		return NULL;
	p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd,
		 (off_t)card * size);
	return p == MAP_FAILED ? NULL : p;
}

static struct gs_kmod_ledger *kmod(struct gs_ledger *l)
{
	return (struct gs_kmod_ledger *)l;
}

static int kmod_charge(struct gs_ledger *l, uint64_t bytes)
{
	struct gpuslice_charge c = { .card = (__u32)kmod(l)->kc.card,
				     .bytes = bytes };

	if (kmod(l)->kc.fd < 0)
		return -EBADF;
	return ioctl(kmod(l)->kc.fd, GPUSLICE_IOC_CHARGE, &c) < 0 ? -errno : 0;
}

static void kmod_uncharge(struct gs_ledger *l, uint64_t bytes)
{
	struct gpuslice_charge c = { .card = (__u32)kmod(l)->kc.card,
				     .bytes = bytes };

	if (kmod(l)->kc.fd >= 0)
		ioctl(kmod(l)->kc.fd, GPUSLICE_IOC_UNCHARGE, &c);
}

static int kmod_usage(struct gs_ledger *l, uint64_t *used, uint64_t *cap)
{
	struct gpuslice_charge c = { .card = (__u32)kmod(l)->kc.card };

	if (kmod(l)->kc.fd < 0)
		return -EBADF;
	if (ioctl(kmod(l)->kc.fd, GPUSLICE_IOC_MEMINFO, &c) < 0)
		return -errno;
	*used = c.mem_used;
	*cap = c.mem_cap;
	return 0;
}

/*
 * The child shares its parent's file, hence its parent's charges: it
 * gets a file of its own (closing the inherited one releases nothing while
 * the parent holds it). If that fails the child's charges are refused, and
 * so are its launches on a gated card. The ATTACH answer is the child's
 * own (the same vGPU unless the child moved cgroups).
 */
static void kmod_after_fork_child(struct gs_ledger *l)
{
	struct gs_kmod_ledger *k = kmod(l);
	struct gpuslice_attach a;
	int fd = -1;

	if (k->kc.fd >= 0)
		close(k->kc.fd);
	if (kmod_attach(k->device, k->kc.card, &a, &fd))
		fd = -1;
	else
		k->kc.att = a;
	k->kc.fd = fd;
}

static void kmod_close(struct gs_ledger *l)
{
	if (kmod(l)->kc.fd >= 0)
		close(kmod(l)->kc.fd);
	free(l);
}

static const struct gs_ledger_ops kmod_ops = {
	.name = "kernel module",
	.charge = kmod_charge,
	.uncharge = kmod_uncharge,
	.usage = kmod_usage,
	.after_fork_child = kmod_after_fork_child,
	.close = kmod_close,
};

int gs_kmod_ledger_open(const char *device, int card, uint64_t *cap,
			struct gs_ledger **out)
{
	struct gs_kmod_ledger *k = calloc(1, sizeof(*k));
	int err;

	if (!k)
		return -ENOMEM;
	err = kmod_attach(device, card, &k->kc.att, &k->kc.fd);
	if (err) {
		free(k);
		return err;
	}
	k->kc.card = card;
	/* Only the gate reads it: a compute vGPU under a gating policy. */
	if (k->kc.att.mode == GPUSLICE_MODE_COMPUTE &&
	    k->kc.att.policy != GPUSLICE_POLICY_NATIVE)
		k->kc.page = kmod_map_page(k->kc.fd, card);
	k->base.ops = &kmod_ops;
	k->device = device;
	*cap = k->kc.att.mem_cap;
	*out = &k->base;
	return 0;
}

const struct gs_kmod_card *gs_kmod_ledger_card(struct gs_ledger *l)
{
	return l && l->ops == &kmod_ops ? &kmod(l)->kc : NULL;
}
