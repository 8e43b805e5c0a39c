/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * gstest.h: helpers shared by the guest test programs of gpuslice.ko
 * (kmod/guest/tests/NAME.c). Each program is built alone and statically:
 *
 *   gcc -static -O2 -Wall -Wextra -Werror -I kmod/include/uapi \
 *       -o NAME NAME.c -lpthread
 *
 * and runs as root in the qemu guest. Output protocol, one write(2) per
 * line so that forked processes do not interleave:
 *
 *   GSTEST <program> PASS <subtest>
 *   GSTEST <program> FAIL <subtest>: <why>
 *   GSBENCH <program> <metric> <value> <unit>
 *   GSINFO <program> <free text>          (ignored by the harness)
 *
 * The exit status is 0 only if every subtest passed.
 *
 * A subtest is a function `static int fn(void)` run by gs_run(name, fn):
 * the T*() macros below report the first failed check and return -1 from
 * it. They work in forked children as well (gs_spawn): a child records its
 * first failure in shared memory and exits 1; gs_join() in the parent turns
 * that into the subtest's FAIL line. Everything a program creates
 * (vGPUs, cgroups made with gs_cg_create, children) is removed by
 * gs_finish(), and by the watchdog when the program overruns. gs_finish()
 * adds two subtests of its own: clean_exit (no vGPU, cgroup or attached
 * file left) and kernel_log (no oops, WARN or BUG in the kernel log since
 * the program started). A subtest returning 1 is skipped (a GSINFO line).
 *
 * Include this file before any other header: it defines _GNU_SOURCE.
 */
#ifndef GSTEST_H
#define GSTEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice.h"

#define GS_CGROOT	"/sys/fs/cgroup"
#define GS_MAXCHILD	128
#define GS_MAXCG	96
#define GS_MSGLEN	384
#define MS		1000000ULL	/* ns */

/* ------------------------------------------------------------------ */
/* Global state */

struct gs_shared {
	char msg[GS_MAXCHILD][GS_MSGLEN];	/* first failure of each child */
};

static const char *gs_prog = "?";
static const char *gs_sub = "setup";
static int gs_sub_failed;
static int gs_npass, gs_nfail;
static int gs_is_child;
static int gs_child_slot = -1;
static int gs_fd = -1;			/* the program's admin file */
static struct gs_shared *gs_sh;
static int gs_kmsg_fd = -1;
static unsigned gs_watchdog_s;

static pid_t gs_kids[GS_MAXCHILD];
static int gs_kid_slot[GS_MAXCHILD];
static int gs_next_slot;

static char gs_cgs[GS_MAXCG][128];	/* cgroups created, in order */
static int gs_ncg;

/* ------------------------------------------------------------------ */
/* Output */

static inline void gs_strlcpy(char *dst, const char *src, size_t len)
{
	size_t l = strlen(src);

	if (l >= len)
		l = len - 1;
	memcpy(dst, src, l);
	dst[l] = 0;
}

static inline void gs_write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

__attribute__((format(printf, 1, 2)))
static inline void gs_line(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	/* one line: no embedded newlines */
	for (int i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = ' ';
	buf[n++] = '\n';
	gs_write_all(1, buf, (size_t)n);
}

static inline const char *gs_errname(int e)
{
	switch (e) {
	case 0: return "0";
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case ESRCH: return "ESRCH";
	case EINTR: return "EINTR";
	case EIO: return "EIO";
	case E2BIG: return "E2BIG";
	case EBADF: return "EBADF";
	case EAGAIN: return "EAGAIN";
	case ENOMEM: return "ENOMEM";
	case EACCES: return "EACCES";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case EEXIST: return "EEXIST";
	case EXDEV: return "EXDEV";
	case ENODEV: return "ENODEV";
	case EINVAL: return "EINVAL";
	case ENOTTY: return "ENOTTY";
	case ENOSPC: return "ENOSPC";
	case ERANGE: return "ERANGE";
	case ENOSYS: return "ENOSYS";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ENOTCONN: return "ENOTCONN";
	case EOVERFLOW: return "EOVERFLOW";
	case ENXIO: return "ENXIO";
	case ERESTART: return "ERESTART";
	case 512: return "ERESTARTSYS(512)";
	default: {
		static __thread char b[24];

		snprintf(b, sizeof(b), "errno%d", e);
		return b;
	}
	}
}

/* Records a failure of the current subtest (or of this child). */
__attribute__((format(printf, 2, 3)))
static inline void gs_failf(int line, const char *fmt, ...)
{
	char msg[GS_MSGLEN];
	va_list ap;
	int n;

	n = snprintf(msg, sizeof(msg), "L%d: ", line);
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
	va_end(ap);

	if (gs_is_child) {
		if (gs_sh && gs_child_slot >= 0 &&
		    gs_sh->msg[gs_child_slot][0] == 0) {
			gs_strlcpy(gs_sh->msg[gs_child_slot], msg, GS_MSGLEN);
		}
		return;
	}
	if (!gs_sub_failed) {
		gs_line("GSTEST %s FAIL %s: %s", gs_prog, gs_sub, msg);
		gs_nfail++;
		gs_sub_failed = 1;
	} else {
		gs_line("GSINFO %s %s: also: %s", gs_prog, gs_sub, msg);
	}
}

#define gs_info(...) gs_line("GSINFO " __VA_ARGS__)

/* Check macros: in a function returning int, report and return -1. */
#define T(cond, ...)							\
	do {								\
		if (!(cond)) {						\
			gs_failf(__LINE__, __VA_ARGS__);		\
			return -1;					\
		}							\
	} while (0)

/* call must succeed (return >= 0). */
#define TOK(call)							\
	do {								\
		errno = 0;						\
		long _r = (long)(call);					\
		int _e = errno;						\
		if (_r < 0) {						\
			gs_failf(__LINE__, "%s: failed: %s", #call,	\
				 gs_errname(_e));			\
			return -1;					\
		}							\
	} while (0)

/* call must fail (-1) with errno err (or err2). */
#define TE2(call, err, err2)						\
	do {								\
		errno = 0;						\
		long _r = (long)(call);					\
		int _e = errno;						\
		if (_r != -1 || (_e != (err) && _e != (err2))) {	\
			gs_failf(__LINE__,				\
				 "%s: expected %s, got rc %ld errno %s",\
				 #call, gs_errname(err), _r,		\
				 _r == -1 ? gs_errname(_e) : "-");	\
			return -1;					\
		}							\
	} while (0)
#define TE(call, err) TE2(call, err, err)

/* Equality of two integers, printing both. */
#define TEQ(a, b)							\
	do {								\
		unsigned long long _a = (unsigned long long)(a);	\
		unsigned long long _b = (unsigned long long)(b);	\
		if (_a != _b) {						\
			gs_failf(__LINE__, "%s == %llu, expected %s == %llu",\
				 #a, _a, #b, _b);			\
			return -1;					\
		}							\
	} while (0)

/* ------------------------------------------------------------------ */
/* Time */

static inline uint64_t gs_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline void gs_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static inline void gs_spin_until(uint64_t t)
{
	while (gs_now() < t)
		;
}

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

/* ------------------------------------------------------------------ */
/* cgroups */

static inline void gs_cg_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, GS_CGROOT "/%s", name);
}

/* The cgroup v2 id of a directory under /sys/fs/cgroup ("" = root): 0 on error. */
static inline uint64_t gs_cg_id(const char *name)
{
	struct {
		struct file_handle fh;
		unsigned char buf[64];
	} h;
	char path[256];
	int mnt;
	uint64_t id;

	gs_cg_path(path, sizeof(path), name);
	memset(&h, 0, sizeof(h));
	h.fh.handle_bytes = 8;
	if (name_to_handle_at(AT_FDCWD, path, &h.fh, &mnt, 0) < 0)
		return 0;
	if (h.fh.handle_bytes != 8) {
		errno = EOVERFLOW;
		return 0;
	}
	memcpy(&id, h.fh.f_handle, 8);
	return id;
}

/* mkdir (EEXIST fine), remembered for gs_cg_cleanup; returns the id or 0. */
static inline uint64_t gs_cg_create(const char *name)
{
	char path[256];
	int known = 0;

	gs_cg_path(path, sizeof(path), name);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return 0;
	for (int i = 0; i < gs_ncg; i++)
		if (!strcmp(gs_cgs[i], name))
			known = 1;
	if (!known && gs_ncg < GS_MAXCG) {
		gs_strlcpy(gs_cgs[gs_ncg], name, sizeof(gs_cgs[0]));
		gs_ncg++;
	}
	return gs_cg_id(name);
}

/* Moves pid (0: the caller) into the cgroup ("" = root). */
static inline int gs_cg_move(const char *name, pid_t pid)
{
	char path[256], buf[32];
	int fd, n;
	ssize_t w;

	snprintf(path, sizeof(path), GS_CGROOT "%s%s/cgroup.procs",
		 name[0] ? "/" : "", name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = snprintf(buf, sizeof(buf), "%d\n", pid ? pid : getpid());
	w = write(fd, buf, (size_t)n);
	close(fd);
	return w == n ? 0 : -1;
}

static inline int gs_cg_enter(const char *name)
{
	return gs_cg_move(name, 0);
}

/* rmdir, retrying while the cgroup still empties (EBUSY): up to 2 s. */
static inline int gs_cg_remove(const char *name)
{
	char path[256];

	gs_cg_path(path, sizeof(path), name);
	for (int i = 0; i < 400; i++) {
		if (rmdir(path) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -1;
		gs_sleep_ms(5);
	}
	return -1;
}

static char gs_cg_left[128];	/* a cgroup gs_cg_cleanup could not remove */

/* Removes every cgroup this program created, deepest (latest) first. */
static inline void gs_cg_cleanup(void)
{
	for (int i = gs_ncg - 1; i >= 0; i--)
		if (gs_cg_remove(gs_cgs[i]) < 0 && !gs_cg_left[0])
			gs_strlcpy(gs_cg_left, gs_cgs[i], sizeof(gs_cg_left));
	gs_ncg = 0;
}

/* ------------------------------------------------------------------ */
/* Shared memory and children */

static inline void *gs_shm(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		gs_line("GSINFO %s mmap shared %zu: %s", gs_prog, len,
			gs_errname(errno));
		_exit(2);
	}
	memset(p, 0, len);
	return p;
}

static inline void gs_child_alarm(int sig)
{
	(void)sig;
	if (gs_sh && gs_child_slot >= 0 && gs_sh->msg[gs_child_slot][0] == 0)
		strcpy(gs_sh->msg[gs_child_slot], "child watchdog timeout");
	_exit(3);
}

/*
 * Forks a child running fn(arg) with a watchdog of timeout_s seconds; its
 * exit status is 0 if fn returned 0. Returns the pid (-1: fork failed).
 */
static inline pid_t gs_spawn(int (*fn)(void *), void *arg, unsigned timeout_s)
{
	int slot = gs_next_slot++ % GS_MAXCHILD;
	pid_t pid;

	gs_sh->msg[slot][0] = 0;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		struct sigaction sa;
		int r;

		gs_is_child = 1;
		gs_child_slot = slot;
		gs_ncg = 0;	/* the parent removes the cgroups */
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = gs_child_alarm;
		sigaction(SIGALRM, &sa, NULL);
		alarm(timeout_s ? timeout_s : 60);
		r = fn(arg);
		_exit(r == 0 ? 0 : 1);
	}
	for (int i = 0; i < GS_MAXCHILD; i++) {
		if (gs_kids[i] == 0) {
			gs_kids[i] = pid;
			gs_kid_slot[i] = slot;
			break;
		}
	}
	return pid;
}

static inline int gs_kid_index(pid_t pid)
{
	for (int i = 0; i < GS_MAXCHILD; i++)
		if (gs_kids[i] == pid)
			return i;
	return -1;
}

/* The child's first failure message ("" if none). */
static inline const char *gs_kid_msg(pid_t pid)
{
	int i = gs_kid_index(pid);

	return i < 0 ? "" : gs_sh->msg[gs_kid_slot[i]];
}

/*
 * Waits up to timeout_ms for the child; on timeout kills it (SIGKILL).
 * Returns the wait status, or -1 if it had to be killed. Sets *waited_ms.
 */
static inline int gs_wait(pid_t pid, unsigned timeout_ms, unsigned *waited_ms)
{
	uint64_t t0 = gs_now(), deadline = t0 + (uint64_t)timeout_ms * MS;
	int st = 0;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			st = -2;
			break;
		}
		if (gs_now() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			st = -1;
			break;
		}
		gs_sleep_ms(2);
	}
	if (waited_ms)
		*waited_ms = (unsigned)((gs_now() - t0) / MS);
	return st;
}

static inline void gs_forget(pid_t pid)
{
	int i = gs_kid_index(pid);

	if (i >= 0)
		gs_kids[i] = 0;
}

/*
 * Joins a child of the current subtest: 0 if it exited 0, else reports
 * the child's failure (with role naming it) and returns -1.
 */
static inline int gs_join_line(int line, pid_t pid, unsigned timeout_ms,
			       const char *role)
{
	int st = gs_wait(pid, timeout_ms, NULL);
	const char *m = gs_kid_msg(pid);
	int ret = 0;

	if (st == -1) {
		gs_failf(line, "child %s: no exit within %u ms (killed)%s%s",
			 role, timeout_ms, m[0] ? "; " : "", m);
		ret = -1;
	} else if (st < 0) {
		gs_failf(line, "child %s: waitpid failed", role);
		ret = -1;
	} else if (WIFSIGNALED(st)) {
		gs_failf(line, "child %s: killed by signal %d%s%s", role,
			 WTERMSIG(st), m[0] ? "; " : "", m);
		ret = -1;
	} else if (WEXITSTATUS(st) != 0) {
		gs_failf(line, "child %s: %s", role,
			 m[0] ? m : "exited nonzero without a message");
		ret = -1;
	}
	gs_forget(pid);
	return ret;
}
#define gs_join(pid, ms, role) gs_join_line(__LINE__, pid, ms, role)
#define TJOIN(pid, ms, role)						\
	do {								\
		if (gs_join(pid, ms, role) < 0)				\
			return -1;					\
	} while (0)

static inline char gs_proc_state(pid_t pid);

/*
 * Kills and reaps every child still registered; gives up on one after 3 s
 * (a task stuck in the module in D state cannot die: say so, go on).
 */
static inline void gs_kill_kids(void)
{
	for (int i = 0; i < GS_MAXCHILD; i++) {
		if (gs_kids[i] > 0) {
			pid_t pid = gs_kids[i];
			int reaped = 0;

			kill(pid, SIGKILL);
			for (int j = 0; j < 1500 && !reaped; j++) {
				pid_t r = waitpid(pid, NULL, WNOHANG);

				if (r == pid || (r < 0 && errno == ECHILD))
					reaped = 1;
				else
					gs_sleep_ms(2);
			}
			if (!reaped)
				gs_line("GSINFO %s child %d does not die after SIGKILL "
					"(state %c)", gs_prog, pid, gs_proc_state(pid));
			gs_kids[i] = 0;
		}
	}
}

/* The state letter of /proc/<pid>/stat ('?' on error). */
static inline char gs_proc_state(pid_t pid)
{
	char path[64], buf[512];
	int fd;
	ssize_t n;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = 0;
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return '?';
	return p[2];
}

/* ------------------------------------------------------------------ */
/* Files */

/* Reads a whole (small) file into buf; length or -1. */
static inline ssize_t gs_read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t off = 0;

	if (fd < 0)
		return -1;
	while (off + 1 < len) {
		ssize_t n = read(fd, buf + off, len - 1 - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			close(fd);
			errno = e;
			return -1;
		}
		if (n == 0)
			break;
		off += (size_t)n;
	}
	close(fd);
	buf[off] = 0;
	return (ssize_t)off;
}

/*
 * /proc/gpuslice/<name> as rows of whitespace-separated columns; the
 * header (first line) names them. gs_tab_col finds a column by name.
 */
#define GS_TAB_ROWS	160
#define GS_TAB_COLS	20
struct gs_tab {
	char buf[32768];
	int ncols;
	char *col[GS_TAB_COLS];			/* header names */
	int nrows;
	int rowcols[GS_TAB_ROWS];
	char *cell[GS_TAB_ROWS][GS_TAB_COLS];
};

static inline int gs_tab_split(char *line, char **out, int max)
{
	int n = 0;
	char *save = NULL;

	for (char *t = strtok_r(line, " \t", &save); t && n < max;
	     t = strtok_r(NULL, " \t", &save))
		out[n++] = t;
	return n;
}

/* 0, or -1 with errno. Lines of a header starting with '#' are tolerated. */
static inline int gs_tab_read(const char *name, struct gs_tab *t)
{
	char path[128];
	char *save = NULL, *line;
	int first = 1;

	snprintf(path, sizeof(path), "/proc/gpuslice/%s", name);
	memset(t, 0, sizeof(*t));
	if (gs_read_file(path, t->buf, sizeof(t->buf)) < 0)
		return -1;
	for (line = strtok_r(t->buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (first) {
			if (line[0] == '#')
				line++;
			t->ncols = gs_tab_split(line, t->col, GS_TAB_COLS);
			first = 0;
			continue;
		}
		if (t->nrows >= GS_TAB_ROWS)
			break;
		t->rowcols[t->nrows] =
			gs_tab_split(line, t->cell[t->nrows], GS_TAB_COLS);
		if (t->rowcols[t->nrows] > 0)
			t->nrows++;
	}
	return 0;
}

static inline int gs_tab_col(const struct gs_tab *t, const char *name)
{
	for (int i = 0; i < t->ncols; i++)
		if (!strcmp(t->col[i], name))
			return i;
	return -1;
}

/* The cell (row r, column named name), or NULL. */
static inline const char *gs_tab_get(const struct gs_tab *t, int r,
				     const char *name)
{
	int c = gs_tab_col(t, name);

	if (c < 0 || r < 0 || r >= t->nrows || c >= t->rowcols[r])
		return NULL;
	return t->cell[r][c];
}

/* The cell as a string, "" when missing. */
static inline const char *gs_tab_str(const struct gs_tab *t, int r,
				     const char *name)
{
	const char *s = gs_tab_get(t, r, name);

	return s ? s : "";
}

/* The first row whose columns k1 (and k2 if non-NULL) equal v1 (v2). */
static inline int gs_tab_find(const struct gs_tab *t, const char *k1,
			      const char *v1, const char *k2, const char *v2)
{
	for (int r = 0; r < t->nrows; r++) {
		const char *a = gs_tab_get(t, r, k1);
		const char *b = k2 ? gs_tab_get(t, r, k2) : NULL;

		if (a && !strcmp(a, v1) && (!k2 || (b && !strcmp(b, v2))))
			return r;
	}
	return -1;
}

static inline unsigned long long gs_tab_u64(const struct gs_tab *t, int r,
					    const char *name, int *ok)
{
	const char *s = gs_tab_get(t, r, name);
	char *end;
	unsigned long long v;

	if (!s) {
		*ok = 0;
		return 0;
	}
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || end == s)
		*ok = 0;
	return v;
}

/* ------------------------------------------------------------------ */
/* Kernel log: new splats since the program started fail "kernel_log". */

static const char *const gs_splats[] = {
	"BUG:", "WARNING:", "Oops", "general protection", "UBSAN:",
	"KASAN:", "refcount_t:", "list_add corruption", "list_del corruption",
	"kernel BUG", "scheduling while atomic", "sleeping function called",
	"unable to handle", "Unable to handle", "double free", "stack-protector",
	"use-after-free", "NULL pointer dereference", "lockdep",
	"possible circular locking", "Modules linked in",
};

static inline void gs_kmsg_open(void)
{
	gs_kmsg_fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (gs_kmsg_fd >= 0)
		lseek(gs_kmsg_fd, 0, SEEK_END);
}

/* Reads the new records: 0 clean, -1 (first bad line in bad) otherwise. */
static inline int gs_kmsg_check(char *bad, size_t len)
{
	char rec[8192];
	int found = 0;

	if (gs_kmsg_fd < 0)
		return 0;
	for (;;) {
		ssize_t n = read(gs_kmsg_fd, rec, sizeof(rec) - 1);
		char *msg;

		if (n < 0 && errno == EPIPE)
			continue;	/* overwritten records: go on */
		if (n <= 0)
			break;
		rec[n] = 0;
		msg = strchr(rec, ';');
		msg = msg ? msg + 1 : rec;
		for (size_t i = 0; i < sizeof(gs_splats) / sizeof(gs_splats[0]); i++) {
			if (strstr(msg, gs_splats[i]) && !found) {
				char *nl = strchr(msg, '\n');

				if (nl)
					*nl = 0;
				size_t l = strlen(msg);

				if (l >= len)
					l = len - 1;
				memcpy(bad, msg, l);
				bad[l] = 0;
				found = 1;
			}
		}
	}
	return found ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* Cleanup, watchdog, init and finish */

/* Destroys every vGPU on every card; returns how many it destroyed. */
static inline int gs_destroy_all(int fd)
{
	int n = 0;

	if (fd < 0)
		return 0;
	for (uint32_t card = 0; card < GPUSLICE_MAX_CARDS; card++) {
		struct gpuslice_card c;

		if (gs_card_get(fd, card, &c) < 0 || c.nvgpus == 0)
			continue;
		for (uint32_t id = 0; id < GPUSLICE_MAX_VGPUS; id++)
			if (gs_vgpu_destroy(fd, card, id) == 0)
				n++;
	}
	return n;
}

static void (*gs_cleanup_hook)(void);

static inline void gs_cleanup(void)
{
	gs_kill_kids();
	if (gs_cleanup_hook)
		gs_cleanup_hook();
	if (gs_fd < 0)
		gs_fd = gs_open();
	gs_destroy_all(gs_fd);
	gs_cg_cleanup();
}

static inline void gs_watchdog(int sig)
{
	(void)sig;
	gs_line("GSTEST %s FAIL %s: watchdog: program still running after %u s",
		gs_prog, gs_sub, gs_watchdog_s);
	gs_cleanup();
	_exit(1);
}

/*
 * Runs one subtest; kills its leftover children. fn returns 0 (pass
 * unless a check failed), -1 (failed) or 1 (skipped: a GSINFO line only).
 */
static inline void gs_run(const char *name, int (*fn)(void))
{
	int r;

	gs_sub = name;
	gs_sub_failed = 0;
	r = fn();
	gs_kill_kids();
	if (r == 1 && !gs_sub_failed) {
		/* skipped: not a test result */
		gs_line("GSINFO %s skip %s", gs_prog, name);
	} else if (r == 0 && !gs_sub_failed) {
		gs_line("GSTEST %s PASS %s", gs_prog, name);
		gs_npass++;
	} else if (!gs_sub_failed) {
		gs_line("GSTEST %s FAIL %s: failed (no detail)", gs_prog, name);
		gs_nfail++;
	}
	gs_sub = "between subtests";
}

/*
 * Starts a program: the watchdog, shared memory, the admin file, the
 * kernel log position; removes what a previous program may have left.
 */
static inline void gs_init(const char *prog, unsigned watchdog_s)
{
	struct sigaction sa;
	int n;

	gs_prog = prog;
	gs_watchdog_s = watchdog_s;
	signal(SIGPIPE, SIG_IGN);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = gs_watchdog;
	sigaction(SIGALRM, &sa, NULL);
	alarm(watchdog_s);
	gs_sh = gs_shm(sizeof(*gs_sh));
	gs_kmsg_open();
	gs_fd = gs_open();
	if (gs_fd < 0) {
		gs_line("GSTEST %s FAIL open: %s: %s", prog, GPUSLICE_DEVICE,
			gs_errname(errno));
		exit(1);
	}
	n = gs_destroy_all(gs_fd);
	if (n)
		gs_info("%s removed %d vGPUs left by an earlier program", prog, n);
}

/* Ends a program: cleanup, the clean-state and kernel-log checks. */
static inline int gs_check_clean(void)
{
	for (uint32_t card = 0; card < GPUSLICE_MAX_CARDS; card++) {
		struct gpuslice_card c;

		if (gs_card_get(gs_fd, card, &c) < 0)
			continue;
		T(c.nvgpus == 0, "card %u still has %u vGPUs", card, c.nvgpus);
		T(c.mode == GPUSLICE_MODE_NONE, "card %u mode %u with no vGPU",
		  card, c.mode);
	}
	T(!gs_cg_left[0], "cgroup %s could not be removed (still busy?)",
	  gs_cg_left);
	{
		static struct gs_tab t;

		T(gs_tab_read("procs", &t) == 0, "/proc/gpuslice/procs: %s",
		  gs_errname(errno));
		T(t.nrows == 0, "/proc/gpuslice/procs lists %d files after every "
		  "client of this program exited (first: pid %s)", t.nrows,
		  gs_tab_str(&t, 0, "pid"));
	}
	return 0;
}

static inline int gs_check_kmsg(void)
{
	char bad[512];

	if (gs_kmsg_check(bad, sizeof(bad)) < 0)
		T(0, "kernel log: %s", bad);
	return 0;
}

static inline int gs_finish(void)
{
	gs_cleanup();
	gs_run("clean_exit", gs_check_clean);
	gs_run("kernel_log", gs_check_kmsg);
	alarm(0);
	gs_info("%s done: %d passed, %d failed", gs_prog, gs_npass, gs_nfail);
	return gs_nfail ? 1 : 0;
}

#endif /* GSTEST_H */
