/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The busy time a slice's fence reports (gate_fencer.c): a span of wall
 * time, not engine time (the driver gives no engine time per context).
 * Kept apart, without the shim's other headers, so that gstest checks the
 * arithmetic on the cases a loaded machine makes rare.
 */
#ifndef GPUSLICE_GATE_SPAN_H
#define GPUSLICE_GATE_SPAN_H

#include <stdbool.h>
#include <stdint.h>

/*
 * The span of work launched from first (0: nothing launched) in a slice
 * ending at end (0: unknown), known complete at done: the fence's end
 * when it had to wait (waited), else its start, when all of it had run
 * already. Work the fence found done ran in its slice as far as anyone
 * knows, so its span stops at the slice's end. But a process descheduled
 * between its acquire and its launch launches after that end: all of its
 * work ran in the drain, up to done, and stopping at the end would report
 * nothing at all.
 */
static inline uint64_t gs_gate_span(uint64_t first, uint64_t end,
				    uint64_t done, bool waited)
{
	uint64_t stop = done;

	if (!first)
		return 0;
	if (!waited && end > first && end < done)
		stop = end;
	return stop > first ? stop - first : 0;
}

#endif
