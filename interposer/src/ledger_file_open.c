// SPDX-License-Identifier: Apache-2.0
/*
 * Creating, validating and opening the shared ledger file (the runtime is
 * ledger_file.c). A ledger is built whole under a temporary name and
 * published with link(), so no process ever maps a half-made one, and
 * concurrent creators agree on a single file.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ledger_file_layout.h"

static int lf_init_file(int fd, uint64_t cap_bytes)
{
	struct gs_lf_header *h;
	int err;

	/* Allocate now: a full tmpfs must fail here, not SIGBUS later. */
	err = posix_fallocate(fd, 0, GS_LF_SIZE);
	if (err)
		return -err;
	h = mmap(NULL, GS_LF_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return -errno;
	memset(h, 0, GS_LF_SIZE);
	memcpy(h->magic, GS_LF_MAGIC, sizeof(h->magic));
	h->version = GS_LF_VERSION;
	h->nslots = GS_LF_NSLOTS;
	h->size = GS_LF_SIZE;
	h->cap_bytes = cap_bytes;
	h->abi = GS_LF_ABI;
	h->mutex_size = sizeof(pthread_mutex_t);
	h->created_ns = gs_lf_clock_ns(CLOCK_REALTIME);
	err = gs_lf_robust_mutex_init(&h->lock.mutex);
	munmap(h, GS_LF_SIZE);
	return err;
}

static int lf_init_cb(int fd, const void *cap_bytes)
{
	return lf_init_file(fd, *(const uint64_t *)cap_bytes);
}

int gs_lf_robust_mutex_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t attr;
	int err;

	err = pthread_mutexattr_init(&attr);
	if (err)
		return -err;
	err = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	if (!err)
		err = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	if (!err)
		err = pthread_mutex_init(m, &attr);
	pthread_mutexattr_destroy(&attr);
	return -err;
}

/* Creates the parent directory (one level) of path. */
static void lf_mkdir_parent(const char *path)
{
	char dir[PATH_MAX];
	char *slash;

	if (strlen(path) >= sizeof(dir))
		return;
	strcpy(dir, path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return;
	*slash = '\0';
	(void)mkdir(dir, 0755);
}

/* A new file beside path under a unique name, or -errno. */
static int lf_open_tmp(const char *path, char *tmp, size_t len,
		       void (*mkparent)(const char *path))
{
	static unsigned int seq;
	unsigned int try;
	uint64_t salt;
	int fd, n;

	for (try = 0; try < 100; try++) {
		salt = gs_lf_clock_ns(CLOCK_MONOTONIC) ^
		       (uint64_t)__atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED)
			       << 40;
		n = snprintf(tmp, len, "%s.tmp.%d.%llx", path, (int)getpid(),
			     (unsigned long long)salt);
		if (n < 0 || (size_t)n >= len)
			return -ENAMETOOLONG;
		fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd >= 0)
			return fd;
		if (errno == EEXIST)
			continue;
		if (errno != ENOENT || try)
			return -errno;
		mkparent(path);
	}
	return -EEXIST;
}

/*
 * Builds the file under a temporary name and publishes it with link(),
 * which fails with EEXIST if another process published first.
 */
static int lf_publish(const char *path, void (*mkparent)(const char *path),
		      int (*init)(int fd, const void *arg), const void *arg)
{
	char tmp[PATH_MAX];
	int fd, err;

	fd = lf_open_tmp(path, tmp, sizeof(tmp), mkparent);
	if (fd < 0)
		return fd;
	err = init(fd, arg);
	/*
	 * Every process shares it, whatever its user: the agent, as root,
	 * may create it for processes that are not.
	 */
	if (!err && fchmod(fd, 0666))
		err = -errno;
	if (!err && link(tmp, path))
		err = -errno;
	unlink(tmp);
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

int gs_lf_high_fd(int fd)
{
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 1024);

	if (high < 0)
		return fd;	/* a low RLIMIT_NOFILE: keep it where it is */
	close(fd);
	return high;
}

bool gs_lf_fd_is(int fd, dev_t dev, ino_t ino)
{
	struct stat st;

	return !fstat(fd, &st) && st.st_dev == dev && st.st_ino == ino;
}

int gs_lf_reopen(const char *path, dev_t dev, ino_t ino)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (!gs_lf_fd_is(fd, dev, ino)) {
		close(fd);
		return -ESTALE;
	}
	return gs_lf_high_fd(fd);
}

int gs_lf_open_shared(const char *path, bool create,
		      void (*mkparent)(const char *path),
		      int (*init)(int fd, const void *arg), const void *arg)
{
	int fd, try;

	for (try = 0; try < 8; try++) {
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd >= 0)
			return gs_lf_high_fd(fd);
		if (errno != ENOENT || !create)
			return -errno;
		fd = lf_publish(path, mkparent, init, arg);
		if (fd != -EEXIST)
			return fd < 0 ? fd : gs_lf_high_fd(fd);
		/* lost the race: open the winner's (unless already gone) */
	}
	return -EAGAIN;
}

static int lf_open_or_create(const char *path, uint64_t cap_bytes,
			     unsigned int flags)
{
	return gs_lf_open_shared(path, !(flags & GS_LF_NOCREATE),
				 lf_mkdir_parent, lf_init_cb, &cap_bytes);
}

/* -EPROTO: not a ledger of this version and ABI; -EINVAL: wrong size. */
static int lf_validate(int fd, struct stat *st)
{
	struct gs_lf_header h;
	ssize_t n;

	if (fstat(fd, st))
		return -errno;
	if (!S_ISREG(st->st_mode))
		return -EINVAL;
	n = pread(fd, &h, sizeof(h), 0);
	if (n < 0)
		return -errno;
	if ((size_t)n < sizeof(h))
		return -EINVAL;
	if (memcmp(h.magic, GS_LF_MAGIC, sizeof(h.magic)) ||
	    h.version != GS_LF_VERSION || h.abi != GS_LF_ABI ||
	    h.mutex_size != sizeof(pthread_mutex_t) ||
	    h.nslots != GS_LF_NSLOTS)
		return -EPROTO;
	if (h.size != GS_LF_SIZE || st->st_size != (off_t)GS_LF_SIZE)
		return -EINVAL;
	return 0;
}

/* The handle, with the absolute path (to reopen after fork and chdir). */
static int lf_alloc(const char *path, struct gs_file_ledger **out)
{
	size_t plen = strlen(path), clen = 0;
	struct gs_file_ledger *l;
	char cwd[PATH_MAX];

	if (path[0] != '/' && getcwd(cwd, sizeof(cwd)))
		clen = strlen(cwd) + 1;
	if (clen + plen >= PATH_MAX)
		return -ENAMETOOLONG;
	l = calloc(1, sizeof(*l) + clen + plen + 1);
	if (!l)
		return -ENOMEM;
	if (clen) {
		memcpy(l->path, cwd, clen - 1);
		l->path[clen - 1] = '/';
	}
	memcpy(l->path + clen, path, plen + 1);
	l->fd = -1;
	l->slot = -1;
	*out = l;
	return 0;
}

int gs_file_ledger_open(const char *path, uint64_t cap_bytes, unsigned flags,
			struct gs_ledger **out)
{
	struct gs_file_ledger *l;
	struct stat st;
	void *map;
	int err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!path || !path[0] ||
	    (flags & ~(GS_LEDGER_OBSERVE | GS_LF_NOCREATE)))
		return -EINVAL;
	err = lf_alloc(path, &l);
	if (err)
		return err;
	l->fd = lf_open_or_create(l->path, cap_bytes, flags);
	err = l->fd < 0 ? l->fd : lf_validate(l->fd, &st);
	if (err)
		goto fail;
	map = mmap(NULL, GS_LF_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
		   l->fd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	l->base.ops = &gs_lf_ops;
	l->hdr = map;
	l->slots = (struct gs_lf_slot *)((char *)map + GS_LF_HEADER_SIZE);
	l->flags = flags;
	l->dev = st.st_dev;
	l->ino = st.st_ino;
	*out = &l->base;
	return 0;
fail:
	if (l->fd >= 0)
		close(l->fd);
	free(l);
	return err;
}
