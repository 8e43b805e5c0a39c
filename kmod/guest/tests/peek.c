/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * peek: a tenant sees its own vGPU only (issue 14, item 6). An
 * unprivileged tenant's VGPU_STATS and VGPU_UNSEEN of another tenant's
 * vGPU answer ENOENT, as for a vGPU that does not exist (no oracle), and
 * work for its own; /proc/gpuslice/vgpus and procs list only its own
 * vGPU's lines; cards keeps the settings. Root (CAP_SYS_ADMIN, the
 * agent) sees every line.
 *
 * Before issue 14 (cf35435): every tenant's cgroup id, cap, usage, busy
 * and wait times were readable by anyone.
 */
#include "hostile.h"

#define P "peek"
#define CARD 7

static uint64_t cg_a, cg_b;
static int id_a, id_b;

struct shm {
	volatile int b_ready, stop;
	volatile pid_t a_pid, b_pid;
};
static struct shm *sh;

/* The neighbour: attached and charged, so that it has lines to hide. */
static int tenant_b(void *arg)
{
	int fd = hs_open_attached(CARD, NULL);

	(void)arg;
	T(fd >= 0, "B attach: %s", gs_errname(errno));
	TOK(gs_charge(fd, CARD, 1 << 20, NULL));
	sh->b_pid = getpid();
	sh->b_ready = 1;
	while (!sh->stop)
		gs_sleep_ms(2);
	close(fd);
	return 0;
}

/* Every row of a table names the vGPU id (column id) and card CARD. */
static int only_own(const char *name, int pid_col)
{
	static struct gs_tab t;
	char me[16], idbuf[16];

	snprintf(me, sizeof(me), "%d", getpid());
	snprintf(idbuf, sizeof(idbuf), "%d", id_a);
	T(gs_tab_read(name, &t) == 0, "/proc/gpuslice/%s as a tenant: %s", name,
	  gs_errname(errno));
	T(t.nrows >= 1, "/proc/gpuslice/%s shows a tenant no line of its own",
	  name);
	for (int r = 0; r < t.nrows; r++) {
		const char *id = gs_tab_str(&t, r, "id");
		const char *card = gs_tab_str(&t, r, "card");

		T(!strcmp(id, idbuf) && !strcmp(card, "7"),
		  "/proc/gpuslice/%s shows a tenant of vGPU %d the line of card "
		  "%s vGPU %s (%d lines)", name, id_a, card, id, t.nrows);
		if (pid_col)
			T(!strcmp(gs_tab_str(&t, r, "pid"), me),
			  "/proc/gpuslice/%s shows pid %s to pid %s", name,
			  gs_tab_str(&t, r, "pid"), me);
	}
	return 0;
}

static int tenant_a(void *arg)
{
	struct gpuslice_vgpu_stats s;
	struct gpuslice_vgpu_unseen u;
	struct gpuslice_card c;
	int fd = hs_open_attached(CARD, NULL);

	(void)arg;
	T(fd >= 0, "A attach: %s", gs_errname(errno));
	TOK(gs_charge(fd, CARD, 2 << 20, NULL));
	/* its own vGPU */
	TOK(gs_vgpu_stats(fd, CARD, (uint32_t)id_a, &s));
	TEQ(s.spec.cgroup_id, cg_a);
	TEQ(s.mem_used, 2 << 20);
	TOK(gs_vgpu_unseen(fd, CARD, (uint32_t)id_a, &u));
	TEQ(u.mem_used, 2 << 20);
	/* the neighbour's: as if it did not exist */
	errno = 0;
	T(gs_vgpu_stats(fd, CARD, (uint32_t)id_b, &s) < 0 && errno == ENOENT,
	  "VGPU_STATS of another tenant's vGPU: %s (cgroup %llu, mem_used "
	  "%llu visible; expected ENOENT)", errno ? gs_errname(errno) : "answered",
	  (unsigned long long)s.spec.cgroup_id, (unsigned long long)s.mem_used);
	TE(gs_vgpu_unseen(fd, CARD, (uint32_t)id_b, &u), ENOENT);
	TE(gs_vgpu_stats(fd, CARD, 63, &s), ENOENT);
	TE(gs_vgpu_unseen(fd, CARD, 63, &u), ENOENT);
	/* the card's settings stay public */
	TOK(gs_card_get(fd, CARD, &c));
	TEQ(c.nvgpus, 2);
	if (only_own("vgpus", 0) < 0 || only_own("procs", 1) < 0)
		return -1;
	{
		static struct gs_tab t;

		T(gs_tab_read("cards", &t) == 0, "cards: %s", gs_errname(errno));
		T(gs_tab_find(&t, "card", "7", NULL, NULL) >= 0,
		  "cards does not list card 7 to a tenant");
	}
	close(fd);
	return 0;
}

static int t_tenant_sees_own(void)
{
	pid_t pb, pa;

	memset(sh, 0, sizeof(*sh));
	pb = hs_tenant("gspB", tenant_b, NULL, 30);
	T(pb > 0, "fork");
	T(hs_wait_flag(&sh->b_ready, 5000), "B: %s", gs_kid_msg(pb));
	pa = hs_tenant("gspA", tenant_a, NULL, 30);
	T(pa > 0, "fork");
	if (gs_join(pa, 20000, "A") < 0) {
		sh->stop = 1;
		return -1;
	}
	sh->stop = 1;
	TJOIN(pb, 5000, "B");
	return 0;
}

/* Root (the agent) sees both vGPUs and both tenants' files. */
static int t_root_sees_all(void)
{
	static struct gs_tab t;
	struct gpuslice_vgpu_stats s;
	char pid[16];
	pid_t pb;

	memset(sh, 0, sizeof(*sh));
	pb = hs_tenant("gspB", tenant_b, NULL, 30);
	T(pb > 0, "fork");
	T(hs_wait_flag(&sh->b_ready, 5000), "B: %s", gs_kid_msg(pb));
	TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)id_b, &s));
	TEQ(s.mem_used, 1 << 20);
	TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)id_a, &s));
	T(gs_tab_read("vgpus", &t) == 0, "vgpus: %s", gs_errname(errno));
	{
		char a[24], b[24];

		snprintf(a, sizeof(a), "%llu", (unsigned long long)cg_a);
		snprintf(b, sizeof(b), "%llu", (unsigned long long)cg_b);
		T(gs_tab_find(&t, "cgroup", a, NULL, NULL) >= 0 &&
		  gs_tab_find(&t, "cgroup", b, NULL, NULL) >= 0,
		  "root's vgpus lacks a tenant's line (%d lines)", t.nrows);
	}
	snprintf(pid, sizeof(pid), "%d", sh->b_pid);
	T(gs_tab_read("procs", &t) == 0, "procs: %s", gs_errname(errno));
	T(gs_tab_find(&t, "pid", pid, NULL, NULL) >= 0,
	  "root's procs lacks the tenant's file (%d lines)", t.nrows);
	sh->stop = 1;
	TJOIN(pb, 5000, "B");
	return 0;
}

int main(void)
{
	gs_init(P, 60);
	sh = gs_shm(sizeof(*sh));
	cg_a = gs_cg_create("gspA");
	cg_b = gs_cg_create("gspB");
	if (!cg_a || !cg_b ||
	    gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    (id_a = gs_vgpu_create(gs_fd, CARD, cg_a, 64 << 20, 0, 0,
				   GPUSLICE_MODE_MEMORY)) < 0 ||
	    (id_b = gs_vgpu_create(gs_fd, CARD, cg_b, 32 << 20, 0, 0,
				   GPUSLICE_MODE_MEMORY)) < 0)
		return hs_setup_failed("cgroups, card, vGPUs");
	gs_run("tenant_sees_own", t_tenant_sees_own);
	gs_run("root_sees_all", t_root_sees_all);
	return gs_finish();
}
