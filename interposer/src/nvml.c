// SPDX-License-Identifier: Apache-2.0
/*
 * NVML's view of memory, so nvidia-smi and monitoring libraries inside the
 * container see the vGPU's cap and use, as cuMemGetInfo does.
 */
#include "shim.h"

#define REAL_NVML(name)                                       \
	({                                                    \
		gs_load_nvml();                               \
		if (!gs_real.name)                            \
			return NVML_ERROR_FUNCTION_NOT_FOUND; \
		gs_real.name;                                 \
	})

/* total, used and free of the vGPU behind dev; false: leave the card's. */
static bool vgpu_memory(nvmlDevice_t dev, unsigned long long phys_free,
			unsigned long long *total, unsigned long long *used,
			unsigned long long *free)
{
	uint64_t u, cap;

	if (!gs_enabled())
		return false;
	if (!gs_card_usage(gs_card_for_nvml(dev), &u, &cap))
		u = cap = 0;
	*total = cap;
	*used = u < cap ? u : cap;
	*free = cap - *used < phys_free ? cap - *used : phys_free;
	return true;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
					       nvmlMemory_t *memory)
{
	nvmlReturn_t r = REAL_NVML(nvmlDeviceGetMemoryInfo)(device, memory);

	if (r == NVML_SUCCESS)
		vgpu_memory(device, memory->free, &memory->total,
			    &memory->used, &memory->free);
	return r;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
						  nvmlMemory_v2_t *memory)
{
	nvmlReturn_t r = REAL_NVML(nvmlDeviceGetMemoryInfo_v2)(device, memory);

	/* The driver's reservation is not the vGPU's: it shows as used 0. */
	if (r == NVML_SUCCESS &&
	    vgpu_memory(device, memory->free, &memory->total, &memory->used,
			&memory->free))
		memory->reserved = 0;
	return r;
}
