/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * bench: the cost of the calls a client makes on its hot path, averaged
 * over up to 100k iterations (at most ~1.5 s each). Fails only on errors,
 * never on timing. Figures from a qemu TCG guest are ~10x the host's.
 */
#include "gstest.h"

#define P "bench"
#define CARDM 0		/* memory vGPU */
#define CARDN 1		/* compute vGPU under policy 0 */
#define ITERS 100000
#define MAX_NS (1500 * MS)

static uint64_t cg;
static int idM, idN;

/* Runs body up to ITERS times or MAX_NS; reports ns per iteration. */
#define BENCH(metric, body)						\
	do {								\
		uint64_t _t0 = gs_now(), _n = 0, _dt;			\
		for (; _n < ITERS; _n++) {				\
			body;						\
			if ((_n & 255) == 255 && gs_now() - _t0 > MAX_NS) { \
				_n++;					\
				break;					\
			}						\
		}							\
		_dt = gs_now() - _t0;					\
		gs_line("GSBENCH " P " %s %.1f ns", metric,		\
			(double)_dt / (double)_n);			\
	} while (0)

static int child_bench(void *arg)
{
	struct gpuslice_attach a;
	struct gpuslice_version v;
	struct gpuslice_vgpu_stats st;
	const struct gpuslice_sched_page *pm, *pn;
	struct gpuslice_sched_page s;
	uint64_t used, end;
	int32_t owner;
	volatile int sink = 0;
	int fd;

	(void)arg;
	T(gs_cg_enter("gsbench") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, CARDM, &a));
	TEQ(a.id, (uint32_t)idM);
	TOK(gs_attach(fd, CARDN, &a));
	TEQ(a.id, (uint32_t)idN);
	pm = gs_map_page(fd, CARDM);
	pn = gs_map_page(fd, CARDN);
	T(pm && pn, "mmap: %s", gs_errname(errno));

	BENCH("ioctl_version_ns", TOK(gs_version(fd, &v)));
	BENCH("charge_uncharge_pair_ns", {
		TOK(gs_charge(fd, CARDM, 4096, &used));
		TOK(gs_uncharge(fd, CARDM, 4096, &used));
	});
	TOK(gs_meminfo(fd, CARDM, &used, NULL));
	TEQ(used, 0);
	BENCH("meminfo_ns", TOK(gs_meminfo(fd, CARDM, &used, NULL)));
	BENCH("acquire_memory_vgpu_ns", {
		TOK(gs_acquire(fd, CARDM, 0, 0, &end, &owner));
		T(owner == GPUSLICE_OWNER_ALL && end == ~0ULL,
		  "memory vGPU: owner %d end %llu", owner, (unsigned long long)end);
	});
	BENCH("acquire_native_policy_ns", {
		TOK(gs_acquire(fd, CARDN, 0, 0, &end, &owner));
		T(owner == GPUSLICE_OWNER_ALL && end == ~0ULL,
		  "policy 0: owner %d end %llu", owner, (unsigned long long)end);
	});
	BENCH("acquire_nonblock_native_ns",
	      TOK(gs_acquire(fd, CARDN, GPUSLICE_ACQUIRE_NONBLOCK, 0, &end, &owner)));
	BENCH("release_ns", TOK(gs_release(fd, CARDN, 0, 1000)));
	BENCH("vgpu_stats_ns", TOK(gs_vgpu_stats(fd, CARDN, (uint32_t)idN, &st)));
	BENCH("page_read_ns", {
		T(gs_page_read(pn, &s) == 0, "page torn");
		sink += s.owner;
	});
	BENCH("fast_check_ns", sink += gs_page_owns(pn, idN, NULL));
	BENCH("clock_gettime_ns", sink += (int)gs_now());
	T(gs_page_read(pn, &s) == 0, "page torn");
	TEQ(s.owner, GPUSLICE_OWNER_ALL);
	TOK(gs_release(fd, CARDN, GPUSLICE_RELEASE_IDLE, 0));
	(void)sink;
	close(fd);
	return 0;
}

static int t_bench(void)
{
	struct gpuslice_vgpu_stats st;
	pid_t pid = gs_spawn(child_bench, NULL, 60);

	T(pid > 0, "fork");
	TJOIN(pid, 50000, "bench");
	TOK(gs_vgpu_stats(gs_fd, CARDM, (uint32_t)idM, &st));
	TEQ(st.mem_used, 0);
	return 0;
}

/* Concurrent charging: 4 threads, one file each, same vGPU. */
struct cthr {
	int fd;
	uint64_t n;
	int err;
};
static volatile int cstop;

static void *cthread(void *arg)
{
	struct cthr *c = arg;

	while (!cstop) {
		if (gs_charge(c->fd, CARDM, 4096, NULL) < 0 ||
		    gs_uncharge(c->fd, CARDM, 4096, NULL) < 0) {
			c->err = errno;
			break;
		}
		c->n++;
	}
	return NULL;
}

static int child_conc(void *arg)
{
	struct cthr c[4];
	pthread_t t[4];
	struct gpuslice_attach a;
	uint64_t t0, n = 0;

	(void)arg;
	T(gs_cg_enter("gsbench") == 0, "enter: %s", gs_errname(errno));
	for (int i = 0; i < 4; i++) {
		memset(&c[i], 0, sizeof(c[i]));
		c[i].fd = gs_open();
		T(c[i].fd >= 0, "open");
		TOK(gs_attach(c[i].fd, CARDM, &a));
	}
	t0 = gs_now();
	for (int i = 0; i < 4; i++)
		T(pthread_create(&t[i], NULL, cthread, &c[i]) == 0, "thread");
	gs_sleep_ms(1000);
	cstop = 1;
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		T(c[i].err == 0, "thread %d: %s", i, gs_errname(c[i].err));
		n += c[i].n;
	}
	gs_line("GSBENCH " P " charge_pairs_4_threads %.0f pairs/s",
		(double)n * 1e9 / (double)(gs_now() - t0));
	return 0;
}

static int t_concurrent(void)
{
	pid_t pid = gs_spawn(child_conc, NULL, 30);

	T(pid > 0, "fork");
	TJOIN(pid, 20000, "concurrent bench");
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	cg = gs_cg_create("gsbench");
	if (!cg ||
	    gs_card_set(gs_fd, CARDM, GPUSLICE_POLICY_WEIGHTED, 20, 0, 0) < 0 ||
	    gs_card_set(gs_fd, CARDN, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    (idM = gs_vgpu_create(gs_fd, CARDM, cg, 1ULL << 30, 0, 0,
				  GPUSLICE_MODE_MEMORY)) < 0 ||
	    (idN = gs_vgpu_create(gs_fd, CARDN, cg, 1ULL << 30, 50, 0,
				  GPUSLICE_MODE_COMPUTE)) < 0) {
		gs_line("GSTEST " P " FAIL setup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("hot_path", t_bench);
	gs_run("concurrent_charge", t_concurrent);
	return gs_finish();
}
