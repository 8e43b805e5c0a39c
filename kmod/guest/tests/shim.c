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

#include "gs_gstest.h"

#define P "shim"
#define CAP (64ULL << 20)	/* the kernel's cap */
#define CTX (4ULL << 20)	/* GPUSLICE_CONTEXT_MIB = SIMCUDA_CONTEXT_MIB */

static int vid;

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
	struct gs_cmd c = { .cg = "gsshim", .argv = { "meminfo" } };

	T(gs_gstest_run(&c) == 0, "gstest meminfo: status %d:\n%s", c.status, c.out);
	TEQ(gs_gstest_kv(&c, "device.0.total"), CAP);
	TEQ(gs_gstest_kv(&c, "cuda.total"), CAP);
	T(strstr(c.out, "cap of 64 MiB applies"),
	  "no line saying the kernel's cap applies:\n%s", c.out);
	return 0;
}

static int t_cap_exact(void)
{
	static const char *const paths[] = { "alloc", "async", "vmm" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		struct gs_cmd c = { .cg = "gsshim", .argv = { "cap", paths[i] },
				 .enforce = "module" };

		T(gs_gstest_run(&c) == 0, "gstest cap %s: status %d:\n%s", paths[i],
		  c.status, c.out);
	}
	return 0;
}

static int t_fork(void)
{
	struct gs_cmd c = { .cg = "gsshim", .argv = { "fork" } };

	T(gs_gstest_run(&c) == 0, "gstest fork: status %d:\n%s", c.status, c.out);
	return 0;
}

/* A holder's bytes are the kernel's; a neighbour is held to what is left. */
static int t_shared_cap_and_sigkill(void)
{
	struct gs_cmd h = { .cg = "gsshim", .argv = { "hold", "40M" } };
	struct gs_cmd n = { .cg = "gsshim", .argv = { "alloc", "24M" } };
	struct gs_cmd n2 = { .cg = "gsshim", .argv = { "alloc", "16M" } };
	uint64_t used = 0;
	uint32_t nprocs = 0;
	int out, in, st;
	pid_t pid;

	pid = gs_gstest_start(&h, &out, &in);
	T(pid > 0, "fork");
	if (gs_gstest_read_until(out, &h, "ready") < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		T(0, "gstest hold 40M never got ready:\n%s", h.out);
	}
	TOK(vgpu_usage(&used, &nprocs));
	TEQ(used, (40ULL << 20) + CTX);
	TEQ(nprocs, 1);
	/* 44 MiB held: 24 + 4 more do not fit in 64, 16 + 4 do. */
	T(gs_gstest_run(&n) == 2, "gstest alloc 24M next to 44 MiB: status %d:\n%s",
	  n.status, n.out);
	T(gs_gstest_run(&n2) == 0, "gstest alloc 16M next to 44 MiB: status %d:\n%s",
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
	struct gs_cmd c = { .cg = "gsshimnone", .argv = { "alloc", "1M" } };

	T(gs_gstest_run(&c) == 2, "gstest alloc outside any vGPU: status %d:\n%s",
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
	struct gs_cmd m = { .cg = "gsshim", .argv = { "meminfo" } };
	struct gs_cmd fits = { .cg = "gsshim", .argv = { "alloc", "44M" } };
	struct gs_cmd over = { .cg = "gsshim", .argv = { "alloc", "45M" } };
	struct gs_cmd again = { .cg = "gsshim", .argv = { "alloc", "45M" } };

	TOK(gs_vgpu_set_unseen(gs_fd, 0, (uint32_t)vid, unseen));
	T(gs_gstest_run(&m) == 0, "gstest meminfo: status %d:\n%s", m.status, m.out);
	TEQ(gs_gstest_kv(&m, "cuda.free"), CAP - CTX - unseen);
	T(gs_gstest_run(&fits) == 0, "gstest alloc 44M next to 16 MiB unseen: status %d:\n%s",
	  fits.status, fits.out);
	T(gs_gstest_run(&over) == 2, "gstest alloc 45M next to 16 MiB unseen: status %d:\n%s",
	  over.status, over.out);
	TOK(gs_vgpu_set_unseen(gs_fd, 0, (uint32_t)vid, 0));
	T(gs_gstest_run(&again) == 0, "gstest alloc 45M with nothing unseen: status %d:\n%s",
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
