// SPDX-License-Identifier: Apache-2.0
/*
 * The tenant's interval sampler (tenant.c, "iv=<ms>"): a thread that reads
 * the tenant's own engine time (simcudaEngineStats) at t0 + k x iv, so
 * that a test sees the share of every interval from the first, not only
 * the whole run's. The simulated engine counts a kernel when it ends: an
 * interval's figure is off by at most one kernel that straddles its edge.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "sampler.h"

static void sleep_until(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / 1000000000ULL),
		.tv_nsec = (long)(ns % 1000000000ULL),
	};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
		;
}

static void *sampler_main(void *arg)
{
	struct sampler *s = arg;
	uint64_t busy, kernels, prev = s->busy0;

	/* On time at every edge: no 50 us of timer slack. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	for (int k = 0; k < s->max; k++) {
		sleep_until(s->t0 + (uint64_t)(k + 1) * s->iv_ns);
		if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE))
			break;
		if (s->stats(0, (int)getpid(), &busy, &kernels) != 0)
			busy = prev;
		s->busy[k] = busy - prev;
		prev = busy;
		__atomic_store_n(&s->n, k + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

int sampler_start(struct sampler *s, sampler_stats_fn stats, uint64_t t0,
		  uint64_t busy0, uint64_t iv_ns, uint64_t seconds)
{
	s->stats = stats;
	s->t0 = t0;
	s->busy0 = busy0;
	s->iv_ns = iv_ns;
	s->max = (int)(seconds * 1000000000ULL / iv_ns);
	s->n = 0;
	s->stop = 0;
	s->busy = calloc((size_t)s->max + 1, sizeof(*s->busy));
	if (!s->busy || !s->max)
		return -1;
	return pthread_create(&s->thread, NULL, sampler_main, s) ? -1 : 0;
}

void sampler_finish(struct sampler *s)
{
	int n;

	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
	pthread_join(s->thread, NULL);
	n = __atomic_load_n(&s->n, __ATOMIC_ACQUIRE);
	printf("iv_ns=%llu\n", (unsigned long long)s->iv_ns);
	printf("iv_busy_ns=");
	for (int k = 0; k < n; k++)
		printf("%s%llu", k ? "," : "", (unsigned long long)s->busy[k]);
	printf("\n");
	free(s->busy);
}
