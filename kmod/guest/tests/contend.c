/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * contend: no tenant can slow another tenant's or the agent's calls by
 * more than a small factor (issue 14, item 4). A hostile tenant opens
 * 24,000 files of /dev/gpuslice, attaches as many as the module lets it
 * (GPUSLICE_MAX_VGPU_FILES) and runs 4 threads reading
 * /proc/gpuslice/procs and vgpus in a loop. Another tenant's open +
 * ATTACH + close and the agent's CARD_GET are timed without it and next
 * to it, on the same card: the p50 may grow 4x, the p99 10x (each
 * against a floor of what the emulated guest's scheduler alone costs:
 * HS_P50_FLOOR, HS_P99_FLOOR), so that a global lock held across a walk
 * of every file fails and CPU sharing on 2 vCPUs does not.
 *
 * Before issue 14 (cf35435): open+ATTACH+close p50 0.17 -> 164 ms
 * (x820), p99 1.6 -> 1289 ms; CARD_GET p50 0.018 -> 237 ms; the tenant
 * attached all 24,000 files.
 */
#include "hostile.h"

#define P "contend"
#define CARD 5
#define NFILES 24000
#define NREADERS 4
#define BASE_MS 1500
#define HOSTILE_MS 3000
#define P50_X 4.0
#define P99_X 10.0
#define P50_FLOOR (200 * US)
#define P99_FLOOR (2 * MS)

static struct hs_contend *sh;
static uint64_t cg_v, cg_h;

static int check(const char *what, const struct hs_lat *b,
		 const struct hs_lat *h)
{
	double r50 = hs_ratio(h->p50, b->p50, P50_FLOOR);
	double r99 = hs_ratio(h->p99, b->p99, P99_FLOOR);

	gs_info(P " %s: alone p50 %.3f ms p99 %.3f ms max %.3f ms (%zu); next "
		"to the hostile tenant p50 %.3f ms p99 %.3f ms max %.3f ms (%zu); "
		"x%.1f p50, x%.1f p99", what, hs_ms(b->p50), hs_ms(b->p99),
		hs_ms(b->max), b->n, hs_ms(h->p50), hs_ms(h->p99),
		hs_ms(h->max), h->n, r50, r99);
	gs_line("GSBENCH " P " %s_p50_ratio %.1f x", what, r50);
	gs_line("GSBENCH " P " %s_p99_ratio %.1f x", what, r99);
	T(r50 <= P50_X, "%s p50 %.3f ms next to the hostile tenant, %.3f ms "
	  "alone: x%.1f (required <= x%.0f)", what, hs_ms(h->p50),
	  hs_ms(b->p50), r50, P50_X);
	T(r99 <= P99_X, "%s p99 %.3f ms next to the hostile tenant, %.3f ms "
	  "alone: x%.1f (required <= x%.0f)", what, hs_ms(h->p99),
	  hs_ms(b->p99), r99, P99_X);
	return 0;
}

static int t_latency(void)
{
	int ok;

	memset(sh, 0, sizeof(*sh));
	sh->card = CARD;
	sh->base_ms = BASE_MS;
	sh->hostile_ms = HOSTILE_MS;
	sh->hog.nfiles = NFILES;
	sh->hog.nreaders = NREADERS;
	if (hs_contend_run(sh, "gscV", "gscH", gs_fd) < 0)
		return -1;
	gs_info(P " p99 of each call next to the hostile tenant: open %.3f ms, "
		"ATTACH %.3f ms, close %.3f ms (alone: %.3f, %.3f, %.3f)",
		hs_ms(sh->att_hostile.part_p99[0]),
		hs_ms(sh->att_hostile.part_p99[1]),
		hs_ms(sh->att_hostile.part_p99[2]),
		hs_ms(sh->att_base.part_p99[0]), hs_ms(sh->att_base.part_p99[1]),
		hs_ms(sh->att_base.part_p99[2]));
	ok = check("open_attach_close", &sh->att_base, &sh->att_hostile) == 0;
	ok &= check("card_get", &sh->get_base, &sh->get_hostile) == 0;
	T(sh->hog.attached <= GPUSLICE_MAX_VGPU_FILES, "the hostile tenant "
	  "attached %d files to its vGPU (bound %d)", sh->hog.attached,
	  GPUSLICE_MAX_VGPU_FILES);
	return ok ? 0 : -1;
}

int main(void)
{
	gs_init(P, 110);
	sh = gs_shm(sizeof(*sh));
	if (hs_raise_nofile(NFILES + 256) < 0)
		return hs_setup_failed("RLIMIT_NOFILE");
	cg_v = gs_cg_create("gscV");
	cg_h = gs_cg_create("gscH");
	if (!cg_v || !cg_h ||
	    gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    gs_vgpu_create(gs_fd, CARD, cg_v, 64 << 20, 0, 0,
			   GPUSLICE_MODE_MEMORY) < 0 ||
	    gs_vgpu_create(gs_fd, CARD, cg_h, 64 << 20, 0, 0,
			   GPUSLICE_MODE_MEMORY) < 0)
		return hs_setup_failed("cgroups, card, vGPUs");
	gs_run("latency_next_to_hostile", t_latency);
	return gs_finish();
}
