/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * hold: a tenant that takes every slice with ACQUIRE_HOLD and never
 * RELEASEs (issue 14, items 1 and 2) steals no compute from its
 * neighbour and cannot defeat priority. Both tenants are unprivileged
 * (hostile.h); the victim spins in its slices and measures its share of
 * wall time and its longest wait in ACQUIRE.
 *
 * Fair share 50 % of wall time for two 50 % vGPUs: the victim must be
 * granted (the page's slices it saw) >= 38 % and use (the time it saw
 * itself owning the card) >= 25 %: qemu runs both vCPUs on one host
 * thread, so a guest CPU that spins beside another gets half of the
 * host's time. The bound of kmod/README.md: a neighbour waits at most
 * (gap units) x (slice + drain bound) between two of its units
 * (interleaved 50/50: one unit; the drain bound is one slice), plus the
 * emulated guest's timer latency (HS_SLACK); at most 1 % of the victim's
 * ACQUIREs may wait longer (a stall of the emulated guest), where a card
 * that waits for the holder makes one in twenty or more wait 100 ms.
 * A high-priority tenant next to a holder is granted at the cut (the
 * holder's tail is queued work the cut's 5 ms drain bound caps).
 *
 * Before issue 14 (cf35435): the victim was granted 16.6 % (used 11.7 %;
 * policy 1, 20 x 1 ms), 34.1 % (31.7 %; policy 4, 10 x 5 ms), 51.8 %
 * (49.5 %; the defaults) and waited 101.8-105.8 ms at a held slice; the
 * high-priority tenant's ACQUIRE p90 was 100.4 ms (0.6 ms next to a
 * holder that releases).
 */
#include "hostile.h"

#define P "hold"
#define CARD 3
#define WARM_MS 300
#define WINDOW_MS 2000
#define SHARE_MIN 38.0		/* granted; fair 50 % */
#define USED_MIN 25.0		/* what the victim ran of it */
#define HS_SLACK (40 * MS)	/* timer latency of qemu TCG, loaded host */

struct shm {
	struct hs_victim v;
	struct hs_hold h;
	/* the high-priority tenant */
	volatile int h_ready, h_done;
	int nwait;
	uint64_t wait[64];
};
static struct shm *sh;
static uint64_t cg_v, cg_h;

static int setup(uint32_t policy, uint32_t max_inst, uint64_t slice,
		 uint32_t prio_v, uint64_t reclaim)
{
	gs_destroy_all(gs_fd);
	TOK(gs_card_set(gs_fd, CARD, policy, max_inst, slice, reclaim));
	T(gs_vgpu_create(gs_fd, CARD, cg_v, 64 << 20, 50, prio_v,
			 GPUSLICE_MODE_COMPUTE) >= 0, "vGPU V: %s",
	  gs_errname(errno));
	T(gs_vgpu_create(gs_fd, CARD, cg_h, 64 << 20, 50, 0,
			 GPUSLICE_MODE_COMPUTE) >= 0, "vGPU H: %s",
	  gs_errname(errno));
	return 0;
}

/*
 * The victim next to a holder (release: a well-behaved one instead) on
 * a card of the given settings; fills *share and *wait.
 */
static int victim_next_to_holder(const char *tag, uint32_t policy,
				 uint32_t max_inst, uint64_t slice,
				 int release, double *share, uint64_t *wait)
{
	uint64_t s = slice ? slice : 5 * MS;

	memset(sh, 0, sizeof(*sh));
	if (setup(policy, max_inst, slice, 0, 0) < 0)
		return -1;
	sh->v.card = CARD;
	/* one unit of the holder between two of the victim's, bound = slice */
	sh->v.wait_limit = 1 * (s + s) + HS_SLACK;
	sh->h.card = CARD;
	sh->h.release = release;
	if (hs_victim_next_to(&sh->v, "gshV", "gshH", hs_holder_run, &sh->h,
			      &sh->h.ready, &sh->h.stop, WARM_MS,
			      WINDOW_MS) < 0)
		return -1;
	*share = hs_victim_share(&sh->v);
	*wait = sh->v.max_wait;
	gs_info(P " %s (policy %u, %u x %.0f ms, holder %s): victim used "
		"%.1f%% of wall time, granted %.1f%%, longest wait %.1f ms "
		"(%llu slices, %llu acquires, %llu timeouts, %llu page "
		"mismatches; holder %llu grants)",
		tag, policy, max_inst, hs_ms(slice ? slice : 5 * MS),
		release ? "releases" : "never releases", *share,
		hs_victim_granted(&sh->v), hs_ms(*wait),
		(unsigned long long)sh->v.nslices,
		(unsigned long long)sh->v.nacq,
		(unsigned long long)sh->v.timeouts,
		(unsigned long long)sh->v.mismatch,
		(unsigned long long)sh->h.grants);
	return 0;
}

static int holder_case(const char *tag, uint32_t policy, uint32_t max_inst,
		       uint64_t slice)
{
	uint64_t s = slice ? slice : 5 * MS;
	uint64_t bound = 1 * (s + s) + HS_SLACK, wait = 0;
	double share = 0, granted;

	if (victim_next_to_holder(tag, policy, max_inst, slice, 0, &share,
				  &wait) < 0)
		return -1;
	granted = hs_victim_granted(&sh->v);
	gs_line("GSBENCH " P " %s_victim_share %.1f %%", tag, share);
	gs_line("GSBENCH " P " %s_victim_granted %.1f %%", tag, granted);
	gs_line("GSBENCH " P " %s_victim_longest_wait %.1f ms", tag,
		hs_ms(wait));
	/* Every figure is reported, the first failure as the verdict. */
	if (granted < SHARE_MIN)
		gs_failf(__LINE__, "%s: the victim was granted %.1f%% of wall "
			 "time next to a holder that never releases (fair: 50%%, "
			 "required >= %.0f%%)", tag, granted, SHARE_MIN);
	if (share < USED_MIN)
		gs_failf(__LINE__, "%s: the victim used %.1f%% of wall time next "
			 "to a holder that never releases (granted %.1f%%, "
			 "required >= %.0f%%)", tag, share, granted, USED_MIN);
	/*
	 * A stall of the emulated guest may exceed any bound now and then;
	 * a card that waits for the holder does at every held slice.
	 */
	gs_line("GSBENCH " P " %s_victim_waits_over_bound %llu of %llu", tag,
		(unsigned long long)sh->v.nover, (unsigned long long)sh->v.nacq);
	if (sh->v.nover > 1 + sh->v.nacq / 100)
		gs_failf(__LINE__, "%s: %llu of the victim's %llu ACQUIREs waited "
			 "over %.1f ms ((slice + drain bound) + %.0f ms timer "
			 "slack; at most 1 %% may), the longest %.1f ms", tag,
			 (unsigned long long)sh->v.nover,
			 (unsigned long long)sh->v.nacq, hs_ms(bound),
			 hs_ms(HS_SLACK), hs_ms(wait));
	return 0;
}

static int t_p1_1ms(void)
{
	return holder_case("p1_20x1ms", GPUSLICE_POLICY_FIXED, 20, 1 * MS);
}

static int t_p4_5ms(void)
{
	return holder_case("p4_10x5ms", GPUSLICE_POLICY_WEIGHTED, 10, 5 * MS);
}

static int t_defaults(void)
{
	/* The agent's defaults: policy 1, 20 units, the module's 5 ms. */
	return holder_case("defaults", GPUSLICE_POLICY_FIXED, 20, 0);
}

/*
 * The high-priority tenant: 40 times, a little work (1 ms), idle, 15 ms
 * later (past the reclaim window) an ACQUIRE; records how long each
 * waited.
 */
static int high_run(void *arg)
{
	int fd = hs_open_attached(CARD, NULL);

	(void)arg;
	T(fd >= 0, "high attach: %s", gs_errname(errno));
	sh->h_ready = 1;
	for (int i = 0; i < 40; i++) {
		uint64_t t, end = 0;

		gs_sleep_ms(15);
		t = gs_now();
		TOK(gs_acquire(fd, CARD, 0, 0, &end, NULL));
		sh->wait[sh->nwait++] = gs_now() - t;
		gs_spin_until(t + MS < end ? t + MS : end);
		TOK(gs_release(fd, CARD, GPUSLICE_RELEASE_IDLE, 0));
	}
	close(fd);
	sh->h_done = 1;
	return 0;
}

static int high_next_to(int release, uint64_t *p50, uint64_t *p90)
{
	pid_t pl, phigh;

	memset(sh, 0, sizeof(*sh));
	/*
	 * 20 ms slices: a priority cut, not the slice's end, decides; a
	 * reclaim window of 5 ms: the high-priority vGPU is idle between
	 * its bursts, so that the holder has the card when it asks.
	 */
	if (setup(GPUSLICE_POLICY_WEIGHTED, 20, 20 * MS, 1, 5 * MS) < 0)
		return -1;
	sh->h.card = CARD;
	sh->h.release = release;
	pl = hs_tenant("gshH", hs_holder_run, &sh->h, 30);
	T(pl > 0, "fork");
	T(hs_wait_flag(&sh->h.ready, 5000), "holder never attached");
	gs_sleep_ms(100);
	phigh = hs_tenant("gshV", high_run, NULL, 30);
	T(phigh > 0, "fork");
	TJOIN(phigh, 20000, "high");
	sh->h.stop = 1;
	TJOIN(pl, 5000, "holder");
	*p50 = hs_pct(sh->wait, (size_t)sh->nwait, 50);
	*p90 = hs_pct(sh->wait, (size_t)sh->nwait, 90);
	gs_info(P " high priority next to a low-priority holder that %s: "
		"ACQUIRE wait p50 %.2f ms p90 %.2f ms max %.2f ms (%d samples)",
		release ? "releases" : "never releases", hs_ms(*p50),
		hs_ms(*p90), hs_ms(sh->wait[sh->nwait - 1]), sh->nwait);
	return 0;
}

static int t_priority(void)
{
	uint64_t r50 = 0, r90 = 0, p50 = 0, p90 = 0;

	if (high_next_to(1, &r50, &r90) < 0 || high_next_to(0, &p50, &p90) < 0)
		return -1;
	gs_line("GSBENCH " P " high_wait_p50_behaved %.2f ms", hs_ms(r50));
	gs_line("GSBENCH " P " high_wait_p50_holder %.2f ms", hs_ms(p50));
	gs_line("GSBENCH " P " high_wait_p90_holder %.2f ms", hs_ms(p90));
	/*
	 * Granted at the cut: what the emulated guest's wake-up costs, far
	 * below the 64 ms (p50) of a card that waited for the holder.
	 */
	T(p50 <= 10 * MS, "high-priority ACQUIRE p50 %.1f ms next to a "
	  "holder (%.2f ms next to a well-behaved one; required <= 10 ms)",
	  hs_ms(p50), hs_ms(r50));
	T(p90 <= 30 * MS, "high-priority ACQUIRE p90 %.1f ms next to a "
	  "holder (required <= 30 ms)", hs_ms(p90));
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	sh = gs_shm(sizeof(*sh));
	cg_v = gs_cg_create("gshV");
	cg_h = gs_cg_create("gshH");
	if (!cg_v || !cg_h)
		return hs_setup_failed("cgroups");
	gs_run("holder_p1_20x1ms", t_p1_1ms);
	gs_run("holder_p4_10x5ms", t_p4_5ms);
	gs_run("holder_defaults", t_defaults);
	gs_run("priority_vs_holder", t_priority);
	return gs_finish();
}
