/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * flood: a tenant's waiters do not cost its neighbour (issue 14, item
 * 5). An unprivileged tenant runs NFLOOD threads that each ACQUIRE, and
 * when granted RELEASE and ACQUIRE again, on a vGPU of 5 % (one unit in
 * 20); the victim next to it, 50 % under policy 1, spins in its slices.
 * A handover must wake only the vGPU that runs next: the flood's threads
 * then sleep through the victim's slices and every other handover, and
 * the victim keeps its share (50 % of wall time: granted >= 38 %, used
 * >= 25 %). Woken at every handover, in the timer's hard-IRQ context,
 * the 320 threads take the guest's CPUs from the victim. The threads
 * past GPUSLICE_MAX_VGPU_WAITERS get EUSERS at once.
 *
 * Before issue 14 (cf35435), every waiter of the card woken at every
 * handover in the hrtimer's callback: the victim was granted 15.1 % and
 * used 2.8 % of wall time, its longest wait 148.8 ms; no EUSERS. (With
 * the flood's ACQUIREs on a timeout, 50/50 and 320 threads, the kernel
 * logged "hrtimer: interrupt took 13498320 ns".)
 */
#include "hostile.h"

#define P "flood"
#define CARD 6
#define NFLOOD 320		/* past the bound of 256 */
#define WARM_MS 300
#define WINDOW_MS 2000
#define SHARE_MIN 38.0		/* granted; fair 50 % */
#define USED_MIN 25.0		/* what it ran of it */

struct shm {
	struct hs_victim v;
	struct hs_flood f;
};
static struct shm *sh;
static uint64_t cg_v, cg_f;

static int flood_case(const char *tag, uint32_t policy, uint32_t max_inst)
{
	double share, granted;

	memset(sh, 0, sizeof(*sh));
	gs_destroy_all(gs_fd);
	TOK(gs_card_set(gs_fd, CARD, policy, max_inst, 0, 0));
	T(gs_vgpu_create(gs_fd, CARD, cg_v, 64 << 20, 50, 0,
			 GPUSLICE_MODE_COMPUTE) >= 0, "vGPU V");
	T(gs_vgpu_create(gs_fd, CARD, cg_f, 64 << 20, 5, 0,
			 GPUSLICE_MODE_COMPUTE) >= 0, "vGPU F");
	sh->v.card = CARD;
	sh->f.card = CARD;
	sh->f.nthreads = NFLOOD;
	if (hs_victim_next_to(&sh->v, "gsfV", "gsfF", hs_flood_run, &sh->f,
			      &sh->f.ready, &sh->f.stop, WARM_MS,
			      WINDOW_MS) < 0)
		return -1;
	share = hs_victim_share(&sh->v);
	granted = hs_victim_granted(&sh->v);
	gs_info(P " %s: victim used %.1f%% of wall time (granted %.1f%%), "
		"longest wait %.1f ms next to %d waiting threads (%llu grants, "
		"%llu EUSERS, %llu other errors %s)", tag, share, granted,
		hs_ms(sh->v.max_wait), NFLOOD,
		(unsigned long long)sh->f.grants,
		(unsigned long long)sh->f.eusers,
		(unsigned long long)sh->f.other,
		gs_errname(sh->f.other_err));
	gs_line("GSBENCH " P " %s_victim_share %.1f %%", tag, share);
	gs_line("GSBENCH " P " %s_victim_granted %.1f %%", tag, granted);
	T(granted >= SHARE_MIN, "%s: the victim was granted %.1f%% of wall "
	  "time next to %d waiting threads (fair: 50%%, required >= %.0f%%)",
	  tag, granted, NFLOOD, SHARE_MIN);
	T(share >= USED_MIN, "%s: the victim used %.1f%% of wall time next to "
	  "%d waiting threads (granted %.1f%%; required >= %.0f%%)", tag,
	  share, NFLOOD, granted, USED_MIN);
	T(sh->f.eusers > 0, "%s: none of %d threads of one vGPU was refused "
	  "(EUSERS) past the bound of %d waiters", tag, NFLOOD,
	  GPUSLICE_MAX_VGPU_WAITERS);
	T(sh->f.other == 0, "%s: the flood's ACQUIRE failed with %s", tag,
	  gs_errname(sh->f.other_err));
	return 0;
}

static int t_defaults(void)
{
	return flood_case("p1_20x5ms", GPUSLICE_POLICY_FIXED, 20);
}

int main(void)
{
	gs_init(P, 100);
	sh = gs_shm(sizeof(*sh));
	cg_v = gs_cg_create("gsfV");
	cg_f = gs_cg_create("gsfF");
	if (!cg_v || !cg_f)
		return hs_setup_failed("cgroups");
	gs_run("flood_defaults", t_defaults);
	return gs_finish();
}
