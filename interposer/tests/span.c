// SPDX-License-Identifier: Apache-2.0
/*
 * span <first> <end> <done> <waited>: the busy span the shim's fence
 * reports (src/gate_span.h) for work launched at first in a slice ending
 * at end, found complete at done, the fence having waited (1) or not (0);
 * prints span_ns=. The cases a loaded machine makes rare (a launch after
 * the slice's end, a fencer that comes late) are checked here directly.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "gate_span.h"

static uint64_t arg_u64(const char *name, const char *s)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end)
		dief("span: %s: want a number of nanoseconds, got %s", name, s);
	return v;
}

int cmd_span(int argc, char **argv)
{
	if (argc != 4)
		dief("usage: span <first> <end> <done> <waited>");
	printf("span_ns=%llu\n", (unsigned long long)
	       gs_gate_span(arg_u64("first", argv[0]), arg_u64("end", argv[1]),
			    arg_u64("done", argv[2]),
			    arg_u64("waited", argv[3]) != 0));
	return 0;
}
