// SPDX-License-Identifier: Apache-2.0
/*
 * The shared state file: one mmapped structure per simulated machine.
 *
 * Memory accounting is per process so that the memory of a process that
 * died without cleaning up (SIGKILL, crash) can be given back, as a real
 * driver does when the process's device file is closed: a slot whose pid
 * is gone, a zombie, or reused by a newer process is "reaped". Table
 * updates are serialised by a robust process-shared mutex, so a process
 * killed while holding it does not wedge the machine.
 *
 * The compute engines need no lock: each is a single busy_until time that
 * launches advance with compare-and-swap (see simst_engine_book).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "state.h"

#define SIMST_MAGIC 0x31414455434d4953ULL	/* "SIMCUDA1" */
#define SIMST_VERSION 2
#define SIMST_SLOTS 512

enum { SLOT_FREE, SLOT_LIVE, SLOT_DEAD };

struct simst_dev {
	uint64_t capacity;
	uint64_t used;		/* sum of used[] over the live slots */
	uint64_t busy_until;	/* CLOCK_MONOTONIC ns, advanced by CAS */
	uint64_t busy_ns;
	uint64_t kernels;
	/* Injected XID events: the last one, then the count (release). */
	uint64_t xid_last;
	uint64_t xid_seq;
};

/* A dead slot keeps its engine counters until reused, for simst_stats. */
struct simst_slot {
	int32_t pid;
	uint32_t state;
	uint64_t start;		/* /proc/<pid>/stat starttime vs pid reuse */
	uint64_t seq;		/* attach order: oldest dead slot reused first */
	uint64_t used[SIMST_MAX_DEV];
	uint64_t busy_ns[SIMST_MAX_DEV];
	uint64_t kernels[SIMST_MAX_DEV];
};

struct simst_shared {
	uint64_t magic;
	uint32_t version;
	uint32_t size;
	pthread_mutex_t lock;
	uint32_t ndev;
	uint32_t pad;
	uint64_t seq;
	char name[SIMST_NAME_MAX];
	struct simst_dev dev[SIMST_MAX_DEV];
	struct simst_slot slot[SIMST_SLOTS];
};

static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static struct simst_shared *shm;
static struct simst_config cfg;
static struct simst_slot *self;
static pid_t self_pid;
static uint64_t self_start;

uint64_t simst_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * Reads the state letter (field 3) and starttime (field 22) of a process.
 * The command name (field 2) may contain spaces and parentheses, so the
 * fields are counted from the last ')'.
 */
static int proc_stat(pid_t pid, char *state, uint64_t *start)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return -1;
	p += 2;
	*state = *p;
	for (field = 3; field < 22 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	if (!p)
		return -1;
	*start = strtoull(p, NULL, 10);
	return 0;
}

/* A slot is dead when its pid is gone, a zombie, or now another process. */
static int slot_dead(const struct simst_slot *s)
{
	uint64_t start;
	char st;

	if (s->pid == self_pid && s->start == self_start)
		return 0;
	if (kill(s->pid, 0) != 0 && errno == ESRCH)
		return 1;
	if (proc_stat(s->pid, &st, &start) != 0)
		return errno == ENOENT;
	return start != s->start || st == 'Z' || st == 'X';
}

static void recompute_used(void)
{
	for (int d = 0; d < SIMST_MAX_DEV; d++) {
		uint64_t sum = 0;

		for (int i = 0; i < SIMST_SLOTS; i++)
			if (shm->slot[i].state == SLOT_LIVE)
				sum += shm->slot[i].used[d];
		shm->dev[d].used = sum;
	}
}

static void sh_lock(void)
{
	int rc = pthread_mutex_lock(&shm->lock);

	if (rc == EOWNERDEAD) {
		/* The owner died mid-update: trust only the slots. */
		recompute_used();
		pthread_mutex_consistent(&shm->lock);
	} else if (rc) {
		fprintf(stderr, "simcuda: state lock of %s unusable: %s\n",
			cfg.path, strerror(rc));
		abort();
	}
}

static void sh_unlock(void)
{
	pthread_mutex_unlock(&shm->lock);
}

static void reap_locked(void)
{
	for (int i = 0; i < SIMST_SLOTS; i++) {
		struct simst_slot *s = &shm->slot[i];

		if (s->state != SLOT_LIVE || !slot_dead(s))
			continue;
		for (int d = 0; d < SIMST_MAX_DEV; d++) {
			uint64_t *u = &shm->dev[d].used;

			*u = *u > s->used[d] ? *u - s->used[d] : 0;
			s->used[d] = 0;
		}
		s->state = SLOT_DEAD;
	}
}

static void apply_config(void)
{
	shm->ndev = (uint32_t)cfg.ndev;
	for (int d = 0; d < SIMST_MAX_DEV; d++)
		shm->dev[d].capacity = d < cfg.ndev ? cfg.cap[d] : 0;
	memset(shm->name, 0, sizeof(shm->name));
	strcpy(shm->name, cfg.name);
}

static void init_shared(struct simst_shared *s)
{
	pthread_mutexattr_t a;

	memset(s, 0, sizeof(*s));
	s->magic = SIMST_MAGIC;
	s->version = SIMST_VERSION;
	s->size = sizeof(*s);
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&s->lock, &a);
	pthread_mutexattr_destroy(&a);
}

static int map_fd(int fd, struct simst_shared **out)
{
	void *p = mmap(NULL, sizeof(**out), PROT_READ | PROT_WRITE,
		       MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -1;
	*out = p;
	return 0;
}

static int fail(const char *what)
{
	fprintf(stderr, "simcuda: %s %s: %s\n", what, cfg.path,
		strerror(errno));
	return SIMST_EFAIL;
}

/*
 * Creates the file race-free: a fully initialised temporary file is
 * link()ed to the final name, so no process can ever see a half-written
 * state. Returns 1 when another process won the race.
 */
static int create_file(void)
{
	char tmp[sizeof(cfg.path) + 8];
	struct simst_shared *s;
	int fd, rc = SIMST_OK;

	snprintf(tmp, sizeof(tmp), "%s.XXXXXX", cfg.path);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return fail("cannot create state file next to");
	/* An explicit path may be shared by several users' containers. */
	if (cfg.explicit_path)
		fchmod(fd, 0666);
	if (ftruncate(fd, sizeof(*s)) || map_fd(fd, &s)) {
		rc = fail("cannot size or map a temporary file for");
		goto out;
	}
	init_shared(s);
	shm = s;
	apply_config();
	if (link(tmp, cfg.path) != 0) {
		rc = errno == EEXIST ? 1 : fail("cannot link state file");
		munmap(s, sizeof(*s));
		shm = NULL;
	}
out:
	unlink(tmp);
	close(fd);
	return rc;
}

static int open_file(void)
{
	struct stat st;
	int fd = open(cfg.path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return errno == ENOENT ? 1 : fail("cannot open state file");
	if (fstat(fd, &st) || st.st_size != (off_t)sizeof(*shm) ||
	    map_fd(fd, &shm) || shm->magic != SIMST_MAGIC ||
	    shm->version != SIMST_VERSION || shm->size != sizeof(*shm)) {
		fprintf(stderr, "simcuda: %s is not a simcuda state file of "
			"version %d and size %zu; remove it or set "
			"SIMCUDA_STATE to another path\n", cfg.path,
			SIMST_VERSION, sizeof(*shm));
		if (shm)
			munmap(shm, sizeof(*shm));
		shm = NULL;
		close(fd);
		return SIMST_EFAIL;
	}
	close(fd);
	return SIMST_OK;
}

static int map_state(void)
{
	for (int tries = 0; tries < 8; tries++) {
		int rc = open_file();

		if (rc != 1)
			return rc;
		rc = create_file();
		if (rc != 1)
			return rc;
	}
	fprintf(stderr, "simcuda: cannot open or create %s\n", cfg.path);
	return SIMST_EFAIL;
}

static int other_live(void)
{
	for (int i = 0; i < SIMST_SLOTS; i++) {
		const struct simst_slot *s = &shm->slot[i];

		if (s->state == SLOT_LIVE &&
		    !(s->pid == self_pid && s->start == self_start))
			return 1;
	}
	return 0;
}

static int config_differs(unsigned int which)
{
	if ((which & SIMST_SET_DEVICES) && shm->ndev != (uint32_t)cfg.ndev)
		return 1;
	if ((which & SIMST_SET_NAME) && strcmp(shm->name, cfg.name))
		return 1;
	if (which & SIMST_SET_MEM)
		for (int d = 0; d < cfg.ndev && d < (int)shm->ndev; d++)
			if (shm->dev[d].capacity != cfg.cap[d])
				return 1;
	return 0;
}

/*
 * An idle machine takes the configuration this process asks for. A busy
 * one is kept as it is: a process that did not name a setting adopts it,
 * one that names a different value is refused.
 */
static int settle_config(void)
{
	unsigned int all = SIMST_SET_DEVICES | SIMST_SET_MEM | SIMST_SET_NAME;

	reap_locked();
	if (!config_differs(all))
		return SIMST_OK;
	if (!other_live()) {
		apply_config();
		return SIMST_OK;
	}
	if (!config_differs(cfg.set))
		return SIMST_OK;
	fprintf(stderr, "simcuda: SIMCUDA_DEVICES/SIMCUDA_MEM_MIB/SIMCUDA_NAME "
		"differ from the machine in %s (%u devices, device 0 %" PRIu64
		" MiB, \"%s\") that other processes use; use the same values "
		"or another SIMCUDA_STATE\n", cfg.path, shm->ndev,
		shm->dev[0].capacity >> 20, shm->name);
	return SIMST_EINVAL;
}

static struct simst_slot *find_slot(void)
{
	struct simst_slot *best = NULL;

	for (int i = 0; i < SIMST_SLOTS; i++) {
		struct simst_slot *s = &shm->slot[i];

		/* The other simulated library of this process got one. */
		if (s->state == SLOT_LIVE && s->pid == self_pid &&
		    s->start == self_start)
			return s;
		if (s->state == SLOT_FREE && (!best || best->state != SLOT_FREE))
			best = s;
		else if (s->state == SLOT_DEAD && (!best ||
			 (best->state == SLOT_DEAD && s->seq < best->seq)))
			best = s;
	}
	if (!best)
		return NULL;
	memset(best, 0, sizeof(*best));
	best->pid = self_pid;
	best->start = self_start;
	best->seq = ++shm->seq;
	best->state = SLOT_LIVE;
	return best;
}

static int register_self(void)
{
	char st;
	int rc;

	self_pid = getpid();
	if (proc_stat(self_pid, &st, &self_start) != 0)
		return fail("cannot read /proc/self/stat for");
	sh_lock();
	rc = settle_config();
	if (rc == SIMST_OK) {
		self = find_slot();
		if (!self) {
			fprintf(stderr, "simcuda: process table of %s is full "
				"(%d live processes)\n", cfg.path, SIMST_SLOTS);
			rc = SIMST_EFAIL;
		}
	}
	sh_unlock();
	return rc;
}

int simst_attach(void)
{
	int rc = SIMST_OK;

	pthread_mutex_lock(&attach_lock);
	if (self && self_pid == getpid())
		goto out;
	if (!shm) {
		rc = simst_read_config(&cfg);
		if (rc == SIMST_OK)
			rc = map_state();
	}
	if (rc == SIMST_OK)
		rc = register_self();
out:
	pthread_mutex_unlock(&attach_lock);
	return rc;
}

/*
 * Forgets the machine: the next simst_attach reads the environment and
 * maps its state file again (the simulated NVML does this at an nvmlInit
 * with none outstanding, so a process can move to another machine). Our
 * slot in the old file stays until we exit, and is found again if the
 * same file is attached.
 */
void simst_detach(void)
{
	pthread_mutex_lock(&attach_lock);
	if (shm)
		munmap(shm, sizeof(*shm));
	shm = NULL;
	self = NULL;
	pthread_mutex_unlock(&attach_lock);
}

/* In a forked child: keep the mapping, but the child needs its own slot. */
void simst_forked(void)
{
	pthread_mutex_init(&attach_lock, NULL);
	self = NULL;
}

int simst_ndev(void)
{
	return (int)shm->ndev;
}

uint64_t simst_capacity(int dev)
{
	return shm->dev[dev].capacity;
}

uint64_t simst_ctx_bytes(void)
{
	return cfg.ctx_bytes;
}

const char *simst_name(void)
{
	return shm->name;
}

/* Deterministic per index, with the version 4 / RFC 4122 variant bits. */
void simst_uuid(int dev, unsigned char out[16])
{
	uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)(dev + 1);

	for (int i = 0; i < 16; i++) {
		h ^= (uint64_t)i * 0x9e3779b97f4a7c15ULL;
		h *= 0x100000001b3ULL;
		h ^= h >> 29;
		out[i] = (unsigned char)(h >> 24);
	}
	out[6] = (unsigned char)((out[6] & 0x0f) | 0x40);
	out[8] = (unsigned char)((out[8] & 0x3f) | 0x80);
}

/* Takes bytes of device memory for this process; -1 when they lack. */
int simst_charge(int dev, uint64_t bytes)
{
	struct simst_dev *d = &shm->dev[dev];
	int rc = 0;

	sh_lock();
	if (bytes > d->capacity - d->used) {
		reap_locked();
		rc = bytes > d->capacity - d->used ? -1 : 0;
	}
	if (rc == 0) {
		d->used += bytes;
		self->used[dev] += bytes;
	}
	sh_unlock();
	return rc;
}

void simst_uncharge(int dev, uint64_t bytes)
{
	struct simst_dev *d = &shm->dev[dev];

	sh_lock();
	if (bytes > self->used[dev])
		bytes = self->used[dev];
	self->used[dev] -= bytes;
	d->used = d->used > bytes ? d->used - bytes : 0;
	sh_unlock();
}

int simst_used(int dev, uint64_t *used)
{
	if (!shm || dev < 0 || dev >= (int)shm->ndev)
		return -1;
	sh_lock();
	reap_locked();
	*used = shm->dev[dev].used;
	sh_unlock();
	return 0;
}

int simst_procs(int dev, struct simst_proc *out, int max)
{
	int n = 0;

	if (!shm || dev < 0 || dev >= (int)shm->ndev)
		return -1;
	sh_lock();
	reap_locked();
	for (int i = 0; i < SIMST_SLOTS; i++) {
		const struct simst_slot *s = &shm->slot[i];

		if (s->state != SLOT_LIVE || !s->used[dev])
			continue;
		if (n < max) {
			out[n].pid = s->pid;
			out[n].used = s->used[dev];
		}
		n++;
	}
	sh_unlock();
	return n;
}

static void sleep_until(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / 1000000000ULL),
		.tv_nsec = (long)(ns % 1000000000ULL),
	};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/*
 * Books one kernel on the device's single engine, from ready_ns (when its
 * stream could start it; 0: now) or when the engine is free, whichever is
 * later; returns its end, or 0 when it would start after latest (0: no
 * limit) and was not booked. The booking is one CAS on busy_until, so
 * kernels of all processes run one at a time in the order they are
 * booked, and the booking of a process that dies meanwhile simply runs
 * out. A ready_ns in the past (a worker that woke late for a kernel
 * queued back to back) starts it then: a GPU runs a stream's queued
 * kernels back to back, and a late host thread must not idle it.
 */
uint64_t simst_engine_book(int dev, uint64_t duration_ns, uint64_t ready_ns,
			   uint64_t latest)
{
	struct simst_dev *d = &shm->dev[dev];
	uint64_t old = __atomic_load_n(&d->busy_until, __ATOMIC_ACQUIRE);
	uint64_t start, end;

	do {
		uint64_t ready = ready_ns ? ready_ns : simst_now_ns();

		start = old > ready ? old : ready;
		if (latest && start > latest)
			return 0;
		end = start + duration_ns;
	} while (!__atomic_compare_exchange_n(&d->busy_until, &old, end, 0,
					      __ATOMIC_ACQ_REL,
					      __ATOMIC_ACQUIRE));
	return end;
}

/* A booked kernel runs until end, then counts as the engine's work. */
void simst_engine_finish(int dev, uint64_t duration_ns, uint64_t end)
{
	simst_engine_part(dev, duration_ns, end);
	simst_engine_count(dev);
}

/* A booked part of a kernel runs until end: the engine's busy time. */
void simst_engine_part(int dev, uint64_t duration_ns, uint64_t end)
{
	struct simst_dev *d = &shm->dev[dev];

	sleep_until(end);
	__atomic_add_fetch(&d->busy_ns, duration_ns, __ATOMIC_RELAXED);
	__atomic_add_fetch(&self->busy_ns[dev], duration_ns, __ATOMIC_RELAXED);
}

/* A kernel's last part ended. */
void simst_engine_count(int dev)
{
	__atomic_add_fetch(&shm->dev[dev].kernels, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&self->kernels[dev], 1, __ATOMIC_RELAXED);
}

/* pid 0: the whole device; else the live, or latest dead, slot of pid. */
int simst_stats(int dev, int pid, uint64_t *busy_ns, uint64_t *kernels)
{
	const struct simst_slot *found = NULL;

	if (!shm || dev < 0 || dev >= (int)shm->ndev || pid < 0)
		return -1;
	if (pid == 0) {
		*busy_ns = __atomic_load_n(&shm->dev[dev].busy_ns,
					   __ATOMIC_RELAXED);
		*kernels = __atomic_load_n(&shm->dev[dev].kernels,
					   __ATOMIC_RELAXED);
		return 0;
	}
	sh_lock();
	for (int i = 0; i < SIMST_SLOTS; i++) {
		const struct simst_slot *s = &shm->slot[i];

		if (s->state == SLOT_FREE || s->pid != pid)
			continue;
		if (!found || s->state == SLOT_LIVE ||
		    (found->state != SLOT_LIVE && s->seq > found->seq))
			found = s;
	}
	if (found) {
		*busy_ns = __atomic_load_n(&found->busy_ns[dev],
					   __ATOMIC_RELAXED);
		*kernels = __atomic_load_n(&found->kernels[dev],
					   __ATOMIC_RELAXED);
	}
	sh_unlock();
	return found ? 0 : -1;
}

/* Records an XID event on dev for every NVML event set watching it. */
int simst_xid_inject(int dev, uint64_t xid)
{
	struct simst_dev *d;

	if (!shm || dev < 0 || dev >= (int)shm->ndev)
		return -1;
	d = &shm->dev[dev];
	__atomic_store_n(&d->xid_last, xid, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->xid_seq, 1, __ATOMIC_RELEASE);
	return 0;
}

/* The number of XID events injected on dev so far, and the last one. */
int simst_xid_read(int dev, uint64_t *seq, uint64_t *last)
{
	if (!shm || dev < 0 || dev >= (int)shm->ndev)
		return -1;
	*seq = __atomic_load_n(&shm->dev[dev].xid_seq, __ATOMIC_ACQUIRE);
	*last = __atomic_load_n(&shm->dev[dev].xid_last, __ATOMIC_RELAXED);
	return 0;
}
