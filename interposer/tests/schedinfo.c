// SPDX-License-Identifier: Apache-2.0
/*
 * schedinfo <file>: the card settings of a no-module schedule file
 * (policy=, slice_ns=, reclaim_ns=) and the vGPUs it holds, one line each
 * (key=... quota=... nprocs=... slices=... pending=... last_work_ns=...,
 * against now_ns, CLOCK_MONOTONIC as the core's), read without its lock:
 * for tests that wait for a dead container's vGPU to leave the schedule,
 * count the slices a vGPU was granted or check the file's settings.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "sched_file_layout.h"

int cmd_schedinfo(int argc, char **argv)
{
	const struct gs_sf_header *h;
	struct timespec ts;
	int fd;

	if (argc != 1)
		dief("usage: schedinfo <file>");
	fd = open(argv[0], O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		dief("schedinfo: %s: %s", argv[0], strerror(errno));
	h = mmap(NULL, GS_SF_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (h == MAP_FAILED)
		dief("schedinfo: mmap %s: %s", argv[0], strerror(errno));
	if (memcmp(h->magic, GS_SF_MAGIC, sizeof(h->magic)))
		dief("schedinfo: %s is not a schedule file", argv[0]);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	printf("policy=%u\nslice_ns=%llu\nreclaim_ns=%llu\nremoved=%llu\nreaped=%llu\nnow_ns=%llu\n",
	       h->core.cfg.policy, (unsigned long long)h->core.cfg.slice_ns,
	       (unsigned long long)h->core.cfg.reclaim_ns,
	       (unsigned long long)h->removed,
	       (unsigned long long)h->reaped,
	       (unsigned long long)ts.tv_sec * 1000000000ull +
	       (unsigned long long)ts.tv_nsec);
	for (unsigned int v = 0; v < GS_SF_NVGPUS; v++) {
		const struct gs_sf_vgpu *e = &h->vgpu[v];

		if (e->state != GS_SF_USED)
			continue;
		const struct gs_vgpu *cv = e->core_id >= 0 &&
			e->core_id < GS_MAX_VGPUS ? &h->core.vgpu[e->core_id] :
			NULL;

		printf("vgpu key=%.*s quota=%u nprocs=%u slices=%llu overrun_ns=%llu debt_ns=%llu busy_ns=%llu pending=%u last_work_ns=%llu\n",
		       (int)GS_SF_KEY_LEN, e->key, e->quota, e->nprocs,
		       cv ? (unsigned long long)cv->slices : 0ULL,
		       cv ? (unsigned long long)cv->overrun_ns : 0ULL,
		       cv ? (unsigned long long)cv->debt_ns : 0ULL,
		       (unsigned long long)e->busy_ns, cv ? cv->pending : 0u,
		       cv ? (unsigned long long)cv->last_work_ns : 0ULL);
	}
	munmap((void *)h, GS_SF_SIZE);
	return 0;
}
