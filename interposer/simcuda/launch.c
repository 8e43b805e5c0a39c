// SPDX-License-Identifier: Apache-2.0
/*
 * Modules and kernel launches.
 *
 * A module image is PTX text; every ".entry NAME" in it becomes a function.
 * Nothing is compiled or run: the launch contract of this simulator is
 * that kernelParams[0] points to a uint64_t holding the kernel's duration
 * in nanoseconds, for which the kernel occupies its device's engine (see
 * simst_engine_run) once its stream reaches it.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define SIM_MAX_BLOCK_THREADS 1024

struct sim_func {
	struct sim_module *mod;
	char name[];
};

struct sim_module {
	int nfunc;
	struct sim_func **funcs;
};

static int name_char(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '$';
}

/*
 * Finds the next ".entry NAME" of text at or after *pos; returns the
 * name's length, 0 when there is none left.
 */
static size_t next_entry(const char *text, const char **pos,
			 const char **name)
{
	const char *p = *pos;

	while ((p = strstr(p, ".entry")) != NULL) {
		const char *q = p + 6;
		int starts = p == text || isspace((unsigned char)p[-1]);

		p = q;
		if (!starts || !isspace((unsigned char)*q))
			continue;
		while (isspace((unsigned char)*q))
			q++;
		*name = q;
		while (name_char(*q))
			q++;
		*pos = q;
		if (q > *name)
			return (size_t)(q - *name);
	}
	*pos = NULL;
	return 0;
}

static int add_func(struct sim_module *m, const char *name, size_t len)
{
	struct sim_func **v, *f;

	v = realloc(m->funcs, (size_t)(m->nfunc + 1) * sizeof(*v));
	if (!v)
		return -1;
	m->funcs = v;
	f = malloc(sizeof(*f) + len + 1);
	if (!f)
		return -1;
	f->mod = m;
	memcpy(f->name, name, len);
	f->name[len] = '\0';
	if (sim_handle_add(f, SH_FUNC, m, -1)) {
		free(f);
		return -1;
	}
	m->funcs[m->nfunc++] = f;
	return 0;
}

static void module_destroy(struct sim_module *m)
{
	for (int i = 0; i < m->nfunc; i++) {
		sim_handle_del(m->funcs[i]);
		free(m->funcs[i]);
	}
	free(m->funcs);
	free(m);
}

void sim_module_free(struct sim_entry *e)
{
	struct sim_module *m = (struct sim_module *)(uintptr_t)e->key;

	sim_table_del(&sim.handles, e);
	module_destroy(m);
}

static CUresult parse(struct sim_module *m, const char *text)
{
	const char *pos = text, *name = NULL;
	size_t len;

	while ((len = next_entry(text, &pos, &name)) != 0)
		if (add_func(m, name, len))
			return CUDA_ERROR_OUT_OF_MEMORY;
	return m->nfunc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	struct sim_module *m;
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!module || !image)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	m = calloc(1, sizeof(*m));
	if (!m)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	rc = parse(m, image);
	if (rc == CUDA_SUCCESS && sim_handle_add(m, SH_MODULE, c, c->dev))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc != CUDA_SUCCESS) {
		module_destroy(m);
		return sim_leave_rc(rc);
	}
	*module = (CUmodule)m;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuModuleUnload(CUmodule hmod)
{
	CUresult rc = sim_enter();
	struct sim_entry *e;

	if (rc != CUDA_SUCCESS)
		return rc;
	e = sim_handle_entry(hmod);
	if (!e || e->kind != SH_MODULE)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	sim_module_free(e);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod,
				     const char *name)
{
	CUresult rc = sim_enter();
	struct sim_module *m;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!hfunc || !name)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	m = sim_handle_get(hmod, SH_MODULE);
	if (!m)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	for (int i = 0; i < m->nfunc; i++) {
		if (!strcmp(m->funcs[i]->name, name)) {
			*hfunc = (CUfunction)m->funcs[i];
			return sim_leave_rc(CUDA_SUCCESS);
		}
	}
	return sim_leave_rc(CUDA_ERROR_NOT_FOUND);
}

struct launch {
	CUfunction f;
	unsigned int grid[3];
	unsigned int block[3];
	CUstream stream;
	void **params;
	void **extra;
	int ptds;
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
static uint64_t duration(const struct launch *l)
{
	if (!l->params || l->extra || !l->params[0])
		return 0;
	return *(const uint64_t *)l->params[0];
}

static CUresult launch(const struct launch *l)
{
	struct sim_stream *st;
	struct sim_op *op;
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_handle_get(l->f, SH_FUNC))
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	/* kernelParams and extra are mutually exclusive, as documented. */
	if (!dims_ok(l) || (l->params && l->extra))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = sim_stream_get(l->stream, l->ptds, c, &st);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	op = sim_op_new(OP_KERNEL);
	if (!op)
		return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
	op->dev = st->ctx->dev;
	op->arg = duration(l);
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

/* Graphs are not modelled: no executable graph exists to launch. */
static CUresult graph_launch(CUgraphExec hGraphExec)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	return sim_leave_rc(hGraphExec ? CUDA_ERROR_INVALID_HANDLE :
					 CUDA_ERROR_INVALID_VALUE);
}

SIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	(void)hStream;
	return graph_launch(hGraphExec);
}

SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	(void)hStream;
	return graph_launch(hGraphExec);
}
