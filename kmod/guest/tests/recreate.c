/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * recreate: a cgroup never holds more than its current cap across a
 * destroy and re-create of its vGPU (issue 14, item 9). An unprivileged
 * tenant charges its cap; the agent destroys its vGPU while the file is
 * open and creates a new one for the same cgroup: the old bytes count
 * against the new cap (its mem_used includes them) until the old file
 * uncharges or closes, then the full cap is the tenant's again.
 *
 * Before issue 14 (cf35435): the new vGPU let the cgroup charge its
 * whole new cap beside the old one's bytes (64 + 96 MiB under a 96 MiB
 * cap).
 */
#include "hostile.h"

#define P "recreate"
#define CARD 11
#define MB (1ULL << 20)
#define OLD_CAP (64 * MB)

struct shm {
	volatile int step;	/* the tenant's: 1, 3, 5 */
	volatile int ack;	/* the agent's: 2, 4 */
	volatile int new_id;
	uint64_t new_cap;
};
static struct shm *sh;
static uint64_t cg;

static int wait_ack(int v)
{
	for (int i = 0; i < 10000 && sh->ack != v; i++)
		gs_sleep_ms(1);
	T(sh->ack == v, "the agent never did step %d", v);
	return 0;
}

static int tenant(void *arg)
{
	uint64_t cap = sh->new_cap, left, used = 0;
	struct gpuslice_attach a;
	int f1, f2;

	(void)arg;
	f1 = hs_open_attached(CARD, NULL);
	T(f1 >= 0, "attach: %s", gs_errname(errno));
	TOK(gs_charge(f1, CARD, OLD_CAP, NULL));
	sh->step = 1;
	if (wait_ack(2) < 0)
		return -1;
	/* the old record: no new charges, uncharges still work */
	TE(gs_charge(f1, CARD, 4096, NULL), ENODEV);
	f2 = hs_open_attached(CARD, &a);
	T(f2 >= 0, "attach to the new vGPU: %s", gs_errname(errno));
	TEQ(a.id, (uint32_t)sh->new_id);
	TEQ(a.mem_cap, cap);
	left = cap > OLD_CAP ? cap - OLD_CAP : 0;
	if (left)
		TOK(gs_charge(f2, CARD, left, NULL));
	errno = 0;
	T(gs_charge(f2, CARD, 4096, NULL) < 0 && errno == ENOMEM,
	  "the new vGPU (cap %llu MiB) took %llu MiB + 4 KiB beside the %llu "
	  "MiB the old one's file still holds (%s)",
	  (unsigned long long)(cap / MB), (unsigned long long)(left / MB),
	  (unsigned long long)(OLD_CAP / MB),
	  errno ? gs_errname(errno) : "charged");
	/* its usage counts the old bytes */
	TOK(gs_meminfo(f2, CARD, &used, NULL));
	TEQ(used, cap > OLD_CAP ? cap : OLD_CAP);
	sh->step = 3;
	if (wait_ack(4) < 0)
		return -1;
	/* the old file gives back 16 MiB: 16 MiB more for the new one */
	TOK(gs_uncharge(f1, CARD, 16 * MB, NULL));
	TOK(gs_charge(f2, CARD, 16 * MB, NULL));
	TE(gs_charge(f2, CARD, 4096, NULL), ENOMEM);
	/* the old file closes: the whole cap */
	close(f1);
	TOK(gs_meminfo(f2, CARD, &used, NULL));
	TEQ(used, left + 16 * MB);
	TOK(gs_charge(f2, CARD, cap - used, &used));
	TEQ(used, cap);
	TE(gs_charge(f2, CARD, 4096, NULL), ENOMEM);
	close(f2);
	sh->step = 5;
	return 0;
}

static int recreate(uint64_t new_cap)
{
	struct gpuslice_vgpu_stats s;
	uint64_t used;
	pid_t pid;
	int id;

	memset(sh, 0, sizeof(*sh));
	sh->new_cap = new_cap;
	gs_destroy_all(gs_fd);
	id = gs_vgpu_create(gs_fd, CARD, cg, OLD_CAP, 0, 0,
			    GPUSLICE_MODE_MEMORY);
	T(id >= 0, "vGPU: %s", gs_errname(errno));
	pid = hs_tenant("gsrT", tenant, NULL, 30);
	T(pid > 0, "fork");
	for (int i = 0; i < 5000 && sh->step != 1; i++)
		gs_sleep_ms(1);
	T(sh->step == 1, "tenant: %s", gs_kid_msg(pid));
	TOK(gs_vgpu_destroy(gs_fd, CARD, (uint32_t)id));
	sh->new_id = gs_vgpu_create(gs_fd, CARD, cg, new_cap, 0, 0,
				    GPUSLICE_MODE_MEMORY);
	T(sh->new_id >= 0, "re-create: %s", gs_errname(errno));
	TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)sh->new_id, &s));
	gs_info(P " re-created with %llu MiB while the old file holds %llu MiB:"
		" the new vGPU's mem_used %llu MiB", (unsigned long long)(new_cap / MB),
		(unsigned long long)(OLD_CAP / MB),
		(unsigned long long)(s.mem_used / MB));
	used = s.mem_used;
	sh->ack = 2;
	for (int i = 0; i < 5000 && sh->step != 3 &&
			gs_proc_state(pid) != 'Z'; i++)
		gs_sleep_ms(1);
	if (sh->step == 3) {
		TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)sh->new_id, &s));
		gs_info(P " the cgroup holds %llu MiB under its cap of %llu MiB",
			(unsigned long long)(s.mem_used / MB),
			(unsigned long long)(new_cap / MB));
		T(s.mem_used <= new_cap, "mem_used %llu over the cap %llu",
		  (unsigned long long)s.mem_used, (unsigned long long)new_cap);
	}
	sh->ack = 4;
	TJOIN(pid, 10000, "tenant");
	T(used == OLD_CAP, "the re-created vGPU's mem_used was %llu bytes, "
	  "not the %llu its cgroup's old file still held",
	  (unsigned long long)used, (unsigned long long)OLD_CAP);
	TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)sh->new_id, &s));
	TEQ(s.mem_used, 0);
	return 0;
}

/* A larger cap: what is left of it beside the old bytes. */
static int t_larger(void)
{
	return recreate(96 * MB);
}

/* The same cap: nothing more until the old bytes are released. */
static int t_same(void)
{
	return recreate(OLD_CAP);
}

int main(void)
{
	gs_init(P, 60);
	sh = gs_shm(sizeof(*sh));
	cg = gs_cg_create("gsrT");
	if (!cg || gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0)
		return hs_setup_failed("cgroup, card");
	gs_run("larger_cap", t_larger);
	gs_run("same_cap", t_same);
	return gs_finish();
}
