// SPDX-License-Identifier: Apache-2.0
/*
 * gstest storm <threads> <seconds> <seed> [max=<bytes>] [only=<path,...>]
 * [linger]: threads allocate and free at random through every path (linear,
 * pitch, stream-ordered on a stream and per-thread, an explicit pool, VMM
 * with and without mappings, arrays, mipmaps, whole contexts, managed),
 * with syncs and trims in between, until the time is up; then everything is
 * freed, the primary context released, and "done" printed.
 *
 * max: the largest single allocation (default 16M). only: the paths to use
 * (names as in the summary; syncs always happen). linger: after "ready"
 * wait for a line on stdin before starting (so that all processes of a
 * test have their context first), and after "done" wait for stdin to close
 * (so that the test can see in the ledger that the process holds nothing).
 * solo: the process is alone on the vGPU: check that cuMemGetInfo's free is
 * back where it started once everything is freed.
 *
 * Refusals (CUDA_ERROR_OUT_OF_MEMORY) are expected and counted: the point
 * is what the Go test watches from outside (the ledger and the device never
 * above the cap, everything back to zero at the end). The storm itself only
 * fails on other errors.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define LIVE 16

enum path {
	P_ALLOC, P_PITCH, P_ASYNC, P_ASYNC_PTSZ, P_POOL, P_VMM, P_ARRAY,
	P_ARRAY3D, P_MIPMAP, P_CTX, P_MANAGED, P_SYNC, NPATHS
};

static const char *const path_names[NPATHS] = {
	"alloc", "pitch", "async", "async_ptsz", "pool", "vmm", "array",
	"array3d", "mipmap", "context", "managed", "sync",
};

struct rec {
	enum path path;
	uint64_t h;
	uint64_t bytes;
	CUdeviceptr va;		/* vmm: mapped at */
};

struct worker {
	pthread_t tid;
	uint64_t seed;
	CUstream stream;
	struct rec live[LIVE];
	int n;
	uint64_t ok[NPATHS], refused[NPATHS];
};

static CUcontext primary;
static CUmemoryPool pool;
static uint64_t max_bytes = 16 * MIB;
static size_t gran;
static struct timespec deadline;
static unsigned int enabled = ~0u;	/* bit per path */

static bool time_left(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec < deadline.tv_sec ||
	       (now.tv_sec == deadline.tv_sec &&
		now.tv_nsec < deadline.tv_nsec);
}

/* 1 byte to max_bytes, spread over the orders of magnitude. */
static uint64_t rand_size(uint64_t *s)
{
	int bits = 1;
	uint64_t v;

	while ((1ULL << bits) < max_bytes)
		bits++;
	v = rng_next(s) % (1ULL << (rng_next(s) % (uint64_t)bits + 1)) + 1;
	return v > max_bytes ? max_bytes : v;
}

static void bad(struct worker *w, const char *what, CUresult rc)
{
	failf("storm thread %p: %s returned %d (%s)", (void *)w, what,
	      (int)rc, rcname(rc));
}

/* An allocation's result: refusals count, other errors fail. */
static bool outcome(struct worker *w, enum path p, CUresult rc)
{
	if (rc == CUDA_SUCCESS) {
		w->ok[p]++;
		return true;
	}
	if (rc == CUDA_ERROR_OUT_OF_MEMORY)
		w->refused[p]++;
	else
		bad(w, path_names[p], rc);
	return false;
}

static CUresult make_vmm(struct worker *w, struct rec *r, uint64_t size)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
	};
	CUmemAccessDesc acc = {
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUmemGenericAllocationHandle h;
	CUresult rc;

	size = (size + gran - 1) / gran * gran;
	r->bytes = size;
	r->va = 0;
	rc = cu.cuMemCreate(&h, size, &prop, 0);
	if (rc != CUDA_SUCCESS)
		return rc;
	r->h = h;
	if (rng_next(&w->seed) % 2 &&
	    CHECK(cu.cuMemAddressReserve(&r->va, size, 0, 0, 0))) {
		if (!CHECK(cu.cuMemMap(r->va, size, 0, h, 0))) {
			cu.cuMemAddressFree(r->va, size);
			r->va = 0;
		} else {
			CHECK(cu.cuMemSetAccess(r->va, size, &acc, 1));
		}
	}
	return rc;
}

/* Release and unmap in either order: the bytes go when both are done. */
static void free_vmm(struct worker *w, struct rec *r)
{
	bool release_first = rng_next(&w->seed) % 2;

	if (release_first)
		CHECK(cu.cuMemRelease(r->h));
	if (r->va) {
		CHECK(cu.cuMemUnmap(r->va, r->bytes));
		CHECK(cu.cuMemAddressFree(r->va, r->bytes));
	}
	if (!release_first)
		CHECK(cu.cuMemRelease(r->h));
}

static CUresult make_array(enum path p, struct rec *r, uint64_t size,
			   uint64_t *s)
{
	CUDA_ARRAY3D_DESCRIPTOR d3 = { .Format = CU_AD_FORMAT_UNSIGNED_INT8,
				       .NumChannels = 1 };
	CUmipmappedArray m;
	CUarray a;
	CUresult rc;

	if (size >= 16384) {
		d3.Width = 16384;
		d3.Height = size / 16384;
	} else {
		d3.Width = size;
	}
	if (p == P_ARRAY) {
		CUDA_ARRAY_DESCRIPTOR d2 = { d3.Width, d3.Height, d3.Format,
					     d3.NumChannels };

		rc = cu.cuArrayCreate_v2(&a, &d2);
		r->h = (uint64_t)(uintptr_t)a;
	} else if (p == P_ARRAY3D) {
		d3.Format = CU_AD_FORMAT_FLOAT;
		d3.Width = 64;
		d3.Height = 64;
		d3.Depth = size / 16384 ? size / 16384 : 1;
		rc = cu.cuArray3DCreate_v2(&a, &d3);
		r->h = (uint64_t)(uintptr_t)a;
	} else {
		rc = cu.cuMipmappedArrayCreate(
			&m, &d3, 1 + (unsigned int)(rng_next(s) % 3));
		r->h = (uint64_t)(uintptr_t)m;
	}
	return rc;
}

/* A whole context: created, given some memory, destroyed with it. */
static void context_cycle(struct worker *w, uint64_t size)
{
	CUcontext ctx;
	CUdeviceptr d;
	CUresult rc = cu.cuCtxCreate_v2(&ctx, 0, 0);

	if (!outcome(w, P_CTX, rc))
		return;
	rc = cu.cuMemAlloc_v2(&d, size);
	if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY)
		bad(w, "cuMemAlloc in a new context", rc);
	CHECK(cu.cuCtxDestroy_v2(ctx));
	CHECK(cu.cuCtxSetCurrent(primary));
}

static void sync_some(struct worker *w)
{
	switch (rng_next(&w->seed) % 4) {
	case 0:
		CHECK(cu.cuStreamSynchronize(w->stream));
		break;
	case 1:
		CHECK(cu.cuStreamSynchronize_ptsz(NULL));
		break;
	case 2:
		CHECK(cu.cuCtxSynchronize());
		break;
	default:
		CHECK(cu.cuMemPoolTrimTo(pool, rng_next(&w->seed) % (8 * MIB)));
		break;
	}
	w->ok[P_SYNC]++;
}

static void alloc_one(struct worker *w)
{
	enum path p;
	uint64_t size = rand_size(&w->seed);
	struct rec *r = &w->live[w->n];
	CUdeviceptr d = 0;
	size_t pitch, free, total;
	CUresult rc;

	do
		p = (enum path)(rng_next(&w->seed) % NPATHS);
	while (!(enabled & (1u << p)));
	memset(r, 0, sizeof(*r));
	r->path = p;
	r->bytes = size;
	switch (p) {
	case P_ALLOC:
		rc = cu.cuMemAlloc_v2(&d, size);
		break;
	case P_PITCH:
		rc = cu.cuMemAllocPitch_v2(&d, &pitch, size < 65536 ? size : 65536,
					   size < 65536 ? 1 : size / 65536, 4);
		break;
	case P_ASYNC:
		rc = cu.cuMemAllocAsync(&d, size, w->stream);
		break;
	case P_ASYNC_PTSZ:
		rc = cu.cuMemAllocAsync_ptsz(&d, size, NULL);
		break;
	case P_POOL:
		rc = cu.cuMemAllocFromPoolAsync(&d, size, pool, w->stream);
		break;
	case P_VMM:
		rc = make_vmm(w, r, size);
		break;
	case P_ARRAY:
	case P_ARRAY3D:
	case P_MIPMAP:
		rc = make_array(p, r, size, &w->seed);
		break;
	case P_CTX:
		context_cycle(w, size);
		return;
	case P_MANAGED:
		/* Refused under a cap; a driver without one may grant it. */
		rc = cu.cuMemAllocManaged(&d, size, CU_MEM_ATTACH_GLOBAL);
		if (rc == CUDA_SUCCESS)
			CHECK(cu.cuMemFree_v2(d));
		else if (rc != CUDA_ERROR_NOT_SUPPORTED)
			bad(w, "cuMemAllocManaged", rc);
		w->ok[p]++;
		return;
	default:
		sync_some(w);
		mem_info(&free, &total);
		if (free > total)
			failf("storm: cuMemGetInfo free %zu > total %zu", free,
			      total);
		return;
	}
	if (!outcome(w, p, rc))
		return;
	if (d)
		r->h = d;
	w->n++;
}

static void free_one(struct worker *w, int i)
{
	struct rec *r = &w->live[i];

	switch (r->path) {
	case P_ALLOC:
	case P_PITCH:
		CHECK(cu.cuMemFree_v2(r->h));
		break;
	case P_ASYNC:
	case P_POOL:
		/* Now and then a plain cuMemFree of a pool allocation. */
		if (rng_next(&w->seed) % 8 == 0)
			CHECK(cu.cuMemFree_v2(r->h));
		else
			CHECK(cu.cuMemFreeAsync(r->h, w->stream));
		break;
	case P_ASYNC_PTSZ:
		CHECK(cu.cuMemFreeAsync_ptsz(r->h, NULL));
		break;
	case P_VMM:
		free_vmm(w, r);
		break;
	case P_ARRAY:
	case P_ARRAY3D:
		CHECK(cu.cuArrayDestroy((CUarray)(uintptr_t)r->h));
		break;
	case P_MIPMAP:
		CHECK(cu.cuMipmappedArrayDestroy(
			(CUmipmappedArray)(uintptr_t)r->h));
		break;
	default:
		failf("storm: record of path %d", (int)r->path);
	}
	w->live[i] = w->live[--w->n];
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	CHECK(cu.cuCtxSetCurrent(primary));
	CHECK(cu.cuStreamCreate(&w->stream, CU_STREAM_NON_BLOCKING));
	while (time_left()) {
		bool do_free = w->n == LIVE ||
			       (w->n && rng_next(&w->seed) % 100 < 45);

		if (do_free)
			free_one(w, (int)(rng_next(&w->seed) % (uint64_t)w->n));
		else
			alloc_one(w);
	}
	while (w->n)
		free_one(w, w->n - 1);
	CHECK(cu.cuStreamSynchronize(w->stream));
	CHECK(cu.cuStreamSynchronize_ptsz(NULL));
	CHECK(cu.cuStreamDestroy_v2(w->stream));
	return NULL;
}

/* "alloc,pool": the bits of those paths, plus syncs. */
static unsigned int parse_paths(const char *list)
{
	unsigned int mask = 1u << P_SYNC;
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	for (char *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		int p = 0;

		while (p < NPATHS && strcmp(path_names[p], tok))
			p++;
		if (p == NPATHS)
			dief("storm: unknown path %s", tok);
		mask |= 1u << p;
	}
	return mask;
}

int cmd_storm(int argc, char **argv)
{
	CUmemPoolProps props = {
		.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
	};
	uint64_t ok = 0, refused = 0, seed;
	struct worker *w;
	long threads, seconds;
	bool linger = false, solo = false;
	size_t free0 = 0;

	if (argc < 3)
		dief("usage: storm <threads> <seconds> <seed> [max=<bytes>] [only=<path,...>] [linger] [solo]");
	threads = parse_long(argv[0], 1, 1024, "threads");
	seconds = parse_long(argv[1], 0, 3600, "seconds");
	seed = (uint64_t)parse_long(argv[2], 0, 1L << 62, "seed");
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "linger"))
			linger = true;
		else if (!strcmp(argv[i], "solo"))
			solo = true;
		else if (!strncmp(argv[i], "max=", 4))
			max_bytes = parse_size(argv[i] + 4);
		else if (!strncmp(argv[i], "only=", 5))
			enabled = parse_paths(argv[i] + 5);
		else
			dief("storm: unknown option %s", argv[i]);
	}
	if (!max_bytes)
		dief("max must be positive");

	primary = open_primary(0);
	NEED(cuMemPoolCreate);
	NEED(cuMemCreate);
	gran = vmm_granularity(0);
	CHECK(cu.cuMemPoolCreate(&pool, &props));
	free0 = mem_free();
	w = calloc((size_t)threads, sizeof(*w));
	if (!w)
		dief("out of memory");
	printf("ready\n");
	fflush(stdout);
	if (linger) {
		char c;

		while (read(STDIN_FILENO, &c, 1) > 0 && c != '\n')
			;
	}

	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += seconds;
	for (long i = 0; i < threads; i++) {
		w[i].seed = seed * 1000003ULL + (uint64_t)i;
		if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]))
			dief("pthread_create failed");
	}
	for (long i = 0; i < threads; i++)
		pthread_join(w[i].tid, NULL);

	CHECK(cu.cuCtxSynchronize());
	if (solo)
		expect_free(free0, "storm: everything freed and synchronised");
	CHECK(cu.cuMemPoolDestroy(pool));
	for (int p = 0; p < NPATHS; p++) {
		uint64_t o = 0, r = 0;

		for (long i = 0; i < threads; i++) {
			o += w[i].ok[p];
			r += w[i].refused[p];
		}
		printf("%s.ok=%llu\n%s.refused=%llu\n", path_names[p],
		       (unsigned long long)o, path_names[p],
		       (unsigned long long)r);
		ok += o;
		refused += r;
	}
	printf("ok=%llu\nrefused=%llu\n", (unsigned long long)ok,
	       (unsigned long long)refused);
	close_primary(0);
	free(w);
	printf("done\n");
	fflush(stdout);
	if (linger) {
		char c;

		while (read(STDIN_FILENO, &c, 1) > 0)
			;
	}
	return finish("storm");
}
