// SPDX-License-Identifier: Apache-2.0
/*
 * Kernel launches. With no compute quota they go straight to the driver:
 * the wrappers exist so that every launch path, by symbol or through
 * cuGetProcAddress, already runs through the shim, and so the cost of that
 * is measured (benchmarks). Gating on time slices plugs in here.
 */
#include "shim.h"

GS_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx,
				  unsigned int gy, unsigned int gz,
				  unsigned int bx, unsigned int by,
				  unsigned int bz, unsigned int shmem,
				  CUstream s, void **params, void **extra)
{
	return REAL(cuLaunchKernel)(f, gx, gy, gz, bx, by, bz, shmem, s,
				    params, extra);
}

GS_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx,
				       unsigned int gy, unsigned int gz,
				       unsigned int bx, unsigned int by,
				       unsigned int bz, unsigned int shmem,
				       CUstream s, void **params, void **extra)
{
	return REAL(cuLaunchKernel_ptsz)(f, gx, gy, gz, bx, by, bz, shmem, s,
					 params, extra);
}

GS_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config,
				    CUfunction f, void **params, void **extra)
{
	return REAL(cuLaunchKernelEx)(config, f, params, extra);
}

GS_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config,
					 CUfunction f, void **params,
					 void **extra)
{
	return REAL(cuLaunchKernelEx_ptsz)(config, f, params, extra);
}

GS_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx,
					     unsigned int gy, unsigned int gz,
					     unsigned int bx, unsigned int by,
					     unsigned int bz,
					     unsigned int shmem, CUstream s,
					     void **params)
{
	return REAL(cuLaunchCooperativeKernel)(f, gx, gy, gz, bx, by, bz,
					       shmem, s, params);
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
	return REAL(cuLaunchCooperativeKernel_ptsz)(f, gx, gy, gz, bx, by, bz,
						    shmem, s, params);
}
