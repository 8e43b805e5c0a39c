/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Machine-wide state of the simulated GPUs, shared by every process that
 * uses the same SIMCUDA_STATE file: device capacities, physical memory in
 * use, the process table and the per-device compute engines. Compiled into
 * both libcuda.so.1 and libnvidia-ml.so.1; each library keeps its own
 * mapping and process-local view, but all of them meet in the same file.
 */
#ifndef SIMCUDA_STATE_H
#define SIMCUDA_STATE_H

#include <stdint.h>

#define SIMST_MAX_DEV 16
#define SIMST_NAME_MAX 64

/* Results of simst_attach(). */
enum {
	SIMST_OK = 0,
	SIMST_EINVAL = -1,	/* a bad SIMCUDA_* value, already reported */
	SIMST_EFAIL = -2,	/* the state file could not be used */
};

/* The configuration asked for by the environment (see config.c). */
enum {
	SIMST_SET_DEVICES = 1 << 0,
	SIMST_SET_MEM = 1 << 1,
	SIMST_SET_NAME = 1 << 2,
};

struct simst_config {
	int ndev;
	unsigned int set;	/* SIMST_SET_*: what the environment named */
	uint64_t cap[SIMST_MAX_DEV];
	uint64_t ctx_bytes;
	char name[SIMST_NAME_MAX];
	char path[4096];
	int explicit_path;
};

int simst_read_config(struct simst_config *cfg);

int simst_attach(void);
void simst_detach(void);
void simst_forked(void);

int simst_ndev(void);
uint64_t simst_capacity(int dev);
uint64_t simst_ctx_bytes(void);
const char *simst_name(void);
void simst_uuid(int dev, unsigned char out[16]);

int simst_charge(int dev, uint64_t bytes);
void simst_uncharge(int dev, uint64_t bytes);
int simst_used(int dev, uint64_t *used);

/* A live process and the device memory it holds on one device. */
struct simst_proc {
	int32_t pid;
	uint64_t used;
};

/*
 * The live processes holding memory on dev, after reaping the dead: fills
 * up to max of them and returns how many there are, or -1 for a bad dev.
 */
int simst_procs(int dev, struct simst_proc *out, int max);

uint64_t simst_now_ns(void);
uint64_t simst_engine_book(int dev, uint64_t duration_ns, uint64_t ready_ns,
			   uint64_t latest);
void simst_engine_finish(int dev, uint64_t duration_ns, uint64_t end);
/* simst_engine_finish in two: a part of a kernel ran, a kernel ended. */
void simst_engine_part(int dev, uint64_t duration_ns, uint64_t end);
void simst_engine_count(int dev);
int simst_stats(int dev, int pid, uint64_t *busy_ns, uint64_t *kernels);

int simst_xid_inject(int dev, uint64_t xid);
int simst_xid_read(int dev, uint64_t *seq, uint64_t *last);

#endif /* SIMCUDA_STATE_H */
