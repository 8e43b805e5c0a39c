// SPDX-License-Identifier: Apache-2.0
/*
 * The no-module schedule file's page (sched_file.c): published under its
 * sequence count, and slept on (a futex on that count, shared through the
 * file's mapping: every change of the page wakes its sleepers).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <limits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>

#include "sched_file_int.h"

static long sf_futex(const uint32_t *word, int op, uint32_t val,
		     const struct timespec *ts)
{
	return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

/* Rewrites the page under its sequence count when it changed; locked. */
void gs_sf_publish(struct gs_sf_header *h)
{
	struct gpuslice_sched_page *p = &h->pub.page;
	const struct gs_card *c = &h->core;
	uint32_t seq = __atomic_load_n(&p->seq, __ATOMIC_RELAXED);

	if (!(seq & 1) &&
	    __atomic_load_n(&p->owner, __ATOMIC_RELAXED) == gs_owner(c) &&
	    __atomic_load_n(&p->slice_end_ns, __ATOMIC_RELAXED) ==
		    gs_slice_end(c) &&
	    __atomic_load_n(&p->handovers, __ATOMIC_RELAXED) == c->handovers)
		return;
	if (seq & 1)	/* a writer died half-way */
		seq++;
	__atomic_store_n(&p->seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&p->owner, gs_owner(c), __ATOMIC_RELAXED);
	__atomic_store_n(&p->slice_start_ns, c->slice_start, __ATOMIC_RELAXED);
	__atomic_store_n(&p->slice_end_ns, gs_slice_end(c), __ATOMIC_RELAXED);
	__atomic_store_n(&p->policy, c->cfg.policy, __ATOMIC_RELAXED);
	__atomic_store_n(&p->slice_ns, c->cfg.slice_ns, __ATOMIC_RELAXED);
	__atomic_store_n(&p->max_inst, c->cfg.max_inst, __ATOMIC_RELAXED);
	__atomic_store_n(&p->mode, GPUSLICE_MODE_COMPUTE, __ATOMIC_RELAXED);
	__atomic_store_n(&p->handovers, c->handovers, __ATOMIC_RELAXED);
	__atomic_store_n(&p->seq, seq + 2, __ATOMIC_RELEASE);
	/* Shared (not FUTEX_PRIVATE): the sleepers are other processes. */
	sf_futex(&p->seq, FUTEX_WAKE, INT_MAX, NULL);
}

void gs_sf_page_wait(const struct gpuslice_sched_page *p, uint32_t seq,
		     uint64_t deadline)
{
	uint64_t now = mono();
	struct timespec ts;
	int slack;

	if (deadline <= now)
		return;
	ts.tv_sec = (time_t)((deadline - now) / 1000000000ull);
	ts.tv_nsec = (long)((deadline - now) % 1000000000ull);
	/*
	 * The deadline is a slice's end or a drain's bound: the next owner
	 * waiting in acquire must wake then, not the 50 us of default timer
	 * slack later with the card idle. The caller's slack comes back.
	 */
	slack = prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
	if (slack > 1)
		prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	/* EAGAIN (changed already), EINTR, ETIMEDOUT: the caller looks again. */
	sf_futex(&p->seq, FUTEX_WAIT, seq, &ts);
	if (slack > 1)
		prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0UL, 0UL, 0UL);
}
