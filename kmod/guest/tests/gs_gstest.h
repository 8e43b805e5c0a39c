/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * gs_gstest.h: running the interposer's CUDA test program (gstest, on the
 * simulated driver under LD_PRELOAD=libgpuslice.so, as run.sh packs them
 * under /shim) in a cgroup, for the guest programs that test the shim in
 * module mode (shim.c, graphs.c). Include after gstest.h.
 */
#ifndef GS_GSTEST_H
#define GS_GSTEST_H

struct gs_cmd {
	const char *cg;		/* cgroup to run in */
	const char *argv[8];	/* gstest's arguments */
	const char *enforce;	/* GPUSLICE_ENFORCE, NULL: unset (auto) */
	const char *env;	/* one NAME=value more, or NULL */
	char out[16384];	/* stdout and stderr */
	int status;
};

/* GPU_CONTAINER_MEM the environment claims (the kernel's cap rules). */
#define GS_ENV_CAP "1024"

static inline void gs_exec_gstest(const struct gs_cmd *c)
{
	char enforce[64];
	const char *argv[10] = { "/shim/bin/gstest" };
	const char *envp[] = {
		"PATH=/bin:/sbin", "LD_PRELOAD=/shim/lib/libgpuslice.so",
		"LD_LIBRARY_PATH=/shim/lib", "GPU_IDX=0",
		"GPU_CONTAINER_MEM=" GS_ENV_CAP, "GPUSLICE_CONTEXT_MIB=4",
		"GPUSLICE_LOG_LEVEL=info", "SIMCUDA_CONTEXT_MIB=4",
		"SIMCUDA_STATE=/tmp/shim-sim.state", "SIMCUDA_MEM_MIB=2048",
		enforce, c->env, NULL,
	};

	snprintf(enforce, sizeof(enforce), "GPUSLICE_ENFORCE=%s",
		 c->enforce ? c->enforce : "auto");
	for (int i = 0; i < 8 && c->argv[i]; i++)
		argv[i + 1] = c->argv[i];
	if (gs_cg_enter(c->cg) < 0)
		_exit(120);
	execve(argv[0], (char **)argv, (char **)envp);
	_exit(121);
}

/* Starts gstest; *out reads its output, *in is its stdin. */
static inline pid_t gs_gstest_start(const struct gs_cmd *c, int *out,
				    int *in)
{
	int po[2], pi[2];
	pid_t pid;

	if (pipe(po) < 0 || pipe(pi) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(pi[0], 0);
		dup2(po[1], 1);
		dup2(po[1], 2);
		close(po[0]);
		close(pi[1]);
		gs_exec_gstest(c);
	}
	close(po[1]);
	close(pi[0]);
	*out = po[0];
	*in = pi[1];
	return pid;
}

/* Reads from fd into c->out until EOF or until it holds want. */
static inline int gs_gstest_read_until(int fd, struct gs_cmd *c,
				       const char *want)
{
	size_t n = strlen(c->out);
	ssize_t r;

	while (n + 1 < sizeof(c->out)) {
		if (want && strstr(c->out, want))
			return 0;
		r = read(fd, c->out + n, sizeof(c->out) - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		c->out[n] = 0;
	}
	return want && !strstr(c->out, want) ? -1 : 0;
}

/* Runs gstest to its end: its exit code, or -1. */
static inline int gs_gstest_run(struct gs_cmd *c)
{
	int out, in, st;
	pid_t pid = gs_gstest_start(c, &out, &in);

	if (pid < 0)
		return -1;
	close(in);
	gs_gstest_read_until(out, c, NULL);
	close(out);
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	c->status = WEXITSTATUS(st);
	return c->status;
}

/* The value of "key=" in gstest's key=value output, or ~0. */
static inline uint64_t gs_gstest_kv(const struct gs_cmd *c, const char *key)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof(k), "\n%s=", key);
	p = strstr(c->out, k);
	return p ? strtoull(p + strlen(k), NULL, 10) : ~0ULL;
}

#endif /* GS_GSTEST_H */
