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
 * queue seconds of work before any fence has measured it. Kernel lengths
 * are not known to the gate; the fence measures them.
 *
 * The warm-up. Until a fence has found work spilling, a launch over the
 * budget probes (gs_budget_warm_locked): it waits, at most until the
 * slice's end, for what the slice's streams have queued so far; when that
 * ran within the slice the kernels are short, the budget doubles and the
 * slice goes on. So a process of short kernels is not held to four of
 * them in its first slices (which cost its first 100 ms 8-26 points of
 * its share), and one that queues long work still queues at most one
 * budget past what it saw run: the probe fails, it waits the slice out.
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

		g->budget_cut = true;

		/* At most halved at a time: one late fence is no verdict. */
		b = fit > n / 2 ? (uint32_t)fit : n / 2;
		b = b ? b : 1;
	} else if (b) {
		b = b >= GS_BUDGET_MAX / 2 ? 0 : b * 2;
	}
	__atomic_store_n(&g->budget, b, __ATOMIC_RELAXED);
}

bool gs_budget_warm_locked(struct gs_gate_card *g, uint64_t end)
{
	uint32_t b = __atomic_load_n(&g->budget, __ATOMIC_RELAXED);

	if (g->budget_cut || !b || !gs_fence_probe_locked(g, end))
		return false;
	/* The launches counted stay: the budget makes room for b more. */
	b = __atomic_load_n(&g->budget, __ATOMIC_RELAXED);
	if (b)
		__atomic_store_n(&g->budget, b >= GS_BUDGET_MAX / 2 ? 0 : b * 2,
				 __ATOMIC_RELAXED);
	return true;
}
