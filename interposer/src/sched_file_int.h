/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What sched_file.c (the runtime) and sched_file_open.c (creating,
 * validating and mapping the file) share. Internal to those two: it
 * includes the core's header (through sched_file_layout.h), whose struct
 * gs_card is not the shim's (shim.h).
 */
#ifndef GPUSLICE_SCHED_FILE_INT_H
#define GPUSLICE_SCHED_FILE_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "ledger_file_layout.h"	/* gs_lf_high_fd, gs_lf_clock_ns */
#include "sched_file.h"
#include "sched_file_layout.h"

struct gs_sf {
	struct gs_sf_header *h;
	/*
	 * The fd carrying our slot's lock: -1 in a forked child until it
	 * registers. It and the fields below change under the file's mutex.
	 */
	int fd;
	int slot;		/* -1: none */
	uint64_t gen;
	int vgpu;		/* our entry of h->vgpu, -1: none */
	uint32_t quota, high;
	char key[GS_SF_KEY_LEN];
	dev_t dev;
	ino_t ino;
	char path[PATH_MAX];
};

static inline uint64_t mono(void)
{
	return gs_lf_clock_ns(CLOCK_MONOTONIC);
}

/* The reclaim window want asks for: its own, or the core's default. */
static inline uint64_t gs_sf_want_reclaim(const struct gs_sf_want *w)
{
	return w->reclaim_ns ? w->reclaim_ns : GS_RECLAIM_DEFAULT_NS;
}

/* Rewrites the page under its sequence count when it changed; locked
 * (sched_file.c). */
void gs_sf_publish(struct gs_sf_header *h);

/*
 * Allocates *out for want, and opens (creating it with want's settings),
 * validates and maps the file at path (sched_file_open.c). 0, or -errno
 * with msg saying what and nothing kept.
 */
int gs_sf_map(const char *path, const struct gs_sf_want *w,
	      struct gs_sf **out, char *msg, size_t msglen);

/* Unmaps, closes and frees sf (sched_file_open.c). */
void gs_sf_free(struct gs_sf *sf);

#endif /* GPUSLICE_SCHED_FILE_INT_H */
