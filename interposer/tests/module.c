// SPDX-License-Identifier: Apache-2.0
/*
 * gstest module <loader> [dlsym|procaddr]: a loaded image is charged to the
 * vGPU, exactly, before the driver loads it.
 *
 * The image is PTX text of IMAGE bytes (with its NUL; a file of IMAGE
 * bytes for the file loaders), which is what the shim charges for it. With
 * the device's primary context current and F free:
 *  1. the load leaves F - IMAGE free; a module takes IMAGE bytes of the
 *     device at once, a library when the context first needs one of its
 *     kernels (cuKernelGetFunction), as lazy loading has it;
 *  2. the rest, F - IMAGE, can be allocated; one byte more is refused;
 *  3. the unload gives IMAGE back: it can be allocated again;
 *  4. with IMAGE - 1 bytes free, the load is refused with
 *     CUDA_ERROR_OUT_OF_MEMORY, by the shim (the device has room);
 *  5. a load in a created context is given back with that context;
 *  6. a binary image (an ELF header) is not charged: with nothing free, its
 *     load fails with the driver's CUDA_ERROR_INVALID_IMAGE, not refused.
 * procaddr takes the loaders from cuGetProcAddress instead of dlsym.
 *
 * gstest unseen <global-bytes> [stack-bytes]: loads a module whose PTX
 * defines a .global array of global-bytes (the driver takes them, the shim
 * cannot see them); with stack-bytes, launches once a kernel whose .local
 * frame is that large, for which the driver grows CU_LIMIT_STACK_SIZE (and
 * takes its memory, unseen too), and prints stack_bytes=, what the grown
 * limit takes by the driver's own figures. Then prints ready, and for each
 * line N of stdin tries cuMemAlloc(N) and prints "alloc N rc=<name>
 * free=<cuMemGetInfo free>" (freeing it again), until stdin closes.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* The loaders and library calls, found with dlsym as frameworks do. */
#define LOADER_FUNCS(X)          \
	X(cuModuleLoad)          \
	X(cuModuleLoadDataEx)    \
	X(cuModuleLoadFatBinary) \
	X(cuLibraryLoadData)     \
	X(cuLibraryLoadFromFile) \
	X(cuLibraryUnload)       \
	X(cuLibraryGetKernel)    \
	X(cuKernelGetFunction)

static struct {
#define X(n) __typeof__(&n) n;
	LOADER_FUNCS(X)
#undef X
} ld;

static void load_loaders(void)
{
#define X(n) ld.n = (__typeof__(ld.n))dlsym(cuda_handle(), #n);
	LOADER_FUNCS(X)
#undef X
}

#define IMAGE (1 * MIB)

static const char head[] =
	".version 7.0\n.target sm_50\n.address_size 64\n"
	".visible .entry spin(.param .u64 ns)\n{\n\tret;\n}\n";

/* PTX text of len bytes with its NUL (len - 1 without), padded by comments. */
static char *ptx_of(size_t len, const char *extra)
{
	char *t = malloc(len);
	size_t n;

	if (!t)
		dief("out of memory");
	n = (size_t)snprintf(t, len, "%s%s", head, extra);
	while (n < len - 1) {
		size_t line = len - 1 - n < 80 ? len - 1 - n : 80;

		memset(t + n, ' ', line);
		t[n] = '/';
		if (line > 1)
			t[n + 1] = '/';
		t[n + line - 1] = '\n';
		n += line;
	}
	t[len - 1] = '\0';
	return t;
}

struct loaders {
	__typeof__(ld.cuModuleLoad) file;
	__typeof__(cu.cuModuleLoadData) data;
	__typeof__(ld.cuModuleLoadDataEx) dataex;
	__typeof__(ld.cuModuleLoadFatBinary) fatbinary;
	__typeof__(ld.cuLibraryLoadData) library;
	__typeof__(ld.cuLibraryLoadFromFile) libfile;
	__typeof__(cu.cuModuleUnload) unload;
	__typeof__(ld.cuLibraryUnload) libunload;
};

static void *procaddr(const char *base)
{
	void *fn = NULL;

	NEED(cuGetProcAddress);
	if (!CHECK(cu.cuGetProcAddress(base, &fn, 12080, 0)) || !fn)
		dief("cuGetProcAddress(%s) found nothing", base);
	return fn;
}

static void get_loaders(struct loaders *l, bool via_procaddr)
{
	if (!via_procaddr) {
		*l = (struct loaders){ ld.cuModuleLoad, cu.cuModuleLoadData,
				       ld.cuModuleLoadDataEx,
				       ld.cuModuleLoadFatBinary,
				       ld.cuLibraryLoadData,
				       ld.cuLibraryLoadFromFile,
				       cu.cuModuleUnload, ld.cuLibraryUnload };
		return;
	}
	l->file = procaddr("cuModuleLoad");
	l->data = procaddr("cuModuleLoadData");
	l->dataex = procaddr("cuModuleLoadDataEx");
	l->fatbinary = procaddr("cuModuleLoadFatBinary");
	l->library = procaddr("cuLibraryLoadData");
	l->libfile = procaddr("cuLibraryLoadFromFile");
	l->unload = procaddr("cuModuleUnload");
	l->libunload = procaddr("cuLibraryUnload");
}

struct run {
	struct loaders l;
	const char *loader;
	bool library;
	char *text;		/* IMAGE bytes with the NUL */
	char path[64];		/* the same text in a file, without the NUL */
	CUmodule mod;
	CUlibrary lib;
};

static CUresult load_image(struct run *r, const char *image)
{
	const char *n = r->loader;

	if (!strcmp(n, "data"))
		return r->l.data(&r->mod, image);
	if (!strcmp(n, "dataex"))
		return r->l.dataex(&r->mod, image, 0, NULL, NULL);
	if (!strcmp(n, "fatbinary"))
		return r->l.fatbinary(&r->mod, image);
	if (!strcmp(n, "file"))
		return r->l.file(&r->mod, r->path);
	if (!strcmp(n, "library"))
		return r->l.library(&r->lib, image, NULL, NULL, 0, NULL, NULL,
				    0);
	return r->l.libfile(&r->lib, r->path, NULL, NULL, 0, NULL, NULL, 0);
}

static CUresult load(struct run *r)
{
	return load_image(r, r->text);
}

static CUresult unload(struct run *r)
{
	return r->library ? r->l.libunload(r->lib) : r->l.unload(r->mod);
}

static uint64_t device_used(void)
{
	uint64_t u = 0;

	if (cu.simcudaDeviceUsed && cu.simcudaDeviceUsed(0, &u))
		failf("simcudaDeviceUsed failed");
	return u;
}

/* A library comes into the context when one of its kernels is needed. */
static void use_library(struct run *r, uint64_t before)
{
	CUkernel k;
	CUfunction f;

	if (!ld.cuLibraryGetKernel || !ld.cuKernelGetFunction)
		dief("the driver lacks cuLibraryGetKernel or cuKernelGetFunction");
	if (cu.simcudaDeviceUsed && device_used() != before)
		failf("%s: the library took device memory before any context used it",
		      r->loader);
	if (CHECK(ld.cuLibraryGetKernel(&k, r->lib, "spin")))
		CHECK(ld.cuKernelGetFunction(&f, k));
}

/* Steps 1 to 3: the load, the cap around it, the unload. */
static void fill_around(struct run *r, size_t F)
{
	uint64_t used0 = device_used();
	CUdeviceptr rest, again, one;

	if (!CHECK(load(r)))
		return;
	expect_free(F - IMAGE, "after the load");
	if (r->library)
		use_library(r, used0);
	if (cu.simcudaDeviceUsed && device_used() != used0 + IMAGE)
		failf("%s: the device holds %llu bytes more, want the image's %llu",
		      r->loader, (unsigned long long)(device_used() - used0),
		      (unsigned long long)IMAGE);
	if (!CHECK(cu.cuMemAlloc_v2(&rest, F - IMAGE)))
		return;
	expect_free(0, "filled with the image loaded");
	EXPECT(cu.cuMemAlloc_v2(&one, 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(unload(r));
	expect_free(IMAGE, "after the unload");
	if (CHECK(cu.cuMemAlloc_v2(&again, IMAGE)))
		CHECK(cu.cuMemFree_v2(again));
	CHECK(cu.cuMemFree_v2(rest));
	expect_free(F, "after the frees");
}

/* Step 4: a load that does not fit is refused before the driver. */
static void refused(struct run *r, size_t F)
{
	CUdeviceptr d;

	if (!CHECK(cu.cuMemAlloc_v2(&d, F - IMAGE + 1)))
		return;
	EXPECT(load(r), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(cu.cuMemFree_v2(d));
	expect_free(F, "after a refused load");
}

/* Step 5: the context takes its images' charges with it. */
static void with_context(struct run *r, CUcontext primary, size_t F)
{
	CUcontext c;

	if (!CHECK(cu.cuCtxCreate_v2(&c, 0, 0)))
		return;
	if (CHECK(load(r)) && r->library)
		use_library(r, device_used());
	CHECK(cu.cuCtxDestroy_v2(c));
	CHECK(cu.cuCtxSetCurrent(primary));
	expect_free(F, "after destroying the context the image loaded in");
	if (r->library)
		CHECK(unload(r));
}

/* Step 6: a binary image is not measured, hence not refused. */
static void binary(struct run *r, size_t F)
{
	static const char elf[64] = { 0x7f, 'E', 'L', 'F', 2, 1, 1 };
	CUdeviceptr d;
	CUresult rc;

	if (!strcmp(r->loader, "file") || !strcmp(r->loader, "libfile") ||
	    !CHECK(cu.cuMemAlloc_v2(&d, F)))
		return;
	rc = load_image(r, elf);
	if (rc == CUDA_ERROR_OUT_OF_MEMORY)
		failf("%s: a binary image was charged (refused on a full vGPU)",
		      r->loader);
	else if (rc == CUDA_SUCCESS)
		unload(r);
	CHECK(cu.cuMemFree_v2(d));
}

static void write_file(struct run *r)
{
	int fd;

	snprintf(r->path, sizeof(r->path), "/tmp/gstest-module-XXXXXX");
	fd = mkstemp(r->path);
	if (fd < 0 || write(fd, r->text, IMAGE) != (ssize_t)IMAGE ||
	    ftruncate(fd, IMAGE) || close(fd))
		dief("cannot write %s", r->path);
}

int cmd_module(int argc, char **argv)
{
	struct run r = { .loader = argc > 0 ? argv[0] : "" };
	static const char *const names[] = { "data", "dataex", "fatbinary",
					     "file", "library", "libfile" };
	CUcontext primary;
	bool known = false;
	size_t F;

	if (argc < 1 || argc > 2)
		dief("usage: module <loader> [dlsym|procaddr]");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		known |= !strcmp(r.loader, names[i]);
	if (!known)
		dief("module: unknown loader %s", r.loader);
	r.library = !strncmp(r.loader, "lib", 3);
	primary = open_primary(0);
	load_loaders();
	get_loaders(&r.l, argc > 1 && !strcmp(argv[1], "procaddr"));
	r.text = ptx_of(IMAGE, "");
	write_file(&r);
	F = mem_free();
	printf("free=%zu\nimage=%llu\n", F, (unsigned long long)IMAGE);
	if (F < 2 * IMAGE)
		dief("module: %zu bytes free, the test needs 2 MiB", F);
	fill_around(&r, F);
	refused(&r, F);
	with_context(&r, primary, F);
	binary(&r, F);
	unlink(r.path);
	free(r.text);
	close_primary(0);
	return finish("module");
}

/* Launches the deep kernel; prints what the stack it grew takes. */
static void grow_stack(CUmodule mod)
{
	size_t before = 0, after = 0;
	int sms = 0, threads = 0;
	CUfunction f;

	if (!CHECK(cu.cuModuleGetFunction(&f, mod, "deep")) ||
	    !CHECK(cu.cuCtxGetLimit(&before, CU_LIMIT_STACK_SIZE)) ||
	    !CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL)) ||
	    !CHECK(cu.cuCtxSynchronize()) ||
	    !CHECK(cu.cuCtxGetLimit(&after, CU_LIMIT_STACK_SIZE)) ||
	    !CHECK(cu.cuDeviceGetAttribute(
		    &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0)) ||
	    !CHECK(cu.cuDeviceGetAttribute(
		    &threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
		    0)))
		return;
	printf("stack_bytes=%llu\n", (unsigned long long)(after - before) *
					    (unsigned long long)sms *
					    (unsigned long long)threads);
}

int cmd_unseen(int argc, char **argv)
{
	char extra[256], line[64];
	CUmodule mod;
	CUdeviceptr d;
	char *text;
	int used;

	if (argc < 1 || argc > 2)
		dief("usage: unseen <global-bytes> [stack-bytes]");
	used = snprintf(extra, sizeof(extra),
		     ".visible .global .align 8 .b8 pad[%llu];\n",
		     (unsigned long long)parse_size(argv[0]));
	if (argc > 1)
		snprintf(extra + used, sizeof(extra) - (size_t)used,
			 ".visible .entry deep()\n{\n\t.local .align 8 .b8 __local_depot0[%llu];\n\tret;\n}\n",
			 (unsigned long long)parse_size(argv[1]));
	open_primary(0);
	text = ptx_of(4096, extra);
	if (!CHECK(cu.cuModuleLoadData(&mod, text)))
		return finish("unseen");
	if (argc > 1)
		grow_stack(mod);
	printf("ready\n");
	while (fgets(line, sizeof(line), stdin)) {
		const char *tok = strtok(line, " \n");
		uint64_t n;
		CUresult rc;

		if (!tok)
			continue;
		n = parse_size(tok);
		rc = cu.cuMemAlloc_v2(&d, n);

		printf("alloc %llu rc=%s free=%zu\n", (unsigned long long)n,
		       rcname(rc), mem_free());
		if (rc == CUDA_SUCCESS)
			CHECK(cu.cuMemFree_v2(d));
	}
	CHECK(cu.cuModuleUnload(mod));
	free(text);
	close_primary(0);
	return finish("unseen");
}

/*
 * gstest libgate: a library loaded before any context exists is charged
 * nothing (there is no card to charge it to), so even a process whose
 * every device allocation is refused reaches a launch: one of its kernels,
 * launched in the primary context, which only the compute gate can
 * refuse. Prints load.rc= (the library's) and launch.rc=.
 */
int cmd_libgate(int argc, char **argv)
{
	unsigned long long ns = 1000;
	void *params[] = { &ns };
	CUlibrary lib;
	CUkernel k;
	CUresult rc;
	char *text;

	(void)argv;
	if (argc)
		dief("usage: libgate");
	load_cuda();
	load_loaders();
	if (!ld.cuLibraryLoadData || !ld.cuLibraryGetKernel)
		dief("the driver lacks cuLibraryLoadData or cuLibraryGetKernel");
	CHECK(cu.cuInit(0));
	text = ptx_of(4096, "");
	rc = ld.cuLibraryLoadData(&lib, text, NULL, NULL, 0, NULL, NULL, 0);
	printf("load.rc=%s\n", rcname(rc));
	if (rc != CUDA_SUCCESS || !CHECK(ld.cuLibraryGetKernel(&k, lib, "spin")))
		return finish("libgate");
	open_primary(0);
	rc = cu.cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, params,
			       NULL);
	printf("launch.rc=%s\n", rcname(rc));
	CHECK(cu.cuCtxSynchronize());
	CHECK(ld.cuLibraryUnload(lib));
	free(text);
	close_primary(0);
	return finish("libgate");
}
