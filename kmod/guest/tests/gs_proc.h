/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * gs_proc.h: processes and the system around them for the guest test
 * programs: cgroups (created, entered, removed at the end), shared memory,
 * forked children (gs_spawn, gs_wait, gs_join, gs_kill_kids), the state of
 * a task, small files and the tables of /proc/gpuslice.
 *
 * Part of gstest.h, which includes it: programs include gstest.h only.
 */
#ifndef GS_PROC_H
#define GS_PROC_H

#ifndef GSTEST_H
#error "gs_proc.h is part of gstest.h: include gstest.h instead"
#endif


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

#endif /* GS_PROC_H */
