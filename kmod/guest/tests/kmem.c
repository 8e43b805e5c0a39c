/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * kmem: the kernel memory a tenant makes the module allocate is its own
 * container's (issue 14, item 3). An unprivileged tenant opens thousands
 * of files and attaches them: the growth of its memcg's slab (memory.stat)
 * must be most of the kernel's slab growth (/proc/meminfo), as it is when
 * the module allocates with GFP_KERNEL_ACCOUNT. Past the per-vGPU bounds,
 * ATTACH and ACQUIRE answer EUSERS at once (GPUSLICE_MAX_VGPU_FILES,
 * GPUSLICE_MAX_VGPU_WAITERS), with nothing attached or waiting.
 *
 * Before issue 14 (cf35435): 4000 opens took 8.9 MiB of slab, of which
 * the tenant's memcg was charged 12 % (1.0 MiB); the 1025th ATTACH was
 * accepted, the 257th waiter slept until its timeout (ETIMEDOUT, 301 ms).
 */
#include "hostile.h"

#define P "kmem"
#define CARD 4
#define NOPEN 4000
#define NATT 1000		/* under the per-vGPU bound */
#define CHARGED_MIN 70.0	/* percent of the slab growth */

struct shm {
	volatile int step, ack;
	volatile long long slab_before, slab_after;
	volatile int opened, attached;
	/* waiters */
	volatile int nwaiting;
	volatile int extra_err;
	volatile uint64_t extra_ns;
	volatile int blocker_ready;
	volatile int wphase;	/* how far the waiters' tenant got */
};
static struct shm *sh;
static uint64_t cg_t, cg_b;

static long long memcg_slab(void)
{
	return hs_keyed(GS_CGROOT "/gskT/memory.stat", "slab");
}

static long long global_slab(void)
{
	long long kb = hs_keyed("/proc/meminfo", "Slab");

	return kb < 0 ? -1 : kb * 1024;
}

static int fds[NOPEN];

static int tenant_opens(void *arg)
{
	(void)arg;
	sh->step = 1;		/* dropped, in its cgroup: measure */
	T(hs_wait_flag(&sh->ack, 5000), "parent never measured");
	for (int i = 0; i < NOPEN; i++) {
		struct gpuslice_attach a;

		fds[i] = gs_open();
		T(fds[i] >= 0, "open %d: %s", i, gs_errname(errno));
		sh->opened++;
		if (i < NATT) {
			TOK(gs_attach(fds[i], CARD, &a));
			sh->attached++;
		}
	}
	sh->step = 2;
	T(hs_wait_flag((volatile int *)&sh->slab_after, 10000),
	  "parent never measured after");
	return 0;
}

static int t_accounted(void)
{
	long long m0, m1, g0, g1;
	double pct;
	pid_t pid;

	memset(sh, 0, sizeof(*sh));
	pid = hs_tenant("gskT", tenant_opens, NULL, 60);
	T(pid > 0, "fork");
	T(hs_wait_flag(&sh->step, 5000), "tenant not ready: %s",
	  gs_kid_msg(pid));
	gs_sleep_ms(50);
	m0 = memcg_slab();
	g0 = global_slab();
	T(m0 >= 0 && g0 >= 0, "memory.stat slab %lld, /proc/meminfo Slab %lld "
	  "(memory controller enabled?)", m0, g0);
	sh->ack = 1;
	for (int i = 0; i < 30000 && sh->step != 2; i++)
		gs_sleep_ms(1);
	T(sh->step == 2, "the tenant did not open its files: %s",
	  gs_kid_msg(pid));
	m1 = memcg_slab();
	g1 = global_slab();
	sh->slab_after = 1;
	TJOIN(pid, 20000, "tenant");
	pct = g1 > g0 ? 100.0 * (double)(m1 - m0) / (double)(g1 - g0) : 0;
	gs_info(P " %d opens, %d attached: kernel slab +%.1f MiB, the tenant's "
		"memcg slab +%.1f MiB (%.0f%%; %.0f bytes per open in all)",
		sh->opened, sh->attached, (double)(g1 - g0) / 1048576.0,
		(double)(m1 - m0) / 1048576.0, pct,
		(double)(g1 - g0) / NOPEN);
	gs_line("GSBENCH " P " memcg_charged %.0f %%", pct);
	T(g1 - g0 > 256LL * NOPEN, "the kernel's slab grew by %lld bytes for "
	  "%d opens: nothing to measure", g1 - g0, NOPEN);
	T(pct >= CHARGED_MIN, "the tenant's memcg was charged %.0f%% of the "
	  "%.1f MiB of slab its %d opens took (required >= %.0f%%: "
	  "GFP_KERNEL_ACCOUNT)", pct, (double)(g1 - g0) / 1048576.0, NOPEN,
	  CHARGED_MIN);
	return 0;
}

static int tenant_files(void *arg)
{
	const int n = GPUSLICE_MAX_VGPU_FILES;
	static int f[GPUSLICE_MAX_VGPU_FILES + 1];
	struct gpuslice_attach a;
	uint64_t t;
	int extra;

	(void)arg;
	for (int i = 0; i < n; i++) {
		f[i] = gs_open();
		T(f[i] >= 0, "open %d: %s", i, gs_errname(errno));
		T(gs_attach(f[i], CARD, &a) == 0, "ATTACH %d of %d: %s", i + 1,
		  n, gs_errname(errno));
	}
	extra = gs_open();
	T(extra >= 0, "open: %s", gs_errname(errno));
	t = gs_now();
	TE(gs_attach(extra, CARD, &a), EUSERS);
	t = gs_now() - t;
	T(t < 50 * MS, "the refused ATTACH took %.1f ms", hs_ms(t));
	/* nothing attached: the file is not a client of the vGPU */
	TE(gs_charge(extra, CARD, 4096, NULL), ENOTCONN);
	TE(gs_acquire(extra, CARD, GPUSLICE_ACQUIRE_NONBLOCK, 0, NULL, NULL),
	   ENOTCONN);
	/* one closed: room for one more */
	close(f[0]);
	TOK(gs_attach(extra, CARD, &a));
	return 0;
}

static int t_files_bound(void)
{
	struct gpuslice_vgpu_stats s;
	pid_t pid;
	int id;

	gs_destroy_all(gs_fd);
	TOK(gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0));
	id = gs_vgpu_create(gs_fd, CARD, cg_t, 64 << 20, 0, 0,
			    GPUSLICE_MODE_MEMORY);
	T(id >= 0, "vGPU: %s", gs_errname(errno));
	pid = hs_tenant("gskT", tenant_files, NULL, 60);
	T(pid > 0, "fork");
	TJOIN(pid, 50000, "tenant");
	TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)id, &s));
	TEQ(s.nprocs, 0);
	return 0;
}

/* The blocker: high priority with work pending, so the tenant never runs. */
static int blocker(void *arg)
{
	int fd = hs_open_attached(CARD, NULL);

	(void)arg;
	T(fd >= 0, "blocker attach: %s", gs_errname(errno));
	TOK(gs_acquire(fd, CARD, 0, 0, NULL, NULL));
	sh->blocker_ready = 1;
	for (;;)
		pause();
	return 0;
}

static int wfd;

static void *waiter(void *arg)
{
	(void)arg;
	__atomic_add_fetch(&sh->nwaiting, 1, __ATOMIC_SEQ_CST);
	gs_acquire(wfd, CARD, 0, 0, NULL, NULL);
	return NULL;
}

static int tenant_waiters(void *arg)
{
	const int n = GPUSLICE_MAX_VGPU_WAITERS;
	pthread_attr_t at;
	uint64_t t;
	int rc;

	(void)arg;
	wfd = hs_open_attached(CARD, NULL);
	T(wfd >= 0, "attach: %s", gs_errname(errno));
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64 << 10);
	for (int i = 0; i < n; i++) {
		pthread_t th;

		T(pthread_create(&th, &at, waiter, NULL) == 0, "thread %d", i);
	}
	sh->wphase = 1;
	while (sh->nwaiting < n)
		gs_sleep_ms(1);
	sh->wphase = 2;
	/* every one of them asleep in ACQUIRE */
	for (int i = 0; i < 300; i++) {
		int all = 1;
		char path[64], st;
		DIR *d;
		struct dirent *e;

		snprintf(path, sizeof(path), "/proc/%d/task", getpid());
		d = opendir(path);
		T(d, "opendir");
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.' || atoi(e->d_name) == getpid())
				continue;
			st = gs_proc_state(atoi(e->d_name));
			if (st != 'S')
				all = 0;
		}
		closedir(d);
		if (all)
			break;
		gs_sleep_ms(10);
	}
	sh->wphase = 3;
	t = gs_now();
	rc = gs_acquire(wfd, CARD, 0, 300 * MS, NULL, NULL);
	sh->wphase = 4;
	sh->extra_err = rc < 0 ? errno : 0;
	sh->extra_ns = gs_now() - t;
	T(rc < 0 && errno == EUSERS, "ACQUIRE of waiter %d: %s after %.1f ms "
	  "(expected EUSERS at once)", n + 1, rc < 0 ? gs_errname(errno) : "granted",
	  hs_ms(sh->extra_ns));
	T(sh->extra_ns < 50 * MS, "the refused ACQUIRE took %.1f ms",
	  hs_ms(sh->extra_ns));
	/* on another file of the vGPU too: the bound is the vGPU's */
	{
		int fd2 = hs_open_attached(CARD, NULL);

		T(fd2 >= 0, "attach: %s", gs_errname(errno));
		TE(gs_acquire(fd2, CARD, 0, 300 * MS, NULL, NULL), EUSERS);
	}
	return 0;
}

static int t_waiters_bound(void)
{
	pid_t pb, pt;

	memset(sh, 0, sizeof(*sh));
	gs_destroy_all(gs_fd);
	TOK(gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_WEIGHTED, 20, 0, 0));
	T(gs_vgpu_create(gs_fd, CARD, cg_t, 64 << 20, 50, 0,
			 GPUSLICE_MODE_COMPUTE) >= 0, "vGPU T: %s",
	  gs_errname(errno));
	T(gs_vgpu_create(gs_fd, CARD, cg_b, 64 << 20, 50, 1,
			 GPUSLICE_MODE_COMPUTE) >= 0, "vGPU B: %s",
	  gs_errname(errno));
	pb = hs_tenant("gskB", blocker, NULL, 60);
	T(pb > 0, "fork");
	T(hs_wait_flag(&sh->blocker_ready, 5000), "blocker: %s",
	  gs_kid_msg(pb));
	pt = hs_tenant("gskT", tenant_waiters, NULL, 60);
	T(pt > 0, "fork");
	if (gs_join(pt, 15000, "tenant") < 0) {
		static const char *const where[] = {
			"creating its threads", "starting its threads",
			"waiting for its threads to sleep in ACQUIRE",
			"in the ACQUIRE past the bound", "after it" };

		gs_info(P " the waiters' tenant stopped %s; the ACQUIRE past the "
			"bound: %s after %.1f ms", where[sh->wphase],
			sh->wphase == 4 ? gs_errname(sh->extra_err) : "-",
			hs_ms(sh->extra_ns));
		return -1;
	}
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	sh = gs_shm(sizeof(*sh));
	if (hs_raise_nofile(NOPEN + 256) < 0)
		gs_info(P " RLIMIT_NOFILE %d: %s", NOPEN + 256, gs_errname(errno));
	if (hs_enable_controller("+memory") < 0)
		gs_info(P " +memory in cgroup.subtree_control: %s",
			gs_errname(errno));
	cg_t = gs_cg_create("gskT");
	cg_b = gs_cg_create("gskB");
	if (!cg_t || !cg_b || gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE,
					  20, 0, 0) < 0 ||
	    gs_vgpu_create(gs_fd, CARD, cg_t, 64 << 20, 0, 0,
			   GPUSLICE_MODE_MEMORY) < 0)
		return hs_setup_failed("cgroups, card, vGPUs");
	gs_run("memcg_charged", t_accounted);
	gs_run("files_bound", t_files_bound);
	gs_run("waiters_bound", t_waiters_bound);
	return gs_finish();
}
