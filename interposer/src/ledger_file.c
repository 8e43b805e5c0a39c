// SPDX-License-Identifier: Apache-2.0
/*
 * The shared ledger file of the no-module mode: one file per card per
 * vGPU, mmapped by every process of the container, layout in
 * ledger_file_layout.h.
 *
 * Locking. A robust, process-shared pthread mutex in the file guards the
 * totals and the slots. Uncontended it costs two atomic operations and no
 * system call. A holder that dies leaves it EOWNERDEAD: the next locker
 * recomputes the total from the slots (each a set of single 64-bit stores,
 * so always self-consistent) and marks the mutex consistent.
 *
 * Liveness. Every charging process owns one slot and holds, for its whole
 * life, a write record lock on the slot's byte range. It is an open file
 * description (OFD) lock, not a classic POSIX one: the kernel drops it
 * when the process dies (kill -9 included) or execs (the fd is
 * O_CLOEXEC), and, unlike a POSIX lock, not when some other fd of the same
 * file is closed in the process (an observer, a second handle). A USED
 * slot whose range nobody locks belongs to a dead process: the reaper
 * gives its bytes back. No pid is trusted: pids are reused and differ
 * between pid namespaces.
 *
 * An OFD lock is shared by everything holding the open file description,
 * so a forked child closes the inherited fd (after_fork_child) and opens
 * the file afresh when it first needs it: otherwise the child would keep
 * a dead parent's slot alive, or claim its own slot on the parent's
 * description.
 *
 * Nothing here logs or allocates after open: errors are returned as
 * -errno and the caller decides.
 *
 * Caveats. A process stopped (SIGSTOP, freezer, debugger) inside a
 * critical section blocks the others until it runs again or dies;
 * observers give up after GS_LF_OBSERVE_WAIT_S with -ETIMEDOUT. The
 * mutex is glibc's (the header records the ABI; other libcs are refused)
 * and its word holds thread ids: lockers in different pid namespaces (the
 * agent) are fine, save for the kernel's robust-list cleanup of a thread
 * that dies while acquiring just as a thread with the same numeric id in
 * another namespace holds the lock. The file must not be replaced while in
 * use: a forked child that reopens it then fails with -ESTALE.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ledger_file_layout.h"

static struct gs_file_ledger *to_lf(struct gs_ledger *gl)
{
	return (struct gs_file_ledger *)gl;
}

/* Shared words are read and written whole: no tearing, no elided store. */
static uint64_t ld64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void st64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/* ---- record locks on slots ---- */

static void gs_range_flock(struct flock *fl, short type, off_t start, off_t len)
{
	memset(fl, 0, sizeof(*fl));
	fl->l_type = type;
	fl->l_whence = SEEK_SET;
	fl->l_start = start;
	fl->l_len = len;
}

int gs_lf_range_setlk(int fd, off_t start, off_t len, short type)
{
	struct flock fl;

	gs_range_flock(&fl, type, start, len);
	if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
		return 0;
	return (errno == EAGAIN || errno == EACCES) ? -EAGAIN : -errno;
}

int gs_lf_range_held(int fd, off_t start, off_t len)
{
	struct flock fl;

	gs_range_flock(&fl, F_WRLCK, start, len);
	if (fcntl(fd, F_OFD_GETLK, &fl))
		return -errno;
	return fl.l_type != F_UNLCK;
}

static off_t lf_slot_start(int i)
{
	return (off_t)GS_LF_HEADER_SIZE + (off_t)i * GS_LF_SLOT_SIZE;
}

/* F_WRLCK: 0 when slot i's lock is now ours, -EAGAIN when another open
 * file description has it; F_UNLCK: lets it go. */
static int lf_slot_setlk(int fd, int i, short type)
{
	return gs_lf_range_setlk(fd, lf_slot_start(i), GS_LF_SLOT_SIZE, type);
}

/*
 * 1: a live process holds slot i's lock; 0: nobody does; -errno.
 * Locks of our own description never conflict, hence never show here:
 * callers skip our own slot.
 */
static int lf_slot_held(int fd, int i)
{
	return gs_lf_range_held(fd, lf_slot_start(i), GS_LF_SLOT_SIZE);
}

/* ---- the totals (all under the mutex) ---- */

static uint64_t lf_sum_slots(const struct gs_lf_slot *slots)
{
	uint64_t sum = 0, b;
	unsigned int i;

	for (i = 0; i < GS_LF_NSLOTS; i++) {
		if (ld64(&slots[i].state) != GS_LF_USED)
			continue;
		b = ld64(&slots[i].bytes);
		sum = sum + b < sum ? UINT64_MAX : sum + b;
	}
	return sum;
}

/*
 * The previous holder died inside a critical section: whatever it was
 * doing, the slots are the truth. Make a reap due right away, since the
 * dead holder's own slot is most likely orphaned too.
 */
static void lf_recover(struct gs_file_ledger *l)
{
	struct gs_lf_header *h = l->hdr;

	st64(&h->used_bytes, lf_sum_slots(l->slots));
	st64(&h->last_reap_ns, 0);
	st64(&h->owner_dead, ld64(&h->owner_dead) + 1);
}

/* Takes bytes out of the total; never below zero. */
static void lf_sub_used(struct gs_file_ledger *l, uint64_t bytes)
{
	uint64_t used = ld64(&l->hdr->used_bytes);

	if (used >= bytes)
		st64(&l->hdr->used_bytes, used - bytes);
	else	/* cannot happen while the invariant holds: rebuild it */
		st64(&l->hdr->used_bytes, lf_sum_slots(l->slots));
}

/* The vGPU's use: the slots' bytes and the driver's unseen ones. */
static uint64_t lf_in_use(const struct gs_lf_header *h)
{
	uint64_t used = ld64(&h->used_bytes);
	uint64_t unseen = ld64(&h->unseen_bytes);

	return used + unseen < used ? UINT64_MAX : used + unseen;
}

static int lf_room(const struct gs_lf_header *h, uint64_t bytes)
{
	uint64_t used = lf_in_use(h);
	uint64_t cap = ld64(&h->cap_bytes);

	return used <= cap && bytes <= cap - used;
}

/* Frees slot s, giving its bytes back. Dying half-way is recoverable. */
static void lf_slot_free(struct gs_file_ledger *l, struct gs_lf_slot *s)
{
	uint64_t bytes = ld64(&s->bytes);

	st64(&s->state, GS_LF_FREE);
	lf_sub_used(l, bytes);
	st64(&s->bytes, 0);
}

/* ---- the mutex ---- */

/*
 * Waits for the mutex in short slices rather than in one sleep. glibc's
 * robust mutex hands "there are other sleepers" to the one waiter an
 * unlock wakes; if that waiter is killed before it takes the lock while
 * another thread barges in, the kernel's exit cleanup passes the wakeup
 * on only when the lock is free, so the other sleepers may never be woken
 * (seen with 8 processes x 16 threads and one kill -9). A sleeper that
 * looks again every slice cannot be stranded.
 */
static int lf_lock_wait(pthread_mutex_t *m, uint64_t deadline)
{
	struct timespec ts;
	int err;

	err = pthread_mutex_trylock(m);	/* the uncontended path: no clock */
	while (err == EBUSY) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += GS_LF_LOCK_SLICE_NS;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		err = pthread_mutex_timedlock(m, &ts);
		if (err != ETIMEDOUT)
			break;
		if (deadline && gs_lf_clock_ns(CLOCK_MONOTONIC) >= deadline)
			return ETIMEDOUT;
		err = EBUSY;
	}
	return err;
}

/* Observers give up after GS_LF_OBSERVE_WAIT_S; the shim waits. */
static int lf_lock(struct gs_file_ledger *l)
{
	pthread_mutex_t *m = &l->hdr->lock.mutex;
	uint64_t deadline = 0;
	int err;

	if (l->flags & GS_LEDGER_OBSERVE)
		deadline = gs_lf_clock_ns(CLOCK_MONOTONIC) +
			   GS_LF_OBSERVE_WAIT_S * 1000000000ull;
	err = lf_lock_wait(m, deadline);
	if (err == EOWNERDEAD) {
		lf_recover(l);
		err = pthread_mutex_consistent(m);
		if (err) {
			pthread_mutex_unlock(m);
			return -EIO;
		}
	}
	if (err == ENOTRECOVERABLE)
		return -EIO;
	return -err;
}

static void lf_unlock(struct gs_file_ledger *l)
{
	pthread_mutex_unlock(&l->hdr->lock.mutex);
}

/* ---- our fd ---- */

/* Opens the file again (in a forked child); it must be the same file. */
static int lf_ensure_fd(struct gs_file_ledger *l)
{
	int fd;

	if (l->fd >= 0)
		return 0;
	fd = gs_lf_reopen(l->path, l->dev, l->ino);
	if (fd < 0)
		return fd;
	l->fd = fd;
	return 0;
}

/*
 * Before claiming: if our fd was closed behind our back (closefrom() and
 * the like), the number may now name another file. Forget it, do not
 * close it: it is not ours any more.
 */
static int lf_check_fd(struct gs_file_ledger *l)
{
	if (l->fd >= 0 && !gs_lf_fd_is(l->fd, l->dev, l->ino))
		l->fd = -1;
	return lf_ensure_fd(l);
}

/* ---- reaping ---- */

/* Reclaims the slots of dead processes. Returns how many, or -errno. */
static int lf_reap_locked(struct gs_file_ledger *l, uint64_t now)
{
	struct gs_lf_header *h = l->hdr;
	int i, held, n = 0, err;

	st64(&h->last_reap_ns, now);	/* even on failure: no retry storm */
	err = lf_ensure_fd(l);
	if (err)
		return err;
	for (i = 0; i < (int)GS_LF_NSLOTS; i++) {
		if (i == l->slot || ld64(&l->slots[i].state) != GS_LF_USED)
			continue;
		held = lf_slot_held(l->fd, i);
		if (held < 0)
			return held;
		if (held)
			continue;
		lf_slot_free(l, &l->slots[i]);
		st64(&h->reaped, ld64(&h->reaped) + 1);
		n++;
	}
	return n;
}

/*
 * Unsigned: a last_reap_ns ahead of now (written from another time
 * namespace) wraps to a huge age and counts as due, which is harmless.
 */
static int lf_reap_due(const struct gs_lf_header *h, uint64_t now)
{
	return now - ld64(&h->last_reap_ns) >= GS_LF_REAP_INTERVAL_NS;
}

/* ---- slots ---- */

/*
 * Claims a free slot: its record lock first, then the USED mark, so a
 * reaper never sees a live owner's slot without its lock. A slot marked
 * free whose lock is still held is being let go by a closing process:
 * skip it. When all are USED, reap once and look again.
 */
static int lf_claim_locked(struct gs_file_ledger *l, uint64_t now)
{
	struct gs_lf_header *h = l->hdr;
	struct gs_lf_slot *s;
	int i, pass, err;
	uint64_t gen;

	err = lf_check_fd(l);
	if (err)
		return err;
	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < (int)GS_LF_NSLOTS; i++) {
			s = &l->slots[i];
			if (ld64(&s->state) == GS_LF_USED)
				continue;
			err = lf_slot_setlk(l->fd, i, F_WRLCK);
			if (err == -EAGAIN)
				continue;
			if (err)
				return err;
			gen = ld64(&h->next_gen) + 1;
			st64(&h->next_gen, gen);
			st64(&s->bytes, 0);
			st64(&s->gen, gen);
			__atomic_store_n(&s->pid, (int32_t)getpid(),
					 __ATOMIC_RELAXED);
			st64(&s->claimed_ns, gs_lf_clock_ns(CLOCK_REALTIME));
			st64(&s->state, GS_LF_USED);
			l->slot = i;
			l->gen = gen;
			return 0;
		}
		if (pass == 0 && lf_reap_locked(l, now) <= 0)
			break;
	}
	return -ENOSPC;
}

/*
 * Makes sure we own a slot. If ours was reaped while we live (only if our
 * fd, hence our lock, was closed behind our back), its bytes are already
 * gone from the total: the generation tells, and we start over on a new
 * slot rather than charge into someone else's.
 */
static int lf_own_slot(struct gs_file_ledger *l, uint64_t now)
{
	struct gs_lf_slot *s;

	if (l->slot >= 0) {
		s = &l->slots[l->slot];
		if (ld64(&s->state) == GS_LF_USED && ld64(&s->gen) == l->gen)
			return 0;
		/* Drop the old range, but only on a description that is
		 * still ours. */
		if (!lf_check_fd(l))
			lf_slot_setlk(l->fd, l->slot, F_UNLCK);
		l->slot = -1;
	}
	return lf_claim_locked(l, now);
}

static struct gs_lf_slot *lf_my_slot(struct gs_file_ledger *l)
{
	struct gs_lf_slot *s;

	if (l->slot < 0)
		return NULL;
	s = &l->slots[l->slot];
	if (ld64(&s->state) != GS_LF_USED || ld64(&s->gen) != l->gen)
		return NULL;
	return s;
}

/* ---- ops ---- */

static int lf_charge(struct gs_ledger *gl, uint64_t bytes)
{
	struct gs_file_ledger *l = to_lf(gl);
	struct gs_lf_slot *s;
	int err, reaped = 0;
	uint64_t now;

	if (l->flags & GS_LEDGER_OBSERVE)
		return -EPERM;
	if (!bytes)
		return 0;
	now = gs_lf_clock_ns(CLOCK_MONOTONIC);	/* vDSO: no system call */
	err = lf_lock(l);
	if (err)
		return err;
	err = lf_own_slot(l, now);
	if (err)
		goto out;
	if (lf_reap_due(l->hdr, now)) {
		lf_reap_locked(l, now);
		reaped = 1;
	}
	/* Refuse only after the dead have given their bytes back. */
	if (!lf_room(l->hdr, bytes) && !reaped)
		lf_reap_locked(l, now);
	if (!lf_room(l->hdr, bytes)) {
		err = -ENOMEM;
		goto out;
	}
	/* Total first: dying in between over-counts, never over-commits. */
	s = &l->slots[l->slot];
	st64(&l->hdr->used_bytes, ld64(&l->hdr->used_bytes) + bytes);
	st64(&s->bytes, ld64(&s->bytes) + bytes);
out:
	lf_unlock(l);
	return err;
}

/* Uncharging more than this process charged is a caller bug: clamp. */
static void lf_uncharge(struct gs_ledger *gl, uint64_t bytes)
{
	struct gs_file_ledger *l = to_lf(gl);
	struct gs_lf_slot *s;
	uint64_t have;

	if ((l->flags & GS_LEDGER_OBSERVE) || !bytes)
		return;
	if (lf_lock(l))
		return;
	s = lf_my_slot(l);
	if (s) {
		have = ld64(&s->bytes);
		if (bytes > have)
			bytes = have;
		/* Slot first: dying in between over-counts the total. */
		st64(&s->bytes, have - bytes);
		lf_sub_used(l, bytes);
	}
	lf_unlock(l);
}

static int lf_usage(struct gs_ledger *gl, uint64_t *used, uint64_t *cap)
{
	struct gs_file_ledger *l = to_lf(gl);
	uint64_t now = gs_lf_clock_ns(CLOCK_MONOTONIC);
	int err;

	err = lf_lock(l);
	if (err)
		return err;
	if (lf_reap_due(l->hdr, now))
		lf_reap_locked(l, now);	/* best effort */
	*used = lf_in_use(l->hdr);
	*cap = ld64(&l->hdr->cap_bytes);
	lf_unlock(l);
	return 0;
}

/*
 * In the child, single-threaded: no locking. A parent thread that held the
 * mutex at fork releases it in the shared mapping; we must not. The
 * inherited description carries the parent's slot lock: close our copy so
 * the lock dies with the parent, and own nothing.
 */
static void lf_after_fork_child(struct gs_ledger *gl)
{
	struct gs_file_ledger *l = to_lf(gl);

	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	l->slot = -1;
	l->gen = 0;
}

/*
 * The caller has uncharged what it still holds; whatever is left goes
 * back too. If the lock cannot be had, closing the fd still drops our
 * record lock and the survivors reap the slot.
 */
static void lf_close(struct gs_ledger *gl)
{
	struct gs_file_ledger *l = to_lf(gl);
	struct gs_lf_slot *s;

	if (l->slot >= 0 && !lf_lock(l)) {
		s = lf_my_slot(l);
		if (s)
			lf_slot_free(l, s);
		lf_unlock(l);
	}
	if (l->fd >= 0) {
		/* Explicitly: a child forked without after_fork_child may
		 * share the description and would keep the lock alive. */
		if (l->slot >= 0)
			lf_slot_setlk(l->fd, l->slot, F_UNLCK);
		close(l->fd);
	}
	munmap(l->hdr, GS_LF_SIZE);
	free(l);
}

const struct gs_ledger_ops gs_lf_ops = {
	.name = "file",
	.charge = lf_charge,
	.uncharge = lf_uncharge,
	.usage = lf_usage,
	.after_fork_child = lf_after_fork_child,
	.close = lf_close,
};

int gs_file_ledger_reap(struct gs_ledger *gl)
{
	struct gs_file_ledger *l = to_lf(gl);
	int n;

	if (!gl || gl->ops != &gs_lf_ops)
		return -EINVAL;
	n = lf_lock(l);
	if (n)
		return n;
	n = lf_reap_locked(l, gs_lf_clock_ns(CLOCK_MONOTONIC));
	lf_unlock(l);
	return n;
}

int gs_file_ledger_procs(struct gs_ledger *gl, struct gs_ledger_proc *procs,
			 int max)
{
	struct gs_file_ledger *l = to_lf(gl);
	struct gs_lf_slot *s;
	int i, n;

	if (!gl || gl->ops != &gs_lf_ops || max < 0 || (max && !procs))
		return -EINVAL;
	n = lf_lock(l);
	if (n)
		return n;
	/* Only the living: reap first. */
	n = lf_reap_locked(l, gs_lf_clock_ns(CLOCK_MONOTONIC));
	if (n >= 0) {
		n = 0;
		for (i = 0; i < (int)GS_LF_NSLOTS; i++) {
			s = &l->slots[i];
			if (ld64(&s->state) != GS_LF_USED)
				continue;
			if (n < max) {
				procs[n].pid = __atomic_load_n(
					&s->pid, __ATOMIC_RELAXED);
				procs[n].bytes = ld64(&s->bytes);
			}
			n++;
		}
	}
	lf_unlock(l);
	return n;
}
