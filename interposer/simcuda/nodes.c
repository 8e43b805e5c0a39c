// SPDX-License-Identifier: Apache-2.0
/*
 * The device nodes, modelled on how NVIDIA's driver reaches the GPU: its
 * user-space libraries talk to the kernel driver only through descriptors
 * of /dev/nvidiactl (the control node) and /dev/nvidia<minor> (one per
 * GPU). cuInit opens the control node and issues ioctls on it, the first
 * context on a device opens that device's node, and nvmlInit opens the
 * control node too; the driver keeps them for the life of the process,
 * NVML until its last nvmlShutdown ("releasing all GPU resources
 * previously allocated with nvmlInit", NVML's reference). Modelled here
 * so that what stands between a process and those nodes sees the same
 * calls: a container's device allow-list, and gpuslice's guard
 * (pkg/guard), which refuses a process of a vGPU container that has not
 * attached, and which the shim must therefore attach before (its
 * src/devopen.c wraps libc's open: these opens go through libc's open for
 * that reason, never a raw system call).
 *
 * - Only where the node exists: no host test has /dev/nvidia*, and there
 *   nothing changes. A simulated device's minor is its physical index.
 * - Refused (EPERM, EACCES, at the open or the ioctl): the caller fails.
 *   The CUDA calls return CUDA_ERROR_OPERATING_SYSTEM (NVIDIA's meaning:
 *   an OS call failed), nvmlInit NVML_ERROR_UNKNOWN (what NVIDIA's notice
 *   on containers that lost their device access shows: "Failed to
 *   initialize NVML: Unknown Error"). Any other failure (a stale node
 *   without its driver: ENXIO, ENODEV) is ignored and the simulation goes
 *   on, so that the simulated driver still runs on such a machine.
 * - The ioctl is FIOCLEX (the descriptor is already close-on-exec): the
 *   kernel answers it itself, before any driver, so it is harmless on a
 *   machine with NVIDIA's real driver, where the simulated driver may run
 *   too; and like every ioctl it passes the LSM's file_ioctl hook, where
 *   the guard sees it. The real driver's own first ioctls (the version
 *   check on the control node) would be logged by a real driver as an API
 *   mismatch, and a stand-in driver (kmod/guest/nvstub) answers anything.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "nodes.h"
#include "state.h"

/* Descriptors + 1: 0 is none (the library's statics start zeroed). */
static int ctl;
static int devs[SIMST_MAX_DEV];

static int refused(int err)
{
	return err == EPERM || err == EACCES;
}

/* Opens path as the driver does; 0 kept in *slot, or -errno if refused. */
static int node_open(const char *path, int *slot)
{
	int fd, err;

	if (*slot)
		return 0;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return refused(errno) ? -errno : 0;
	if (ioctl(fd, FIOCLEX) < 0 && refused(errno)) {
		err = errno;
		close(fd);
		return -err;
	}
	*slot = fd + 1;
	return 0;
}

int simnode_ctl(void)
{
	return node_open("/dev/nvidiactl", &ctl);
}

void simnode_ctl_close(void)
{
	if (ctl)
		close(ctl - 1);
	ctl = 0;
}

int simnode_dev(int phys)
{
	char path[32];

	if (phys < 0 || phys >= SIMST_MAX_DEV)
		return 0;
	snprintf(path, sizeof(path), "/dev/nvidia%d", phys);
	return node_open(path, &devs[phys]);
}

void simnode_forked(void)
{
	simnode_ctl_close();
	for (int i = 0; i < SIMST_MAX_DEV; i++) {
		if (devs[i])
			close(devs[i] - 1);
		devs[i] = 0;
	}
}
