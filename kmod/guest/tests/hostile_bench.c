/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * hostile_bench: what a hostile tenant costs its neighbours, in one run
 * (issue 14's benchmark; reported, not asserted: the tests hold, kmem,
 * contend and flood assert). GSBENCH lines:
 *
 *   open_attach_close_{p50,p99}_{alone,hostile}   another tenant's call
 *   card_get_{p50,p99}_{alone,hostile}            the agent's CARD_GET
 *   *_ratio                                       hostile / alone
 *   victim_share_{behaved,holder,flood}           % of wall time it ran,
 *                                                 policy 1, 20 x 5 ms
 *   victim_granted_{behaved,holder,flood}         % of wall time granted
 *   victim_longest_wait_{behaved,holder,flood}    ms in ACQUIRE
 *
 * The hostile tenant of the latencies holds 24,000 open files (attached
 * as far as the per-vGPU bound lets it) and runs 4 threads reading
 * /proc/gpuslice/procs and vgpus; the holder takes every slice with
 * ACQUIRE_HOLD and never releases (behaved: it releases at the end, as
 * the shim's fencer does), 50/50; the flood is 320 threads of one tenant
 * in ACQUIRE on a 5 % vGPU, next to the 50 % victim (whose fair share
 * is 50 % of wall time in both). Every tenant is unprivileged
 * (hostile.h).
 */
#include "hostile.h"

#define P "hostile_bench"
#define CARD 12
#define NFILES 24000

struct shm {
	struct hs_contend c;
	struct hs_victim v;
	struct hs_hold h;
	struct hs_flood f;
};
static struct shm *sh;

static void lat(const char *what, const struct hs_lat *b,
		const struct hs_lat *h)
{
	gs_line("GSBENCH " P " %s_p50_alone %.3f ms", what, hs_ms(b->p50));
	gs_line("GSBENCH " P " %s_p99_alone %.3f ms", what, hs_ms(b->p99));
	gs_line("GSBENCH " P " %s_p50_hostile %.3f ms", what, hs_ms(h->p50));
	gs_line("GSBENCH " P " %s_p99_hostile %.3f ms", what, hs_ms(h->p99));
	gs_line("GSBENCH " P " %s_p50_ratio %.1f x", what,
		hs_ratio(h->p50, b->p50, 1));
	gs_line("GSBENCH " P " %s_p99_ratio %.1f x", what,
		hs_ratio(h->p99, b->p99, 1));
}

static int t_latency(void)
{
	memset(sh, 0, sizeof(*sh));
	sh->c.card = CARD;
	sh->c.base_ms = 1500;
	sh->c.hostile_ms = 3000;
	sh->c.hog.nfiles = NFILES;
	sh->c.hog.nreaders = 4;
	if (hs_contend_run(&sh->c, "gsxV", "gsxH", gs_fd) < 0)
		return -1;
	lat("open_attach_close", &sh->c.att_base, &sh->c.att_hostile);
	lat("card_get", &sh->c.get_base, &sh->c.get_hostile);
	return 0;
}

static int pair(uint32_t quota_h)
{
	gs_destroy_all(gs_fd);
	TOK(gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_FIXED, 20, 0, 0));
	T(gs_vgpu_create(gs_fd, CARD, gs_cg_id("gsxV"), 64 << 20, 50, 0,
			 GPUSLICE_MODE_COMPUTE) >= 0, "vGPU V: %s",
	  gs_errname(errno));
	T(gs_vgpu_create(gs_fd, CARD, gs_cg_id("gsxH"), 64 << 20, quota_h, 0,
			 GPUSLICE_MODE_COMPUTE) >= 0, "vGPU H: %s",
	  gs_errname(errno));
	memset(sh, 0, sizeof(*sh));
	sh->v.card = sh->h.card = sh->f.card = CARD;
	return 0;
}

static void share(const char *tag)
{
	gs_line("GSBENCH " P " victim_share_%s %.1f %%", tag,
		hs_victim_share(&sh->v));
	gs_line("GSBENCH " P " victim_granted_%s %.1f %%", tag,
		hs_victim_granted(&sh->v));
	gs_line("GSBENCH " P " victim_longest_wait_%s %.1f ms", tag,
		hs_ms(sh->v.max_wait));
}

static double behaved;

static int t_behaved(void)
{
	if (pair(50) < 0)
		return -1;
	sh->h.release = 1;
	if (hs_victim_next_to(&sh->v, "gsxV", "gsxH", hs_holder_run, &sh->h,
			      &sh->h.ready, &sh->h.stop, 300, 2000) < 0)
		return -1;
	share("behaved");
	behaved = hs_victim_share(&sh->v);
	return 0;
}

static int t_holder(void)
{
	if (pair(50) < 0)
		return -1;
	if (hs_victim_next_to(&sh->v, "gsxV", "gsxH", hs_holder_run, &sh->h,
			      &sh->h.ready, &sh->h.stop, 300, 2000) < 0)
		return -1;
	share("holder");
	if (behaved > 0)
		gs_line("GSBENCH " P " victim_share_holder_ratio %.2f x",
			hs_victim_share(&sh->v) / behaved);
	return 0;
}

static int t_flood(void)
{
	if (pair(5) < 0)
		return -1;
	sh->f.nthreads = 320;
	if (hs_victim_next_to(&sh->v, "gsxV", "gsxH", hs_flood_run, &sh->f,
			      &sh->f.ready, &sh->f.stop, 300, 2000) < 0)
		return -1;
	share("flood");
	if (behaved > 0)
		gs_line("GSBENCH " P " victim_share_flood_ratio %.2f x",
			hs_victim_share(&sh->v) / behaved);
	gs_info(P " flood: %llu grants, %llu refused (EUSERS)",
		(unsigned long long)sh->f.grants,
		(unsigned long long)sh->f.eusers);
	return 0;
}

int main(void)
{
	gs_init(P, 110);
	sh = gs_shm(sizeof(*sh));
	if (hs_raise_nofile(NFILES + 256) < 0 || !gs_cg_create("gsxV") ||
	    !gs_cg_create("gsxH") ||
	    gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    gs_vgpu_create(gs_fd, CARD, gs_cg_id("gsxV"), 64 << 20, 0, 0,
			   GPUSLICE_MODE_MEMORY) < 0 ||
	    gs_vgpu_create(gs_fd, CARD, gs_cg_id("gsxH"), 64 << 20, 0, 0,
			   GPUSLICE_MODE_MEMORY) < 0)
		return hs_setup_failed("cgroups, card, vGPUs");
	gs_run("latency", t_latency);
	gs_run("share_behaved", t_behaved);
	gs_run("share_holder", t_holder);
	gs_run("share_flood", t_flood);
	return gs_finish();
}
