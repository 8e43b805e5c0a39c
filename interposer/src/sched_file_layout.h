/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Layout of the schedule file of the no-module mode (sched_file.c): one
 * file per card, $GPUSLICE_SCHED_DIR/card<N>.sched, shared by every
 * container on the card (the agent mounts one host directory into each),
 * mmapped MAP_SHARED by every gated process. It holds the scheduler core's
 * state (kmod/core: struct gs_card has no pointers, so it can live here),
 * the schedule page the fast path reads (the module's page layout, so the
 * gate reads both the same way), a table of vGPUs keyed by container and a
 * table of per-process slots, each held by an OFD record lock for the life
 * of its process, so a dead process is detected as in the ledger file.
 *
 * Internal to sched_file.c and sched_file_open.c (through
 * sched_file_int.h): it includes the core's header, whose struct
 * gs_card is not the shim's (shim.h); the rest of the shim sees
 * sched_file.h only.
 */
#ifndef GPUSLICE_SCHED_FILE_LAYOUT_H
#define GPUSLICE_SCHED_FILE_LAYOUT_H

#include <assert.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "gpuslice.h"
#include "gs_sched.h"

#define GS_SF_MAGIC		"gssched\0"	/* 8 bytes */
#define GS_SF_VERSION		3u	/* 3: last_start, the early handover */
#define GS_SF_NVGPUS		GS_MAX_VGPUS
#define GS_SF_NSLOTS		256u
#define GS_SF_KEY_LEN		128u		/* a container id is 64 */

/* Slot and vGPU entry states: anything else is free. */
#define GS_SF_USED		0x55534544u	/* "USED" */

/* A slow path reaps dead processes when the last reap is this old. */
#define GS_SF_REAP_INTERVAL_NS	50000000ull

#if defined(__GLIBC__)
#define GS_SF_LIBC_ID		1u
#else
#define GS_SF_LIBC_ID		2u
#endif
#define GS_SF_ABI		((uint32_t)(GS_SF_LIBC_ID << 16 | sizeof(void *) << 8))

/* A container's vGPU on the card. */
struct gs_sf_vgpu {
	uint32_t state;			/* GS_SF_USED or free */
	int32_t core_id;		/* the core's id (the page's owner) */
	uint32_t quota;			/* percent */
	uint32_t high;			/* priority */
	uint32_t nprocs;		/* live slots naming this entry */
	uint32_t pad;
	uint64_t created_ns;		/* CLOCK_MONOTONIC, informational */
	uint64_t busy_ns;		/* busy time its processes reported */
	uint64_t last_start;		/* start of the latest slice a
					 * process of it held */
	char key[GS_SF_KEY_LEN];	/* GPUSLICE_VGPU, NUL-terminated */
};

/* One gated process; its range is held by an OFD lock while it lives. */
struct gs_sf_slot {
	uint32_t state;			/* GS_SF_USED or free */
	int32_t vgpu;			/* index into vgpu[] */
	uint64_t gen;			/* claim generation */
	int32_t pid;			/* informational */
	uint32_t pending;		/* granted a slice, not yet released
					 * and the slice not over */
	uint32_t waiting;		/* threads waiting for a slice */
	uint32_t holding;		/* granted; its fence has not said
					 * the work drained (the card waits) */
	uint64_t grant_end;		/* the granted slice's end */
	uint64_t hold_start;		/* the held slice's start: a hold
					 * lapses when the card moved on */
	uint64_t pad1[2];
};

struct gs_sf_header {
	/* identity, written once before the file is published */
	char magic[8];
	uint32_t version;
	uint32_t abi;
	uint32_t mutex_size;
	uint32_t core_size;		/* sizeof(struct gs_card) of the core */
	uint32_t nvgpus;
	uint32_t nslots;
	uint64_t size;
	uint8_t pad0[24];

	/* the robust, process-shared lock guarding everything below */
	union {
		pthread_mutex_t mutex;
		uint8_t pad[64];
	} lock;

	/* the page: written under the lock, read without it (seq) */
	union {
		struct gpuslice_sched_page page;
		uint8_t pad[64];
	} pub;

	uint64_t last_reap_ns;		/* CLOCK_MONOTONIC */
	uint64_t next_gen;
	uint64_t owner_dead;		/* times the lock was recovered */
	uint64_t reaped;		/* dead processes reclaimed */
	uint64_t removed;		/* vGPUs removed with their last process */
	uint8_t pad1[24];

	/* the card's settings are core.cfg, fixed when the file is made */
	struct gs_card core;
	struct gs_sf_vgpu vgpu[GS_SF_NVGPUS];
	struct gs_sf_slot slot[GS_SF_NSLOTS] __attribute__((aligned(64)));
};

static_assert(sizeof(pthread_mutex_t) <= 64, "mutex does not fit its line");
static_assert(sizeof(struct gpuslice_sched_page) <= 64, "page line");
static_assert(offsetof(struct gs_sf_header, lock) == 64, "header layout");
static_assert(sizeof(struct gs_sf_slot) == 64, "slot size");
static_assert(offsetof(struct gs_sf_header, slot) % 64 == 0, "slot align");

#define GS_SF_SIZE	sizeof(struct gs_sf_header)

#endif /* GPUSLICE_SCHED_FILE_LAYOUT_H */
