/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * cycles: unloading and reloading gpuslice.ko. An open file (or a mapping
 * of the schedule page) keeps the module in (EWOULDBLOCK/EBUSY) and it
 * stays usable; with vGPUs configured, after clients that ran the
 * scheduler, after a vGPU was destroyed under an attached client, the
 * module unloads, its device and /proc files go away, and a reload from
 * /gpuslice.ko starts from a fresh state. Five times. Runs last: it
 * reloads the module.
 */
#include "gstest.h"

#define P "cycles"
#define KO "/gpuslice.ko"
#define NAME "gpuslice"
#define CYCLES 5

static uint64_t cgA, cgB;
static volatile int *flag;

static int do_unload(void)
{
	return (int)syscall(SYS_delete_module, NAME, O_NONBLOCK);
}

static int do_load(void)
{
	int fd = open(KO, O_RDONLY | O_CLOEXEC), r, e;

	if (fd < 0)
		return -1;
	r = (int)syscall(SYS_finit_module, fd, "", 0);
	e = errno;
	close(fd);
	errno = e;
	return r;
}

static int module_loaded(void)
{
	struct stat st;

	return stat("/sys/module/" NAME, &st) == 0;
}

/* Waits up to ms for /dev/gpuslice to open; the fd or -1. */
static int wait_device(unsigned ms)
{
	uint64_t t0 = gs_now();

	for (;;) {
		int fd = gs_open();

		if (fd >= 0)
			return fd;
		if (gs_now() - t0 > (uint64_t)ms * MS)
			return -1;
		gs_sleep_ms(10);
	}
}

static int t_busy_while_open(void)
{
	struct gpuslice_version v;
	const struct gpuslice_sched_page *p;
	int fd;

	T(module_loaded(), "module not loaded at start");
	TOK(gs_card_set(gs_fd, 0, GPUSLICE_POLICY_WEIGHTED, 20, 0, 0));
	TE2(do_unload(), EWOULDBLOCK, EBUSY);
	T(module_loaded(), "module gone although a file was open");
	TOK(gs_version(gs_fd, &v));
	TEQ(v.abi_version, 1);
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_version(fd, &v));

	/* a mapping keeps the file, hence the module */
	p = gs_map_page(fd, 0);
	T(p, "mmap: %s", gs_errname(errno));
	close(fd);
	close(gs_fd);
	gs_fd = -1;
	TE2(do_unload(), EWOULDBLOCK, EBUSY);
	T(module_loaded(), "module gone although its page was mapped");
	T(p->abi_version == 1, "page abi_version %u", p->abi_version);
	munmap((void *)p, (size_t)gs_page_size());
	gs_fd = gs_open();
	T(gs_fd >= 0, "reopen: %s", gs_errname(errno));
	TOK(gs_version(gs_fd, &v));
	return 0;
}

static int child_client(void *arg)
{
	int kind = (int)(uintptr_t)arg;
	struct gpuslice_attach a;
	uint64_t end;
	int32_t owner;
	int fd;

	T(gs_cg_enter("gscyA") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, 0, &a));
	TOK(gs_attach(fd, 1, &a));
	TOK(gs_charge(fd, 0, 4096, NULL));
	TOK(gs_charge(fd, 1, 8192, NULL));
	for (int i = 0; i < 3; i++) {
		TOK(gs_acquire(fd, 0, 0, 2000 * MS, &end, &owner));
		TOK(gs_release(fd, 0, 0, 100));
	}
	if (kind == 1) {
		/* the parent destroys our vGPU while we stay attached */
		flag[0] = 1;
		for (int i = 0; i < 2500 && !flag[1]; i++)
			gs_sleep_ms(2);
		T(flag[1], "parent did not destroy");
		T(gs_charge(fd, 0, 1, NULL) < 0 && errno == ENODEV,
		  "charge after destroy: %s", gs_errname(errno));
	}
	/* exit with everything still attached, charged, pending */
	return 0;
}

static int one_cycle(int i)
{
	struct gpuslice_card c;
	struct stat st;
	pid_t pid;
	int fd, idA, idB, idM;

	TOK(gs_card_set(gs_fd, 0, GPUSLICE_POLICY_WEIGHTED, 20, 2 * MS, 0));
	TOK(gs_card_set(gs_fd, 1, GPUSLICE_POLICY_NATIVE, 20, 0, 0));
	idA = gs_vgpu_create(gs_fd, 0, cgA, 1 << 20, 50, 0, GPUSLICE_MODE_COMPUTE);
	idB = gs_vgpu_create(gs_fd, 0, cgB, 1 << 20, 30, 0, GPUSLICE_MODE_COMPUTE);
	idM = gs_vgpu_create(gs_fd, 1, cgA, 1 << 20, 0, 0, GPUSLICE_MODE_MEMORY);
	T(idA >= 0 && idB >= 0 && idM >= 0, "cycle %d: create: %s", i,
	  gs_errname(errno));
	/* a client that ran the scheduler (and, on odd cycles, was detached) */
	flag[0] = flag[1] = 0;
	pid = gs_spawn(child_client, (void *)(uintptr_t)(i & 1), 20);
	T(pid > 0, "fork");
	if (i & 1) {
		for (int j = 0; j < 2500 && !flag[0]; j++)
			gs_sleep_ms(2);
		T(flag[0], "client not ready: %s", gs_kid_msg(pid));
		TOK(gs_vgpu_destroy(gs_fd, 0, (uint32_t)idA));
		flag[1] = 1;
	}
	TJOIN(pid, 10000, "client");

	/* with the vGPUs still there, no file open */
	close(gs_fd);
	gs_fd = -1;
	TOK(do_unload());
	T(!module_loaded(), "cycle %d: /sys/module/" NAME " still there", i);
	fd = gs_open();
	T(fd < 0, "cycle %d: %s opens after the unload", i, GPUSLICE_DEVICE);
	T(stat("/proc/gpuslice", &st) < 0 && errno == ENOENT,
	  "cycle %d: /proc/gpuslice still there after the unload", i);
	gs_sleep_ms(100);	/* any timer left behind would fire now */

	TOK(do_load());
	T(module_loaded(), "cycle %d: not loaded after finit_module", i);
	gs_fd = wait_device(3000);
	T(gs_fd >= 0, "cycle %d: %s did not come back: %s", i, GPUSLICE_DEVICE,
	  gs_errname(errno));
	/* fresh */
	TE(gs_card_get(gs_fd, 0, &c), ENODEV);
	TE(gs_card_get(gs_fd, 1, &c), ENODEV);
	{
		static struct gs_tab t;

		T(gs_tab_read("cards", &t) == 0, "cards: %s", gs_errname(errno));
		T(t.nrows == 0, "cycle %d: %d cards listed after the reload", i,
		  t.nrows);
		T(gs_tab_read("vgpus", &t) == 0, "vgpus: %s", gs_errname(errno));
		T(t.nrows == 0, "cycle %d: %d vGPUs listed after the reload", i,
		  t.nrows);
	}
	return 0;
}

static int t_unload_reload(void)
{
	for (int i = 0; i < CYCLES; i++)
		if (one_cycle(i) < 0)
			return -1;
	return 0;
}

static int t_proc_open_across_unload(void)
{
	char buf[4096];
	int pfd, r;
	ssize_t n;

	TOK(gs_card_set(gs_fd, 0, GPUSLICE_POLICY_FIXED, 20, 0, 0));
	pfd = open("/proc/gpuslice/cards", O_RDONLY | O_CLOEXEC);
	T(pfd >= 0, "open /proc/gpuslice/cards: %s", gs_errname(errno));
	close(gs_fd);
	gs_fd = -1;
	r = do_unload();
	if (r == 0) {
		/* the entry is gone: reading the stale file must fail cleanly */
		n = read(pfd, buf, sizeof(buf));
		gs_info(P " read of /proc/gpuslice/cards opened before the unload: "
			"%zd (%s)", n, n < 0 ? gs_errname(errno) : "-");
		close(pfd);
		TOK(do_load());
	} else {
		gs_info(P " unload with a /proc file open: %s", gs_errname(errno));
		close(pfd);
		TOK(do_unload());
		TOK(do_load());
	}
	gs_fd = wait_device(3000);
	T(gs_fd >= 0, "%s did not come back", GPUSLICE_DEVICE);
	{
		struct gpuslice_card c;

		TE(gs_card_get(gs_fd, 0, &c), ENODEV);
	}
	return 0;
}

/* After all this, the module is loaded and serves clients normally. */
static int child_final(void *arg)
{
	struct gpuslice_attach a;
	uint64_t used;
	int fd;

	(void)arg;
	T(gs_cg_enter("gscyB") == 0, "enter: %s", gs_errname(errno));
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, 2, &a));
	TOK(gs_charge(fd, 2, 1 << 20, &used));
	TEQ(used, 1 << 20);
	TE(gs_charge(fd, 2, 1, NULL), ENOMEM);
	close(fd);
	return 0;
}

static int t_works_after(void)
{
	struct gpuslice_vgpu_stats s;
	pid_t pid;
	int id;

	T(module_loaded(), "module not loaded");
	TOK(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_NATIVE, 20, 0, 0));
	id = gs_vgpu_create(gs_fd, 2, cgB, 1 << 20, 0, 0, GPUSLICE_MODE_MEMORY);
	T(id == 0, "first vGPU of a fresh card: id %d (%s)", id,
	  id < 0 ? gs_errname(errno) : "-");
	pid = gs_spawn(child_final, NULL, 20);
	T(pid > 0, "fork");
	TJOIN(pid, 10000, "client");
	TOK(gs_vgpu_stats(gs_fd, 2, (uint32_t)id, &s));
	TEQ(s.mem_used, 0);
	return 0;
}

/* If something went wrong halfway, leave the module loaded for the rest. */
static void ensure_loaded(void)
{
	if (!module_loaded()) {
		gs_info(P " reloading " KO " after a failure");
		do_load();
	}
	if (gs_fd < 0)
		gs_fd = wait_device(3000);
}

int main(void)
{
	gs_init(P, 100);
	gs_cleanup_hook = ensure_loaded;
	flag = gs_shm(4096);
	cgA = gs_cg_create("gscyA");
	cgB = gs_cg_create("gscyB");
	if (!cgA || !cgB) {
		gs_line("GSTEST " P " FAIL setup: cgroup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("busy_while_open", t_busy_while_open);
	ensure_loaded();
	gs_run("unload_reload", t_unload_reload);
	ensure_loaded();
	gs_run("proc_open_across_unload", t_proc_open_across_unload);
	ensure_loaded();
	gs_run("works_after_reload", t_works_after);
	return gs_finish();
}
