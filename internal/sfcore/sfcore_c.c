// SPDX-License-Identifier: Apache-2.0
/*
 * The shim's schedule file, compiled into package sfcore from the shim's
 * own sources (one implementation), and a reader of the core's state in
 * it for the tests. The ledger file's helpers and the scheduler core it
 * builds on come in through their own translation units (ledger_c.c,
 * core_c.c): their static helpers share names.
 */
#include "sched_file.c"
#include "sched_file_open.c"

#include "sfcore_c.h"

void gs_sfc_state(const struct gs_sf *sf, struct gs_sfc_state *st)
{
	const struct gs_card *c = &sf->h->core;
	int id = sf->vgpu >= 0 ? sf->h->vgpu[sf->vgpu].core_id : -1;

	st->owner = c->owner;
	st->drainer = c->drainer;
	st->slice_start = c->slice_start;
	st->slice_end = c->slice_end;
	st->holding = id >= 0 ? c->vgpu[id].holding : 0;
	st->debt_ns = id >= 0 ? c->vgpu[id].debt_ns : 0;
}
