// SPDX-License-Identifier: Apache-2.0
/*
 * simcuda-xid: injects an XID critical-error event on a simulated device,
 * as the driver would report a GPU fault, for tests of NVML event
 * consumers (the node agent's health):
 *
 *	SIMCUDA_STATE=... simcuda-xid <device> <xid>
 *
 * Every NVML event set of the same simulated machine that watches the
 * device for nvmlEventTypeXidCriticalError then receives it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "simcuda.h"

static int parse(const char *s, unsigned long long max, unsigned long long *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || end == s || *end || *out > max ? -1 : 0;
}

int main(int argc, char **argv)
{
	unsigned long long dev, xid;

	if (argc != 3 || parse(argv[1], 15, &dev) || parse(argv[2], ~0ULL, &xid)) {
		fprintf(stderr, "usage: simcuda-xid <device 0-15> <xid>\n");
		return 1;
	}
	if (simcudaInjectXid((int)dev, xid) != 0) {
		fprintf(stderr, "simcuda-xid: device %llu: no such device on the simulated machine (SIMCUDA_STATE)\n", dev);
		return 1;
	}
	return 0;
}
