// SPDX-License-Identifier: Apache-2.0
/*
 * gstest devices [alloc=<MiB>,...] [launch=<device>] [hold]: which device
 * is which card, as CUDA and NVML tell it, for the tests of
 * CUDA_VISIBLE_DEVICES (visible_test.go).
 *
 * For every CUDA device d: cuda.<d>.uuid (cuDeviceGetUuid_v2, in NVML's
 * text form), cuda.<d>.pci (cuDeviceGetPCIBusId) and cuda.<d>.total
 * (cuDeviceTotalMem_v2). alloc= gives one size per device in ordinal
 * order (0: none): on each device with one, its primary context and a
 * cuMemAlloc of that many MiB, kept: cuda.<d>.alloc.rc and cuMemGetInfo's
 * cuda.<d>.free and cuda.<d>.meminfo. launch=<d>: one kernel in device
 * d's primary context, synchronised: cuda.<d>.launch.rc. Then for every
 * NVML device i: nvml.<i>.uuid, nvml.<i>.pci (busIdLegacy) and
 * nvmlDeviceGetMemoryInfo's nvml.<i>.total and nvml.<i>.used; and, on the
 * simulated driver, physical device i's phys.<i>.used (simcudaDeviceUsed)
 * and this process's kernels there, phys.<i>.kernels (simcudaEngineStats).
 * hold: prints ready, then waits for stdin to close before freeing.
 *
 * cuInit's failure is no failed check here: it prints init.rc=<name> and
 * exits 1.
 */
#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "gpuslice/uuid.h"

#define MAX_DEVS 16

static const char ptx[] =
	".version 7.0\n.target sm_70\n.address_size 64\n"
	".visible .entry spin(.param .u64 ns)\n{\n\tret;\n}\n";

struct want {
	uint64_t mib[MAX_DEVS];
	int launch;	/* -1: none */
	bool hold;
};

static void parse_args(int argc, char **argv, struct want *w)
{
	memset(w, 0, sizeof(*w));
	w->launch = -1;
	for (int i = 0; i < argc; i++) {
		char *a = argv[i];

		if (!strncmp(a, "alloc=", 6)) {
			int n = 0;

			for (char *t = strtok(a + 6, ","); t; t = strtok(NULL, ","))
				if (n < MAX_DEVS)
					w->mib[n++] = parse_size(t);
		} else if (!strncmp(a, "launch=", 7)) {
			w->launch = (int)parse_long(a + 7, 0, MAX_DEVS - 1,
						    "launch");
		} else if (!strcmp(a, "hold")) {
			w->hold = true;
		} else {
			dief("usage: devices [alloc=<MiB>,...] [launch=<device>] [hold]");
		}
	}
}

static void print_identity(int d)
{
	char uuid[GS_UUID_STR_LEN], pci[32] = "";
	CUuuid u;
	size_t t = 0;

	if (CHECK(cu.cuDeviceGetUuid_v2(&u, d))) {
		gs_uuid_format((const unsigned char *)u.bytes, uuid);
		printf("cuda.%d.uuid=%s\n", d, uuid);
	}
	if (CHECK(cu.cuDeviceGetPCIBusId(pci, (int)sizeof(pci), d)))
		printf("cuda.%d.pci=%s\n", d, pci);
	if (CHECK(cu.cuDeviceTotalMem_v2(&t, d)))
		printf("cuda.%d.total=%zu\n", d, t);
}

static void launch_one(int d)
{
	uint64_t ns = 1000000;
	void *params[] = { &ns };
	CUmodule mod;
	CUfunction f;
	CUresult rc;

	if (!CHECK(cu.cuModuleLoadData(&mod, ptx)) ||
	    !CHECK(cu.cuModuleGetFunction(&f, mod, "spin")))
		return;
	rc = cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
	printf("cuda.%d.launch.rc=%s\n", d, rcname(rc));
	CHECK(cu.cuCtxSynchronize());
	CHECK(cu.cuModuleUnload(mod));
}

/* On device d: its primary context, then what w asks of it. */
static CUcontext use_device(int d, const struct want *w, CUdeviceptr *p)
{
	CUcontext ctx = open_primary(d);
	size_t free, total;
	CUresult rc;

	if (w->mib[d]) {
		rc = cu.cuMemAlloc_v2(p, w->mib[d] * MIB);
		printf("cuda.%d.alloc.rc=%s\n", d, rcname(rc));
		if (rc != CUDA_SUCCESS)
			*p = 0;
		mem_info(&free, &total);
		printf("cuda.%d.free=%zu\ncuda.%d.meminfo=%zu\n", d, free, d,
		       total);
	}
	if (w->launch == d)
		launch_one(d);
	return ctx;
}

static void print_nvml_device(unsigned int i)
{
	char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
	nvmlPciInfo_t pci;
	nvmlDevice_t h;
	nvmlMemory_t m;

	if (!nvml_device(i, &h))
		return;
	if (nv.nvmlDeviceGetUUID(h, uuid, sizeof(uuid)) == NVML_SUCCESS)
		printf("nvml.%u.uuid=%s\n", i, uuid);
	if (nv.nvmlDeviceGetPciInfo_v3(h, &pci) == NVML_SUCCESS)
		printf("nvml.%u.pci=%s\n", i, pci.busIdLegacy);
	if (nv.nvmlDeviceGetMemoryInfo(h, &m) == NVML_SUCCESS)
		printf("nvml.%u.total=%llu\nnvml.%u.used=%llu\n", i, m.total, i,
		       m.used);
}

/* NVML's devices, and what the simulated machine holds on each. */
static void print_physical(void)
{
	int (*stats)(int, int, uint64_t *, uint64_t *);
	uint64_t used, busy, kernels;
	unsigned int n = nvml_begin();

	stats = (__typeof__(stats))dlsym(cuda_handle(), "simcudaEngineStats");
	for (unsigned int i = 0; i < n; i++) {
		print_nvml_device(i);
		if (cu.simcudaDeviceUsed &&
		    cu.simcudaDeviceUsed((int)i, &used) == 0)
			printf("phys.%u.used=%llu\n", i,
			       (unsigned long long)used);
		if (stats && stats((int)i, (int)getpid(), &busy, &kernels))
			kernels = 0;	/* no slot yet: nothing ran */
		if (stats)
			printf("phys.%u.kernels=%llu\n", i,
			       (unsigned long long)kernels);
	}
	nv.nvmlShutdown();
}

int cmd_devices(int argc, char **argv)
{
	CUdeviceptr p[MAX_DEVS] = { 0 };
	CUcontext ctx[MAX_DEVS] = { 0 };
	struct want w;
	CUresult rc;
	int n = 0;

	parse_args(argc, argv, &w);
	load_cuda();
	NEED(cuDeviceGetUuid_v2);
	NEED(cuDeviceGetPCIBusId);
	rc = cu.cuInit(0);
	if (rc != CUDA_SUCCESS) {
		printf("init.rc=%s\n", rcname(rc));
		return 1;
	}
	CHECK(cu.cuDeviceGetCount(&n));
	printf("devices=%d\n", n);
	for (int d = 0; d < n && d < MAX_DEVS; d++)
		print_identity(d);
	for (int d = 0; d < n && d < MAX_DEVS; d++)
		if (w.mib[d] || w.launch == d)
			ctx[d] = use_device(d, &w, &p[d]);
	print_physical();
	if (w.hold) {
		char c;

		printf("ready\n");
		fflush(stdout);
		while (read(STDIN_FILENO, &c, 1) > 0)
			;
	}
	for (int d = 0; d < n && d < MAX_DEVS; d++) {
		if (!ctx[d])
			continue;
		CHECK(cu.cuCtxSetCurrent(ctx[d]));
		if (p[d])
			CHECK(cu.cuMemFree_v2(p[d]));
		close_primary(d);
	}
	return finish("devices");
}
