/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gstest cap's allocation paths: the run, its pieces and what a path does
 * (cap.c), shared with the paths kept in files of their own (cap_pool.c).
 */
#ifndef GSTEST_CAP_H
#define GSTEST_CAP_H

#include "common.h"

#define MAX_PIECES 4096

struct piece {
	uint64_t h;		/* pointer or handle */
	uint64_t bytes;		/* device memory it holds */
	CUdeviceptr va;		/* vmm: mapped at, 0 when not mapped */
};

struct run {
	int dev;
	uint64_t F;		/* free at the start */
	uint64_t gran;		/* pieces are multiples of this */
	CUstream stream;
	CUmemoryPool pool;
	int npieces;		/* pieces made so far in this round */
	struct piece p[MAX_PIECES];
	int n;
	/* pool_xdev: the other device, whose context allocates from dev's. */
	int odev;
	CUcontext octx, ctx;	/* the other's context, dev's own */
	uint64_t oF;		/* the other vGPU's free at the start */
};

struct path {
	const char *name;
	void (*setup)(struct run *r);
	/* One piece of at most want bytes (exactly want where it can). */
	CUresult (*alloc)(struct run *r, uint64_t want, struct piece *p);
	CUresult (*free)(struct run *r, struct piece *p);
	/* After the frees: what it takes for the bytes to come back. */
	void (*settle)(struct run *r);
	/* Extra checks at the end, before teardown. */
	void (*finale)(struct run *r);
	void (*teardown)(struct run *r);
	bool vmm_gran;		/* pieces in VMM/pool granularity */
};

/* Steps of the stream-ordered paths, for the paths of other files (cap.c). */
void setup_stream(struct run *r);
void teardown_stream(struct run *r);
CUresult alloc_async(struct run *r, uint64_t want, struct piece *p);
CUresult alloc_pool(struct run *r, uint64_t want, struct piece *p);
CUresult free_async(struct run *r, struct piece *p);
void sync_stream(struct run *r);
uint64_t pool_reserved(struct run *r);
void settle_pool(struct run *r);

/* The CUDA 13 pool paths (cap_pool.c). */
extern const struct path cap_pool_paths[];
extern const size_t cap_pool_npaths;

#endif /* GSTEST_CAP_H */
