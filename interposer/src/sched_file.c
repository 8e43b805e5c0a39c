// SPDX-License-Identifier: Apache-2.0
/*
 * The schedule file of the no-module mode: the scheduler core of
 * kmod/core, run by the gated processes of every container on a card over
 * one shared file, $GPUSLICE_SCHED_DIR/card<N>.sched (layout in
 * sched_file_layout.h). Creating, validating and mapping the file is
 * sched_file_open.c; what both share is sched_file_int.h.
 *
 * Locking, as in the ledger file (ledger_file.c): a robust, process-shared
 * mutex in the file guards the core, the vGPU table and the slots. A
 * holder that dies leaves it EOWNERDEAD: the next locker rebuilds the core
 * from the vGPU table and the slots (the core's own state may be torn),
 * which may renumber the vGPUs; the gate takes its vGPU's id from every
 * acquire.
 *
 * Liveness. Each gated process owns a slot and holds an OFD write lock on
 * its range for its whole life (the fd is O_CLOEXEC and moved above
 * 1024). A USED slot nobody locks belongs to a dead process: a slow path
 * frees it (at most every GS_SF_REAP_INTERVAL_NS, and at every open),
 * takes it out of its vGPU's process count and pending work, and removes
 * the vGPU from the core when it was its last process. So a vGPU's id is
 * reused only after every process of its container is gone.
 *
 * Time. There is no timer: gs_sf_acquire advances the core (gs_tick) to
 * now, publishes the page and, when the slice is not its vGPU's, sleeps
 * until the page changes or the next change is due (gs_next_change), and
 * looks again. Every change of the page wakes its sleepers: a futex on
 * the page's sequence count, shared through the file's mapping. A late
 * tick does not shift the boundaries, it only loses the late part of the
 * slice; a drain does (below).
 *
 * Draining. A granted process holds its vGPU (gs_vgpu_hold) until its
 * fence says what it queued has run (gs_sf_release, from the gate's
 * fencer thread at the slice's end). Until then the core waits for its
 * drain (at most the drain's bound): the next owner's slice is whole
 * after it, and its first kernels queue behind the tail, or, where the
 * vGPU's tails are long, start after it (a closed drain: the page names
 * nobody meanwhile); the overrun is the vGPU's debt (kmod/core).
 * A hold is of the slice granted (hold_start): once the card moved on
 * at the bound, it lapses. A dead process's hold ends with its slot.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sched_file_int.h"

/* ---- activity (all under the mutex) ---- */

static bool sf_entry_ok(const struct gs_sf_header *h, int v)
{
	return v >= 0 && v < (int)GS_SF_NVGPUS &&
	       h->vgpu[v].state == GS_SF_USED;
}

/* Reports entry v's work to the core: pending while any process of it
 * holds a slice or waits for one. */
static void sf_note(struct gs_sf_header *h, int v, uint64_t now)
{
	bool pending = false;

	if (!sf_entry_ok(h, v))
		return;
	for (unsigned int i = 0; i < GS_SF_NSLOTS && !pending; i++) {
		const struct gs_sf_slot *s = &h->slot[i];

		pending = s->state == GS_SF_USED && s->vgpu == v &&
			  (s->pending || s->waiting);
	}
	gs_vgpu_note_work(&h->core, h->vgpu[v].core_id, now, pending);
}

/*
 * A grant is pending work only until its slice ends: a process that
 * launched in its slice and then stopped launching (it never comes back
 * to the slow path, whose fence would release it) is idle from its
 * slice's end, not for ever, so policies 3 and 6 reclaim its slices
 * reclaim_ns later. One that comes back waits, which is pending again.
 */
static void sf_expire(struct gs_sf_header *h, uint64_t now)
{
	for (unsigned int i = 0; i < GS_SF_NSLOTS; i++) {
		struct gs_sf_slot *s = &h->slot[i];

		if (s->state != GS_SF_USED || !s->pending ||
		    s->grant_end > now)
			continue;
		s->pending = 0;
		sf_note(h, s->vgpu, s->grant_end);
	}
}

/* Does a process of entry v still hold its slice that began at start? */
static bool sf_holders(const struct gs_sf_header *h, int v, uint64_t start)
{
	for (unsigned int i = 0; i < GS_SF_NSLOTS; i++)
		if (h->slot[i].state == GS_SF_USED && h->slot[i].vgpu == v &&
		    h->slot[i].holding && h->slot[i].hold_start == start)
			return true;
	return false;
}

/*
 * Whether a hold of vGPU id's slice that began at start is one the core
 * waits for (kmod/core, gs_vgpu_drained): of the current slice, of the
 * drain's while id drains, or of its lapsed drain's.
 */
static bool sf_hold_counts(const struct gs_card *c, int id, uint64_t start)
{
	return (c->owner == id && c->slice_start == start) ||
	       (c->drainer == id && c->drain_slice == start) ||
	       (c->vgpu[id].lapsed && c->vgpu[id].lapse_slice == start);
}

/*
 * Slot s stops holding at now. The last holder of a slice the core waits
 * for says its vGPU drained (gs_vgpu_drained): in its slice; as the
 * drainer after an early handover, where the next owner's slice end moves
 * earlier; or late, the drain lapsed, which the core charges. The release
 * of any older hold ends nothing: it must not end a newer drain.
 */
static void sf_unhold(struct gs_sf_header *h, struct gs_sf_slot *s,
		      uint64_t now)
{
	const struct gs_sf_vgpu *e;

	if (!s->holding)
		return;
	s->holding = 0;
	if (!sf_entry_ok(h, s->vgpu))
		return;
	e = &h->vgpu[s->vgpu];
	if (!sf_hold_counts(&h->core, e->core_id, s->hold_start) ||
	    sf_holders(h, s->vgpu, s->hold_start))
		return;
	gs_vgpu_drained(&h->core, e->core_id, now);
}

/*
 * The card is a vGPU's again (a new slice) while a process of it still
 * holds its previous slice, its fence in flight: the work that fence
 * waits for runs on in this slice and, past its end, in the next
 * owner's. The hold carries over to this slice, so that its end is a
 * drain charged as any other, not work run on uncharged (the core
 * charged the earlier slice's late work up to this slice's start and
 * takes the vGPU's new slice as the end of that drain). A hold older
 * than the most a drain is ever charged (GS_DRAIN_MAX_NS past its
 * grant's end: a stopped process) does not carry.
 */
static void sf_carry_holds(struct gs_sf_header *h, uint64_t now)
{
	const struct gs_card *c = &h->core;
	int owner = gs_owner(c), v;
	struct gs_sf_vgpu *e = NULL;
	bool carried = false;

	for (v = 0; owner >= 0 && v < (int)GS_SF_NVGPUS && !e; v++)
		if (h->vgpu[v].state == GS_SF_USED &&
		    h->vgpu[v].core_id == owner)
			e = &h->vgpu[v];
	if (!e || e->last_start == c->slice_start)
		return;
	v--;
	for (unsigned int i = 0; i < GS_SF_NSLOTS; i++) {
		struct gs_sf_slot *s = &h->slot[i];

		if (s->state != GS_SF_USED || s->vgpu != v || !s->holding ||
		    s->hold_start != e->last_start ||
		    now >= s->grant_end + GS_DRAIN_MAX_NS)
			continue;
		s->hold_start = c->slice_start;
		carried = true;
	}
	if (!carried)
		return;
	e->last_start = c->slice_start;
	gs_vgpu_hold(&h->core, owner, true);
}

/*
 * Advances the core to now: expired grants, a high-priority cut, the
 * tick, and holds carried into a slice of their vGPU.
 */
static void sf_advance(struct gs_sf_header *h, uint64_t now)
{
	sf_expire(h, now);
	/* A high-priority vGPU waiting ends a low-priority slice. */
	gs_preempt(&h->core, now);
	gs_tick(&h->core, now);
	sf_carry_holds(h, now);
}

/* One process fewer for entry v; the last one takes the vGPU away. */
static void sf_entry_put(struct gs_sf_header *h, int v)
{
	struct gs_sf_vgpu *e;

	if (!sf_entry_ok(h, v))
		return;
	e = &h->vgpu[v];
	if (e->nprocs)
		e->nprocs--;
	if (e->nprocs) {
		gs_vgpu_set_procs(&h->core, e->core_id, e->nprocs);
		return;
	}
	gs_vgpu_remove(&h->core, e->core_id);
	e->state = 0;
	h->removed++;
}

/* Frees slot i (a dead process's, or ours on the way out). */
static void sf_slot_free(struct gs_sf_header *h, int i, uint64_t now)
{
	struct gs_sf_slot *s = &h->slot[i];
	int v = s->vgpu;
	bool busy = s->pending || s->waiting;

	s->pending = 0;
	s->waiting = 0;
	if (busy)
		sf_note(h, v, now);
	sf_unhold(h, s, now);
	s->state = 0;
	s->vgpu = -1;
	sf_entry_put(h, v);
}

/*
 * The previous holder died inside a critical section: the core may be
 * torn. Rebuild it from the vGPU table (the ids may change) and the
 * slots, and make a reap due.
 */
static void sf_recover(struct gs_sf_header *h)
{
	struct gs_sched_config cfg = h->core.cfg;
	uint64_t now = mono();
	int v, id;

	if (gs_card_init(&h->core, &cfg)) {
		gs_config_default(&cfg);
		gs_card_init(&h->core, &cfg);
	}
	for (v = 0; v < (int)GS_SF_NVGPUS; v++) {
		struct gs_sf_vgpu *e = &h->vgpu[v];

		e->nprocs = 0;
		if (e->state != GS_SF_USED)
			continue;
		id = gs_vgpu_add(&h->core, e->quota, e->high);
		if (id < 0) {
			e->state = 0;
			continue;
		}
		e->core_id = id;
		/* Every process of the file is a shim's: its fencer watches. */
		gs_vgpu_watch(&h->core, id, true);
	}
	for (unsigned int i = 0; i < GS_SF_NSLOTS; i++) {
		struct gs_sf_slot *s = &h->slot[i];

		/* The core starts afresh: nobody holds it. */
		s->holding = 0;
		if (s->state != GS_SF_USED)
			continue;
		if (sf_entry_ok(h, s->vgpu))
			h->vgpu[s->vgpu].nprocs++;
		else
			s->state = 0;
	}
	for (v = 0; v < (int)GS_SF_NVGPUS; v++) {
		struct gs_sf_vgpu *e = &h->vgpu[v];

		if (e->state != GS_SF_USED)
			continue;
		if (!e->nprocs) {
			gs_vgpu_remove(&h->core, e->core_id);
			e->state = 0;
			continue;
		}
		gs_vgpu_set_procs(&h->core, e->core_id, e->nprocs);
		sf_note(h, v, now);
	}
	h->last_reap_ns = 0;
	h->owner_dead++;
	gs_sf_publish(h);
}

/* ---- the mutex ---- */

/* In short slices, as lf_lock_wait (ledger_file.c) explains. */
static int sf_lock(struct gs_sf_header *h)
{
	pthread_mutex_t *m = &h->lock.mutex;
	struct timespec ts;
	int err;

	err = pthread_mutex_trylock(m);
	while (err == EBUSY) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += GS_LF_LOCK_SLICE_NS;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		err = pthread_mutex_timedlock(m, &ts);
		if (err == ETIMEDOUT)
			err = EBUSY;
	}
	if (err == EOWNERDEAD) {
		sf_recover(h);
		err = pthread_mutex_consistent(m);
		if (err) {
			pthread_mutex_unlock(m);
			return -EIO;
		}
	}
	return err == ENOTRECOVERABLE ? -EIO : -err;
}

static void sf_unlock(struct gs_sf_header *h)
{
	pthread_mutex_unlock(&h->lock.mutex);
}

/* ---- slot locks ---- */

static off_t sf_slot_start(int i)
{
	return (off_t)(offsetof(struct gs_sf_header, slot) +
		       (size_t)i * sizeof(struct gs_sf_slot));
}

static int sf_setlk(int fd, int i, short type)
{
	return gs_lf_range_setlk(fd, sf_slot_start(i), sizeof(struct gs_sf_slot),
				 type);
}

/* 1: a live process holds slot i; 0: nobody does; -errno. */
static int sf_held(int fd, int i)
{
	return gs_lf_range_held(fd, sf_slot_start(i), sizeof(struct gs_sf_slot));
}

/* Our fd, (re)opened when needed: the same file or -ESTALE. */
static int sf_ensure_fd(struct gs_sf *sf)
{
	int fd;

	if (sf->fd >= 0 && !gs_lf_fd_is(sf->fd, sf->dev, sf->ino))
		sf->fd = -1;	/* closed behind our back: not ours now */
	if (sf->fd >= 0)
		return 0;
	fd = gs_lf_reopen(sf->path, sf->dev, sf->ino);
	if (fd < 0)
		return fd;
	sf->fd = fd;
	return 0;
}

/* Frees the slots of dead processes; returns how many, or -errno. */
static int sf_reap_locked(struct gs_sf *sf, uint64_t now)
{
	struct gs_sf_header *h = sf->h;
	int i, held, n = 0, err;

	h->last_reap_ns = now;
	err = sf_ensure_fd(sf);
	if (err)
		return err;
	for (i = 0; i < (int)GS_SF_NSLOTS; i++) {
		if (i == sf->slot || h->slot[i].state != GS_SF_USED)
			continue;
		held = sf_held(sf->fd, i);
		if (held < 0)
			return held;
		if (held)
			continue;
		sf_slot_free(h, i, now);
		h->reaped++;
		n++;
	}
	return n;
}

static void sf_reap_if_due(struct gs_sf *sf, uint64_t now)
{
	if (now - sf->h->last_reap_ns >= GS_SF_REAP_INTERVAL_NS)
		sf_reap_locked(sf, now);
}

/* ---- registering ---- */

static bool sf_registered(const struct gs_sf *sf)
{
	const struct gs_sf_header *h = sf->h;
	const struct gs_sf_slot *s;

	if (sf->slot < 0 || sf->fd < 0)
		return false;
	s = &h->slot[sf->slot];
	return s->state == GS_SF_USED && s->gen == sf->gen &&
	       s->vgpu == sf->vgpu && sf_entry_ok(h, sf->vgpu) &&
	       !strncmp(h->vgpu[sf->vgpu].key, sf->key, GS_SF_KEY_LEN);
}

/* The entry of our container's vGPU, added when it is the first. */
static int sf_entry_get(struct gs_sf *sf, uint64_t now)
{
	struct gs_sf_header *h = sf->h;
	int v, free_v = -1, id;

	for (v = 0; v < (int)GS_SF_NVGPUS; v++) {
		if (h->vgpu[v].state != GS_SF_USED) {
			if (free_v < 0)
				free_v = v;
			continue;
		}
		if (!strncmp(h->vgpu[v].key, sf->key, GS_SF_KEY_LEN))
			return v;
	}
	if (free_v < 0)
		return -ENOSPC;
	id = gs_vgpu_add(&h->core, sf->quota, sf->high);
	if (id < 0)
		return id;	/* the core's errors are -errno values */
	/* Every process of the file is a shim's: its fencer watches. */
	gs_vgpu_watch(&h->core, id, true);
	memset(&h->vgpu[free_v], 0, sizeof(h->vgpu[free_v]));
	h->vgpu[free_v].core_id = id;
	h->vgpu[free_v].quota = sf->quota;
	h->vgpu[free_v].high = sf->high;
	h->vgpu[free_v].created_ns = now;
	memcpy(h->vgpu[free_v].key, sf->key, GS_SF_KEY_LEN);
	h->vgpu[free_v].state = GS_SF_USED;
	return free_v;
}

/* A slot of our own (its lock first, then USED), and our vGPU. */
static int sf_register_locked(struct gs_sf *sf, uint64_t now)
{
	struct gs_sf_header *h = sf->h;
	int i = -1, v, err, pass;

	if (sf->slot >= 0) {	/* lost (closed fd, recovery): let it go */
		if (sf->fd >= 0) {
			if (h->slot[sf->slot].state == GS_SF_USED &&
			    h->slot[sf->slot].gen == sf->gen)
				sf_slot_free(h, sf->slot, now);
			sf_setlk(sf->fd, sf->slot, F_UNLCK);
		}
		sf->slot = -1;
	}
	err = sf_ensure_fd(sf);
	if (err)
		return err;
	for (pass = 0; pass < 2 && i < 0; pass++) {
		for (int j = 0; j < (int)GS_SF_NSLOTS; j++) {
			if (h->slot[j].state == GS_SF_USED)
				continue;
			err = sf_setlk(sf->fd, j, F_WRLCK);
			if (err == -EAGAIN)
				continue;
			if (err)
				return err;
			i = j;
			break;
		}
		if (i < 0 && (pass || sf_reap_locked(sf, now) <= 0))
			return -ENOSPC;
	}
	v = sf_entry_get(sf, now);
	if (v < 0) {
		sf_setlk(sf->fd, i, F_UNLCK);
		return v;
	}
	h->next_gen++;
	memset(&h->slot[i], 0, sizeof(h->slot[i]));
	h->slot[i].gen = h->next_gen;
	h->slot[i].pid = (int32_t)getpid();
	h->slot[i].vgpu = v;
	h->slot[i].state = GS_SF_USED;
	h->vgpu[v].nprocs++;
	gs_vgpu_set_procs(&h->core, h->vgpu[v].core_id, h->vgpu[v].nprocs);
	sf->slot = i;
	sf->gen = h->next_gen;
	sf->vgpu = v;
	return 0;
}

static int sf_mine_locked(struct gs_sf *sf, uint64_t now)
{
	return sf_registered(sf) ? 0 : sf_register_locked(sf, now);
}

/* ---- opening (creating, validating, mapping: sched_file_open.c) ---- */

int gs_sf_open(const char *path, const struct gs_sf_want *w,
	       struct gs_sf **out, struct gs_sf_info *info, char *msg,
	       size_t msglen)
{
	struct gs_sf_header *h;
	struct gs_sf *sf;
	uint64_t now;
	int err, gated;

	*out = NULL;
	memset(info, 0, sizeof(*info));
	err = gs_sf_map(path, w, &sf, msg, msglen);
	if (err)
		return err;
	h = sf->h;
	err = sf_lock(h);
	if (err) {
		snprintf(msg, msglen, "%s: its lock: %s", path, strerror(-err));
		goto fail;
	}
	info->policy = h->core.cfg.policy;
	info->max_inst = h->core.cfg.max_inst;
	info->slice_ns = h->core.cfg.slice_ns;
	info->reclaim_ns = h->core.cfg.reclaim_ns;
	info->differs = info->policy != w->policy ||
			info->max_inst != w->max_inst ||
			info->slice_ns != w->slice_ns ||
			info->reclaim_ns != gs_sf_want_reclaim(w);
	info->quota = w->quota;
	info->high = w->high;
	gated = info->policy != GS_POLICY_NATIVE &&
		(w->quota || info->policy == GS_POLICY_HYBRID);
	if (gated) {
		now = mono();
		sf_reap_locked(sf, now);
		err = sf_register_locked(sf, now);
		if (!err) {
			const struct gs_sf_vgpu *e = &h->vgpu[sf->vgpu];

			info->id = e->core_id;
			info->quota = e->quota;
			info->high = e->high;
			gs_sf_publish(h);
		}
	}
	sf_unlock(h);
	if (err) {
		snprintf(msg, msglen,
			 "%s: the vGPU %s (quota %u%%, priority %u) cannot join the card's schedule (policy %u): %s",
			 path, w->key, w->quota, w->high, info->policy,
			 err == -ENOSPC ? "no room (quotas over 100%, or too many vGPUs or processes)" :
			 err == -EINVAL ? "quota or priority out of range for the policy" :
			 err == -EOPNOTSUPP ? "high priority is refused under policy 5" :
			 strerror(-err));
		goto fail;
	}
	if (!gated) {
		gs_sf_free(sf);
		return 0;
	}
	*out = sf;
	return 1;
fail:
	gs_sf_free(sf);
	return err;
}

const struct gpuslice_sched_page *gs_sf_page(const struct gs_sf *sf)
{
	return &sf->h->pub.page;
}

/*
 * The current slice is our vGPU's: the slot is pending and holding until
 * the fence (gs_sf_release), the card waiting for it at the slice's end.
 */
static void sf_hold_locked(struct gs_sf *sf, uint64_t now)
{
	struct gs_sf_header *h = sf->h;
	struct gs_sf_slot *s = &h->slot[sf->slot];

	s->pending = 1;
	s->holding = 1;
	s->grant_end = gs_slice_end(&h->core);
	s->hold_start = h->core.slice_start;
	h->vgpu[sf->vgpu].last_start = s->hold_start;
	gs_vgpu_hold(&h->core, h->vgpu[sf->vgpu].core_id, true);
	sf_note(h, sf->vgpu, now);
}

int gs_sf_acquire(struct gs_sf *sf, int32_t *id, uint64_t *start,
		  uint64_t *end)
{
	struct gs_sf_header *h = sf->h;
	uint64_t now, wake;
	uint32_t seq;
	int err;

	for (;;) {
		err = sf_lock(h);
		if (err)
			return err;
		now = mono();
		err = sf_mine_locked(sf, now);
		if (err) {
			sf_unlock(h);
			return err;
		}
		sf_reap_if_due(sf, now);
		if (!h->slot[sf->slot].waiting) {
			/* Waiting is work: pending while we wait. */
			h->slot[sf->slot].waiting = 1;
			sf_note(h, sf->vgpu, now);
		}
		*id = h->vgpu[sf->vgpu].core_id;
		sf_advance(h, now);
		gs_sf_publish(h);
		wake = gs_slice_end(&h->core);
		if (gs_owner(&h->core) == *id && now < wake) {
			h->slot[sf->slot].waiting = 0;
			sf_hold_locked(sf, now);
			*start = h->core.slice_start;
			*end = wake;
			sf_unlock(h);
			return 0;
		}
		wake = gs_next_change(&h->core);
		seq = __atomic_load_n(&h->pub.page.seq, __ATOMIC_ACQUIRE);
		sf_unlock(h);
		if (wake <= now)	/* cannot happen: the core moved on */
			wake = now + 1000000;
		gs_sf_page_wait(&h->pub.page, seq, wake);
	}
}

void gs_sf_tick(struct gs_sf *sf)
{
	struct gs_sf_header *h = sf->h;
	uint64_t now;

	if (sf_lock(h))
		return;
	now = mono();
	sf_advance(h, now);
	gs_sf_publish(h);
	sf_unlock(h);
}

void gs_sf_hold(struct gs_sf *sf)
{
	struct gs_sf_header *h = sf->h;
	uint64_t now;

	if (sf_lock(h))
		return;
	now = mono();
	if (sf_registered(sf) &&
	    gs_may_run(&h->core, h->vgpu[sf->vgpu].core_id, now))
		sf_hold_locked(sf, now);
	sf_unlock(h);
}

void gs_sf_report(struct gs_sf *sf, uint64_t busy_ns)
{
	struct gs_sf_header *h = sf->h;

	if (sf_lock(h))
		return;
	if (sf_registered(sf))
		h->vgpu[sf->vgpu].busy_ns += busy_ns;
	sf_unlock(h);
}

void gs_sf_release(struct gs_sf *sf, uint64_t busy_ns)
{
	struct gs_sf_header *h = sf->h;
	struct gs_sf_slot *s;
	uint64_t now;

	if (sf_lock(h))
		return;
	now = mono();
	if (sf_registered(sf)) {
		s = &h->slot[sf->slot];
		h->vgpu[sf->vgpu].busy_ns += busy_ns;
		if (s->pending) {
			s->pending = 0;
			sf_note(h, sf->vgpu, now);
		}
		/* Our work ran: the drain ends (the next owner's end moves). */
		sf_unhold(h, s, now);
		sf_carry_holds(h, now);
		gs_sf_publish(h);
	}
	sf_unlock(h);
}

/*
 * In the child, single-threaded, no locking: the inherited description
 * carries the parent's slot lock; close our copy so the lock dies with
 * the parent. The child registers at its first slow path.
 */
void gs_sf_after_fork_child(struct gs_sf *sf)
{
	if (sf->fd >= 0)
		close(sf->fd);
	sf->fd = -1;
	sf->slot = -1;
	sf->gen = 0;
}

uint64_t gs_drain_bound_ns(void)
{
	return GS_DRAIN_MAX_NS;
}
