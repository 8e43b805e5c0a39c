// SPDX-License-Identifier: Apache-2.0
/*
 * gstest procall: every entry point the shim wraps is what
 * cuGetProcAddress and cuGetProcAddress_v2 hand out, for every row of the
 * driver's version table (include/gpuslice/procaddr.def) naming it, with
 * the per-thread-stream flag for the _ptsz variants, and what dlsym on the
 * driver's handle gives for the row's symbol: the two ways a framework
 * reaches the driver land on the same wrapper. A row the driver does not
 * know (an older driver) is skipped and counted. Run under the shim
 * with SIMCUDA_PROCADDR=private, the driver hands out trampolines, and the
 * shim can only find its wrapper through the table by base name, version
 * and flags: a wrapped variant missing from the table goes unwrapped.
 *
 * Prints rows (those of a wrapped symbol), checked and unknown (the
 * driver lacks them).
 */
#include <dlfcn.h>

#include "common.h"
#include "gpuslice/procaddr.h"

int cmd_procall(int argc, char **argv)
{
	void *shim = dlopen("libgpuslice.so", RTLD_NOW | RTLD_NOLOAD);
	unsigned int rows = 0, checked = 0, unknown = 0;

	(void)argv;
	if (argc)
		dief("usage: procall");
	if (!shim)
		dief("procall: the shim is not loaded (LD_PRELOAD)");
	load_cuda();
	NEED(cuGetProcAddress);
	NEED(cuGetProcAddress_v2);
	CHECK(cu.cuInit(0));
	for (int i = 0; i < CU_NPROCS; i++) {
		const struct cu_proc *p = &cu_procs[i];
		cuuint64_t flags = p->ptsz ?
			CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
		CUdriverProcAddressQueryResult st;
		void *hook = dlsym(shim, p->symbol), *f1 = NULL, *f2 = NULL;
		void *f3 = dlsym(cuda_handle(), p->symbol);

		if (!hook)
			continue;	/* not wrapped */
		rows++;
		if (!f3 || cu.cuGetProcAddress(p->base, &f1, p->version,
					       flags) == CUDA_ERROR_NOT_FOUND) {
			unknown++;
			continue;
		}
		CHECK(cu.cuGetProcAddress_v2(p->base, &f2, p->version, flags,
					     &st));
		if (f1 != hook || f2 != hook || f3 != hook)
			failf("procall: %s for %s at %d%s: got %p, %p and by dlsym %p; the shim's is %p",
			      p->symbol, p->base, p->version,
			      p->ptsz ? " per-thread" : "", f1, f2, f3, hook);
		else
			checked++;
	}
	printf("rows=%u\n", rows);
	printf("checked=%u\n", checked);
	printf("unknown=%u\n", unknown);
	return finish("procall");
}
