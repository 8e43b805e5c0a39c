/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * graphs: what CUDA-graph applications do, on a card whose compute vGPU
 * the module gates (the shim in module mode, on the simulated driver,
 * whose stream capture fails and invalidates a capture wherever the real
 * driver does). Policy 1, 20 ms slices (qemu TCG is slow), one vGPU of
 * 50 %:
 *
 *  - gstest capture: graphs captured in global, thread-local and relaxed
 *    mode while another thread launches, across slice ends: every capture
 *    succeeds, and their replays keep to the quota;
 *  - gstest hostwait: a host function that waits for a thread which
 *    launches after the slice's end does not deadlock the process (the
 *    fence waits without the gate's lock, at most to the drain's bound);
 *  - gstest paths ctxless: a CUkernel launched with no current context,
 *    on a stream of the card's context, is gated too.
 */
#include "gstest.h"
#include "gs_gstest.h"

#define P "graphs"
#define CARD 0
#define SLICE (20 * MS)
#define CAP (64ULL << 20)
#define CG "gsgraphs"

/* Engine time over wall time, in percent, from keys of c's output. */
static double pct(const struct gs_cmd *c, const char *busy, const char *wall)
{
	uint64_t w = gs_gstest_kv(c, wall), b = gs_gstest_kv(c, busy);

	return w && w != ~0ULL && b != ~0ULL ? 100.0 * (double)b / (double)w :
					       -1;
}

static int t_capture(void)
{
	struct gs_cmd c = { .cg = CG, .enforce = "module",
			    .argv = { "capture", "12",
				      "global,thread_local,relaxed", "2",
				      "2000", "1" } };
	double share;

	T(gs_gstest_run(&c) == 0, "gstest capture: status %d:\n%s", c.status,
	  c.out);
	TEQ(gs_gstest_kv(&c, "captures_ok"), 12);
	TEQ(gs_gstest_kv(&c, "captures_failed"), 0);
	share = pct(&c, "replay_busy_ns", "replay_wall_ns");
	T(share >= 0 && share <= 60, "replays took %.1f%% of wall time on 50%%:\n%s",
	  share, c.out);
	gs_info(P " capture: 12 graphs captured, replays %.1f%% of wall time (quota 50%%)",
		share);
	return 0;
}

static int t_hostwait(void)
{
	struct gs_cmd c = { .cg = CG, .enforce = "module",
			    .env = "GPUSLICE_SLICE_MS=20",
			    .argv = { "hostwait", "2", "2000" } };

	T(gs_gstest_run(&c) == 0, "gstest hostwait: status %d:\n%s", c.status,
	  c.out);
	TEQ(gs_gstest_kv(&c, "deadlocks"), 0);
	gs_info(P " hostwait: the waited-for launch took at most %.0f ms",
		(double)gs_gstest_kv(&c, "b_launch_max_ns") / 1e6);
	return 0;
}

static int t_ctxless(void)
{
	struct gs_cmd c = { .cg = CG, .enforce = "module",
			    .argv = { "paths", "ctxless", "2", "2000", "2" } };
	double share;

	T(gs_gstest_run(&c) == 0, "gstest paths ctxless: status %d:\n%s",
	  c.status, c.out);
	share = pct(&c, "busy_ns", "wall_ns");
	T(share >= 0 && share <= 60,
	  "a context-less launch took %.1f%% of wall time on 50%%:\n%s", share,
	  c.out);
	gs_info(P " ctxless: %.1f%% of wall time (quota 50%%)", share);
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	if (!gs_cg_create(CG) ||
	    gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_FIXED, 20, SLICE, 0) < 0 ||
	    gs_vgpu_create(gs_fd, CARD, gs_cg_id(CG), CAP, 50, 0,
			   GPUSLICE_MODE_COMPUTE) < 0) {
		gs_line("GSTEST " P " FAIL setup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("capture_in_every_mode", t_capture);
	gs_run("host_function_no_deadlock", t_hostwait);
	gs_run("context_less_launch_gated", t_ctxless);
	return gs_finish();
}
