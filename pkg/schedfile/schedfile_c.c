// SPDX-License-Identifier: Apache-2.0
#include <string.h>

#include "sched_file_layout.h"
#include "schedfile_c.h"

_Static_assert(GS_SF_KEY_LEN == GS_SFR_KEY_LEN, "key length");
_Static_assert(GS_SF_NVGPUS <= 64, "vGPU table");

int gs_sfr_decode(const void *buf, size_t len, struct gs_sfr_card *out,
		  const char **why)
{
	const struct gs_sf_header *h = buf;

	memset(out, 0, sizeof(*out));
	if (len < GS_SF_SIZE || memcmp(h->magic, GS_SF_MAGIC, 8)) {
		*why = "not a gpuslice schedule file";
		return -1;
	}
	if (h->version != GS_SF_VERSION || h->core_size != sizeof(h->core) ||
	    h->nvgpus != GS_SF_NVGPUS) {
		*why = "a schedule file of another gpuslice version";
		return -1;
	}
	out->policy = h->core.cfg.policy;
	out->max_inst = h->core.cfg.max_inst;
	out->slice_ns = h->core.cfg.slice_ns;
	out->owner = h->core.owner;
	for (unsigned int v = 0; v < GS_SF_NVGPUS; v++) {
		const struct gs_sf_vgpu *e = &h->vgpu[v];
		struct gs_sfr_vgpu *o = &out->vgpu[out->nvgpus];

		if (e->state != GS_SF_USED)
			continue;
		memcpy(o->key, e->key, GS_SF_KEY_LEN);
		o->key[GS_SF_KEY_LEN] = '\0';
		o->id = e->core_id;
		o->quota = e->quota;
		o->high = e->high;
		o->nprocs = e->nprocs;
		o->busy_ns = e->busy_ns;
		if (e->core_id >= 0 && e->core_id < GS_MAX_VGPUS) {
			o->slices = h->core.vgpu[e->core_id].slices;
			o->overrun_ns = h->core.vgpu[e->core_id].overrun_ns;
		}
		out->nvgpus++;
	}
	return 0;
}
