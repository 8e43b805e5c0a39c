/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bytes of one channel of a CUDA array element, by format: what the
 * shim charges for an array before the driver reports its real size, and
 * what the simulated driver allocates.
 */
#ifndef GPUSLICE_CUDA_ARRAY_H
#define GPUSLICE_CUDA_ARRAY_H

#include "cuda.h"

/* 0 for a format not declared in cuda.h. */
static inline unsigned int cu_array_format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	}
	return 0;
}

#endif /* GPUSLICE_CUDA_ARRAY_H */
