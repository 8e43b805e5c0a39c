// SPDX-License-Identifier: Apache-2.0
/*
 * Creating, validating and mapping the schedule file of the no-module mode
 * (the runtime is sched_file.c). A file is built whole under a temporary
 * name and published with link(), so no process ever maps a half-made one,
 * and concurrent creators agree on a single file.
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

#include "sched_file_int.h"

static int sf_init_file(int fd, const struct gs_sf_want *w)
{
	struct gs_sched_config cfg;
	struct gs_sf_header *h;
	int err;

	gs_config_default(&cfg);
	cfg.policy = w->policy;
	cfg.max_inst = w->max_inst;
	cfg.slice_ns = w->slice_ns;
	cfg.reclaim_ns = gs_sf_want_reclaim(w);
	if (gs_config_check(&cfg))
		return -EINVAL;
	err = posix_fallocate(fd, 0, (off_t)GS_SF_SIZE);
	if (err)
		return -err;
	h = mmap(NULL, GS_SF_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return -errno;
	memset(h, 0, GS_SF_SIZE);
	memcpy(h->magic, GS_SF_MAGIC, sizeof(h->magic));
	h->version = GS_SF_VERSION;
	h->abi = GS_SF_ABI;
	h->mutex_size = sizeof(pthread_mutex_t);
	h->core_size = sizeof(struct gs_card);
	h->nvgpus = GS_SF_NVGPUS;
	h->nslots = GS_SF_NSLOTS;
	h->size = GS_SF_SIZE;
	gs_card_init(&h->core, &cfg);
	h->pub.page.abi_version = GPUSLICE_ABI_VERSION;
	gs_sf_publish(h);
	err = gs_lf_robust_mutex_init(&h->lock.mutex);
	munmap(h, GS_SF_SIZE);
	return err;
}

static int sf_init_cb(int fd, const void *want)
{
	return sf_init_file(fd, want);
}

/* Creates the directories above path (the agent's mount usually has them). */
static void sf_mkdirs(const char *path)
{
	char dir[PATH_MAX];

	if (strlen(path) >= sizeof(dir))
		return;
	strcpy(dir, path);
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		(void)mkdir(dir, 0755);
		*p = '/';
	}
}

static int sf_open_or_create(const char *path, const struct gs_sf_want *w)
{
	return gs_lf_open_shared(path, true, sf_mkdirs, sf_init_cb, w);
}

static int sf_validate(int fd, struct stat *st)
{
	struct gs_sf_header h;
	ssize_t n;

	if (fstat(fd, st))
		return -errno;
	if (!S_ISREG(st->st_mode) || st->st_size != (off_t)GS_SF_SIZE)
		return -EINVAL;
	n = pread(fd, &h, offsetof(struct gs_sf_header, lock), 0);
	if (n != (ssize_t)offsetof(struct gs_sf_header, lock))
		return n < 0 ? -errno : -EINVAL;
	if (memcmp(h.magic, GS_SF_MAGIC, sizeof(h.magic)) ||
	    h.version != GS_SF_VERSION || h.abi != GS_SF_ABI ||
	    h.mutex_size != sizeof(pthread_mutex_t) ||
	    h.core_size != sizeof(struct gs_card) ||
	    h.nvgpus != GS_SF_NVGPUS || h.nslots != GS_SF_NSLOTS ||
	    h.size != GS_SF_SIZE)
		return -EPROTO;
	return 0;
}

void gs_sf_free(struct gs_sf *sf)
{
	if (sf->h)
		munmap(sf->h, GS_SF_SIZE);
	if (sf->fd >= 0)
		close(sf->fd);
	free(sf);
}

int gs_sf_map(const char *path, const struct gs_sf_want *w,
	      struct gs_sf **out, char *msg, size_t msglen)
{
	struct gs_sf *sf;
	struct stat st;
	void *map;
	int err;

	*out = NULL;
	if (strlen(w->key) >= GS_SF_KEY_LEN || strlen(path) >= PATH_MAX) {
		snprintf(msg, msglen, "the vGPU key or the path is too long");
		return -ENAMETOOLONG;
	}
	sf = calloc(1, sizeof(*sf));
	if (!sf)
		return -ENOMEM;
	sf->slot = -1;
	sf->vgpu = -1;
	sf->quota = w->quota;
	sf->high = w->high;
	strncpy(sf->key, w->key, sizeof(sf->key) - 1);
	strcpy(sf->path, path);
	sf->fd = sf_open_or_create(path, w);
	err = sf->fd < 0 ? sf->fd : sf_validate(sf->fd, &st);
	if (err) {
		snprintf(msg, msglen, "%s: %s", path,
			 err == -EPROTO ? "not a schedule file of this version" :
			 err == -EINVAL ? "not a schedule file (size, type or settings)" :
			 strerror(-err));
		goto fail;
	}
	sf->dev = st.st_dev;
	sf->ino = st.st_ino;
	map = mmap(NULL, GS_SF_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
		   sf->fd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		snprintf(msg, msglen, "%s: mmap: %s", path, strerror(-err));
		goto fail;
	}
	sf->h = map;
	*out = sf;
	return 0;
fail:
	gs_sf_free(sf);
	return err;
}
