// SPDX-License-Identifier: Apache-2.0
/*
 * Kernel launches: every launch path, by symbol or through
 * cuGetProcAddress, runs through the compute gate (gate.c) before the
 * driver. Where no card is gated (no module, memory vGPUs, policy 0) the
 * gate is one predictable branch; its cost is measured (benchmarks).
 */
#include "shim.h"

/* The gate's answer when it refuses, else the driver's. */
#define GATED(what, call)                                         \
	({                                                        \
		CUresult gate_rc_ = gs_gate(what);                \
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

	return GATED("cuLaunchKernel", real(f, gx, gy, gz, bx, by, bz, shmem,
					    s, params, extra));
}

GS_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx,
				       unsigned int gy, unsigned int gz,
				       unsigned int bx, unsigned int by,
				       unsigned int bz, unsigned int shmem,
				       CUstream s, void **params, void **extra)
{
	__typeof__(&cuLaunchKernel_ptsz) real = REAL(cuLaunchKernel_ptsz);

	return GATED("cuLaunchKernel", real(f, gx, gy, gz, bx, by, bz, shmem,
					    s, params, extra));
}

GS_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config,
				    CUfunction f, void **params, void **extra)
{
	__typeof__(&cuLaunchKernelEx) real = REAL(cuLaunchKernelEx);

	return GATED("cuLaunchKernelEx", real(config, f, params, extra));
}

GS_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config,
					 CUfunction f, void **params,
					 void **extra)
{
	__typeof__(&cuLaunchKernelEx_ptsz) real = REAL(cuLaunchKernelEx_ptsz);

	return GATED("cuLaunchKernelEx", real(config, f, params, extra));
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

	return GATED("cuLaunchCooperativeKernel",
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

	return GATED("cuLaunchCooperativeKernel",
		     real(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

/*
 * Several devices at once: gated by the current context's card when there
 * is one device, refused across several while any card is gated
 * (gs_gate_multi).
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
				  "cuLaunchCooperativeKernelMultiDevice");
	return r != CUDA_SUCCESS ? r :
				   real(launchParamsList, numDevices, flags);
}

/* A graph's kernels run in the slice its launch was let through in. */
GS_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	__typeof__(&cuGraphLaunch) real = REAL(cuGraphLaunch);

	return GATED("cuGraphLaunch", real(hGraphExec, hStream));
}

GS_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec,
				      CUstream hStream)
{
	__typeof__(&cuGraphLaunch_ptsz) real = REAL(cuGraphLaunch_ptsz);

	return GATED("cuGraphLaunch", real(hGraphExec, hStream));
}
