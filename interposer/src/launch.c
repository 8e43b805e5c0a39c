// SPDX-License-Identifier: Apache-2.0
/*
 * Kernel launches: every launch path, by symbol or through
 * cuGetProcAddress, runs through the compute gate (gate.c) before the
 * driver. Where no card is gated (no module, memory vGPUs, policy 0) the
 * gate is one predictable branch; its cost is measured (benchmarks).
 */
#include "shim.h"

/*
 * The gate's answer when it refuses, else the driver's. s is the launch's
 * stream (its context is the launch's card), ptsz whether 0 means the
 * per-thread stream.
 */
#define GATED(what, s, ptsz, call)                                \
	({                                                        \
		CUresult gate_rc_ = gs_gate(what, s, ptsz);       \
		__builtin_expect(gate_rc_ != CUDA_SUCCESS, 0) ?   \
			gate_rc_ : (call);                        \
	})

GS_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx,
				  unsigned int gy, unsigned int gz,
				  unsigned int bx, unsigned int by,
				  unsigned int bz, unsigned int shmem,
				  CUstream s, void **params, void **extra)
{
	__typeof__(&cuLaunchKernel) real = REAL(cuLaunchKernel);

	return GATED("cuLaunchKernel", s, false,
		     real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

GS_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx,
				       unsigned int gy, unsigned int gz,
				       unsigned int bx, unsigned int by,
				       unsigned int bz, unsigned int shmem,
				       CUstream s, void **params, void **extra)
{
	__typeof__(&cuLaunchKernel_ptsz) real = REAL(cuLaunchKernel_ptsz);

	return GATED("cuLaunchKernel", s, true,
		     real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

GS_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config,
				    CUfunction f, void **params, void **extra)
{
	__typeof__(&cuLaunchKernelEx) real = REAL(cuLaunchKernelEx);

	return GATED("cuLaunchKernelEx", config ? config->hStream : NULL, false,
		     real(config, f, params, extra));
}

GS_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config,
					 CUfunction f, void **params,
					 void **extra)
{
	__typeof__(&cuLaunchKernelEx_ptsz) real = REAL(cuLaunchKernelEx_ptsz);

	return GATED("cuLaunchKernelEx", config ? config->hStream : NULL, true,
		     real(config, f, params, extra));
}

GS_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx,
					     unsigned int gy, unsigned int gz,
					     unsigned int bx, unsigned int by,
					     unsigned int bz,
					     unsigned int shmem, CUstream s,
					     void **params)
{
	__typeof__(&cuLaunchCooperativeKernel) real =
		REAL(cuLaunchCooperativeKernel);

	return GATED("cuLaunchCooperativeKernel", s, false,
		     real(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

GS_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f,
						  unsigned int gx,
						  unsigned int gy,
						  unsigned int gz,
						  unsigned int bx,
						  unsigned int by,
						  unsigned int bz,
						  unsigned int shmem,
						  CUstream s, void **params)
{
	__typeof__(&cuLaunchCooperativeKernel_ptsz) real =
		REAL(cuLaunchCooperativeKernel_ptsz);

	return GATED("cuLaunchCooperativeKernel", s, true,
		     real(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

/*
 * Several devices at once: gated by its stream's card when there is one
 * device, refused across several while any card is gated (gs_gate_multi).
 */
GS_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(
	CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices,
	unsigned int flags)
{
	__typeof__(&cuLaunchCooperativeKernelMultiDevice) real =
		REAL(cuLaunchCooperativeKernelMultiDevice);
	CUresult r = CUDA_SUCCESS;

	if (__builtin_expect(__atomic_load_n(&gs_gate_mode, __ATOMIC_RELAXED) !=
				     GS_GATE_OFF,
			     0))
		r = gs_gate_multi(numDevices,
				  "cuLaunchCooperativeKernelMultiDevice",
				  numDevices && launchParamsList ?
					  launchParamsList[0].hStream : NULL);
	return r != CUDA_SUCCESS ? r :
				   real(launchParamsList, numDevices, flags);
}

/*
 * The launch calls of before CUDA 4.0 (block shape and parameters set on
 * the function first): cuLaunch and cuLaunchGrid run on the legacy
 * stream, cuLaunchGridAsync on its stream.
 */
GS_EXPORT CUresult cuLaunch(CUfunction f)
{
	__typeof__(&cuLaunch) real = REAL(cuLaunch);

	return GATED("cuLaunch", CU_STREAM_LEGACY, false, real(f));
}

GS_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width,
				int grid_height)
{
	__typeof__(&cuLaunchGrid) real = REAL(cuLaunchGrid);

	return GATED("cuLaunchGrid", CU_STREAM_LEGACY, false,
		     real(f, grid_width, grid_height));
}

GS_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width,
				     int grid_height, CUstream hStream)
{
	__typeof__(&cuLaunchGridAsync) real = REAL(cuLaunchGridAsync);

	return GATED("cuLaunchGridAsync", hStream, false,
		     real(f, grid_width, grid_height, hStream));
}
