// SPDX-License-Identifier: Apache-2.0
/*
 * gstest tenant <seconds> <kernel_us> <depth> [streams] [go] [hold] [gap=<us>]
 * [iters_per_us=<rate>] [iv=<ms>]: a compute
 * tenant. Launches kernels of kernel_us microseconds back to back for the
 * given seconds (on the simulated driver a kernel occupies the device's
 * engine for the duration in kernelParams[0], in ns; on a real GPU the
 * kernel spins for kernelParams[0] loop iterations, and "iters_per_us="
 * turns kernel_us into that count: see the PTX below), keeping at most
 * depth of them in flight (an event behind each launch; the oldest is
 * waited for before the next), spread round robin over streams streams
 * (default 1). With "go" it prints "ready" once its context, module and
 * streams exist and starts when a line arrives on stdin, so that several
 * tenants start together. Zero seconds launches one kernel. With "hold" it
 * prints "held" once done and keeps its context (an idle tenant) until
 * stdin ends. With "gap=<us>" (the latency mode) each kernel is waited for
 * as soon as it is launched, and the next one launched gap_us later: one
 * kernel at a time, whatever depth; the latency of each (from before its
 * launch to the end of its synchronisation) is recorded.
 *
 * Prints key=value: launches, kernels and busy_ns (the engine time of its
 * own kernels, from simcuda's simcudaEngineStats; absent on another
 * driver), wall_ns (from the first launch to the end of the last kernel);
 * in the latency mode also lat_n and lat_p50_ns, lat_p90_ns, lat_p99_ns,
 * lat_max_ns
 * (nearest rank). On every driver, after those: kernel_ns (the requested
 * duration), kernel_param (the value passed: ns, or iterations with
 * iters_per_us), kernels_done (kernels known complete: all launched once
 * the final synchronisation succeeded) and work_ns (kernels_done x
 * kernel_ns, the nominal work), so that a real GPU, which has no engine
 * statistics, still reports what the tenant got done.
 * With "iv=<ms>" (simcuda only) it also prints iv_ns and iv_busy_ns, its
 * engine time in each interval of ms from its start (sampler.c).
 * A refused launch prints launch.rc=<name> and exits 1.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "sampler.h"

#define MAX_DEPTH 256
#define MAX_STREAMS 64

/*
 * The kernel, spin(u64 n), from PTX text so that no CUDA toolkit is needed
 * and the driver's JIT compiles it for whatever card runs it (sm_50 and
 * later). The simulated driver only looks for the entry's name and reads
 * n as the kernel's duration in ns.
 *
 * On a real GPU, n is a count of loop iterations, each a step of a
 * dependent chain (a 32-bit linear congruential generator: every step
 * needs the previous one's result, so the compiler can neither drop nor
 * overlap them), and the chain's end is stored to a module global so that
 * the loop is not dead code. Why iterations and not a spin on %globaltimer
 * until n ns have passed: a timer kernel advances in wall time, also while
 * the GPU time-slices another process's context onto the engine, so two
 * overlapping tenants would both be credited with the overlap and the
 * shares would be double-counted. An iteration only advances while the
 * kernel's context holds the engine: the count is a true measure of the
 * engine time received. Its price is a calibration (iterations per
 * microsecond, measured alone: benchmarks/realgpu/run.sh), passed as
 * iters_per_us=<rate>, which makes the kernel's parameter kernel_us x rate.
 * Without that option the parameter stays kernel_us x 1000 (ns), as the
 * simulator and the Go tests expect. Nothing in the text below may spell
 * the entry directive except the entry itself: the simulator finds
 * entries by that word.
 */
const char spin_ptx[] =
	".version 6.0\n"
	".target sm_50\n"
	".address_size 64\n"
	"\n"
	".visible .global .align 4 .u32 spin_sink;\n"
	"\n"
	".visible .entry spin(\n"
	"\t.param .u64 spin_param_0\n"
	")\n"
	"{\n"
	"\t.reg .pred %p<2>;\n"
	"\t.reg .b32 %r<4>;\n"
	"\t.reg .b64 %rd<4>;\n"
	"\n"
	"\tld.param.u64 %rd1, [spin_param_0];\n"
	"\tmov.u64 %rd2, 0;\n"
	"\tmov.u32 %r1, 1;\n"
	"\tmov.u32 %r2, 1664525;\n"
	"\tmov.u32 %r3, 1013904223;\n"
	"\tsetp.eq.u64 %p1, %rd1, 0;\n"
	"\t@%p1 bra $L_done;\n"
	"$L_loop:\n"
	"\tmad.lo.u32 %r1, %r1, %r2, %r3;\n"
	"\tadd.u64 %rd2, %rd2, 1;\n"
	"\tsetp.lt.u64 %p1, %rd2, %rd1;\n"
	"\t@%p1 bra $L_loop;\n"
	"$L_done:\n"
	"\tst.global.u32 [spin_sink], %r1;\n"
	"\tret;\n"
	"}\n";

/* Parses iters_per_us's value: a finite rate in (0, 1e9]; exits on junk. */
static double parse_rate(const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v <= 0 || v > 1e9)
		dief("iters_per_us: want a number in (0, 1e9], got %s", s);
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The nearest-rank percentile pct of the n sorted values v (n > 0). */
static uint64_t pctl(const uint64_t *v, size_t n, unsigned pct)
{
	size_t rank = (n * pct + 99) / 100;

	return v[rank ? rank - 1 : 0];
}

/* Prints the latencies' count and percentiles (sorts them). */
static void print_latencies(uint64_t *lat, size_t n)
{
	printf("lat_n=%zu\n", n);
	if (!n)
		return;
	qsort(lat, n, sizeof(*lat), cmp_u64);
	printf("lat_p50_ns=%llu\n", (unsigned long long)pctl(lat, n, 50));
	printf("lat_p90_ns=%llu\n", (unsigned long long)pctl(lat, n, 90));
	printf("lat_p99_ns=%llu\n", (unsigned long long)pctl(lat, n, 99));
	printf("lat_max_ns=%llu\n", (unsigned long long)lat[n - 1]);
}

/* Waits for a line on stdin (or its end). */
static void wait_go(void)
{
	char c;

	while (read(STDIN_FILENO, &c, 1) == 1 && c != '\n')
		;
}

int cmd_tenant(int argc, char **argv)
{
	int (*stats)(int, int, uint64_t *, uint64_t *);
	static CUevent ev[MAX_DEPTH];
	static CUstream st[MAX_STREAMS];
	uint64_t ns, kernel_ns, t0, deadline, busy = 0, kernels = 0, done;
	double iters_per_us = 0;	/* 0: the parameter is ns */
	long seconds, kernel_us, depth, nstreams = 1;
	bool go = false, hold = false, latency = false;
	uint64_t *lat = NULL, gap_ns = 0, l0;
	size_t nlat = 0, caplat = 0;
	void *params[] = { &ns };
	unsigned long long launches = 0;
	struct sampler smp;
	uint64_t iv_ns = 0;
	CUmodule mod;
	CUfunction f;
	CUresult rc;
	int preempts = -1;

	for (; argc > 3; argc--) {
		const char *opt = argv[argc - 1];

		if (!strcmp(opt, "hold")) {
			hold = true;
		} else if (!strcmp(opt, "go")) {
			go = true;
		} else if (!strncmp(opt, "iters_per_us=", 13)) {
			iters_per_us = parse_rate(opt + 13);
		} else if (!strncmp(opt, "iv=", 3)) {
			iv_ns = (uint64_t)parse_long(opt + 3, 1, 10000, "iv") *
				1000000;
		} else if (!strncmp(opt, "gap=", 4)) {
			latency = true;
			gap_ns = (uint64_t)parse_long(opt + 4, 0, 10000000,
						      "gap") * 1000;
		} else {
			break;
		}
	}
	if (argc < 3 || argc > 4)
		dief("usage: tenant <seconds> <kernel_us> <depth> [streams] [go] [hold] [gap=<us>] [iters_per_us=<rate>]");
	seconds = parse_long(argv[0], 0, 3600, "seconds");
	kernel_us = parse_long(argv[1], 0, 10000000, "kernel_us");
	depth = parse_long(argv[2], 1, MAX_DEPTH, "depth");
	if (argc > 3)
		nstreams = parse_long(argv[3], 1, MAX_STREAMS, "streams");
	kernel_ns = (uint64_t)kernel_us * 1000;
	ns = kernel_ns;
	if (iters_per_us > 0) {
		/* A real GPU's loop count; at least 1 for a non-empty kernel. */
		ns = (uint64_t)((double)kernel_us * iters_per_us + 0.5);
		if (!ns && kernel_us)
			ns = 1;
	}

	load_cuda();
	NEED(cuModuleLoadData);
	NEED(cuModuleGetFunction);
	NEED(cuLaunchKernel);
	NEED(cuStreamCreate);
	NEED(cuEventCreate);
	NEED(cuEventRecord);
	NEED(cuEventSynchronize);
	NEED(cuCtxSynchronize);
	NEED(cuDeviceGetAttribute);
	stats = (__typeof__(stats))dlsym(cuda_handle(), "simcudaEngineStats");
	open_primary(0);
	/* Whether a kernel longer than a timeslice shares the engine. */
	CHECK(cu.cuDeviceGetAttribute(
		&preempts, CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 0));
	if (!CHECK(cu.cuModuleLoadData(&mod, spin_ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&f, mod, "spin")))
		return finish("tenant");
	for (long i = 0; i < nstreams; i++)
		if (!CHECK(cu.cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING)))
			return finish("tenant");
	for (long i = 0; i < depth; i++)
		if (!CHECK(cu.cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING)))
			return finish("tenant");
	if (go) {
		printf("ready\n");
		fflush(stdout);
		wait_go();
	}
	if (stats && stats(0, (int)getpid(), &busy, &kernels) != 0)
		busy = kernels = 0;	/* nothing run yet: no slot */

	t0 = now_ns();
	deadline = t0 + (uint64_t)seconds * 1000000000ULL;
	if (iv_ns && (!stats || sampler_start(&smp, stats, t0, busy, iv_ns,
					      (uint64_t)seconds)))
		dief("tenant: iv= needs simcudaEngineStats and seconds > 0");
	while (now_ns() < deadline || (!seconds && !launches)) {
		long slot = (long)(launches % (unsigned long long)depth);
		CUstream s = st[launches % (unsigned long long)nstreams];

		if (!latency && launches >= (unsigned long long)depth &&
		    !CHECK(cu.cuEventSynchronize(ev[slot])))
			break;
		l0 = now_ns();
		rc = cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params,
				       NULL);
		if (rc != CUDA_SUCCESS) {
			printf("launch.rc=%s\n", rcname(rc));
			failf("tenant: launch %llu: %s", launches, rcname(rc));
			break;
		}
		launches++;
		if (!CHECK(cu.cuEventRecord(ev[slot], s)))
			break;
		if (latency) {
			struct timespec gap = {
				.tv_sec = (time_t)(gap_ns / 1000000000ULL),
				.tv_nsec = (long)(gap_ns % 1000000000ULL),
			};

			if (!CHECK(cu.cuEventSynchronize(ev[slot])))
				break;
			if (nlat == caplat) {
				uint64_t *grown;

				caplat = caplat ? 2 * caplat : 1024;
				grown = realloc(lat, caplat * sizeof(*lat));
				if (!grown)
					dief("tenant: out of memory");
				lat = grown;
			}
			lat[nlat++] = now_ns() - l0;
			if (gap_ns)
				nanosleep(&gap, NULL);
		}
	}
	/*
	 * Every kernel launched is done once this succeeds; otherwise only
	 * those whose events were waited for (all but the last depth).
	 */
	if (CHECK(cu.cuCtxSynchronize()))
		done = launches;
	else
		done = launches > (unsigned long long)depth ?
			       launches - (unsigned long long)depth : 0;
	printf("launches=%llu\n", launches);
	printf("wall_ns=%llu\n", (unsigned long long)(now_ns() - t0));
	printf("preemption=%d\n", preempts);
	if (stats) {
		uint64_t b0 = busy, k0 = kernels;

		if (stats(0, (int)getpid(), &busy, &kernels) == 0) {
			printf("busy_ns=%llu\n", (unsigned long long)(busy - b0));
			printf("kernels=%llu\n",
			       (unsigned long long)(kernels - k0));
		}
	}
	if (iv_ns)
		sampler_finish(&smp);
	if (latency)
		print_latencies(lat, nlat);
	printf("kernel_ns=%llu\n", (unsigned long long)kernel_ns);
	printf("kernel_param=%llu\n", (unsigned long long)ns);
	printf("kernels_done=%llu\n", (unsigned long long)done);
	printf("work_ns=%llu\n", (unsigned long long)(done * kernel_ns));
	free(lat);
	if (hold) {
		/* An idle tenant: its context stays, it launches no more. */
		printf("held\n");
		fflush(stdout);
		wait_go();
	}
	for (long i = 0; i < depth; i++)
		cu.cuEventDestroy_v2(ev[i]);
	for (long i = 0; i < nstreams; i++)
		cu.cuStreamDestroy_v2(st[i]);
	cu.cuModuleUnload(mod);
	close_primary(0);
	return finish("tenant");
}
