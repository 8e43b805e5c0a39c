/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cgo side of package ledger: the C ledger (interposer/src/ledger_file*.c,
 * compiled into this package by ledger_c.c) plus test hooks that reach
 * into it. The hooks are only called through unexported Go functions.
 */
#ifndef GPUSLICE_PKG_LEDGER_C_H
#define GPUSLICE_PKG_LEDGER_C_H

#include <stdint.h>

#include "ledger.h"
#include "ledger_file_layout.h"

static inline int gs_go_charge(struct gs_ledger *l, uint64_t bytes)
{
	return gs_ledger_charge(l, bytes);
}

static inline void gs_go_uncharge(struct gs_ledger *l, uint64_t bytes)
{
	gs_ledger_uncharge(l, bytes);
}

static inline int gs_go_usage(struct gs_ledger *l, uint64_t *used,
			      uint64_t *cap)
{
	return gs_ledger_usage(l, used, cap);
}

static inline void gs_go_close(struct gs_ledger *l)
{
	l->ops->close(l);
}

/* A consistent snapshot, taken under the lock, without reaping. */
struct gs_lf_test_state {
	uint64_t used;		/* the header's total */
	uint64_t sum;		/* sum of the USED slots' bytes */
	uint64_t cap;
	uint64_t in_use;	/* USED slots */
	uint64_t owner_dead;	/* lock recoveries so far */
	uint64_t reaped;
	int64_t slot;		/* this handle's slot, -1 if none */
};

int gs_lf_test_state(struct gs_ledger *l, struct gs_lf_test_state *st);
int gs_lf_test_lock_and_hang(struct gs_ledger *l, uint64_t scribble);
int gs_lf_test_storm(struct gs_ledger *l, int threads, uint64_t iters,
		     uint64_t seed, uint64_t max_bytes);
int gs_lf_test_fork(struct gs_ledger *l, uint64_t bytes, uint64_t expect_used,
		    int leak);
int gs_lf_test_fork_storm(struct gs_ledger *l, int threads, int forks);
int64_t gs_lf_test_bench(struct gs_ledger *l, uint64_t pairs,
			 uint64_t bytes);

#endif /* GPUSLICE_PKG_LEDGER_C_H */
