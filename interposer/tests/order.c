// SPDX-License-Identifier: Apache-2.0
/*
 * order: the simulated engine's order between streams (simcuda/stream.c,
 * book). Two non-blocking streams of one context; rounds of:
 *
 *   tail: k1 (900 us) and k2 (300 us) on s1, then kB (100 us) on s2. k2
 *         starts within a timeslice of its submission: it is in s1's
 *         hardware queue before kB and runs first, so kB ends no sooner
 *         than 1.3 ms after k1 was launched (after k1 alone: 1.0 ms). A
 *         host thread that wakes late only makes kB's end later, so the
 *         round counts on any load.
 *   deep: k1 (900 us), k2 (3 ms) and k3 (20 ms) on s1, then kB on s2. k3
 *         would start past a timeslice: it takes its turn when s1 reaches
 *         it, after kB, and s1 is still busy when kB is done (unless the
 *         host woke 20 ms late).
 *
 * Prints tail_first= (rounds where kB ended after k2) and deep_turns=
 * (rounds where s1 was still busy when kB was done), of rounds=. Run
 * without the shim: this is the driver's behaviour.
 */
#include <time.h>

#include "common.h"

#define ORDER_ROUNDS 20

static CUfunction f;

static bool launch(CUstream s, uint64_t ns)
{
	void *params[] = { &ns };

	return CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params,
				       NULL));
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * One round: kernels of us[0..n) on s1, then 100 us on s2, waited for.
 * *took: from the first launch to kB's end as seen; returns whether s1
 * was done then, or -1.
 */
static int round_run(CUstream s1, CUstream s2, const uint64_t *us, int n,
		     uint64_t *took)
{
	uint64_t t0 = mono_ns();
	CUresult rc;

	for (int i = 0; i < n; i++)
		if (!launch(s1, us[i] * 1000))
			return -1;
	if (!launch(s2, 100000) || !CHECK(cu.cuStreamSynchronize(s2)))
		return -1;
	*took = mono_ns() - t0;
	rc = cu.cuStreamQuery(s1);
	if (!CHECK(cu.cuStreamSynchronize(s1)))
		return -1;
	return rc == CUDA_SUCCESS;
}

int cmd_order(int argc, char **argv)
{
	static const uint64_t tail[] = { 900, 300 },
			      deep[] = { 900, 3000, 20000 };
	int tail_first = 0, deep_turns = 0, r;
	CUstream s1, s2;
	uint64_t took;
	CUmodule mod;

	(void)argv;
	if (argc != 0)
		dief("usage: order");
	load_cuda();
	NEED(cuStreamQuery);
	open_primary(0);
	if (!CHECK(cu.cuModuleLoadData(&mod, spin_ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&f, mod, "spin")) ||
	    !CHECK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)) ||
	    !CHECK(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING)))
		return finish("order");
	for (int i = 0; i < ORDER_ROUNDS; i++) {
		if (round_run(s1, s2, tail, 2, &took) < 0)
			return finish("order");
		/* 1.3 ms when k2 ran first; a little off for the clocks. */
		tail_first += took >= 1250000;
		r = round_run(s1, s2, deep, 3, &took);
		if (r < 0)
			return finish("order");
		deep_turns += !r;
	}
	printf("rounds=%d\ntail_first=%d\ndeep_turns=%d\n", ORDER_ROUNDS,
	       tail_first, deep_turns);
	return finish("order");
}
