/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * shim: the interposer (libgpuslice.so) in module mode, end to end. CUDA
 * programs (gstest, dynamically linked, on the simulated driver) run under
 * LD_PRELOAD in a cgroup bound to a vGPU: the kernel's cap is what CUDA
 * sees and enforces, their bytes are in the kernel's ledger, and a kill -9
 * gives them back; the bytes the agent found unseen count against the cap.
 * run.sh packs the shim, the simulator and gstest under
 * /shim.
 */
#include "gstest.h"

#define P "shim"
#define CAP (64ULL << 20)	/* the kernel's cap */
#define ENV_CAP "1024"		/* what the environment claims, MiB */
#define CTX (4ULL << 20)	/* GPUSLICE_CONTEXT_MIB = SIMCUDA_CONTEXT_MIB */

static int vid;

struct cmd {
	const char *cg;		/* cgroup to run in */
	const char *argv[6];	/* gstest's arguments */
	const char *enforce;	/* GPUSLICE_ENFORCE, NULL: unset (auto) */
	char out[16384];	/* stdout and stderr */
	int status;
};

static void exec_gstest(const struct cmd *c)
{
	char enforce[64];
	const char *argv[8] = { "/shim/bin/gstest" };
	const char *envp[] = {
		"PATH=/bin:/sbin", "LD_PRELOAD=/shim/lib/libgpuslice.so",
		"LD_LIBRARY_PATH=/shim/lib", "GPU_IDX=0",
		"GPU_CONTAINER_MEM=" ENV_CAP, "GPUSLICE_CONTEXT_MIB=4",
		"GPUSLICE_LOG_LEVEL=info", "SIMCUDA_CONTEXT_MIB=4",
		"SIMCUDA_STATE=/tmp/shim-sim.state", "SIMCUDA_MEM_MIB=2048",
		enforce, NULL,
	};

	snprintf(enforce, sizeof(enforce), "GPUSLICE_ENFORCE=%s",
		 c->enforce ? c->enforce : "auto");
	for (int i = 0; i < 6 && c->argv[i]; i++)
		argv[i + 1] = c->argv[i];
	if (gs_cg_enter(c->cg) < 0)
		_exit(120);
	execve(argv[0], (char **)argv, (char **)envp);
	_exit(121);
}

/* Starts gstest; *out reads its output, *in is its stdin. */
static pid_t start(const struct cmd *c, int *out, int *in)
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
		exec_gstest(c);
	}
	close(po[1]);
	close(pi[0]);
	*out = po[0];
	*in = pi[1];
	return pid;
}

/* Reads from fd into c->out until EOF or until it holds want. */
static int read_until(int fd, struct cmd *c, const char *want)
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
static int run(struct cmd *c)
{
	int out, in, st;
	pid_t pid = start(c, &out, &in);

	if (pid < 0)
		return -1;
	close(in);
	read_until(out, c, NULL);
	close(out);
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	c->status = WEXITSTATUS(st);
	return c->status;
}

/* The value of "key=" in gstest's key=value output, or ~0. */
static uint64_t kv(const struct cmd *c, const char *key)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof(k), "\n%s=", key);
	p = strstr(c->out, k);
	return p ? strtoull(p + strlen(k), NULL, 10) : ~0ULL;
}

static int vgpu_usage(uint64_t *used, uint32_t *nprocs)
{
	struct gpuslice_vgpu_stats s;

	if (gs_vgpu_stats(gs_fd, 0, vid, &s) < 0)
		return -1;
	*used = s.mem_used;
	*nprocs = s.nprocs;
	return 0;
}

static int t_kernel_cap_wins(void)
{
	struct cmd c = { .cg = "gsshim", .argv = { "meminfo" } };

	T(run(&c) == 0, "gstest meminfo: status %d:\n%s", c.status, c.out);
	TEQ(kv(&c, "device.0.total"), CAP);
	TEQ(kv(&c, "cuda.total"), CAP);
	T(strstr(c.out, "cap of 64 MiB applies"),
	  "no line saying the kernel's cap applies:\n%s", c.out);
	return 0;
}

static int t_cap_exact(void)
{
	static const char *const paths[] = { "alloc", "async", "vmm" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		struct cmd c = { .cg = "gsshim", .argv = { "cap", paths[i] },
				 .enforce = "module" };

		T(run(&c) == 0, "gstest cap %s: status %d:\n%s", paths[i],
		  c.status, c.out);
	}
	return 0;
}

static int t_fork(void)
{
	struct cmd c = { .cg = "gsshim", .argv = { "fork" } };

	T(run(&c) == 0, "gstest fork: status %d:\n%s", c.status, c.out);
	return 0;
}

/* A holder's bytes are the kernel's; a neighbour is held to what is left. */
static int t_shared_cap_and_sigkill(void)
{
	struct cmd h = { .cg = "gsshim", .argv = { "hold", "40M" } };
	struct cmd n = { .cg = "gsshim", .argv = { "alloc", "24M" } };
	struct cmd n2 = { .cg = "gsshim", .argv = { "alloc", "16M" } };
	uint64_t used = 0;
	uint32_t nprocs = 0;
	int out, in, st;
	pid_t pid;

	pid = start(&h, &out, &in);
	T(pid > 0, "fork");
	if (read_until(out, &h, "ready") < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		T(0, "gstest hold 40M never got ready:\n%s", h.out);
	}
	TOK(vgpu_usage(&used, &nprocs));
	TEQ(used, (40ULL << 20) + CTX);
	TEQ(nprocs, 1);
	/* 44 MiB held: 24 + 4 more do not fit in 64, 16 + 4 do. */
	T(run(&n) == 2, "gstest alloc 24M next to 44 MiB: status %d:\n%s",
	  n.status, n.out);
	T(run(&n2) == 0, "gstest alloc 16M next to 44 MiB: status %d:\n%s",
	  n2.status, n2.out);
	TOK(kill(pid, SIGKILL));
	TOK(waitpid(pid, &st, 0));
	close(out);
	close(in);
	T(WIFSIGNALED(st), "hold: status %#x", st);
	TOK(vgpu_usage(&used, &nprocs));
	TEQ(used, 0);
	TEQ(nprocs, 0);
	return 0;
}

static int t_no_vgpu_refused(void)
{
	struct cmd c = { .cg = "gsshimnone", .argv = { "alloc", "1M" } };

	T(run(&c) == 2, "gstest alloc outside any vGPU: status %d:\n%s",
	  c.status, c.out);
	T(strstr(c.out, "has no vGPU on card 0"),
	  "no line naming the missing vGPU:\n%s", c.out);
	return 0;
}

/*
 * Bytes the driver holds that the shim never saw, as the agent sets them:
 * CUDA's free memory leaves them out and the next allocation past the cap
 * with them counted is refused; without them the same allocation fits.
 */
static int t_unseen(void)
{
	const uint64_t unseen = 16ULL << 20;
	struct cmd m = { .cg = "gsshim", .argv = { "meminfo" } };
	struct cmd fits = { .cg = "gsshim", .argv = { "alloc", "44M" } };
	struct cmd over = { .cg = "gsshim", .argv = { "alloc", "45M" } };
	struct cmd again = { .cg = "gsshim", .argv = { "alloc", "45M" } };

	TOK(gs_vgpu_set_unseen(gs_fd, 0, (uint32_t)vid, unseen));
	T(run(&m) == 0, "gstest meminfo: status %d:\n%s", m.status, m.out);
	TEQ(kv(&m, "cuda.free"), CAP - CTX - unseen);
	T(run(&fits) == 0, "gstest alloc 44M next to 16 MiB unseen: status %d:\n%s",
	  fits.status, fits.out);
	T(run(&over) == 2, "gstest alloc 45M next to 16 MiB unseen: status %d:\n%s",
	  over.status, over.out);
	TOK(gs_vgpu_set_unseen(gs_fd, 0, (uint32_t)vid, 0));
	T(run(&again) == 0, "gstest alloc 45M with nothing unseen: status %d:\n%s",
	  again.status, again.out);
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	if (!gs_cg_create("gsshim") || !gs_cg_create("gsshimnone") ||
	    gs_card_set(gs_fd, 0, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    (vid = gs_vgpu_create(gs_fd, 0, gs_cg_id("gsshim"), CAP, 0, 0,
				  GPUSLICE_MODE_MEMORY)) < 0) {
		gs_line("GSTEST " P " FAIL setup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("kernel_cap_wins", t_kernel_cap_wins);
	gs_run("cap_exact", t_cap_exact);
	gs_run("fork", t_fork);
	gs_run("shared_cap_and_sigkill", t_shared_cap_and_sigkill);
	gs_run("no_vgpu_refused", t_no_vgpu_refused);
	gs_run("unseen", t_unseen);
	return gs_finish();
}
