/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Layout of the shared ledger file of the no-module mode, and the
 * per-process handle on it. Internal to ledger_file.c and its tests; the
 * public interface is ledger.h.
 *
 * The file is mmapped MAP_SHARED by every process of the container (and by
 * the agent, which only observes). It is a header followed by one slot per
 * process:
 *
 *	[0, 256)		struct gs_lf_header
 *	[256 + 64 i, +64)	struct gs_lf_slot i, i < GS_LF_NSLOTS
 *
 * Every field that another process may read is a naturally aligned 64-bit
 * word written with one store, so a process killed mid-update leaves each
 * slot self-consistent; the total (used_bytes) is recomputed from the slots
 * when the lock is found abandoned.
 */
#ifndef GPUSLICE_LEDGER_FILE_LAYOUT_H
#define GPUSLICE_LEDGER_FILE_LAYOUT_H

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "ledger.h"

#define GS_LF_MAGIC		"gsledger"	/* 8 bytes, no NUL in the file */
#define GS_LF_VERSION		1u
#define GS_LF_NSLOTS		1024u
#define GS_LF_HEADER_SIZE	256u
#define GS_LF_SLOT_SIZE		64u
#define GS_LF_SIZE		(GS_LF_HEADER_SIZE + GS_LF_NSLOTS * GS_LF_SLOT_SIZE)

/* Slot states. Anything but GS_LF_USED counts as free. */
#define GS_LF_FREE		0u
#define GS_LF_USED		0x55534544u	/* "USED" */

/* A charge reaps when the last reap is older than this. */
#define GS_LF_REAP_INTERVAL_NS	250000000ull

/* A waiter for the lock looks again this often, see lf_lock_wait(). */
#define GS_LF_LOCK_SLICE_NS	10000000L

/*
 * How long an observer (the agent) waits for the lock before giving up
 * with -ETIMEDOUT: a process of the container stopped (SIGSTOP, freezer)
 * inside a critical section must not hang the agent.
 */
#define GS_LF_OBSERVE_WAIT_S	10

/*
 * Internal open flag: fail with -ENOENT rather than create the file
 * (the Go package's Open). Not part of ledger.h on purpose.
 */
#define GS_LF_NOCREATE		0x100u

/*
 * The mutex layout is libc's: a file made by a process of another libc or
 * word size must be refused, not shared.
 */
#if defined(__GLIBC__)
#define GS_LF_LIBC_ID		1u
#else
#define GS_LF_LIBC_ID		2u
#endif
#define GS_LF_ABI		((uint32_t)(GS_LF_LIBC_ID << 16 | sizeof(void *) << 8))

struct gs_lf_header {
	/* Line 0: identity, written once before the file is published. */
	char magic[8];
	uint32_t version;
	uint32_t nslots;
	uint64_t size;			/* of the whole file */
	uint64_t cap_bytes;
	uint32_t abi;			/* GS_LF_ABI of the creator */
	uint32_t mutex_size;		/* sizeof(pthread_mutex_t) of the creator */
	uint64_t created_ns;		/* CLOCK_REALTIME, informational */
	uint8_t pad0[16];

	/* Line 1: the robust, process-shared lock guarding all that follows. */
	union {
		pthread_mutex_t mutex;
		uint8_t pad[64];
	} lock;

	/* Line 2: the totals. */
	uint64_t used_bytes;		/* == sum of the USED slots' bytes */
	uint64_t last_reap_ns;		/* CLOCK_MONOTONIC of the last reap */
	uint64_t next_gen;		/* last claim generation handed out */
	uint64_t owner_dead;		/* times the lock was recovered */
	uint64_t reaped;		/* dead processes reclaimed */
	uint8_t pad2[24];

	/*
	 * Line 3: room to grow within the version (a file made before a
	 * field was added has zero there). unseen_bytes: device memory the
	 * driver holds for the container's processes beyond the slots'
	 * bytes, found and written by the agent (one atomic store, without
	 * the lock: the container may hold it); a charge counts it against
	 * the cap. Not part of used_bytes, which stays the slots' sum.
	 */
	uint64_t unseen_bytes;
	uint8_t reserved[56];
};

struct gs_lf_slot {
	uint64_t state;			/* GS_LF_USED or free */
	uint64_t gen;			/* claim generation, see lf_own_slot() */
	uint64_t bytes;			/* charged by the owner */
	int32_t pid;			/* owner, in its pid namespace; info only */
	uint32_t pad0;
	uint64_t claimed_ns;		/* CLOCK_REALTIME, informational */
	uint64_t pad1[3];
};

static_assert(sizeof(pthread_mutex_t) <= 64, "mutex does not fit its line");
static_assert(offsetof(struct gs_lf_header, lock) == 64, "header layout");
static_assert(offsetof(struct gs_lf_header, used_bytes) == 128,
	      "header layout");
static_assert(offsetof(struct gs_lf_header, unseen_bytes) == 192,
	      "header layout");
static_assert(sizeof(struct gs_lf_header) == GS_LF_HEADER_SIZE,
	      "header size");
static_assert(offsetof(struct gs_lf_slot, bytes) == 16, "slot layout");
static_assert(offsetof(struct gs_lf_slot, claimed_ns) == 32, "slot layout");
static_assert(sizeof(struct gs_lf_slot) == GS_LF_SLOT_SIZE, "slot size");

/* One process's handle on a ledger file. */
struct gs_file_ledger {
	struct gs_ledger base;
	struct gs_lf_header *hdr;	/* the whole file, mapped */
	struct gs_lf_slot *slots;
	unsigned int flags;
	/*
	 * The fd carrying our slot's record lock (an open file description
	 * lock): -1 in a forked child until it needs one. The fields below
	 * change only under the file's mutex.
	 */
	int fd;
	int slot;			/* claimed slot or -1 */
	uint64_t gen;			/* generation of our claim */
	dev_t dev;			/* identity of the file, to reopen it */
	ino_t ino;
	char path[];			/* absolute */
};

/* The file ledger's ops (ledger_file.c), set by gs_file_ledger_open(). */
extern const struct gs_ledger_ops gs_lf_ops;

/*
 * Moves fd to a high number (keeping O_CLOEXEC) and returns it, or fd as it
 * was. At exit the kernel closes descriptors in ascending order: the
 * ledger's, and with it the slot lock, goes after the driver's device
 * files, so survivors do not reclaim bytes the card still holds.
 */
int gs_lf_high_fd(int fd);

/*
 * A process's descriptor of a shared file, known by (dev, ino): is fd
 * still that file (not closed and reused behind our back)? And the path
 * opened again, moved high (gs_lf_high_fd), or -errno: -ESTALE when the
 * path names another file now.
 */
bool gs_lf_fd_is(int fd, dev_t dev, ino_t ino);
int gs_lf_reopen(const char *path, dev_t dev, ino_t ino);

/*
 * OFD record locks on a byte range of a shared file, held for as long as
 * the process lives (the ledger's and the schedule file's process slots).
 * setlk: F_WRLCK 0 when the range is now ours, -EAGAIN when another open
 * file description holds it; F_UNLCK lets it go. held: 1 when another
 * description holds it (a live process), 0 when nobody does, or -errno.
 */
int gs_lf_range_setlk(int fd, off_t start, off_t len, short type);
int gs_lf_range_held(int fd, off_t start, off_t len);

/* A process-shared, robust mutex in a shared file: 0 or -errno. */
int gs_lf_robust_mutex_init(pthread_mutex_t *m);

/*
 * Opens the shared file at path, or (create) publishes a new one: built
 * whole under a temporary name by init(fd, arg), made 0666 (every user of
 * the container shares it), then link()ed, so no process ever maps a
 * half-made one and concurrent creators agree on one. mkparent(path) runs
 * once if the directory is missing. Returns an fd above the driver's
 * (gs_lf_high_fd) or -errno.
 */
int gs_lf_open_shared(const char *path, bool create,
		      void (*mkparent)(const char *path),
		      int (*init)(int fd, const void *arg), const void *arg);

static inline uint64_t gs_lf_clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* GPUSLICE_LEDGER_FILE_LAYOUT_H */
