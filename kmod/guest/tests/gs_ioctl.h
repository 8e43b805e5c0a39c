/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * gs_ioctl.h: /dev/gpuslice for the guest test programs: one wrapper per
 * ioctl (each returns ioctl's value, errno on failure) and the schedule
 * page (mmap, consistent snapshots, the ownership fast path).
 *
 * Part of gstest.h, which includes it: programs include gstest.h only.
 */
#ifndef GS_IOCTL_H
#define GS_IOCTL_H

#ifndef GSTEST_H
#error "gs_ioctl.h is part of gstest.h: include gstest.h instead"
#endif

/* ------------------------------------------------------------------ */
/* Device and ioctl wrappers (return ioctl's value; errno on failure) */

static inline int gs_open(void)
{
	return open(GPUSLICE_DEVICE, O_RDWR | O_CLOEXEC);
}

static inline int gs_version(int fd, struct gpuslice_version *v)
{
	memset(v, 0, sizeof(*v));
	return ioctl(fd, GPUSLICE_IOC_VERSION, v);
}

static inline int gs_card_set(int fd, uint32_t card, uint32_t policy,
			      uint32_t max_inst, uint64_t slice_ns,
			      uint64_t reclaim_ns)
{
	struct gpuslice_card c;

	memset(&c, 0, sizeof(c));
	c.card = card;
	c.policy = policy;
	c.max_inst = max_inst;
	c.slice_ns = slice_ns;
	c.reclaim_ns = reclaim_ns;
	return ioctl(fd, GPUSLICE_IOC_CARD_SET, &c);
}

static inline int gs_card_get(int fd, uint32_t card, struct gpuslice_card *c)
{
	memset(c, 0, sizeof(*c));
	c->card = card;
	return ioctl(fd, GPUSLICE_IOC_CARD_GET, c);
}

/* Creates a vGPU; returns its id (>= 0) or -1 with errno. */
static inline int gs_vgpu_create(int fd, uint32_t card, uint64_t cgid,
				 uint64_t cap, uint32_t quota,
				 uint32_t priority, uint32_t mode)
{
	struct gpuslice_vgpu v;
	int r;

	memset(&v, 0, sizeof(v));
	v.card = card;
	v.cgroup_id = cgid;
	v.mem_cap = cap;
	v.quota = quota;
	v.priority = priority;
	v.mode = mode;
	v.id = 0xdeadbeef;
	r = ioctl(fd, GPUSLICE_IOC_VGPU_CREATE, &v);
	if (r < 0)
		return -1;
	if (v.id > 0x7fffffff) {
		errno = ERANGE;
		return -1;
	}
	return (int)v.id;
}

static inline int gs_vgpu_update(int fd, uint32_t card, uint32_t id,
				 uint64_t cgid, uint64_t cap, uint32_t quota,
				 uint32_t priority, uint32_t mode)
{
	struct gpuslice_vgpu v;

	memset(&v, 0, sizeof(v));
	v.card = card;
	v.id = id;
	v.cgroup_id = cgid;
	v.mem_cap = cap;
	v.quota = quota;
	v.priority = priority;
	v.mode = mode;
	return ioctl(fd, GPUSLICE_IOC_VGPU_UPDATE, &v);
}

static inline int gs_vgpu_destroy(int fd, uint32_t card, uint32_t id)
{
	struct gpuslice_vgpu v;

	memset(&v, 0, sizeof(v));
	v.card = card;
	v.id = id;
	return ioctl(fd, GPUSLICE_IOC_VGPU_DESTROY, &v);
}

static inline int gs_vgpu_stats(int fd, uint32_t card, uint32_t id,
				struct gpuslice_vgpu_stats *s)
{
	memset(s, 0, sizeof(*s));
	s->card = card;
	s->id = id;
	return ioctl(fd, GPUSLICE_IOC_VGPU_STATS, s);
}

static inline int gs_attach(int fd, uint32_t card, struct gpuslice_attach *a)
{
	memset(a, 0, sizeof(*a));
	a->card = card;
	return ioctl(fd, GPUSLICE_IOC_ATTACH, a);
}

/* CHARGE/UNCHARGE/MEMINFO; *used and *cap (may be NULL) get the answer. */
static inline int gs_mem(int fd, unsigned long req, uint32_t card,
			 uint64_t bytes, uint64_t *used, uint64_t *cap)
{
	struct gpuslice_charge c;
	int r;

	memset(&c, 0, sizeof(c));
	c.card = card;
	c.bytes = bytes;
	r = ioctl(fd, req, &c);
	if (r >= 0) {
		if (used)
			*used = c.mem_used;
		if (cap)
			*cap = c.mem_cap;
	}
	return r;
}

static inline int gs_charge(int fd, uint32_t card, uint64_t bytes,
			    uint64_t *used)
{
	return gs_mem(fd, GPUSLICE_IOC_CHARGE, card, bytes, used, NULL);
}

static inline int gs_uncharge(int fd, uint32_t card, uint64_t bytes,
			      uint64_t *used)
{
	return gs_mem(fd, GPUSLICE_IOC_UNCHARGE, card, bytes, used, NULL);
}

static inline int gs_meminfo(int fd, uint32_t card, uint64_t *used,
			     uint64_t *cap)
{
	return gs_mem(fd, GPUSLICE_IOC_MEMINFO, card, 0, used, cap);
}

static inline int gs_acquire(int fd, uint32_t card, uint32_t flags,
			     uint64_t timeout_ns, uint64_t *end, int32_t *owner)
{
	struct gpuslice_acquire a;
	int r;

	memset(&a, 0, sizeof(a));
	a.card = card;
	a.flags = flags;
	a.timeout_ns = timeout_ns;
	r = ioctl(fd, GPUSLICE_IOC_ACQUIRE, &a);
	if (r >= 0) {
		if (end)
			*end = a.slice_end_ns;
		if (owner)
			*owner = a.owner;
	}
	return r;
}

static inline int gs_release(int fd, uint32_t card, uint32_t flags,
			     uint64_t busy_ns)
{
	struct gpuslice_release r;

	memset(&r, 0, sizeof(r));
	r.card = card;
	r.flags = flags;
	r.busy_ns = busy_ns;
	return ioctl(fd, GPUSLICE_IOC_RELEASE, &r);
}

static inline int gs_wait_slice(int fd, uint32_t card, uint32_t flags,
				uint64_t slice_end_ns)
{
	struct gpuslice_wait w;

	memset(&w, 0, sizeof(w));
	w.card = card;
	w.flags = flags;
	w.slice_end_ns = slice_end_ns;
	return ioctl(fd, GPUSLICE_IOC_WAIT, &w);
}

/* ------------------------------------------------------------------ */
/* The schedule page */

static inline long gs_page_size(void)
{
	return sysconf(_SC_PAGESIZE);
}

static inline const struct gpuslice_sched_page *gs_map_page(int fd,
							    uint32_t card)
{
	long ps = gs_page_size();
	void *p = mmap(NULL, (size_t)ps, PROT_READ, MAP_SHARED, fd,
		       (off_t)card * ps);

	return p == MAP_FAILED ? NULL : (const struct gpuslice_sched_page *)p;
}

/* A consistent snapshot (seq even and unchanged); 0, or -1 if torn 1000x. */
static inline int gs_page_read(const struct gpuslice_sched_page *p,
			       struct gpuslice_sched_page *out)
{
	for (int i = 0; i < 100000; i++) {
		uint32_t s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);

		if (s1 & 1)
			continue;
		out->abi_version = p->abi_version;
		out->owner = p->owner;
		out->policy = p->policy;
		out->slice_start_ns = p->slice_start_ns;
		out->slice_end_ns = p->slice_end_ns;
		out->slice_ns = p->slice_ns;
		out->max_inst = p->max_inst;
		out->mode = p->mode;
		out->handovers = p->handovers;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == s1) {
			out->seq = s1;
			return 0;
		}
	}
	return -1;
}

/* The fast path: may vGPU id run now? */
static inline int gs_page_owns(const struct gpuslice_sched_page *p,
			       int32_t id, uint64_t *end)
{
	struct gpuslice_sched_page s;

	if (gs_page_read(p, &s) < 0)
		return 0;
	if (end)
		*end = s.slice_end_ns;
	if (s.owner == GPUSLICE_OWNER_ALL)
		return 1;
	return s.owner == id && gs_now() < s.slice_end_ns;
}

/* VGPU_UNSEEN (anyone) and VGPU_SET_UNSEEN (administrators). */
static inline int gs_vgpu_unseen(int fd, uint32_t card, uint32_t id,
				 struct gpuslice_vgpu_unseen *u)
{
	memset(u, 0, sizeof(*u));
	u->card = card;
	u->id = id;
	return ioctl(fd, GPUSLICE_IOC_VGPU_UNSEEN, u);
}

static inline int gs_vgpu_set_unseen(int fd, uint32_t card, uint32_t id,
				     uint64_t bytes)
{
	struct gpuslice_vgpu_unseen u;

	memset(&u, 0, sizeof(u));
	u.card = card;
	u.id = id;
	u.bytes = bytes;
	return ioctl(fd, GPUSLICE_IOC_VGPU_SET_UNSEEN, &u);
}

#endif /* GS_IOCTL_H */
