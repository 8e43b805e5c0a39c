// SPDX-License-Identifier: Apache-2.0
/*
 * The compute gate's calls to gpuslice.ko (module mode): ACQUIRE, with
 * ACQUIRE_HOLD so that the card waits for our fence at the slice's end,
 * WAIT, where the fencer sleeps until the slice ends or is cut (both fall
 * back for a module older than them, kmod/README.md), and RELEASE.
 */
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "gate_int.h"

/* The module's file of a gated card, -1 without the module. */
int gs_gate_kmod_fd(const struct gs_gate_card *g)
{
	return g->kc ? g->kc->fd : -1;
}

/*
 * ACQUIRE with flags, HOLD added unless the module is too old for it;
 * 0 or an errno. EINTR is the caller's to retry.
 */
int gs_gate_kmod_acquire(struct gs_gate_card *g, uint32_t flags,
			 struct gpuslice_acquire *a)
{
	int fd = gs_gate_kmod_fd(g);

	for (;;) {
		memset(a, 0, sizeof(*a));
		a->card = (__u32)g->kc->card;
		a->flags = flags | (g->no_hold ? 0 : GPUSLICE_ACQUIRE_HOLD);
		if (fd < 0)
			return EBADF;
		if (ioctl(fd, GPUSLICE_IOC_ACQUIRE, a) == 0)
			return 0;
		if (errno != EINVAL || g->no_hold)
			return errno;
		/* A module before ACQUIRE_HOLD: its card never waits for us. */
		g->no_hold = true;
	}
}

/*
 * Module mode, a slice of ours we did not acquire: say we hold it, so
 * that its end waits for our fence. Not ours any more: the launch goes
 * on anyway, as the page said it could.
 */
void gs_gate_kmod_hold(struct gs_gate_card *g)
{
	struct gpuslice_acquire a;

	gs_gate_kmod_acquire(g, GPUSLICE_ACQUIRE_NONBLOCK, &a);
}

/*
 * Module mode: sleeps until the slice ending at end is over or was cut
 * short (WAIT); an older module has no WAIT: until its end.
 */
void gs_gate_kmod_wait_slice(struct gs_gate_card *g, uint64_t end)
{
	struct gpuslice_wait w = { .slice_end_ns = end };
	struct timespec ts;

	if (!g->no_wait && gs_gate_kmod_fd(g) >= 0) {
		w.card = (__u32)g->kc->card;
		if (ioctl(gs_gate_kmod_fd(g), GPUSLICE_IOC_WAIT, &w) == 0)
			return;
		if (errno == ENOTTY)
			g->no_wait = true;
	}
	ts.tv_sec = (time_t)(end / 1000000000ULL);
	ts.tv_nsec = (long)(end % 1000000000ULL);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/* RELEASE with flags and busy_ns: 0, or -1 (no file, or refused). */
static int kmod_release(struct gs_gate_card *g, uint32_t flags,
			uint64_t busy_ns)
{
	struct gpuslice_release rel = {
		.card = (__u32)g->kc->card,
		.flags = flags,
		.busy_ns = busy_ns,
	};

	if (gs_gate_kmod_fd(g) < 0)
		return -1;
	return ioctl(gs_gate_kmod_fd(g), GPUSLICE_IOC_RELEASE, &rel);
}

bool gs_gate_kmod_report(struct gs_gate_card *g, uint64_t busy_ns)
{
	/* A module without RELEASE_REPORT (EINVAL): kept for the release. */
	return kmod_release(g, GPUSLICE_RELEASE_REPORT, busy_ns) == 0;
}

void gs_gate_kmod_release(struct gs_gate_card *g, uint64_t busy_ns)
{
	kmod_release(g, GPUSLICE_RELEASE_IDLE, busy_ns);
}
