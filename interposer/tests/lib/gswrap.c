// SPDX-License-Identifier: Apache-2.0
/*
 * libgswrap.so: a second preloaded library that wraps libc's malloc and
 * puts the way UCX's memory hooks, profilers and other interposers do:
 * each wrapper finds the function it wraps with dlsym(RTLD_NEXT, name),
 * counts the call and forwards it. Loaded after the shim it asks the
 * shim's dlsym, which must answer as libc would for gswrap itself (the
 * next definition after gswrap); answered as if asked from the shim, it
 * would get its own wrapper back and recurse.
 *
 * gswrap_count(name) and gswrap_next(name) (found with dlsym) tell a test
 * program how many calls went through and which object the wrapped
 * function came from. gswrap_default(name) is dlsym(RTLD_DEFAULT, name)
 * asked from here: loaded with RTLD_LOCAL, gswrap's own names are in its
 * scope only, where libc's RTLD_DEFAULT looks for its caller.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define GSWRAP_EXPORT __attribute__((visibility("default")))

GSWRAP_EXPORT unsigned long gswrap_count(const char *name);
GSWRAP_EXPORT const char *gswrap_next(const char *name);
GSWRAP_EXPORT void *gswrap_default(const char *name);

enum { WRAP_MALLOC, WRAP_PUTS, NWRAP };

static const char *const names[NWRAP] = { "malloc", "puts" };
static void *next[NWRAP];
static unsigned long calls[NWRAP];
/*
 * Set while this thread resolves a function: whatever dlsym allocates
 * meanwhile is refused (glibc copes) rather than sent to a NULL pointer.
 */
static __thread bool resolving;

static void die(const char *what, const char *name)
{
	char buf[256];
	int n;

	n = snprintf(buf, sizeof(buf), "gswrap: dlsym(RTLD_NEXT, \"%s\") %s\n",
		     name, what);
	if (n > 0 && write(STDERR_FILENO, buf, (size_t)n) < 0)
		_exit(3);
	abort();
}

/* Whether fn is defined in this library. */
static bool is_ours(void *fn)
{
	Dl_info mine, its;

	return dladdr((void *)is_ours, &mine) && dladdr(fn, &its) &&
	       mine.dli_fbase == its.dli_fbase;
}

/* The next definition of names[i] after this library, found once. */
static void *resolve(int i)
{
	void *fn = __atomic_load_n(&next[i], __ATOMIC_ACQUIRE);

	if (fn)
		return fn;
	resolving = true;
	fn = dlsym(RTLD_NEXT, names[i]);
	resolving = false;
	if (!fn)
		die("found nothing", names[i]);
	/* Our own wrapper back: calling it would recurse until the stack ends. */
	if (is_ours(fn))
		die("returned gswrap's own wrapper", names[i]);
	__atomic_store_n(&next[i], fn, __ATOMIC_RELEASE);
	return fn;
}

GSWRAP_EXPORT void *malloc(size_t size)
{
	void *(*real)(size_t);

	if (resolving)
		return NULL;
	real = (void *(*)(size_t))resolve(WRAP_MALLOC);
	__atomic_add_fetch(&calls[WRAP_MALLOC], 1, __ATOMIC_RELAXED);
	return real(size);
}

GSWRAP_EXPORT int puts(const char *s)
{
	int (*real)(const char *);

	real = (int (*)(const char *))resolve(WRAP_PUTS);
	__atomic_add_fetch(&calls[WRAP_PUTS], 1, __ATOMIC_RELAXED);
	return real(s);
}

static int wrap_index(const char *name)
{
	for (int i = 0; i < NWRAP; i++) {
		if (!strcmp(names[i], name))
			return i;
	}
	return -1;
}

unsigned long gswrap_count(const char *name)
{
	int i = wrap_index(name);

	return i < 0 ? 0 : __atomic_load_n(&calls[i], __ATOMIC_RELAXED);
}

const char *gswrap_next(const char *name)
{
	int i = wrap_index(name);
	Dl_info info;
	void *fn;

	if (i < 0)
		return "(not wrapped)";
	fn = __atomic_load_n(&next[i], __ATOMIC_ACQUIRE);
	if (!fn)
		return "(not called yet)";
	if (!dladdr(fn, &info) || !info.dli_fname)
		return "(unknown object)";
	return info.dli_fname;
}

void *gswrap_default(const char *name)
{
	static unsigned long lookups;
	void *fn = dlsym(RTLD_DEFAULT, name);

	/* Work after the call: it is not a tail jump, the caller is gswrap. */
	__atomic_add_fetch(&lookups, 1, __ATOMIC_RELAXED);
	return fn;
}
