/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * activity: what counts as a vGPU's work and processes, from a review of
 * the module: a thread blocked in ACQUIRE keeps its vGPU pending whatever
 * another thread of the file releases; a failed ACQUIRE leaves no work
 * behind (a high-priority vGPU's EAGAIN does not starve the card); merely
 * attaching is not work; the slice timer stops with no process attached;
 * a card whose last vGPU went lets nobody run; CARD_SET says EINVAL for a
 * bad value even on a busy card; charges at the extremes of the cap.
 */
#include "gstest.h"

#define P "activity"
#define C GPUSLICE_MODE_COMPUTE
#define M GPUSLICE_MODE_MEMORY

static volatile int *sh;	/* shared flags */

/* ------------------------------------------------------------------ */
/* A: per-file pending flag, two threads on one file                    */

#define CARD_A 5
struct thr {
	int fd;
	uint64_t timeout;
	int rc, err;
	uint64_t waited;
};

static void *thr_acq(void *p)
{
	struct thr *t = p;
	uint64_t t0 = gs_now();

	t->rc = gs_acquire(t->fd, CARD_A, 0, t->timeout, NULL, NULL);
	t->err = t->rc < 0 ? errno : 0;
	t->waited = gs_now() - t0;
	return NULL;
}

static int wait_handover(const struct gpuslice_sched_page *pg)
{
	struct gpuslice_sched_page s0, s1;

	if (gs_page_read(pg, &s0) < 0)
		return -1;
	for (int i = 0; i < 200000; i++) {
		if (gs_page_read(pg, &s1) < 0)
			return -1;
		if (s1.handovers != s0.handovers)
			return 0;
		gs_sleep_ms(0);
	}
	return -1;
}

/* one round: T1 blocks in ACQUIRE; main releases IDLE after 3 ms (or not) */
static int round_a(int fd, const struct gpuslice_sched_page *pg, int release,
		   struct thr *t)
{
	pthread_t th;

	memset(t, 0, sizeof(*t));
	t->fd = fd;
	t->timeout = 1500 * MS;
	T(wait_handover(pg) == 0, "no handover seen");
	pthread_create(&th, NULL, thr_acq, t);
	gs_sleep_ms(3);
	if (release)
		TOK(gs_release(fd, CARD_A, GPUSLICE_RELEASE_IDLE, 0));
	pthread_join(th, NULL);
	return 0;
}

static int child_a(void *arg)
{
	struct gpuslice_attach a;
	const struct gpuslice_sched_page *pg;
	struct thr t;
	int fd;

	(void)arg;
	T(gs_cg_enter("gsrvA") == 0, "enter");
	fd = gs_open();
	T(fd >= 0, "open");
	TOK(gs_attach(fd, CARD_A, &a));
	pg = gs_map_page(fd, CARD_A);
	T(pg, "mmap");
	/* control: no RELEASE -> T1 gets the next slice */
	if (round_a(fd, pg, 0, &t) < 0)
		return -1;
	gs_line("GSINFO " P " A control: rc %d %s after %.1f ms", t.rc,
		gs_errname(t.err), (double)t.waited / 1e6);
	T(t.rc == 0, "control ACQUIRE failed: %s", gs_errname(t.err));
	TOK(gs_release(fd, CARD_A, GPUSLICE_RELEASE_IDLE, 0));
	gs_sleep_ms(50);
	/* another thread of the same file reports idle while T1 is blocked */
	for (int i = 0; i < 3; i++) {
		if (round_a(fd, pg, 1, &t) < 0)
			return -1;
		gs_line("GSINFO " P " A round %d: rc %d %s after %.1f ms", i,
			t.rc, gs_errname(t.err), (double)t.waited / 1e6);
		if (t.rc < 0)
			break;
		/* T1 got a slice before the release landed: try again */
		TOK(gs_release(fd, CARD_A, GPUSLICE_RELEASE_IDLE, 0));
		gs_sleep_ms(50);
	}
	T(t.rc == 0, "a thread blocked in ACQUIRE starved (%s after %.0f ms) "
	  "because another thread of its file sent RELEASE_IDLE",
	  gs_errname(t.err), (double)t.waited / 1e6);
	close(fd);
	return 0;
}

static int t_pending_shared_file(void)
{
	uint64_t cg = gs_cg_create("gsrvA");
	pid_t pid;

	T(cg, "cgroup");
	TOK(gs_card_set(gs_fd, CARD_A, GPUSLICE_POLICY_PREEMPTIVE, 20, 100 * MS, 1 * MS));
	TOK(gs_vgpu_create(gs_fd, CARD_A, cg, 1 << 20, 0, 0, C));
	pid = gs_spawn(child_a, NULL, 30);
	T(pid > 0, "fork");
	TJOIN(pid, 25000, "A");
	return 0;
}

/* ------------------------------------------------------------------ */
/* B: the timer with no process attached                               */

#define CARD_B 6
static unsigned long long handovers(uint32_t card)
{
	static struct gs_tab t;
	char k[16];
	int ok = 1, r;

	if (gs_tab_read("cards", &t) < 0)
		return 0;
	snprintf(k, sizeof(k), "%u", card);
	r = gs_tab_find(&t, "card", k, NULL, NULL);
	return r < 0 ? 0 : gs_tab_u64(&t, r, "handovers", &ok);
}

static int t_timer_without_procs(void)
{
	uint64_t cg = gs_cg_create("gsrvB");
	unsigned long long h0, h1;

	T(cg, "cgroup");
	TOK(gs_card_set(gs_fd, CARD_B, GPUSLICE_POLICY_FIXED, 20, 1 * MS, 0));
	TOK(gs_vgpu_create(gs_fd, CARD_B, cg, 1 << 20, 50, 0, C));
	h0 = handovers(CARD_B);
	gs_sleep_ms(500);
	h1 = handovers(CARD_B);
	gs_line("GSINFO " P " B handovers with no process attached: %llu in 500 ms",
		h1 - h0);
	T(h1 - h0 <= 1, "timer fires with no process attached: %llu handovers "
	  "in 500 ms", h1 - h0);
	return 0;
}

/* ------------------------------------------------------------------ */
/* C: ATTACH alone makes the vGPU active; D: EAGAIN leaves it pending    */

/*
 * NONBLOCK ACQUIREs on card until one fails, at most tries, sleep_ms apart:
 * one that lands in the vGPU's own slice is granted (work until
 * RELEASE_IDLE), so it is given back first. Returns the last ACQUIRE's
 * result, its errno in *err and how many were granted in *granted.
 */
static int acquire_until_eagain(int fd, uint32_t card, int tries,
				unsigned int sleep_ms, int *err, int *granted)
{
	int r = 0;

	*err = 0;
	*granted = 0;
	for (int i = 0; i < tries; i++) {
		r = gs_acquire(fd, card, GPUSLICE_ACQUIRE_NONBLOCK, 0, NULL,
			       NULL);
		*err = errno;
		if (r < 0)
			break;
		TOK(gs_release(fd, card, GPUSLICE_RELEASE_IDLE, 0));
		++*granted;
		gs_sleep_ms(sleep_ms);
	}
	return r;
}

#define CARD_C 7
static int child_c(void *arg)
{
	struct gpuslice_attach a;
	int fd, mode = (int)(long)arg;

	T(gs_cg_enter("gsrvC") == 0, "enter");
	fd = gs_open();
	T(fd >= 0, "open");
	TOK(gs_attach(fd, CARD_C, &a));
	if (mode == 1) {
		gs_sleep_ms(200);	/* past the 100 ms reclaim window */
		sh[2] = 1;
		/*
		 * One NONBLOCK poll that fails, then nothing. A poll that
		 * lands on a slice boundary is granted (work until
		 * RELEASE_IDLE): give that back and poll again.
		 */
		int e, granted;
		/* 200 ms: past the reclaim window again */
		int r = acquire_until_eagain(fd, CARD_C, 20, 200, &e, &granted);

		gs_line("GSINFO " P " D nonblock acquire: rc %d %s", r,
			r < 0 ? gs_errname(e) : "0");
		T(r < 0 && e == EAGAIN, "no NONBLOCK ACQUIRE failed: rc %d %s",
		  r, gs_errname(e));
		sh[3] = 1;
	} else {
		sh[1] = 1;
	}
	for (int i = 0; i < 500 && !sh[0]; i++)
		gs_sleep_ms(2);
	close(fd);
	return 0;
}

static int t_attach_is_not_work(void)
{
	uint64_t cg = gs_cg_create("gsrvC");
	struct gpuslice_vgpu_stats s;
	int id;
	pid_t pid;

	T(cg, "cgroup");
	TOK(gs_card_set(gs_fd, CARD_C, GPUSLICE_POLICY_PREEMPTIVE, 20, 5 * MS, 0));
	id = gs_vgpu_create(gs_fd, CARD_C, cg, 1 << 20, 0, 0, C);
	T(id >= 0, "create: %s", gs_errname(errno));
	sh[0] = sh[1] = 0;
	pid = gs_spawn(child_c, (void *)0L, 10);
	T(pid > 0, "fork");
	for (int i = 0; i < 500 && !sh[1]; i++)
		gs_sleep_ms(2);
	gs_sleep_ms(400);
	TOK(gs_vgpu_stats(gs_fd, CARD_C, (uint32_t)id, &s));
	sh[0] = 1;
	TJOIN(pid, 3000, "C");
	gs_line("GSINFO " P " C slices of a vGPU that only attached: %llu (acquires %llu)",
		(unsigned long long)s.slices, (unsigned long long)s.acquires);
	T(s.slices == 0, "a vGPU that never reported work got %llu slices "
	  "(ATTACH counted as work)", (unsigned long long)s.slices);
	TOK(gs_vgpu_destroy(gs_fd, CARD_C, (uint32_t)id));
	return 0;
}

static int t_eagain_leaves_pending(void)
{
	uint64_t cg = gs_cg_create("gsrvC");
	struct gpuslice_vgpu_stats s0, s1;
	static struct gs_tab t;
	char k[16];
	int id, r, ok = 1;
	unsigned long long pend;
	pid_t pid;

	T(cg, "cgroup");
	for (uint32_t j = 0; j < 64; j++)
		gs_vgpu_destroy(gs_fd, CARD_C, j);
	id = gs_vgpu_create(gs_fd, CARD_C, cg, 1 << 20, 0, 0, C);
	T(id >= 0, "create: %s", gs_errname(errno));
	memset((void *)sh, 0, 64);
	pid = gs_spawn(child_c, (void *)1L, 10);
	T(pid > 0, "fork");
	for (int i = 0; i < 1000 && !sh[3]; i++)
		gs_sleep_ms(2);
	gs_sleep_ms(50);
	TOK(gs_vgpu_stats(gs_fd, CARD_C, (uint32_t)id, &s0));
	gs_sleep_ms(400);
	TOK(gs_vgpu_stats(gs_fd, CARD_C, (uint32_t)id, &s1));
	T(gs_tab_read("vgpus", &t) == 0, "proc");
	snprintf(k, sizeof(k), "%u", CARD_C);
	r = gs_tab_find(&t, "card", k, NULL, NULL);
	pend = gs_tab_u64(&t, r, "pending", &ok);
	sh[0] = 1;
	TJOIN(pid, 3000, "D");
	gs_line("GSINFO " P " D after one EAGAIN and 400 ms of nothing: pending %llu, "
		"slices +%llu", pend,
		(unsigned long long)(s1.slices - s0.slices));
	T(pend == 0, "a file that got EAGAIN (neither blocked nor acquired) "
	  "keeps the vGPU pending; it got %llu slices in 400 ms",
	  (unsigned long long)(s1.slices - s0.slices));
	TOK(gs_vgpu_destroy(gs_fd, CARD_C, (uint32_t)id));
	return 0;
}

/* ------------------------------------------------------------------ */
/* F: CARD_SET out of range on a busy card; G: charge extremes          */

#define CARD_F 10
static int t_card_set_order(void)
{
	uint64_t cg = gs_cg_create("gsrvF");
	int id;

	T(cg, "cgroup");
	TOK(gs_card_set(gs_fd, CARD_F, GPUSLICE_POLICY_NATIVE, 20, 0, 0));
	id = gs_vgpu_create(gs_fd, CARD_F, cg, INT64_MAX, 0, 0, M);
	T(id >= 0, "create");
	TE(gs_card_set(gs_fd, CARD_F, 9, 20, 0, 0), EINVAL);
	return 0;
}

static int child_g(void *arg)
{
	struct gpuslice_attach a;
	uint64_t used;
	int fd;

	(void)arg;
	T(gs_cg_enter("gsrvF") == 0, "enter");
	fd = gs_open();
	T(fd >= 0, "open");
	TOK(gs_attach(fd, CARD_F, &a));
	TE(gs_charge(fd, CARD_F, (uint64_t)INT64_MAX + 1, NULL), ENOMEM);
	TE(gs_charge(fd, CARD_F, UINT64_MAX, NULL), ENOMEM);
	TOK(gs_charge(fd, CARD_F, (uint64_t)INT64_MAX - 5, &used));
	TE(gs_charge(fd, CARD_F, 6, NULL), ENOMEM);
	TOK(gs_charge(fd, CARD_F, 5, &used));
	TEQ(used, (uint64_t)INT64_MAX);
	TOK(gs_uncharge(fd, CARD_F, UINT64_MAX, &used));
	TEQ(used, 0);
	close(fd);
	return 0;
}

static int t_charge_extremes(void)
{
	pid_t pid = gs_spawn(child_g, NULL, 10);

	TJOIN(pid, 5000, "G");
	return 0;
}

/* E2: the last vGPU destroyed: the page says OWNER_ALL to the detached file */
#define CARD_E2 11
static int child_e2(void *arg)
{
	struct gpuslice_attach a;
	const struct gpuslice_sched_page *pg;
	struct gpuslice_sched_page snap = {0};
	int fd, owns;

	(void)arg;
	T(gs_cg_enter("gsrvX") == 0, "enter");
	fd = gs_open();
	T(fd >= 0, "open");
	TOK(gs_attach(fd, CARD_E2, &a));
	pg = gs_map_page(fd, CARD_E2);
	T(pg, "mmap");
	sh[20] = 1;
	for (int i = 0; i < 1000 && !sh[21]; i++)
		gs_sleep_ms(2);
	TE(gs_acquire(fd, CARD_E2, GPUSLICE_ACQUIRE_NONBLOCK, 0, NULL, NULL), ENODEV);
	owns = gs_page_owns(pg, (int32_t)a.id, NULL);
	gs_page_read(pg, &snap);
	T(!owns, "detached file passes the fast path: page owner %d", snap.owner);
	close(fd);
	return 0;
}

static int t_dead_last_page(void)
{
	uint64_t cx = gs_cg_create("gsrvX");
	int idx;
	pid_t p1;

	memset((void *)sh, 0, 128);
	TOK(gs_card_set(gs_fd, CARD_E2, GPUSLICE_POLICY_FIXED, 20, 20 * MS, 0));
	idx = gs_vgpu_create(gs_fd, CARD_E2, cx, 1 << 20, 50, 0, C);
	T(idx >= 0, "create X");
	p1 = gs_spawn(child_e2, NULL, 10);
	for (int i = 0; i < 1000 && !sh[20]; i++)
		gs_sleep_ms(2);
	TOK(gs_vgpu_destroy(gs_fd, CARD_E2, (uint32_t)idx));
	sh[21] = 1;
	TJOIN(p1, 5000, "old");
	return 0;
}

/* H: a high-priority vGPU's one EAGAIN starves the card */
#define CARD_H 12
#define H_RECLAIM_MS 10
static int child_h(void *arg)
{
	struct gpuslice_attach a;
	const char *cg = arg;
	int fd;

	T(gs_cg_enter(cg) == 0, "enter");
	fd = gs_open();
	T(fd >= 0, "open");
	TOK(gs_attach(fd, CARD_H, &a));
	if (cg[4] == 'H') {
		for (int i = 0; i < 1000 && !sh[31]; i++)
			gs_sleep_ms(2);
		int r, e, granted;

		/*
		 * The subject is an ACQUIRE that fails: one landing in H's own
		 * unit is granted (work until RELEASE_IDLE), so give that back
		 * and try again until one fails: past the reclaim window, as
		 * an active high-priority vGPU keeps the card.
		 */
		r = acquire_until_eagain(fd, CARD_H, 100, H_RECLAIM_MS + 7, &e,
					 &granted);
		gs_line("GSINFO " P " H high-priority nonblock: rc %d %s (after "
			"%d granted)", r, r < 0 ? gs_errname(e) : "0", granted);
		T(r < 0 && e == EAGAIN, "no NONBLOCK ACQUIRE of H failed: rc %d %s",
		  r, gs_errname(e));
		sh[32] = 1;
	}
	for (int i = 0; i < 2000 && !sh[30]; i++)
		gs_sleep_ms(2);
	close(fd);
	return 0;
}

static int t_high_eagain(void)
{
	uint64_t ch = gs_cg_create("gsrvH"), cl = gs_cg_create("gsrvL");
	struct gpuslice_vgpu_stats s0, s1, s2;
	int idh, idl;
	pid_t ph, pl;

	memset((void *)sh, 0, 256);
	TOK(gs_card_set(gs_fd, CARD_H, GPUSLICE_POLICY_FIXED, 20, 5 * MS,
			H_RECLAIM_MS * MS));
	idh = gs_vgpu_create(gs_fd, CARD_H, ch, 1 << 20, 10, 1, C);
	idl = gs_vgpu_create(gs_fd, CARD_H, cl, 1 << 20, 50, 0, C);
	T(idh >= 0 && idl >= 0, "create");
	ph = gs_spawn(child_h, "gsrvH", 10);
	pl = gs_spawn(child_h, "gsrvL", 10);
	gs_sleep_ms(100);
	TOK(gs_vgpu_stats(gs_fd, CARD_H, (uint32_t)idl, &s0));
	gs_sleep_ms(300);
	TOK(gs_vgpu_stats(gs_fd, CARD_H, (uint32_t)idl, &s1));
	sh[31] = 1;
	for (int i = 0; i < 1000 && !sh[32]; i++)
		gs_sleep_ms(2);
	gs_sleep_ms(20);
	TOK(gs_vgpu_stats(gs_fd, CARD_H, (uint32_t)idl, &s0));
	gs_sleep_ms(300);
	TOK(gs_vgpu_stats(gs_fd, CARD_H, (uint32_t)idl, &s2));
	sh[30] = 1;
	TJOIN(ph, 5000, "H");
	TJOIN(pl, 5000, "L");
	gs_line("GSINFO " P " H: L (50%%) slices in 300 ms before: %llu, after H's one EAGAIN: %llu",
		(unsigned long long)(s1.slices), (unsigned long long)(s2.slices - s0.slices));
	T(s2.slices - s0.slices > 0, "one NONBLOCK EAGAIN of a high-priority vGPU "
	  "starves the 50%% vGPU (0 slices in 300 ms)");
	return 0;
}

int main(void)
{
	gs_init(P, 110);
	sh = gs_shm(4096);
	gs_run("pending_shared_file", t_pending_shared_file);
	gs_run("timer_without_procs", t_timer_without_procs);
	gs_run("attach_is_not_work", t_attach_is_not_work);
	gs_run("eagain_leaves_pending", t_eagain_leaves_pending);
	gs_run("dead_last_page_fastpath", t_dead_last_page);
	gs_run("high_eagain_starves", t_high_eagain);
	gs_run("card_set_einval_busy", t_card_set_order);
	gs_run("charge_extremes", t_charge_extremes);
	return gs_finish();
}
