// SPDX-License-Identifier: Apache-2.0
/*
 * The C ledger itself, compiled into package ledger from the shim's own
 * sources (one implementation), followed by test hooks. The hooks live
 * here, in the same translation unit, because they reach the ledger's
 * static helpers (the lock); Go calls them only through unexported
 * functions used by the package's tests.
 */
#include "ledger_file.c"
#include "ledger_file_open.c"

#include <signal.h>
#include <sys/wait.h>

#include "ledger_c.h"

int gs_lf_test_state(struct gs_ledger *gl, struct gs_lf_test_state *st)
{
	struct gs_file_ledger *l = to_lf(gl);
	unsigned int i;
	int err;

	err = lf_lock(l);
	if (err)
		return err;
	st->used = ld64(&l->hdr->used_bytes);
	st->sum = lf_sum_slots(l->slots);
	st->cap = ld64(&l->hdr->cap_bytes);
	st->owner_dead = ld64(&l->hdr->owner_dead);
	st->reaped = ld64(&l->hdr->reaped);
	st->in_use = 0;
	for (i = 0; i < GS_LF_NSLOTS; i++)
		st->in_use += ld64(&l->slots[i].state) == GS_LF_USED;
	st->slot = l->slot;
	lf_unlock(l);
	return 0;
}

/*
 * Dies holding the lock: takes it, scribbles over the total as a holder
 * killed mid-update would, says so on stdout and waits for SIGKILL.
 */
int gs_lf_test_lock_and_hang(struct gs_ledger *gl, uint64_t scribble)
{
	struct gs_file_ledger *l = to_lf(gl);
	static const char msg[] = "locked\n";
	int err;

	err = lf_lock(l);
	if (err)
		return err;
	st64(&l->hdr->used_bytes, scribble);
	if (write(1, msg, sizeof(msg) - 1) != (ssize_t)sizeof(msg) - 1)
		return -EIO;
	for (;;)
		pause();
}

struct storm {
	struct gs_ledger *l;
	uint64_t iters;		/* 0: until *stop */
	uint64_t seed;
	uint64_t max_bytes;
	const int *stop;
	int errors;
	pthread_t tid;
};

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int storm_done(const struct storm *st, uint64_t i)
{
	if (st->iters)
		return i >= st->iters;
	return __atomic_load_n(st->stop, __ATOMIC_RELAXED);
}

/* Random charges and uncharges, at most 8 outstanding. */
static void *storm_thread(void *arg)
{
	struct storm *st = arg;
	uint64_t held[8], rnd = st->seed | 1, r, size, used, cap, i;
	int n = 0, rc;

	for (i = 0; !storm_done(st, i); i++) {
		r = xorshift(&rnd);
		if (n == 0 || (n < 8 && (r & 1))) {
			size = 1 + (r >> 16) % st->max_bytes;
			rc = gs_ledger_charge(st->l, size);
			if (!rc)
				held[n++] = size;
			else if (rc != -ENOMEM)
				st->errors++;
		} else {
			gs_ledger_uncharge(st->l, held[--n]);
		}
		if ((r & 0x3f00) == 0 &&
		    (gs_ledger_usage(st->l, &used, &cap) || used > cap))
			st->errors++;
	}
	while (n)
		gs_ledger_uncharge(st->l, held[--n]);
	return NULL;
}

/* Starts up to threads storm threads; returns how many started. */
static int storm_start(struct storm *st, int threads, struct gs_ledger *l,
		       uint64_t iters, uint64_t seed, uint64_t max_bytes,
		       const int *stop)
{
	int i;

	for (i = 0; i < threads; i++) {
		st[i] = (struct storm){ .l = l, .iters = iters,
					.seed = seed * 7919 + (uint64_t)i + 1,
					.max_bytes = max_bytes ? max_bytes : 1,
					.stop = stop };
		if (pthread_create(&st[i].tid, NULL, storm_thread, &st[i]))
			break;
	}
	return i;
}

/* Joins the first n threads; returns their errors. */
static int storm_join(struct storm *st, int n)
{
	int i, errors = 0;

	for (i = 0; i < n; i++) {
		pthread_join(st[i].tid, NULL);
		errors += st[i].errors;
	}
	return errors;
}

/* Returns the number of unexpected results, or -errno. */
int gs_lf_test_storm(struct gs_ledger *l, int threads, uint64_t iters,
		     uint64_t seed, uint64_t max_bytes)
{
	struct storm st[64];
	int n, errors;

	if (threads < 1 || threads > 64 || !iters)
		return -EINVAL;
	n = storm_start(st, threads, l, iters, seed, max_bytes, NULL);
	errors = storm_join(st, n);
	return n < threads ? -EAGAIN : errors;
}

/* Waits up to 60 s for pid; SIGKILLs it past that. Its status or -1. */
static int wait_child(pid_t pid)
{
	struct timespec ms = { 0, 1000000 };
	int status, i;

	for (i = 0; i < 60000; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
		nanosleep(&ms, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

/*
 * Forks. The child, after after_fork_child, must get a slot of its own,
 * charge bytes on it and see expect_used in total; it uncharges unless
 * leak. Returns the child's exit status (0: all good) or -errno.
 */
int gs_lf_test_fork(struct gs_ledger *gl, uint64_t bytes, uint64_t expect_used,
		    int leak)
{
	struct gs_file_ledger *l = to_lf(gl);
	int parent_slot = l->slot;
	uint64_t used, cap;
	pid_t pid;

	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid)
		return wait_child(pid);
	gl->ops->after_fork_child(gl);
	if (l->slot != -1 || l->fd != -1)
		_exit(10);
	if (gs_ledger_charge(gl, bytes))
		_exit(11);
	if (l->slot < 0 || l->slot == parent_slot)
		_exit(12);
	if (gs_ledger_usage(gl, &used, &cap) || used != expect_used)
		_exit(13);
	if (!leak)
		gs_ledger_uncharge(gl, bytes);
	_exit(0);
}

/* The forked child of the fork storm: charge, uncharge, own nothing. */
static void fork_storm_child(struct gs_ledger *gl)
{
	struct gs_file_ledger *l = to_lf(gl);
	int i, rc;

	gl->ops->after_fork_child(gl);
	for (i = 0; i < 16; i++) {
		rc = gs_ledger_charge(gl, 4096);
		if (rc && rc != -ENOMEM)
			_exit(20);
		if (!rc)
			gs_ledger_uncharge(gl, 4096);
	}
	if (l->slot >= 0 && ld64(&l->slots[l->slot].bytes))
		_exit(21);
	_exit(0);
}

/*
 * Forks while threads hammer the ledger, so forks land while a parent
 * thread holds the lock. Returns the number of failed children or -errno.
 */
int gs_lf_test_fork_storm(struct gs_ledger *l, int threads, int forks)
{
	struct storm st[64];
	int stop = 0, bad = 0, err = 0, i, n;
	pid_t pid;

	if (threads < 1 || threads > 64)
		return -EINVAL;
	n = storm_start(st, threads, l, 0, 42, 1 << 20, &stop);
	if (n < threads)
		err = -EAGAIN;
	for (i = 0; !err && i < forks; i++) {
		pid = fork();
		if (pid < 0) {
			err = -errno;
			break;
		}
		if (!pid)
			fork_storm_child(l);
		bad += wait_child(pid) != 0;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	bad += storm_join(st, n);
	return err ? err : bad;
}

/* Times pairs charge/uncharge pairs through the ops; total ns or -errno. */
int64_t gs_lf_test_bench(struct gs_ledger *l, uint64_t pairs, uint64_t bytes)
{
	uint64_t i, t0;
	int err;

	t0 = gs_lf_clock_ns(CLOCK_MONOTONIC);
	for (i = 0; i < pairs; i++) {
		err = gs_ledger_charge(l, bytes);
		if (err)
			return err;
		gs_ledger_uncharge(l, bytes);
	}
	return (int64_t)(gs_lf_clock_ns(CLOCK_MONOTONIC) - t0);
}
