// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * A vGPU's unseen bytes: device memory the driver holds for the vGPU's
 * processes beyond what they charged (a context larger than the shim's
 * estimate, a loaded image, the stack grown at launch, a process without
 * the shim). The agent, on the host, finds them by reconciling the vGPU's
 * charges with the driver's per-process figures, and sets them here
 * (administrators only: the container must not lower them). CHARGE counts
 * them against the cap (gs_client.c).
 */
#include "gs_kmod.h"

/* What the vGPU uses as far as the kernel knows: charged plus unseen. */
s64 gs_vgpu_in_use(const struct gs_kvgpu *kv)
{
	s64 used = atomic64_read(gs_used(kv));
	s64 unseen = atomic64_read(&kv->mem_unseen);

	return used > S64_MAX - unseen ? S64_MAX : used + unseen;
}

/*
 * VGPU_UNSEEN (anyone: its own vGPU, or any with admin) reads,
 * VGPU_SET_UNSEEN (set, administrators) writes first, the value it
 * replaced in *old when old is not NULL (to undo it). Lock-free: the vGPU
 * is looked up under RCU and its counters are atomic.
 */
int gs_vgpu_unseen(struct gpuslice_vgpu_unseen *arg, bool set, bool admin,
		   u64 *old)
{
	s64 was;

	struct gs_kvgpu *kv;
	int err;

	if (set && arg->bytes > S64_MAX)
		return -EINVAL;
	rcu_read_lock();
	kv = gs_vgpu_visible(arg->card, arg->id, admin, &err);
	if (kv) {
		if (set) {
			was = atomic64_xchg(&kv->mem_unseen, arg->bytes);
			if (old)
				*old = was;
		}
		arg->bytes = atomic64_read(&kv->mem_unseen);
		arg->mem_used = atomic64_read(gs_used(kv));
		arg->mem_cap = READ_ONCE(kv->mem_cap);
	}
	rcu_read_unlock();
	return kv ? 0 : err;
}
