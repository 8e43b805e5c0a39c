// SPDX-License-Identifier: Apache-2.0
/*
 * gstest capture <graphs> <modes> <replay_seconds> [kernel_us] [launchers]
 * [go]: what PyTorch's torch.cuda.graph and vLLM's start-up do, on a card
 * the shim may gate.
 *
 *  1. warm-up: kernels on the capture stream, synchronised;
 *  2. while launcher threads launch kernels on streams of their own (in
 *     the default, global, capture mode; they synchronise only in relaxed
 *     mode, as a careful application must while another thread captures),
 *     the main thread captures graphs graphs, the i-th in the i-th of the
 *     comma-separated modes (global, thread_local, relaxed), round robin:
 *     each of a few kernels with a 2 ms pause between them (so a capture
 *     spans slice ends), a stream-ordered allocation and free, a fork to a
 *     second stream and back through events, and in relaxed mode a
 *     cuMemAlloc/cuMemFree in the middle, which that mode allows; every
 *     capture must end with a graph, and is instantiated;
 *  3. replay: the graphs launched round robin on a stream for
 *     replay_seconds, four at a time, then synchronised.
 *
 * Prints captures_ok, captures_failed (with the first error), replays,
 * replay_wall_ns and replay_busy_ns (the engine time of its kernels in
 * the replay, simcuda's simcudaEngineStats), launcher_launches. With "go"
 * it prints "ready" and waits for a line on stdin before the warm-up.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define MAX_GRAPHS 256
#define MAX_LAUNCHERS 8
#define CAPTURED_KERNELS 4
#define LAUNCHER_DEPTH 8

struct launcher {
	pthread_t t;
	CUcontext ctx;
	CUfunction f;
	uint64_t ns;
	int *stop;
	unsigned long long launches;
};

static void pause_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int mode_of(const char *name)
{
	if (!strcmp(name, "global"))
		return CU_STREAM_CAPTURE_MODE_GLOBAL;
	if (!strcmp(name, "thread_local"))
		return CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
	if (!strcmp(name, "relaxed"))
		return CU_STREAM_CAPTURE_MODE_RELAXED;
	dief("capture: mode %s: want global, thread_local or relaxed", name);
}

/* A synchronisation a thread may make while another one captures. */
static void sync_relaxed(CUstream s)
{
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;

	CHECK(cu.cuThreadExchangeStreamCaptureMode(&m));
	CHECK(cu.cuStreamSynchronize(s));
	CHECK(cu.cuThreadExchangeStreamCaptureMode(&m));
}

static void *launcher_main(void *arg)
{
	struct launcher *l = arg;
	void *params[] = { &l->ns };
	CUstream s;

	if (!CHECK(cu.cuCtxSetCurrent(l->ctx)) ||
	    !CHECK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)))
		return NULL;
	while (!__atomic_load_n(l->stop, __ATOMIC_ACQUIRE)) {
		if (!CHECK(cu.cuLaunchKernel(l->f, 1, 1, 1, 1, 1, 1, 0, s,
					     params, NULL)))
			break;
		if (++l->launches % LAUNCHER_DEPTH == 0)
			sync_relaxed(s);
	}
	sync_relaxed(s);
	cu.cuStreamDestroy_v2(s);
	return NULL;
}

struct capture {
	CUfunction f;
	uint64_t ns;
	CUstream s, side;
	CUevent fork, join;
	int ok, failed;
	CUresult first_err;
};

static bool step(struct capture *c, CUresult rc, const char *what)
{
	if (rc == CUDA_SUCCESS)
		return true;
	if (!c->first_err) {
		c->first_err = rc;
		failf("capture: %s: %s", what, rcname(rc));
	}
	return false;
}

/* The body of one capture; false at the first failing call. */
static bool capture_body(struct capture *c, int mode, int i)
{
	void *params[] = { &c->ns };
	CUdeviceptr p, q;

	for (int k = 0; k < CAPTURED_KERNELS; k++) {
		if (!step(c, cu.cuLaunchKernel(c->f, 1, 1, 1, 1, 1, 1, 0, c->s,
					       params, NULL), "launch"))
			return false;
		if (k == 1) {
			if (!step(c, cu.cuMemAllocAsync(&p, 4 << 20, c->s),
				  "cuMemAllocAsync") ||
			    !step(c, cu.cuMemFreeAsync(p, c->s),
				  "cuMemFreeAsync"))
				return false;
		}
		if (k == 2 && (i & 1) &&
		    (!step(c, cu.cuEventRecord(c->fork, c->s), "fork record") ||
		     !step(c, cu.cuStreamWaitEvent(c->side, c->fork, 0),
			   "fork wait") ||
		     !step(c, cu.cuLaunchKernel(c->f, 1, 1, 1, 1, 1, 1, 0,
						c->side, params, NULL),
			   "side launch") ||
		     !step(c, cu.cuEventRecord(c->join, c->side), "join record") ||
		     !step(c, cu.cuStreamWaitEvent(c->s, c->join, 0),
			   "join wait")))
			return false;
		if (k == 2 && mode == CU_STREAM_CAPTURE_MODE_RELAXED &&
		    (!step(c, cu.cuMemAlloc_v2(&q, 1 << 20), "cuMemAlloc") ||
		     !step(c, cu.cuMemFree_v2(q), "cuMemFree")))
			return false;
		pause_ms(2);
	}
	return true;
}

static CUgraphExec capture_one(struct capture *c, int mode, int i)
{
	CUgraph g = NULL;
	CUgraphExec x = NULL;
	bool body;
	CUresult rc;

	if (!step(c, cu.cuStreamBeginCapture_v2(c->s, mode), "begin capture"))
		return NULL;
	body = capture_body(c, mode, i);
	rc = cu.cuStreamEndCapture(c->s, &g);
	if (!body || !step(c, rc, "end capture") || !g) {
		c->failed++;
		return NULL;
	}
	if (!step(c, cu.cuGraphInstantiateWithFlags(&x, g, 0), "instantiate"))
		x = NULL;
	cu.cuGraphDestroy(g);
	if (x)
		c->ok++;
	else
		c->failed++;
	return x;
}

static int parse_modes(const char *list, int *modes)
{
	char buf[256], *save = NULL;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", list);
	for (char *t = strtok_r(buf, ",", &save); t && n < 8;
	     t = strtok_r(NULL, ",", &save))
		modes[n++] = mode_of(t);
	if (!n)
		dief("capture: no mode in %s", list);
	return n;
}

/* Replays the graphs for the given seconds; returns how many were launched. */
static unsigned long long replay(CUgraphExec *x, int n, CUstream s,
				 long seconds)
{
	uint64_t deadline = now_ns() + (uint64_t)seconds * 1000000000ULL;
	unsigned long long replays = 0;

	while (n && now_ns() < deadline) {
		if (!CHECK(cu.cuGraphLaunch(x[replays % (unsigned)n], s)))
			break;
		if (++replays % 4 == 0 && !CHECK(cu.cuStreamSynchronize(s)))
			break;
	}
	CHECK(cu.cuStreamSynchronize(s));
	return replays;
}

int cmd_capture(int argc, char **argv)
{
	int (*stats)(int, int, uint64_t *, uint64_t *);
	static CUgraphExec execs[MAX_GRAPHS];
	struct launcher l[MAX_LAUNCHERS] = { 0 };
	struct capture c = { 0 };
	uint64_t b0 = 0, b1 = 0, k = 0, t0, t1;
	long graphs, seconds, kernel_us = 1000, nlaunchers = 2;
	unsigned long long replays, launched = 0;
	int modes[8], nmodes, stop = 0, n = 0;
	bool go = false;
	CUcontext ctx;
	CUmodule mod;

	if (argc > 3 && !strcmp(argv[argc - 1], "go")) {
		go = true;
		argc--;
	}
	if (argc < 3 || argc > 5)
		dief("usage: capture <graphs> <modes> <replay_seconds> [kernel_us] [launchers] [go]");
	graphs = parse_long(argv[0], 1, MAX_GRAPHS, "graphs");
	nmodes = parse_modes(argv[1], modes);
	seconds = parse_long(argv[2], 0, 3600, "replay_seconds");
	if (argc > 3)
		kernel_us = parse_long(argv[3], 0, 1000000, "kernel_us");
	if (argc > 4)
		nlaunchers = parse_long(argv[4], 0, MAX_LAUNCHERS, "launchers");
	c.ns = (uint64_t)kernel_us * 1000;

	load_cuda();
	stats = (__typeof__(stats))dlsym(cuda_handle(), "simcudaEngineStats");
	ctx = open_primary(0);
	if (!CHECK(cu.cuModuleLoadData(&mod, spin_ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&c.f, mod, "spin")) ||
	    !CHECK(cu.cuStreamCreate(&c.s, CU_STREAM_NON_BLOCKING)) ||
	    !CHECK(cu.cuStreamCreate(&c.side, CU_STREAM_NON_BLOCKING)) ||
	    !CHECK(cu.cuEventCreate(&c.fork, CU_EVENT_DISABLE_TIMING)) ||
	    !CHECK(cu.cuEventCreate(&c.join, CU_EVENT_DISABLE_TIMING)))
		return finish("capture");
	if (go) {
		char ch;

		printf("ready\n");
		fflush(stdout);
		while (read(STDIN_FILENO, &ch, 1) == 1 && ch != '\n')
			;
	}
	for (int i = 0; i < 4; i++) {
		void *params[] = { &c.ns };

		CHECK(cu.cuLaunchKernel(c.f, 1, 1, 1, 1, 1, 1, 0, c.s, params,
					NULL));
	}
	CHECK(cu.cuStreamSynchronize(c.s));

	for (long i = 0; i < nlaunchers; i++) {
		l[i] = (struct launcher){ .ctx = ctx, .f = c.f, .ns = c.ns,
					  .stop = &stop };
		if (pthread_create(&l[i].t, NULL, launcher_main, &l[i]))
			dief("capture: pthread_create failed");
	}
	for (long i = 0; i < graphs; i++) {
		CUgraphExec x = capture_one(&c, modes[i % nmodes], (int)i);

		if (x)
			execs[n++] = x;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (long i = 0; i < nlaunchers; i++) {
		pthread_join(l[i].t, NULL);
		launched += l[i].launches;
	}

	if (stats)
		stats(0, (int)getpid(), &b0, &k);
	t0 = now_ns();
	replays = replay(execs, n, c.s, seconds);
	t1 = now_ns();
	if (stats)
		stats(0, (int)getpid(), &b1, &k);

	printf("captures_ok=%d\n", c.ok);
	printf("captures_failed=%d\n", c.failed);
	if (c.first_err)
		printf("first_error=%s\n", rcname(c.first_err));
	printf("replays=%llu\n", replays);
	printf("replay_wall_ns=%llu\n", (unsigned long long)(t1 - t0));
	if (stats)
		printf("replay_busy_ns=%llu\n", (unsigned long long)(b1 - b0));
	printf("launcher_launches=%llu\n", launched);
	for (int i = 0; i < n; i++)
		cu.cuGraphExecDestroy(execs[i]);
	cu.cuEventDestroy_v2(c.fork);
	cu.cuEventDestroy_v2(c.join);
	cu.cuStreamDestroy_v2(c.s);
	cu.cuStreamDestroy_v2(c.side);
	cu.cuModuleUnload(mod);
	close_primary(0);
	return finish("capture");
}
