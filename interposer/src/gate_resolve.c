// SPDX-License-Identifier: Apache-2.0
/*
 * Which of the process's cards the compute gate holds to time slices, and
 * by what: decided once, at the first launch, when the driver can say how
 * many cards there are. With the module, ATTACH's answer decides (a
 * compute vGPU under policy 1-6); without it, the card's GPU_POLICY and
 * its schedule file (sched_file.c). gate.c has the whole story.
 */
#include <stdio.h>
#include <string.h>

#include "gate_int.h"
#include "sched_file.h"

int gs_gate_mode;

static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;

/* The card's settings from the environment, NULL when not listed. */
static const struct gs_card_config *card_config(const struct gs_card *c)
{
	const struct gs_config *cfg = gs_config();

	for (int i = 0; i < cfg->ncards; i++)
		if (cfg->cards[i].index == c->index)
			return &cfg->cards[i];
	return NULL;
}

/*
 * No module: the card's schedule file decides (sched_file.c). Only cards
 * with a GPU_POLICY are looked at; the file's card settings win over the
 * environment's. Returns the card's GS_GATE_CARD_* state.
 */
static int resolve_file_card(struct gs_card *c)
{
	const struct gs_config *cfg = gs_config();
	const struct gs_card_config *cc = card_config(c);
	struct gs_gate_card *g = &c->gate;
	struct gs_sf_want want;
	struct gs_sf_info info;
	struct gs_sf *sf;
	char path[512], msg[512] = "";
	int rc;

	if (cfg->compute_invalid) {
		gs_err("card %d: kernel launches are refused: %s", c->index,
		       cfg->compute_err);
		return GS_GATE_CARD_REFUSED;
	}
	if (!cc || cc->policy < 0)
		return GS_GATE_CARD_UNGATED;
	snprintf(path, sizeof(path), "%s/card%d.sched", cfg->sched_dir,
		 c->index);
	want.policy = (uint32_t)cc->policy;
	want.max_inst = cfg->max_inst;
	want.slice_ns = cfg->slice_ns;
	want.reclaim_ns = cfg->reclaim_ns;
	want.quota = cc->quota;
	want.high = cfg->high;
	want.key = cfg->vgpu_key;
	rc = gs_sf_open(path, &want, &sf, &info, msg, sizeof(msg));
	if (rc < 0) {
		gs_err("card %d: kernel launches are refused: %s (GPUSLICE_SCHED_DIR)",
		       c->index, msg);
		return GS_GATE_CARD_REFUSED;
	}
	if (info.differs)
		gs_warn("card %d: the schedule file %s says policy %u, %u units of %llu ms, reclaim %llu ms; the environment's policy %u, %u units of %llu ms, reclaim %llu ms do not apply",
			c->index, path, info.policy, info.max_inst,
			(unsigned long long)(info.slice_ns / 1000000),
			(unsigned long long)(info.reclaim_ns / 1000000),
			want.policy, want.max_inst,
			(unsigned long long)(want.slice_ns / 1000000),
			(unsigned long long)(want.reclaim_ns / 1000000));
	if (rc == 0) {
		gs_info("card %d: kernel launches are not gated (quota %u%%, policy %u)",
			c->index, want.quota, info.policy);
		return GS_GATE_CARD_UNGATED;
	}
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->fence_cv, NULL);
	g->sf = sf;
	g->id = info.id;
	g->page = gs_sf_page(sf);
	gs_gate_track(g);
	gs_info("card %d: kernel launches gated by the schedule file %s (vGPU %s as %d, quota %u%%, policy %u)",
		c->index, path, cfg->vgpu_key, info.id, info.quota,
		info.policy);
	return GS_GATE_CARD_GATED;
}

/* Decides whether card c's launches are gated; resolve_lock held. */
static void resolve_card_locked(struct gs_card *c)
{
	struct gs_gate_card *g = &c->gate;
	const struct gs_kmod_card *kc;
	struct gs_ledger *l;
	int state;

	if (__atomic_load_n(&g->state, __ATOMIC_ACQUIRE) !=
	    GS_GATE_CARD_UNRESOLVED)
		return;
	if (!gs_use_module()) {
		__atomic_store_n(&g->state, resolve_file_card(c),
				 __ATOMIC_RELEASE);
		return;
	}
	l = gs_card_ledger(c);
	kc = gs_kmod_ledger_card(l);
	if (!l) {
		state = GS_GATE_CARD_REFUSED;
		gs_err("card %d: kernel launches are refused: no vGPU is attached through " GPUSLICE_DEVICE " (see above)",
		       c->index);
	} else if (!kc || kc->att.mode != GPUSLICE_MODE_COMPUTE ||
		   kc->att.policy == GPUSLICE_POLICY_NATIVE) {
		state = GS_GATE_CARD_UNGATED;
		if (kc)
			gs_info("card %d: kernel launches are not gated (%s vGPU, policy %u)",
				c->index,
				kc->att.mode == GPUSLICE_MODE_COMPUTE ?
					"compute" : "memory",
				kc->att.policy);
	} else {
		state = GS_GATE_CARD_GATED;
		pthread_mutex_init(&g->lock, NULL);
		pthread_cond_init(&g->fence_cv, NULL);
		g->kc = kc;
		g->id = (int32_t)kc->att.id;
		g->page = kc->page;
		gs_gate_track(g);
		gs_info("card %d: kernel launches gated by the module's schedule (vGPU %d, quota %u%%, policy %u)",
			c->index, g->id, kc->att.quota, kc->att.policy);
		if (!g->page)
			gs_warn("card %d: the schedule page cannot be mapped: every slice is checked with ACQUIRE",
				c->index);
	}
	__atomic_store_n(&g->state, state, __ATOMIC_RELEASE);
}

/* No module: a card with a GPU_POLICY (or a malformed compute setting). */
static bool file_gate_wanted(void)
{
	const struct gs_config *cfg = gs_config();

	if (cfg->compute_invalid)
		return true;
	for (int i = 0; i < cfg->ncards; i++)
		if (cfg->cards[i].policy > 0)
			return true;
	return false;
}

/*
 * Decides for every card the process sees, once the driver can say how
 * many there are (it can once a context exists, which a launch needs).
 */
int gs_gate_resolve(void)
{
	int mode, n = 0, on = 0;

	pthread_mutex_lock(&resolve_lock);
	mode = __atomic_load_n(&gs_gate_mode, __ATOMIC_ACQUIRE);
	if (mode != GS_GATE_UNKNOWN)
		goto out;
	if (!gs_enabled() || gs_config()->invalid ||
	    (!gs_use_module() && !file_gate_wanted())) {
		mode = GS_GATE_OFF;
		goto store;
	}
	if (!gs_real.cuDeviceGetCount ||
	    gs_real.cuDeviceGetCount(&n) != CUDA_SUCCESS)
		goto out;	/* no driver yet: nothing can launch; ask again */
	for (int d = 0; d < n; d++) {
		struct gs_card *c = gs_card_for_device(d);

		if (c->index < 0)
			continue;	/* not the container's: no vGPU */
		resolve_card_locked(c);
		if (c->gate.state != GS_GATE_CARD_UNGATED)
			on = 1;
	}
	mode = on ? GS_GATE_ON : GS_GATE_OFF;
store:
	__atomic_store_n(&gs_gate_mode, mode, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&resolve_lock);
	return mode;
}

void gs_gate_resolve_card(struct gs_card *c)
{
	pthread_mutex_lock(&resolve_lock);
	resolve_card_locked(c);
	pthread_mutex_unlock(&resolve_lock);
}
