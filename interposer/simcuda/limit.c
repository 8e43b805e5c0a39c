// SPDX-License-Identifier: Apache-2.0
/*
 * Context limits. Three of them take device memory: the in-kernel malloc
 * heap, the printf FIFO, and the stack, which is reserved for every thread
 * the device can hold at once. A context's footprint (SIMCUDA_CONTEXT_MIB)
 * covers the defaults; raising a limit takes the difference from the
 * device, as a real driver does, and lowering it gives it back. A launch
 * raises the stack for a kernel whose frame needs more (sim_stack_grow).
 */
#include "sim.h"

static const size_t defaults[SIM_NLIMITS] = {
	[CU_LIMIT_STACK_SIZE] = 1024,
	[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20,
	[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20,
	[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2,
	[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048,
	[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64,
	[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0,
};

/* Device bytes the limits of c take past the defaults. */
static uint64_t limit_bytes(const size_t *v)
{
	uint64_t bytes = 0;

	for (int l = 0; l <= CU_LIMIT_MALLOC_HEAP_SIZE; l++) {
		uint64_t per = l == CU_LIMIT_STACK_SIZE ?
				       (uint64_t)SIM_SMS * SIM_THREADS_PER_SM :
				       1;

		if (v[l] > defaults[l])
			bytes += (v[l] - defaults[l]) * per;
	}
	return bytes;
}

void sim_limits_reset(struct sim_ctx *c)
{
	if (c->limit_bytes)
		sim_uncharge(c->dev, c->limit_bytes);
	c->limit_bytes = 0;
	for (int l = 0; l < SIM_NLIMITS; l++)
		c->limits[l] = defaults[l];
}

/* Entered: sets limit of c to value, taking or giving back its memory. */
static CUresult set_limit(struct sim_ctx *c, CUlimit limit, size_t value)
{
	size_t v[SIM_NLIMITS];
	uint64_t bytes;
	CUresult rc;

	for (int l = 0; l < SIM_NLIMITS; l++)
		v[l] = c->limits[l];
	/* The driver rounds the stack up to a multiple of 16 bytes. */
	v[limit] = limit == CU_LIMIT_STACK_SIZE ? (value + 15) / 16 * 16 :
						  value;
	bytes = limit_bytes(v);
	if (bytes > c->limit_bytes) {
		rc = sim_charge(c->dev, bytes - c->limit_bytes);
		if (rc != CUDA_SUCCESS)
			return rc;
	} else if (bytes < c->limit_bytes) {
		sim_uncharge(c->dev, c->limit_bytes - bytes);
	}
	c->limit_bytes = bytes;
	c->limits[limit] = v[limit];
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	CUresult rc = sim_enter();
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	c = sim_ctx_current();
	if (!c)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	if ((unsigned int)limit >= SIM_NLIMITS)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	return sim_leave_rc(set_limit(c, limit, value));
}

/*
 * A launch of a kernel whose frame needs stack bytes per thread: "the
 * driver automatically increases the per-thread stack size for each kernel
 * launch as needed" and does not lower it after (cuCtxSetLimit), taking
 * the memory for every resident thread. Entered.
 */
CUresult sim_stack_grow(struct sim_ctx *c, uint64_t stack)
{
	if (stack <= c->limits[CU_LIMIT_STACK_SIZE])
		return CUDA_SUCCESS;
	return set_limit(c, CU_LIMIT_STACK_SIZE, stack) == CUDA_SUCCESS ?
		       CUDA_SUCCESS : CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
}

SIM_API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	CUresult rc = sim_enter();
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	c = sim_ctx_current();
	if (!c)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	if (!pvalue || (unsigned int)limit >= SIM_NLIMITS)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	*pvalue = c->limits[limit];
	return sim_leave_rc(CUDA_SUCCESS);
}
