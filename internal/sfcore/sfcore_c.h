/* SPDX-License-Identifier: Apache-2.0 */
#ifndef GS_SFCORE_C_H
#define GS_SFCORE_C_H

#include <stdint.h>

#include "sched_file.h"

/* The core's view of the card, from the file, for one process's vGPU. */
struct gs_sfc_state {
	int32_t owner, drainer;
	uint64_t slice_start, slice_end;
	uint32_t holding;	/* the core waits for the vGPU's drain */
	uint64_t debt_ns;
};

void gs_sfc_state(const struct gs_sf *sf, struct gs_sfc_state *st);

#endif
