/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * sigkill: what a dying or detached client leaves behind. A process killed
 * with SIGKILL (also while blocked in ACQUIRE, or while owning the card)
 * returns its charges and stops counting at once, and the others keep
 * getting slices; destroying a vGPU wakes its blocked processes with
 * ENODEV, after which CHARGE/MEMINFO/ACQUIRE get ENODEV and UNCHARGE,
 * RELEASE and close succeed. ACQUIRE's EAGAIN, ETIMEDOUT and EINTR.
 */
#include "gstest.h"

#define P "sigkill"
#define C GPUSLICE_MODE_COMPUTE
/* card 0: policy 1, 20 units of 10 ms; V 5 % (one slice in 20), W 50 % */
#define CARD0 0
#define SLICE0 (10 * MS)
/* card 1: policy 2, 64 units of 100 ms: D's turn comes once in 6.4 s */
#define CARD1 1
/* card 2: policy 3, 20 units of 10 ms: V3 and W3 alternate while active */
#define CARD2 2

static uint64_t cgV, cgW, cgD;
static int idV, idW, idD, idV3, idW3;

#define NW 8
struct worker {
	const char *cg;
	uint32_t card;
	int id;			/* expected vGPU */
	uint64_t charge;
	int nthreads;		/* extra threads looping like the main one */
	int expect_err;		/* the error that ends the loop, 0: none */
	int fd;
	int slot;
};

struct kstate {
	volatile int ready[NW];
	volatile int in_acq[NW];	/* threads inside ACQUIRE */
	volatile uint64_t acq_ok[NW];
	volatile uint64_t calls[NW];
	volatile int err[NW];
	volatile uint64_t t_err[NW];
	volatile int stop[NW];
	volatile int go[NW];
	volatile int done[NW];
};
static struct kstate *ks;

static struct worker wk[NW];

/* ACQUIRE (blocking), use the slice, RELEASE; until error or stop. */
static void *acq_loop(void *arg)
{
	struct worker *w = arg;
	int s = w->slot;

	while (!ks->stop[s]) {
		uint64_t end = 0, t0, t1;
		int32_t owner = 0;
		int r;

		__atomic_add_fetch(&ks->in_acq[s], 1, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&ks->calls[s], 1, __ATOMIC_SEQ_CST);
		r = gs_acquire(w->fd, w->card, 0, 0, &end, &owner);
		__atomic_sub_fetch(&ks->in_acq[s], 1, __ATOMIC_SEQ_CST);
		if (r < 0) {
			if (!ks->err[s]) {
				ks->t_err[s] = gs_now();
				ks->err[s] = errno;
			}
			break;
		}
		__atomic_add_fetch(&ks->acq_ok[s], 1, __ATOMIC_SEQ_CST);
		t0 = gs_now();
		t1 = end;
		if (t1 > t0 + 200 * MS)
			t1 = t0 + 200 * MS;
		gs_spin_until(t1);
		gs_release(w->fd, w->card, 0, t1 - t0);
	}
	return NULL;
}

static int worker_main(void *arg)
{
	struct worker *w = arg;
	struct gpuslice_attach a;
	pthread_t tid[4];
	int s = w->slot;

	T(gs_cg_enter(w->cg) == 0, "enter %s: %s", w->cg, gs_errname(errno));
	w->fd = gs_open();
	T(w->fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(w->fd, w->card, &a));
	TEQ(a.id, (uint32_t)w->id);
	if (w->charge)
		TOK(gs_charge(w->fd, w->card, w->charge, NULL));
	ks->ready[s] = 1;
	for (int i = 0; i < w->nthreads; i++)
		T(pthread_create(&tid[i], NULL, acq_loop, w) == 0, "thread");
	acq_loop(w);
	for (int i = 0; i < w->nthreads; i++)
		pthread_join(tid[i], NULL);
	if (w->expect_err)
		T(ks->err[s] == w->expect_err, "ACQUIRE ended with %s, expected %s",
		  gs_errname(ks->err[s]), gs_errname(w->expect_err));
	else
		T(ks->err[s] == 0, "ACQUIRE failed: %s", gs_errname(ks->err[s]));
	return 0;
}

static pid_t start_worker(int slot, const char *cg, uint32_t card, int id,
			  uint64_t charge, int nthreads, int expect_err)
{
	struct worker *w = &wk[slot];

	ks->ready[slot] = 0;
	ks->in_acq[slot] = 0;
	ks->acq_ok[slot] = ks->calls[slot] = 0;
	ks->err[slot] = 0;
	ks->stop[slot] = ks->go[slot] = ks->done[slot] = 0;
	w->cg = cg;
	w->card = card;
	w->id = id;
	w->charge = charge;
	w->nthreads = nthreads;
	w->expect_err = expect_err;
	w->slot = slot;
	return gs_spawn(worker_main, w, 60);
}

static int wait_ready(int slot)
{
	for (int i = 0; i < 2500 && !ks->ready[slot]; i++)
		gs_sleep_ms(2);
	return ks->ready[slot] ? 0 : -1;
}

/* Every task of pid sleeping ('S'), checked twice 20 ms apart. */
static int all_sleeping(pid_t pid)
{
	for (int round = 0; round < 2; round++) {
		char path[64];
		DIR *d;
		struct dirent *e;
		int n = 0, bad = 0;

		snprintf(path, sizeof(path), "/proc/%d/task", pid);
		d = opendir(path);
		if (!d)
			return 0;
		while ((e = readdir(d))) {
			char st;

			if (e->d_name[0] == '.')
				continue;
			st = gs_proc_state(atoi(e->d_name));
			n++;
			if (st != 'S' && st != '?')
				bad = 1;
		}
		closedir(d);
		if (bad || !n)
			return 0;
		if (!round)
			gs_sleep_ms(20);
	}
	return 1;
}

/* Waits until nthreads of slot are inside ACQUIRE and asleep. */
static int wait_blocked(int slot, pid_t pid, int nthreads)
{
	for (int i = 0; i < 500; i++) {
		if (ks->in_acq[slot] == nthreads && all_sleeping(pid) &&
		    ks->in_acq[slot] == nthreads)
			return 0;
		gs_sleep_ms(5);
	}
	return -1;
}

static int stats(uint32_t card, int id, struct gpuslice_vgpu_stats *s)
{
	return gs_vgpu_stats(gs_fd, card, (uint32_t)id, s);
}

/* Polls (up to 1 s) until the vGPU shows mem_used and nprocs. */
static int wait_stats(uint32_t card, int id, uint64_t used, uint32_t nprocs,
		      struct gpuslice_vgpu_stats *s, unsigned *ms)
{
	uint64_t t0 = gs_now();

	for (;;) {
		if (stats(card, id, s) < 0)
			return -1;
		if (s->mem_used == used && s->nprocs == nprocs)
			break;
		if (gs_now() - t0 > 1000 * MS)
			return -1;
		gs_sleep_ms(2);
	}
	*ms = (unsigned)((gs_now() - t0) / MS);
	return 0;
}

static int child_pause(void *arg)
{
	struct gpuslice_attach a;
	int fd;

	(void)arg;
	T(gs_cg_enter("gskV") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, CARD0, &a));
	TOK(gs_charge(fd, CARD0, 5000123, NULL));
	ks->ready[0] = 1;
	for (;;)
		pause();
	return 0;
}

static int t_kill_charged(void)
{
	struct gpuslice_vgpu_stats s;
	unsigned ms;
	int st;
	pid_t pid;

	ks->ready[0] = 0;
	pid = gs_spawn(child_pause, NULL, 30);
	T(pid > 0, "fork");
	T(wait_ready(0) == 0, "child not ready: %s", gs_kid_msg(pid));
	TOK(stats(CARD0, idV, &s));
	TEQ(s.mem_used, 5000123);
	TEQ(s.nprocs, 1);
	TOK(kill(pid, SIGKILL));
	st = gs_wait(pid, 5000, &ms);
	gs_forget(pid);
	T(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	  "waitpid: status %#x after %u ms", st, ms);
	T(wait_stats(CARD0, idV, 0, 0, &s, &ms) == 0,
	  "after SIGKILL: mem_used %llu nprocs %u (expected 0, 0)",
	  (unsigned long long)s.mem_used, s.nprocs);
	if (ms > 0)
		gs_info(P " kill_charged: charges returned %u ms after waitpid", ms);
	return 0;
}

static int t_kill_blocked(void)
{
	struct gpuslice_vgpu_stats s;
	uint64_t before, t0;
	unsigned ms;
	pid_t wpid, kpid;
	int st;

	/* P in gskW keeps acquiring; K in gskV (3 threads) blocks */
	wpid = start_worker(1, "gskW", CARD0, idW, 0, 0, 0);
	kpid = start_worker(2, "gskV", CARD0, idV, 777777, 2, 0);
	T(wpid > 0 && kpid > 0, "fork");
	T(wait_ready(1) == 0, "W worker not ready: %s", gs_kid_msg(wpid));
	T(wait_ready(2) == 0, "V worker not ready: %s", gs_kid_msg(kpid));
	for (int i = 0; i < 300 && (!ks->acq_ok[1] || !ks->acq_ok[2]); i++)
		gs_sleep_ms(2);
	T(ks->acq_ok[1] > 0, "W's worker got no slice in 600 ms");
	T(ks->acq_ok[2] > 0, "V's worker got no slice in 600 ms (one 10 ms slice in 200 ms)");
	T(wait_blocked(2, kpid, 3) == 0,
	  "V's 3 threads never all blocked in ACQUIRE (in_acq %d)", ks->in_acq[2]);
	TOK(stats(CARD0, idV, &s));
	TEQ(s.mem_used, 777777);
	T(s.nprocs == 1, "V nprocs %u with one file", s.nprocs);

	t0 = gs_now();
	TOK(kill(kpid, SIGKILL));
	st = gs_wait(kpid, 5000, &ms);
	gs_forget(kpid);
	T(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	  "waitpid of the blocked process: status %#x after %u ms", st, ms);
	gs_line("GSBENCH " P " kill_blocked_reap_ms %.1f ms",
		(double)(gs_now() - t0) / 1e6);
	T(ms < 2000, "waitpid took %u ms", ms);
	T(wait_stats(CARD0, idV, 0, 0, &s, &ms) == 0,
	  "after SIGKILL: mem_used %llu nprocs %u (expected 0, 0)",
	  (unsigned long long)s.mem_used, s.nprocs);

	/*
	 * W keeps getting slices (under policy 1, V's units stay V's, idle:
	 * see kill_blocked_preemptive for the activity)
	 */
	before = ks->acq_ok[1];
	gs_sleep_ms(900);
	T(ks->acq_ok[1] >= before + 3,
	  "W's worker got %llu slices in 900 ms after the kill (expected >= 3)",
	  (unsigned long long)(ks->acq_ok[1] - before));
	{
		static struct gs_tab t;
		char is[16];
		int r, ok = 1;

		T(gs_tab_read("vgpus", &t) == 0, "vgpus: %s", gs_errname(errno));
		snprintf(is, sizeof(is), "%d", idV);
		r = gs_tab_find(&t, "card", "0", "id", is);
		T(r >= 0, "no vgpus row for V");
		T(gs_tab_u64(&t, r, "pending", &ok) == 0 && ok,
		  "V pending %s after its process died", gs_tab_str(&t, r, "pending"));
		T(gs_tab_u64(&t, r, "procs", &ok) == 0 && ok,
		  "V procs %s after its process died", gs_tab_str(&t, r, "procs"));
	}
	ks->stop[1] = 1;
	TJOIN(wpid, 5000, "W worker");
	return 0;
}

/*
 * Under policy 3 an idle vGPU's units are skipped: once its blocked process
 * is killed, V must stop getting slices at once and W gets them all.
 */
static int t_kill_blocked_preemptive(void)
{
	struct gpuslice_vgpu_stats v0, v1, w0, w1;
	pid_t wpid, kpid;
	unsigned ms;
	int st;

	wpid = start_worker(1, "gskW", CARD2, idW3, 0, 0, 0);
	kpid = start_worker(2, "gskV", CARD2, idV3, 4096, 1, 0);
	T(wpid > 0 && kpid > 0, "fork");
	T(wait_ready(1) == 0 && wait_ready(2) == 0, "workers not ready");
	for (int i = 0; i < 500 && (ks->acq_ok[1] < 3 || ks->acq_ok[2] < 3); i++)
		gs_sleep_ms(2);
	T(ks->acq_ok[1] >= 3 && ks->acq_ok[2] >= 3,
	  "both should alternate: W %llu V %llu slices",
	  (unsigned long long)ks->acq_ok[1], (unsigned long long)ks->acq_ok[2]);
	T(wait_blocked(2, kpid, 2) == 0,
	  "V's 2 threads never all blocked in ACQUIRE (in_acq %d)", ks->in_acq[2]);
	TOK(kill(kpid, SIGKILL));
	st = gs_wait(kpid, 5000, &ms);
	gs_forget(kpid);
	T(st >= 0 && WIFSIGNALED(st), "waitpid: status %#x", st);
	T(wait_stats(CARD2, idV3, 0, 0, &v0, &ms) == 0,
	  "after SIGKILL: mem_used %llu nprocs %u (expected 0, 0)",
	  (unsigned long long)v0.mem_used, v0.nprocs);
	gs_sleep_ms(25);	/* the slice running at the kill ends */
	TOK(stats(CARD2, idV3, &v0));
	TOK(stats(CARD2, idW3, &w0));
	gs_sleep_ms(500);
	TOK(stats(CARD2, idV3, &v1));
	TOK(stats(CARD2, idW3, &w1));
	T(v1.slices == v0.slices, "V got %llu slices in 500 ms after its only "
	  "process died (policy 3 skips idle vGPUs)",
	  (unsigned long long)(v1.slices - v0.slices));
	T(w1.slices - w0.slices >= 10, "W got %llu slices of 10 ms in 500 ms "
	  "alone on the card", (unsigned long long)(w1.slices - w0.slices));
	ks->stop[1] = 1;
	TJOIN(wpid, 5000, "W worker");
	return 0;
}

static int t_kill_owner(void)
{
	const struct gpuslice_sched_page *p = gs_map_page(gs_fd, CARD0);
	struct gpuslice_sched_page pg;
	uint64_t before;
	pid_t wpid, vpid;
	int st, seen = 0;
	unsigned ms;

	T(p, "mmap: %s", gs_errname(errno));
	wpid = start_worker(1, "gskW", CARD0, idW, 1000, 0, 0);
	vpid = start_worker(2, "gskV", CARD0, idV, 0, 0, 0);
	T(wpid > 0 && vpid > 0, "fork");
	T(wait_ready(1) == 0 && wait_ready(2) == 0, "workers not ready");
	/* kill W's process while it owns the card */
	for (int i = 0; i < 5000 && !seen; i++) {
		if (gs_page_read(p, &pg) == 0 && pg.owner == idW &&
		    gs_now() + 2 * MS < pg.slice_end_ns && ks->in_acq[1] == 0)
			seen = 1;
		else
			gs_sleep_ms(1);
	}
	T(seen, "W never owned the card");
	TOK(kill(wpid, SIGKILL));
	st = gs_wait(wpid, 5000, &ms);
	gs_forget(wpid);
	T(st >= 0 && WIFSIGNALED(st), "waitpid: status %#x", st);
	{
		struct gpuslice_vgpu_stats s;

		T(wait_stats(CARD0, idW, 0, 0, &s, &ms) == 0,
		  "W after SIGKILL: mem_used %llu nprocs %u",
		  (unsigned long long)s.mem_used, s.nprocs);
	}
	before = ks->acq_ok[2];
	gs_sleep_ms(1500);
	T(ks->acq_ok[2] >= before + 3,
	  "V's worker got %llu slices in 1.5 s after the owner died (expected ~7)",
	  (unsigned long long)(ks->acq_ok[2] - before));
	ks->stop[2] = 1;
	TJOIN(vpid, 5000, "V worker");
	munmap((void *)p, (size_t)gs_page_size());
	return 0;
}

static volatile int *detached;	/* [0] step: 1 go on */

static int child_detached(void *arg)
{
	struct gpuslice_attach a;
	uint64_t used;
	int fd, fd2;

	(void)arg;
	T(gs_cg_enter("gskD") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, CARD1, &a));
	TEQ(a.id, (uint32_t)idD);
	TOK(gs_charge(fd, CARD1, 4242, NULL));
	wk[3].fd = fd;
	wk[3].card = CARD1;
	wk[3].slot = 3;
	ks->ready[3] = 1;
	acq_loop(&wk[3]);
	T(ks->err[3] == ENODEV, "ACQUIRE ended with %s, expected ENODEV",
	  gs_errname(ks->err[3]));
	/* the detached record */
	TE(gs_charge(fd, CARD1, 1, NULL), ENODEV);
	TE(gs_meminfo(fd, CARD1, NULL, NULL), ENODEV);
	TE(gs_acquire(fd, CARD1, 0, 0, NULL, NULL), ENODEV);
	TE(gs_acquire(fd, CARD1, GPUSLICE_ACQUIRE_NONBLOCK, 0, NULL, NULL), ENODEV);
	TOK(gs_uncharge(fd, CARD1, 1000, NULL));
	TOK(gs_release(fd, CARD1, 0, 1000));
	TOK(gs_release(fd, CARD1, GPUSLICE_RELEASE_IDLE, 0));
	ks->done[3] = 1;
	/* the parent creates a new vGPU for gskD meanwhile */
	for (int i = 0; i < 2500 && !detached[0]; i++)
		gs_sleep_ms(2);
	T(detached[0], "parent never said go");
	/* the old file is not rebound to it */
	TE(gs_charge(fd, CARD1, 1, NULL), ENODEV);
	TE(gs_meminfo(fd, CARD1, NULL, NULL), ENODEV);
	TOK(gs_uncharge(fd, CARD1, 1000000, NULL));
	/* a new file attaches to the new vGPU */
	fd2 = gs_open();
	T(fd2 >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd2, CARD1, &a));
	TEQ(a.id, (uint32_t)detached[1]);
	TOK(gs_charge(fd2, CARD1, 10, &used));
	TEQ(used, 10);
	TOK(close(fd2));
	TOK(close(fd));
	return 0;
}

static int t_destroy_blocked(void)
{
	struct gpuslice_vgpu_stats s;
	uint64_t td;
	pid_t pid;
	int id2;

	detached[0] = detached[1] = 0;
	ks->ready[3] = ks->err[3] = ks->done[3] = 0;
	ks->in_acq[3] = 0;
	pid = gs_spawn(child_detached, NULL, 30);
	T(pid > 0, "fork");
	T(wait_ready(3) == 0, "child not ready: %s", gs_kid_msg(pid));
	T(wait_blocked(3, pid, 1) == 0, "child never blocked in ACQUIRE");
	TOK(stats(CARD1, idD, &s));
	TEQ(s.mem_used, 4242);
	td = gs_now();
	TOK(gs_vgpu_destroy(gs_fd, CARD1, (uint32_t)idD));
	for (int i = 0; i < 1500 && !ks->err[3]; i++)
		gs_sleep_ms(2);
	T(ks->err[3], "the blocked ACQUIRE was not woken within 3 s of the "
	  "destroy (in_acq %d)", ks->in_acq[3]);
	T(ks->err[3] == ENODEV, "the blocked ACQUIRE got %s, expected ENODEV",
	  gs_errname(ks->err[3]));
	T(ks->t_err[3] - td < 500 * MS, "woken %llu ms after the destroy",
	  (unsigned long long)((ks->t_err[3] - td) / MS));
	gs_line("GSBENCH " P " destroy_wake_ms %.2f ms",
		(double)(ks->t_err[3] - td) / 1e6);
	for (int i = 0; i < 1500 && !ks->done[3]; i++)
		gs_sleep_ms(2);
	T(ks->done[3], "child stuck after ENODEV: %s", gs_kid_msg(pid));
	/* gone from the statistics; id and cgroup free again */
	TE(stats(CARD1, idD, &s), ENOENT);
	id2 = gs_vgpu_create(gs_fd, CARD1, cgD, 1 << 20, 0, 0, C);
	T(id2 >= 0, "new vGPU for the cgroup of the destroyed one: %s",
	  gs_errname(errno));
	T(id2 == idD, "new vGPU got id %d, expected the freed (lowest) %d", id2, idD);
	TOK(stats(CARD1, id2, &s));
	TEQ(s.mem_used, 0);
	TEQ(s.nprocs, 0);
	detached[1] = id2;
	detached[0] = 1;
	TJOIN(pid, 10000, "detached client");
	TOK(stats(CARD1, id2, &s));
	TEQ(s.mem_used, 0);
	TEQ(s.nprocs, 0);
	idD = id2;
	return 0;
}

static volatile int usr1_seen;

static void on_usr1(int sig)
{
	(void)sig;
	usr1_seen = 1;
}

static int child_errors(void *arg)
{
	struct sigaction sa;
	struct gpuslice_attach a;
	const struct gpuslice_sched_page *p;
	struct gpuslice_vgpu_stats s;
	uint64_t calls = 0, end = 0, blocked_ns = 0, t0, t1;
	int fd, got = 0;
	int32_t owner;

	(void)arg;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;	/* no SA_RESTART */
	sigaction(SIGUSR1, &sa, NULL);
	T(gs_cg_enter("gskD") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, CARD1, &a));
	TEQ(a.id, (uint32_t)idD);
	p = gs_map_page(fd, CARD1);
	T(p, "mmap: %s", gs_errname(errno));

	/* EAGAIN: not the owner */
	for (int i = 0; i < 50 && !got; i++) {
		int owns = gs_page_owns(p, idD, NULL);
		int r = gs_acquire(fd, CARD1, GPUSLICE_ACQUIRE_NONBLOCK, 0, &end, &owner);
		int e = errno;

		calls++;
		if (r < 0) {
			T(e == EAGAIN, "NONBLOCK: %s, expected EAGAIN", gs_errname(e));
			T(!gs_page_owns(p, idD, NULL) || owns == 0,
			  "EAGAIN while the page says we own the card");
			got = 1;
		} else {
			T(owner == idD && gs_now() < end + 50 * MS,
			  "NONBLOCK success with owner %d", owner);
			gs_sleep_ms(120);	/* let the slice pass */
		}
	}
	T(got, "NONBLOCK ACQUIRE never said EAGAIN");

	/* ETIMEDOUT */
	got = 0;
	for (int i = 0; i < 20 && !got; i++) {
		int r, e;

		t0 = gs_now();
		r = gs_acquire(fd, CARD1, 0, 30 * MS, &end, &owner);
		e = errno;
		t1 = gs_now();
		calls++;
		blocked_ns += t1 - t0;
		if (r < 0) {
			T(e == ETIMEDOUT, "timeout: %s, expected ETIMEDOUT",
			  gs_errname(e));
			T(t1 - t0 < 2000 * MS, "ETIMEDOUT after %llu ms, timeout 30 ms",
			  (unsigned long long)((t1 - t0) / MS));
			got = 1;
		} else {
			T(owner == idD, "owner %d", owner);
			gs_sleep_ms(120);
		}
	}
	T(got, "ACQUIRE with a timeout never said ETIMEDOUT");

	/* EINTR: the parent sends SIGUSR1 while we block */
	got = 0;
	for (int i = 0; i < 10 && !got; i++) {
		int r, e;

		usr1_seen = 0;
		ks->in_acq[4] = 1;
		t0 = gs_now();
		r = gs_acquire(fd, CARD1, 0, 0, &end, &owner);
		e = errno;
		t1 = gs_now();
		ks->in_acq[4] = 0;
		calls++;
		blocked_ns += t1 - t0;
		if (r < 0) {
			T(e == EINTR, "signalled ACQUIRE: %s, expected EINTR",
			  gs_errname(e));
			T(usr1_seen, "EINTR without the signal");
			got = 1;
		} else {
			T(owner == idD, "owner %d", owner);
			gs_sleep_ms(120);
		}
	}
	T(got, "a signal never interrupted ACQUIRE");
	ks->done[4] = 1;

	TOK(gs_vgpu_stats(fd, CARD1, (uint32_t)idD, &s));
	T(s.acquires == calls, "VGPU_STATS acquires %llu, this process made %llu "
	  "ACQUIRE calls", (unsigned long long)s.acquires,
	  (unsigned long long)calls);
	T(s.wait_ns > 0, "wait_ns 0 after %llu ms blocked in ACQUIRE",
	  (unsigned long long)(blocked_ns / MS));
	T(s.wait_ns <= blocked_ns + 50 * MS,
	  "wait_ns %llu ms, but blocked only %llu ms",
	  (unsigned long long)(s.wait_ns / MS),
	  (unsigned long long)(blocked_ns / MS));
	close(fd);
	return 0;
}

static int t_acquire_errors(void)
{
	pid_t pid;

	ks->in_acq[4] = 0;
	ks->done[4] = 0;
	pid = gs_spawn(child_errors, NULL, 40);
	T(pid > 0, "fork");
	/* signal it whenever it blocks, until it reports done */
	for (int i = 0; i < 3000 && !ks->done[4]; i++) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid) {
			gs_forget(pid);
			T(0, "child: %s", gs_kid_msg(pid)[0] ? gs_kid_msg(pid) :
			  "exited early");
		}
		if (ks->in_acq[4] && gs_proc_state(pid) == 'S') {
			gs_sleep_ms(30);
			if (ks->in_acq[4] && gs_proc_state(pid) == 'S')
				kill(pid, SIGUSR1);
		}
		gs_sleep_ms(5);
	}
	TJOIN(pid, 10000, "client of D");
	return 0;
}

/* ETIMEDOUT comes no earlier than the timeout asked for. */
static int child_timeouts(void *arg)
{
	/* not multiples of a jiffy (4 ms at HZ=250, 1 ms at HZ=1000) */
	static const uint64_t tmo[] = { 1 * MS, 3 * MS, 7900000, 10 * MS,
					 11900000, 30 * MS, 50 * MS, 7900000,
					 3900000, 7900000, 5900000, 3900000,
					 7900000, 3900000, 5900000, 7900000 };
#define NT (sizeof(tmo) / sizeof(tmo[0]))
	struct gpuslice_attach a;
	char buf[640];
	int fd, n = 0, early = -1;
	uint64_t dt[NT] = { 0 };
	int got[NT] = { 0 };

	(void)arg;
	T(gs_cg_enter("gskD") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, CARD1, &a));
	for (size_t i = 0; i < NT; i++) {
		uint64_t t0 = gs_now(), end;
		int32_t owner;
		int r = gs_acquire(fd, CARD1, 0, tmo[i], &end, &owner);
		int e = errno;

		dt[i] = gs_now() - t0;
		got[i] = r == 0;
		if (r == 0) {		/* D's rare turn: let it pass */
			gs_sleep_ms(110);
			continue;
		}
		T(e == ETIMEDOUT, "ACQUIRE with timeout: %s", gs_errname(e));
		if (dt[i] < tmo[i] && early < 0)
			early = (int)i;
	}
	for (size_t i = 0; i < NT; i++)
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, " %.1f->%.2f%s",
			      (double)tmo[i] / 1e6, (double)dt[i] / 1e6,
			      got[i] ? "(slice)" : "");
	gs_line("GSINFO " P " ETIMEDOUT after (timeout ms -> waited ms):%s", buf);
	T(early < 0, "ETIMEDOUT after %.2f ms with a timeout of %.1f ms "
	  "(waited less than asked)", (double)dt[early] / 1e6,
	  (double)tmo[early] / 1e6);
	close(fd);
	return 0;
}

static int t_timeout_length(void)
{
	pid_t pid = gs_spawn(child_timeouts, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "client of D");
	return 0;
}

int main(void)
{
	gs_init(P, 110);
	ks = gs_shm(sizeof(*ks));
	detached = gs_shm(4096);
	cgV = gs_cg_create("gskV");
	cgW = gs_cg_create("gskW");
	cgD = gs_cg_create("gskD");
	if (!cgV || !cgW || !cgD ||
	    gs_card_set(gs_fd, CARD0, GPUSLICE_POLICY_FIXED, 20, SLICE0, 0) < 0 ||
	    gs_card_set(gs_fd, CARD1, GPUSLICE_POLICY_AVERAGE, 64, 100 * MS, 0) < 0 ||
	    (idV = gs_vgpu_create(gs_fd, CARD0, cgV, 64 << 20, 5, 0, C)) < 0 ||
	    (idW = gs_vgpu_create(gs_fd, CARD0, cgW, 64 << 20, 50, 0, C)) < 0 ||
	    (idD = gs_vgpu_create(gs_fd, CARD1, cgD, 64 << 20, 0, 0, C)) < 0 ||
	    gs_card_set(gs_fd, CARD2, GPUSLICE_POLICY_PREEMPTIVE, 20, 10 * MS, 0) < 0 ||
	    (idV3 = gs_vgpu_create(gs_fd, CARD2, cgV, 64 << 20, 0, 0, C)) < 0 ||
	    (idW3 = gs_vgpu_create(gs_fd, CARD2, cgW, 64 << 20, 0, 0, C)) < 0) {
		gs_line("GSTEST " P " FAIL setup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("kill_charged", t_kill_charged);
	gs_run("kill_blocked", t_kill_blocked);
	gs_run("kill_blocked_preemptive", t_kill_blocked_preemptive);
	gs_run("kill_owner", t_kill_owner);
	gs_run("destroy_blocked", t_destroy_blocked);
	gs_run("acquire_errors", t_acquire_errors);
	gs_run("acquire_timeout_length", t_timeout_length);
	return gs_finish();
}
