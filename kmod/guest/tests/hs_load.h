/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * hs_load.h: the loads of hostile.h: the measured victim, the holder, the
 * flood, the hog and the latency samples, and the scenarios that put a
 * victim next to one of them. Part of hostile.h, which includes it:
 * programs include hostile.h only.
 */
#ifndef HS_LOAD_H
#define HS_LOAD_H

#ifndef HOSTILE_H
#error "hs_load.h is part of hostile.h: include hostile.h instead"
#endif

/* ------------------------------------------------------------------ */
/* The victim: spins while it owns the card, ACQUIREs when it does not */

struct hs_victim {
	/* in */
	uint32_t card;
	volatile uint64_t t0, t1;	/* the measuring window */
	uint64_t wait_limit;		/* waits longer than this are counted */
	volatile int go;
	/* out */
	volatile int ready, done;
	int id;
	uint64_t used;		/* time it saw itself owning, in the window */
	uint64_t granted;	/* its slices as the page told them, clipped */
	uint64_t max_wait;	/* its longest ACQUIRE, in the window */
	uint64_t nover;		/* ACQUIREs in the window over wait_limit */
	uint64_t nslices, nacq, timeouts;
	uint64_t mismatch;	/* ACQUIRE granted a slice the page did not show */
};

static inline uint64_t hs_clip(uint64_t a, uint64_t b, uint64_t lo,
			       uint64_t hi)
{
	if (a < lo)
		a = lo;
	if (b > hi)
		b = hi;
	return b > a ? b - a : 0;
}

/*
 * The victim's loop, in a tenant (fn of hs_tenant; arg: struct hs_victim
 * in shared memory). A slice is known by its start (the page's
 * slice_start_ns, which an early drain never moves; its end may move
 * earlier); the time between two looks at the page while owning it
 * counts as used, so that a stall of the guest CPU within a slice is
 * counted as the victim's (not the module's to answer for) but the time
 * it waits for the card is not.
 */
static inline int hs_victim_run(void *arg)
{
	struct hs_victim *v = arg;
	const struct gpuslice_sched_page *p;
	struct gpuslice_attach a;
	uint64_t cur = 0, cur_end = 0, last = 0, busy = 0;
	int fd, owning = 0;

	fd = hs_open_attached(v->card, &a);
	T(fd >= 0, "victim attach: %s", gs_errname(errno));
	p = gs_map_page(fd, v->card);
	T(p, "victim mmap: %s", gs_errname(errno));
	v->id = (int)a.id;
	v->ready = 1;
	while (!v->go)
		gs_sleep_ms(1);
	for (;;) {
		struct gpuslice_sched_page s;
		uint64_t now, t, end = 0;
		int rc;

		T(gs_page_read(p, &s) == 0, "victim: page seq stuck odd");
		now = gs_now();
		if (s.owner == v->id && now < s.slice_end_ns && now < v->t1) {
			if (!owning || s.slice_start_ns != cur) {
				if (owning)
					v->granted += hs_clip(cur, cur_end,
							      v->t0, v->t1);
				cur = s.slice_start_ns;
				v->nslices++;
				last = now;
				owning = 1;
			}
			cur_end = s.slice_end_ns;
			v->used += hs_clip(last, now, v->t0, v->t1);
			busy += now - last;
			last = now;
			continue;
		}
		if (owning) {
			v->granted += hs_clip(cur, cur_end, v->t0, v->t1);
			owning = 0;
		}
		if (now >= v->t1)
			break;
		TOK(gs_release(fd, v->card, 0, busy));
		busy = 0;
		t = gs_now();
		rc = gs_acquire(fd, v->card, 0, 2000 * MS, &end, NULL);
		now = gs_now();
		if (rc < 0 && errno == ETIMEDOUT) {
			v->timeouts++;
			continue;
		}
		T(rc == 0, "victim ACQUIRE: %s", gs_errname(errno));
		v->nacq++;
		T(gs_page_read(p, &s) == 0, "victim: page seq stuck odd");
		if (now < end && (s.owner != v->id || s.slice_end_ns != end))
			v->mismatch++;
		if (t >= v->t0 && now <= v->t1) {
			if (now - t > v->max_wait)
				v->max_wait = now - t;
			if (v->wait_limit && now - t > v->wait_limit)
				v->nover++;
		}
	}
	TOK(gs_release(fd, v->card, GPUSLICE_RELEASE_IDLE, busy));
	close(fd);
	v->done = 1;
	return 0;
}

/* Waits until the victim attached, then opens a window of warm + ms. */
static inline int hs_victim_start(struct hs_victim *v, unsigned warm_ms,
				  unsigned ms)
{
	T(hs_wait_flag(&v->ready, 5000), "the victim never attached");
	v->t0 = gs_now() + (uint64_t)warm_ms * MS;
	v->t1 = v->t0 + (uint64_t)ms * MS;
	v->go = 1;
	return 0;
}

static inline double hs_victim_share(const struct hs_victim *v)
{
	return 100.0 * (double)v->used / (double)(v->t1 - v->t0);
}

static inline double hs_victim_granted(const struct hs_victim *v)
{
	return 100.0 * (double)v->granted / (double)(v->t1 - v->t0);
}

/* ------------------------------------------------------------------ */
/* The holder: takes every slice with ACQUIRE_HOLD, never RELEASEs */

struct hs_hold {
	uint32_t card;
	int release;		/* 1: a well-behaved holder (the reference) */
	volatile int stop;
	volatile int ready;
	uint64_t grants;
};

/*
 * Spins to the end of each slice it is granted and asks for the next
 * one without a RELEASE: the card waits for it at every end (the drain)
 * and its work never finishes, as far as the module knows. With release
 * set it behaves: WAIT for the end, RELEASE, as the shim's fencer does.
 */
static inline int hs_holder_run(void *arg)
{
	struct hs_hold *h = arg;
	int fd = hs_open_attached(h->card, NULL);

	T(fd >= 0, "holder attach: %s", gs_errname(errno));
	h->ready = 1;
	while (!h->stop) {
		uint64_t end = 0;
		int rc = gs_acquire(fd, h->card, GPUSLICE_ACQUIRE_HOLD,
				    500 * MS, &end, NULL);

		if (rc < 0 && errno == ETIMEDOUT)
			continue;
		T(rc == 0, "holder ACQUIRE: %s", gs_errname(errno));
		h->grants++;
		if (!h->release) {
			uint64_t e = end < gs_now() + 200 * MS ?
				     end : gs_now() + 200 * MS;

			gs_spin_until(e);
			continue;
		}
		rc = gs_wait_slice(fd, h->card, 0, end);
		T(rc == 0 || errno == EINTR, "holder WAIT: %s",
		  gs_errname(errno));
		TOK(gs_release(fd, h->card, 0, 0));
	}
	close(fd);
	return 0;
}

/* ------------------------------------------------------------------ */
/* The flood: threads of one tenant blocked in ACQUIRE */

#define HS_FLOOD_MAX	512

struct hs_flood {
	uint32_t card;
	int nthreads;
	volatile int stop;
	volatile int started;	/* threads running */
	volatile int ready;
	volatile uint64_t grants, eusers, other;
	volatile int other_err;
	int fd;
};

/*
 * One waiter: ACQUIRE, and when granted RELEASE at once and ask again
 * (a tenant's threads that each want the card). Past the waiter bound
 * (EUSERS) it counts the refusal and ends: the flood stays at the bound.
 * No timeout (no hrtimer per waiter, nor a sleep's): the threads end
 * with their process.
 */
static pthread_barrier_t hs_flood_gate;

static inline void *hs_flood_thread(void *arg)
{
	struct hs_flood *f = arg;

	__atomic_add_fetch(&f->started, 1, __ATOMIC_SEQ_CST);
	pthread_barrier_wait(&hs_flood_gate);
	while (!f->stop) {
		int rc = gs_acquire(f->fd, f->card, 0, 0, NULL, NULL);

		if (rc == 0) {
			__atomic_add_fetch(&f->grants, 1, __ATOMIC_RELAXED);
			gs_release(f->fd, f->card, 0, 0);
		} else if (errno == EUSERS) {
			__atomic_add_fetch(&f->eusers, 1, __ATOMIC_RELAXED);
			break;
		} else if (errno != EINTR) {
			f->other_err = errno;
			__atomic_add_fetch(&f->other, 1, __ATOMIC_RELAXED);
			break;
		}
	}
	return NULL;
}

/* Starts f->nthreads waiters on one file; returns when they all run. */
static inline int hs_flood_start(struct hs_flood *f)
{
	pthread_attr_t at;

	f->fd = hs_open_attached(f->card, NULL);
	T(f->fd >= 0, "flood attach: %s", gs_errname(errno));
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64 << 10);
	/* All created before any floods: the gate opens when the last waits. */
	pthread_barrier_init(&hs_flood_gate, NULL, (unsigned)f->nthreads + 1);
	for (int i = 0; i < f->nthreads; i++) {
		pthread_t th;

		T(pthread_create(&th, &at, hs_flood_thread, f) == 0,
		  "pthread_create %d", i);
		pthread_detach(th);
	}
	pthread_barrier_wait(&hs_flood_gate);
	f->ready = 1;
	return 0;
}

/* The flooder, in a tenant: floods until stop; exiting ends its threads. */
static inline int hs_flood_run(void *arg)
{
	struct hs_flood *f = arg;

	if (hs_flood_start(f) < 0)
		return -1;
	while (!f->stop)
		gs_sleep_ms(5);
	return 0;
}

/* ------------------------------------------------------------------ */
/* The hog: thousands of files, readers looping on /proc/gpuslice */

struct hs_hog {
	uint32_t card;
	int nfiles;
	int nreaders;
	volatile int stop;
	volatile int ready;
	int opened, attached, refused;	/* refused: ATTACH's EUSERS */
	int other_err;
	volatile uint64_t reads, bytes;
};

static inline void *hs_hog_reader(void *arg)
{
	static const char *const files[] = { "/proc/gpuslice/procs",
					     "/proc/gpuslice/vgpus" };
	struct hs_hog *h = arg;
	char *buf = malloc(64 << 10);
	unsigned i = 0;

	while (buf && !h->stop) {
		int fd = open(files[i++ % 2], O_RDONLY | O_CLOEXEC);
		ssize_t n;

		if (fd < 0) {
			gs_sleep_ms(1);
			continue;
		}
		while ((n = read(fd, buf, 64 << 10)) > 0)
			__atomic_add_fetch(&h->bytes, (uint64_t)n,
					   __ATOMIC_RELAXED);
		close(fd);
		__atomic_add_fetch(&h->reads, 1, __ATOMIC_RELAXED);
	}
	free(buf);
	return NULL;
}

/*
 * The hog, in a tenant whose RLIMIT_NOFILE its parent raised: opens
 * nfiles files, attaches each (past the per-vGPU bound ATTACH refuses:
 * counted, the file stays open), starts nreaders threads reading the
 * /proc tables in a loop, and keeps it all until stop.
 */
static inline int hs_hog_run(void *arg)
{
	struct hs_hog *h = arg;
	pthread_t th[16];

	for (int i = 0; i < h->nfiles; i++) {
		struct gpuslice_attach a;
		int fd = gs_open();

		T(fd >= 0, "hog: open %d: %s", i, gs_errname(errno));
		h->opened++;
		if (gs_attach(fd, h->card, &a) == 0)
			h->attached++;
		else if (errno == EUSERS)
			h->refused++;
		else
			h->other_err = errno;
	}
	for (int i = 0; i < h->nreaders && i < 16; i++)
		T(pthread_create(&th[i], NULL, hs_hog_reader, h) == 0,
		  "reader thread");
	h->ready = 1;
	while (!h->stop)
		gs_sleep_ms(5);
	for (int i = 0; i < h->nreaders && i < 16; i++)
		pthread_join(th[i], NULL);
	return 0;
}

/* Raises this process's RLIMIT_NOFILE (its children inherit it): root. */
static inline int hs_raise_nofile(rlim_t n)
{
	struct rlimit r = { n, n };
	char buf[64];

	if (gs_read_file("/proc/sys/fs/nr_open", buf, sizeof(buf)) > 0 &&
	    strtoull(buf, NULL, 10) < n) {
		errno = EMFILE;
		return -1;
	}
	return setrlimit(RLIMIT_NOFILE, &r);
}

/* ------------------------------------------------------------------ */
/* Latency samples */

#define HS_LAT_MAX	4096

struct hs_lat {
	uint64_t v[HS_LAT_MAX];
	uint64_t part[3][HS_LAT_MAX];	/* open, ATTACH, close (hs_lat_attach) */
	uint64_t part_p99[3];
	size_t n;
	uint64_t p50, p99, max;
	int err;		/* the first failure's errno */
};

/* Percentiles of what was sampled (sorts). */
static inline void hs_lat_done(struct hs_lat *l)
{
	l->p50 = hs_pct(l->v, l->n, 50);
	l->p99 = hs_pct(l->v, l->n, 99);
	l->max = l->n ? l->v[l->n - 1] : 0;
}

/*
 * One tenant's open + ATTACH + close, n times or for ms, a millisecond
 * apart (so that it wakes as a sleeper would: what it measures is the
 * module's locks, not the CPU it shares with the hog's readers).
 */
static inline void hs_lat_attach(struct hs_lat *l, uint32_t card, size_t n,
				 unsigned ms)
{
	uint64_t stop = gs_now() + (uint64_t)ms * MS;

	l->n = 0;
	while (l->n < n && l->n < HS_LAT_MAX && gs_now() < stop) {
		struct gpuslice_attach a;
		uint64_t t = gs_now(), t1, t2;
		int fd = gs_open();

		t1 = gs_now();
		if (fd < 0 || gs_attach(fd, card, &a) < 0) {
			if (!l->err)
				l->err = errno;
		}
		t2 = gs_now();
		if (fd >= 0)
			close(fd);
		l->v[l->n] = gs_now() - t;
		l->part[0][l->n] = t1 - t;
		l->part[1][l->n] = t2 - t1;
		l->part[2][l->n] = gs_now() - t2;
		l->n++;
		gs_sleep_ms(1);
	}
	for (int i = 0; i < 3; i++)
		l->part_p99[i] = hs_pct(l->part[i], l->n, 99);
	hs_lat_done(l);
}

/* The agent's CARD_GET, the same way. */
static inline void hs_lat_card_get(struct hs_lat *l, int fd, uint32_t card,
				   size_t n, unsigned ms)
{
	uint64_t stop = gs_now() + (uint64_t)ms * MS;

	l->n = 0;
	while (l->n < n && l->n < HS_LAT_MAX && gs_now() < stop) {
		struct gpuslice_card c;
		uint64_t t = gs_now();

		if (gs_card_get(fd, card, &c) < 0 && !l->err)
			l->err = errno;
		l->v[l->n++] = gs_now() - t;
		gs_sleep_ms(1);
	}
	hs_lat_done(l);
}

/* ------------------------------------------------------------------ */
/* Scenarios shared by the tests and hostile_bench */

/*
 * The victim (a tenant in cgv) next to a hostile tenant in cgh running
 * hostile(harg), which sets *hready once it is at work and stops at
 * *hstop: the victim's window opens when both are ready.
 */
static inline int hs_victim_next_to(struct hs_victim *v, const char *cgv,
				    const char *cgh, int (*hostile)(void *),
				    void *harg, volatile int *hready,
				    volatile int *hstop, unsigned warm_ms,
				    unsigned ms)
{
	pid_t pv, ph;

	ph = hs_tenant(cgh, hostile, harg, 40);
	pv = hs_tenant(cgv, hs_victim_run, v, 40);
	T(ph > 0 && pv > 0, "fork");
	T(hs_wait_flag(hready, 10000), "the hostile tenant did not start: %s",
	  gs_kid_msg(ph));
	if (hs_victim_start(v, warm_ms, ms) < 0)
		return -1;
	TJOIN(pv, warm_ms + ms + 10000, "victim");
	*hstop = 1;
	TJOIN(ph, 10000, "hostile tenant");
	return 0;
}

/* Latencies of a tenant's and the agent's calls, alone and next to a hog. */
struct hs_contend {
	struct hs_hog hog;
	struct hs_lat att_base, att_hostile, get_base, get_hostile;
	uint32_t card;
	unsigned base_ms, hostile_ms;
	volatile int phase, done;
};

/* The measured tenant: samples in phase 1 (alone) and 2 (next to the hog). */
static inline int hs_contend_victim(void *arg)
{
	struct hs_contend *c = arg;

	T(hs_wait_flag(&c->phase, 10000), "no phase");
	hs_lat_attach(&c->att_base, c->card, HS_LAT_MAX, c->base_ms);
	c->done = 1;
	while (c->phase != 2)
		gs_sleep_ms(1);
	hs_lat_attach(&c->att_hostile, c->card, HS_LAT_MAX, c->hostile_ms);
	c->done = 2;
	T(!c->att_base.err && !c->att_hostile.err,
	  "the victim's open+ATTACH failed: %s",
	  gs_errname(c->att_base.err ? c->att_base.err : c->att_hostile.err));
	return 0;
}

/*
 * Alone: the tenant in cgv samples open+ATTACH+close, then the agent
 * (admin_fd, this process) CARD_GET. Then the hog (a tenant in cgh, its
 * nfiles and nreaders in c->hog) gets ready, and both sample again next
 * to it. The caller raised RLIMIT_NOFILE.
 */
static inline int hs_contend_run(struct hs_contend *c, const char *cgv,
				 const char *cgh, int admin_fd)
{
	pid_t pv, ph;
	int ok;

	pv = hs_tenant(cgv, hs_contend_victim, c, 90);
	T(pv > 0, "fork");
	c->phase = 1;
	T(hs_wait_flag(&c->done, 10000), "victim: %s", gs_kid_msg(pv));
	hs_lat_card_get(&c->get_base, admin_fd, c->card, HS_LAT_MAX,
			c->base_ms);
	c->hog.card = c->card;
	ph = hs_tenant(cgh, hs_hog_run, &c->hog, 90);
	T(ph > 0, "fork");
	for (int i = 0; i < 60000 && !c->hog.ready; i++) {
		if (gs_proc_state(ph) == 'Z')
			break;
		gs_sleep_ms(1);
	}
	T(c->hog.ready, "the hostile tenant did not get ready (%d opened, %d "
	  "attached): %s", c->hog.opened, c->hog.attached, gs_kid_msg(ph));
	gs_info("%s hostile tenant: %d files open, %d attached, %d refused "
		"(EUSERS)%s%s", gs_prog, c->hog.opened, c->hog.attached,
		c->hog.refused, c->hog.other_err ? ", other error " : "",
		c->hog.other_err ? gs_errname(c->hog.other_err) : "");
	gs_sleep_ms(200);
	c->phase = 2;
	hs_lat_card_get(&c->get_hostile, admin_fd, c->card, HS_LAT_MAX,
			c->hostile_ms);
	for (int i = 0; i < 30000 && c->done != 2; i++)
		gs_sleep_ms(1);
	gs_info("%s the readers read %llu tables (%.1f MiB) meanwhile", gs_prog,
		(unsigned long long)c->hog.reads,
		(double)c->hog.bytes / 1048576.0);
	c->hog.stop = 1;
	ok = gs_join(pv, 20000, "victim") == 0;
	ok &= gs_join(ph, 60000, "hostile") == 0;
	if (!ok)
		return -1;
	T(!c->get_base.err && !c->get_hostile.err, "CARD_GET: %s",
	  gs_errname(c->get_base.err ? c->get_base.err : c->get_hostile.err));
	return 0;
}

/* with / max(base, floor) */
static inline double hs_ratio(uint64_t with, uint64_t base, uint64_t floor)
{
	return (double)with / (double)(base > floor ? base : floor);
}

#endif /* HS_LOAD_H */
