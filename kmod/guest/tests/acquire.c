/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * acquire: ACQUIRE on a card where the vGPU's turn is rare. Destroying a
 * vGPU wakes its blocked processes with ENODEV, after which CHARGE/MEMINFO/
 * ACQUIRE get ENODEV and UNCHARGE, RELEASE and close succeed, and the
 * detached file is not rebound to a new vGPU of its cgroup. ACQUIRE's
 * EAGAIN, ETIMEDOUT and EINTR, and a timeout is never cut short. (A client
 * killed with SIGKILL: sigkill.c.)
 */
#include "gstest.h"
#include "acqloop.h"

#define P "acquire"
#define C GPUSLICE_MODE_COMPUTE
/* card 1: policy 2, 64 units of 100 ms: D's turn comes once in 6.4 s */
#define CARD1 1
/* slots of *ks: the detached client (an acq_loop worker), child_errors */
#define SLOT_D 0
#define SLOT_E 1

static uint64_t cgD;
static int idD;

static volatile int *detached;	/* [0] step: 1 go on */

static int child_detached(void *arg)
{
	struct gpuslice_attach a;
	uint64_t used;
	int fd, fd2;

	(void)arg;
	T(gs_cg_enter("gsacqD") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, CARD1, &a));
	TEQ(a.id, (uint32_t)idD);
	TOK(gs_charge(fd, CARD1, 4242, NULL));
	wk[SLOT_D].fd = fd;
	wk[SLOT_D].card = CARD1;
	wk[SLOT_D].slot = SLOT_D;
	ks->ready[SLOT_D] = 1;
	acq_loop(&wk[SLOT_D]);
	T(ks->err[SLOT_D] == ENODEV, "ACQUIRE ended with %s, expected ENODEV",
	  gs_errname(ks->err[SLOT_D]));
	/* the detached record */
	TE(gs_charge(fd, CARD1, 1, NULL), ENODEV);
	TE(gs_meminfo(fd, CARD1, NULL, NULL), ENODEV);
	TE(gs_acquire(fd, CARD1, 0, 0, NULL, NULL), ENODEV);
	TE(gs_acquire(fd, CARD1, GPUSLICE_ACQUIRE_NONBLOCK, 0, NULL, NULL), ENODEV);
	TOK(gs_uncharge(fd, CARD1, 1000, NULL));
	TOK(gs_release(fd, CARD1, 0, 1000));
	TOK(gs_release(fd, CARD1, GPUSLICE_RELEASE_IDLE, 0));
	ks->done[SLOT_D] = 1;
	/* the parent creates a new vGPU for gsacqD meanwhile */
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
	ks->ready[SLOT_D] = ks->err[SLOT_D] = ks->done[SLOT_D] = 0;
	ks->in_acq[SLOT_D] = 0;
	pid = gs_spawn(child_detached, NULL, 30);
	T(pid > 0, "fork");
	T(wait_ready(SLOT_D) == 0, "child not ready: %s", gs_kid_msg(pid));
	T(wait_blocked(SLOT_D, pid, 1) == 0, "child never blocked in ACQUIRE");
	TOK(stats(CARD1, idD, &s));
	TEQ(s.mem_used, 4242);
	td = gs_now();
	TOK(gs_vgpu_destroy(gs_fd, CARD1, (uint32_t)idD));
	for (int i = 0; i < 1500 && !ks->err[SLOT_D]; i++)
		gs_sleep_ms(2);
	T(ks->err[SLOT_D], "the blocked ACQUIRE was not woken within 3 s of the "
	  "destroy (in_acq %d)", ks->in_acq[SLOT_D]);
	T(ks->err[SLOT_D] == ENODEV, "the blocked ACQUIRE got %s, expected ENODEV",
	  gs_errname(ks->err[SLOT_D]));
	T(ks->t_err[SLOT_D] - td < 500 * MS, "woken %llu ms after the destroy",
	  (unsigned long long)((ks->t_err[SLOT_D] - td) / MS));
	gs_line("GSBENCH " P " destroy_wake_ms %.2f ms",
		(double)(ks->t_err[SLOT_D] - td) / 1e6);
	for (int i = 0; i < 1500 && !ks->done[SLOT_D]; i++)
		gs_sleep_ms(2);
	T(ks->done[SLOT_D], "child stuck after ENODEV: %s", gs_kid_msg(pid));
	/* gone from the statistics; id and cgroup free again */
	TE(stats(CARD1, idD, &s), ENOENT);
	id2 = gs_vgpu_create(gs_fd, CARD1, cgD, 1 << 20, 0, 0, C);
	T(id2 >= 0, "new vGPU for the cgroup of the destroyed one: %s",
	  gs_errname(errno));
	T(id2 == idD, "new vGPU got id %d, expected the freed (lowest) %d", id2, idD);
	TOK(stats(CARD1, id2, &s));
	/* The old file's bytes (4242 charged, 1000 uncharged) still count. */
	TEQ(s.mem_used, 3242);
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
	T(gs_cg_enter("gsacqD") == 0, "enter: %s", gs_errname(errno));
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
		ks->in_acq[SLOT_E] = 1;
		t0 = gs_now();
		r = gs_acquire(fd, CARD1, 0, 0, &end, &owner);
		e = errno;
		t1 = gs_now();
		ks->in_acq[SLOT_E] = 0;
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
	ks->done[SLOT_E] = 1;

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

	ks->in_acq[SLOT_E] = 0;
	ks->done[SLOT_E] = 0;
	pid = gs_spawn(child_errors, NULL, 40);
	T(pid > 0, "fork");
	/* signal it whenever it blocks, until it reports done */
	for (int i = 0; i < 3000 && !ks->done[SLOT_E]; i++) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid) {
			gs_forget(pid);
			T(0, "child: %s", gs_kid_msg(pid)[0] ? gs_kid_msg(pid) :
			  "exited early");
		}
		if (ks->in_acq[SLOT_E] && gs_proc_state(pid) == 'S') {
			gs_sleep_ms(30);
			if (ks->in_acq[SLOT_E] && gs_proc_state(pid) == 'S')
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
	T(gs_cg_enter("gsacqD") == 0, "enter: %s", gs_errname(errno));
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
	cgD = gs_cg_create("gsacqD");
	if (!cgD ||
	    gs_card_set(gs_fd, CARD1, GPUSLICE_POLICY_AVERAGE, 64, 100 * MS, 0) < 0 ||
	    (idD = gs_vgpu_create(gs_fd, CARD1, cgD, 64 << 20, 0, 0, C)) < 0) {
		gs_line("GSTEST " P " FAIL setup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("destroy_blocked", t_destroy_blocked);
	gs_run("acquire_errors", t_acquire_errors);
	gs_run("acquire_timeout_length", t_timeout_length);
	return gs_finish();
}
