// SPDX-License-Identifier: Apache-2.0
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

int gs_log_level = GS_LOG_WARN;

void gs_log_init(void)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	const char *v = getenv("GPUSLICE_LOG_LEVEL");

	if (!v || !*v)
		return;
	for (int i = 0; i < 4; i++) {
		if (!strcmp(v, names[i]) || (v[0] == '0' + i && !v[1])) {
			gs_log_level = i;
			return;
		}
	}
	gs_log(GS_LOG_WARN,
	       "GPUSLICE_LOG_LEVEL=%s is not one of error, warn, info, debug (or 0-3); using warn",
	       v);
}

void gs_log(int level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	if (level > gs_log_level)
		return;
	n = snprintf(buf, sizeof(buf), "gpuslice[%d]: ", (int)getpid());
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	/* One write per line so lines of concurrent threads do not interleave. */
	if (write(STDERR_FILENO, buf, n) < 0)
		return;
}
