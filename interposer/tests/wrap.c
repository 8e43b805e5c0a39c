// SPDX-License-Identifier: Apache-2.0
/*
 * wrap <bytes>: run with libgswrap.so preloaded next to the shim (before or
 * after it). malloc and puts must work, reach libc's functions and be
 * counted by the wrapper, and the shim's hooks must still hold the
 * allocation of bytes to the cap in the same process.
 *
 * Prints wrap.malloc and wrap.puts (the calls the wrapper counted around
 * one malloc and one puts of this program), next.malloc and next.puts
 * (the object each wrapped function came from) and alloc.rc.
 *
 * scope <libgswrap.so>: dlopen()s it RTLD_LOCAL and has it look up its own
 * gswrap_count with dlsym(RTLD_DEFAULT): libc searches the caller's scope,
 * which holds the library; the global scope does not. Prints
 * default.found (1 when the answer is the library's gswrap_count).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Where the allocation goes, so that the compiler keeps malloc and free. */
static void *volatile sink;

int cmd_wrap(int argc, char **argv)
{
	unsigned long (*count)(const char *);
	const char *(*next)(const char *);
	unsigned long m0, p0;
	CUdeviceptr d = 0;
	CUresult rc;

	if (argc != 1)
		dief("usage: wrap <bytes>");
	count = (__typeof__(count))dlsym(RTLD_DEFAULT, "gswrap_count");
	next = (__typeof__(next))dlsym(RTLD_DEFAULT, "gswrap_next");
	if (!count || !next)
		dief("libgswrap.so is not loaded (LD_PRELOAD)");
	m0 = count("malloc");
	p0 = count("puts");
	sink = malloc(4096);
	if (!sink)
		failf("wrap: malloc(4096) returned NULL");
	memset(sink, 1, 4096);
	free(sink);
	puts("wrap: puts reached libc");
	printf("wrap.malloc=%lu\nwrap.puts=%lu\n", count("malloc") - m0,
	       count("puts") - p0);
	printf("next.malloc=%s\nnext.puts=%s\n", next("malloc"), next("puts"));

	open_primary(0);
	rc = cu.cuMemAlloc_v2(&d, parse_size(argv[0]));
	printf("alloc.rc=%d\n", (int)rc);
	if (rc == CUDA_SUCCESS)
		CHECK(cu.cuMemFree_v2(d));
	close_primary(0);
	return finish("wrap");
}

int cmd_scope(int argc, char **argv)
{
	void *(*lookup)(const char *);
	void *h, *own;

	if (argc != 1)
		dief("usage: scope <libgswrap.so>");
	h = dlopen(argv[0], RTLD_NOW | RTLD_LOCAL);
	if (!h)
		dief("dlopen(%s): %s", argv[0], dlerror());
	lookup = (__typeof__(lookup))dlsym(h, "gswrap_default");
	own = dlsym(h, "gswrap_count");
	if (!lookup || !own)
		dief("%s is not libgswrap.so", argv[0]);
	if (dlsym(RTLD_DEFAULT, "gswrap_count"))
		dief("gswrap_count is in the global scope: preloaded?");
	printf("default.found=%d\n", lookup("gswrap_count") == own);
	dlclose(h);
	return finish("scope");
}
