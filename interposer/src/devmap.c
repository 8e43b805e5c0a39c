// SPDX-License-Identifier: Apache-2.0
/*
 * Which device is which card: the container's cards (GPU_IDX, in the
 * order config.c sorts them) matched to the devices CUDA and NVML show.
 *
 * By identity, not by position: frameworks (Ray workers, vLLM, DeepSpeed's
 * launcher) set CUDA_VISIBLE_DEVICES inside a multi-card container, which
 * reorders and hides CUDA's devices and leaves NVML's alone. A CUDA device
 * is matched, by what can be used first:
 *
 *  1. its UUID (cuDeviceGetUuid_v2) against GPUSLICE_CARD_UUIDS, the
 *     agent's list of the cards' UUIDs: a device that is none of them is
 *     not the container's;
 *  2. without that list, through NVML: the NVML device of the same UUID,
 *     mapped as gs_devmap_nvml maps it;
 *  3. neither (no NVML): its ordinal under the index rules, wrong when
 *     CUDA_VISIBLE_DEVICES reorders or leaves out cards, as a line says.
 *
 * The index rules, for an NVML index (or that last resort's ordinal) i of
 * n devices: inside a container the driver shows exactly the container's
 * cards, in PCI order, so i is the i-th card; with more devices than cards
 * (no container around the process), i is card i. An NVML device is
 * matched by its UUID against GPUSLICE_CARD_UUIDS, else by the index
 * rules: both views give a device the same card.
 *
 * The CUDA devices are matched all at once, at the first question after
 * cuInit, and remembered per ordinal: an allocation or a launch then pays
 * one load, no driver call.
 */
#include <stdlib.h>
#include <strings.h>

#include "shim.h"

#define GS_DEVMAP_MAX 64	/* CUDA ordinals remembered */

static int pos_of[GS_DEVMAP_MAX];	/* ordinal -> card position, or -1 */
static int ndev;			/* ordinals pos_of covers */
static int resolved;			/* atomic: pos_of is filled */
static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;

/* The index rules: the card position of index i of n devices, or -1. */
static int by_position(int i, int n)
{
	const struct gs_config *cfg = gs_config();

	if (i < 0)
		return -1;
	if (n <= cfg->ncards)
		return i < cfg->ncards ? i : -1;
	for (int k = 0; k < cfg->ncards; k++)
		if (cfg->cards[k].index == i)
			return k;
	return -1;
}

static int by_uuid(const char *uuid)
{
	const struct gs_config *cfg = gs_config();

	for (int k = 0; k < cfg->ncards; k++)
		if (!strcasecmp(cfg->cards[k].uuid, uuid))
			return k;
	return -1;
}

int gs_devmap_nvml(nvmlDevice_t h)
{
	char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
	unsigned int index, n = 0;

	if (gs_config()->uuids && gs_real.nvmlDeviceGetUUID &&
	    gs_real.nvmlDeviceGetUUID(h, uuid, sizeof(uuid)) == NVML_SUCCESS)
		return by_uuid(uuid);
	if (!gs_real.nvmlDeviceGetIndex ||
	    gs_real.nvmlDeviceGetIndex(h, &index) != NVML_SUCCESS)
		return -1;
	if (gs_real.nvmlDeviceGetCount_v2)
		gs_real.nvmlDeviceGetCount_v2(&n);
	return by_position((int)index, (int)n);
}

/* CUDA device dev's UUID in NVML's text form; false when unknown. */
static bool cuda_uuid(CUdevice dev, char out[GS_UUID_STR_LEN])
{
	CUresult r = CUDA_ERROR_NOT_FOUND;
	CUuuid u;

	/* For a whole GPU both give its UUID; _v2 is from CUDA 11.4. */
	if (gs_real.cuDeviceGetUuid_v2)
		r = gs_real.cuDeviceGetUuid_v2(&u, dev);
	else if (gs_real.cuDeviceGetUuid)
		r = gs_real.cuDeviceGetUuid(&u, dev);
	if (r != CUDA_SUCCESS)
		return false;
	gs_uuid_format((const unsigned char *)u.bytes, out);
	return true;
}

/* NVML for the time of the matching: 1 usable, 0 not (-1: not tried). */
static int nvml_open(void)
{
	gs_load_nvml();
	return gs_real.nvmlInit_v2 && gs_real.nvmlDeviceGetHandleByUUID &&
	       gs_real.nvmlInit_v2() == NVML_SUCCESS;
}

/* The card position of CUDA device d of n, and by what (NULL: position). */
static int match(int d, int n, const char *uuid, int *nvml, const char **how)
{
	nvmlDevice_t h;

	*how = NULL;
	if (!uuid)
		return by_position(d, n);
	if (gs_config()->uuids) {
		*how = "GPUSLICE_CARD_UUIDS";
		return by_uuid(uuid);
	}
	if (*nvml < 0)
		*nvml = nvml_open();
	if (*nvml &&
	    gs_real.nvmlDeviceGetHandleByUUID(uuid, &h) == NVML_SUCCESS) {
		*how = "NVML";
		return gs_devmap_nvml(h);
	}
	return by_position(d, n);
}

static void log_match(int d, const char *uuid, int k, const char *how)
{
	const struct gs_config *cfg = gs_config();

	if (k >= 0)
		gs_info("device %d (%s) is card %d (by %s)", d, uuid,
			cfg->cards[k].index, how ? how : "its ordinal");
	else if (how && cfg->uuids)
		gs_warn("device %d (%s) is none of this container's cards (GPUSLICE_CARD_UUIDS): nothing may be allocated on it",
			d, uuid);
	else
		gs_info("device %d (%s) is none of this container's cards",
			d, uuid);
}

/* Fills pos_of; false while the driver cannot say how many devices. */
static bool resolve_locked(void)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	int n = 0, nvml = -1, by_ordinal = 0;

	if (!gs_real.cuDeviceGetCount ||
	    gs_real.cuDeviceGetCount(&n) != CUDA_SUCCESS)
		return false;
	n = n < GS_DEVMAP_MAX ? n : GS_DEVMAP_MAX;
	for (int d = 0; d < n; d++) {
		char uuid[GS_UUID_STR_LEN];
		bool known = cuda_uuid(d, uuid);
		const char *how;

		pos_of[d] = match(d, n, known ? uuid : NULL, &nvml, &how);
		log_match(d, known ? uuid : "no UUID", pos_of[d], how);
		by_ordinal += !how;
	}
	if (nvml > 0)
		gs_real.nvmlShutdown();
	if (by_ordinal && cvd)
		gs_warn("CUDA_VISIBLE_DEVICES=%.64s: %d device(s) matched to cards by ordinal, not by UUID (no GPUSLICE_CARD_UUIDS, no usable NVML): wrong if the list reorders or leaves out cards",
			cvd, by_ordinal);
	ndev = n;
	return true;
}

int gs_devmap_cuda(CUdevice dev)
{
	if (!__atomic_load_n(&resolved, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&resolve_lock);
		if (!resolved && resolve_locked())
			__atomic_store_n(&resolved, 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&resolve_lock);
		/* No driver yet: the call this is for fails anyway. */
		if (!__atomic_load_n(&resolved, __ATOMIC_ACQUIRE))
			return by_position(dev, 0);
	}
	return dev >= 0 && dev < ndev ? pos_of[dev] : -1;
}

/* A fork may have caught another thread matching: the child starts over. */
void gs_devmap_after_fork_child(void)
{
	pthread_mutex_init(&resolve_lock, NULL);
}
