/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * gate: the shim's compute gate in module mode, end to end. Tenants
 * (gstest tenant under LD_PRELOAD=libgpuslice.so, on the simulated driver,
 * all on one simulated engine through one shared state file) launch 2 ms
 * kernels back to back, two in flight, each in the cgroup of its compute
 * vGPU, started together; the engine time each got (simcudaEngineStats)
 * is its share. Expected: policy 4 with 5/5/10 -> 25/25/50, also with
 * kernels of different shapes (the drain); policy 1 with 30/70 -> 30/70,
 * and a lone 30 % tenant no more than about 30 % of wall time; policy 5
 * with 30/0/0 -> 30/35/35; policy 6 with 5/5/10 and the third tenant
 * absent -> 50/50; policy 0 -> ungated: about a third each, no ACQUIRE
 * at all; a vGPU removed under a running tenant -> its next slice's
 * launch fails with CUDA_ERROR_NOT_PERMITTED, never runs ungated; policy 3
 * with two saturating tenants -> the engine as busy as with one alone (no
 * idle engine at the handovers). Slices are 20 ms
 * (qemu TCG is about 10 times slower than a real machine), tolerances +-10
 * points. run.sh packs the shim, the simulator and gstest under /shim.
 */
#include "gstest.h"

#include <poll.h>

#define P "gate"
#define CARD 0
#define SLICE (20 * MS)
#define NT 3
#define SECONDS "3"
#define KERNEL_US "2000"
#define DEPTH "2"
#define CAP (64ULL << 20)
/*
 * Two saturating tenants' engine use over one alone's, at least, and one
 * alone's own (96.6 % on the module of main). The emulated CPU on a
 * loaded host swings both (ratios 0.93-1.08, a lone tenant 50 % once):
 * these catch the card idling through every drain, not the last points,
 * which the host's benchmark and pkg/sched's virtual time measure.
 */
#define ENGINE_RATIO_MIN 0.85
#define ENGINE_ALONE_MIN 0.40

struct tenant {
	const char *cg;
	const char *quota;	/* GPU_CONTAINER_QUOTA_PERCENT, as the agent sets it */
	const char *seconds;
	const char *kernel_us;	/* NULL: KERNEL_US */
	const char *depth;	/* NULL: DEPTH */
	const char *opt;	/* an option more (gap=<us>), or NULL */
	pid_t pid;
	int out, in;
	char buf[16384];
	int status;
};

static void exec_tenant(const struct tenant *t)
{
	char quota[64];
	const char *argv[] = { "/shim/bin/gstest", "tenant", t->seconds,
			       t->kernel_us ? t->kernel_us : KERNEL_US,
			       t->depth ? t->depth : DEPTH, "1", "go", t->opt,
			       NULL };
	const char *envp[] = {
		"PATH=/bin:/sbin", "LD_PRELOAD=/shim/lib/libgpuslice.so",
		"LD_LIBRARY_PATH=/shim/lib", "GPU_IDX=0",
		"GPU_CONTAINER_MEM=1024", quota, "GPUSLICE_ENFORCE=module",
		"GPUSLICE_CONTEXT_MIB=4", "GPUSLICE_LOG_LEVEL=info",
		"SIMCUDA_CONTEXT_MIB=4", "SIMCUDA_STATE=/tmp/gate-sim.state",
		"SIMCUDA_MEM_MIB=2048", NULL,
	};

	snprintf(quota, sizeof(quota), "GPU_CONTAINER_QUOTA_PERCENT=%s",
		 t->quota);
	if (gs_cg_enter(t->cg) < 0)
		_exit(120);
	execve(argv[0], (char **)argv, (char **)envp);
	_exit(121);
}

static int start(struct tenant *t)
{
	int po[2], pi[2];

	t->buf[0] = 0;
	t->status = -1;
	if (pipe(po) < 0 || pipe(pi) < 0)
		return -1;
	t->pid = fork();
	if (t->pid < 0)
		return -1;
	if (t->pid == 0) {
		dup2(pi[0], 0);
		dup2(po[1], 1);
		dup2(po[1], 2);
		close(po[0]);
		close(pi[1]);
		exec_tenant(t);
	}
	close(po[1]);
	close(pi[0]);
	t->out = po[0];
	t->in = pi[1];
	return 0;
}

/* Reads the tenant's output until it holds want (NULL: to EOF). */
static int read_until(struct tenant *t, const char *want)
{
	size_t n = strlen(t->buf);
	ssize_t r;

	while (n + 1 < sizeof(t->buf)) {
		if (want && strstr(t->buf, want))
			return 0;
		r = read(t->out, t->buf + n, sizeof(t->buf) - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
		t->buf[n] = 0;
	}
	return want && !strstr(t->buf, want) ? -1 : 0;
}

/* Reads to EOF and reaps; the exit status or -1. */
static int finish_tenant(struct tenant *t)
{
	int st;

	read_until(t, NULL);
	close(t->out);
	close(t->in);
	if (waitpid(t->pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	t->status = WEXITSTATUS(st);
	return t->status;
}

static void kill_tenants(struct tenant *ts, int n)
{
	for (int i = 0; i < n; i++) {
		if (ts[i].pid > 0 && ts[i].status < 0) {
			kill(ts[i].pid, SIGKILL);
			finish_tenant(&ts[i]);
		}
	}
}

/* The value of "key=" in the tenant's key=value output, or ~0. */
static uint64_t kv(const struct tenant *t, const char *key)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof(k), "\n%s=", key);
	p = strstr(t->buf, k);	/* after "ready" or a log line: one exists */
	return p ? strtoull(p + strlen(k), NULL, 10) : ~0ULL;
}

/*
 * Starts the tenants, lets them go together once all are ready and
 * collects their output. 0, or -1 after a failed check.
 */
static int run_tenants(struct tenant *ts, int n)
{
	for (int i = 0; i < n; i++) {
		if (start(&ts[i]) < 0) {
			kill_tenants(ts, i);
			T(0, "fork: %s", gs_errname(errno));
		}
	}
	for (int i = 0; i < n; i++) {
		if (read_until(&ts[i], "ready") < 0) {
			kill_tenants(ts, n);
			T(0, "tenant %s never got ready:\n%s", ts[i].cg, ts[i].buf);
		}
	}
	for (int i = 0; i < n; i++)
		gs_write_all(ts[i].in, "go\n", 3);
	for (int i = 0; i < n; i++)
		finish_tenant(&ts[i]);
	return 0;
}

static int setup(uint32_t policy, int n, const uint32_t *quota,
		 const char *const *cgs, int *ids)
{
	gs_destroy_all(gs_fd);
	TOK(gs_card_set(gs_fd, CARD, policy, 20, SLICE, 0));
	for (int i = 0; i < n; i++) {
		ids[i] = gs_vgpu_create(gs_fd, CARD, gs_cg_id(cgs[i]), CAP,
					quota[i], 0, GPUSLICE_MODE_COMPUTE);
		T(ids[i] >= 0, "create quota %u: %s", quota[i],
		  gs_errname(errno));
	}
	return 0;
}

static const char *const cgs[NT] = { "gsgA", "gsgB", "gsgC" };

#define OF_WALL		1	/* shares of wall time, not of the total */
#define UNGATED		2	/* policy 0: no ACQUIRE expected */
#define AT_MOST		4	/* only the upper bound: nobody takes more */

/*
 * Runs one tenant per vGPU (quota[i] in cgs[i]), then checks each one's
 * engine share against expect[i] +- tol points.
 */
static int scenario_shaped(const char *tag, uint32_t policy, int nvgpu,
			   const uint32_t *quota, int ntenant,
			   const double *expect, int flags, double tol,
			   const char *const *kernel_us,
			   const char *const *depth);

static int scenario(const char *tag, uint32_t policy, int nvgpu,
		    const uint32_t *quota, int ntenant, const double *expect,
		    int flags, double tol)
{
	return scenario_shaped(tag, policy, nvgpu, quota, ntenant, expect,
			       flags, tol, NULL, NULL);
}

/* As scenario, tenant i launching kernels of kernel_us[i], depth[i] deep. */
static int scenario_shaped(const char *tag, uint32_t policy, int nvgpu,
			   const uint32_t *quota, int ntenant,
			   const double *expect, int flags, double tol,
			   const char *const *kernel_us,
			   const char *const *depth)
{
	struct tenant ts[NT];
	char qs[NT][8];
	int ids[NT];
	double total = 0, wall = 0;

	if (setup(policy, nvgpu, quota, cgs, ids) < 0)
		return -1;
	memset(ts, 0, sizeof(ts));
	for (int i = 0; i < ntenant; i++) {
		snprintf(qs[i], sizeof(qs[i]), "%u", quota[i]);
		ts[i].cg = cgs[i];
		ts[i].quota = qs[i];
		ts[i].seconds = SECONDS;
		ts[i].kernel_us = kernel_us ? kernel_us[i] : NULL;
		ts[i].depth = depth ? depth[i] : NULL;
	}
	if (run_tenants(ts, ntenant) < 0)
		return -1;
	for (int i = 0; i < ntenant; i++) {
		T(ts[i].status == 0, "%s: tenant %s: status %d:\n%s", tag,
		  ts[i].cg, ts[i].status, ts[i].buf);
		T(kv(&ts[i], "busy_ns") != ~0ULL && kv(&ts[i], "wall_ns") != ~0ULL,
		  "%s: tenant %s printed no busy_ns/wall_ns:\n%s", tag, ts[i].cg,
		  ts[i].buf);
		T(strstr(ts[i].buf, flags & UNGATED ?
			 "kernel launches are not gated" :
			 "kernel launches gated by the module's schedule"),
		  "%s: tenant %s: no line saying whether it is gated:\n%s", tag,
		  ts[i].cg, ts[i].buf);
		total += (double)kv(&ts[i], "busy_ns");
		if ((double)kv(&ts[i], "wall_ns") > wall)
			wall = (double)kv(&ts[i], "wall_ns");
	}
	T(total > 0 && wall > 0, "%s: no engine time at all", tag);
	for (int i = 0; i < ntenant; i++) {
		double s = 100.0 * (double)kv(&ts[i], "busy_ns") /
			   (flags & OF_WALL ? wall : total);

		gs_line("GSBENCH " P " %s_%s_share %.1f %%", tag, cgs[i], s);
		gs_info(P " %s %s: quota %s%%, %llu launches, busy %.0f ms of "
			"%.0f ms, share %.1f%% (expected %.0f%%)", tag, cgs[i],
			ts[i].quota, (unsigned long long)kv(&ts[i], "launches"),
			(double)kv(&ts[i], "busy_ns") / 1e6,
			(double)kv(&ts[i], "wall_ns") / 1e6, s, expect[i]);
	}
	gs_line("GSBENCH " P " %s_engine_busy %.1f %%", tag, 100.0 * total / wall);
	for (int i = 0; i < ntenant; i++) {
		double s = 100.0 * (double)kv(&ts[i], "busy_ns") /
			   (flags & OF_WALL ? wall : total);

		T((flags & AT_MOST || s > expect[i] - tol) && s < expect[i] + tol,
		  "%s: tenant %s (quota %s%%) got %.1f%% of the engine, expected "
		  "%.0f%% +- %.0f", tag, cgs[i], ts[i].quota, s, expect[i], tol);
	}
	/* The kernel saw the gate at work (or, ungated, never asked). */
	for (int i = 0; i < ntenant; i++) {
		struct gpuslice_vgpu_stats st;

		TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)ids[i], &st));
		gs_info(P " %s %s: %llu acquires, %llu slices, busy %.0f ms "
			"reported, wait %.0f ms", tag, cgs[i],
			(unsigned long long)st.acquires,
			(unsigned long long)st.slices, (double)st.busy_ns / 1e6,
			(double)st.wait_ns / 1e6);
		if (flags & UNGATED) {
			TEQ(st.acquires, 0);
			TEQ(st.busy_ns, 0);
		} else {
			T(st.acquires > 0, "%s: %s: no ACQUIRE", tag, cgs[i]);
			T(st.busy_ns > 0, "%s: %s: no busy time reported", tag,
			  cgs[i]);
		}
		TEQ(st.nprocs, 0);
	}
	return 0;
}

static int t_weighted(void)
{
	static const uint32_t q[NT] = { 5, 5, 10 };
	static const double e[NT] = { 25, 25, 50 };

	return scenario("p4", GPUSLICE_POLICY_WEIGHTED, 3, q, 3, e, 0, 10);
}

/*
 * Kernels of different shapes: the 25 % tenant's are twice a slice long
 * (they cannot be cut) and 8 deep (320 ms in flight, past the drain's
 * 100 ms bound: the launch budget holds it), the others' short, one of
 * them 8 deep. Without the drain the long kernels run on through the
 * neighbours' slices: two deep, the 25 % tenant took 74 % of wall time
 * (74.7/8.5/16.8 of the engine). Checked:
 * nobody gets more than its share of wall time + 6. The long tenant's
 * drains are closed (its neighbours wait for its tail, which it is
 * charged in full, kmod/core/README.md "Draining"): 25.7-28.1/19.5-21.0/
 * 46.8-49.1 % in three runs. With every drain open (the early handover
 * alone) its tail shared the engine with the next owner's work, charged
 * in part: on simcuda's preempting engine 24.3-25.6/33.7-34.7/37.9-38.4
 * (a +12 limit then), on whole kernels the long tenant 31-35 %. The
 * shares of the engine are logged, not checked: on a loaded host the
 * emulated CPU cannot launch the short kernels fast enough to fill their
 * slices (the engine was busy 45 % of the time in one CI run), which says
 * nothing of the schedule; the host's benchmark has the precise figures.
 */
static int t_weighted_mixed(void)
{
	static const uint32_t q[NT] = { 5, 5, 10 };
	static const double e[NT] = { 25, 25, 50 };
	static const char *const k[NT] = { "40000", "2000", "2000" };
	static const char *const d[NT] = { "8", "2", "8" };

	return scenario_shaped("p4mixed", GPUSLICE_POLICY_WEIGHTED, 3, q, 3, e,
			       OF_WALL | AT_MOST, 6, k, d);
}

static int t_fixed(void)
{
	static const uint32_t q[2] = { 30, 70 };
	static const double e[2] = { 30, 70 };

	return scenario("p1", GPUSLICE_POLICY_FIXED, 2, q, 2, e, 0, 10);
}

/*
 * Policy 1 lends no idle units: a lone 30 % tenant gets no more than its
 * 30 % of wall time (+10), the isolation promise. How close it comes is
 * the emulated CPU's business (27-31 % quiet, 9 % in a loaded CI run).
 */
static int t_fixed_lone(void)
{
	static const uint32_t q[2] = { 30, 70 };
	static const double e[1] = { 30 };

	return scenario("p1lone", GPUSLICE_POLICY_FIXED, 2, q, 1, e,
			OF_WALL | AT_MOST, 10);
}

/* Policy 5: the 30 % tenant its share, the quota-0 ones the rest. */
static int t_hybrid(void)
{
	static const uint32_t q[NT] = { 30, 0, 0 };
	static const double e[NT] = { 30, 35, 35 };

	return scenario("p5", GPUSLICE_POLICY_HYBRID, 3, q, 3, e, 0, 10);
}

/* Policy 6: an idle vGPU's units go to the busy ones (5/5/10 -> 50/50). */
static int t_weak_idle(void)
{
	static const uint32_t q[NT] = { 5, 5, 10 };
	static const double e[2] = { 50, 50 };

	return scenario("p6idle", GPUSLICE_POLICY_WEIGHTED_WEAK, 3, q, 2, e, 0,
			10);
}

/*
 * Priority, policy 4, 20 ms slices: a high-priority tenant of 2 ms
 * kernels, one at a time 20 ms apart, alone and then next to a busy
 * low-priority neighbour (2 ms kernels, two in flight). Active between its
 * kernels (within the reclaim window, 100 ms), it keeps the card: its
 * kernels find an empty engine, as alone, and the neighbour waits. (A cut
 * slice, for a high-priority vGPU back from idle, is the drain program's.)
 */
static int hp_latency(int with_lp, uint64_t *p50, uint64_t *p90,
		      uint64_t *p99, double *lp_share)
{
	static const char *const names[2] = { "gsgA", "gsgB" };
	struct tenant ts[2] = {
		{ .cg = "gsgA", .quota = "10", .seconds = "2",
		  .depth = "1", .opt = "gap=20000" },
		{ .cg = "gsgB", .quota = "50", .seconds = "2" },
	};
	int ids[2];

	gs_destroy_all(gs_fd);
	TOK(gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_WEIGHTED, 20, 20 * MS,
			0));
	for (int i = 0; i < 2; i++) {
		ids[i] = gs_vgpu_create(gs_fd, CARD, gs_cg_id(names[i]), CAP,
					i ? 50 : 10, i ? 0 : 1,
					GPUSLICE_MODE_COMPUTE);
		T(ids[i] >= 0, "create: %s", gs_errname(errno));
	}
	if (run_tenants(ts, with_lp ? 2 : 1) < 0)
		return -1;
	for (int i = 0; i < (with_lp ? 2 : 1); i++)
		T(ts[i].status == 0, "tenant %s: status %d:\n%s", ts[i].cg,
		  ts[i].status, ts[i].buf);
	*p50 = kv(&ts[0], "lat_p50_ns");
	*p90 = kv(&ts[0], "lat_p90_ns");
	*p99 = kv(&ts[0], "lat_p99_ns");
	T(*p50 != ~0ULL && *p90 != ~0ULL && *p99 != ~0ULL,
	  "no latencies:\n%s", ts[0].buf);
	*lp_share = 0;
	if (with_lp)
		*lp_share = 100.0 * (double)kv(&ts[1], "busy_ns") /
			    (double)kv(&ts[1], "wall_ns");
	return 0;
}

static int t_priority(void)
{
	uint64_t a50, a90, a99, s50, s90, s99;
	double lp, none;

	if (hp_latency(0, &a50, &a90, &a99, &none) < 0 ||
	    hp_latency(1, &s50, &s90, &s99, &lp) < 0)
		return -1;
	gs_info(P " priority: high-priority 2 ms kernels alone p50 %.1f ms "
		"p90 %.1f ms p99 %.1f ms; next to a busy neighbour p50 %.1f ms "
		"p90 %.1f ms p99 %.1f ms; the neighbour %.1f%% of wall time",
		(double)a50 / 1e6, (double)a90 / 1e6, (double)a99 / 1e6,
		(double)s50 / 1e6, (double)s90 / 1e6, (double)s99 / 1e6, lp);
	gs_line("GSBENCH " P " hp_p50_ratio %.2f x", (double)s50 / (double)a50);
	gs_line("GSBENCH " P " hp_p90_ratio %.2f x", (double)s90 / (double)a90);
	/*
	 * Lending the gaps (the card given back once the queue drained)
	 * makes a kernel wait for the neighbour's two in flight: 4 ms more
	 * at least, on a 2 ms kernel. The emulator's own noise is the slack.
	 */
	T(s90 < 2 * a90 + 2 * MS,
	  "high-priority p90 %.1f ms alone, %.1f ms next to a busy neighbour: "
	  "it waited for the neighbour's kernels",
	  (double)a90 / 1e6, (double)s90 / 1e6);
	/* It may start before the first kernel: one slice of the window. */
	T(lp < 5, "the low-priority neighbour ran %.1f%% of wall time next to "
	  "an active high-priority tenant", lp);
	return 0;
}

/*
 * The engine's time over the tenants' common window: each samples its
 * own engine time every 100 ms from its start (gstest tenant iv=100),
 * and the complete intervals count, so that a tenant's last launch
 * waiting for a slice past its deadline does not stretch the window.
 */
static double window_busy(const struct tenant *t, double *secs)
{
	const char *p = strstr(t->buf, "\niv_busy_ns=");
	double busy = 0;
	int n = 0;
	char *end;

	*secs = 0;
	if (!p)
		return -1;
	p += strlen("\niv_busy_ns=");
	while (*p >= '0' && *p <= '9') {
		busy += (double)strtoull(p, &end, 10);
		n++;
		p = *end == ',' ? end + 1 : end;
	}
	*secs = n / 10.0;
	return busy;
}

/* Engine use of n saturating tenants under policy 3, in [0, 1]. */
static int engine_use(int n, double *use)
{
	static const uint32_t q[2] = { 10, 10 };
	struct tenant ts[2];
	double busy = 0, secs = 0, b, s;
	int ids[2];

	if (setup(GPUSLICE_POLICY_PREEMPTIVE, 2, q, cgs, ids) < 0)
		return -1;
	memset(ts, 0, sizeof(ts));
	for (int i = 0; i < n; i++) {
		ts[i].cg = cgs[i];
		ts[i].quota = "10";
		ts[i].seconds = SECONDS;
		ts[i].opt = "iv=100";
	}
	if (run_tenants(ts, n) < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		T(ts[i].status == 0, "tenant %s: status %d:\n%s", ts[i].cg,
		  ts[i].status, ts[i].buf);
		b = window_busy(&ts[i], &s);
		T(b >= 0 && s > 0, "tenant %s: no intervals:\n%s", ts[i].cg,
		  ts[i].buf);
		busy += b;
		secs = s > secs ? s : secs;
	}
	*use = busy / (secs * 1e9);
	return 0;
}

/*
 * Issue 14, item 10: the engine must not idle between one slice's drain
 * and the next owner's first kernel. Two saturating tenants under policy
 * 3 against one alone (the host's benchmark has the precise figure; the
 * emulated CPU's wake-ups are slow, hence the margin).
 */
static int t_engine_use(void)
{
	double alone, pair;

	if (engine_use(1, &alone) < 0 || engine_use(2, &pair) < 0)
		return -1;
	gs_line("GSBENCH " P " engine_use_alone %.1f %%", 100 * alone);
	gs_line("GSBENCH " P " engine_use_pair %.1f %%", 100 * pair);
	gs_line("GSBENCH " P " engine_use_ratio %.3f x", pair / alone);
	gs_info(P " engine use, policy 3: one saturating tenant alone %.1f%%, "
		"two %.1f%%: ratio %.3f", 100 * alone, 100 * pair,
		pair / alone);
	/* A lone tenant kept from the engine would make any ratio pass. */
	T(alone >= ENGINE_ALONE_MIN,
	  "one saturating tenant alone used %.1f%% of the engine, want at "
	  "least %.0f%%", 100 * alone, 100 * ENGINE_ALONE_MIN);
	T(pair / alone >= ENGINE_RATIO_MIN,
	  "two saturating tenants used %.1f%% of the engine, one alone %.1f%%: "
	  "ratio %.3f, want at least %.2f", 100 * pair, 100 * alone,
	  pair / alone, ENGINE_RATIO_MIN);
	return 0;
}

/* Reads the tenant's output to EOF for at most ms; -1 when it ran on. */
static int read_eof_within(struct tenant *t, unsigned ms)
{
	uint64_t deadline = gs_now() + (uint64_t)ms * MS;
	struct pollfd pfd = { .fd = t->out, .events = POLLIN };
	size_t n = strlen(t->buf);
	ssize_t r;

	while (n + 1 < sizeof(t->buf) && gs_now() < deadline) {
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		r = read(t->out, t->buf + n, sizeof(t->buf) - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return 0;
		n += (size_t)r;
		t->buf[n] = 0;
	}
	return n + 1 < sizeof(t->buf) ? -1 : 0;
}

/*
 * A lone tenant over its launch budget: 8 ms kernels 8 deep have 32 ms
 * queued at the first slice's fifth launch, more than the slice has
 * left, so the warm-up's probe fails and the launch waits the slice out.
 * Alone, the card goes straight on to its next slice (no drain between,
 * the early handover): the wait must end there. It waited on while the
 * card was merely ours, the card's lock held so that the fencer could not
 * release either, and the tenant never launched again (the gate program
 * hung in engine_use_two_vs_one now and then, here every time).
 */
static int t_lone_over_budget(void)
{
	static const uint32_t q[1] = { 10 };
	struct tenant t = { .cg = "gsgA", .quota = "10", .seconds = "2",
			    .kernel_us = "8000", .depth = "8" };
	uint64_t t0;
	int ids[1];

	if (setup(GPUSLICE_POLICY_PREEMPTIVE, 1, q, cgs, ids) < 0)
		return -1;
	TOK(start(&t));
	if (read_until(&t, "ready") < 0) {
		kill_tenants(&t, 1);
		T(0, "tenant never got ready:\n%s", t.buf);
	}
	t0 = gs_now();
	gs_write_all(t.in, "go\n", 3);
	if (read_eof_within(&t, 20000) < 0) {
		kill_tenants(&t, 1);
		T(0, "a 2 s tenant still running after 20 s (its launch "
		  "waiting out a slice of a card that stays its own):\n%s",
		  t.buf);
	}
	finish_tenant(&t);
	T(t.status == 0, "tenant: status %d:\n%s", t.status, t.buf);
	T(kv(&t, "kernels_done") > 0 && kv(&t, "kernels_done") != ~0ULL,
	  "the tenant ran no kernel:\n%s", t.buf);
	gs_info(P " lone over budget: done in %.1f s, %llu kernels, the "
		"engine busy %.1f%% of its wall time",
		(double)(gs_now() - t0) / 1e9,
		(unsigned long long)kv(&t, "kernels_done"),
		100.0 * (double)kv(&t, "busy_ns") / (double)kv(&t, "wall_ns"));
	return 0;
}

/* Policy 0: nothing gated, the engine's FIFO shares it about evenly. */
static int t_native(void)
{
	static const uint32_t q[NT] = { 5, 5, 10 };
	static const double e[NT] = { 100.0 / 3, 100.0 / 3, 100.0 / 3 };

	return scenario("p0", GPUSLICE_POLICY_NATIVE, 3, q, 3, e, UNGATED, 10);
}

/* A vGPU removed under a running tenant: its launches are refused. */
static int t_removed(void)
{
	static const uint32_t q[1] = { 50 };
	struct tenant t = { .cg = "gsgA", .quota = "50", .seconds = "20" };
	int ids[1];

	if (setup(GPUSLICE_POLICY_WEIGHTED, 1, q, cgs, ids) < 0)
		return -1;
	TOK(start(&t));
	if (read_until(&t, "ready") < 0) {
		kill_tenants(&t, 1);
		T(0, "tenant never got ready:\n%s", t.buf);
	}
	gs_write_all(t.in, "go\n", 3);
	gs_sleep_ms(500);
	TOK(gs_vgpu_destroy(gs_fd, CARD, (uint32_t)ids[0]));
	finish_tenant(&t);
	T(t.status == 1, "tenant: status %d after its vGPU went:\n%s",
	  t.status, t.buf);
	T(strstr(t.buf, "launch.rc=CUDA_ERROR_NOT_PERMITTED"),
	  "the launch failed otherwise:\n%s", t.buf);
	T(strstr(t.buf, "its vGPU was removed"),
	  "no line saying the vGPU was removed:\n%s", t.buf);
	T(kv(&t, "wall_ns") < 15000000000ULL,
	  "the tenant ran on for %llu ns", (unsigned long long)kv(&t, "wall_ns"));
	gs_info(P " removed: the tenant's launches refused %.0f ms after it "
		"started (the vGPU went at 500 ms)",
		(double)kv(&t, "wall_ns") / 1e6);
	return 0;
}

int main(void)
{
	gs_init(P, 110);
	for (int i = 0; i < NT; i++) {
		if (!gs_cg_create(cgs[i])) {
			gs_line("GSTEST " P " FAIL setup: cgroup %s: %s", cgs[i],
				gs_errname(errno));
			gs_nfail++;
			return gs_finish();
		}
	}
	gs_run("weighted_5_5_10", t_weighted);
	gs_run("weighted_mixed_shapes", t_weighted_mixed);
	gs_run("fixed_30_70", t_fixed);
	gs_run("fixed_lone_30", t_fixed_lone);
	gs_run("hybrid_30_0_0", t_hybrid);
	gs_run("weighted_weak_one_idle", t_weak_idle);
	gs_run("priority_keeps_card", t_priority);
	gs_run("native_ungated", t_native);
	gs_run("engine_use_two_vs_one", t_engine_use);
	gs_run("lone_over_budget", t_lone_over_budget);
	gs_run("vgpu_removed_refused", t_removed);
	return gs_finish();
}
