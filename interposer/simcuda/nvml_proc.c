// SPDX-License-Identifier: Apache-2.0
/*
 * NVML's running compute processes: every live process of the machine
 * that holds device memory on the device, with what it holds
 * (usedGpuMemory), from the shared state's process table (state.c). That
 * is the driver's own per-process figure: everything the process's
 * contexts took, the allocations, the contexts themselves and the modules
 * included, whatever an interposer saw of it.
 *
 * Modelling choice: a process is listed while it holds memory on the
 * device (a real driver lists it while it has a context there; in this
 * simulator every context holds memory unless SIMCUDA_CONTEXT_MIB is 0).
 * The pids are the processes' own (the machine's processes share a pid
 * namespace, README.md).
 *
 * The calling convention is NVML's: *infoCount is the room in infos; when
 * it is too small, NVML_ERROR_INSUFFICIENT_SIZE and *infoCount the number
 * needed (infos may be NULL when *infoCount is 0).
 */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>

#include "nvml_int.h"
#include "state.h"

#define NOT_MIG 0xFFFFFFFFu

/* The live processes of the device at handle, in *procs (freed by the caller). */
static nvmlReturn_t list(int dev, struct simst_proc **procs, int *n)
{
	int room = 0;

	for (;;) {
		*n = simst_procs(dev, *procs, room);
		if (*n < 0)
			return NVML_ERROR_UNKNOWN;
		if (*n <= room)
			return NVML_SUCCESS;
		free(*procs);
		room = *n;
		*procs = malloc(sizeof(**procs) * (size_t)room);
		if (!*procs)
			return NVML_ERROR_UNKNOWN;
	}
}

/*
 * The processes to report in infos, *infoCount of room: NVML_SUCCESS with
 * *infoCount = *n when they fit.
 */
static nvmlReturn_t running(nvmlDevice_t device, unsigned int *infoCount,
			    const void *infos, struct simst_proc **procs,
			    int *n)
{
	int dev = simnvml_enter(device, infoCount);
	nvmlReturn_t rc;

	*procs = NULL;
	*n = 0;
	if (dev < 0)
		return (nvmlReturn_t)-dev;
	rc = list(dev, procs, n);
	if (rc != NVML_SUCCESS)
		return rc;
	if (*infoCount < (unsigned int)*n) {
		*infoCount = (unsigned int)*n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	if (*n && !infos)
		return NVML_ERROR_INVALID_ARGUMENT;
	*infoCount = (unsigned int)*n;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
	nvmlDevice_t device, unsigned int *infoCount,
	nvmlProcessInfo_v1_t *infos)
{
	struct simst_proc *procs;
	int n;
	nvmlReturn_t rc = running(device, infoCount, infos, &procs, &n);

	for (int i = 0; rc == NVML_SUCCESS && i < n; i++)
		infos[i] = (nvmlProcessInfo_v1_t){ (unsigned int)procs[i].pid,
						   procs[i].used };
	free(procs);
	return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
	nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
	struct simst_proc *procs;
	int n;
	nvmlReturn_t rc = running(device, infoCount, infos, &procs, &n);

	for (int i = 0; rc == NVML_SUCCESS && i < n; i++)
		infos[i] = (nvmlProcessInfo_t){ (unsigned int)procs[i].pid,
						procs[i].used, NOT_MIG, NOT_MIG };
	free(procs);
	return rc;
}

/* _v2's struct is nvmlProcessInfo_t field for field (nvml.h). */
static_assert(sizeof(nvmlProcessInfo_v2_t) == sizeof(nvmlProcessInfo_t) &&
		      offsetof(nvmlProcessInfo_v2_t, computeInstanceId) ==
			      offsetof(nvmlProcessInfo_t, computeInstanceId),
	      "nvmlProcessInfo_v2_t is nvmlProcessInfo_t");

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
	nvmlDevice_t device, unsigned int *infoCount,
	nvmlProcessInfo_v2_t *infos)
{
	return nvmlDeviceGetComputeRunningProcesses_v3(
		device, infoCount, (nvmlProcessInfo_t *)infos);
}
