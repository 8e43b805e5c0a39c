/* SPDX-License-Identifier: Apache-2.0 */
/* A schedule file's snapshot, decoded for package schedfile. */
#ifndef GS_SCHEDFILE_C_H
#define GS_SCHEDFILE_C_H

#include <stddef.h>
#include <stdint.h>

#define GS_SFR_KEY_LEN 128

struct gs_sfr_vgpu {
	char key[GS_SFR_KEY_LEN + 1];
	int32_t id;
	uint32_t quota, high, nprocs;
	uint64_t busy_ns, slices, overrun_ns;
};

struct gs_sfr_card {
	uint32_t policy, max_inst;
	uint64_t slice_ns;
	int32_t owner;
	uint32_t nvgpus;
	struct gs_sfr_vgpu vgpu[64];
};

/* 0, or -1 with *why set: not a schedule file of this version. */
int gs_sfr_decode(const void *buf, size_t len, struct gs_sfr_card *out,
		  const char **why);

#endif
