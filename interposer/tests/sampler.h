/* SPDX-License-Identifier: Apache-2.0 */
/* The tenant's interval sampler (sampler.c). */
#ifndef GSTEST_SAMPLER_H
#define GSTEST_SAMPLER_H

#include <pthread.h>
#include <stdint.h>

typedef int (*sampler_stats_fn)(int, int, uint64_t *, uint64_t *);

struct sampler {
	sampler_stats_fn stats;
	pthread_t thread;
	uint64_t t0, busy0, iv_ns;
	uint64_t *busy;		/* engine ns of each interval */
	int max, n, stop;
};

/*
 * Samples the process's engine time on device 0 every iv_ns from t0
 * (busy0 its engine time then) for at most seconds; 0 or -1.
 */
int sampler_start(struct sampler *s, sampler_stats_fn stats, uint64_t t0,
		  uint64_t busy0, uint64_t iv_ns, uint64_t seconds);
/* Stops and prints iv_ns= and iv_busy_ns= (the complete intervals). */
void sampler_finish(struct sampler *s);

#endif /* GSTEST_SAMPLER_H */
