// SPDX-License-Identifier: Apache-2.0
/*
 * The compute gate's launch budget (gate.c), admission. The drain charges
 * what a slice's work runs past its end, at most 100 ms of it; a process
 * that queues far more than a slice can run
 * (20 ms kernels, 64 in flight) would still take its neighbours' time.
 * So a slice admits a budget of launches: when the last fence found work
 * running more than two slices past the slice's end, the budget is the
 * launches of that slice scaled to what one slice runs, but at most
 * halved at a time (a fence made late by a busy CPU must not throttle a
 * tenant whose kernels are short) and at least one; while fences find
 * less, it doubles, and past GS_BUDGET_MAX it is lifted.
 * A process starts at GS_BUDGET_START, so that its first slice cannot
 * queue seconds of work before any fence has measured it (lifted after
 * eight slices of short work). Kernel lengths are not known to the gate;
 * the fence measures them.
 */
#include "gate_int.h"

void gs_budget_update(struct gs_gate_card *g, uint32_t n, uint64_t spill)
{
	uint64_t slice = g->page ? __atomic_load_n(&g->page->slice_ns,
						   __ATOMIC_RELAXED) : 0;
	uint32_t b = __atomic_load_n(&g->budget, __ATOMIC_RELAXED);

	if (!slice || !n)
		return;
	if (spill > 2 * slice) {
		uint64_t fit = (uint64_t)n * slice / (slice + spill);

		/* At most halved at a time: one late fence is no verdict. */
		b = fit > n / 2 ? (uint32_t)fit : n / 2;
		b = b ? b : 1;
	} else if (b) {
		b = b >= GS_BUDGET_MAX / 2 ? 0 : b * 2;
	}
	__atomic_store_n(&g->budget, b, __ATOMIC_RELAXED);
}

