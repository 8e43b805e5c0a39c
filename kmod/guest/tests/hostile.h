/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * hostile.h: tenants, hostile and measured, for the guest programs of
 * issue 14 (hold, kmem, contend, flood, peek, busy, efault, recreate and
 * hostile_bench). A tenant is what a container with a vGPU is: a forked
 * process in a cgroup v2 of its own with a vGPU bound to it, uid/gid
 * 65534 with no supplementary groups, no_new_privs, every capability
 * dropped (bounding set included), nothing but /dev/gpuslice and the uapi
 * header. Next to it a measured victim (another tenant) or the agent (the
 * root parent) says what the hostile one cost them.
 *
 *   hs_tenant(cg, fn, arg, timeout_s)   fork; the child enters cg, drops
 *                                       privileges and runs fn(arg)
 *   hs_victim_*                         a tenant that spins in its slices
 *                                       and measures its share and waits
 *   hs_holder                           ACQUIRE_HOLD, never RELEASE
 *   hs_flood_*                          N threads blocked in ACQUIRE
 *   hs_hog_*                            N attached files, /proc readers
 *   hs_lat_*                            latency samples, percentiles
 *
 * The loads and the scenarios are in hs_load.h, which this file includes.
 *
 * Limits of the contract (/work/spec14.md) not in an older uapi header
 * are defined here with the contract's values, so that the programs build
 * against the module of before issue 14 too (and fail there).
 *
 * A header, not a program: run.sh builds only the .c files as programs.
 */
#ifndef HOSTILE_H
#define HOSTILE_H

#include "gstest.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <linux/capability.h>

#ifndef GPUSLICE_MAX_VGPU_FILES
#define GPUSLICE_MAX_VGPU_FILES		1024	/* files attached to one vGPU */
#endif
#ifndef GPUSLICE_MAX_VGPU_WAITERS
#define GPUSLICE_MAX_VGPU_WAITERS	256	/* threads in ACQUIRE/WAIT */
#endif

#define HS_NOBODY	65534
#define US		1000ULL		/* ns */

static inline double hs_ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

/* ------------------------------------------------------------------ */
/* Tenants */

/*
 * Drops everything a container's process does not have: the bounding
 * set first (needs CAP_SETPCAP, which root still has), then the groups
 * and ids (setuid from root clears the permitted, effective and ambient
 * sets), then no_new_privs. Checks the result in /proc/self/status.
 */
static inline int hs_drop(void)
{
	static const char *const zero[] = { "CapInh:", "CapPrm:", "CapEff:",
					     "CapBnd:", "CapAmb:" };
	char buf[4096];

	for (int c = 0; c <= CAP_LAST_CAP; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			T(0, "PR_CAPBSET_DROP %d: %s", c, gs_errname(errno));
	TOK(setgroups(0, NULL));
	TOK(setgid(HS_NOBODY));
	TOK(setuid(HS_NOBODY));
	TOK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
	T(getuid() == HS_NOBODY && geteuid() == HS_NOBODY &&
	  getgid() == HS_NOBODY && getegid() == HS_NOBODY,
	  "ids: uid %d euid %d gid %d", getuid(), geteuid(), getgid());
	T(gs_read_file("/proc/self/status", buf, sizeof(buf)) > 0,
	  "/proc/self/status: %s", gs_errname(errno));
	for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++) {
		const char *k = strstr(buf, zero[i]);

		T(k, "no %s line", zero[i]);
		k += strlen(zero[i]);
		T(!strncmp(k, "\t0000000000000000", 17),
		  "%s not empty: %.20s", zero[i], k);
	}
	T(strstr(buf, "NoNewPrivs:\t1"), "no_new_privs not set");
	return 0;
}

struct hs_tenant_arg {
	const char *cg;
	int (*fn)(void *);
	void *arg;
};

static struct hs_tenant_arg hs_targs[GS_MAXCHILD];
static int hs_ntargs;

static inline int hs_tenant_main(void *p)
{
	struct hs_tenant_arg *t = p;

	T(gs_cg_enter(t->cg) == 0, "enter cgroup %s: %s", t->cg,
	  gs_errname(errno));
	if (hs_drop() < 0)
		return -1;
	return t->fn(t->arg);
}

/* A program's setup failed (errno says why): one FAIL line, the end. */
static inline int hs_setup_failed(const char *what)
{
	gs_line("GSTEST %s FAIL setup: %s: %s", gs_prog, what, gs_errname(errno));
	gs_nfail++;
	return gs_finish();
}

/* Forks a tenant: in cgroup cg, unprivileged, running fn(arg). */
static inline pid_t hs_tenant(const char *cg, int (*fn)(void *), void *arg,
			      unsigned timeout_s)
{
	struct hs_tenant_arg *t = &hs_targs[hs_ntargs++ % GS_MAXCHILD];

	t->cg = cg;
	t->fn = fn;
	t->arg = arg;
	return gs_spawn(hs_tenant_main, t, timeout_s);
}

/* A tenant's file attached to its vGPU on card (-1: failed, errno). */
static inline int hs_open_attached(uint32_t card, struct gpuslice_attach *out)
{
	struct gpuslice_attach a;
	int fd = gs_open(), e;

	if (fd < 0)
		return -1;
	if (gs_attach(fd, card, out ? out : &a) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Waits (1 ms steps) for *flag, at most ms; returns whether it was set. */
static inline int hs_wait_flag(volatile int *flag, unsigned ms)
{
	for (unsigned i = 0; i < ms && !*flag; i++)
		gs_sleep_ms(1);
	return *flag;
}

/* ------------------------------------------------------------------ */
/* Percentiles */

static inline int hs_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The p-th percentile (0..100) of n samples (sorted in place); 0 if none. */
static inline uint64_t hs_pct(uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), hs_cmp_u64);
	i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* ------------------------------------------------------------------ */
/* cgroups: the memory controller for the tenants' cgroups */

/* Writes value to a cgroup's file ("" = the root); 0 or -1 with errno. */
static inline int hs_cg_write(const char *cg, const char *file,
			      const char *value)
{
	char path[256];
	size_t n = strlen(value);
	ssize_t w;
	int fd;

	snprintf(path, sizeof(path), GS_CGROOT "%s%s/%s", cg[0] ? "/" : "",
		 cg, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	w = write(fd, value, n);
	close(fd);
	return w == (ssize_t)n ? 0 : -1;
}

/* Enables a controller ("+memory", "+cpu") for the root's children. */
static inline int hs_enable_controller(const char *ctl)
{
	return hs_cg_write("", "cgroup.subtree_control", ctl);
}

/* A key of a flat keyed file ("key value" lines): the value, or -1. */
static inline long long hs_keyed(const char *path, const char *key)
{
	static char buf[16384];
	size_t kl = strlen(key);

	if (gs_read_file(path, buf, sizeof(buf)) < 0)
		return -1;
	for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, key, kl) && (l[kl] == ' ' || l[kl] == ':'))
			return strtoll(l + kl + 1, NULL, 10);
	return -1;
}

#include "hs_load.h"

#endif /* HOSTILE_H */
