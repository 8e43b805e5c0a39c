/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The text form of a GPU's UUID, as NVML's nvmlDeviceGetUUID writes it and
 * CUDA_VISIBLE_DEVICES names a device: "GPU-" and the 16 bytes of
 * cuDeviceGetUuid in lowercase hex, grouped 8-4-4-4-12. The simulated
 * driver, the shim and the test programs all compare UUIDs in this form,
 * so CUDA's bytes and NVML's string name a device the same way.
 */
#ifndef GPUSLICE_UUID_H
#define GPUSLICE_UUID_H

#include <stdio.h>

/* "GPU-" + 32 hex digits + 4 dashes + NUL. */
#define GS_UUID_STR_LEN 41

static inline void gs_uuid_format(const unsigned char b[16],
				  char out[GS_UUID_STR_LEN])
{
	snprintf(out, GS_UUID_STR_LEN,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
		 b[10], b[11], b[12], b[13], b[14], b[15]);
}

#endif /* GPUSLICE_UUID_H */
