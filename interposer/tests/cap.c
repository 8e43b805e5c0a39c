// SPDX-License-Identifier: Apache-2.0
/*
 * gstest cap <path> [device]: the cap holds on one allocation path.
 *
 * With the device's primary context current, cuMemGetInfo's free F is what
 * the vGPU has left. The path must then allocate exactly F bytes (in a few
 * pieces), refuse its smallest further allocation with
 * CUDA_ERROR_OUT_OF_MEMORY, give every byte back when the pieces are freed
 * (after the synchronisation or trim the path needs), and allocate F again.
 *
 * Pieces are shaped so that their size is exact on a driver without layout
 * padding (the simulated one); the path's granularity (pools, VMM) must
 * divide F, which the Go tests arrange with caps in whole MiB.
 */
#include <stdlib.h>
#include <string.h>

#include "cap.h"

/* ---- alloc ---- */

static CUresult alloc_linear(struct run *r, uint64_t want, struct piece *p)
{
	CUdeviceptr d = 0;
	CUresult rc = cu.cuMemAlloc_v2(&d, want);

	(void)r;
	p->h = d;
	p->bytes = want;
	return rc;
}

static CUresult free_linear(struct run *r, struct piece *p)
{
	(void)r;
	return cu.cuMemFree_v2(p->h);
}

/* ---- pitch ---- */

#define PITCH_W 65536ULL

static CUresult alloc_pitch(struct run *r, uint64_t want, struct piece *p)
{
	uint64_t w = want >= PITCH_W ? PITCH_W : want;
	uint64_t h = want / w;
	CUdeviceptr d = 0;
	size_t pitch = 0;
	CUresult rc;

	(void)r;
	rc = cu.cuMemAllocPitch_v2(&d, &pitch, w, h, 4);
	p->h = d;
	p->bytes = rc == CUDA_SUCCESS ? pitch * h : w * h;
	if (rc == CUDA_SUCCESS && w % 512 == 0 && pitch != w)
		notef("pitch: width %llu got pitch %zu: pieces are not exact on this driver",
		      (unsigned long long)w, pitch);
	return rc;
}

/* ---- async, async_ptsz ---- */

void setup_stream(struct run *r)
{
	NEED(cuStreamCreate);
	CHECK(cu.cuStreamCreate(&r->stream, CU_STREAM_NON_BLOCKING));
}

void teardown_stream(struct run *r)
{
	CHECK(cu.cuStreamDestroy_v2(r->stream));
}

CUresult alloc_async(struct run *r, uint64_t want, struct piece *p)
{
	CUdeviceptr d = 0;
	CUresult rc = cu.cuMemAllocAsync(&d, want, r->stream);

	p->h = d;
	p->bytes = want;
	return rc;
}

CUresult free_async(struct run *r, struct piece *p)
{
	return cu.cuMemFreeAsync(p->h, r->stream);
}

void sync_stream(struct run *r)
{
	CHECK(cu.cuStreamSynchronize(r->stream));
}

/* hStream 0 with the _ptsz variants is the per-thread default stream. */
static CUresult alloc_async_ptsz(struct run *r, uint64_t want,
				 struct piece *p)
{
	CUdeviceptr d = 0;
	CUresult rc = cu.cuMemAllocAsync_ptsz(&d, want, NULL);

	(void)r;
	p->h = d;
	p->bytes = want;
	return rc;
}

static CUresult free_async_ptsz(struct run *r, struct piece *p)
{
	(void)r;
	return cu.cuMemFreeAsync_ptsz(p->h, NULL);
}

static void sync_ptsz(struct run *r)
{
	(void)r;
	CHECK(cu.cuStreamSynchronize_ptsz(NULL));
}

/* ---- pool, pool_ptsz: an explicit pool that keeps its reservation ---- */

uint64_t pool_reserved(struct run *r)
{
	cuuint64_t v = 0;

	CHECK(cu.cuMemPoolGetAttribute(r->pool,
				       CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
				       &v));
	return v;
}

static void setup_pool(struct run *r)
{
	CUmemPoolProps props;
	cuuint64_t keep = UINT64_MAX;

	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = r->dev;
	setup_stream(r);
	CHECK(cu.cuMemPoolCreate(&r->pool, &props));
	/* Synchronisation does not shrink it: only a trim gives bytes back. */
	CHECK(cu.cuMemPoolSetAttribute(r->pool,
				       CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
				       &keep));
}

CUresult alloc_pool(struct run *r, uint64_t want, struct piece *p)
{
	CUdeviceptr d = 0;
	CUresult rc = cu.cuMemAllocFromPoolAsync(&d, want, r->pool,
						 r->stream);

	p->h = d;
	p->bytes = want;
	return rc;
}

static CUresult alloc_pool_ptsz(struct run *r, uint64_t want,
				struct piece *p)
{
	CUdeviceptr d = 0;
	CUresult rc = cu.cuMemAllocFromPoolAsync_ptsz(&d, want, r->pool,
						      NULL);

	p->h = d;
	p->bytes = want;
	return rc;
}

/*
 * After a sync the pool still holds its reservation, and the vGPU is
 * charged for it; the trim gives it back.
 */
static void settle_pool_common(struct run *r, bool ptsz)
{
	uint64_t reserved;

	if (ptsz)
		sync_ptsz(r);
	else
		sync_stream(r);
	reserved = pool_reserved(r);
	expect_free(r->F - (reserved < r->F ? reserved : r->F),
		    "pool: after the sync, with its reservation kept");
	CHECK(cu.cuMemPoolTrimTo(r->pool, 0));
	if (pool_reserved(r) != 0)
		failf("pool: %llu bytes still reserved after cuMemPoolTrimTo(0)",
		      (unsigned long long)pool_reserved(r));
}

void settle_pool(struct run *r)
{
	settle_pool_common(r, false);
}

static void settle_pool_ptsz(struct run *r)
{
	settle_pool_common(r, true);
}

/* Destroying a pool that still holds a reservation gives it back. */
static void finale_pool(struct run *r)
{
	struct piece p;

	if (CHECK(alloc_pool(r, r->F / 2 / r->gran * r->gran, &p))) {
		CHECK(free_async(r, &p));
		sync_stream(r);
		if (pool_reserved(r) == 0)
			failf("pool: the reservation is gone before the destroy");
	}
	CHECK(cu.cuMemPoolDestroy(r->pool));
	r->pool = NULL;
	expect_free(r->F, "pool: after cuMemPoolDestroy");
}

static void teardown_pool(struct run *r)
{
	if (r->pool)
		CHECK(cu.cuMemPoolDestroy(r->pool));
	teardown_stream(r);
}

/* ---- vmm: the first piece of a round is mapped ---- */

static CUresult alloc_vmm(struct run *r, uint64_t want, struct piece *p)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, r->dev },
	};
	CUmemAccessDesc acc = {
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, r->dev },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUmemGenericAllocationHandle h = 0;
	CUresult rc = cu.cuMemCreate(&h, want, &prop, 0);

	p->h = h;
	p->bytes = want;
	p->va = 0;
	if (rc != CUDA_SUCCESS || r->npieces)
		return rc;
	if (CHECK(cu.cuMemAddressReserve(&p->va, want, 0, 0, 0)) &&
	    CHECK(cu.cuMemMap(p->va, want, 0, h, 0)))
		CHECK(cu.cuMemSetAccess(p->va, want, &acc, 1));
	return rc;
}

/* A mapped handle stays charged after its release, until the unmap. */
static CUresult free_vmm(struct run *r, struct piece *p)
{
	size_t before = mem_free();
	CUresult rc = cu.cuMemRelease(p->h);

	(void)r;
	if (!p->va || rc != CUDA_SUCCESS)
		return rc;
	expect_free(before, "vmm: after cuMemRelease of a still mapped handle");
	rc = cu.cuMemUnmap(p->va, p->bytes);
	if (rc == CUDA_SUCCESS)
		expect_free(before + p->bytes, "vmm: after cuMemUnmap");
	CHECK(cu.cuMemAddressFree(p->va, p->bytes));
	return rc;
}

/* ---- arrays ---- */

#define ROW 16384ULL

static CUresult alloc_array(struct run *r, uint64_t want, struct piece *p)
{
	CUDA_ARRAY_DESCRIPTOR d = {
		.Format = CU_AD_FORMAT_UNSIGNED_INT8,
		.NumChannels = 1,
	};
	CUarray a = NULL;
	CUresult rc;

	(void)r;
	if (want >= ROW) {
		d.Width = ROW;
		d.Height = want / ROW < ROW ? want / ROW : ROW;
	} else {
		d.Width = want;	/* 1D */
	}
	p->bytes = d.Width * (d.Height ? d.Height : 1);
	rc = cu.cuArrayCreate_v2(&a, &d);
	p->h = (uint64_t)(uintptr_t)a;
	return rc;
}

static CUresult free_array(struct run *r, struct piece *p)
{
	(void)r;
	return cu.cuArrayDestroy((CUarray)(uintptr_t)p->h);
}

/* Planes of 256 x 256 texels of two halves, else 4-byte or 1-byte texels. */
static CUresult alloc_array3d(struct run *r, uint64_t want, struct piece *p)
{
	CUDA_ARRAY3D_DESCRIPTOR d = { .Height = 1, .Depth = 1 };
	const uint64_t plane = 256 * 256 * 4;
	CUarray a = NULL;
	CUresult rc;

	(void)r;
	if (want >= plane) {
		d.Width = 256;
		d.Height = 256;
		d.Depth = want / plane < 2048 ? want / plane : 2048;
		d.Format = CU_AD_FORMAT_HALF;
		d.NumChannels = 2;
		p->bytes = plane * d.Depth;
	} else if (want % 4 == 0) {
		d.Width = want / 4;
		d.Format = CU_AD_FORMAT_FLOAT;
		d.NumChannels = 1;
		p->bytes = want;
	} else {
		d.Width = want;
		d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
		d.NumChannels = 1;
		p->bytes = want;
	}
	rc = cu.cuArray3DCreate_v2(&a, &d);
	p->h = (uint64_t)(uintptr_t)a;
	return rc;
}

/* The first piece of a round is a 3-level 1024 x 1024 chain, the rest single levels. */
static CUresult alloc_mipmap(struct run *r, uint64_t want, struct piece *p)
{
	const uint64_t chain = 1024 * 1024 + 512 * 512 + 256 * 256;
	CUDA_ARRAY3D_DESCRIPTOR d = {
		.Format = CU_AD_FORMAT_UNSIGNED_INT8,
		.NumChannels = 1,
	};
	CUmipmappedArray m = NULL;
	unsigned int levels = 1;
	CUresult rc;

	if (!r->npieces && want >= chain) {
		d.Width = d.Height = 1024;
		levels = 3;
		p->bytes = chain;
	} else if (want >= ROW) {
		d.Width = ROW;
		d.Height = want / ROW < ROW ? want / ROW : ROW;
		p->bytes = d.Width * d.Height;
	} else {
		d.Width = want;
		p->bytes = want;
	}
	rc = cu.cuMipmappedArrayCreate(&m, &d, levels);
	p->h = (uint64_t)(uintptr_t)m;
	return rc;
}

static CUresult free_mipmap(struct run *r, struct piece *p)
{
	(void)r;
	return cu.cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)p->h);
}

static const struct path paths[] = {
	{ "alloc", NULL, alloc_linear, free_linear, NULL, NULL, NULL, false },
	{ "pitch", NULL, alloc_pitch, free_linear, NULL, NULL, NULL, false },
	{ "async", setup_stream, alloc_async, free_async, sync_stream, NULL,
	  teardown_stream, true },
	{ "async_ptsz", NULL, alloc_async_ptsz, free_async_ptsz, sync_ptsz,
	  NULL, NULL, true },
	{ "pool", setup_pool, alloc_pool, free_async, settle_pool, finale_pool,
	  teardown_pool, true },
	{ "pool_ptsz", setup_pool, alloc_pool_ptsz, free_async_ptsz,
	  settle_pool_ptsz, NULL, teardown_pool, true },
	{ "vmm", NULL, alloc_vmm, free_vmm, NULL, NULL, NULL, true },
	{ "array", NULL, alloc_array, free_array, NULL, NULL, NULL, false },
	{ "array3d", NULL, alloc_array3d, free_array, NULL, NULL, NULL, false },
	{ "mipmap", NULL, alloc_mipmap, free_mipmap, NULL, NULL, NULL, false },
};

/* Allocates exactly bytes in pieces of about a third each. */
static bool fill(const struct path *pa, struct run *r, uint64_t bytes,
		 const char *round)
{
	uint64_t left = bytes, third = bytes / 3 / r->gran * r->gran;

	r->npieces = 0;
	if (third < r->gran)
		third = r->gran;
	while (left) {
		struct piece *p = &r->p[r->n];
		uint64_t want = left < third ? left : third;
		CUresult rc;

		if (r->n == MAX_PIECES) {
			failf("%s %s: more than %d pieces", pa->name, round,
			      MAX_PIECES);
			return false;
		}
		memset(p, 0, sizeof(*p));
		rc = pa->alloc(r, want, p);
		if (rc != CUDA_SUCCESS) {
			failf("%s %s: piece %d of %llu bytes failed with %d (%s) with %llu of %llu bytes still to allocate",
			      pa->name, round, r->npieces,
			      (unsigned long long)want, (int)rc, rcname(rc),
			      (unsigned long long)left,
			      (unsigned long long)bytes);
			return false;
		}
		r->n++;
		r->npieces++;
		if (!p->bytes || p->bytes > left) {
			failf("%s %s: a piece holds %llu bytes with %llu left: cannot fill exactly",
			      pa->name, round, (unsigned long long)p->bytes,
			      (unsigned long long)left);
			return false;
		}
		left -= p->bytes;
	}
	notef("%s %s: %llu bytes in %d pieces", pa->name, round,
	      (unsigned long long)bytes, r->npieces);
	return true;
}

static void release(const struct path *pa, struct run *r)
{
	while (r->n > 0) {
		r->n--;
		CUresult rc = pa->free(r, &r->p[r->n]);

		if (rc != CUDA_SUCCESS)
			failf("%s: freeing piece %d returned %d (%s)",
			      pa->name, r->n, (int)rc, rcname(rc));
	}
	if (pa->settle)
		pa->settle(r);
}

/* The smallest further allocation must be refused by the cap. */
static void over(const struct path *pa, struct run *r)
{
	/* VMM sizes are whole granules; everything else takes 1 byte. */
	uint64_t unit = !strcmp(pa->name, "vmm") ? r->gran : 1;
	struct piece p;
	CUresult rc;

	memset(&p, 0, sizeof(p));
	r->npieces = 1;	/* plain piece: no mapping, no mipmap chain */
	rc = pa->alloc(r, unit, &p);
	if (rc == CUDA_ERROR_OUT_OF_MEMORY)
		return;
	failf("%s: %llu more byte(s) with the vGPU full returned %d (%s), want CUDA_ERROR_OUT_OF_MEMORY",
	      pa->name, (unsigned long long)unit, (int)rc, rcname(rc));
	if (rc == CUDA_SUCCESS) {
		pa->free(r, &p);
		if (pa->settle)
			pa->settle(r);
	}
}


int cmd_cap(int argc, char **argv)
{
	const struct path *pa = NULL;
	struct run *r;
	size_t total;
	int dev;

	if (argc < 1 || argc > 2)
		dief("usage: cap <path> [device]");
	dev = argc > 1 ? (int)parse_long(argv[1], 0, 255, "device") : 0;
	if (!strcmp(argv[0], "context"))
		return cap_context(dev);
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		if (!strcmp(argv[0], paths[i].name))
			pa = &paths[i];
	}
	for (size_t i = 0; i < cap_pool_npaths; i++) {
		if (!strcmp(argv[0], cap_pool_paths[i].name))
			pa = &cap_pool_paths[i];
	}
	if (!pa)
		dief("cap: unknown path %s", argv[0]);

	r = calloc(1, sizeof(*r));
	if (!r)
		dief("out of memory");
	r->dev = dev;
	open_primary(dev);
	if (pa->setup)
		pa->setup(r);
	r->gran = pa->vmm_gran ? vmm_granularity(dev) : 1;
	if (!strcmp(pa->name, "pitch"))
		r->gran = 512;
	mem_info(&total, NULL);
	r->F = total;
	mem_info(NULL, &total);
	printf("free=%llu\ntotal=%llu\n", (unsigned long long)r->F,
	       (unsigned long long)total);
	if (r->F == 0 || r->F % r->gran)
		dief("cap %s: free %llu is not a positive multiple of the path's granularity %llu",
		     pa->name, (unsigned long long)r->F,
		     (unsigned long long)r->gran);

	for (int round = 1; round <= 2; round++) {
		const char *name = round == 1 ? "round 1" : "round 2";

		if (!fill(pa, r, r->F, name)) {
			release(pa, r);
			break;
		}
		expect_free(0, pa->name);
		if (round == 1)
			over(pa, r);
		release(pa, r);
		expect_free(r->F, pa->name);
	}
	if (pa->finale && !failures())
		pa->finale(r);
	if (pa->teardown)
		pa->teardown(r);
	close_primary(dev);
	free(r);
	return finish("cap");
}
