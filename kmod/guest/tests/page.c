/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * page: the schedule page's mapping rules (kmod/README.md): one read-only
 * page per configured card at offset card * page size, following the
 * card's settings, outliving the file; writable mappings, unconfigured
 * and out-of-range cards refused. (The ioctl ABI: abi.c.)
 */
#include "gstest.h"

#define P "page"
#define UNCONF 31	/* a card no program configures */

static int t_mmap(void)
{
	long ps = gs_page_size();
	const struct gpuslice_sched_page *p;
	struct gpuslice_sched_page s;
	void *w;
	int fd2;

	TOK(gs_card_set(gs_fd, 0, GPUSLICE_POLICY_WEIGHTED, 20, 0, 0));
	p = gs_map_page(gs_fd, 0);
	T(p, "mmap PROT_READ card 0: %s", gs_errname(errno));
	T(gs_page_read(p, &s) == 0, "page seq never even: %u", p->seq);
	TEQ(s.abi_version, 1);
	TEQ(s.policy, GPUSLICE_POLICY_WEIGHTED);
	TEQ(s.max_inst, 20);
	TEQ(s.slice_ns, 5 * MS);
	TEQ(s.mode, GPUSLICE_MODE_NONE);

	/* mprotect to write */
	TE2(mprotect((void *)p, (size_t)ps, PROT_READ | PROT_WRITE), EACCES, EPERM);

	/* the page follows the card's settings */
	TOK(gs_card_set(gs_fd, 0, GPUSLICE_POLICY_PREEMPTIVE, 40, 8 * MS, 0));
	T(gs_page_read(p, &s) == 0, "torn");
	TEQ(s.policy, GPUSLICE_POLICY_PREEMPTIVE);
	TEQ(s.max_inst, 40);
	TEQ(s.slice_ns, 8 * MS);
	TOK(gs_card_set(gs_fd, 0, GPUSLICE_POLICY_WEIGHTED, 20, 0, 0));
	T(gs_page_read(p, &s) == 0, "torn");
	TEQ(s.policy, GPUSLICE_POLICY_WEIGHTED);

	/* a second card's page is its own */
	{
		const struct gpuslice_sched_page *p1 = gs_map_page(gs_fd, 1);
		struct gpuslice_card c;

		T(p1, "mmap card 1: %s", gs_errname(errno));
		TOK(gs_card_get(gs_fd, 1, &c));
		T(gs_page_read(p1, &s) == 0, "torn");
		TEQ(s.policy, c.policy);
		TEQ(s.max_inst, c.max_inst);
		munmap((void *)p1, (size_t)ps);
	}

	/* the mapping outlives the file */
	fd2 = gs_open();
	T(fd2 >= 0, "open: %s", gs_errname(errno));
	{
		const struct gpuslice_sched_page *p2 = gs_map_page(fd2, 0);

		T(p2, "mmap: %s", gs_errname(errno));
		close(fd2);
		T(gs_page_read(p2, &s) == 0, "torn after close");
		TEQ(s.abi_version, 1);
		munmap((void *)p2, (size_t)ps);
	}
	munmap((void *)p, (size_t)ps);

	/* writable mappings are refused */
	w = mmap(NULL, (size_t)ps, PROT_READ | PROT_WRITE, MAP_SHARED, gs_fd, 0);
	T(w == MAP_FAILED, "PROT_WRITE mapping was granted");
	T(errno == EACCES || errno == EPERM, "PROT_WRITE: errno %s",
	  gs_errname(errno));
	w = mmap(NULL, (size_t)ps, PROT_WRITE, MAP_SHARED, gs_fd, 0);
	T(w == MAP_FAILED, "PROT_WRITE-only mapping was granted");

	/* unconfigured and out-of-range cards */
	w = mmap(NULL, (size_t)ps, PROT_READ, MAP_SHARED, gs_fd, (off_t)UNCONF * ps);
	T(w == MAP_FAILED, "mapping of unconfigured card %d was granted", UNCONF);
	w = mmap(NULL, (size_t)ps, PROT_READ, MAP_SHARED, gs_fd, (off_t)32 * ps);
	T(w == MAP_FAILED, "mapping of card 32 was granted");
	w = mmap(NULL, (size_t)ps, PROT_READ, MAP_SHARED, gs_fd, (off_t)1000 * ps);
	T(w == MAP_FAILED, "mapping at page 1000 was granted");
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	/* card 1 set apart from card 0 (policy 4, 20 units) for "its own" */
	if (gs_card_set(gs_fd, 1, GPUSLICE_POLICY_FIXED, 10, 0, 0) < 0) {
		gs_line("GSTEST " P " FAIL setup: card 1: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("mmap", t_mmap);
	return gs_finish();
}
