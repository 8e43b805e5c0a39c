// SPDX-License-Identifier: Apache-2.0
/*
 * The monitoring side of the simulated libnvidia-ml.so.1: utilization
 * from the shared engine's busy time, and XID critical-error events that
 * tests inject into the shared state (simcudaInjectXid, simcuda-xid).
 *
 * Utilization is what NVML reports: the percent of a sample period during
 * which a kernel ran. Here the period is this process's: since its
 * previous reading (at least 1/6 s ago, as NVML's shortest period; a
 * reading sooner repeats the last figure), or since nvmlInit.
 *
 * Events: a set remembers, per device it watches, how many XIDs it has
 * seen; nvmlEventSetWait returns the next device whose shared count moved
 * on, with the last XID injected there (NVML too returns only the last of
 * several XIDs that arrived between two waits).
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "nvml_int.h"
#include "simcuda.h"
#include "state.h"

#define UTIL_MIN_PERIOD_NS (1000000000ULL / 6)
#define WAIT_POLL_NS 2000000ULL		/* event wait: look every 2 ms */
#define SET_MAGIC 0x7465536e65764573ULL	/* "sEvenSet" */

struct util_sample {
	uint64_t t;		/* CLOCK_MONOTONIC ns of the period's start */
	uint64_t busy;		/* the engine's busy ns then */
	unsigned int last;	/* the last figure, for readings too soon */
	int have_last;
};

static pthread_mutex_t util_lock = PTHREAD_MUTEX_INITIALIZER;
static struct util_sample util[SIMST_MAX_DEV];

void simnvml_util_baseline(void)
{
	uint64_t now = simst_now_ns(), busy, kernels;

	pthread_mutex_lock(&util_lock);
	for (int i = 0; i < simst_ndev(); i++) {
		if (simst_stats(i, 0, &busy, &kernels) != 0)
			continue;
		util[i] = (struct util_sample){ .t = now, .busy = busy };
	}
	pthread_mutex_unlock(&util_lock);
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
						    nvmlUtilization_t *out)
{
	int i = simnvml_enter(device, out);
	uint64_t busy, kernels, now, dt, db;
	struct util_sample *s;

	if (i < 0)
		return (nvmlReturn_t)-i;
	if (simst_stats(i, 0, &busy, &kernels) != 0)
		return NVML_ERROR_UNKNOWN;
	now = simst_now_ns();
	pthread_mutex_lock(&util_lock);
	s = &util[i];
	dt = now - s->t;
	if (!s->have_last || dt >= UTIL_MIN_PERIOD_NS) {
		db = busy > s->busy ? busy - s->busy : 0;
		/* A kernel's time is counted when it ends: cap at 100. */
		s->last = dt ? (unsigned int)(db >= dt ? 100 : db * 100 / dt) : 0;
		s->have_last = 1;
		s->t = now;
		s->busy = busy;
	}
	out->gpu = s->last;
	out->memory = 0;	/* memory traffic is not modelled */
	pthread_mutex_unlock(&util_lock);
	return NVML_SUCCESS;
}

struct nvmlEventSet_st {
	uint64_t magic;
	pthread_mutex_t lock;
	uint64_t mask[SIMST_MAX_DEV];	/* event types watched per device */
	uint64_t seen[SIMST_MAX_DEV];	/* XIDs of the device seen so far */
	int next;			/* where the next scan starts: fairness */
};

static int valid_set(nvmlEventSet_t set)
{
	return set && set->magic == SET_MAGIC;
}

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	nvmlEventSet_t s;

	if (!set)
		return NVML_ERROR_INVALID_ARGUMENT;
	/* Any device's handle answers whether NVML is initialised. */
	if (simnvml_enter(simnvml_handle(0), set) == -NVML_ERROR_UNINITIALIZED)
		return NVML_ERROR_UNINITIALIZED;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NVML_ERROR_UNKNOWN;
	s->magic = SET_MAGIC;
	pthread_mutex_init(&s->lock, NULL);
	*set = s;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	if (!valid_set(set))
		return NVML_ERROR_INVALID_ARGUMENT;
	set->magic = 0;
	pthread_mutex_destroy(&set->lock);
	free(set);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
						       unsigned long long *types)
{
	int i = simnvml_enter(device, types);

	if (i < 0)
		return (nvmlReturn_t)-i;
	*types = SIMNVML_EVENT_XID;
	return NVML_SUCCESS;
}

/* Events from the moment of registration on: earlier XIDs are not news. */
NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
					       unsigned long long types,
					       nvmlEventSet_t set)
{
	int i = simnvml_enter(device, set);
	uint64_t seq, last;

	if (i < 0)
		return (nvmlReturn_t)-i;
	if (!valid_set(set))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (types & ~SIMNVML_EVENT_XID)
		return NVML_ERROR_NOT_SUPPORTED;
	if (simst_xid_read(i, &seq, &last) != 0)
		return NVML_ERROR_UNKNOWN;
	pthread_mutex_lock(&set->lock);
	if (!(set->mask[i] & SIMNVML_EVENT_XID))
		set->seen[i] = seq;
	set->mask[i] |= types;
	pthread_mutex_unlock(&set->lock);
	return NVML_SUCCESS;
}

/* One scan of the watched devices: 1 and *data filled when one has news. */
static int scan(nvmlEventSet_t set, nvmlEventData_t *data)
{
	int n = simst_ndev(), found = 0;
	uint64_t seq, last;

	pthread_mutex_lock(&set->lock);
	for (int k = 0; k < n && !found; k++) {
		int i = (set->next + k) % n;

		if (!(set->mask[i] & SIMNVML_EVENT_XID) ||
		    simst_xid_read(i, &seq, &last) != 0 || seq == set->seen[i])
			continue;
		set->seen[i] = seq;
		set->next = (i + 1) % n;
		*data = (nvmlEventData_t){
			.device = simnvml_handle(i),
			.eventType = SIMNVML_EVENT_XID,
			.eventData = last,
			.gpuInstanceId = 0xFFFFFFFFu,
			.computeInstanceId = 0xFFFFFFFFu,
		};
		found = 1;
	}
	pthread_mutex_unlock(&set->lock);
	return found;
}

NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set,
					  nvmlEventData_t *data,
					  unsigned int timeoutms)
{
	uint64_t deadline = simst_now_ns() + (uint64_t)timeoutms * 1000000ULL;

	if (!valid_set(set) || !data)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (;;) {
		uint64_t now, wait;
		struct timespec ts;

		/* A shutdown meanwhile may let the next init map another machine. */
		if (simnvml_enter(simnvml_handle(0), data) == -NVML_ERROR_UNINITIALIZED)
			return NVML_ERROR_UNINITIALIZED;
		if (scan(set, data))
			return NVML_SUCCESS;
		now = simst_now_ns();
		if (now >= deadline)
			return (nvmlReturn_t)SIMNVML_ERROR_TIMEOUT;
		wait = deadline - now < WAIT_POLL_NS ? deadline - now : WAIT_POLL_NS;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)wait;
		nanosleep(&ts, NULL);
	}
}

NVML_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set,
				       nvmlEventData_t *data,
				       unsigned int timeoutms)
{
	return nvmlEventSetWait_v2(set, data, timeoutms);
}

NVML_API int simcudaInjectXid(int dev, unsigned long long xid)
{
	if (simst_attach() != SIMST_OK)
		return -1;
	return simst_xid_inject(dev, xid);
}
