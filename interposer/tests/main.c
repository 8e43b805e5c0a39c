// SPDX-License-Identifier: Apache-2.0
/*
 * gstest: end-to-end checks of the gpuslice shim through the CUDA driver
 * API, one subcommand per area. Run it with LD_PRELOAD=libgpuslice.so and
 * the container's GPU_IDX / GPU_CONTAINER_MEM; the Go tests in
 * interposer/ drive it against the simulated driver.
 */
#include <stdio.h>
#include <string.h>

#include "common.h"

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;
} cmds[] = {
	{ "cap", cmd_cap, "cap <path> [device]: fill the vGPU exactly through one allocation path, one more unit is refused, frees give it all back; paths: alloc pitch async async_ptsz pool pool_ptsz vmm array array3d mipmap context" },
	{ "pools", cmd_pools, "pools host <create|numa|default|default_numa|current> | managed <create|default|current|set|alloc> | rules: CUDA 13 pools: host memory is never charged, managed memory is refused on every path (alloc: a pool made behind the shim, GSTEST_UNSEEN_POOLS), the simulated driver keeps NVIDIA's documented rules; the device kinds are cap paths pool_default pool_current pool_xdev" },
	{ "meminfo", cmd_meminfo, "meminfo [device] [bytes]: optionally cuMemAlloc bytes, then print what CUDA and NVML report (key=value)" },
	{ "nvmlinfo", cmd_nvmlinfo, "nvmlinfo: print NVML's memory view of every device without touching CUDA (key=value)" },
	{ "devices", cmd_devices, "devices [alloc=<MiB>,...] [launch=<device>] [hold]: each device's identity and memory as CUDA and NVML see it, after allocating on (and launching on) the devices named; see devices.c" },
	{ "managed", cmd_managed, "managed: cuMemAllocManaged must be CUDA_ERROR_NOT_SUPPORTED, from several threads" },
	{ "alloc", cmd_alloc, "alloc <bytes> [device]: one cuMemAlloc; exit 0 when it succeeds, 2 when refused with CUDA_ERROR_OUT_OF_MEMORY" },
	{ "hold", cmd_hold, "hold <bytes> [device]: allocate, print ready, sleep until killed (exit 2 when refused)" },
	{ "procaddr", cmd_procaddr, "procaddr [fill-bytes]: entry points from cuGetProcAddress/_v2 land in the shim: with the vGPU filled, each allocator refuses" },
	{ "storm", cmd_storm, "storm <threads> <seconds> <seed> [max=<bytes>] [only=<path,...>] [linger] [solo]: random allocations and frees on every path" },
	{ "fork", cmd_fork, "fork [early]: a forked child owns none of the parent's charges; fork while threads allocate (early: fork after cuInit alone, the child exits holding 2 MiB; prints early.free, early.total as the parent then sees them)" },
	{ "module", cmd_module, "module <loader> [dlsym|procaddr]: a loaded image's charge holds the cap exactly and goes at unload and with its context; loaders: data dataex fatbinary file library libfile" },
	{ "unseen", cmd_unseen, "unseen <global-bytes> [stack-bytes]: load a module whose .global array the shim cannot see (and launch a kernel whose stack frame makes the driver grow CU_LIMIT_STACK_SIZE), print ready, then cuMemAlloc each size read from stdin and print the result" },
	{ "libgate", cmd_libgate, "libgate: a library loaded before any context (charged nothing) has a kernel launched in the primary context; prints load.rc, launch.rc" },
	{ "edge", cmd_edge, "edge <case> [bytes]: one corner of the accounting; cases: freeasync_linear pooldestroy addrfree pending_free ctxreuse fork_managed, crossdev <bytes>" },
	{ "limit", cmd_limit, "limit: context limits that take device memory (malloc heap, stack) are held to the cap and given back" },
	{ "tenant", cmd_tenant, "tenant <seconds> <kernel_us> <depth> [streams] [go] [hold] [gap=<us>] [iters_per_us=<rate>] [iv=<ms>]: launch kernels of kernel_us back to back, depth in flight, for seconds (go: print ready, start on a line of stdin; gap: one at a time, gap_us apart, latencies recorded; iters_per_us: a real GPU's loop iterations per microsecond, benchmarks/realgpu; iv: its engine time per interval of ms, iv_busy_ns); prints launches, kernels, busy_ns (its engine time), wall_ns, kernel_ns, kernel_param, kernels_done, work_ns" },
	{ "capture", cmd_capture, "capture <graphs> <modes> <replay_seconds> [kernel_us] [launchers] [go]: capture graphs (modes: comma list of global, thread_local, relaxed) while other threads launch, then replay them; prints captures_ok, captures_failed, replays, replay_wall_ns, replay_busy_ns" },
	{ "hostwait", cmd_hostwait, "hostwait <rounds> <kernel_us>: a host function waits for a thread that launches after the slice's end; prints deadlocks, b_launch_max_ns" },
	{ "graphmem", cmd_graphmem, "graphmem: graph memory charged at first launch or upload, held to the cap, cached after the graph goes, back at trim" },
	{ "ctxfoot", cmd_ctxfoot, "ctxfoot [device]: NVML's device memory in use before cuInit, the primary context's footprint and a loaded module's (run without the shim, on an idle card)" },
	{ "procall", cmd_procall, "procall: every wrapped entry point of the driver's version table comes back from cuGetProcAddress/_v2 as the shim's wrapper" },
	{ "paths", cmd_paths, "paths <via> <seconds> <kernel_us> <depth> [dev]: launch by one path (kernel launch grid gridasync ctxless otherdev graph graphother); prints launches, wall_ns, busy_ns" },
	{ "order", cmd_order, "order: the simulated engine's order between streams: a stream's tail queued within a timeslice runs before a later kernel of another stream, a deeper queue takes turns with it; prints rounds, tail_first, deep_turns (run without the shim)" },
	{ "schedinfo", cmd_schedinfo, "schedinfo <file>: the vGPUs of a no-module schedule file (key=value lines)" },
	{ "span", cmd_span, "span <first> <end> <done> <waited>: the busy span the shim's fence reports for work launched at first in a slice ending at end, found complete at done (src/gate_span.h); prints span_ns" },
	{ "wrap", cmd_wrap, "wrap <bytes>: with libgswrap.so preloaded, malloc and puts reach libc through its wrappers, then one cuMemAlloc of bytes (prints wrap.*, next.*, alloc.rc)" },
	{ "scope", cmd_scope, "scope <libgswrap.so>: dlsym(RTLD_DEFAULT) from a library loaded RTLD_LOCAL searches that library's scope (prints default.found)" },
	{ "devopen", cmd_devopen, "devopen <how> <path|-> [creat|tmpfile]: one open by one of libc's calls (open open64 openat openat64 __open_2 __open64_2 __openat_2 __openat64_2) of path ('-': NULL), O_RDWR, or creating a file (mode 0640) or an O_TMPFILE in the directory path (0600), errno set to EXDEV before; prints ok, errno, mode" },
	{ "watch", cmd_watch, "watch <interval-ms> [device]: print the device's physical used bytes (simcuda) until stdin closes" },
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static int usage(void)
{
	fprintf(stderr, "usage: gstest <command> [args]\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(stderr, "  %s\n", cmds[i].usage);
	return 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return usage();
	for (size_t i = 0; i < NCMDS; i++) {
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 2, argv + 2);
	}
	fprintf(stderr, "gstest: unknown command %s\n", argv[1]);
	return usage();
}
