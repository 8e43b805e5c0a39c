/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * identity: ATTACH finds the vGPU of the caller's cgroup (or its nearest
 * ancestor's) on each card; calls before ATTACH get ENOTCONN; the
 * /proc/gpuslice files list cards, vGPUs and attached files.
 */
#include "gstest.h"

#define P "identity"
#define M GPUSLICE_MODE_MEMORY
#define C GPUSLICE_MODE_COMPUTE
#define CAPA (100ULL << 20)
#define CAPB (200ULL << 20)
#define CAPA1 (300ULL << 20)
#define CAPS (50ULL << 20)

static uint64_t cgA, cgB, cgSub, cgDeep, cgC;
static int idA, idB, idA1, idA2;

struct expect {
	const char *cg;		/* cgroup to enter ("" = root) */
	uint32_t card;
	int err;		/* expected errno of ATTACH, 0: success */
	int id;
	uint64_t cap;
	uint32_t quota, priority, mode, policy;
};

static int child_attach(void *arg)
{
	const struct expect *e = arg;
	struct gpuslice_attach a;
	int fd;

	T(gs_cg_enter(e->cg) == 0, "enter cgroup '%s': %s", e->cg,
	  gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	if (e->err) {
		TE(gs_attach(fd, e->card, &a), e->err);
		return 0;
	}
	memset(&a, 0xff, sizeof(a));
	a.card = e->card;
	TOK(ioctl(fd, GPUSLICE_IOC_ATTACH, &a));
	TEQ(a.card, e->card);
	TEQ(a.id, (uint32_t)e->id);
	TEQ(a.mem_cap, e->cap);
	TEQ(a.quota, e->quota);
	TEQ(a.priority, e->priority);
	TEQ(a.mode, e->mode);
	TEQ(a.policy, e->policy);
	/* again: the same vGPU */
	TOK(gs_attach(fd, e->card, &a));
	TEQ(a.id, (uint32_t)e->id);
	close(fd);
	return 0;
}

static int expect_attach(const struct expect *e, const char *role)
{
	pid_t pid = gs_spawn(child_attach, (void *)e, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, role);
	return 0;
}

static int t_own_cgroup(void)
{
	struct expect a = { "gsA", 0, 0, idA, CAPA, 0, 0, M, GPUSLICE_POLICY_NATIVE };
	struct expect b = { "gsB", 0, 0, idB, CAPB, 0, 0, M, GPUSLICE_POLICY_NATIVE };

	if (expect_attach(&a, "in gsA") < 0 || expect_attach(&b, "in gsB") < 0)
		return -1;
	return 0;
}

static int t_compute_spec(void)
{
	struct expect a = { "gsA", 2, 0, idA2, CAPA / 2, 30, 1, C,
			    GPUSLICE_POLICY_WEIGHTED };

	return expect_attach(&a, "in gsA, card 2");
}

static int t_nearest_ancestor(void)
{
	struct expect sub = { "gsA/sub", 0, 0, idA, CAPA, 0, 0, M, GPUSLICE_POLICY_NATIVE };
	struct expect deep = { "gsA/sub/deep", 0, 0, idA, CAPA, 0, 0, M, GPUSLICE_POLICY_NATIVE };
	int idS;

	if (expect_attach(&sub, "in gsA/sub") < 0 ||
	    expect_attach(&deep, "in gsA/sub/deep") < 0)
		return -1;
	/* a vGPU of its own for gsA/sub: nearer than gsA's */
	idS = gs_vgpu_create(gs_fd, 0, cgSub, CAPS, 0, 0, M);
	T(idS >= 0, "create for gsA/sub: %s", gs_errname(errno));
	sub.id = deep.id = idS;
	sub.cap = deep.cap = CAPS;
	if (expect_attach(&sub, "in gsA/sub with its own vGPU") < 0 ||
	    expect_attach(&deep, "in gsA/sub/deep under gsA/sub's vGPU") < 0)
		return -1;
	TOK(gs_vgpu_destroy(gs_fd, 0, (uint32_t)idS));
	/* gone again: back to gsA's */
	sub.id = idA;
	sub.cap = CAPA;
	return expect_attach(&sub, "in gsA/sub after its vGPU went");
}

static int t_no_vgpu(void)
{
	struct expect root = { "", 0, ENOENT, 0, 0, 0, 0, 0, 0 };
	struct expect c = { "gsC", 0, ENOENT, 0, 0, 0, 0, 0, 0 };
	struct expect b1 = { "gsB", 1, ENOENT, 0, 0, 0, 0, 0, 0 };
	struct expect unconf = { "gsA", 31, ENODEV, 0, 0, 0, 0, 0, 0 };
	struct expect range = { "gsA", 32, EINVAL, 0, 0, 0, 0, 0, 0 };

	if (expect_attach(&root, "in the root cgroup") < 0 ||
	    expect_attach(&c, "in gsC") < 0 ||
	    expect_attach(&b1, "in gsB on card 1") < 0 ||
	    expect_attach(&unconf, "on unconfigured card 31") < 0 ||
	    expect_attach(&range, "on card 32") < 0)
		return -1;
	return 0;
}

static int child_two_cards(void *arg)
{
	struct gpuslice_attach a;
	uint64_t used, cap;
	int fd;

	(void)arg;
	T(gs_cg_enter("gsA") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, 0, &a));
	TEQ(a.id, (uint32_t)idA);
	TEQ(a.mem_cap, CAPA);
	/* card 1 not attached yet on this file */
	TE(gs_charge(fd, 1, 4096, NULL), ENOTCONN);
	TOK(gs_attach(fd, 1, &a));
	TEQ(a.id, (uint32_t)idA1);
	TEQ(a.mem_cap, CAPA1);
	TOK(gs_charge(fd, 0, 10 << 20, &used));
	TEQ(used, 10 << 20);
	TOK(gs_charge(fd, 1, 20 << 20, &used));
	TEQ(used, 20 << 20);
	/* each card's cap is its own */
	TE(gs_charge(fd, 0, CAPA - (10 << 20) + 1, NULL), ENOMEM);
	TOK(gs_charge(fd, 1, CAPA, &used));
	TEQ(used, CAPA + (20 << 20));
	TOK(gs_meminfo(fd, 0, &used, &cap));
	TEQ(used, 10 << 20);
	TEQ(cap, CAPA);
	TOK(gs_meminfo(fd, 1, &used, &cap));
	TEQ(used, CAPA + (20 << 20));
	TEQ(cap, CAPA1);
	{
		struct gpuslice_vgpu_stats s;

		TOK(gs_vgpu_stats(fd, 0, (uint32_t)idA, &s));
		TEQ(s.mem_used, 10 << 20);
		TEQ(s.nprocs, 1);
		TOK(gs_vgpu_stats(fd, 1, (uint32_t)idA1, &s));
		TEQ(s.mem_used, CAPA + (20 << 20));
		TEQ(s.nprocs, 1);
		TOK(gs_vgpu_stats(fd, 0, (uint32_t)idB, &s));
		TEQ(s.mem_used, 0);
		TEQ(s.nprocs, 0);
	}
	/* uncharging card 0 leaves card 1 alone (and clamps to card 0's) */
	TOK(gs_uncharge(fd, 0, CAPA1, &used));
	TEQ(used, 0);
	TOK(gs_meminfo(fd, 1, &used, NULL));
	TEQ(used, CAPA + (20 << 20));
	/* a card configured but never attached */
	TE(gs_charge(fd, 2, 4096, NULL), ENOTCONN);
	close(fd);
	return 0;
}

static int t_two_cards(void)
{
	struct gpuslice_vgpu_stats s;
	pid_t pid = gs_spawn(child_two_cards, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "in gsA");
	TOK(gs_vgpu_stats(gs_fd, 1, (uint32_t)idA1, &s));
	TEQ(s.mem_used, 0);
	TEQ(s.nprocs, 0);
	TOK(gs_vgpu_stats(gs_fd, 0, (uint32_t)idA, &s));
	TEQ(s.mem_used, 0);
	return 0;
}

static int child_not_attached(void *arg)
{
	struct gpuslice_attach a;
	int fd;

	(void)arg;
	T(gs_cg_enter("gsA") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TE(gs_charge(fd, 0, 4096, NULL), ENOTCONN);
	TE(gs_uncharge(fd, 0, 4096, NULL), ENOTCONN);
	TE(gs_meminfo(fd, 0, NULL, NULL), ENOTCONN);
	TE(gs_acquire(fd, 0, 0, 0, NULL, NULL), ENOTCONN);
	TE(gs_acquire(fd, 0, GPUSLICE_ACQUIRE_NONBLOCK, 0, NULL, NULL), ENOTCONN);
	TE(gs_release(fd, 0, 0, 0), ENOTCONN);
	TE(gs_acquire(fd, 2, 0, 0, NULL, NULL), ENOTCONN);
	/* ENOTCONN was not sticky; attaching card 0 does not attach card 1 */
	TOK(gs_attach(fd, 0, &a));
	TOK(gs_charge(fd, 0, 4096, NULL));
	TE(gs_charge(fd, 1, 4096, NULL), ENOTCONN);
	TE(gs_acquire(fd, 1, GPUSLICE_ACQUIRE_NONBLOCK, 0, NULL, NULL), ENOTCONN);
	close(fd);
	return 0;
}

static int t_not_attached(void)
{
	pid_t pid = gs_spawn(child_not_attached, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "in gsA");
	return 0;
}

static int child_moved(void *arg)
{
	struct gpuslice_attach a;
	uint64_t used;
	int fd, fd2;

	(void)arg;
	T(gs_cg_enter("gsA") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, 0, &a));
	TEQ(a.id, (uint32_t)idA);
	T(gs_cg_enter("gsB") == 0, "move to gsB: %s", gs_errname(errno));
	/* the file stays bound to gsA's vGPU */
	TOK(gs_attach(fd, 0, &a));
	TEQ(a.id, (uint32_t)idA);
	TOK(gs_charge(fd, 0, 1 << 20, &used));
	TEQ(used, 1 << 20);
	{
		struct gpuslice_vgpu_stats s;

		TOK(gs_vgpu_stats(fd, 0, (uint32_t)idA, &s));
		TEQ(s.mem_used, 1 << 20);
		TOK(gs_vgpu_stats(fd, 0, (uint32_t)idB, &s));
		TEQ(s.mem_used, 0);
	}
	/* a new file attaches where the process is now */
	fd2 = gs_open();
	T(fd2 >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd2, 0, &a));
	TEQ(a.id, (uint32_t)idB);
	TEQ(a.mem_cap, CAPB);
	close(fd2);
	close(fd);
	return 0;
}

static int t_moved_process(void)
{
	pid_t pid = gs_spawn(child_moved, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "moved from gsA to gsB");
	return 0;
}

static int child_pad(void *arg)
{
	struct gpuslice_attach a;
	struct gpuslice_charge c;
	struct gpuslice_acquire q;
	uint64_t used;
	int fd;

	(void)arg;
	T(gs_cg_enter("gsA") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, 0, &a));
	memset(&c, 0, sizeof(c));
	c.card = 0;
	c.bytes = 4096;
	c.pad = 1;
	TE(ioctl(fd, GPUSLICE_IOC_CHARGE, &c), EINVAL);
	TE(ioctl(fd, GPUSLICE_IOC_UNCHARGE, &c), EINVAL);
	TE(ioctl(fd, GPUSLICE_IOC_MEMINFO, &c), EINVAL);
	TOK(gs_meminfo(fd, 0, &used, NULL));
	TEQ(used, 0);
	memset(&q, 0, sizeof(q));
	q.card = 0;
	q.pad = 1;
	TE(ioctl(fd, GPUSLICE_IOC_ACQUIRE, &q), EINVAL);
	close(fd);
	return 0;
}

static int t_pad_attached(void)
{
	pid_t pid = gs_spawn(child_pad, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "in gsA");
	return 0;
}

/* Children holding attachments while the parent reads /proc. */
struct holder {
	const char *cg;
	uint32_t card;
	uint64_t charge;
};
static volatile int *hold_state;	/* [0] ready count, [1] go */

static int child_hold(void *arg)
{
	const struct holder *h = arg;
	struct gpuslice_attach a;
	int fd;

	T(gs_cg_enter(h->cg) == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, h->card, &a));
	TOK(gs_charge(fd, h->card, h->charge, NULL));
	__atomic_add_fetch(&hold_state[0], 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 2000 && !hold_state[1]; i++)
		gs_sleep_ms(5);
	close(fd);
	return 0;
}

static int check_cgroup_cell(const char *cell, uint64_t id, const char *path)
{
	char *end;
	unsigned long long v = strtoull(cell, &end, 0);

	if (*end == 0 && end != cell)
		return v == id;
	/* a path: accept /gsA or gsA */
	if (cell[0] == '/')
		cell++;
	return !strcmp(cell, path);
}

static int check_vgpu_row(const struct gs_tab *t, uint32_t card, int id,
			  uint64_t cgid, const char *path, uint64_t used,
			  uint64_t cap, unsigned procs)
{
	char cs[16], is[16];
	int r, ok = 1;
	const char *mode, *cgcell;

	snprintf(cs, sizeof(cs), "%u", card);
	snprintf(is, sizeof(is), "%d", id);
	r = gs_tab_find(t, "card", cs, "id", is);
	T(r >= 0, "vgpus: no row for card %u id %d", card, id);
	cgcell = gs_tab_get(t, r, "cgroup");
	T(cgcell && check_cgroup_cell(cgcell, cgid, path),
	  "vgpus card %u id %d: cgroup '%s', expected %llu (%s)", card, id,
	  cgcell ? cgcell : "?", (unsigned long long)cgid, path);
	mode = gs_tab_get(t, r, "mode");
	T(mode && !strcmp(mode, "memory"), "vgpus card %u id %d: mode '%s'",
	  card, id, mode ? mode : "?");
	T(gs_tab_u64(t, r, "mem_used", &ok) == used && ok,
	  "vgpus card %u id %d: mem_used %s, expected %llu", card, id,
	  gs_tab_get(t, r, "mem_used"), (unsigned long long)used);
	T(gs_tab_u64(t, r, "mem_cap", &ok) == cap && ok,
	  "vgpus card %u id %d: mem_cap %s, expected %llu", card, id,
	  gs_tab_get(t, r, "mem_cap"), (unsigned long long)cap);
	T(gs_tab_u64(t, r, "quota", &ok) == 0 && ok, "quota %s",
	  gs_tab_get(t, r, "quota"));
	T(gs_tab_u64(t, r, "priority", &ok) == 0 && ok, "priority %s",
	  gs_tab_get(t, r, "priority"));
	T(gs_tab_u64(t, r, "procs", &ok) == procs && ok,
	  "vgpus card %u id %d: procs %s, expected %u", card, id,
	  gs_tab_get(t, r, "procs"), procs);
	return 0;
}

static int check_header(const struct gs_tab *t, const char *file,
			const char *want)
{
	char buf[256], *save = NULL;
	int i = 0;

	gs_strlcpy(buf, want, sizeof(buf));
	for (char *w = strtok_r(buf, " ", &save); w;
	     w = strtok_r(NULL, " ", &save), i++)
		T(i < t->ncols && !strcmp(t->col[i], w),
		  "/proc/gpuslice/%s header column %d is '%s', expected '%s'",
		  file, i, i < t->ncols ? t->col[i] : "(none)", w);
	T(i == t->ncols, "/proc/gpuslice/%s header has %d columns, expected %d",
	  file, t->ncols, i);
	return 0;
}

static int t_proc_files(void)
{
	static struct gs_tab t;
	static const struct holder ha = { "gsA", 0, 1 << 20 };
	static const struct holder hb = { "gsB", 0, 2 << 20 };
	static const struct holder ha1 = { "gsA/sub", 1, 3 << 20 };
	pid_t pa, pb, pa1;
	int r, ok = 1;

	hold_state[0] = hold_state[1] = 0;
	pa = gs_spawn(child_hold, (void *)&ha, 30);
	pb = gs_spawn(child_hold, (void *)&hb, 30);
	pa1 = gs_spawn(child_hold, (void *)&ha1, 30);
	T(pa > 0 && pb > 0 && pa1 > 0, "fork");
	for (int i = 0; i < 2000 && hold_state[0] < 3; i++)
		gs_sleep_ms(5);
	if (hold_state[0] < 3) {
		hold_state[1] = 1;
		gs_join(pa, 5000, "holder gsA");
		gs_join(pb, 5000, "holder gsB");
		gs_join(pa1, 5000, "holder gsA/sub");
		T(0, "holders not ready");
	}

	T(gs_tab_read("vgpus", &t) == 0, "/proc/gpuslice/vgpus: %s",
	  gs_errname(errno));
	if (check_header(&t, "vgpus", "card id cgroup mode mem_used mem_cap "
			 "quota priority procs pending busy_ns wait_ns slices "
			 "acquires mem_unseen") < 0 ||
	    check_vgpu_row(&t, 0, idA, cgA, "gsA", 1 << 20, CAPA, 1) < 0 ||
	    check_vgpu_row(&t, 0, idB, cgB, "gsB", 2 << 20, CAPB, 1) < 0 ||
	    check_vgpu_row(&t, 1, idA1, cgA, "gsA", 3 << 20, CAPA1, 1) < 0)
		goto out;
	/* card 2's compute vGPU shows up too */
	{
		char is[16];

		snprintf(is, sizeof(is), "%d", idA2);
		r = gs_tab_find(&t, "card", "2", "id", is);
		if (r < 0 || strcmp(gs_tab_str(&t, r, "mode"), "compute") ||
		    gs_tab_u64(&t, r, "quota", &ok) != 30) {
			gs_failf(__LINE__, "vgpus: card 2 id %d missing or not compute/30", idA2);
			goto out;
		}
	}
	if (t.nrows != 4) {
		gs_failf(__LINE__, "vgpus: %d rows, expected 4", t.nrows);
		goto out;
	}

	T(gs_tab_read("cards", &t) == 0, "/proc/gpuslice/cards: %s",
	  gs_errname(errno));
	if (check_header(&t, "cards", "card policy max_inst slice_us "
			 "reclaim_us mode vgpus owner handovers idle_slices") < 0)
		goto out;
	r = gs_tab_find(&t, "card", "0", NULL, NULL);
	if (r < 0 || gs_tab_u64(&t, r, "policy", &ok) != 0 ||
	    gs_tab_u64(&t, r, "max_inst", &ok) != 20 ||
	    gs_tab_u64(&t, r, "slice_us", &ok) != 5000 ||
	    gs_tab_u64(&t, r, "reclaim_us", &ok) != 100000 ||
	    strcmp(gs_tab_str(&t, r, "mode"), "memory") ||
	    gs_tab_u64(&t, r, "vgpus", &ok) != 2 || !ok) {
		gs_failf(__LINE__, "cards: row of card 0 wrong or missing "
			 "(expected 0 0 20 5000 100000 memory 2 ...)");
		goto out;
	}
	r = gs_tab_find(&t, "card", "1", NULL, NULL);
	if (r < 0 || gs_tab_u64(&t, r, "policy", &ok) != 0 ||
	    gs_tab_u64(&t, r, "max_inst", &ok) != 10 ||
	    gs_tab_u64(&t, r, "slice_us", &ok) != 2000 ||
	    gs_tab_u64(&t, r, "reclaim_us", &ok) != 50000 ||
	    strcmp(gs_tab_str(&t, r, "mode"), "memory") ||
	    gs_tab_u64(&t, r, "vgpus", &ok) != 1 || !ok) {
		gs_failf(__LINE__, "cards: row of card 1 wrong or missing "
			 "(expected 1 0 10 2000 50000 memory 1 ...)");
		goto out;
	}
	r = gs_tab_find(&t, "card", "2", NULL, NULL);
	if (r < 0 || gs_tab_u64(&t, r, "policy", &ok) != 4 ||
	    strcmp(gs_tab_str(&t, r, "mode"), "compute")) {
		gs_failf(__LINE__, "cards: row of card 2 wrong or missing");
		goto out;
	}
	if (gs_tab_find(&t, "card", "31", NULL, NULL) >= 0) {
		gs_failf(__LINE__, "cards: unconfigured card 31 listed");
		goto out;
	}
	{
		const char *o = gs_tab_get(&t, r, "owner");
		char *end;

		int isnum = 0;

		if (o) {
			long v = strtol(o, &end, 10);

			isnum = end != o && *end == 0 && v >= 0 && v < 64;
		}
		if (!o || (strcmp(o, "none") && strcmp(o, "all") && !isnum)) {
			gs_failf(__LINE__, "cards: owner '%s' is not an id, none or all",
				 o ? o : "?");
			goto out;
		}
	}

	T(gs_tab_read("procs", &t) == 0, "/proc/gpuslice/procs: %s",
	  gs_errname(errno));
	if (check_header(&t, "procs", "pid card id mem_charged") < 0)
		goto out;
	{
		const struct { pid_t pid; uint32_t card; int id; uint64_t c; } w[3] = {
			{ pa, 0, idA, 1 << 20 }, { pb, 0, idB, 2 << 20 },
			{ pa1, 1, idA1, 3 << 20 } };

		for (int i = 0; i < 3; i++) {
			char ps[16], cs[16];

			snprintf(ps, sizeof(ps), "%d", w[i].pid);
			snprintf(cs, sizeof(cs), "%u", w[i].card);
			r = gs_tab_find(&t, "pid", ps, "card", cs);
			if (r < 0 || gs_tab_u64(&t, r, "id", &ok) != (unsigned)w[i].id ||
			    gs_tab_u64(&t, r, "mem_charged", &ok) != w[i].c || !ok) {
				gs_failf(__LINE__, "procs: row for pid %d card %u "
					 "wrong or missing (expected id %d charged %llu)",
					 w[i].pid, w[i].card, w[i].id,
					 (unsigned long long)w[i].c);
				goto out;
			}
		}
		if (t.nrows != 3) {
			gs_failf(__LINE__, "procs: %d rows, expected 3", t.nrows);
			goto out;
		}
	}
out:
	hold_state[1] = 1;
	TJOIN(pa, 10000, "holder gsA");
	TJOIN(pb, 10000, "holder gsB");
	TJOIN(pa1, 10000, "holder gsA/sub");
	if (gs_sub_failed)
		return -1;
	/* all gone after they closed */
	T(gs_tab_read("procs", &t) == 0, "procs: %s", gs_errname(errno));
	T(t.nrows == 0, "procs: %d rows after every file closed", t.nrows);
	T(gs_tab_read("vgpus", &t) == 0, "vgpus: %s", gs_errname(errno));
	for (r = 0; r < t.nrows; r++) {
		T(gs_tab_u64(&t, r, "mem_used", &ok) == 0,
		  "vgpus row %d: mem_used %s after close", r,
		  gs_tab_get(&t, r, "mem_used"));
		T(gs_tab_u64(&t, r, "procs", &ok) == 0,
		  "vgpus row %d: procs %s after close", r,
		  gs_tab_get(&t, r, "procs"));
	}
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	hold_state = gs_shm(4096);
	cgA = gs_cg_create("gsA");
	cgB = gs_cg_create("gsB");
	cgSub = gs_cg_create("gsA/sub");
	cgDeep = gs_cg_create("gsA/sub/deep");
	cgC = gs_cg_create("gsC");
	if (!cgA || !cgB || !cgSub || !cgDeep || !cgC ||
	    gs_card_set(gs_fd, 0, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    gs_card_set(gs_fd, 1, GPUSLICE_POLICY_NATIVE, 10, 2 * MS, 50 * MS) < 0 ||
	    gs_card_set(gs_fd, 2, GPUSLICE_POLICY_WEIGHTED, 20, 0, 0) < 0 ||
	    (idA = gs_vgpu_create(gs_fd, 0, cgA, CAPA, 0, 0, M)) < 0 ||
	    (idB = gs_vgpu_create(gs_fd, 0, cgB, CAPB, 0, 0, M)) < 0 ||
	    (idA1 = gs_vgpu_create(gs_fd, 1, cgA, CAPA1, 0, 0, M)) < 0 ||
	    (idA2 = gs_vgpu_create(gs_fd, 2, cgA, CAPA / 2, 30, 1, C)) < 0) {
		gs_line("GSTEST " P " FAIL setup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("attach_own_cgroup", t_own_cgroup);
	gs_run("attach_compute_spec", t_compute_spec);
	gs_run("nearest_ancestor", t_nearest_ancestor);
	gs_run("no_vgpu", t_no_vgpu);
	gs_run("two_cards", t_two_cards);
	gs_run("not_attached", t_not_attached);
	gs_run("moved_process", t_moved_process);
	gs_run("pad_attached", t_pad_attached);
	gs_run("proc_files", t_proc_files);
	return gs_finish();
}
