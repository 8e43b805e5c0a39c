// SPDX-License-Identifier: Apache-2.0
/*
 * gstest hostwait <rounds> <kernel_us>: queued work that waits for a thread
 * which is itself waiting in the gate must not deadlock the process.
 *
 * Each round, thread A launches a kernel on its stream and then a host
 * function (cuLaunchHostFunc) that waits until thread B says so; B waits
 * for the slice A launched in to be over (three slices of
 * GPUSLICE_SLICE_MS), launches a kernel on a stream of its own, and only
 * then lets A's host function return. A gate that waits for A's stream
 * while it holds the lock B's launch needs (or without a bound) never lets
 * B launch: the host function would wait for ever. Here it gives up
 * after 10 s, and the round counts as a deadlock.
 *
 * Prints rounds, deadlocks and b_launch_max_ns (the longest B's launch
 * took).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "common.h"

#define GIVE_UP_NS (10ULL * 1000000000ULL)

struct round {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool released;
	bool timed_out;
};

/* A's host function: waits for B, at most GIVE_UP_NS. */
static void wait_for_b(void *arg)
{
	struct round *r = arg;
	struct timespec until;
	int err = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)(GIVE_UP_NS / 1000000000ULL);
	pthread_mutex_lock(&r->lock);
	while (!r->released && err != ETIMEDOUT)
		err = pthread_cond_timedwait(&r->cv, &r->lock, &until);
	r->timed_out = !r->released;
	pthread_mutex_unlock(&r->lock);
}

struct b_args {
	CUcontext ctx;
	CUfunction f;
	uint64_t ns;
	uint64_t wait_ns;
	struct round *r;
	uint64_t took;
};

static void *b_main(void *arg)
{
	struct b_args *b = arg;
	void *params[] = { &b->ns };
	struct timespec ts = { (time_t)(b->wait_ns / 1000000000ULL),
			       (long)(b->wait_ns % 1000000000ULL) };
	uint64_t t0;
	CUstream s;

	if (!CHECK(cu.cuCtxSetCurrent(b->ctx)) ||
	    !CHECK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)))
		return NULL;
	nanosleep(&ts, NULL);
	t0 = now_ns();
	CHECK(cu.cuLaunchKernel(b->f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
	b->took = now_ns() - t0;
	pthread_mutex_lock(&b->r->lock);
	b->r->released = true;
	pthread_cond_signal(&b->r->cv);
	pthread_mutex_unlock(&b->r->lock);
	CHECK(cu.cuStreamSynchronize(s));
	cu.cuStreamDestroy_v2(s);
	return NULL;
}

int cmd_hostwait(int argc, char **argv)
{
	const char *slice = getenv("GPUSLICE_SLICE_MS");
	long rounds, kernel_us, deadlocks = 0;
	uint64_t ns, slice_ns, took_max = 0;
	void *params[] = { &ns };
	CUcontext ctx;
	CUmodule mod;
	CUfunction f;
	CUstream a;

	if (argc != 2)
		dief("usage: hostwait <rounds> <kernel_us>");
	rounds = parse_long(argv[0], 1, 1000, "rounds");
	kernel_us = parse_long(argv[1], 0, 1000000, "kernel_us");
	ns = (uint64_t)kernel_us * 1000;
	slice_ns = (uint64_t)(slice ? parse_long(slice, 1, 100,
						 "GPUSLICE_SLICE_MS") : 5) *
		   1000000ULL;
	load_cuda();
	ctx = open_primary(0);
	if (!CHECK(cu.cuModuleLoadData(&mod, spin_ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&f, mod, "spin")) ||
	    !CHECK(cu.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING)))
		return finish("hostwait");
	for (long i = 0; i < rounds; i++) {
		struct round r = { .lock = PTHREAD_MUTEX_INITIALIZER,
				   .cv = PTHREAD_COND_INITIALIZER };
		struct b_args b = { .ctx = ctx, .f = f, .ns = ns,
				    .wait_ns = 3 * slice_ns, .r = &r };
		pthread_t t;

		if (!CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, a, params,
					     NULL)) ||
		    !CHECK(cu.cuLaunchHostFunc(a, wait_for_b, &r)))
			break;
		if (pthread_create(&t, NULL, b_main, &b))
			dief("hostwait: pthread_create failed");
		pthread_join(t, NULL);
		CHECK(cu.cuStreamSynchronize(a));
		if (r.timed_out)
			deadlocks++;
		if (b.took > took_max)
			took_max = b.took;
	}
	printf("rounds=%ld\n", rounds);
	printf("deadlocks=%ld\n", deadlocks);
	printf("b_launch_max_ns=%llu\n", (unsigned long long)took_max);
	if (deadlocks)
		failf("hostwait: %ld of %ld rounds deadlocked", deadlocks,
		      rounds);
	cu.cuStreamDestroy_v2(a);
	cu.cuModuleUnload(mod);
	close_primary(0);
	return finish("hostwait");
}
