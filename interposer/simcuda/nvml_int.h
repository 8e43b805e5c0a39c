/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal declarations of the simulated libnvidia-ml.so.1, shared by
 * nvml.c (devices, memory) and nvml_event.c (utilization, XID events).
 *
 * The types and values below are NVML's (NVIDIA's public nvml.h) for the
 * calls the node agent's monitoring makes; they are declared here rather
 * than in include/gpuslice/nvml.h, the subset the shim hooks.
 */
#ifndef SIMCUDA_NVML_INT_H
#define SIMCUDA_NVML_INT_H

#include <stdint.h>

#include <gpuslice/nvml.h>

#define NVML_API __attribute__((visibility("default")))

struct nvmlDevice_st {
	unsigned int index;
};

/* NVML_ERROR_TIMEOUT: nvmlEventSetWait found no event in time. */
#define SIMNVML_ERROR_TIMEOUT 10

/* nvmlEventTypeXidCriticalError, the only event type simulated. */
#define SIMNVML_EVENT_XID 0x8ULL

typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct nvmlEventData_st {
	nvmlDevice_t device;
	unsigned long long eventType;
	unsigned long long eventData;	/* the XID */
	unsigned int gpuInstanceId;	/* 0xFFFFFFFF: not a MIG instance */
	unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct nvmlUtilization_st {
	unsigned int gpu;	/* percent of the sample period with a kernel */
	unsigned int memory;
} nvmlUtilization_t;

/*
 * A process with a compute context on a device (nvml.h): the legacy layout
 * of nvmlDeviceGetComputeRunningProcesses, that of _v2, and nvmlProcessInfo_t
 * of _v3. gpuInstanceId and computeInstanceId are 0xFFFFFFFF outside MIG.
 */
typedef struct nvmlProcessInfo_v1_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct nvmlProcessInfo_v2_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef struct nvmlProcessInfo_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* The running processes of nvml_proc.c (NVIDIA's signatures). */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
						  unsigned int *infoCount,
						  nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
	nvmlDevice_t device, unsigned int *infoCount,
	nvmlProcessInfo_v2_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
						     unsigned int *infoCount,
						     nvmlProcessInfo_t *infos);

/* The NVML entry points of nvml_event.c (NVIDIA's signatures). */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
					   nvmlUtilization_t *utilization);
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
					      unsigned long long *types);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
				      unsigned long long types,
				      nvmlEventSet_t set);
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
			      unsigned int timeoutms);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
				 unsigned int timeoutms);

/* Checks initialisation, the handle and out: the device index or -error. */
int simnvml_enter(nvmlDevice_t device, const void *out);
/* The handle of device i (0 <= i < simst_ndev()). */
nvmlDevice_t simnvml_handle(int i);
/* Starts every device's utilization sample period (at nvmlInit). */
void simnvml_util_baseline(void);

#endif /* SIMCUDA_NVML_INT_H */
