/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel module's per-card file of a process (ledger_kmod.c), shared
 * by the memory ledger and the compute gate (gate.c): one open
 * /dev/gpuslice file per card, what ATTACH answered on it, and the card's
 * read-only schedule page mapped through it.
 */
#ifndef GPUSLICE_KMOD_H
#define GPUSLICE_KMOD_H

#include <stdint.h>

#include "gpuslice.h"
#include "ledger.h"

struct gs_kmod_card {
	/*
	 * The attached file; -1 once broken. A forked child attaches a file
	 * of its own (the ledger's after_fork_child) before any other thread
	 * exists, so readers load it once per call.
	 */
	int fd;
	int card;				/* the physical index */
	struct gpuslice_attach att;		/* the kernel's record */
	/*
	 * The card's schedule page, read-only: mapped when ATTACH says the
	 * card's launches are gated (a compute vGPU, a policy other than 0);
	 * NULL otherwise or when it cannot be mapped.
	 */
	const struct gpuslice_sched_page *page;
};

/* The module's file behind l, or NULL when l is not the module's ledger. */
const struct gs_kmod_card *gs_kmod_ledger_card(struct gs_ledger *l);

#endif /* GPUSLICE_KMOD_H */
