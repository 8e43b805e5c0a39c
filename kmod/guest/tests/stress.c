/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * stress: 8 processes x 4 threads hammer ATTACH, CHARGE, UNCHARGE,
 * MEMINFO, ACQUIRE (non-blocking and with a short timeout), RELEASE,
 * VGPU_STATS, open and close, while the administrator creates, updates and
 * destroys vGPUs and reads /proc/gpuslice, and two of the processes are
 * killed with SIGKILL and replaced. Only documented errors are allowed.
 * Afterwards nothing is left charged or attached and the module still
 * works.
 */
#include "gstest.h"

#define P "stress"
#define NPROC 8
#define NTHR 4
#define NCG 4
#define RUN_MS 3000
#define CC 0	/* compute card, policy 4 */
#define CM 1	/* memory card */

struct st_shared {
	volatile int stop;
	volatile uint64_t ops[NPROC * 2];
};
static struct st_shared *ss;
static uint64_t cg[NCG];
static char cgname[NCG][16];

struct thr {
	int slot;
	int cgi;
	unsigned seed;
	uint64_t ops;
	char err[200];
};

static int allowed(int e, const int *ok)
{
	for (; *ok; ok++)
		if (e == *ok)
			return 1;
	return 0;
}

#define CHECKOP(call, ...)						\
	do {								\
		static const int _ok[] = { __VA_ARGS__, 0 };		\
		if ((call) < 0 && !allowed(errno, _ok)) {		\
			snprintf(t->err, sizeof(t->err), "%s: %s", #call,\
				 gs_errname(errno));			\
			goto out;					\
		}							\
	} while (0)

static void *hammer(void *arg)
{
	struct thr *t = arg;
	int fd = -1;

	while (!ss->stop) {
		unsigned r = rand_r(&t->seed);
		uint32_t card = (r >> 8) & 1 ? CM : CC;
		struct gpuslice_attach a;
		struct gpuslice_vgpu_stats s;
		uint64_t end;
		int32_t owner;

		if (fd < 0 || r % 64 == 0) {
			if (fd >= 0)
				close(fd);
			fd = gs_open();
			if (fd < 0) {
				snprintf(t->err, sizeof(t->err), "open: %s",
					 gs_errname(errno));
				goto out;
			}
		}
		switch (r % 10) {
		case 0:
			CHECKOP(gs_attach(fd, card, &a), ENOENT, ENODEV);
			break;
		case 1:
		case 2:
			CHECKOP(gs_charge(fd, card, 1 + rand_r(&t->seed) % 100000, NULL),
				ENOMEM, ENOTCONN, ENODEV);
			break;
		case 3:
			CHECKOP(gs_uncharge(fd, card, rand_r(&t->seed) % 150000, NULL),
				ENOTCONN);
			break;
		case 4:
			CHECKOP(gs_meminfo(fd, card, NULL, NULL), ENOTCONN, ENODEV);
			break;
		case 5:
			CHECKOP(gs_acquire(fd, card, GPUSLICE_ACQUIRE_NONBLOCK, 0, &end,
					   &owner), EAGAIN, ENOTCONN, ENODEV);
			break;
		case 6:
			CHECKOP(gs_acquire(fd, card, 0, 2 * MS, &end, &owner),
				ETIMEDOUT, ENOTCONN, ENODEV, EINTR);
			break;
		case 7:
			CHECKOP(gs_release(fd, card, (r >> 12) & 1 ?
					   GPUSLICE_RELEASE_IDLE : 0, 1000),
				ENOTCONN);
			break;
		case 8:
			CHECKOP(gs_vgpu_stats(fd, card, (r >> 12) % 8, &s), ENOENT);
			break;
		case 9: {
			char buf[8192];
			static const char *const f[] = {
				"/proc/gpuslice/vgpus", "/proc/gpuslice/procs",
				"/proc/gpuslice/cards" };

			if (gs_read_file(f[(r >> 12) % 3], buf, sizeof(buf)) < 0) {
				snprintf(t->err, sizeof(t->err), "read %s: %s",
					 f[(r >> 12) % 3], gs_errname(errno));
				goto out;
			}
			break;
		}
		}
		t->ops++;
		if ((t->ops & 63) == 0)
			ss->ops[t->slot] += 64;
	}
out:
	if (fd >= 0)
		close(fd);
	return NULL;
}

static int child_hammer(void *arg)
{
	int slot = (int)(uintptr_t)arg;
	int cgi = slot % NCG;
	struct thr th[NTHR];
	pthread_t tid[NTHR];

	T(gs_cg_enter(cgname[cgi]) == 0, "enter: %s", gs_errname(errno));
	for (int i = 0; i < NTHR; i++) {
		memset(&th[i], 0, sizeof(th[i]));
		th[i].slot = slot;
		th[i].cgi = cgi;
		th[i].seed = (unsigned)(slot * 131 + i * 7 + 1);
		T(pthread_create(&tid[i], NULL, hammer, &th[i]) == 0, "thread");
	}
	for (int i = 0; i < NTHR; i++)
		pthread_join(tid[i], NULL);
	for (int i = 0; i < NTHR; i++)
		T(th[i].err[0] == 0, "process %d thread %d: %s", slot, i, th[i].err);
	return 0;
}

/* The administrator's side; returns 0 or -1 with a failure reported. */
static int admin_step(unsigned *seed, int *ids)
{
	unsigned r = rand_r(seed);
	int k = (int)((r >> 4) % NCG);
	uint32_t card = (r >> 8) & 1 ? CM : CC;
	int *id = &ids[card * NCG + k];
	uint32_t mode = card == CM ? GPUSLICE_MODE_MEMORY : GPUSLICE_MODE_COMPUTE;
	uint32_t quota = card == CM ? 0 : 5 * (1 + (r >> 12) % 6);
	uint64_t cap = (1 + (r >> 16) % 8) * 100000ULL;
	static struct gs_tab tab;

	switch (r % 4) {
	case 0:
		if (*id < 0) {
			*id = gs_vgpu_create(gs_fd, card, cg[k], cap, quota, 0, mode);
			T(*id >= 0 || errno == ENOSPC, "create: %s", gs_errname(errno));
			if (*id < 0)
				*id = -1;
		}
		break;
	case 1:
		if (*id >= 0 && gs_vgpu_update(gs_fd, card, (uint32_t)*id, cg[k],
					       cap, quota, 0, mode) < 0)
			T(errno == ENOSPC, "update: %s", gs_errname(errno));
		break;
	case 2:
		if (*id >= 0 && (r >> 20) % 3 == 0) {
			TOK(gs_vgpu_destroy(gs_fd, card, (uint32_t)*id));
			*id = -1;
		}
		break;
	case 3:
		T(gs_tab_read((r >> 12) & 1 ? "vgpus" : "procs", &tab) == 0,
		  "read /proc: %s", gs_errname(errno));
		for (int i = 0; i < 2 * NCG; i++) {
			struct gpuslice_vgpu_stats s;

			if (ids[i] < 0)
				continue;
			TOK(gs_vgpu_stats(gs_fd, i < NCG ? CC : CM,
					  (uint32_t)ids[i], &s));
			TEQ(s.spec.cgroup_id, cg[i % NCG]);
		}
		break;
	}
	return 0;
}

static int t_hammer(void)
{
	pid_t pid[NPROC + 2];
	int ids[2 * NCG];
	unsigned seed = 12345;
	uint64_t t0, ops = 0;
	int killed = 0, steps = 0;

	for (int i = 0; i < 2 * NCG; i++)
		ids[i] = -1;
	memset(ss, 0, sizeof(*ss));
	for (int k = 0; k < NCG; k++) {
		ids[k] = gs_vgpu_create(gs_fd, CC, cg[k], 1 << 20, 10, 0,
					GPUSLICE_MODE_COMPUTE);
		ids[NCG + k] = gs_vgpu_create(gs_fd, CM, cg[k], 1 << 20, 0, 0,
					      GPUSLICE_MODE_MEMORY);
		T(ids[k] >= 0 && ids[NCG + k] >= 0, "create: %s", gs_errname(errno));
	}
	for (int i = 0; i < NPROC; i++) {
		pid[i] = gs_spawn(child_hammer, (void *)(uintptr_t)i, 60);
		T(pid[i] > 0, "fork");
	}
	t0 = gs_now();
	while (gs_now() - t0 < RUN_MS * MS) {
		if (admin_step(&seed, ids) < 0) {
			ss->stop = 1;
			return -1;
		}
		steps++;
		/* halfway: kill two hammering processes, start two more */
		if (!killed && gs_now() - t0 > RUN_MS * MS / 2) {
			for (int i = 0; i < 2; i++) {
				int st;

				kill(pid[i], SIGKILL);
				waitpid(pid[i], &st, 0);
				gs_forget(pid[i]);
				pid[i] = gs_spawn(child_hammer,
						  (void *)(uintptr_t)(NPROC + i), 60);
				T(pid[i] > 0, "fork");
			}
			killed = 1;
		}
		gs_sleep_ms(1);
	}
	ss->stop = 1;
	for (int i = 0; i < NPROC; i++) {
		char role[32];

		snprintf(role, sizeof(role), "hammer %d", i);
		TJOIN(pid[i], 15000, role);
	}
	for (int i = 0; i < NPROC + 2; i++)
		ops += ss->ops[i];
	gs_line("GSBENCH " P " client_ops %llu ops", (unsigned long long)ops);
	gs_line("GSBENCH " P " admin_steps %d steps", steps);
	T(ops > 1000, "only %llu client operations in %d ms",
	  (unsigned long long)ops, RUN_MS);

	/* nothing charged or attached is left */
	for (int i = 0; i < 2 * NCG; i++) {
		struct gpuslice_vgpu_stats s;

		if (ids[i] < 0)
			continue;
		TOK(gs_vgpu_stats(gs_fd, i < NCG ? CC : CM, (uint32_t)ids[i], &s));
		T(s.mem_used == 0 && s.nprocs == 0,
		  "card %d vGPU %d: mem_used %llu nprocs %u after every client left",
		  i < NCG ? CC : CM, ids[i], (unsigned long long)s.mem_used, s.nprocs);
	}
	{
		static struct gs_tab t;

		T(gs_tab_read("procs", &t) == 0, "procs: %s", gs_errname(errno));
		T(t.nrows == 0, "/proc/gpuslice/procs has %d rows after every "
		  "client left", t.nrows);
	}
	return 0;
}

static int child_sanity(void *arg)
{
	struct gpuslice_attach a;
	uint64_t used, end;
	int32_t owner;
	int fd, id = (int)(uintptr_t)arg;

	T(gs_cg_enter(cgname[0]) == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, CC, &a));
	TEQ(a.id, (uint32_t)id);
	TOK(gs_charge(fd, CC, 1000, &used));
	TEQ(used, 1000);
	for (int i = 0; i < 5; i++) {
		TOK(gs_acquire(fd, CC, 0, 2000 * MS, &end, &owner));
		TEQ(owner, id);
		gs_spin_until(end < gs_now() + 50 * MS ? end : gs_now() + 50 * MS);
		TOK(gs_release(fd, CC, 0, 1));
	}
	close(fd);
	return 0;
}

static int t_still_works(void)
{
	struct gpuslice_card c;
	struct gpuslice_vgpu_stats s;
	pid_t pid;
	int id;

	gs_destroy_all(gs_fd);
	TOK(gs_card_get(gs_fd, CC, &c));
	TEQ(c.nvgpus, 0);
	TOK(gs_card_get(gs_fd, CM, &c));
	TEQ(c.nvgpus, 0);
	id = gs_vgpu_create(gs_fd, CC, cg[0], 1 << 20, 50, 0, GPUSLICE_MODE_COMPUTE);
	T(id >= 0, "create: %s", gs_errname(errno));
	pid = gs_spawn(child_sanity, (void *)(uintptr_t)id, 30);
	T(pid > 0, "fork");
	TJOIN(pid, 20000, "client");
	TOK(gs_vgpu_stats(gs_fd, CC, (uint32_t)id, &s));
	TEQ(s.mem_used, 0);
	TEQ(s.nprocs, 0);
	T(s.slices >= 1, "no slice granted");
	TOK(gs_vgpu_destroy(gs_fd, CC, (uint32_t)id));
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	ss = gs_shm(sizeof(*ss));
	for (int k = 0; k < NCG; k++) {
		snprintf(cgname[k], sizeof(cgname[k]), "gsst%d", k);
		cg[k] = gs_cg_create(cgname[k]);
		if (!cg[k]) {
			gs_line("GSTEST " P " FAIL setup: cgroup: %s", gs_errname(errno));
			gs_nfail++;
			return gs_finish();
		}
	}
	if (gs_card_set(gs_fd, CC, GPUSLICE_POLICY_WEIGHTED, 20, 2 * MS, 20 * MS) < 0 ||
	    gs_card_set(gs_fd, CM, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0) {
		gs_line("GSTEST " P " FAIL setup: card: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("hammer", t_hammer);
	gs_run("still_works", t_still_works);
	return gs_finish();
}
