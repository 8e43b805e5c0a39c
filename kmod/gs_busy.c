// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * A vGPU's busy time (VGPU_STATS busy_ns, /proc/gpuslice/vgpus, the
 * agent's xgpu_core_percentage_used): what its processes report at
 * RELEASE (the shim: from each slice's first launch to its end, and the
 * fence's wait past it), bounded by what the kernel itself saw. It cannot
 * exceed the time the vGPU owned the card (its slices and drains, the
 * core's granted time; for a card that does not gate, the time since the
 * vGPU was created), and it is never less than the time the card waited
 * for its drains (the core's overrun): a tenant can neither claim more
 * than it was granted nor hide the time it held the card.
 */
#include "gs_kmod.h"

/* The most kv can have been busy until now; card->lock held. */
static u64 gs_busy_bound(const struct gs_kcard *card,
			 const struct gs_kvgpu *kv, u64 now)
{
	if (!kv->dead && kv->mode == GPUSLICE_MODE_COMPUTE &&
	    gs_card_gated(card))
		return gs_vgpu_granted_ns(&card->core, kv->id, now);
	return now > kv->created_ns ? now - kv->created_ns : 0;
}

/* A RELEASE reports ns of busy time at now; card->lock held. */
void gs_busy_report(struct gs_kcard *card, struct gs_kvgpu *kv, u64 ns,
		    u64 now)
{
	u64 bound = gs_busy_bound(card, kv, now);
	u64 busy = kv->busy_ns + ns < kv->busy_ns ? U64_MAX : kv->busy_ns + ns;

	kv->busy_ns = min(busy, bound);
}

/* The busy time to show: at least its drains' overrun; card->lock held. */
u64 gs_vgpu_busy(const struct gs_kvgpu *kv)
{
	u64 overrun = 0;

	if (!kv->dead && kv->mode == GPUSLICE_MODE_COMPUTE)
		overrun = gs_vgpu_overrun_ns(&kv->card->core, kv->id);
	return max(kv->busy_ns, overrun);
}
