// SPDX-License-Identifier: Apache-2.0
/*
 * CUDA_VISIBLE_DEVICES, read at cuInit as NVIDIA documents it (CUDA C++
 * Programming Guide, "CUDA Environment Variables"): a comma-separated list
 * of device indices or UUIDs ("GPU-" and enough leading hex digits to
 * name one device); the listed devices become ordinals 0..n-1 in the
 * listed order, and the list ends at its first invalid entry, the entries
 * before it staying visible. Unset: every device, in order.
 *
 * The process-local driver (contexts, pools, streams, address windows)
 * works on these ordinals; only the machine's shared state (state.c:
 * memory, engines, identity) is physical, reached through sim_phys(). So
 * every entry point that takes or returns a CUdevice speaks ordinals, as
 * the real driver's do, with nothing to translate, and NVML, which
 * CUDA_VISIBLE_DEVICES does not affect, keeps naming physical devices.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gpuslice/uuid.h>

#include "sim.h"

/*
 * The physical devices this process can reach, in order. A container
 * holds only its cards' device nodes, and the driver enumerates only the
 * GPUs whose /dev/nvidia<minor> it can open (NVIDIA Container Toolkit,
 * "GPU enumeration"): with SIMCUDA_DEVICE_NODES naming a directory,
 * device d is reachable only when <dir>/nvidia<d> exists (a simulated
 * card's minor is its index). Unset: every device, as on a host.
 */
static int reachable(int nphys, int *acc)
{
	const char *dir = getenv("SIMCUDA_DEVICE_NODES");
	char path[4096];
	int n = 0;

	for (int d = 0; d < nphys; d++) {
		if (dir) {
			snprintf(path, sizeof(path), "%s/nvidia%d", dir, d);
			if (access(path, F_OK))
				continue;
		}
		acc[n++] = d;
	}
	return n;
}

/* The reachable device a UUID prefix names, or -1 (none, or ambiguous). */
static int by_uuid(const char *tok, size_t len, const int *acc, int nacc)
{
	char s[GS_UUID_STR_LEN];
	unsigned char b[16];
	int found = -1;

	if (len > GS_UUID_STR_LEN - 1)
		return -1;
	for (int i = 0; i < nacc; i++) {
		simst_uuid(acc[i], b);
		gs_uuid_format(b, s);
		if (strncmp(s, tok, len))
			continue;
		if (found >= 0)
			return -1;	/* not enough digits to tell them apart */
		found = acc[i];
	}
	return found;
}

/* The physical device of one entry of the list, or -1 when invalid. */
static int entry_device(const char *tok, size_t len, const int *acc, int nacc)
{
	char *end;
	long v;

	if (len > 4 && !strncmp(tok, "GPU-", 4))
		return by_uuid(tok, len, acc, nacc);
	if (!len || tok[0] < '0' || tok[0] > '9')
		return -1;	/* "-1", MIG instances, anything else */
	v = strtol(tok, &end, 10);
	if ((size_t)(end - tok) != len || v >= nacc)
		return -1;
	return acc[v];
}

/*
 * Fills sim.phys and sim.ndev from the environment: the reachable devices,
 * then CUDA_VISIBLE_DEVICES over them (its indices count reachable
 * devices, as in a container). A device listed twice ends the list too
 * (the documentation does not say; a repeat would give one device two
 * ordinals, which the real driver never shows).
 */
void sim_visible_init(int nphys)
{
	const char *s = getenv("CUDA_VISIBLE_DEVICES");
	int acc[SIMST_MAX_DEV];
	int nacc = reachable(nphys, acc);
	int n = 0;

	if (!s) {
		memcpy(sim.phys, acc, nacc * sizeof(acc[0]));
		sim.ndev = nacc;
		return;
	}
	while (*s && n < nacc) {
		size_t len = strcspn(s, ",");
		int d = entry_device(s, len, acc, nacc);

		for (int i = 0; i < n && d >= 0; i++)
			if (sim.phys[i] == d)
				d = -1;
		if (d < 0)
			break;
		sim.phys[n++] = d;
		s += len;
		if (*s == ',')
			s++;
	}
	sim.ndev = n;
}
