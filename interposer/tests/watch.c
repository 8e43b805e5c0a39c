// SPDX-License-Identifier: Apache-2.0
/*
 * gstest watch <interval-ms> [device]: prints "used=<bytes> at=<ns>" lines,
 * the device's physical memory in use by all processes and when it was read
 * (CLOCK_REALTIME), every interval until stdin closes. Run WITHOUT the shim: it is the independent witness that
 * the cap holds on the device itself.
 *
 * It uses simcuda's simcudaDeviceUsed when the driver has it. Elsewhere it
 * falls back to cuMemGetInfo (total - free) in a context of its own, whose
 * cost is then included in what it prints (said once on stderr).
 */
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int cmd_watch(int argc, char **argv)
{
	struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
	long ms, dev;

	if (argc < 1 || argc > 2)
		dief("usage: watch <interval-ms> [device]");
	ms = parse_long(argv[0], 1, 60000, "interval-ms");
	dev = argc > 1 ? parse_long(argv[1], 0, 255, "device") : 0;
	load_cuda();
	if (!cu.simcudaDeviceUsed) {
		open_primary((int)dev);
		notef("watch: no simcudaDeviceUsed: printing total - free, which includes the watcher's own context");
	}
	for (;;) {
		struct timespec now;
		uint64_t used;
		size_t free, total;

		if (cu.simcudaDeviceUsed) {
			if (cu.simcudaDeviceUsed((int)dev, &used))
				dief("simcudaDeviceUsed(%ld) failed", dev);
		} else {
			mem_info(&free, &total);
			used = total - free;
		}
		clock_gettime(CLOCK_REALTIME, &now);
		printf("used=%llu at=%lld\n", (unsigned long long)used,
		       (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
		fflush(stdout);
		if (poll(&pfd, 1, (int)ms) > 0) {
			char buf[64];

			if (read(STDIN_FILENO, buf, sizeof(buf)) <= 0)
				break;
		}
	}
	return 0;
}
