// SPDX-License-Identifier: Apache-2.0
/*
 * The stream-ordered allocator. A pool reserves device memory from the
 * card and hands out pieces of it; what occupies the card is the pool's
 * reservation, so that is what the ledger holds for it. Before the driver
 * may grow a pool the shim charges the growth an allocation can cause;
 * afterwards the charge is settled to the reservation the driver reports.
 * Frees are stream ordered and the driver shrinks pools at synchronisation
 * points and trims, so the shim settles pools there too, and before it
 * refuses any charge.
 */
#include <string.h>

#include "shim.h"

#define GS_MAX_POOLS 64
#define GS_POOL_GRANULE (2ULL * GS_MIB)

struct gs_pool {
	CUmemoryPool pool;	/* NULL: free slot */
	struct gs_card *card;	/* NULL: not device memory */
	bool managed;		/* unified memory: every allocation refused */
	uint64_t charged;	/* bytes the ledger holds for the reservation */
	bool dirty;		/* may hold less than charged (atomic) */
	int live;		/* allocations not yet freed (atomic) */
	/*
	 * Destroyed with allocations still live: the driver keeps the memory
	 * until they are freed, and so does the charge.
	 */
	bool zombie;
	bool destroying;	/* cuMemPoolDestroy under way: not buried yet */
	pthread_mutex_t lock;
};

static struct gs_pool pools[GS_MAX_POOLS] = {
	[0 ... GS_MAX_POOLS - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER }
};
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr)
{
	cuuint64_t v = 0;

	gs_real.cuMemPoolGetAttribute(pool, attr, &v);
	return v;
}

/*
 * The record of pool, created on first sight as pc classifies it (pc NULL:
 * only looked up); NULL when unknown or the table is full.
 */
static struct gs_pool *pool_get(CUmemoryPool pool,
				const struct gs_pool_class *pc)
{
	struct gs_pool *free_slot = NULL, *found = NULL;

	pthread_mutex_lock(&pools_lock);
	for (int i = 0; i < GS_MAX_POOLS && !found; i++) {
		if (pools[i].pool == pool && !pools[i].zombie)
			found = &pools[i];
		else if (!pools[i].pool && !free_slot)
			free_slot = &pools[i];
	}
	if (!found && free_slot && pc) {
		found = free_slot;
		found->pool = pool;
		found->card = pc->kind == GS_POOL_DEVICE ?
				      gs_card_for_device(pc->dev) : NULL;
		found->managed = pc->kind == GS_POOL_MANAGED;
		found->charged = 0;
		found->dirty = false;
		found->live = 0;
		found->zombie = false;
		found->destroying = false;
	}
	pthread_mutex_unlock(&pools_lock);
	if (!found && pc)
		gs_err("more than %d memory pools: allocations from a new pool are refused",
		       GS_MAX_POOLS);
	return found;
}

void gs_pool_note(CUmemoryPool pool, const struct gs_pool_class *pc)
{
	pool_get(pool, pc);
}

/* The record of pool, classified on first sight (dev: the current device). */
static struct gs_pool *pool_find(CUmemoryPool pool, CUdevice dev)
{
	struct gs_pool *p = pool_get(pool, NULL);
	struct gs_pool_class pc;

	if (p)
		return p;
	gs_pool_classify(pool, dev, &pc);
	return pool_get(pool, &pc);
}

/* Brings the charge to the reservation; the pool's lock is held. */
static void settle(struct gs_pool *p)
{
	uint64_t reserved = pool_attr(p->pool,
				      CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);

	if (reserved < p->charged) {
		gs_uncharge(p->card, p->charged - reserved);
		p->charged = reserved;
	} else if (reserved > p->charged) {
		/* The driver grew the pool past the estimate. */
		if (gs_charge(p->card, reserved - p->charged, "memory pool"))
			p->charged = reserved;
		else
			gs_warn("a memory pool holds %llu bytes more than its vGPU could be charged",
				(unsigned long long)(reserved - p->charged));
	}
	/* Frees still queued on some stream shrink it later: stay dirty. */
	__atomic_store_n(&p->dirty, reserved != 0, __ATOMIC_RELAXED);
}

/* Drops a zombie whose last allocation is gone, with its charge. */
static void bury(struct gs_pool *p)
{
	if (__atomic_load_n(&p->live, __ATOMIC_RELAXED) > 0)
		return;
	gs_uncharge(p->card, p->charged);
	p->charged = 0;
	p->zombie = false;
	__atomic_store_n(&p->dirty, false, __ATOMIC_RELAXED);
	p->pool = NULL;
}

void gs_pools_reconcile(struct gs_card *card)
{
	gs_pending_settle();
	gs_graph_mem_reconcile();
	for (int i = 0; i < GS_MAX_POOLS; i++) {
		struct gs_pool *p = &pools[i];

		if (!__atomic_load_n(&p->dirty, __ATOMIC_RELAXED) ||
		    (card && p->card != card))
			continue;
		/* A pool busy allocating settles itself when it is done. */
		if (pthread_mutex_trylock(&p->lock))
			continue;
		if (p->zombie && !p->destroying) {
			/* The table lock comes first, so never wait for it. */
			if (!pthread_mutex_trylock(&pools_lock)) {
				bury(p);
				pthread_mutex_unlock(&pools_lock);
			}
		} else if (!p->zombie && p->pool && p->card) {
			settle(p);
		}
		pthread_mutex_unlock(&p->lock);
	}
}

void gs_pool_freed(const struct gs_alloc *a, bool freed)
{
	struct gs_pool *p = a->aux;

	if (!freed) {
		gs_track_add(a);
		return;
	}
	/* No pool lock: this runs from inside other pools' critical sections. */
	__atomic_sub_fetch(&p->live, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&p->dirty, true, __ATOMIC_RELAXED);
}

/* One of the two allocation entry points, with its arguments. */
struct async_alloc {
	CUdeviceptr *dptr;
	size_t size;
	CUmemoryPool pool;	/* NULL: the device's current pool */
	CUstream stream;
	bool ptsz;
	__typeof__(&cuMemAllocAsync) alloc;
	__typeof__(&cuMemAllocFromPoolAsync) alloc_from_pool;
};

static CUresult call(const struct async_alloc *a)
{
	if (a->alloc)
		return a->alloc(a->dptr, a->size, a->stream);
	return a->alloc_from_pool(a->dptr, a->size, a->pool, a->stream);
}

/* The growth an allocation may cause: what the pool lacks, in granules. */
static uint64_t growth(struct gs_pool *p, size_t size)
{
	uint64_t reserved, used, spare;

	reserved = pool_attr(p->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
	used = pool_attr(p->pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
	spare = reserved > used ? reserved - used : 0;
	if (size <= spare)
		return 0;
	return (size - spare + GS_POOL_GRANULE - 1) / GS_POOL_GRANULE *
	       GS_POOL_GRANULE;
}

/* An allocation from a pool of unified memory: refused. */
static CUresult managed_alloc(const struct async_alloc *a)
{
	if (a->alloc)
		return gs_managed_refused("cuMemAllocAsync from a managed current pool (cudaMallocAsync)");
	return gs_managed_refused("cuMemAllocFromPoolAsync from a managed pool (cudaMallocFromPoolAsync)");
}

static CUresult pool_alloc(struct async_alloc *a)
{
	struct gs_pool *p;
	CUcontext ctx;
	CUdevice dev;
	CUresult r;
	uint64_t need;

	/*
	 * Under stream capture the allocation is a node of the graph, with
	 * no memory until the graph runs: graph.c charges it then. The
	 * allocation is made in its stream's context, current or not (no
	 * such context: the driver refuses it).
	 */
	if (!gs_enabled() || !a->dptr || !a->size ||
	    gs_captured(a->stream, a->ptsz) ||
	    !gs_stream_device(a->stream, a->ptsz, &ctx, &dev))
		return call(a);
	if (!a->pool) {
		r = gs_real.cuDeviceGetMemPool(&a->pool, dev);
		if (r != CUDA_SUCCESS)
			return r;	/* never allocate uncharged */
	}
	p = pool_find(a->pool, dev);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (p->managed)
		return managed_alloc(a);
	if (!p->card)
		return call(a);
	pthread_mutex_lock(&p->lock);
	need = growth(p, a->size);
	if (!gs_charge(p->card, need, "cuMemAllocAsync (pool growth)")) {
		pthread_mutex_unlock(&p->lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	p->charged += need;
	r = call(a);
	settle(p);
	if (r == CUDA_SUCCESS)
		__atomic_add_fetch(&p->live, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&p->lock);
	if (r == CUDA_SUCCESS)
		gs_track_add(&(struct gs_alloc){ .kind = GS_ASYNC,
						 .key = *a->dptr,
						 .card = p->card, .ctx = ctx,
						 .aux = p });
	return r;
}

GS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize,
				   CUstream hStream)
{
	struct async_alloc a = { dptr, bytesize, NULL, hStream, false,
				 REAL(cuMemAllocAsync), NULL };

	return pool_alloc(&a);
}

GS_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
					CUstream hStream)
{
	struct async_alloc a = { dptr, bytesize, NULL, hStream, true,
				 REAL(cuMemAllocAsync_ptsz), NULL };

	return pool_alloc(&a);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
					   CUmemoryPool pool, CUstream hStream)
{
	struct async_alloc a = { dptr, bytesize, pool, hStream, false, NULL,
				 REAL(cuMemAllocFromPoolAsync) };

	if (!pool)
		return a.alloc_from_pool(dptr, bytesize, pool, hStream);
	return pool_alloc(&a);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
						size_t bytesize,
						CUmemoryPool pool,
						CUstream hStream)
{
	struct async_alloc a = { dptr, bytesize, pool, hStream, true, NULL,
				 REAL(cuMemAllocFromPoolAsync_ptsz) };

	if (!pool)
		return a.alloc_from_pool(dptr, bytesize, pool, hStream);
	return pool_alloc(&a);
}

/*
 * A stream-ordered free: the record is taken before the driver is asked
 * (the address may be reused once freed) and settled once the stream has
 * passed the free. Under stream capture the free is a node of the graph,
 * carried out when the graph runs, if ever: the record and its charge
 * stay (a graph allocation has none; graph.c charges graph memory).
 */
static CUresult free_async(__typeof__(&cuMemFreeAsync) real, CUdeviceptr dptr,
			   CUstream stream, bool ptsz)
{
	struct gs_alloc a;
	CUresult r;

	if (!gs_enabled() || gs_captured(stream, ptsz) ||
	    (!gs_track_take(GS_ASYNC, dptr, &a) &&
	     !gs_track_take(GS_LINEAR, dptr, &a)))
		return real(dptr, stream);
	r = real(dptr, stream);
	if (r == CUDA_SUCCESS)
		gs_pending_add(&a, stream, ptsz);
	else
		gs_track_add(&a);
	return r;
}

GS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(REAL(cuMemFreeAsync), dptr, hStream, false);
}

GS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(REAL(cuMemFreeAsync_ptsz), dptr, hStream, true);
}

GS_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool,
				   const CUmemPoolProps *props)
{
	__typeof__(&cuMemPoolCreate) real = REAL(cuMemPoolCreate);
	struct gs_pool_class pc;
	CUresult r;

	if (!gs_enabled())
		return real(pool, props);
	if (props && props->allocType == CU_MEM_ALLOCATION_TYPE_MANAGED)
		return gs_managed_refused("cuMemPoolCreate of a managed pool (cudaMemPoolCreate)");
	r = real(pool, props);
	if (r != CUDA_SUCCESS)
		return r;
	/* Pools of host memory are recorded too, so they are never charged. */
	gs_pool_classify_at(*pool, &props->location, props->allocType, &pc);
	pool_get(*pool, &pc);
	return r;
}

/*
 * The record is retired before the driver is asked: once destroyed, the
 * handle may come back from another thread's cuMemPoolCreate, which must
 * not find the old record. It is restored if the driver refuses.
 */
static struct gs_pool *retire(CUmemoryPool pool)
{
	struct gs_pool *found = NULL;

	pthread_mutex_lock(&pools_lock);
	for (int i = 0; i < GS_MAX_POOLS && !found; i++) {
		struct gs_pool *p = &pools[i];

		if (p->pool != pool || p->zombie)
			continue;
		pthread_mutex_lock(&p->lock);
		p->zombie = true;
		p->destroying = true;
		pthread_mutex_unlock(&p->lock);
		found = p;
	}
	pthread_mutex_unlock(&pools_lock);
	return found;
}

GS_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	__typeof__(&cuMemPoolDestroy) real = REAL(cuMemPoolDestroy);
	struct gs_pool *p;
	CUresult r;

	if (!gs_enabled())
		return real(pool);
	p = retire(pool);
	r = real(pool);
	if (!p)
		return r;
	pthread_mutex_lock(&pools_lock);
	pthread_mutex_lock(&p->lock);
	p->destroying = false;
	if (r != CUDA_SUCCESS) {
		p->zombie = false;	/* still the application's pool */
	} else {
		/* Gone now unless allocations of it are live: at their end. */
		__atomic_store_n(&p->dirty, true, __ATOMIC_RELAXED);
		bury(p);
	}
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&pools_lock);
	return r;
}

GS_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	CUresult r = REAL(cuMemPoolTrimTo)(pool, minBytesToKeep);

	if (r == CUDA_SUCCESS && gs_enabled())
		gs_pools_reconcile(NULL);
	return r;
}

/* Synchronisation points: where the driver releases pool memory. */
static CUresult synced(CUresult r)
{
	if (r == CUDA_SUCCESS && gs_enabled())
		gs_pools_reconcile(NULL);
	return r;
}

GS_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
	return synced(REAL(cuStreamSynchronize)(hStream));
}

GS_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	return synced(REAL(cuStreamSynchronize_ptsz)(hStream));
}

GS_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
	return synced(REAL(cuEventSynchronize)(hEvent));
}

GS_EXPORT CUresult cuCtxSynchronize(void)
{
	return synced(REAL(cuCtxSynchronize)());
}

void gs_pools_before_fork(void)
{
	pthread_mutex_lock(&pools_lock);
	for (int i = 0; i < GS_MAX_POOLS; i++)
		pthread_mutex_lock(&pools[i].lock);
}

void gs_pools_after_fork_parent(void)
{
	for (int i = GS_MAX_POOLS - 1; i >= 0; i--)
		pthread_mutex_unlock(&pools[i].lock);
	pthread_mutex_unlock(&pools_lock);
}

void gs_pools_after_fork_child(void)
{
	memset(pools, 0, sizeof(pools));
	for (int i = 0; i < GS_MAX_POOLS; i++)
		pthread_mutex_init(&pools[i].lock, NULL);
	pthread_mutex_init(&pools_lock, NULL);
}
