// SPDX-License-Identifier: Apache-2.0
/*
 * The scheduler core itself, compiled into package sched from
 * kmod/core (one implementation), followed by the benchmark loops, which
 * time the core without a cgo call per operation.
 */
#include "gs_sched.c"
#include "gs_drain.c"

#include "sched_c.h"

/* n slice handovers, one slice apart; returns the time of the last. */
u64 gs_bench_handover(struct gs_card *c, u64 now, u64 n)
{
	u64 i;

	for (i = 0; i < n; i++) {
		now += c->cfg.slice_ns;
		gs_tick(c, now);
	}
	return now;
}

/* n scheduling decisions (who runs next); returns a checksum. */
u64 gs_bench_peek(const struct gs_card *c, u64 now, u64 n)
{
	u64 i, sum = 0;

	for (i = 0; i < n; i++)
		sum += (u64)(gs_peek_next(c, now + (i & 1)) + 2);
	return sum;
}

/* n fast-path checks; returns how many said yes. */
u64 gs_bench_may_run(const struct gs_card *c, u64 now, u64 n)
{
	u64 i, yes = 0;

	for (i = 0; i < n; i++)
		yes += gs_may_run(c, (int)(i & 63), now) ? 1 : 0;
	return yes;
}
