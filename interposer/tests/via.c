// SPDX-License-Identifier: Apache-2.0
/*
 * GSTEST_PROCADDR=v1|v2: gstest reaches the driver as static cudart does.
 * Every entry point of cu that the driver hands out by base name (the
 * table of gpuslice/procaddr.def) is taken from cuGetProcAddress (v1) or
 * cuGetProcAddress_v2 (v2), asked for the very variant dlsym found: the
 * base name, the CUDA version that introduced that variant and, for a
 * _ptsz one, the per-thread-default-stream flag. What the driver does not
 * hand out (a CUDA 12 driver and a CUDA 13 call) becomes NULL, as it
 * would for such an application. Any other test then runs through that
 * lookup unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpuslice/procaddr.h"

static const struct cu_proc *proc_of(const char *symbol)
{
	for (int i = 0; i < CU_NPROCS; i++) {
		if (!strcmp(cu_procs[i].symbol, symbol))
			return &cu_procs[i];
	}
	return NULL;
}

/* The function cuGetProcAddress(_v2) gives for symbol's variant, or NULL. */
static void *lookup(const char *symbol, bool v2)
{
	CUdriverProcAddressQueryResult st;
	const struct cu_proc *p = proc_of(symbol);
	cuuint64_t flags;
	void *fn = NULL;
	CUresult rc;

	if (!p)
		return NULL;
	flags = p->ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
			: CU_GET_PROC_ADDRESS_DEFAULT;
	rc = v2 ? cu.cuGetProcAddress_v2(p->base, &fn, p->version, flags, &st)
		: cu.cuGetProcAddress(p->base, &fn, p->version, flags);
	return rc == CUDA_SUCCESS ? fn : NULL;
}

void load_via_procaddr(void)
{
	const char *v = getenv("GSTEST_PROCADDR");
	int n = 0;
	bool v2;

	if (!v || !*v)
		return;
	if (strcmp(v, "v1") && strcmp(v, "v2"))
		dief("GSTEST_PROCADDR=%s: expected v1 or v2", v);
	v2 = !strcmp(v, "v2");
	if (v2)
		NEED(cuGetProcAddress_v2);
	else
		NEED(cuGetProcAddress);
#define X(name)                                                        \
	do {                                                           \
		if (proc_of(#name)) {                                  \
			cu.name = (__typeof__(cu.name))lookup(#name, v2); \
			n++;                                           \
		}                                                      \
	} while (0);
	GSTEST_CU_FUNCS(X)
#undef X
	notef("GSTEST_PROCADDR=%s: %d entry points from cuGetProcAddress%s", v,
	      n, v2 ? "_v2" : "");
}
