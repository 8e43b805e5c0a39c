/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Diagnostics of the shim on stderr, one line each, prefixed
 * "gpuslice[pid]: ". GPUSLICE_LOG_LEVEL picks what is printed: error,
 * warn (default), info or debug (or 0-3).
 */
#ifndef GPUSLICE_LOG_H
#define GPUSLICE_LOG_H

enum gs_log_level { GS_LOG_ERROR, GS_LOG_WARN, GS_LOG_INFO, GS_LOG_DEBUG };

extern int gs_log_level;

void gs_log_init(void);
void gs_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define gs_err(...) gs_log(GS_LOG_ERROR, __VA_ARGS__)
#define gs_warn(...) gs_log(GS_LOG_WARN, __VA_ARGS__)
#define gs_info(...) gs_log(GS_LOG_INFO, __VA_ARGS__)
#define gs_debug(...)                                   \
	do {                                            \
		if (gs_log_level >= GS_LOG_DEBUG)       \
			gs_log(GS_LOG_DEBUG, __VA_ARGS__); \
	} while (0)

#endif /* GPUSLICE_LOG_H */
