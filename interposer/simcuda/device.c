// SPDX-License-Identifier: Apache-2.0
/*
 * Device queries. The simulated devices look like a modest Turing-class
 * part: compute capability 7.5, 40 SMs, physical device n on PCI bus
 * 0x10 + n. A device's identity (UUID, PCI bus id) and capacity are its
 * physical device's, whatever ordinal CUDA_VISIBLE_DEVICES gives it, as
 * NVML shows them.
 */
#include <stdio.h>
#include <string.h>

#include "sim.h"

/* Enters and checks the device; on failure nothing is left locked. */
static CUresult enter_dev(CUdevice dev)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_dev_ok(dev))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!device)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	if (!sim_dev_ok(ordinal))
		return sim_leave_rc(CUDA_ERROR_INVALID_DEVICE);
	*device = ordinal;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuDeviceGetCount(int *count)
{
	CUresult rc = sim_enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!count)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	*count = sim.ndev;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult rc = enter_dev(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!name || len <= 0)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	/* Like the real driver, a short buffer gets a truncated name. */
	snprintf(name, (size_t)len, "%s", simst_name());
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	CUresult rc = enter_dev(dev);
	unsigned char b[16];

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!uuid)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	simst_uuid(sim_phys(dev), b);
	memcpy(uuid->bytes, b, sizeof(b));
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	return cuDeviceGetUuid(uuid, dev);
}

SIM_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	CUresult rc = enter_dev(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pciBusId || len <= 0)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	snprintf(pciBusId, (size_t)len, "0000:%02x:00.0",
		 0x10 + sim_phys(dev));
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult rc = enter_dev(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!bytes)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	*bytes = (size_t)simst_capacity(sim_phys(dev));
	return sim_leave_rc(CUDA_SUCCESS);
}

static int attribute(CUdevice_attribute attrib, CUdevice dev, int *value)
{
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		*value = 1024;
		return 0;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		*value = SIM_SMS;
		return 0;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
		*value = SIM_THREADS_PER_SM;
		return 0;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
		*value = 0x10 + sim_phys(dev);
		return 0;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
		*value = 0;
		return 0;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		*value = 7;
		return 0;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		*value = 5;
		return 0;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
		*value = sim_preempt_supported();
		return 0;
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
		*value = 1;
		return 0;
	}
	return -1;
}

SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib,
				      CUdevice dev)
{
	CUresult rc = enter_dev(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pi || attribute(attrib, dev, pi))
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	return sim_leave_rc(CUDA_SUCCESS);
}
