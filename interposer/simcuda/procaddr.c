// SPDX-License-Identifier: Apache-2.0
/*
 * cuGetProcAddress. Callers ask by BASE name ("cuMemAlloc") and CUDA
 * version; the driver picks the ABI variant ("cuMemAlloc_v2") that version
 * was built against, and the per-thread-default-stream variant ("_ptsz")
 * when asked to. The choice is gpuslice/procaddr.h's, over the one table
 * in gpuslice/procaddr.def, which the shim uses too.
 *
 * Like the real driver, the library is linked -Bsymbolic: the table holds
 * this library's own functions, never a preloaded interposer's, so an
 * interposer must wrap what cuGetProcAddress returns itself.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/procaddr.h"
#include "sim.h"

/*
 * The driver's own functions, in the order of cu_procs; and, for callers
 * that must not rely on what cuGetProcAddress returns being the exported
 * symbol (a real driver hands out internal entry points), a private
 * trampoline per function: SIMCUDA_PROCADDR=private returns those.
 */
static void *const public_fns[] = {
#define CU_PROC(base, sym, ver, ptsz) (void *)&sym,
#include "gpuslice/procaddr.def"
#undef CU_PROC
};

/*
 * One trampoline per table row, named by its line in procaddr.def: a
 * symbol may be the answer for more than one base name.
 */
#define TRAMP_NAME2(sym, line) sim_private_##sym##_##line
#define TRAMP_NAME(sym, line) TRAMP_NAME2(sym, line)
#define TRAMP_STR2(x) #x
#define TRAMP_STR(x) TRAMP_STR2(x)
#define CU_PROC(base, sym, ver, ptsz)					\
	__asm__(".pushsection .text\n\t.p2align 4\n\t"		\
		".globl " TRAMP_STR(TRAMP_NAME(sym, __LINE__)) "\n\t"	\
		".hidden " TRAMP_STR(TRAMP_NAME(sym, __LINE__)) "\n"	\
		TRAMP_STR(TRAMP_NAME(sym, __LINE__)) ":\n\t"		\
		"jmp *" #sym "@GOTPCREL(%rip)\n\t"			\
		".popsection");						\
	extern char TRAMP_NAME(sym, __LINE__)[];
#include "gpuslice/procaddr.def"
#undef CU_PROC

static void *const private_fns[] = {
#define CU_PROC(base, sym, ver, ptsz) (void *)TRAMP_NAME(sym, __LINE__),
#include "gpuslice/procaddr.def"
#undef CU_PROC
};

static int private_mode;

static void read_mode(void)
{
	const char *v = getenv("SIMCUDA_PROCADDR");

	if (!v || !*v || !strcmp(v, "exported"))
		return;
	if (!strcmp(v, "private"))
		private_mode = 1;
	else
		fprintf(stderr, "simcuda: SIMCUDA_PROCADDR=\"%s\": expected exported or private; using exported\n",
			v);
}

/* SIMCUDA_PROCADDR=private: hand out the trampolines. */
static int sim_procaddr_private(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, read_mode);
	return private_mode;
}

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion,
		       cuuint64_t flags, CUdriverProcAddressQueryResult *st)
{
	const cuuint64_t known_flags =
		CU_GET_PROC_ADDRESS_LEGACY_STREAM |
		CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	int drv = sim_driver_version();
	int i, known, in_driver;

	if (!symbol || !pfn || (flags & ~known_flags))
		return CUDA_ERROR_INVALID_VALUE;
	/* What is newer than this driver does not exist in it. */
	in_driver = cu_proc_pick(symbol, drv, flags, &known) >= 0;
	i = cu_proc_pick(symbol, cudaVersion < drv ? cudaVersion : drv, flags,
			 &known);
	*pfn = i < 0 ? NULL : sim_procaddr_private() ? private_fns[i] :
		public_fns[i];
	if (st)
		*st = i >= 0 ? CU_GET_PROC_ADDRESS_SUCCESS
		      : in_driver ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
			      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn,
				  int cudaVersion, cuuint64_t flags)
{
	return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn,
				     int cudaVersion, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *symbolStatus)
{
	return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
