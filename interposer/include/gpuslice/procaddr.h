/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which exported symbol cuGetProcAddress hands out for a base name, a CUDA
 * version and flags: the newest variant no newer than the version, the
 * per-thread-default-stream one when the flags ask for it and one exists.
 * The simulated driver answers with it; the shim uses it to recognise what
 * a real driver answered when its address is not the exported symbol's.
 */
#ifndef GPUSLICE_PROCADDR_H
#define GPUSLICE_PROCADDR_H

#include <string.h>

#include "cuda.h"

struct cu_proc {
	const char *base;
	const char *symbol;
	int version;
	int ptsz;
};

static const struct cu_proc cu_procs[] = {
#define CU_PROC(base, sym, ver, ptsz) { #base, #sym, ver, ptsz },
#include "procaddr.def"
#undef CU_PROC
};

#define CU_NPROCS ((int)(sizeof(cu_procs) / sizeof(cu_procs[0])))

/* Index of the newest variant of base with that ptsz usable at version. */
static inline int cu_proc_newest(const char *base, int version, int ptsz,
				 int *known)
{
	int best = -1;

	for (int i = 0; i < CU_NPROCS; i++) {
		const struct cu_proc *p = &cu_procs[i];

		if (strcmp(p->base, base))
			continue;
		*known = 1;
		if (p->ptsz != ptsz || p->version > version)
			continue;
		if (best < 0 || p->version > cu_procs[best].version)
			best = i;
	}
	return best;
}

/*
 * Index into cu_procs of what cuGetProcAddress(base, version, flags) gives,
 * or -1; *known says whether base exists at any version.
 */
static inline int cu_proc_pick(const char *base, int version,
			       cuuint64_t flags, int *known)
{
	int i = -1;

	*known = 0;
	if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
		i = cu_proc_newest(base, version, 1, known);
	if (i < 0)
		i = cu_proc_newest(base, version, 0, known);
	return i;
}

#endif /* GPUSLICE_PROCADDR_H */
