// SPDX-License-Identifier: Apache-2.0
/*
 * Kernel launches.
 *
 * Nothing is compiled or run: the launch contract of this simulator is
 * that kernelParams[0] points to a uint64_t holding the kernel's duration
 * in nanoseconds (for the launch calls of before CUDA 4.0, the first 8
 * bytes of the parameter buffer cuParamSetv filled), for which the kernel
 * occupies its device's engine (see simst_engine_book) once its stream
 * reaches it. On a capturing stream the launch becomes a kernel node of
 * the capture's graph instead (capture.c), with its duration read now, as
 * the driver copies a captured launch's parameters.
 *
 * A CUfunction runs in the current context; a CUkernel (module.c) in the
 * context of its stream, or the current one for the NULL stream.
 */
#include <string.h>

#include "sim.h"

#define SIM_MAX_BLOCK_THREADS 1024

struct launch {
	CUfunction f;
	unsigned int grid[3];
	unsigned int block[3];
	CUstream stream;
	void **params;
	void **extra;
	int ptds;
	int legacy_params;	/* cuLaunch*: the function's parameter buffer */
};

static int dims_ok(const struct launch *l)
{
	uint64_t threads = 1;

	for (int i = 0; i < 3; i++) {
		if (!l->grid[i] || !l->block[i])
			return 0;
		threads *= l->block[i];
		if (threads > SIM_MAX_BLOCK_THREADS)
			return 0;
	}
	return 1;
}

/* The duration the caller passes by the launch contract. */
static uint64_t duration(const struct launch *l, const struct sim_func *f)
{
	uint64_t d = 0;

	if (l->legacy_params) {
		if (f->param_size >= sizeof(d))
			memcpy(&d, f->params, sizeof(d));
		return d;
	}
	if (!l->params || l->extra || !l->params[0])
		return 0;
	return *(const uint64_t *)l->params[0];
}

/*
 * Entered: the launch's function and the context it runs in. A kernel of a
 * library runs in its stream's context (the current one for the special
 * streams); a function in the current context.
 */
static CUresult launch_target(const struct launch *l, struct sim_func **f,
			      struct sim_ctx **ctx)
{
	struct sim_stream *st;
	int special = !l->stream || l->stream == CU_STREAM_LEGACY ||
		      l->stream == CU_STREAM_PER_THREAD;

	*ctx = sim_ctx_current();
	if ((*f = sim_handle_get(l->f, SH_FUNC)) != NULL)
		return *ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	if ((*f = sim_handle_get(l->f, SH_KERNEL)) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!special) {
		st = sim_handle_get(l->stream, SH_STREAM);
		if (!st)
			return CUDA_ERROR_INVALID_HANDLE;
		*ctx = st->ctx;
	}
	if (!*ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	/* Lazy loading: the library comes into the context now. */
	return sim_kernel_load(*f, *ctx);
}

static CUresult launch(const struct launch *l)
{
	struct sim_stream *st;
	struct sim_func *f;
	struct sim_op *op;
	struct sim_ctx *c;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = launch_target(l, &f, &c);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	/* kernelParams and extra are mutually exclusive, as documented. */
	if (!dims_ok(l) || (l->params && l->extra))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(l->stream, l->ptds, c, &st);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	if (sim_capture_redirect(st, &rc)) {
		if (rc == CUDA_SUCCESS)
			rc = sim_capture_kernel(st, duration(l, f));
		return sim_leave_rc(rc);
	}
	rc = sim_stack_grow(st->ctx, f->stack);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	op = sim_op_new(OP_KERNEL);
	if (!op)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	op->dev = st->ctx->dev;
	op->arg = duration(l, f);
	sim_stream_push(st, op);
	return sim_leave_rc(CUDA_SUCCESS);
}

#define LAUNCH_ARGS(ptds_)						\
	{ .f = f, .grid = { gridDimX, gridDimY, gridDimZ },		\
	  .block = { blockDimX, blockDimY, blockDimZ },		\
	  .stream = hStream, .params = kernelParams, .ptds = (ptds_) }

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX,
				unsigned int gridDimY, unsigned int gridDimZ,
				unsigned int blockDimX, unsigned int blockDimY,
				unsigned int blockDimZ,
				unsigned int sharedMemBytes, CUstream hStream,
				void **kernelParams, void **extra)
{
	struct launch l = LAUNCH_ARGS(0);

	(void)sharedMemBytes;
	l.extra = extra;
	return launch(&l);
}

SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
				     unsigned int gridDimY,
				     unsigned int gridDimZ,
				     unsigned int blockDimX,
				     unsigned int blockDimY,
				     unsigned int blockDimZ,
				     unsigned int sharedMemBytes,
				     CUstream hStream, void **kernelParams,
				     void **extra)
{
	struct launch l = LAUNCH_ARGS(1);

	(void)sharedMemBytes;
	l.extra = extra;
	return launch(&l);
}

static CUresult launch_ex(const CUlaunchConfig *cfg, CUfunction f,
			  void **kernelParams, void **extra, int ptds)
{
	struct launch l = { .f = f, .params = kernelParams, .extra = extra,
			    .ptds = ptds };

	if (!cfg)
		return CUDA_ERROR_INVALID_VALUE;
	l.grid[0] = cfg->gridDimX;
	l.grid[1] = cfg->gridDimY;
	l.grid[2] = cfg->gridDimZ;
	l.block[0] = cfg->blockDimX;
	l.block[1] = cfg->blockDimY;
	l.block[2] = cfg->blockDimZ;
	l.stream = cfg->hStream;
	return launch(&l);
}

SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
				  void **kernelParams, void **extra)
{
	return launch_ex(config, f, kernelParams, extra, 0);
}

SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config,
				       CUfunction f, void **kernelParams,
				       void **extra)
{
	return launch_ex(config, f, kernelParams, extra, 1);
}

SIM_API CUresult cuLaunchCooperativeKernel(CUfunction f,
					   unsigned int gridDimX,
					   unsigned int gridDimY,
					   unsigned int gridDimZ,
					   unsigned int blockDimX,
					   unsigned int blockDimY,
					   unsigned int blockDimZ,
					   unsigned int sharedMemBytes,
					   CUstream hStream,
					   void **kernelParams)
{
	struct launch l = LAUNCH_ARGS(0);

	(void)sharedMemBytes;
	return launch(&l);
}

SIM_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f,
						unsigned int gridDimX,
						unsigned int gridDimY,
						unsigned int gridDimZ,
						unsigned int blockDimX,
						unsigned int blockDimY,
						unsigned int blockDimZ,
						unsigned int sharedMemBytes,
						CUstream hStream,
						void **kernelParams)
{
	struct launch l = LAUNCH_ARGS(1);

	(void)sharedMemBytes;
	return launch(&l);
}

/*
 * Each entry launched in turn on its stream; on one simulated machine the
 * devices' engines are independent, so this is as cooperative as it gets.
 * Every stream must belong to the current context (one device, as a
 * single-entry list has it).
 */
SIM_API CUresult cuLaunchCooperativeKernelMultiDevice(
	CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices,
	unsigned int flags)
{
	(void)flags;
	if (!launchParamsList || !numDevices)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < numDevices; i++) {
		const CUDA_LAUNCH_PARAMS *p = &launchParamsList[i];
		struct launch l = {
			.f = p->function,
			.grid = { p->gridDimX, p->gridDimY, p->gridDimZ },
			.block = { p->blockDimX, p->blockDimY, p->blockDimZ },
			.stream = p->hStream, .params = p->kernelParams,
		};
		CUresult rc = launch(&l);

		if (rc != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}

/*
 * The launch calls of before CUDA 4.0: the block shape and the parameters
 * were set on the function first (module.c). cuLaunch is a 1x1 grid; the
 * synchronous two run on the legacy stream.
 */
static CUresult launch_legacy(CUfunction f, int w, int h, CUstream s)
{
	struct launch l = { .f = f, .grid = { (unsigned int)w,
			    (unsigned int)h, 1 }, .stream = s,
			    .legacy_params = 1 };
	struct sim_func *fn;
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	fn = sim_handle_get(f, SH_FUNC);
	if (fn)
		memcpy(l.block, fn->block, sizeof(l.block));
	sim_leave_rc(CUDA_SUCCESS);
	if (!fn)
		return CUDA_ERROR_INVALID_HANDLE;
	if (w <= 0 || h <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(&l);
}

SIM_API CUresult cuLaunch(CUfunction f)
{
	return launch_legacy(f, 1, 1, CU_STREAM_LEGACY);
}

SIM_API CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
	return launch_legacy(f, grid_width, grid_height, CU_STREAM_LEGACY);
}

SIM_API CUresult cuLaunchGridAsync(CUfunction f, int grid_width,
				   int grid_height, CUstream hStream)
{
	return launch_legacy(f, grid_width, grid_height, hStream);
}
