// SPDX-License-Identifier: Apache-2.0
/*
 * Finding the real driver and handing out the shim's wrappers.
 *
 * An application reaches a driver entry point in one of three ways, and
 * each must land in the shim:
 *  - it links libcuda.so.1: LD_PRELOAD puts the shim's exports first;
 *  - it dlopen()s libcuda.so.1 and dlsym()s (PyTorch, NVML users): the
 *    shim's dlsym() returns its wrapper when the symbol, looked up on a
 *    library's handle, resolves into the real driver; every other lookup
 *    is libc's, as if the shim were not there (dlsym_entry.S);
 *  - it asks cuGetProcAddress / _v2 (static cudart): the shim lets the real
 *    driver pick the version and per-thread-stream variant, then swaps the
 *    function it returned for the wrapper of that same function.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "gpuslice/procaddr.h"
#include "shim.h"

struct gs_real gs_real;

struct gs_entry {
	const char *name;
	void *hook;	/* NULL for entry points called but not wrapped */
	void **real;
	bool nvml;
};

static const struct gs_entry entries[] = {
#define CU_HOOK(n) { #n, (void *)n, (void **)&gs_real.n, false },
#define CU_CALL(n) { #n, NULL, (void **)&gs_real.n, false },
#define NVML_HOOK(n) { #n, (void *)n, (void **)&gs_real.n, true },
#define NVML_CALL(n) { #n, NULL, (void **)&gs_real.n, true },
#include "hooks.def"
#undef CU_HOOK
#undef CU_CALL
#undef NVML_HOOK
#undef NVML_CALL
};

#define NENTRIES (sizeof(entries) / sizeof(entries[0]))

typedef void *(*dlsym_fn)(void *, const char *);

/*
 * The libc dlsym behind the shim's own. dlvsym is not wrapped, so asking
 * it cannot recurse into the shim's dlsym.
 */
static dlsym_fn libc_dlsym(void)
{
	/* Where dlsym moved into libc; aarch64's base; x86-64's base. */
	static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.17",
						"GLIBC_2.2.5" };
	static dlsym_fn fn;
	dlsym_fn f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);

	for (size_t i = 0; !f && i < sizeof(versions) / sizeof(versions[0]);
	     i++)
		f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
	if (f)
		__atomic_store_n(&fn, f, __ATOMIC_RELEASE);
	return f;
}

/* Set on the thread loading a real library, whose constructors may call us. */
static __thread bool loading;
/* Set while NVML's loading pulls libcuda in: a container may have NVML only. */
static __thread bool for_nvml;

static void load_library(const char *path, bool nvml)
{
	void *h;

	loading = true;
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		gs_log(for_nvml && !nvml ? GS_LOG_DEBUG : GS_LOG_ERROR,
		       "cannot load the real driver library %s: %s", path,
		       dlerror());
	} else {
		dlsym_fn real = libc_dlsym();

		for (size_t i = 0; real && i < NENTRIES; i++) {
			if (entries[i].nvml == nvml)
				*entries[i].real = real(h, entries[i].name);
		}
	}
	loading = false;
}

static void load_cuda_once(void)
{
	load_library(gs_config()->real_libcuda, false);
	gs_fork_handlers_once();
}

/*
 * The CUDA driver comes first even for NVML: the fork handlers must be
 * registered after the driver's own, whichever library a process uses
 * first.
 */
static void load_nvml_once(void)
{
	for_nvml = true;
	gs_load_cuda();
	for_nvml = false;
	load_library(gs_config()->real_libnvml, true);
}

void gs_load_cuda(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	if (!loading)
		pthread_once(&once, load_cuda_once);
}

void gs_load_nvml(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	if (!loading)
		pthread_once(&once, load_nvml_once);
}

void *gs_hook_by_name(const char *name)
{
	for (size_t i = 0; i < NENTRIES; i++) {
		if (entries[i].hook && !strcmp(entries[i].name, name))
			return entries[i].hook;
	}
	return NULL;
}

void *gs_hook_for_real(void *real_fn)
{
	for (size_t i = 0; i < NENTRIES; i++) {
		if (entries[i].hook && *entries[i].real == real_fn)
			return entries[i].hook;
	}
	return NULL;
}

/*
 * Whether addr lies in a real driver library, known by its file name
 * (libcuda.so*, libnvidia-ml.so*, or the configured paths): a function the
 * driver exports, or the return address of a call the driver made.
 */
static bool in_driver(void *addr)
{
	const struct gs_config *cfg = gs_config();
	const char *base;
	Dl_info info;

	if (!dladdr(addr, &info) || !info.dli_fname)
		return false;
	base = strrchr(info.dli_fname, '/');
	base = base ? base + 1 : info.dli_fname;
	return !strncmp(base, "libcuda.so", 10) ||
	       !strncmp(base, "libnvidia-ml.so", 15) ||
	       !strcmp(info.dli_fname, cfg->real_libcuda) ||
	       !strcmp(info.dli_fname, cfg->real_libnvml);
}

/*
 * The wrapper that may answer a lookup, or NULL when libc's answer stands
 * as it is. Only a CUDA or NVML name the shim wraps, looked up on a
 * library's handle, can be answered with a wrapper. RTLD_NEXT and
 * RTLD_DEFAULT are libc's to answer for their caller (a wrapper of the
 * name after the caller is what RTLD_NEXT must find; RTLD_DEFAULT finds
 * the preloaded shim's export first anyway). The real driver's own lookups
 * are left alone too: a driver that forwards to an inner library (WSL2's
 * libcuda.so.1 stub, dlopen + dlsym of libcuda.so.1.1) would otherwise
 * forward the shim's call back into the shim. So are those made while the
 * shim loads the driver, whose answers fill gs_real.
 */
static void *hook_for_lookup(void *handle, const char *symbol, void *caller)
{
	void *hook;

	if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || !symbol || loading)
		return NULL;
	if (strncmp(symbol, "cu", 2) && strncmp(symbol, "nvml", 4))
		return NULL;
	hook = gs_hook_by_name(symbol);
	if (!hook || in_driver(caller))
		return NULL;
	return hook;
}

struct gs_dlsym_route gs_dlsym_route(void *handle, const char *symbol,
				     void *caller)
{
	dlsym_fn real = libc_dlsym();
	struct gs_dlsym_route r = { .jump = (void *)real };
	void *fn, *hook;

	if (!real) {
		/* Never jump to NULL: say why every lookup fails. */
		gs_err("cannot find libc's dlsym (no known symbol version): dlsym(%s) fails",
		       symbol ? symbol : "NULL");
		return r;
	}
	hook = hook_for_lookup(handle, symbol, caller);
	if (!hook)
		return r;
	/* On a handle, libc's answer does not depend on who asks. */
	fn = real(handle, symbol);
	r.jump = NULL;
	r.value = fn && fn != hook && in_driver(fn) ? hook : fn;
	return r;
}

#if !defined(__x86_64__) && !defined(__aarch64__)
/*
 * No entry point in assembly here: libc's dlsym is called from C. Where
 * the compiler does not make that call a jump (nothing guarantees it),
 * libc answers RTLD_NEXT and RTLD_DEFAULT as if asked from the shim (the
 * README's Limits).
 */
GS_EXPORT void *dlsym(void *handle, const char *symbol)
{
	struct gs_dlsym_route r;

	r = gs_dlsym_route(handle, symbol, __builtin_return_address(0));
	if (r.jump)
		return ((dlsym_fn)r.jump)(handle, symbol);
	return r.value;
}
#endif

/*
 * Swaps a function the real driver handed out for the shim's wrapper of
 * it. By address first: the driver's exported function. A driver may hand
 * out an internal entry point instead, so then by what it must have
 * picked: the variant of that base name for that version and those flags.
 */
static void wrap_proc(const char *symbol, int version, cuuint64_t flags,
		      void **pfn)
{
	void *hook;
	int i, known;

	if (!pfn || !*pfn)
		return;
	hook = gs_hook_for_real(*pfn);
	if (!hook && (i = cu_proc_pick(symbol, version, flags, &known)) >= 0)
		hook = gs_hook_by_name(cu_procs[i].symbol);
	if (hook) {
		gs_debug("cuGetProcAddress(%s, %d, %llu): wrapped", symbol,
			 version, (unsigned long long)flags);
		*pfn = hook;
	}
}

GS_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn,
				    int cudaVersion, cuuint64_t flags)
{
	CUresult r;

	gs_load_cuda();
	if (!gs_real.cuGetProcAddress)
		return CUDA_ERROR_NOT_FOUND;
	r = gs_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
	if (r == CUDA_SUCCESS)
		wrap_proc(symbol, cudaVersion, flags, pfn);
	return r;
}

GS_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn,
				       int cudaVersion, cuuint64_t flags,
				       CUdriverProcAddressQueryResult *status)
{
	CUresult r;

	gs_load_cuda();
	if (!gs_real.cuGetProcAddress_v2)
		return CUDA_ERROR_NOT_FOUND;
	r = gs_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags,
					status);
	if (r == CUDA_SUCCESS)
		wrap_proc(symbol, cudaVersion, flags, pfn);
	return r;
}
