// SPDX-License-Identifier: Apache-2.0
/*
 * devopen: one open through one of libc's open calls, as the driver opens
 * its device nodes (O_RDWR | O_CLOEXEC), or creating a file (the mode
 * argument). The shim wraps every one of them (src/devopen.c): an NVIDIA
 * node's open attaches the process first. errno is set to EXDEV before
 * the call, so that what the call leaves in it on success shows.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

/* Fortified callers' entry points (glibc declares them only then). */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

static int by(const char *how, const char *path, int flags, mode_t mode)
{
	if (!strcmp(how, "open"))
		return open(path, flags, mode);
	if (!strcmp(how, "open64"))
		return open64(path, flags, mode);
	if (!strcmp(how, "openat"))
		return openat(AT_FDCWD, path, flags, mode);
	if (!strcmp(how, "openat64"))
		return openat64(AT_FDCWD, path, flags, mode);
	/* These take no mode: glibc aborts on O_CREAT or O_TMPFILE. */
	if (mode)
		dief("devopen: %s takes no mode", how);
	if (!strcmp(how, "__open_2"))
		return __open_2(path, flags);
	if (!strcmp(how, "__open64_2"))
		return __open64_2(path, flags);
	if (!strcmp(how, "__openat_2"))
		return __openat_2(AT_FDCWD, path, flags);
	if (!strcmp(how, "__openat64_2"))
		return __openat64_2(AT_FDCWD, path, flags);
	dief("devopen: no open call %s", how);
}

/* devopen <how> <path|-> [creat|tmpfile] */
int cmd_devopen(int argc, char **argv)
{
	/* "-": a NULL path, which the kernel answers (EFAULT). */
	const char *path = argc > 1 && strcmp(argv[1], "-") ? argv[1] : NULL;
	int flags = O_RDWR | O_CLOEXEC, fd, err;
	mode_t mode = 0;
	struct stat st;

	if (argc < 2 || argc > 3)
		dief("usage: devopen <how> <path|-> [creat|tmpfile]");
	if (argc > 2 && !strcmp(argv[2], "creat")) {
		flags = O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC;
		mode = 0640;
	} else if (argc > 2 && !strcmp(argv[2], "tmpfile")) {
		flags = O_TMPFILE | O_RDWR | O_CLOEXEC;
		mode = 0600;
	} else if (argc > 2) {
		dief("devopen: %s is neither creat nor tmpfile", argv[2]);
	}
	umask(0);
	errno = EXDEV;
	fd = by(argv[0], path, flags, mode);
	err = errno;
	printf("ok=%d\nerrno=%d\n", fd >= 0, err);
	if (fd >= 0 && mode && fstat(fd, &st) == 0)
		printf("mode=%o\n", (unsigned int)(st.st_mode & 07777));
	if (fd >= 0)
		close(fd);
	return 0;
}
