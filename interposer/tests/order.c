// SPDX-License-Identifier: Apache-2.0
/*
 * order: the simulated engine's order between streams (simcuda/stream.c,
 * book). Two non-blocking streams of one context; rounds of:
 *
 *   tail: k1 (900 us) and k2 (300 us) on s1, then kB (100 us) on s2. k2
 *         starts within a timeslice of its submission: it is in s1's
 *         hardware queue before kB and runs first, so when kB is done s1
 *         is done too (a stream's queued tail before a later submission).
 *   deep: k1, k2 (900 us each) and k3 (900 us) on s1, then kB on s2. k3
 *         would start past a timeslice: it takes its turn when s1 reaches
 *         it, after kB (a deeper queue takes turns).
 *
 * Prints tail_first= (rounds where s1 was done when kB was) and
 * deep_turns= (rounds where s1 was still busy when kB was done), of
 * rounds=. Run without the shim: this is the driver's behaviour.
 */
#include "common.h"

#define ORDER_ROUNDS 20

static CUfunction f;

static bool launch(CUstream s, uint64_t ns)
{
	void *params[] = { &ns };

	return CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params,
				       NULL));
}

/* One round: kernels of us[0..n) on s1, then 100 us on s2; s1 done then? */
static int round_done(CUstream s1, CUstream s2, const uint64_t *us, int n)
{
	CUresult rc;

	for (int i = 0; i < n; i++)
		if (!launch(s1, us[i] * 1000))
			return -1;
	if (!launch(s2, 100000) || !CHECK(cu.cuStreamSynchronize(s2)))
		return -1;
	rc = cu.cuStreamQuery(s1);
	if (!CHECK(cu.cuStreamSynchronize(s1)))
		return -1;
	return rc == CUDA_SUCCESS;
}

int cmd_order(int argc, char **argv)
{
	static const uint64_t tail[] = { 900, 300 }, deep[] = { 900, 900, 900 };
	int tail_first = 0, deep_turns = 0, r;
	CUstream s1, s2;
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
		r = round_done(s1, s2, tail, 2);
		if (r < 0)
			return finish("order");
		tail_first += r;
		r = round_done(s1, s2, deep, 3);
		if (r < 0)
			return finish("order");
		deep_turns += !r;
	}
	printf("rounds=%d\ntail_first=%d\ndeep_turns=%d\n", ORDER_ROUNDS,
	       tail_first, deep_turns);
	return finish("order");
}
