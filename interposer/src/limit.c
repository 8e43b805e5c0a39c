// SPDX-License-Identifier: Apache-2.0
/*
 * Context limits that take device memory: the in-kernel malloc heap, the
 * printf FIFO, and the stack, which the driver reserves for every thread
 * the device can hold at once (a stack of 64 KiB on a card of 80 SMs is
 * 10 GiB). The context's footprint (GPUSLICE_CONTEXT_MIB) covers what a
 * context starts with; raising a limit is charged before the driver is
 * asked, settled on the value the driver reports back, and given back when
 * the limit is lowered or the context goes.
 */
#include "shim.h"

/* Resident threads assumed when the device will not say: a large card. */
#define GS_FALLBACK_RESIDENT_THREADS (132 * 2048)

static pthread_mutex_t limits_lock = PTHREAD_MUTEX_INITIALIZER;

/* Device bytes one unit of the limit takes; 0: it takes none. */
static uint64_t limit_unit(CUlimit limit, CUdevice dev)
{
	int sms, threads;

	switch (limit) {
	case CU_LIMIT_MALLOC_HEAP_SIZE:
	case CU_LIMIT_PRINTF_FIFO_SIZE:
		return 1;
	case CU_LIMIT_STACK_SIZE:
		if (gs_real.cuDeviceGetAttribute &&
		    !gs_real.cuDeviceGetAttribute(
			    &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) &&
		    !gs_real.cuDeviceGetAttribute(
			    &threads,
			    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
			    dev) &&
		    sms > 0 && threads > 0)
			return (uint64_t)sms * threads;
		return GS_FALLBACK_RESIDENT_THREADS;
	default:
		return 0;
	}
}

static uint64_t limit_key(CUcontext ctx, CUlimit limit)
{
	return ((uint64_t)(uintptr_t)ctx << 3) | (uint64_t)limit;
}

/*
 * With the limits lock held: sets limit from old to value, the vGPU
 * already charged held bytes for it past the context's footprint.
 * Returns the driver's answer and the bytes now held in *now.
 */
static CUresult set_locked(struct gs_card *c, CUlimit limit, size_t value,
			   size_t old, uint64_t unit, uint64_t held,
			   uint64_t *now)
{
	int64_t want;
	size_t got = value;
	uint64_t pre = 0;
	CUresult r;

	*now = held;
	/* A value whose memory does not even fit in 64 bits: no card has it. */
	if ((value > old && __builtin_mul_overflow(value - old, unit, &pre)) ||
	    pre > INT64_MAX || !gs_charge(c, pre, "cuCtxSetLimit"))
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = gs_real.cuCtxSetLimit(limit, value);
	if (r != CUDA_SUCCESS) {
		gs_uncharge(c, pre);
		return r;
	}
	gs_real.cuCtxGetLimit(&got, limit);	/* the driver may round up */
	want = (int64_t)held + ((int64_t)got - (int64_t)old) * (int64_t)unit;
	if (want < 0)
		want = 0;	/* below the start: the footprint's share */
	if ((uint64_t)want > held + pre &&
	    !gs_charge(c, want - held - pre, "cuCtxSetLimit")) {
		gs_real.cuCtxSetLimit(limit, old);
		gs_uncharge(c, pre);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if ((uint64_t)want < held + pre)
		gs_uncharge(c, held + pre - want);
	*now = want;
	return r;
}

GS_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	__typeof__(&cuCtxSetLimit) real = REAL(cuCtxSetLimit);
	struct gs_alloc a = { .kind = GS_LIMIT };
	struct gs_card *c;
	uint64_t unit, now;
	CUcontext ctx;
	CUdevice dev;
	size_t old;
	CUresult r;

	if (!gs_enabled() || !gs_real.cuCtxGetLimit ||
	    !(c = gs_current_card(&ctx)) ||
	    gs_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
	    !(unit = limit_unit(limit, dev)))
		return real(limit, value);
	/* The value it changes from is read under the lock, or two threads
	 * would each settle from the same old value. */
	pthread_mutex_lock(&limits_lock);
	if (gs_real.cuCtxGetLimit(&old, limit) != CUDA_SUCCESS) {
		pthread_mutex_unlock(&limits_lock);
		return real(limit, value);
	}
	a.key = limit_key(ctx, limit);
	if (!gs_track_take(GS_LIMIT, a.key, &a)) {
		a.card = c;
		a.ctx = ctx;
	}
	r = set_locked(c, limit, value, old, unit, a.bytes, &now);
	a.bytes = now;
	if (a.bytes)
		gs_track_add(&a);
	pthread_mutex_unlock(&limits_lock);
	return r;
}

void gs_limits_before_fork(void)
{
	pthread_mutex_lock(&limits_lock);
}

void gs_limits_after_fork_parent(void)
{
	pthread_mutex_unlock(&limits_lock);
}

void gs_limits_after_fork_child(void)
{
	pthread_mutex_init(&limits_lock, NULL);
}
