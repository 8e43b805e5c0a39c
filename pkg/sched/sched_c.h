/* SPDX-License-Identifier: Apache-2.0 */
/* Benchmark loops over the scheduler core, for package sched's benchmarks. */
#ifndef GS_SCHED_C_H
#define GS_SCHED_C_H

#include "gs_sched.h"

u64 gs_bench_handover(struct gs_card *c, u64 now, u64 n);
u64 gs_bench_peek(const struct gs_card *c, u64 now, u64 n);
u64 gs_bench_may_run(const struct gs_card *c, u64 now, u64 n);

#endif /* GS_SCHED_C_H */
