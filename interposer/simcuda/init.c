// SPDX-License-Identifier: Apache-2.0
/*
 * cuInit, the driver version, error strings, the process-wide lock and the
 * test extension API.
 *
 * A forked child starts with a fresh, uninitialised driver: the parent's
 * contexts, streams and worker threads do not exist in it, so it must call
 * cuInit again and gets its own process-table slot. (A real driver refuses
 * CUDA in such a child altogether.)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nodes.h"
#include "sim.h"

struct sim_global sim = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.progress = PTHREAD_COND_INITIALIZER,
};

static void at_prepare(void)
{
	pthread_mutex_lock(&sim.lock);
}

static void at_parent(void)
{
	pthread_mutex_unlock(&sim.lock);
}

/* The parent's objects are abandoned (leaked) in the child, never used. */
static void at_child(void)
{
	unsigned int gen = sim.gen;

	memset(&sim, 0, sizeof(sim));
	sim.gen = gen + 1;
	pthread_mutex_init(&sim.lock, NULL);
	pthread_cond_init(&sim.progress, NULL);
	simst_forked();
	simnode_forked();
	sim_preempt_forked();
}

__attribute__((constructor)) static void sim_constructor(void)
{
	pthread_atfork(at_prepare, at_parent, at_child);
}

static void init_primary(int d)
{
	struct sim_ctx *c = &sim.primary[d];

	memset(c, 0, sizeof(*c));
	c->dev = d;
	c->primary = 1;
}

/*
 * SIMCUDA_DRIVER_VERSION: the CUDA version the driver is, 1000 x major +
 * 10 x minor; below 13000 it behaves as a CUDA 12 driver (no CUDA 13 pool
 * calls, no managed pools, no pool location attributes). -1: malformed.
 */
#define SIM_DRIVER_DEFAULT 13020
#define SIM_DRIVER_MIN 12000

static int driver_version;

static void read_driver_version(void)
{
	const char *v = getenv("SIMCUDA_DRIVER_VERSION");
	char *end;
	long n;

	driver_version = SIM_DRIVER_DEFAULT;
	if (!v)
		return;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < SIM_DRIVER_MIN ||
	    n > SIM_DRIVER_DEFAULT) {
		fprintf(stderr, "simcuda: SIMCUDA_DRIVER_VERSION=\"%s\" is invalid: expected a CUDA version (1000 x major + 10 x minor) in %d..%d\n",
			v, SIM_DRIVER_MIN, SIM_DRIVER_DEFAULT);
		driver_version = -1;
		return;
	}
	driver_version = (int)n;
}

static int checked_driver_version(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, read_driver_version);
	return driver_version;
}

int sim_driver_version(void)
{
	int v = checked_driver_version();

	return v < 0 ? SIM_DRIVER_DEFAULT : v;
}

static CUresult do_init(void)
{
	int rc;

	/* The control node first, as the real driver (nodes.c). */
	if (simnode_ctl())
		return CUDA_ERROR_OPERATING_SYSTEM;
	rc = simst_attach();
	if (checked_driver_version() < 0 || sim_preempt_check() < 0)
		return CUDA_ERROR_INVALID_VALUE;

	if (rc != SIMST_OK)
		return rc == SIMST_EINVAL ? CUDA_ERROR_INVALID_VALUE
					  : CUDA_ERROR_UNKNOWN;
	sim_visible_init(simst_ndev());
	if (!sim.ndev)
		return CUDA_ERROR_NO_DEVICE;	/* none listed, or none valid */
	sim.next_va = SIM_VA_BASE;
	for (int d = 0; d < sim.ndev; d++) {
		sim.next_addr[d] = SIM_ADDR_BASE + ((uint64_t)d << 40);
		init_primary(d);
		if (sim_handle_add(&sim.primary[d], SH_CTX, NULL, d))
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return sim_pools_init();
}

SIM_API CUresult cuInit(unsigned int flags)
{
	CUresult rc;

	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim.lock);
	if (sim.state == 0) {
		sim.init_rc = do_init();
		sim.state = sim.init_rc == CUDA_SUCCESS ? 1 : -1;
	}
	rc = sim.init_rc;
	pthread_mutex_unlock(&sim.lock);
	return rc;
}

CUresult sim_enter(void)
{
	pthread_mutex_lock(&sim.lock);
	if (sim.state != 1) {
		pthread_mutex_unlock(&sim.lock);
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	return CUDA_SUCCESS;
}

/* Enters with the calling thread's current context, which must be live. */
CUresult sim_enter_ctx(struct sim_ctx **ctx)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	*ctx = sim_ctx_current();
	if (!*ctx)
		return sim_leave_rc(CUDA_ERROR_INVALID_CONTEXT);
	return CUDA_SUCCESS;
}

CUresult sim_leave_rc(CUresult rc)
{
	pthread_mutex_unlock(&sim.lock);
	return rc;
}

int sim_dev_ok(CUdevice dev)
{
	return dev >= 0 && dev < sim.ndev;
}

SIM_API CUresult cuDriverGetVersion(int *version)
{
	if (!version || checked_driver_version() < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*version = sim_driver_version();
	return CUDA_SUCCESS;
}

#define SIM_ERRORS(X)							\
	X(CUDA_SUCCESS, "no error")					\
	X(CUDA_ERROR_INVALID_VALUE, "invalid argument")			\
	X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")			\
	X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")		\
	X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")		\
	X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")	\
	X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")		\
	X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")	\
	X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")		\
	X(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS") \
	X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")		\
	X(CUDA_ERROR_NOT_FOUND, "named symbol not found")		\
	X(CUDA_ERROR_NOT_READY, "device not ready")			\
	X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")	\
	X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")		\
	X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")		\
	X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state") \
	X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing") \
	X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture") \
	X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences") \
	X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began") \
	X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work") \
	X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream") \
	X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream") \
	X(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream") \
	X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread") \
	X(CUDA_ERROR_UNKNOWN, "unknown error")

static const struct {
	CUresult code;
	const char *name;
	const char *text;
} sim_errors[] = {
#define SIM_ERROR_ENTRY(code, text) { code, #code, text },
	SIM_ERRORS(SIM_ERROR_ENTRY)
#undef SIM_ERROR_ENTRY
};

static CUresult error_lookup(CUresult error, const char **str, int name)
{
	if (!str)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(sim_errors) / sizeof(sim_errors[0]); i++) {
		if (sim_errors[i].code == error) {
			*str = name ? sim_errors[i].name : sim_errors[i].text;
			return CUDA_SUCCESS;
		}
	}
	*str = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorString(CUresult error, const char **str)
{
	return error_lookup(error, str, 0);
}

SIM_API CUresult cuGetErrorName(CUresult error, const char **str)
{
	return error_lookup(error, str, 1);
}

/* The extension API only needs the shared state, not a cuInit. */
static int attach_for_stats(void)
{
	int rc;

	pthread_mutex_lock(&sim.lock);
	rc = simst_attach();
	pthread_mutex_unlock(&sim.lock);
	return rc == SIMST_OK ? 0 : -1;
}

SIM_API int simcudaEngineStats(int dev, int pid, uint64_t *busy_ns,
			       uint64_t *kernels)
{
	if (!busy_ns || !kernels || attach_for_stats())
		return -1;
	return simst_stats(dev, pid, busy_ns, kernels);
}

SIM_API int simcudaDeviceUsed(int dev, uint64_t *used_bytes)
{
	if (!used_bytes || attach_for_stats())
		return -1;
	return simst_used(dev, used_bytes);
}
