/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * charge: the memory ledger. The cap is exact, an over-cap charge changes
 * nothing, uncharges clamp to what the file charged, concurrent charges of
 * several processes and threads never pass the cap, closing the file
 * returns its charges, MEMINFO agrees with VGPU_STATS and /proc.
 */
#include "gstest.h"

#define P "charge"
#define CARD 0
#define CAP 12345679ULL		/* odd on purpose */
#define CCAP (1ULL << 20)	/* for the concurrent test */

static uint64_t cgV, cgW;
static int idV, idW;

/* A new file attached on card; -1 (errno) if that fails or is not vGPU id. */
static int open_attached(const char *cg, uint32_t card, int id)
{
	struct gpuslice_attach a;
	int fd = gs_open(), e;

	(void)cg;
	if (fd < 0)
		return -1;
	if (gs_attach(fd, card, &a) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	if ((int)a.id != id) {
		close(fd);
		errno = EBADSLT;
		return -1;
	}
	return fd;
}

static uint64_t stats_used(int id)
{
	struct gpuslice_vgpu_stats s;

	if (gs_vgpu_stats(gs_fd, CARD, (uint32_t)id, &s) < 0)
		return ~0ULL;
	return s.mem_used;
}

static int child_cap_exact(void *arg)
{
	uint64_t used = 0, cap = 0;
	int fd;

	(void)arg;
	T(gs_cg_enter("gschV") == 0, "enter: %s", gs_errname(errno));
	fd = open_attached("gschV", CARD, idV);
	T(fd >= 0, "attach: %s", gs_errname(errno));
	TE(gs_charge(fd, CARD, CAP + 1, &used), ENOMEM);
	TOK(gs_meminfo(fd, CARD, &used, &cap));
	TEQ(used, 0);
	TEQ(cap, CAP);
	TOK(gs_charge(fd, CARD, CAP - 1, &used));
	TEQ(used, CAP - 1);
	TOK(gs_charge(fd, CARD, 1, &used));
	TEQ(used, CAP);
	TE(gs_charge(fd, CARD, 1, &used), ENOMEM);
	TOK(gs_meminfo(fd, CARD, &used, NULL));
	TEQ(used, CAP);
	TE(gs_charge(fd, CARD, 4096, NULL), ENOMEM);
	TE(gs_charge(fd, CARD, ~0ULL, NULL), ENOMEM);
	TOK(gs_meminfo(fd, CARD, &used, NULL));
	TEQ(used, CAP);
	/* exactly at the cap again after an uncharge */
	TOK(gs_uncharge(fd, CARD, 4096, &used));
	TEQ(used, CAP - 4096);
	TE(gs_charge(fd, CARD, 4097, NULL), ENOMEM);
	TOK(gs_charge(fd, CARD, 4096, &used));
	TEQ(used, CAP);
	TOK(gs_uncharge(fd, CARD, CAP, &used));
	TEQ(used, 0);
	close(fd);
	return 0;
}

static int t_cap_exact(void)
{
	pid_t pid = gs_spawn(child_cap_exact, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "in gschV");
	TEQ(stats_used(idV), 0);
	return 0;
}

static int child_overflow(void *arg)
{
	uint64_t used = 0;
	int fd;

	(void)arg;
	T(gs_cg_enter("gschV") == 0, "enter: %s", gs_errname(errno));
	fd = open_attached("gschV", CARD, idV);
	T(fd >= 0, "attach: %s", gs_errname(errno));
	TOK(gs_charge(fd, CARD, CAP - 1, &used));
	/* used + bytes wraps around 2^64 to 1, which is under the cap */
	TE(gs_charge(fd, CARD, ~0ULL - (CAP - 1) + 2, NULL), ENOMEM);
	TE(gs_charge(fd, CARD, ~0ULL - (CAP - 1) + 1, NULL), ENOMEM);
	TE(gs_charge(fd, CARD, 1ULL << 63, NULL), ENOMEM);
	TOK(gs_meminfo(fd, CARD, &used, NULL));
	TEQ(used, CAP - 1);
	/* uncharging more than charged does not wrap below 0 */
	TOK(gs_uncharge(fd, CARD, ~0ULL, &used));
	TEQ(used, 0);
	TOK(gs_uncharge(fd, CARD, 1, &used));
	TEQ(used, 0);
	TOK(gs_charge(fd, CARD, CAP, &used));
	TEQ(used, CAP);
	close(fd);
	return 0;
}

static int t_overflow(void)
{
	pid_t pid = gs_spawn(child_overflow, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "in gschV");
	TEQ(stats_used(idV), 0);
	return 0;
}

static volatile int *sync_state;	/* [0] ready, [1] go */

static int child_hold(void *arg)
{
	uint64_t bytes = (uint64_t)(uintptr_t)arg;
	int fd;

	T(gs_cg_enter("gschV") == 0, "enter: %s", gs_errname(errno));
	fd = open_attached("gschV", CARD, idV);
	T(fd >= 0, "attach: %s", gs_errname(errno));
	TOK(gs_charge(fd, CARD, bytes, NULL));
	__atomic_add_fetch(&sync_state[0], 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 4000 && !sync_state[1]; i++)
		gs_sleep_ms(2);
	close(fd);
	return 0;
}

static int child_clamp(void *arg)
{
	uint64_t used = 0;
	int f1, f2;

	(void)arg;
	T(gs_cg_enter("gschV") == 0, "enter: %s", gs_errname(errno));
	f1 = open_attached("gschV", CARD, idV);
	f2 = open_attached("gschV", CARD, idV);
	T(f1 >= 0 && f2 >= 0, "attach: %s", gs_errname(errno));
	/* another process holds 7000 */
	TOK(gs_meminfo(f1, CARD, &used, NULL));
	TEQ(used, 7000);
	TOK(gs_charge(f1, CARD, 1000, &used));
	TEQ(used, 8000);
	TOK(gs_charge(f2, CARD, 500, &used));
	TEQ(used, 8500);
	TOK(gs_uncharge(f2, CARD, 100000, &used));
	TEQ(used, 8000);
	TOK(gs_uncharge(f2, CARD, 1, &used));
	TEQ(used, 8000);
	TOK(gs_uncharge(f1, CARD, 400, &used));
	TEQ(used, 7600);
	TOK(gs_uncharge(f1, CARD, 601, &used));
	TEQ(used, 7000);
	/* a file that charged nothing uncharges nothing */
	TOK(gs_uncharge(f1, CARD, 7000, &used));
	TEQ(used, 7000);
	TOK(gs_charge(f1, CARD, 300, &used));
	TEQ(used, 7300);
	close(f1);
	TOK(gs_meminfo(f2, CARD, &used, NULL));
	TEQ(used, 7000);
	close(f2);
	return 0;
}

static int t_uncharge_clamp(void)
{
	pid_t holder, pid;

	sync_state[0] = sync_state[1] = 0;
	holder = gs_spawn(child_hold, (void *)(uintptr_t)7000, 20);
	T(holder > 0, "fork");
	for (int i = 0; i < 2000 && !sync_state[0]; i++)
		gs_sleep_ms(2);
	T(sync_state[0], "holder not ready");
	pid = gs_spawn(child_clamp, NULL, 20);
	T(pid > 0, "fork");
	TJOIN(pid, 10000, "uncharger");
	TEQ(stats_used(idV), 7000);
	sync_state[1] = 1;
	TJOIN(holder, 10000, "holder");
	TEQ(stats_used(idV), 0);
	return 0;
}

/* ---- concurrent charging ---- */

#define NPROC 2
#define NTHR 4
struct conc {
	volatile int stop;
	volatile int ready;
	volatile int go;
	volatile uint64_t held[NPROC];
	volatile uint64_t enomem[NPROC];
	volatile uint64_t ops[NPROC];
	volatile uint64_t max_seen[NPROC];
};
static struct conc *cc;

struct thr {
	int fd;
	int proc;
	unsigned seed;
	uint64_t held;
	uint64_t enomem, ops, max_seen;
	char err[200];
};

static void *conc_thread(void *arg)
{
	struct thr *t = arg;

	while (!cc->stop) {
		unsigned r = rand_r(&t->seed);
		uint64_t used = 0, cap = 0;

		if (r % 8 < 5) {
			uint64_t b = 1 + rand_r(&t->seed) % (64 * 1024);

			if (gs_charge(t->fd, CARD, b, &used) == 0) {
				t->held += b;
			} else if (errno == ENOMEM) {
				t->enomem++;
				if (gs_meminfo(t->fd, CARD, &used, &cap) < 0) {
					snprintf(t->err, sizeof(t->err),
						 "meminfo: %s", gs_errname(errno));
					break;
				}
			} else {
				snprintf(t->err, sizeof(t->err), "charge %llu: %s",
					 (unsigned long long)b, gs_errname(errno));
				break;
			}
		} else if (r % 8 < 7) {
			uint64_t b = t->held ? 1 + rand_r(&t->seed) % t->held : 0;

			if (gs_uncharge(t->fd, CARD, b, &used) < 0) {
				snprintf(t->err, sizeof(t->err), "uncharge: %s",
					 gs_errname(errno));
				break;
			}
			t->held -= b;
		} else {
			if (gs_meminfo(t->fd, CARD, &used, &cap) < 0) {
				snprintf(t->err, sizeof(t->err), "meminfo: %s",
					 gs_errname(errno));
				break;
			}
			if (cap != CCAP) {
				snprintf(t->err, sizeof(t->err), "meminfo cap %llu",
					 (unsigned long long)cap);
				break;
			}
		}
		if (used > t->max_seen)
			t->max_seen = used;
		if (used > CCAP) {
			snprintf(t->err, sizeof(t->err),
				 "mem_used %llu over the cap %llu",
				 (unsigned long long)used, (unsigned long long)CCAP);
			break;
		}
		t->ops++;
	}
	return NULL;
}

static int child_conc(void *arg)
{
	int proc = (int)(uintptr_t)arg;
	struct thr th[NTHR];
	pthread_t tid[NTHR];
	uint64_t held = 0;
	int shared_fd = -1;

	T(gs_cg_enter("gschW") == 0, "enter: %s", gs_errname(errno));
	if (proc == 0) {
		shared_fd = open_attached("gschW", CARD, idW);
		T(shared_fd >= 0, "attach: %s", gs_errname(errno));
	}
	for (int i = 0; i < NTHR; i++) {
		memset(&th[i], 0, sizeof(th[i]));
		th[i].proc = proc;
		th[i].seed = (unsigned)(proc * 1000 + i + 1);
		th[i].fd = proc == 0 ? shared_fd : open_attached("gschW", CARD, idW);
		T(th[i].fd >= 0, "attach: %s", gs_errname(errno));
	}
	__atomic_add_fetch(&cc->ready, 1, __ATOMIC_SEQ_CST);
	while (!cc->go)
		gs_sleep_ms(1);
	for (int i = 0; i < NTHR; i++)
		T(pthread_create(&tid[i], NULL, conc_thread, &th[i]) == 0,
		  "pthread_create");
	for (int i = 0; i < NTHR; i++)
		pthread_join(tid[i], NULL);
	for (int i = 0; i < NTHR; i++) {
		T(th[i].err[0] == 0, "process %d thread %d: %s", proc, i, th[i].err);
		held += th[i].held;
		cc->enomem[proc] += th[i].enomem;
		cc->ops[proc] += th[i].ops;
		if (th[i].max_seen > cc->max_seen[proc])
			cc->max_seen[proc] = th[i].max_seen;
	}
	cc->held[proc] = held;
	/* report, then hold the charges until the parent checked them */
	__atomic_add_fetch(&cc->ready, 1, __ATOMIC_SEQ_CST);
	while (cc->go != 2)
		gs_sleep_ms(1);
	return 0;
}

static int t_concurrent(void)
{
	pid_t pid[NPROC];
	uint64_t used, sum = 0, ops = 0, enomem = 0;
	static struct gs_tab t;
	int r, ok = 1;
	char is[16];

	memset(cc, 0, sizeof(*cc));
	for (int i = 0; i < NPROC; i++) {
		pid[i] = gs_spawn(child_conc, (void *)(uintptr_t)i, 40);
		T(pid[i] > 0, "fork");
	}
	for (int i = 0; i < 3000 && cc->ready < NPROC; i++)
		gs_sleep_ms(2);
	T(cc->ready == NPROC, "children not ready");
	cc->go = 1;
	gs_sleep_ms(2000);
	cc->stop = 1;
	for (int i = 0; i < 5000 && cc->ready < 2 * NPROC; i++) {
		for (int j = 0; j < NPROC; j++) {
			int st;

			if (waitpid(pid[j], &st, WNOHANG) == pid[j]) {
				gs_forget(pid[j]);
				T(0, "child %d ended early (status %#x): %s", j, st,
				  gs_kid_msg(pid[j]));
			}
		}
		gs_sleep_ms(2);
	}
	T(cc->ready == 2 * NPROC, "children did not stop");
	for (int i = 0; i < NPROC; i++) {
		sum += cc->held[i];
		ops += cc->ops[i];
		enomem += cc->enomem[i];
	}
	used = stats_used(idW);
	T(used == sum, "mem_used %llu, but the processes hold %llu",
	  (unsigned long long)used, (unsigned long long)sum);
	T(gs_tab_read("vgpus", &t) == 0, "vgpus: %s", gs_errname(errno));
	snprintf(is, sizeof(is), "%d", idW);
	r = gs_tab_find(&t, "card", "0", "id", is);
	T(r >= 0 && gs_tab_u64(&t, r, "mem_used", &ok) == sum && ok,
	  "/proc/gpuslice/vgpus mem_used %s, expected %llu",
	  r >= 0 ? gs_tab_str(&t, r, "mem_used") : "(no row)",
	  (unsigned long long)sum);
	T(gs_tab_u64(&t, r, "procs", &ok) == NPROC + (NTHR - 1) ||
	  gs_tab_u64(&t, r, "procs", &ok) == NPROC,
	  "/proc/gpuslice/vgpus procs %s", gs_tab_str(&t, r, "procs"));
	cc->go = 2;
	for (int i = 0; i < NPROC; i++)
		TJOIN(pid[i], 10000, i ? "fd per thread" : "shared fd");
	TEQ(stats_used(idW), 0);
	gs_line("GSBENCH " P " concurrent_ops %llu ops", (unsigned long long)ops);
	gs_info(P " concurrent: %llu ops, %llu ENOMEM, held %llu at the end",
		(unsigned long long)ops, (unsigned long long)enomem,
		(unsigned long long)sum);
	T(enomem > 0, "the cap was never reached in %llu ops: the test did "
	  "not exercise it", (unsigned long long)ops);
	return 0;
}

static int child_close(void *arg)
{
	uint64_t used = 0;
	int f1, f2, d;

	(void)arg;
	T(gs_cg_enter("gschV") == 0, "enter: %s", gs_errname(errno));
	f1 = open_attached("gschV", CARD, idV);
	f2 = open_attached("gschV", CARD, idV);
	T(f1 >= 0 && f2 >= 0, "attach: %s", gs_errname(errno));
	TOK(gs_charge(f1, CARD, 100000, NULL));
	TOK(gs_charge(f2, CARD, 20000, &used));
	TEQ(used, 120000);
	close(f1);
	TOK(gs_meminfo(f2, CARD, &used, NULL));
	TEQ(used, 20000);
	/* a dup keeps the file open: nothing returned before the last close */
	d = dup(f2);
	T(d >= 0, "dup");
	close(f2);
	TOK(gs_meminfo(d, CARD, &used, NULL));
	TEQ(used, 20000);
	TOK(gs_charge(d, CARD, 1, &used));
	TEQ(used, 20001);
	close(d);
	{
		int f3 = open_attached("gschV", CARD, idV);

		T(f3 >= 0, "attach: %s", gs_errname(errno));
		TOK(gs_meminfo(f3, CARD, &used, NULL));
		TEQ(used, 0);
		/* the last one is returned by exit */
		TOK(gs_charge(f3, CARD, 5555, NULL));
	}
	return 0;
}

static int t_close_returns(void)
{
	struct gpuslice_vgpu_stats s;
	pid_t pid = gs_spawn(child_close, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "in gschV");
	TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)idV, &s));
	TEQ(s.mem_used, 0);
	TEQ(s.nprocs, 0);
	return 0;
}

static int child_meminfo_proc(void *arg)
{
	static struct gs_tab t;
	uint64_t used = 0, cap = 0;
	char is[16], ps[16];
	int fd, r, ok = 1;

	(void)arg;
	T(gs_cg_enter("gschV") == 0, "enter: %s", gs_errname(errno));
	fd = open_attached("gschV", CARD, idV);
	T(fd >= 0, "attach: %s", gs_errname(errno));
	TOK(gs_charge(fd, CARD, 333333, NULL));
	TOK(gs_meminfo(fd, CARD, &used, &cap));
	TEQ(used, 333333 + 7000);	/* the holder's 7000 */
	TEQ(cap, CAP);
	T(gs_tab_read("vgpus", &t) == 0, "vgpus: %s", gs_errname(errno));
	snprintf(is, sizeof(is), "%d", idV);
	r = gs_tab_find(&t, "card", "0", "id", is);
	T(r >= 0, "no row for the vGPU");
	T(gs_tab_u64(&t, r, "mem_used", &ok) == used && ok,
	  "vgpus mem_used %s, MEMINFO %llu", gs_tab_str(&t, r, "mem_used"),
	  (unsigned long long)used);
	T(gs_tab_u64(&t, r, "mem_cap", &ok) == cap && ok,
	  "vgpus mem_cap %s, MEMINFO %llu", gs_tab_str(&t, r, "mem_cap"),
	  (unsigned long long)cap);
	T(gs_tab_u64(&t, r, "procs", &ok) == 2 && ok, "vgpus procs %s, expected 2",
	  gs_tab_str(&t, r, "procs"));
	T(gs_tab_read("procs", &t) == 0, "procs: %s", gs_errname(errno));
	snprintf(ps, sizeof(ps), "%d", getpid());
	r = gs_tab_find(&t, "pid", ps, NULL, NULL);
	T(r >= 0 && gs_tab_u64(&t, r, "mem_charged", &ok) == 333333 && ok,
	  "procs: my row's mem_charged %s, expected 333333",
	  r >= 0 ? gs_tab_str(&t, r, "mem_charged") : "(no row)");
	{
		struct gpuslice_vgpu_stats s;

		TOK(gs_vgpu_stats(fd, CARD, (uint32_t)idV, &s));
		TEQ(s.mem_used, used);
		TEQ(s.nprocs, 2);
	}
	close(fd);
	return 0;
}

static int t_meminfo_proc(void)
{
	pid_t holder, pid;

	sync_state[0] = sync_state[1] = 0;
	holder = gs_spawn(child_hold, (void *)(uintptr_t)7000, 20);
	T(holder > 0, "fork");
	for (int i = 0; i < 2000 && !sync_state[0]; i++)
		gs_sleep_ms(2);
	T(sync_state[0], "holder not ready");
	pid = gs_spawn(child_meminfo_proc, NULL, 20);
	T(pid > 0, "fork");
	TJOIN(pid, 10000, "reader");
	sync_state[1] = 1;
	TJOIN(holder, 10000, "holder");
	TEQ(stats_used(idV), 0);
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	sync_state = gs_shm(4096);
	cc = gs_shm(sizeof(*cc));
	cgV = gs_cg_create("gschV");
	cgW = gs_cg_create("gschW");
	if (!cgV || !cgW ||
	    gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    (idV = gs_vgpu_create(gs_fd, CARD, cgV, CAP, 0, 0,
				  GPUSLICE_MODE_MEMORY)) < 0 ||
	    (idW = gs_vgpu_create(gs_fd, CARD, cgW, CCAP, 0, 0,
				  GPUSLICE_MODE_MEMORY)) < 0) {
		gs_line("GSTEST " P " FAIL setup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("cap_exact", t_cap_exact);
	gs_run("overflow", t_overflow);
	gs_run("uncharge_clamp", t_uncharge_clamp);
	gs_run("concurrent", t_concurrent);
	gs_run("close_returns", t_close_returns);
	gs_run("meminfo_proc", t_meminfo_proc);
	return gs_finish();
}
