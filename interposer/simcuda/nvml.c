// SPDX-License-Identifier: Apache-2.0
/*
 * The simulated libnvidia-ml.so.1: the machine-wide view of the same
 * simulated devices (state.c), as monitoring tools and device plugins see
 * them. Memory "used" is the physical memory in use by all processes.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <gpuslice/nvml.h>
#include <gpuslice/uuid.h>

#include "nodes.h"
#include "nvml_int.h"
#include "state.h"

/* Handles point into this array, so they validate by address. */
static struct nvmlDevice_st devices[SIMST_MAX_DEV];
static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;

static void at_prepare(void)
{
	pthread_mutex_lock(&nvml_lock);
}

static void at_parent(void)
{
	pthread_mutex_unlock(&nvml_lock);
}

/* A forked child starts uninitialised, with its own process slot. */
static void at_child(void)
{
	pthread_mutex_init(&nvml_lock, NULL);
	init_count = 0;
	simst_forked();
	simnode_forked();
}

__attribute__((constructor)) static void nvml_constructor(void)
{
	pthread_atfork(at_prepare, at_parent, at_child);
}

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	nvmlReturn_t rc = NVML_SUCCESS;

	(void)flags;	/* NO_GPUS / NO_ATTACH change nothing here */
	pthread_mutex_lock(&nvml_lock);
	/* Initialised anew: the machine of the environment now. */
	if (!init_count)
		simst_detach();
	/* The control node first, as the real NVML (nodes.c). */
	if (simnode_ctl()) {
		rc = NVML_ERROR_UNKNOWN;
	} else if (simst_attach() != SIMST_OK) {
		rc = NVML_ERROR_UNKNOWN;
		if (!init_count)
			simnode_ctl_close();
	} else {
		for (int i = 0; i < SIMST_MAX_DEV; i++)
			devices[i].index = (unsigned int)i;
		if (!init_count)
			simnvml_util_baseline();
		init_count++;
	}
	pthread_mutex_unlock(&nvml_lock);
	return rc;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
	return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlInit(void)
{
	return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t rc = NVML_SUCCESS;

	pthread_mutex_lock(&nvml_lock);
	if (!init_count)
		rc = NVML_ERROR_UNINITIALIZED;
	else if (!--init_count)
		simnode_ctl_close();
	pthread_mutex_unlock(&nvml_lock);
	return rc;
}

static int initialised(void)
{
	int n;

	pthread_mutex_lock(&nvml_lock);
	n = init_count;
	pthread_mutex_unlock(&nvml_lock);
	return n > 0;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
	/* Return codes of the calls nvml_int.h adds. */
	if ((int)result == SIMNVML_ERROR_TIMEOUT)
		return "Timeout";
	switch (result) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_NO_PERMISSION:
		return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return "Function Not Found";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
		return "Argument Version Mismatch";
	case NVML_ERROR_UNKNOWN:
		return "Unknown Error";
	}
	return "Unknown Error";
}

/* Copies s with its NUL into buf, or says the buffer is too small. */
static nvmlReturn_t copy_out(char *buf, unsigned int length, const char *s)
{
	if (!buf)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version,
						 unsigned int length)
{
	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	return copy_out(version, length, "570.00.01");
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	if (!deviceCount)
		return NVML_ERROR_INVALID_ARGUMENT;
	*deviceCount = (unsigned int)simst_ndev();
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
						    nvmlDevice_t *device)
{
	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	if (!device || index >= (unsigned int)simst_ndev())
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return NVML_SUCCESS;
}

/* The index of a valid handle, or -1; never dereferences a foreign one. */
static int dev_index(nvmlDevice_t device)
{
	for (int i = 0; i < simst_ndev(); i++)
		if (device == &devices[i])
			return i;
	return -1;
}

/* Checks initialisation, the handle and out; the device index or -error. */
static int enter(nvmlDevice_t device, const void *out)
{
	int i;

	if (!initialised())
		return -NVML_ERROR_UNINITIALIZED;
	i = dev_index(device);
	if (i < 0 || !out)
		return -NVML_ERROR_INVALID_ARGUMENT;
	return i;
}

int simnvml_enter(nvmlDevice_t device, const void *out)
{
	return enter(device, out);
}

nvmlDevice_t simnvml_handle(int i)
{
	return &devices[i];
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device,
					 unsigned int *index)
{
	int i = enter(device, index);

	if (i < 0)
		return (nvmlReturn_t)-i;
	*index = (unsigned int)i;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
					       unsigned int *minorNumber)
{
	return nvmlDeviceGetIndex(device, minorNumber);
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name,
					unsigned int length)
{
	int i = enter(device, name);

	if (i < 0)
		return (nvmlReturn_t)-i;
	return copy_out(name, length, simst_name());
}

/* Device i's UUID as NVML writes it: cuDeviceGetUuid's bytes in text. */
static void uuid_of(int i, char s[GS_UUID_STR_LEN])
{
	unsigned char b[16];

	simst_uuid(i, b);
	gs_uuid_format(b, s);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid,
					unsigned int length)
{
	int i = enter(device, uuid);
	char s[GS_UUID_STR_LEN];

	if (i < 0)
		return (nvmlReturn_t)-i;
	uuid_of(i, s);
	return copy_out(uuid, length, s);
}

/* The whole UUID, as NVML wants it: no prefixes here. */
NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid,
						nvmlDevice_t *device)
{
	char s[GS_UUID_STR_LEN];

	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	if (!uuid || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < simst_ndev(); i++) {
		uuid_of(i, s);
		if (!strcmp(s, uuid)) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

/*
 * Device i on bus 0x10 + i of domain 0, as cuDeviceGetPCIBusId says, in
 * NVML's formats (upper-case hex, an 8-digit domain in busId); a Turing
 * device id (0x1eb8, a T4's) of NVIDIA's vendor id 0x10de.
 */
NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device,
					      nvmlPciInfo_t *pci)
{
	int i = enter(device, pci);

	if (i < 0)
		return (nvmlReturn_t)-i;
	memset(pci, 0, sizeof(*pci));
	pci->bus = 0x10 + (unsigned int)i;
	pci->pciDeviceId = 0x1eb8U << 16 | 0x10deU;
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0",
		 (unsigned char)pci->bus);
	snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0",
		 (unsigned char)pci->bus);
	return NVML_SUCCESS;
}

static nvmlReturn_t mem_info(int i, unsigned long long *total,
			     unsigned long long *used)
{
	uint64_t u;

	if (simst_used(i, &u))
		return NVML_ERROR_UNKNOWN;
	*total = simst_capacity(i);
	*used = u < *total ? u : *total;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
					      nvmlMemory_t *memory)
{
	int i = enter(device, memory);
	nvmlReturn_t rc;

	if (i < 0)
		return (nvmlReturn_t)-i;
	rc = mem_info(i, &memory->total, &memory->used);
	if (rc == NVML_SUCCESS)
		memory->free = memory->total - memory->used;
	return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
						 nvmlMemory_v2_t *memory)
{
	int i = enter(device, memory);
	nvmlReturn_t rc;

	if (i < 0)
		return (nvmlReturn_t)-i;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	rc = mem_info(i, &memory->total, &memory->used);
	if (rc == NVML_SUCCESS) {
		memory->reserved = 0;
		memory->free = memory->total - memory->used;
	}
	return rc;
}
