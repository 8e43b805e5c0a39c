// SPDX-License-Identifier: Apache-2.0
/*
 * The container's cards: the card behind a device, and the charging of
 * each card's ledger. Which device is which card is devmap.c's: by the
 * device's UUID, whatever CUDA_VISIBLE_DEVICES did to the ordinals. A
 * device that is none of the container's cards gets no memory: nothing
 * runs unisolated.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice.h"
#include "shim.h"

static struct gs_card cards[GS_MAX_CARDS];
static struct gs_card refused = { .index = -1 };
static pthread_once_t cards_once = PTHREAD_ONCE_INIT;

/* The child of a fork owns none of its parent's charges. */
static void cards_after_fork_child(void)
{
	for (int i = 0; i < GS_MAX_CARDS; i++) {
		pthread_mutex_init(&cards[i].open_lock, NULL);
		if (cards[i].ledger)
			cards[i].ledger->ops->after_fork_child(cards[i].ledger);
	}
}

static void cards_init(void)
{
	const struct gs_config *cfg = gs_config();

	for (int i = 0; i < cfg->ncards; i++) {
		cards[i].index = cfg->cards[i].index;
		cards[i].cap = cfg->cards[i].cap;
		pthread_mutex_init(&cards[i].open_lock, NULL);
	}
	/*
	 * With the cards, not with init.c's handlers: a ledger may be opened
	 * before the shim has loaded the driver (devopen.c attaches at the
	 * driver's first open of a node), and a forked child must not go on
	 * charging its parent's file. No other handler touches a ledger, so
	 * the order among them does not matter.
	 */
	pthread_atfork(NULL, NULL, cards_after_fork_child);
}

/* The card at position pos of the configuration (devmap.c), or refused. */
static struct gs_card *card_at(int pos)
{
	pthread_once(&cards_once, cards_init);
	return pos >= 0 && pos < gs_config()->ncards ? &cards[pos] : &refused;
}

/* No cards (no cap, or an invalid one): nothing to match devices to. */
static bool no_cards(void)
{
	return !gs_config()->ncards;
}

struct gs_card *gs_card_for_device(CUdevice dev)
{
	return card_at(no_cards() ? -1 : gs_devmap_cuda(dev));
}

struct gs_card *gs_card_for_nvml(nvmlDevice_t dev)
{
	return card_at(no_cards() ? -1 : gs_devmap_nvml(dev));
}

/*
 * The card of the last context each thread asked about. A context's device
 * never changes while it lives, and its destruction (gs_card_forget_ctx,
 * before the driver may hand its handle out again) makes every thread ask
 * the driver anew: a gated launch then costs one driver call, not two.
 */
static unsigned int ctx_gen = 1;
static __thread CUcontext tls_ctx;
static __thread struct gs_card *tls_card;
static __thread unsigned int tls_gen;

void gs_card_forget_ctx(void)
{
	__atomic_add_fetch(&ctx_gen, 1, __ATOMIC_ACQ_REL);
}

struct gs_card *gs_current_card(CUcontext *ctx)
{
	unsigned int gen = __atomic_load_n(&ctx_gen, __ATOMIC_ACQUIRE);
	CUdevice dev;

	*ctx = NULL;
	if (!gs_real.cuCtxGetCurrent || !gs_real.cuCtxGetDevice ||
	    gs_real.cuCtxGetCurrent(ctx) != CUDA_SUCCESS || !*ctx)
		return NULL;	/* no context: the driver will say so */
	if (*ctx == tls_ctx && gen == tls_gen)
		return tls_card;
	if (gs_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
		return NULL;
	tls_card = gs_card_for_device(dev);
	tls_ctx = *ctx;
	tls_gen = gen;
	return tls_card;
}

/* The kernel module's ledger where the module is (or must be) used. */
bool gs_use_module(void)
{
	switch (gs_config()->enforce) {
	case GS_ENFORCE_MODULE:
		return true;
	case GS_ENFORCE_FILE:
		return false;
	default:
		return access(GPUSLICE_DEVICE, F_OK) == 0;
	}
}

static int open_module_ledger(struct gs_card *c, struct gs_ledger **l)
{
	uint64_t cap;
	int err = gs_kmod_ledger_open(GPUSLICE_DEVICE, c->index, &cap, l);

	if (err == -ENOENT) {
		gs_err("this process's cgroup has no vGPU on card %d in the kernel module (" GPUSLICE_DEVICE "); device allocations on card %d are refused",
		       c->index, c->index);
		return err;
	}
	if (err == -EUSERS) {
		gs_err("card %d: this container's vGPU has as many processes attached as the kernel module allows (GPUSLICE_MAX_VGPU_FILES, %d); device allocations on card %d are refused",
		       c->index, GPUSLICE_MAX_VGPU_FILES, c->index);
		return err;
	}
	if (err) {
		gs_err("cannot attach to card %d through " GPUSLICE_DEVICE ": %s; device allocations on card %d are refused (GPUSLICE_ENFORCE=file selects the no-module ledger)",
		       c->index, strerror(-err), c->index);
		return err;
	}
	/* The kernel's record wins over the environment. */
	if (cap != c->cap)
		gs_info("card %d: the kernel module's cap of %llu MiB applies, not GPU_CONTAINER_MEM's %llu MiB",
			c->index, (unsigned long long)(cap / GS_MIB),
			(unsigned long long)(c->cap / GS_MIB));
	c->cap = cap;
	gs_info("card %d: cap %llu MiB, ledger " GPUSLICE_DEVICE, c->index,
		(unsigned long long)(cap / GS_MIB));
	return 0;
}

static int open_file_ledger(struct gs_card *c, struct gs_ledger **l)
{
	char path[512];
	int err;

	snprintf(path, sizeof(path), "%s/card%d.ledger",
		 gs_config()->ledger_dir, c->index);
	err = gs_file_ledger_open(path, c->cap, 0, l);
	if (err)
		gs_err("cannot open the memory ledger %s: %s; device allocations on card %d are refused (check GPUSLICE_LEDGER_DIR)",
		       path, strerror(-err), c->index);
	else
		gs_info("card %d: cap %llu MiB, ledger %s", c->index,
			(unsigned long long)(c->cap / GS_MIB), path);
	return err;
}

struct gs_ledger *gs_card_ledger(struct gs_card *c)
{
	struct gs_ledger *l = __atomic_load_n(&c->ledger, __ATOMIC_ACQUIRE);
	int err;

	if (l || c->open_failed)
		return l;
	pthread_mutex_lock(&c->open_lock);
	if (!c->ledger && !c->open_failed) {
		err = gs_use_module() ? open_module_ledger(c, &l) :
				     open_file_ledger(c, &l);
		if (err)
			c->open_failed = true;
		else
			__atomic_store_n(&c->ledger, l, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&c->open_lock);
	return c->ledger;
}

void gs_cards_attach(void)
{
	const struct gs_config *cfg = gs_config();

	if (!cfg->enabled)
		return;
	/* A card attached (or failed) already costs gs_card_ledger one load. */
	for (int i = 0; i < cfg->ncards; i++)
		gs_card_ledger(card_at(i));
}

bool gs_card_usage(struct gs_card *c, uint64_t *used, uint64_t *cap)
{
	struct gs_ledger *l;

	*used = 0;
	*cap = 0;
	if (c->index < 0)
		return true;	/* not this container's: nothing to show */
	l = gs_card_ledger(c);
	return l && gs_ledger_usage(l, used, cap) == 0;
}

/* Refusals are logged, but a retry loop must not flood stderr. */
static bool refusal_log_due(void)
{
	static uint64_t last;
	struct timespec ts;
	uint64_t now, prev;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = ts.tv_sec * 1000000000ULL + ts.tv_nsec;
	prev = __atomic_load_n(&last, __ATOMIC_RELAXED);
	if (prev && now - prev < 100000000ULL)
		return false;
	return __atomic_compare_exchange_n(&last, &prev, now, false,
					   __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static void log_refusal(struct gs_card *c, uint64_t bytes, const char *what,
			int err)
{
	uint64_t used, cap;

	if (!refusal_log_due())
		return;
	if (gs_config()->invalid) {
		gs_warn("%s of %llu bytes refused: the container's GPU memory configuration is invalid (see the first line)",
			what, (unsigned long long)bytes);
	} else if (c->index < 0) {
		gs_warn("%s of %llu bytes refused: the device is not one of this container's cards (GPU_IDX)",
			what, (unsigned long long)bytes);
	} else if (err == -ENOMEM && gs_card_usage(c, &used, &cap)) {
		gs_warn("%s of %llu bytes refused: card %d's vGPU memory cap is %llu MiB and %.1f MiB are in use",
			what, (unsigned long long)bytes, c->index,
			(unsigned long long)(cap / GS_MIB),
			(double)used / GS_MIB);
	} else {
		gs_warn("%s of %llu bytes refused on card %d: ledger error: %s",
			what, (unsigned long long)bytes, c->index,
			strerror(-err));
	}
}

bool gs_charge(struct gs_card *c, uint64_t bytes, const char *what)
{
	struct gs_ledger *l;
	int err = -EPERM;

	if (!bytes)
		return true;
	if (c->index >= 0 && (l = gs_card_ledger(c))) {
		err = gs_ledger_charge(l, bytes);
		if (err == -ENOMEM) {
			/* Pools may hold less than was charged for them. */
			gs_pools_reconcile(c);
			err = gs_ledger_charge(l, bytes);
		}
	}
	if (err)
		log_refusal(c, bytes, what, err);
	return !err;
}

void gs_uncharge(struct gs_card *c, uint64_t bytes)
{
	if (bytes && c && c->ledger)
		gs_ledger_uncharge(c->ledger, bytes);
}

