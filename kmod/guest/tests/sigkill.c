/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * sigkill: what a dying client leaves behind. A process killed with
 * SIGKILL (also while blocked in ACQUIRE, or while owning the card)
 * returns its charges and stops counting at once, and the others keep
 * getting slices. (Destroying a vGPU under its clients, and ACQUIRE's
 * errors: acquire.c.)
 */
#include "gstest.h"
#include "acqloop.h"

#define P "sigkill"
#define C GPUSLICE_MODE_COMPUTE
/* card 0: policy 1, 20 units of 10 ms; V 5 % (one slice in 20), W 50 % */
#define CARD0 0
#define SLICE0 (10 * MS)
/* card 2: policy 3, 20 units of 10 ms: V3 and W3 alternate while active */
#define CARD2 2

static uint64_t cgV, cgW;
static int idV, idW, idV3, idW3;

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

int main(void)
{
	gs_init(P, 110);
	ks = gs_shm(sizeof(*ks));
	cgV = gs_cg_create("gskV");
	cgW = gs_cg_create("gskW");
	if (!cgV || !cgW ||
	    gs_card_set(gs_fd, CARD0, GPUSLICE_POLICY_FIXED, 20, SLICE0, 0) < 0 ||
	    (idV = gs_vgpu_create(gs_fd, CARD0, cgV, 64 << 20, 5, 0, C)) < 0 ||
	    (idW = gs_vgpu_create(gs_fd, CARD0, cgW, 64 << 20, 50, 0, C)) < 0 ||
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
	return gs_finish();
}
