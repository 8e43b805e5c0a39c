/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * efault: a call that fails has changed nothing (issue 14, item 8). An
 * unprivileged tenant passes CHARGE, UNCHARGE, ATTACH and ACQUIRE an
 * argument in a read-only mapping of valid input: the module reads it,
 * cannot write the answer back, answers EFAULT, and mem_used, the
 * attachment and the pending work and hold of the file are as they were.
 * A victim next to it shows that a hold left behind by a failed ACQUIRE
 * would make the card wait for it (the drain bound).
 *
 * Before issue 14 (cf35435): a read-only argument page charged 4 MiB
 * and answered EFAULT; ATTACH attached; ACQUIRE left its grant pending
 * and held.
 */
#include "hostile.h"

#define P "efault"
#define CARD 10
#define MB (1ULL << 20)

struct shm {
	struct hs_victim v;
	volatile int t_ready;
	volatile long long pending;	/* after the failed ACQUIRE */
	volatile int t_err;
};
static struct shm *sh;
static uint64_t cg_t, cg_v;
static int id_ten;

/* A page holding a copy of len bytes of arg, then made read-only. */
static void *ro_copy(const void *arg, size_t len)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memcpy(p, arg, len);
	if (mprotect(p, 4096, PROT_READ) < 0)
		return NULL;
	return p;
}

static int used_now(int fd, uint64_t *used)
{
	return gs_meminfo(fd, CARD, used, NULL);
}

/* The tenant's line of /proc/gpuslice/vgpus: column col of vGPU id_ten. */
static long long vgpus_col(const char *col)
{
	static struct gs_tab t;
	char id[16];
	int r, ok = 1;
	unsigned long long v;

	snprintf(id, sizeof(id), "%d", id_ten);
	if (gs_tab_read("vgpus", &t) < 0)
		return -1;
	r = gs_tab_find(&t, "card", "10", "id", id);
	if (r < 0)
		return -1;
	v = gs_tab_u64(&t, r, col, &ok);
	return ok ? (long long)v : -1;
}

static int tenant_charge(void *arg)
{
	struct gpuslice_charge c = { .card = CARD, .bytes = 4 * MB };
	uint64_t used = 1;
	void *ro;
	int fd;

	(void)arg;
	fd = hs_open_attached(CARD, NULL);
	T(fd >= 0, "attach: %s", gs_errname(errno));
	T((ro = ro_copy(&c, sizeof(c))), "mmap");
	TE(ioctl(fd, GPUSLICE_IOC_CHARGE, ro), EFAULT);
	TOK(used_now(fd, &used));
	T(used == 0, "a CHARGE of 4 MiB answered EFAULT and left mem_used at "
	  "%llu bytes (expected 0)", (unsigned long long)used);
	close(fd);
	return 0;
}

static int tenant_uncharge(void *arg)
{
	struct gpuslice_charge c = { .card = CARD, .bytes = 1 * MB };
	uint64_t used = 1;
	void *ro;
	int fd;

	(void)arg;
	fd = hs_open_attached(CARD, NULL);
	T(fd >= 0, "attach: %s", gs_errname(errno));
	TOK(gs_charge(fd, CARD, 4 * MB, NULL));
	T((ro = ro_copy(&c, sizeof(c))), "mmap");
	TE(ioctl(fd, GPUSLICE_IOC_UNCHARGE, ro), EFAULT);
	TOK(used_now(fd, &used));
	T(used == 4 * MB, "an UNCHARGE of 1 MiB answered EFAULT and left "
	  "mem_used at %llu bytes (expected 4 MiB)", (unsigned long long)used);
	TOK(gs_uncharge(fd, CARD, 4 * MB, &used));
	TEQ(used, 0);
	close(fd);
	return 0;
}

static int tenant_attach(void *arg)
{
	struct gpuslice_attach a = { .card = CARD };
	struct gpuslice_vgpu_stats s;
	void *ro;
	int fd, fd2;

	(void)arg;
	fd = hs_open_attached(CARD, NULL);
	T(fd >= 0, "attach: %s", gs_errname(errno));
	fd2 = gs_open();
	T(fd2 >= 0, "open: %s", gs_errname(errno));
	T((ro = ro_copy(&a, sizeof(a))), "mmap");
	TE(ioctl(fd2, GPUSLICE_IOC_ATTACH, ro), EFAULT);
	errno = 0;
	T(gs_charge(fd2, CARD, 4096, NULL) < 0 && errno == ENOTCONN,
	  "an ATTACH that answered EFAULT attached the file (CHARGE: %s)",
	  errno ? gs_errname(errno) : "charged");
	TOK(gs_vgpu_stats(fd, CARD, (uint32_t)id_ten, &s));
	T(s.nprocs == 1, "%u files attached after an ATTACH that failed "
	  "(expected 1)", s.nprocs);
	close(fd2);
	close(fd);
	return 0;
}

static int in_tenant(int (*fn)(void *))
{
	pid_t pid = hs_tenant("gseT", fn, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 15000, "tenant");
	return 0;
}

static int t_charge(void)
{
	return in_tenant(tenant_charge);
}

static int t_uncharge(void)
{
	return in_tenant(tenant_uncharge);
}

static int t_attach(void)
{
	return in_tenant(tenant_attach);
}

static int tenant_acquire(void *arg)
{
	struct gpuslice_acquire q = { .card = CARD,
				      .flags = GPUSLICE_ACQUIRE_HOLD };
	long long pending;
	void *ro;
	int fd;

	(void)arg;
	fd = hs_open_attached(CARD, NULL);
	T(fd >= 0, "attach: %s", gs_errname(errno));
	T((ro = ro_copy(&q, sizeof(q))), "mmap");
	sh->t_ready = 1;
	errno = 0;
	sh->t_err = ioctl(fd, GPUSLICE_IOC_ACQUIRE, ro) < 0 ? errno : 0;
	pending = vgpus_col("pending");
	sh->pending = pending;
	/* Keeps the file open (and does nothing) while the victim runs. */
	while (!sh->v.done)
		gs_sleep_ms(5);
	close(fd);
	return 0;
}

/*
 * The victim waits at most one of the tenant's (idle) slices: a hold
 * left by the failed ACQUIRE would make the card wait the drain bound.
 */
static int t_acquire(void)
{
	uint64_t bound = 2 * 5 * MS + 60 * MS;	/* 60 ms: timer slack */
	pid_t pv, pt;

	memset(sh, 0, sizeof(*sh));
	gs_destroy_all(gs_fd);
	TOK(gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_FIXED, 20, 0, 0));
	T(gs_vgpu_create(gs_fd, CARD, cg_v, 64 << 20, 50, 0,
			 GPUSLICE_MODE_COMPUTE) >= 0, "vGPU V");
	id_ten = gs_vgpu_create(gs_fd, CARD, cg_t, 64 << 20, 50, 0,
			      GPUSLICE_MODE_COMPUTE);
	T(id_ten >= 0, "vGPU T: %s", gs_errname(errno));
	sh->v.card = CARD;
	pv = hs_tenant("gseV", hs_victim_run, &sh->v, 30);
	T(pv > 0, "fork");
	if (hs_victim_start(&sh->v, 0, 1000) < 0)
		return -1;
	gs_sleep_ms(100);
	pt = hs_tenant("gseT", tenant_acquire, NULL, 30);
	T(pt > 0, "fork");
	TJOIN(pv, 10000, "victim");
	TJOIN(pt, 10000, "tenant");
	gs_info(P " after the failed ACQUIRE: the victim's longest wait %.1f ms,"
		" %.1f%% of wall time", hs_ms(sh->v.max_wait),
		hs_victim_share(&sh->v));
	T(sh->t_err == EFAULT, "ACQUIRE with a read-only argument: %s",
	  gs_errname(sh->t_err));
	if (sh->v.max_wait > bound)
		gs_failf(__LINE__, "the victim waited %.1f ms next to the file "
			 "whose ACQUIRE failed (its hold kept the card; bound "
			 "%.0f ms)", hs_ms(sh->v.max_wait), hs_ms(bound));
	if (sh->pending != 0)
		gs_failf(__LINE__, "an ACQUIRE that answered EFAULT left its "
			 "vGPU pending (%lld)", sh->pending);
	return 0;
}

int main(void)
{
	gs_init(P, 60);
	sh = gs_shm(sizeof(*sh));
	cg_t = gs_cg_create("gseT");
	cg_v = gs_cg_create("gseV");
	if (!cg_t || !cg_v ||
	    gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    (id_ten = gs_vgpu_create(gs_fd, CARD, cg_t, 64 << 20, 0, 0,
				   GPUSLICE_MODE_MEMORY)) < 0)
		return hs_setup_failed("cgroups, card, vGPUs");
	gs_run("charge", t_charge);
	gs_run("uncharge", t_uncharge);
	gs_run("attach", t_attach);
	gs_run("acquire", t_acquire);
	return gs_finish();
}
