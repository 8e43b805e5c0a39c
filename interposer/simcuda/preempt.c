// SPDX-License-Identifier: Apache-2.0
/*
 * Compute preemption (SIMCUDA_PREEMPT_US). A GPU of Pascal or later (T4,
 * V100, ...; this one says it is compute capability 7.5, a T4) preempts a
 * running kernel when its context's timeslice ends and another context
 * has work, so a long kernel shares the engine with a neighbour's short
 * ones instead of running before them. So does this engine, by default
 * with the 1 ms timeslice of SIM_TIMESLICE_NS: a kernel longer than that
 * runs a timeslice at a time, each part booked on the engine as its
 * predecessor ends, and work another process booked meanwhile runs
 * between two parts. A process's streams take one part at a time between
 * them (a context has one timeslice, however many streams it has).
 * SIMCUDA_PREEMPT_US=n sets the timeslice to n microseconds; 0 runs a
 * kernel, once started, to its end, as a GPU without compute preemption
 * (Maxwell and older) does. CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED
 * says which.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "sim.h"

#define SIM_PREEMPT_MIN_US 100
#define SIM_PREEMPT_MAX_US 100000

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* The timeslice; 0: kernels run whole; -1: SIMCUDA_PREEMPT_US malformed. */
static int64_t preempt_ns = SIM_TIMESLICE_NS;
static pthread_mutex_t turn = PTHREAD_MUTEX_INITIALIZER;

static void read_preempt(void)
{
	const char *v = getenv("SIMCUDA_PREEMPT_US");
	char *end;
	long n;

	if (!v || !*v)
		return;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end ||
	    (n && (n < SIM_PREEMPT_MIN_US || n > SIM_PREEMPT_MAX_US))) {
		fprintf(stderr, "simcuda: SIMCUDA_PREEMPT_US=\"%s\" is invalid: expected 0 (kernels run whole) or a timeslice of %d..%d microseconds\n",
			v, SIM_PREEMPT_MIN_US, SIM_PREEMPT_MAX_US);
		preempt_ns = -1;
		return;
	}
	preempt_ns = (int64_t)n * 1000;
}

int sim_preempt_check(void)
{
	pthread_once(&once, read_preempt);
	return preempt_ns < 0 ? -1 : 0;
}

bool sim_preempt_supported(void)
{
	pthread_once(&once, read_preempt);
	return preempt_ns > 0;
}

bool sim_preempts(uint64_t duration_ns)
{
	pthread_once(&once, read_preempt);
	return preempt_ns > 0 && duration_ns > (uint64_t)preempt_ns;
}

uint64_t sim_run_preempted(int phys, uint64_t duration_ns, uint64_t ready)
{
	uint64_t left = duration_ns, end = ready, part;

	while (left) {
		part = left < (uint64_t)preempt_ns ? left : (uint64_t)preempt_ns;
		pthread_mutex_lock(&turn);
		end = simst_engine_book(phys, part, end, 0);
		simst_engine_part(phys, part, end);
		pthread_mutex_unlock(&turn);
		left -= part;
	}
	simst_engine_count(phys);
	return end;
}

void sim_preempt_forked(void)
{
	pthread_mutex_init(&turn, NULL);
}
