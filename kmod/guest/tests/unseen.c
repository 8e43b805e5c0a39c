/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * unseen: the bytes the driver holds for a vGPU beyond its processes'
 * charges, which the agent sets (VGPU_SET_UNSEEN). CHARGE counts them
 * against the cap exactly; MEMINFO's and CHARGE's mem_used include them,
 * VGPU_STATS's does not; VGPU_UNSEEN and /proc/gpuslice/vgpus report them;
 * a value over the cap refuses every charge and leaves uncharges working;
 * bad input gets EINVAL, ENOENT, ENODEV; a destroyed vGPU's are gone. (Who
 * may set them: perm.)
 */
#include "gstest.h"

#define P "unseen"
#define CARD 0
#define CAP (64ULL << 20)
#define UNSEEN (24ULL << 20)

static uint64_t cg;
static int id;
static volatile int *step;	/* t_over_cap's handshake, shared */

static int attached(void)
{
	struct gpuslice_attach a;
	int fd;

	T(gs_cg_enter("gsunseen") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, CARD, &a));
	TEQ(a.id, (uint32_t)id);
	return fd;
}

/* The vGPU's row of /proc/gpuslice/vgpus, column col. */
static uint64_t proc_col(const char *col)
{
	static struct gs_tab t;
	char is[16];
	int r, ok = 1;

	if (gs_tab_read("vgpus", &t))
		return ~0ULL;
	snprintf(is, sizeof(is), "%d", id);
	r = gs_tab_find(&t, "card", "0", "id", is);
	if (r < 0)
		return ~0ULL;
	return gs_tab_u64(&t, r, col, &ok);
}

static int child_cap(void *arg)
{
	struct gpuslice_vgpu_stats s;
	uint64_t used = 0, cap = 0;
	int fd = attached();

	(void)arg;
	T(fd >= 0, "attach");
	TE(gs_charge(fd, CARD, CAP - UNSEEN + 1, &used), ENOMEM);
	TOK(gs_meminfo(fd, CARD, &used, NULL));
	TEQ(used, UNSEEN);
	TOK(gs_charge(fd, CARD, CAP - UNSEEN - 1, &used));
	TEQ(used, CAP - 1);
	TOK(gs_charge(fd, CARD, 1, &used));
	TEQ(used, CAP);
	TE(gs_charge(fd, CARD, 1, NULL), ENOMEM);
	TOK(gs_meminfo(fd, CARD, &used, &cap));
	TEQ(used, CAP);
	TEQ(cap, CAP);
	/* The statistics keep charges and unseen bytes apart. */
	TOK(gs_vgpu_stats(fd, CARD, (uint32_t)id, &s));
	TEQ(s.mem_used, CAP - UNSEEN);
	TEQ(proc_col("mem_used"), CAP - UNSEEN);
	TEQ(proc_col("mem_unseen"), UNSEEN);
	TOK(gs_uncharge(fd, CARD, 4096, &used));
	TEQ(used, CAP - 4096);
	close(fd);
	return 0;
}

static int t_cap(void)
{
	struct gpuslice_vgpu_unseen u;
	pid_t pid;

	TOK(gs_vgpu_set_unseen(gs_fd, CARD, (uint32_t)id, UNSEEN));
	TOK(gs_vgpu_unseen(gs_fd, CARD, (uint32_t)id, &u));
	TEQ(u.bytes, UNSEEN);
	TEQ(u.mem_used, 0);
	TEQ(u.mem_cap, CAP);
	pid = gs_spawn(child_cap, NULL, 20);
	T(pid > 0, "fork");
	TJOIN(pid, 10000, "in gsunseen");
	/* The file closed: its charges went, the unseen bytes stay. */
	TOK(gs_vgpu_unseen(gs_fd, CARD, (uint32_t)id, &u));
	TEQ(u.bytes, UNSEEN);
	TEQ(u.mem_used, 0);
	return 0;
}

static int child_over(void *arg)
{
	uint64_t used = 0;
	int fd = attached();

	(void)arg;
	T(fd >= 0, "attach");
	TOK(gs_charge(fd, CARD, 4096, &used));
	TEQ(used, UNSEEN + 4096);
	/* The agent found more than the cap held: nothing more fits. */
	*step = 1;
	while (*step != 2)
		gs_sleep_ms(1);
	TE(gs_charge(fd, CARD, 1, &used), ENOMEM);
	TOK(gs_uncharge(fd, CARD, 4096, &used));
	TEQ(used, CAP + 1);
	TE(gs_charge(fd, CARD, 1, NULL), ENOMEM);
	close(fd);
	return 0;
}

static int t_over_cap(void)
{
	pid_t pid;

	*step = 0;
	pid = gs_spawn(child_over, NULL, 20);
	T(pid > 0, "fork");
	for (int i = 0; i < 5000 && *step != 1; i++)
		gs_sleep_ms(1);
	TOK(gs_vgpu_set_unseen(gs_fd, CARD, (uint32_t)id, CAP + 1));
	*step = 2;
	TJOIN(pid, 10000, "in gsunseen");
	/* Back to nothing unseen: the whole cap again. */
	TOK(gs_vgpu_set_unseen(gs_fd, CARD, (uint32_t)id, 0));
	TEQ(proc_col("mem_unseen"), 0);
	return 0;
}

static int t_bad_input(void)
{
	struct gpuslice_vgpu_unseen u;

	TE(gs_vgpu_set_unseen(gs_fd, CARD, (uint32_t)id, 1ULL << 63), EINVAL);
	TE(gs_vgpu_set_unseen(gs_fd, CARD, (uint32_t)id, ~0ULL), EINVAL);
	TE(gs_vgpu_set_unseen(gs_fd, CARD, 63, 1), ENOENT);
	TE(gs_vgpu_set_unseen(gs_fd, 7, 0, 1), ENODEV);
	TE(gs_vgpu_set_unseen(gs_fd, GPUSLICE_MAX_CARDS, 0, 1), EINVAL);
	TE(gs_vgpu_unseen(gs_fd, CARD, 63, &u), ENOENT);
	TE(gs_vgpu_unseen(gs_fd, 7, 0, &u), ENODEV);
	TOK(gs_vgpu_unseen(gs_fd, CARD, (uint32_t)id, &u));
	TEQ(u.bytes, 0);
	return 0;
}

static int t_destroyed(void)
{
	struct gpuslice_vgpu_unseen u;
	int nid;

	TOK(gs_vgpu_set_unseen(gs_fd, CARD, (uint32_t)id, UNSEEN));
	TOK(gs_vgpu_destroy(gs_fd, CARD, (uint32_t)id));
	TE(gs_vgpu_unseen(gs_fd, CARD, (uint32_t)id, &u), ENOENT);
	TE(gs_vgpu_set_unseen(gs_fd, CARD, (uint32_t)id, 0), ENOENT);
	/* A new vGPU (the same id, maybe) starts with nothing unseen. */
	nid = gs_vgpu_create(gs_fd, CARD, cg, CAP, 0, 0, GPUSLICE_MODE_MEMORY);
	T(nid >= 0, "create: %s", gs_errname(errno));
	TOK(gs_vgpu_unseen(gs_fd, CARD, (uint32_t)nid, &u));
	TEQ(u.bytes, 0);
	return 0;
}

int main(void)
{
	gs_init(P, 60);
	step = gs_shm(4096);
	cg = gs_cg_create("gsunseen");
	if (!cg || gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    (id = gs_vgpu_create(gs_fd, CARD, cg, CAP, 0, 0,
				 GPUSLICE_MODE_MEMORY)) < 0) {
		gs_line("GSTEST " P " FAIL setup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("cap_exact", t_cap);
	gs_run("over_cap", t_over_cap);
	gs_run("bad_input", t_bad_input);
	gs_run("destroyed", t_destroyed);
	return gs_finish();
}
