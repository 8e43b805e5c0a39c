// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel module's ledger (kmod/README.md): one /dev/gpuslice file per
 * process and card, attached to the vGPU of the process's cgroup. The
 * kernel owns the cap and the total; the process's charges live in its
 * file, so the kernel releases them when the process exits, however it
 * dies. Nothing here can be edited by the container to raise its cap.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "gpuslice.h"
#include "ledger.h"

struct gs_kmod_ledger {
	struct gs_ledger base;
	int fd;			/* -1 once broken: every charge is refused */
	int card;
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
static int kmod_attach(const char *device, int card, uint64_t *cap, int *out)
{
	struct gpuslice_attach a = { .card = (__u32)card };
	int fd, err;

	fd = open(device, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, GPUSLICE_IOC_ATTACH, &a) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	*cap = a.mem_cap;
	*out = kmod_fd_high(fd);
	return 0;
}

static struct gs_kmod_ledger *kmod(struct gs_ledger *l)
{
	return (struct gs_kmod_ledger *)l;
}

static int kmod_charge(struct gs_ledger *l, uint64_t bytes)
{
	struct gpuslice_charge c = { .card = (__u32)kmod(l)->card,
				     .bytes = bytes };

	if (kmod(l)->fd < 0)
		return -EBADF;
	return ioctl(kmod(l)->fd, GPUSLICE_IOC_CHARGE, &c) < 0 ? -errno : 0;
}

static void kmod_uncharge(struct gs_ledger *l, uint64_t bytes)
{
	struct gpuslice_charge c = { .card = (__u32)kmod(l)->card,
				     .bytes = bytes };

	if (kmod(l)->fd >= 0)
		ioctl(kmod(l)->fd, GPUSLICE_IOC_UNCHARGE, &c);
}

static int kmod_usage(struct gs_ledger *l, uint64_t *used, uint64_t *cap)
{
	struct gpuslice_charge c = { .card = (__u32)kmod(l)->card };

	if (kmod(l)->fd < 0)
		return -EBADF;
	if (ioctl(kmod(l)->fd, GPUSLICE_IOC_MEMINFO, &c) < 0)
		return -errno;
	*used = c.mem_used;
	*cap = c.mem_cap;
	return 0;
}

/*
 * The child shares its parent's file, hence its parent's charges: it
 * gets a file of its own (closing the inherited one releases nothing while
 * the parent holds it). If that fails the child's charges are refused.
 */
static void kmod_after_fork_child(struct gs_ledger *l)
{
	struct gs_kmod_ledger *k = kmod(l);
	uint64_t cap;
	int fd = -1;

	if (k->fd >= 0)
		close(k->fd);
	if (kmod_attach(k->device, k->card, &cap, &fd))
		fd = -1;
	k->fd = fd;
}

static void kmod_close(struct gs_ledger *l)
{
	if (kmod(l)->fd >= 0)
		close(kmod(l)->fd);
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
	err = kmod_attach(device, card, cap, &k->fd);
	if (err) {
		free(k);
		return err;
	}
	k->base.ops = &kmod_ops;
	k->card = card;
	k->device = device;
	*out = &k->base;
	return 0;
}
