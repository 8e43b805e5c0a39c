/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Extension API of the simulated libcuda.so.1, for tests and benchmarks
 * (not part of CUDA). A harness finds these with dlsym() on the library:
 *
 *	int (*stats)(int, int, uint64_t *, uint64_t *) =
 *		dlsym(handle, "simcudaEngineStats");
 *
 * Both return 0 on success and -1 when the simulated machine cannot be
 * attached (bad SIMCUDA_* values), the device does not exist, a pointer is
 * NULL, or no process with that pid ever used the machine.
 */
#ifndef SIMCUDA_SIMCUDA_H
#define SIMCUDA_SIMCUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Engine time spent on kernels of device dev and the number of kernels
 * completed: by process pid (also after it exited, until its process-table
 * slot is reused), or by all processes together when pid is 0.
 */
int simcudaEngineStats(int dev, int pid, uint64_t *busy_ns,
		       uint64_t *kernels);

/* Physical memory of device dev in use by all live processes, in bytes. */
int simcudaDeviceUsed(int dev, uint64_t *used_bytes);

/*
 * In libnvidia-ml.so.1: reports XID xid (an nvmlEventTypeXidCriticalError
 * event) on device dev to every NVML event set of the simulated machine
 * that watches it. 0, or -1 for a bad device or configuration.
 */
int simcudaInjectXid(int dev, unsigned long long xid);

#ifdef __cplusplus
}
#endif

#endif /* SIMCUDA_SIMCUDA_H */
