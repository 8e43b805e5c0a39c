/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * acqloop.h: clients that loop on a blocking ACQUIRE, shared by
 * sigkill.c and acquire.c. A worker slot (wk[slot], state in the shared
 * page *ks, which the program maps with gs_shm) runs acq_loop: ACQUIRE,
 * use the slice, RELEASE, until an error (recorded in ks->err with its
 * time) or ks->stop. wait_ready and wait_blocked let the parent wait for a
 * slot to be attached, or for its threads to sleep inside ACQUIRE.
 *
 * A header, not a program: run.sh builds only the .c files as programs.
 */
#ifndef ACQLOOP_H
#define ACQLOOP_H

#include "gstest.h"

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
static struct kstate *ks __attribute__((unused));

static struct worker wk[NW] __attribute__((unused));

/* ACQUIRE (blocking), use the slice, RELEASE; until error or stop. */
static inline void *acq_loop(void *arg)
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

static inline int wait_ready(int slot)
{
	for (int i = 0; i < 2500 && !ks->ready[slot]; i++)
		gs_sleep_ms(2);
	return ks->ready[slot] ? 0 : -1;
}

/* Every task of pid sleeping ('S'), checked twice 20 ms apart. */
static inline int all_sleeping(pid_t pid)
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
static inline int wait_blocked(int slot, pid_t pid, int nthreads)
{
	for (int i = 0; i < 500; i++) {
		if (ks->in_acq[slot] == nthreads && all_sleeping(pid) &&
		    ks->in_acq[slot] == nthreads)
			return 0;
		gs_sleep_ms(5);
	}
	return -1;
}

static inline int stats(uint32_t card, int id, struct gpuslice_vgpu_stats *s)
{
	return gs_vgpu_stats(gs_fd, card, (uint32_t)id, s);
}

#endif /* ACQLOOP_H */
