// SPDX-License-Identifier: Apache-2.0
/*
 * gstest cap's paths through the CUDA 13 pool calls, with cap.c's checks
 * (fill exactly, one more byte refused, frees give it all back):
 *
 *  pool_default  device dev's default pool, from cuMemGetDefaultMemPool
 *                for (device dev, pinned), by cuMemAllocFromPoolAsync.
 *  pool_current  a pool made current for (device dev, pinned) with
 *                cuMemSetMemPool (cuMemGetMemPool must then answer it),
 *                by cuMemAllocAsync; destroying it makes the default
 *                current again.
 *  pool_xdev     a pool of device dev, allocated from by the other device
 *                (dev 1: device 0), with that device's context current
 *                and on a stream of it: dev's vGPU is charged, the
 *                other's is not.
 *
 * Each keeps its reservation across synchronisation (release threshold
 * UINT64_MAX), so only the trim gives the bytes back.
 */
#include <string.h>

#include "cap.h"

static void keep_reservation(struct run *r, cuuint64_t keep)
{
	CHECK(cu.cuMemPoolSetAttribute(r->pool,
				       CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
				       &keep));
}

static CUmemoryPool new_device_pool(int dev)
{
	CUmemPoolProps props;
	CUmemoryPool pool = NULL;

	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = dev;
	if (!CHECK(pool_create(&pool, &props)))
		dief("cannot make a pool on device %d", dev);
	return pool;
}

/* ---- pool_default ---- */

static void setup_default(struct run *r)
{
	CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, r->dev };

	NEED(cuMemGetDefaultMemPool);
	setup_stream(r);
	CHECK(cu.cuMemGetDefaultMemPool(&r->pool, &loc,
					CU_MEM_ALLOCATION_TYPE_PINNED));
	keep_reservation(r, UINT64_MAX);
}

/* A default pool outlives the program's use of it: back to the default. */
static void teardown_default(struct run *r)
{
	keep_reservation(r, 0);
	teardown_stream(r);
}

/* ---- pool_current ---- */

static CUmemoryPool current_pool(int dev)
{
	CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, dev };
	CUmemoryPool p = NULL;

	CHECK(cu.cuMemGetMemPool(&p, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
	return p;
}

static void setup_current(struct run *r)
{
	CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, r->dev };

	NEED(cuMemGetMemPool);
	NEED(cuMemSetMemPool);
	setup_stream(r);
	r->pool = new_device_pool(r->dev);
	keep_reservation(r, UINT64_MAX);
	CHECK(cu.cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED,
				 r->pool));
	if (current_pool(r->dev) != r->pool)
		failf("pool_current: cuMemGetMemPool does not answer the pool cuMemSetMemPool set");
}

/* Destroying the current pool makes the default current again. */
static void finale_current(struct run *r)
{
	CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, r->dev };
	CUmemoryPool def = NULL;

	CHECK(cu.cuMemPoolDestroy(r->pool));
	r->pool = NULL;
	CHECK(cu.cuMemGetDefaultMemPool(&def, &loc,
					CU_MEM_ALLOCATION_TYPE_PINNED));
	if (current_pool(r->dev) != def)
		failf("pool_current: after cuMemPoolDestroy the default pool is not current");
	expect_free(r->F, "pool_current: after cuMemPoolDestroy");
}

static void teardown_current(struct run *r)
{
	if (r->pool)
		CHECK(cu.cuMemPoolDestroy(r->pool));
	teardown_stream(r);
}

/* ---- pool_xdev ---- */

static void use_other(struct run *r, bool other)
{
	CHECK(cu.cuCtxSetCurrent(other ? r->octx : r->ctx));
}

static void setup_xdev(struct run *r)
{
	CHECK(cu.cuCtxGetCurrent(&r->ctx));
	r->odev = r->dev ? 0 : 1;
	CHECK(cu.cuDevicePrimaryCtxRetain(&r->octx, r->odev));
	use_other(r, true);
	setup_stream(r);
	r->oF = mem_free();
	use_other(r, false);
	r->pool = new_device_pool(r->dev);
	keep_reservation(r, UINT64_MAX);
}

static CUresult alloc_xdev(struct run *r, uint64_t want, struct piece *p)
{
	CUresult rc;

	use_other(r, true);
	rc = alloc_pool(r, want, p);
	use_other(r, false);
	return rc;
}

static CUresult free_xdev(struct run *r, struct piece *p)
{
	CUresult rc;

	use_other(r, true);
	rc = free_async(r, p);
	use_other(r, false);
	return rc;
}

static void finale_xdev(struct run *r)
{
	use_other(r, true);
	expect_free(r->oF, "pool_xdev: the allocating device's vGPU");
	use_other(r, false);
}

static void teardown_xdev(struct run *r)
{
	CHECK(cu.cuMemPoolDestroy(r->pool));
	teardown_stream(r);
	CHECK(cu.cuDevicePrimaryCtxRelease_v2(r->odev));
}

const struct path cap_pool_paths[] = {
	{ "pool_default", setup_default, alloc_pool, free_async, settle_pool,
	  NULL, teardown_default, true },
	{ "pool_current", setup_current, alloc_async, free_async, settle_pool,
	  finale_current, teardown_current, true },
	{ "pool_xdev", setup_xdev, alloc_xdev, free_xdev, settle_pool,
	  finale_xdev, teardown_xdev, true },
};

const size_t cap_pool_npaths = sizeof(cap_pool_paths) /
			       sizeof(cap_pool_paths[0]);
