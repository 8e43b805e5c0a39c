/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * perm: who may do what. An unprivileged process (uid/gid 65534, no
 * capabilities) gets EPERM from the administrator's ioctls, may use the
 * ones for anyone (the statistics of its own vGPU only), and is a normal
 * client of the vGPU its cgroup has.
 */
#include "gstest.h"

#define P "perm"
#define CARD 0
#define UNCONF 31
#define CAP (64ULL << 20)

static uint64_t cg_me, cg_other;
static int id_me, id_other;
static volatile int *userns_skipped;

/* Moves into gsperm, drops to nobody, checks that no capability is left. */
static int become_nobody(void)
{
	char buf[4096];
	const char *k;

	T(gs_cg_enter("gsperm") == 0, "enter cgroup: %s", gs_errname(errno));
	TOK(setgroups(0, NULL));
	TOK(setgid(65534));
	TOK(setuid(65534));
	T(getuid() == 65534 && geteuid() == 65534 && getgid() == 65534,
	  "ids: uid %d euid %d gid %d", getuid(), geteuid(), getgid());
	T(gs_read_file("/proc/self/status", buf, sizeof(buf)) > 0,
	  "/proc/self/status: %s", gs_errname(errno));
	k = strstr(buf, "CapEff:");
	T(k, "no CapEff line");
	T(!strncmp(k, "CapEff:\t0000000000000000", 24), "capabilities left: %.30s", k);
	k = strstr(buf, "CapPrm:");
	T(k && !strncmp(k, "CapPrm:\t0000000000000000", 24),
	  "permitted capabilities left: %.30s", k ? k : "?");
	return 0;
}

static int child_drop(void *arg)
{
	int fd;

	(void)arg;
	if (become_nobody() < 0)
		return -1;
	fd = gs_open();
	T(fd >= 0, "open %s as nobody: %s (the device must be 0666)",
	  GPUSLICE_DEVICE, gs_errname(errno));
	close(fd);
	return 0;
}

static int t_drop(void)
{
	pid_t pid = gs_spawn(child_drop, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "nobody");
	return 0;
}

static int admin_calls_refused(int fd)
{
	struct gpuslice_vgpu v;

	TE(gs_card_set(fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0), EPERM);
	TE(gs_card_set(fd, CARD, GPUSLICE_POLICY_FIXED, 20, 0, 0), EPERM);
	TE(gs_card_set(fd, UNCONF, GPUSLICE_POLICY_FIXED, 20, 0, 0), EPERM);
	TE(gs_vgpu_create(fd, CARD, cg_other + 0, 1 << 20, 0, 0, GPUSLICE_MODE_MEMORY), EPERM);
	TE(gs_vgpu_create(fd, CARD, gs_cg_id(""), 1 << 20, 0, 0, GPUSLICE_MODE_MEMORY), EPERM);
	TE(gs_vgpu_update(fd, CARD, (uint32_t)id_me, cg_me, CAP * 1024, 0, 0,
			  GPUSLICE_MODE_MEMORY), EPERM);
	TE(gs_vgpu_update(fd, CARD, (uint32_t)id_other, cg_other, 1, 0, 0,
			  GPUSLICE_MODE_MEMORY), EPERM);
	TE(gs_vgpu_destroy(fd, CARD, (uint32_t)id_other), EPERM);
	TE(gs_vgpu_destroy(fd, CARD, (uint32_t)id_me), EPERM);
	/* The unseen bytes the agent sets: a container cannot lower them. */
	TE(gs_vgpu_set_unseen(fd, CARD, (uint32_t)id_me, 0), EPERM);
	TE(gs_vgpu_set_unseen(fd, CARD, (uint32_t)id_other, CAP), EPERM);
	memset(&v, 0, sizeof(v));
	v.card = CARD;
	v.id = (uint32_t)id_other;
	TE(ioctl(fd, GPUSLICE_IOC_VGPU_DESTROY, &v), EPERM);
	return 0;
}

static int child_admin(void *arg)
{
	int fd;

	(void)arg;
	if (become_nobody() < 0)
		return -1;
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	return admin_calls_refused(fd);
}

/* Nothing the refused calls named has changed. */
static int state_unchanged(void)
{
	struct gpuslice_card c;
	struct gpuslice_vgpu_stats s;

	TOK(gs_card_get(gs_fd, CARD, &c));
	TEQ(c.policy, GPUSLICE_POLICY_NATIVE);
	TEQ(c.nvgpus, 2);
	TE(gs_card_get(gs_fd, UNCONF, &c), ENODEV);
	TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)id_me, &s));
	TEQ(s.spec.mem_cap, CAP);
	TEQ(s.spec.cgroup_id, cg_me);
	TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)id_other, &s));
	TEQ(s.spec.mem_cap, CAP / 2);
	TEQ(s.spec.cgroup_id, cg_other);
	{
		struct gpuslice_vgpu_unseen u;

		TOK(gs_vgpu_unseen(gs_fd, CARD, (uint32_t)id_other, &u));
		TEQ(u.bytes, 0);
	}
	return 0;
}

static int t_admin_refused(void)
{
	pid_t pid = gs_spawn(child_admin, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "nobody");
	return state_unchanged();
}

static int child_anyone(void *arg)
{
	struct gpuslice_version v;
	struct gpuslice_card c;
	struct gpuslice_vgpu_stats s;
	int fd;

	(void)arg;
	if (become_nobody() < 0)
		return -1;
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_version(fd, &v));
	TEQ(v.abi_version, 1);
	TOK(gs_card_get(fd, CARD, &c));
	TEQ(c.policy, GPUSLICE_POLICY_NATIVE);
	TEQ(c.nvgpus, 2);
	TEQ(c.mode, GPUSLICE_MODE_MEMORY);
	TE(gs_card_get(fd, UNCONF, &c), ENODEV);
	/* Its own vGPU only: another tenant's is as if it did not exist. */
	TOK(gs_vgpu_stats(fd, CARD, (uint32_t)id_me, &s));
	TEQ(s.spec.mem_cap, CAP);
	TEQ(s.spec.cgroup_id, cg_me);
	TE(gs_vgpu_stats(fd, CARD, (uint32_t)id_other, &s), ENOENT);
	{
		struct gpuslice_vgpu_unseen u;

		TOK(gs_vgpu_unseen(fd, CARD, (uint32_t)id_me, &u));
		TE(gs_vgpu_unseen(fd, CARD, (uint32_t)id_other, &u), ENOENT);
	}
	{
		static struct gs_tab t;
		char id[16];

		/* /proc/gpuslice/vgpus: its own line only */
		snprintf(id, sizeof(id), "%d", id_me);
		T(gs_tab_read("vgpus", &t) == 0, "/proc/gpuslice/vgpus: %s",
		  gs_errname(errno));
		T(t.nrows == 1 && !strcmp(gs_tab_str(&t, 0, "id"), id),
		  "/proc/gpuslice/vgpus as nobody: %d rows, first id '%s', "
		  "expected its own vGPU %s only", t.nrows,
		  gs_tab_str(&t, 0, "id"), id);
	}
	return 0;
}

static int t_anyone_allowed(void)
{
	pid_t pid = gs_spawn(child_anyone, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "nobody");
	return 0;
}

static int child_client(void *arg)
{
	struct gpuslice_attach a;
	const struct gpuslice_sched_page *p;
	struct gpuslice_sched_page s;
	uint64_t used = 1, cap = 0, end = 0;
	int32_t owner = 0;
	int fd;

	(void)arg;
	if (become_nobody() < 0)
		return -1;
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	TOK(gs_attach(fd, CARD, &a));
	TEQ(a.id, (uint32_t)id_me);
	TEQ(a.mem_cap, CAP);
	TEQ(a.mode, GPUSLICE_MODE_MEMORY);
	TEQ(a.policy, GPUSLICE_POLICY_NATIVE);
	TOK(gs_charge(fd, CARD, 1 << 20, &used));
	TEQ(used, 1 << 20);
	TE(gs_charge(fd, CARD, CAP, &used), ENOMEM);
	TOK(gs_meminfo(fd, CARD, &used, &cap));
	TEQ(used, 1 << 20);
	TEQ(cap, CAP);
	TOK(gs_uncharge(fd, CARD, 4096, &used));
	TEQ(used, (1 << 20) - 4096);
	TOK(gs_acquire(fd, CARD, 0, 0, &end, &owner));
	TEQ(owner, GPUSLICE_OWNER_ALL);
	TEQ(end, ~0ULL);
	TOK(gs_release(fd, CARD, 0, 1000));
	p = gs_map_page(fd, CARD);
	T(p, "mmap as nobody: %s", gs_errname(errno));
	T(gs_page_read(p, &s) == 0, "torn page");
	TEQ(s.abi_version, 1);
	/* again on the same card: the same vGPU */
	TOK(gs_attach(fd, CARD, &a));
	TEQ(a.id, (uint32_t)id_me);
	/* keep the charge: the parent checks that exit returns it */
	return 0;
}

static int t_client(void)
{
	struct gpuslice_vgpu_stats s;
	pid_t pid = gs_spawn(child_client, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "nobody");
	TOK(gs_vgpu_stats(gs_fd, CARD, (uint32_t)id_me, &s));
	TEQ(s.mem_used, 0);
	TEQ(s.nprocs, 0);
	return 0;
}

static int child_userns(void *arg)
{
	int fd;

	(void)arg;
	if (become_nobody() < 0)
		return -1;
	fd = gs_open();
	T(fd >= 0, "open: %s", gs_errname(errno));
	if (unshare(CLONE_NEWUSER) < 0) {
		*userns_skipped = errno;
		return 0;
	}
	/* all capabilities, but in a user namespace of our own */
	{
		char buf[4096];
		const char *k;

		T(gs_read_file("/proc/self/status", buf, sizeof(buf)) > 0, "status");
		k = strstr(buf, "CapEff:");
		T(k && strncmp(k, "CapEff:\t0000000000000000", 24),
		  "no capabilities in the new user namespace: %.30s", k ? k : "?");
	}
	return admin_calls_refused(fd);
}

static int t_userns_refused(void)
{
	pid_t pid = gs_spawn(child_userns, NULL, 20);

	T(pid > 0, "fork");
	TJOIN(pid, 10000, "nobody in a user namespace");
	if (*userns_skipped) {
		gs_info(P " userns_admin_refused: unshare(CLONE_NEWUSER) as "
			"nobody: %s", gs_errname(*userns_skipped));
		return 1;
	}
	return state_unchanged();
}

int main(void)
{
	gs_init(P, 100);
	userns_skipped = gs_shm(4096);
	cg_me = gs_cg_create("gsperm");
	cg_other = gs_cg_create("gsperm_other");
	if (!cg_me || !cg_other ||
	    gs_card_set(gs_fd, CARD, GPUSLICE_POLICY_NATIVE, 20, 0, 0) < 0 ||
	    (id_me = gs_vgpu_create(gs_fd, CARD, cg_me, CAP, 0, 0,
				    GPUSLICE_MODE_MEMORY)) < 0 ||
	    (id_other = gs_vgpu_create(gs_fd, CARD, cg_other, CAP / 2, 0, 0,
				       GPUSLICE_MODE_MEMORY)) < 0) {
		gs_line("GSTEST " P " FAIL setup: %s", gs_errname(errno));
		gs_nfail++;
		return gs_finish();
	}
	gs_run("drop_privileges", t_drop);
	gs_run("admin_refused", t_admin_refused);
	gs_run("anyone_allowed", t_anyone_allowed);
	gs_run("client_calls", t_client);
	gs_run("userns_admin_refused", t_userns_refused);
	return gs_finish();
}
