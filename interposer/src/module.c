// SPDX-License-Identifier: Apache-2.0
/*
 * Modules and libraries. The driver places a loaded image's code and data
 * in device memory, outside the allocation calls. The shim charges what it
 * can measure of the image before the driver loads it:
 *
 *  - PTX text: its bytes, the terminating NUL included (a PTX file: its
 *    size). What the JIT makes of it, and the .global variables it
 *    declares, are not in that figure;
 *  - a binary image (a cubin, a fat binary, known by their magic numbers)
 *    is not measured: nothing is charged for it. NVIDIA does not publish
 *    the fat binary's layout, and a fat binary carries code for several
 *    architectures of which the driver loads one, lazily.
 *
 * What the driver really takes is found by the node agent, which reconciles
 * each vGPU's ledger with NVML's per-process figure every window and
 * charges the difference to the vGPU (nri-plugin/README.md).
 *
 * A module loads into the current context: it is charged to that context's
 * card and uncharged at cuModuleUnload or with the context. A library is
 * loaded into every context that uses it (lazily, by default): it is
 * charged once, to the card of the context current at its load, as that
 * context's copy, and uncharged at cuLibraryUnload or with that context;
 * with no context current nothing is charged.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim.h"

/* An ELF object (a cubin), a fat binary or its wrapper: not PTX text. */
static bool binary_image(const unsigned char *p)
{
	static const unsigned char magic[][4] = {
		{ 0x7f, 'E', 'L', 'F' },	/* ELF */
		{ 0x50, 0xed, 0x55, 0xba },	/* fat binary, 0xba55ed50 */
		{ 0xb1, 0x43, 0x62, 0x46 },	/* its wrapper, 0x466243b1 */
	};

	/* Byte by byte: a shorter text stops at its NUL, never read past. */
	for (size_t i = 0; i < sizeof(magic) / sizeof(magic[0]); i++) {
		size_t j = 0;

		while (j < 4 && p[j] == magic[i][j])
			j++;
		if (j == 4)
			return true;
	}
	return false;
}

/*
 * The bytes charged for an image in memory. One that is not binary is read
 * by the driver as NUL-terminated PTX, so measuring it as such stays within
 * what the driver itself reads.
 */
static uint64_t image_bytes(const void *image)
{
	if (!image || binary_image(image))
		return 0;
	return strlen(image) + 1;
}

/* The bytes charged for an image file: a PTX file's size. */
static uint64_t file_bytes(const char *path)
{
	unsigned char head[5] = { 0 };
	struct stat st;
	uint64_t bytes = 0;
	int fd;

	if (!path || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;	/* the driver will say why */
	if (!fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_size > 0 &&
	    pread(fd, head, 4, 0) >= 0 && !binary_image(head))
		bytes = (uint64_t)st.st_size;
	close(fd);
	return bytes;
}

/* A load in progress: what was charged, and to which card and context. */
struct load {
	struct gs_card *card;	/* NULL: nothing charged */
	CUcontext ctx;
	uint64_t bytes;
};

/* Charges a load of bytes; false when the cap refuses it. */
static bool load_begin(struct load *l, uint64_t bytes, const char *what)
{
	l->card = NULL;
	l->bytes = bytes;
	if (!gs_enabled() || !bytes)
		return true;
	l->card = gs_current_card(&l->ctx);
	return !l->card || gs_charge(l->card, bytes, what);
}

/* Records a loaded handle, or gives the charge back when the load failed. */
static CUresult load_end(const struct load *l, enum gs_kind kind,
			 const void *handle, CUresult r)
{
	if (!l->card)
		return r;
	if (r != CUDA_SUCCESS) {
		gs_uncharge(l->card, l->bytes);
		return r;
	}
	gs_track_add(&(struct gs_alloc){ .kind = kind,
					 .key = (uint64_t)(uintptr_t)handle,
					 .bytes = l->bytes, .card = l->card,
					 .ctx = l->ctx });
	return r;
}

/*
 * A loader hook's body: charges bytes (when out is not NULL) before the
 * driver loads, makes the driver's call, then records the handle it put in
 * *out, or gives the charge back when it failed. The handle is read only
 * after the call.
 */
#define LOAD(kind, out, bytes, what, call)				\
	do {								\
		struct load l_;						\
		CUresult r_;						\
									\
		if (!load_begin(&l_, (out) ? (bytes) : 0, what))	\
			return CUDA_ERROR_OUT_OF_MEMORY;		\
		r_ = (call);						\
		return load_end(&l_, kind,				\
				(out) ? (const void *)*(out) : NULL, r_); \
	} while (0)

GS_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
	__typeof__(&cuModuleLoad) real = REAL(cuModuleLoad);

	LOAD(GS_MODULE, module, file_bytes(fname), "cuModuleLoad",
	     real(module, fname));
}

GS_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	__typeof__(&cuModuleLoadData) real = REAL(cuModuleLoadData);

	LOAD(GS_MODULE, module, image_bytes(image), "cuModuleLoadData",
	     real(module, image));
}

GS_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
				      unsigned int numOptions,
				      CUjit_option *options,
				      void **optionValues)
{
	__typeof__(&cuModuleLoadDataEx) real = REAL(cuModuleLoadDataEx);

	LOAD(GS_MODULE, module, image_bytes(image), "cuModuleLoadDataEx",
	     real(module, image, numOptions, options, optionValues));
}

GS_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module,
					 const void *fatCubin)
{
	__typeof__(&cuModuleLoadFatBinary) real = REAL(cuModuleLoadFatBinary);

	LOAD(GS_MODULE, module, image_bytes(fatCubin), "cuModuleLoadFatBinary",
	     real(module, fatCubin));
}

GS_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
				     CUjit_option *jitOptions,
				     void **jitOptionsValues,
				     unsigned int numJitOptions,
				     CUlibraryOption *libraryOptions,
				     void **libraryOptionValues,
				     unsigned int numLibraryOptions)
{
	__typeof__(&cuLibraryLoadData) real = REAL(cuLibraryLoadData);

	LOAD(GS_LIBRARY, library, image_bytes(code), "cuLibraryLoadData",
	     real(library, code, jitOptions, jitOptionsValues, numJitOptions,
		  libraryOptions, libraryOptionValues, numLibraryOptions));
}

GS_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library,
					 const char *fileName,
					 CUjit_option *jitOptions,
					 void **jitOptionsValues,
					 unsigned int numJitOptions,
					 CUlibraryOption *libraryOptions,
					 void **libraryOptionValues,
					 unsigned int numLibraryOptions)
{
	__typeof__(&cuLibraryLoadFromFile) real = REAL(cuLibraryLoadFromFile);

	LOAD(GS_LIBRARY, library, file_bytes(fileName), "cuLibraryLoadFromFile",
	     real(library, fileName, jitOptions, jitOptionsValues,
		  numJitOptions, libraryOptions, libraryOptionValues,
		  numLibraryOptions));
}

/*
 * The record goes before the driver unloads: once it has, it may hand the
 * same handle to another thread's load. Put back if the driver refuses.
 */
static CUresult unload(enum gs_kind kind, const void *h,
		       CUresult (*real)(const void *h))
{
	struct gs_alloc a;
	bool had;
	CUresult r;

	if (!gs_enabled())
		return real(h);
	had = gs_track_take(kind, (uint64_t)(uintptr_t)h, &a);
	r = real(h);
	if (had && r == CUDA_SUCCESS)
		gs_uncharge(a.card, a.bytes);
	else if (had)
		gs_track_add(&a);
	return r;
}

static CUresult real_module_unload(const void *h)
{
	return gs_real.cuModuleUnload((CUmodule)(uintptr_t)h);
}

static CUresult real_library_unload(const void *h)
{
	return gs_real.cuLibraryUnload((CUlibrary)(uintptr_t)h);
}

GS_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
	REAL(cuModuleUnload);
	return unload(GS_MODULE, hmod, real_module_unload);
}

GS_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
	REAL(cuLibraryUnload);
	return unload(GS_LIBRARY, library, real_library_unload);
}
