// SPDX-License-Identifier: Apache-2.0
/*
 * Attaching before the driver touches a device node.
 *
 * With the guard on (pkg/guard), a process of a vGPU container gets EPERM
 * from every open, ioctl and mmap of an NVIDIA device node unless it is
 * attached: it holds a /dev/gpuslice file whose ATTACH succeeded. The shim
 * attaches a card when it first needs the card's ledger (gs_card_ledger),
 * but the real driver opens /dev/nvidiactl and /dev/nvidia<N> and issues
 * its first ioctls in cuInit, at the first context and in nvmlInit, before
 * any call the shim wraps. So libc's open family is wrapped here: an open
 * of a path under /dev/nvidia (nvidiactl, nvidia<N>, nvidia-uvm,
 * nvidia-uvm-tools, nvidia-modeset, nvidia-caps/...) first attaches the
 * process to every card of its configuration through gs_card_ledger (so
 * that the ledger is the one later allocations use), and then opens. In
 * module mode that is an ATTACH on /dev/gpuslice; in file mode the open
 * of the card's ledger file in the container's ledger directory, which is
 * the guard's proof there.
 *
 * - Only on such an open: a process that never opens a node (a shell, a
 *   tool of the container) never attaches, and spends none of the vGPU's
 *   attached files (GPUSLICE_MAX_VGPU_FILES). Any other path costs a
 *   compare of its first bytes.
 * - Not without a vGPU configured (no cap): there is nothing to attach
 *   to.
 * - An attach that fails does not stop the open, which the guard then
 *   refuses (fail closed); gs_card_ledger has said why, once. errno is the
 *   open's alone.
 * - Attaching opens /dev/gpuslice through the shim's own open (the shim is
 *   linked -Bsymbolic): that path passes straight through, and a thread
 *   already attaching never attaches again.
 * - Once per process and card: gs_card_ledger keeps the ledger (or that it
 *   failed); a forked child attaches a file of its own at the fork
 *   (card.c's fork handler, registered with the cards, since this may run
 *   before the shim has loaded the driver and registered the others).
 *
 * Only absolute paths are recognised (the driver opens its nodes by
 * absolute path): a node opened relative to a directory descriptor, by
 * another spelling (/dev//nvidia0), through fopen (glibc's stdio opens
 * with its internal open, which no preloaded library sees; the driver
 * needs descriptors for ioctl and mmap, and opens its nodes with open), or
 * by a raw system call is not attached for, and the guard refuses it.
 * That fails closed: the process cannot use the node, it gets no GPU
 * unisolated.
 */
#undef _FORTIFY_SOURCE	/* glibc's fortified open() inlines would clash */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <sys/types.h>

#include "shim.h"

/* What fortified callers (_FORTIFY_SOURCE) call when open takes no mode. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

#define NV_PREFIX "/dev/nvidia"

/*
 * Whether path names an NVIDIA device node. Neither inlined nor analysed
 * across the call: glibc declares open's path nonnull, and a compiler
 * that believed it would drop the NULL check, while a NULL path must
 * still reach the kernel (EFAULT) as it does without the shim.
 */
__attribute__((noipa)) static bool nv_node(const char *path)
{
	return path && path[0] == '/' &&
	       !strncmp(path, NV_PREFIX, sizeof(NV_PREFIX) - 1);
}

/* Set while this thread attaches: its own opens pass straight through. */
static __thread bool attaching;

static void attach_first(const char *path)
{
	int saved;

	if (__builtin_expect(!nv_node(path), 1) || attaching)
		return;
	saved = errno;
	attaching = true;
	gs_cards_attach();
	attaching = false;
	errno = saved;
}

/* O_CREAT and O_TMPFILE take a mode (the caller passed one then). */
static bool needs_mode(int flags)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

#define MODE_ARG(flags, mode)                                 \
	do {                                                  \
		if (needs_mode(flags)) {                      \
			va_list ap_;                          \
			va_start(ap_, flags);                 \
			(mode) = va_arg(ap_, mode_t);         \
			va_end(ap_);                          \
		}                                             \
	} while (0)

/*
 * The next definition of name after the shim's (libc's), found once. The
 * shim's dlsym leaves RTLD_NEXT to libc, which answers for the shim.
 */
static void *next_fn(void **slot, const char *name)
{
	void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (!fn) {
		fn = dlsym(RTLD_NEXT, name);
		if (fn)
			__atomic_store_n(slot, fn, __ATOMIC_RELEASE);
		else
			gs_err("cannot find libc's %s: it fails", name);
	}
	return fn;
}

/* Calls the next name of type type with the arguments; ENOSYS if none. */
#define NEXT(type, name, ...)                                          \
	({                                                             \
		static void *slot_;                                    \
		type fn_ = (type)next_fn(&slot_, name);                \
		fn_ ? fn_(__VA_ARGS__) : (errno = ENOSYS, -1);         \
	})

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*open2_fn)(const char *, int);
typedef int (*openat2_fn)(int, const char *, int);

GS_EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	MODE_ARG(flags, mode);
	attach_first(path);
	return NEXT(open_fn, "open", path, flags, mode);
}

GS_EXPORT int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;

	MODE_ARG(flags, mode);
	attach_first(path);
	return NEXT(open_fn, "open64", path, flags, mode);
}

GS_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;

	MODE_ARG(flags, mode);
	attach_first(path);
	return NEXT(openat_fn, "openat", dirfd, path, flags, mode);
}

GS_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;

	MODE_ARG(flags, mode);
	attach_first(path);
	return NEXT(openat_fn, "openat64", dirfd, path, flags, mode);
}

GS_EXPORT int __open_2(const char *path, int flags)
{
	attach_first(path);
	return NEXT(open2_fn, "__open_2", path, flags);
}

GS_EXPORT int __open64_2(const char *path, int flags)
{
	attach_first(path);
	return NEXT(open2_fn, "__open64_2", path, flags);
}

GS_EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	attach_first(path);
	return NEXT(openat2_fn, "__openat_2", dirfd, path, flags);
}

GS_EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
	attach_first(path);
	return NEXT(openat2_fn, "__openat64_2", dirfd, path, flags);
}
