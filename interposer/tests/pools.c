// SPDX-License-Identifier: Apache-2.0
/*
 * gstest pools: CUDA 13 pools that are not a card's memory.
 *
 *  host <how>     a pool of host memory is never charged: with the vGPU
 *                 untouched, one and a half times its size is allocated
 *                 from the pool, and cuMemGetInfo's free does not move.
 *                 how: create (cuMemPoolCreate on the host), numa (on host
 *                 NUMA node 0), default, default_numa (cuMemGetDefaultMemPool
 *                 of either), current (made current for the host with
 *                 cuMemSetMemPool and answered by cuMemGetMemPool).
 *  managed <how>  managed memory is refused with CUDA_ERROR_NOT_SUPPORTED
 *                 on every path, for each location (device 0, the host,
 *                 host NUMA node 0, none). how: create, default, current
 *                 (cuMemGetMemPool), set (cuMemSetMemPool), alloc
 *                 (cuMemAllocFromPoolAsync and _ptsz from a managed pool
 *                 made behind the shim: GSTEST_UNSEEN_POOLS).
 *  rules          the driver keeps NVIDIA's documented rules for these
 *                 calls (run it without the shim: it makes managed pools).
 *
 * The device kinds are cap paths (cap_pool.c).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define PINNED CU_MEM_ALLOCATION_TYPE_PINNED
#define MANAGED CU_MEM_ALLOCATION_TYPE_MANAGED

static const CUmemLocation at_dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 };
static const CUmemLocation at_host = { CU_MEM_LOCATION_TYPE_HOST, 0 };
static const CUmemLocation at_numa = { CU_MEM_LOCATION_TYPE_HOST_NUMA, 0 };
static const CUmemLocation at_none = { CU_MEM_LOCATION_TYPE_NONE, 0 };

CUresult pool_create(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	const char *unseen = getenv("GSTEST_UNSEEN_POOLS");
	__typeof__(&cuMemPoolCreate) own;

	if (!unseen || strcmp(unseen, "1"))
		return cu.cuMemPoolCreate(pool, props);
	/* Preloaded, the shim answers dlsym too: it would see the call. */
	if (!getenv("GSTEST_LATE_SHIM"))
		dief("GSTEST_UNSEEN_POOLS=1 needs GSTEST_LATE_SHIM");
	own = (__typeof__(own))dlsym(cuda_handle(), "cuMemPoolCreate");
	if (!own)
		dief("the driver does not export cuMemPoolCreate");
	return own(pool, props);
}

static CUmemPoolProps props_at(CUmemAllocationType type, CUmemLocation loc)
{
	CUmemPoolProps props;

	memset(&props, 0, sizeof(props));
	props.allocType = type;
	props.location = loc;
	return props;
}

/* Physical bytes in use on device 0, where the simulated driver tells. */
static bool device_used(uint64_t *used)
{
	return cu.simcudaDeviceUsed && cu.simcudaDeviceUsed(0, used) == 0;
}

/* ---- host ---- */

/* The pool of host memory how names; *made when the program made it. */
static CUmemoryPool host_pool(const char *how, bool *made)
{
	CUmemLocation host = at_host, numa = at_numa;
	bool is_numa = strstr(how, "numa") != NULL;
	CUmemPoolProps props = props_at(PINNED, is_numa ? numa : host);
	CUmemoryPool p = NULL, cur = NULL;

	*made = false;
	if (!strncmp(how, "default", 7)) {
		NEED(cuMemGetDefaultMemPool);
		CHECK(cu.cuMemGetDefaultMemPool(&p, is_numa ? &numa : &host,
						PINNED));
		return p;
	}
	if (strcmp(how, "create") && strcmp(how, "numa") &&
	    strcmp(how, "current"))
		dief("pools host: unknown way %s", how);
	if (!CHECK(pool_create(&p, &props)))
		dief("pools host: cannot make the pool");
	*made = true;
	if (strcmp(how, "current"))
		return p;
	NEED(cuMemSetMemPool);
	NEED(cuMemGetMemPool);
	CHECK(cu.cuMemSetMemPool(&host, PINNED, p));
	CHECK(cu.cuMemGetMemPool(&cur, &host, PINNED));
	if (cur != p)
		failf("pools host current: cuMemGetMemPool does not answer the pool cuMemSetMemPool set");
	return p;
}

static int host_kind(const char *how)
{
	CUdeviceptr d[3];
	uint64_t piece, used0 = 0, used;
	size_t f, total;
	CUmemoryPool pool;
	CUstream s;
	bool made;
	int n = 0;

	open_primary(0);
	mem_info(&f, &total);
	CHECK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	pool = host_pool(how, &made);
	piece = total / 2;
	device_used(&used0);
	for (; n < 3; n++) {
		if (!CHECK(cu.cuMemAllocFromPoolAsync(&d[n], piece, pool, s)))
			break;
	}
	expect_free(f, "pools host: with 1.5 x the vGPU allocated from a host pool");
	if (device_used(&used) && used != used0)
		failf("pools host: the device holds %llu bytes more",
		      (unsigned long long)(used - used0));
	while (n-- > 0)
		CHECK(cu.cuMemFreeAsync(d[n], s));
	CHECK(cu.cuStreamSynchronize(s));
	CHECK(cu.cuMemPoolTrimTo(pool, 0));
	expect_free(f, "pools host: after the frees");
	if (made)
		CHECK(cu.cuMemPoolDestroy(pool));
	printf("host_bytes=%llu\n", (unsigned long long)(3 * piece));
	CHECK(cu.cuStreamDestroy_v2(s));
	close_primary(0);
	return finish("pools host");
}

/* ---- managed ---- */

/* Allocates from a managed pool made behind the shim (GSTEST_UNSEEN_POOLS). */
static CUresult managed_alloc(CUmemPoolProps *props, CUstream s)
{
	CUmemoryPool p = NULL;
	CUdeviceptr d = 0;
	CUresult rc, rc2;

	if (!CHECK(pool_create(&p, props)))
		return CUDA_ERROR_UNKNOWN;
	rc = cu.cuMemAllocFromPoolAsync(&d, MIB, p, s);
	if (rc == CUDA_SUCCESS)
		CHECK(cu.cuMemFreeAsync(d, s));
	rc2 = cu.cuMemAllocFromPoolAsync_ptsz(&d, MIB, p, NULL);
	if (rc2 == CUDA_SUCCESS)
		CHECK(cu.cuMemFreeAsync_ptsz(d, NULL));
	CHECK(cu.cuCtxSynchronize());
	CHECK(cu.cuMemPoolDestroy(p));
	return rc == CUDA_SUCCESS ? rc2 : rc;
}

/* One way to managed memory at loc; what it returned. */
static CUresult managed_one(const char *how, CUmemLocation loc, CUstream s)
{
	CUmemPoolProps props = props_at(MANAGED, loc);
	CUmemoryPool p = NULL;
	CUresult rc;

	if (!strcmp(how, "alloc"))
		return managed_alloc(&props, s);
	if (!strcmp(how, "create")) {
		rc = cu.cuMemPoolCreate(&p, &props);
		if (rc == CUDA_SUCCESS)
			CHECK(cu.cuMemPoolDestroy(p));
		return rc;
	}
	if (!strcmp(how, "default"))
		return cu.cuMemGetDefaultMemPool(&p, &loc, MANAGED);
	if (!strcmp(how, "current"))
		return cu.cuMemGetMemPool(&p, &loc, MANAGED);
	if (!strcmp(how, "set")) {
		/* Without the shim, the default managed pool; with it, none. */
		cu.cuMemGetDefaultMemPool(&p, &loc, MANAGED);
		return cu.cuMemSetMemPool(&loc, MANAGED, p);
	}
	dief("pools managed: unknown way %s", how);
}

static int managed_kind(const char *how)
{
	static const char *const names[] = { "device 0", "the host",
					     "host NUMA node 0", "no location" };
	const CUmemLocation locs[] = { at_dev0, at_host, at_numa, at_none };
	int refused = 0;
	CUstream s;

	if (!strcmp(how, "alloc") && !getenv("GSTEST_UNSEEN_POOLS"))
		dief("pools managed alloc needs GSTEST_UNSEEN_POOLS=1");
	NEED(cuMemGetDefaultMemPool);
	NEED(cuMemGetMemPool);
	NEED(cuMemSetMemPool);
	open_primary(0);
	CHECK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (size_t i = 0; i < sizeof(locs) / sizeof(locs[0]); i++) {
		CUresult rc = managed_one(how, locs[i], s);

		if (rc == CUDA_ERROR_NOT_SUPPORTED)
			refused++;
		else
			failf("pools managed %s at %s: %d (%s), want CUDA_ERROR_NOT_SUPPORTED",
			      how, names[i], (int)rc, rcname(rc));
	}
	printf("refused=%d\n", refused);
	CHECK(cu.cuStreamDestroy_v2(s));
	close_primary(0);
	return finish("pools managed");
}

/* ---- rules ---- */

static void expect_pool(CUmemoryPool p, CUmemAllocationType type,
			CUmemLocationType lt, int id, const char *what)
{
	CUmemAllocationType t = CU_MEM_ALLOCATION_TYPE_INVALID;
	CUmemLocationType l = CU_MEM_LOCATION_TYPE_INVALID;
	int i = -1;

	CHECK(cu.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_ALLOCATION_TYPE, &t));
	CHECK(cu.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_LOCATION_TYPE, &l));
	CHECK(cu.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_LOCATION_ID, &i));
	if (t != type || l != lt || i != id)
		failf("pools rules: %s is type %d at %d/%d, want %d at %d/%d",
		      what, (int)t, (int)l, i, (int)type, (int)lt, id);
}

/* Allocates from p: no device memory may go with it. */
static void off_device(CUmemoryPool p, const char *what)
{
	uint64_t used0 = 0, used;
	CUdeviceptr d;

	device_used(&used0);
	if (!CHECK(cu.cuMemAllocFromPoolAsync(&d, 64 * MIB, p, NULL)))
		return;
	if (device_used(&used) && used != used0)
		failf("pools rules: %s took %llu bytes of device memory", what,
		      (unsigned long long)(used - used0));
	CHECK(cu.cuMemFreeAsync(d, NULL));
	CHECK(cu.cuCtxSynchronize());
}

/* cuMemAllocAsync takes device memory, whatever the host's current pool. */
static void async_on_device(void)
{
	uint64_t used0 = 0, used = 0;
	CUdeviceptr d;

	device_used(&used0);
	if (!CHECK(cu.cuMemAllocAsync(&d, 64 * MIB, NULL)))
		return;
	if (device_used(&used) && used - used0 != 64 * MIB)
		failf("pools rules: cuMemAllocAsync of 64 MiB took %lld bytes of device memory",
		      (long long)(used - used0));
	CHECK(cu.cuMemFreeAsync(d, NULL));
	CHECK(cu.cuCtxSynchronize());
}

/* Which (location, type) pairs exist, and what pools may be made. */
static void rules_pairs(void)
{
	CUmemLocation none = at_none, dev0 = at_dev0;
	CUmemLocation cur = { CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0 };
	CUmemLocation numa7 = { CU_MEM_LOCATION_TYPE_HOST_NUMA, 7 };
	CUmemLocation dev99 = { CU_MEM_LOCATION_TYPE_DEVICE, 99 };
	CUmemPoolProps props;
	CUmemoryPool p, def;

	EXPECT(cu.cuMemGetDefaultMemPool(&p, &none, PINNED),
	       CUDA_ERROR_INVALID_VALUE);
	EXPECT(cu.cuMemGetDefaultMemPool(&p, &cur, PINNED),
	       CUDA_ERROR_INVALID_VALUE);
	EXPECT(cu.cuMemGetDefaultMemPool(&p, &numa7, PINNED),
	       CUDA_ERROR_INVALID_VALUE);
	EXPECT(cu.cuMemGetDefaultMemPool(&p, &dev99, PINNED),
	       CUDA_ERROR_INVALID_DEVICE);
	EXPECT(cu.cuMemGetMemPool(&p, &dev0, CU_MEM_ALLOCATION_TYPE_INVALID),
	       CUDA_ERROR_INVALID_VALUE);
	CHECK(cu.cuMemGetDefaultMemPool(&p, &dev0, PINNED));
	CHECK(cu.cuDeviceGetDefaultMemPool(&def, 0));
	if (p != def)
		failf("pools rules: device 0's pinned default is not cuDeviceGetDefaultMemPool's");
	expect_pool(def, PINNED, CU_MEM_LOCATION_TYPE_DEVICE, 0, "device 0's default pool");
	CHECK(cu.cuMemGetDefaultMemPool(&p, &none, MANAGED));
	expect_pool(p, MANAGED, CU_MEM_LOCATION_TYPE_NONE, 0, "the managed default pool");
	props = props_at(PINNED, cur);
	EXPECT(cu.cuMemPoolCreate(&p, &props), CUDA_ERROR_INVALID_VALUE);
	props = props_at(PINNED, none);
	EXPECT(cu.cuMemPoolCreate(&p, &props), CUDA_ERROR_INVALID_VALUE);
	props = props_at(PINNED, at_host);
	props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	EXPECT(cu.cuMemPoolCreate(&p, &props), CUDA_ERROR_INVALID_VALUE);
	props = props_at(MANAGED, at_dev0);
	props.maxSize = 1ULL << 30;
	EXPECT(cu.cuMemPoolCreate(&p, &props), CUDA_ERROR_INVALID_VALUE);
}

/* Current pools: of their very location and type; back to the default. */
static void rules_current(void)
{
	CUmemLocation host = at_host, numa = at_numa, dev0 = at_dev0;
	CUmemPoolProps props = props_at(PINNED, at_host);
	CUmemoryPool hp, dp, p, def, hdef;

	CHECK(cu.cuDeviceGetDefaultMemPool(&def, 0));
	CHECK(cu.cuMemGetDefaultMemPool(&hdef, &host, PINNED));
	if (!CHECK(cu.cuMemPoolCreate(&hp, &props)))
		return;
	expect_pool(hp, PINNED, CU_MEM_LOCATION_TYPE_HOST, 0, "a host pool");
	EXPECT(cu.cuMemSetMemPool(&dev0, PINNED, hp), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cu.cuMemSetMemPool(&numa, PINNED, hp), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cu.cuMemSetMemPool(&host, MANAGED, hp), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cu.cuDeviceSetMemPool(0, hp), CUDA_ERROR_INVALID_VALUE);
	CHECK(cu.cuMemSetMemPool(&host, PINNED, hp));
	CHECK(cu.cuMemGetMemPool(&p, &host, PINNED));
	if (p != hp)
		failf("pools rules: the host's current pool is not the one set");
	async_on_device();
	off_device(hp, "a host pool");
	CHECK(cu.cuMemPoolDestroy(hp));
	CHECK(cu.cuMemGetMemPool(&p, &host, PINNED));
	if (p != hdef)
		failf("pools rules: a destroyed host pool is still current");
	props = props_at(PINNED, at_dev0);
	CHECK(cu.cuMemPoolCreate(&dp, &props));
	CHECK(cu.cuMemSetMemPool(&dev0, PINNED, dp));
	CHECK(cu.cuDeviceGetMemPool(&p, 0));
	if (p != dp)
		failf("pools rules: cuMemSetMemPool(device 0, pinned) is not cuDeviceSetMemPool");
	CHECK(cu.cuMemPoolDestroy(dp));
	CHECK(cu.cuDeviceGetMemPool(&p, 0));
	if (p != def)
		failf("pools rules: a destroyed device pool is still current");
}

static void rules_managed(void)
{
	CUmemPoolProps props = props_at(MANAGED, at_dev0);
	CUmemoryPool mp;

	if (!CHECK(cu.cuMemPoolCreate(&mp, &props)))
		return;
	expect_pool(mp, MANAGED, CU_MEM_LOCATION_TYPE_DEVICE, 0,
		    "a managed pool preferring device 0");
	off_device(mp, "a managed pool");
	CHECK(cu.cuMemPoolDestroy(mp));
}

static int rules(void)
{
	NEED(cuMemGetDefaultMemPool);
	NEED(cuMemGetMemPool);
	NEED(cuMemSetMemPool);
	NEED(cuDeviceGetMemPool);
	NEED(cuDeviceSetMemPool);
	open_primary(0);
	rules_pairs();
	rules_current();
	rules_managed();
	close_primary(0);
	return finish("pools rules");
}

int cmd_pools(int argc, char **argv)
{
	if (argc == 1 && !strcmp(argv[0], "rules")) {
		load_cuda();
		return rules();
	}
	if (argc != 2)
		dief("usage: pools host <how> | managed <how> | rules");
	load_cuda();
	if (!strcmp(argv[0], "host"))
		return host_kind(argv[1]);
	if (!strcmp(argv[0], "managed"))
		return managed_kind(argv[1]);
	dief("pools: unknown kind %s", argv[0]);
}
