/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * abi: the ioctl ABI of /dev/gpuslice (kmod/README.md): round trips, and
 * the documented errno for every kind of bad input. (The schedule page's
 * mapping rules: page.c.)
 */
#include "gstest.h"

#define P "abi"
#define NCG 21
#define UNCONF 31	/* a card no program configures */

static uint64_t cg[NCG];

static int t_version(void)
{
	struct gpuslice_version v;

	memset(&v, 0xa5, sizeof(v));
	TOK(ioctl(gs_fd, GPUSLICE_IOC_VERSION, &v));
	TEQ(v.abi_version, GPUSLICE_ABI_VERSION);
	TEQ(v.abi_version, 1);
	TEQ(v.max_cards, 32);
	TEQ(v.max_vgpus, 64);
	TEQ(v.page_size, (uint32_t)getpagesize());
	TEQ(v.reserved[0], 0);
	TEQ(v.reserved[1], 0);
	return 0;
}

static int t_card_roundtrip(void)
{
	struct gpuslice_card c;

	/* defaults for 0 */
	TOK(gs_card_set(gs_fd, 0, GPUSLICE_POLICY_WEIGHTED, 20, 0, 0));
	TOK(gs_card_get(gs_fd, 0, &c));
	TEQ(c.card, 0);
	TEQ(c.policy, GPUSLICE_POLICY_WEIGHTED);
	TEQ(c.max_inst, 20);
	TEQ(c.slice_ns, 5 * MS);
	TEQ(c.reclaim_ns, 100 * MS);
	TEQ(c.mode, GPUSLICE_MODE_NONE);
	TEQ(c.nvgpus, 0);
	TEQ(c.pad, 0);

	/* upper bounds */
	TOK(gs_card_set(gs_fd, 1, GPUSLICE_POLICY_PREEMPTIVE, 64, 100 * MS,
			10000 * MS));
	TOK(gs_card_get(gs_fd, 1, &c));
	TEQ(c.policy, GPUSLICE_POLICY_PREEMPTIVE);
	TEQ(c.max_inst, 64);
	TEQ(c.slice_ns, 100 * MS);
	TEQ(c.reclaim_ns, 10000 * MS);

	/* lower bounds */
	TOK(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_NATIVE, 1, 1 * MS, 1 * MS));
	TOK(gs_card_get(gs_fd, 2, &c));
	TEQ(c.policy, GPUSLICE_POLICY_NATIVE);
	TEQ(c.max_inst, 1);
	TEQ(c.slice_ns, 1 * MS);
	TEQ(c.reclaim_ns, 1 * MS);

	/* every policy is accepted; a change is accepted without vGPUs */
	for (uint32_t pol = 0; pol <= 6; pol++) {
		TOK(gs_card_set(gs_fd, 3, pol, 20, 7 * MS, 250 * MS));
		TOK(gs_card_get(gs_fd, 3, &c));
		TEQ(c.policy, pol);
		TEQ(c.slice_ns, 7 * MS);
		TEQ(c.reclaim_ns, 250 * MS);
	}
	return 0;
}

static int t_bad_ioctl(void)
{
	struct { char b[64]; } big;
	struct { char b[24]; } small;
	char buf[256];

	memset(&big, 0, sizeof(big));
	memset(&small, 0, sizeof(small));
	memset(buf, 0, sizeof(buf));
	TE(ioctl(gs_fd, _IO(GPUSLICE_IOC_MAGIC, 0x7f)), ENOTTY);
	TE(ioctl(gs_fd, _IOWR(GPUSLICE_IOC_MAGIC, 0x3f, struct gpuslice_card), buf), ENOTTY);
	TE(ioctl(gs_fd, _IOR('x', 0x00, struct gpuslice_version), buf), ENOTTY);
	/* the right number with another size */
	TE(ioctl(gs_fd, _IOWR(GPUSLICE_IOC_MAGIC, 0x01, typeof(small)), &small), ENOTTY);
	TE(ioctl(gs_fd, _IOWR(GPUSLICE_IOC_MAGIC, 0x01, typeof(big)), &big), ENOTTY);
	TE(ioctl(gs_fd, _IOR(GPUSLICE_IOC_MAGIC, 0x00, typeof(small)), &small), ENOTTY);
	TE(ioctl(gs_fd, _IOWR(GPUSLICE_IOC_MAGIC, 0x21, typeof(small)), &small), ENOTTY);
	TE(ioctl(gs_fd, _IOW(GPUSLICE_IOC_MAGIC, 0x10, typeof(big)), &big), ENOTTY);
	/* the right size with another direction */
	TE(ioctl(gs_fd, _IOWR(GPUSLICE_IOC_MAGIC, 0x00, struct gpuslice_version), buf), ENOTTY);
	TE(ioctl(gs_fd, _IOR(GPUSLICE_IOC_MAGIC, 0x10, struct gpuslice_card), buf), ENOTTY);
	TE(ioctl(gs_fd, _IO(GPUSLICE_IOC_MAGIC, 0x00)), ENOTTY);
	/* the card was not changed by any of this */
	{
		struct gpuslice_card c;

		TOK(gs_card_get(gs_fd, 0, &c));
		TEQ(c.policy, GPUSLICE_POLICY_WEIGHTED);
	}
	return 0;
}

static int t_nonzero_pad(void)
{
	struct gpuslice_card c;
	struct gpuslice_vgpu v;
	int id;

	memset(&c, 0, sizeof(c));
	c.card = 0;
	c.policy = GPUSLICE_POLICY_WEIGHTED;
	c.max_inst = 20;
	c.pad = 1;
	TE(ioctl(gs_fd, GPUSLICE_IOC_CARD_SET, &c), EINVAL);

	memset(&v, 0, sizeof(v));
	v.card = 0;
	v.cgroup_id = cg[0];
	v.mem_cap = 1 << 20;
	v.quota = 10;
	v.mode = GPUSLICE_MODE_COMPUTE;
	v.pad = 1;
	TE(ioctl(gs_fd, GPUSLICE_IOC_VGPU_CREATE, &v), EINVAL);
	TOK(gs_card_get(gs_fd, 0, &c));
	TEQ(c.nvgpus, 0);

	id = gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 10, 0,
			    GPUSLICE_MODE_COMPUTE);
	T(id >= 0, "create: %s", gs_errname(errno));
	v.id = (uint32_t)id;
	v.mem_cap = 2 << 20;
	TE(ioctl(gs_fd, GPUSLICE_IOC_VGPU_UPDATE, &v), EINVAL);
	TE(ioctl(gs_fd, GPUSLICE_IOC_VGPU_DESTROY, &v), EINVAL);
	{
		struct gpuslice_vgpu_stats s;

		TOK(gs_vgpu_stats(gs_fd, 0, (uint32_t)id, &s));
		TEQ(s.spec.mem_cap, 1 << 20);
	}
	TOK(gs_vgpu_destroy(gs_fd, 0, (uint32_t)id));
	return 0;
}

static int t_card_index(void)
{
	struct gpuslice_card c;
	struct gpuslice_vgpu_stats s;
	struct gpuslice_attach a;

	TE(gs_card_set(gs_fd, 32, 1, 20, 0, 0), EINVAL);
	TE(gs_card_set(gs_fd, 0xffffffffu, 1, 20, 0, 0), EINVAL);
	TE(gs_card_get(gs_fd, 32, &c), EINVAL);
	TE(gs_card_get(gs_fd, 1000, &c), EINVAL);
	TE(gs_card_get(gs_fd, UNCONF, &c), ENODEV);
	TE(gs_vgpu_create(gs_fd, 32, cg[0], 1 << 20, 0, 0, GPUSLICE_MODE_MEMORY), EINVAL);
	TE(gs_vgpu_create(gs_fd, UNCONF, cg[0], 1 << 20, 0, 0, GPUSLICE_MODE_MEMORY), ENODEV);
	TE(gs_vgpu_stats(gs_fd, UNCONF, 0, &s), ENODEV);
	TE(gs_vgpu_stats(gs_fd, 32, 0, &s), EINVAL);
	TE(gs_vgpu_destroy(gs_fd, UNCONF, 0), ENODEV);
	TE(gs_vgpu_update(gs_fd, UNCONF, 0, cg[0], 1, 0, 0, GPUSLICE_MODE_MEMORY), ENODEV);
	TE(gs_attach(gs_fd, UNCONF, &a), ENODEV);
	TE(gs_attach(gs_fd, 32, &a), EINVAL);
	return 0;
}

static int t_card_ranges(void)
{
	struct gpuslice_card c;

	TE(gs_card_set(gs_fd, UNCONF, 7, 20, 0, 0), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 0xffffffffu, 20, 0, 0), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 0, 0, 0), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 65, 0, 0), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 20, 500000, 0), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 20, 999999, 0), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 20, 101 * MS, 0), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 20, 100 * MS + 1, 0), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 20, ~0ULL, 0), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 20, 0, 500000), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 20, 0, 10000 * MS + 1), EINVAL);
	TE(gs_card_set(gs_fd, UNCONF, 1, 20, 0, ~0ULL), EINVAL);
	/* refused settings configure nothing */
	TE(gs_card_get(gs_fd, UNCONF, &c), ENODEV);
	/* nor change a configured card */
	TE(gs_card_set(gs_fd, 0, 7, 20, 0, 0), EINVAL);
	TE(gs_card_set(gs_fd, 0, 4, 65, 0, 0), EINVAL);
	TOK(gs_card_get(gs_fd, 0, &c));
	TEQ(c.policy, GPUSLICE_POLICY_WEIGHTED);
	TEQ(c.max_inst, 20);
	return 0;
}

static int t_vgpu_values(void)
{
	struct gpuslice_card c;
	const uint32_t M = GPUSLICE_MODE_MEMORY, C = GPUSLICE_MODE_COMPUTE;

	/* card 0: policy 4 (weighted), no vGPU */
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 33, 0, C), EINVAL);
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 105, 0, C), EINVAL);
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 1, 0, C), EINVAL);
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 10, 2, C), EINVAL);
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 0, 10, 0, C), EINVAL);
	TE(gs_vgpu_create(gs_fd, 0, 0, 1 << 20, 10, 0, C), EINVAL);
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 10, 0, 3), EINVAL);
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 10, 0, GPUSLICE_MODE_NONE), EINVAL);
	/* a memory vGPU with a quota or high priority */
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 10, 0, M), EINVAL);
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 0, 1, M), EINVAL);
	/* quota 0 under policy 4 */
	TE(gs_vgpu_create(gs_fd, 0, cg[0], 1 << 20, 0, 0, C), EINVAL);
	/* no such cgroup */
	TE(gs_vgpu_create(gs_fd, 0, 0x7fffffff0001ULL, 1 << 20, 10, 0, C), ENOENT);
	TOK(gs_card_get(gs_fd, 0, &c));
	TEQ(c.nvgpus, 0);
	TEQ(c.mode, GPUSLICE_MODE_NONE);

	/* quota 0 under policies 1 and 6, fine under 2, 3, 5 */
	TOK(gs_card_set(gs_fd, 3, GPUSLICE_POLICY_FIXED, 20, 0, 0));
	TE(gs_vgpu_create(gs_fd, 3, cg[0], 1 << 20, 0, 0, C), EINVAL);
	TOK(gs_card_set(gs_fd, 3, GPUSLICE_POLICY_WEIGHTED_WEAK, 20, 0, 0));
	TE(gs_vgpu_create(gs_fd, 3, cg[0], 1 << 20, 0, 0, C), EINVAL);
	TOK(gs_card_set(gs_fd, 3, GPUSLICE_POLICY_HYBRID, 20, 0, 0));
	/* high priority under policy 5 */
	TE(gs_vgpu_create(gs_fd, 3, cg[0], 1 << 20, 10, 1, C), EOPNOTSUPP);
	{
		int id = gs_vgpu_create(gs_fd, 3, cg[0], 1 << 20, 0, 0, C);

		T(id >= 0, "quota 0 under policy 5: %s", gs_errname(errno));
		TOK(gs_vgpu_destroy(gs_fd, 3, (uint32_t)id));
	}
	TOK(gs_card_set(gs_fd, 3, GPUSLICE_POLICY_AVERAGE, 20, 0, 0));
	{
		int id = gs_vgpu_create(gs_fd, 3, cg[0], 1 << 20, 0, 1, C);

		T(id >= 0, "quota 0 high under policy 2: %s", gs_errname(errno));
		TOK(gs_vgpu_destroy(gs_fd, 3, (uint32_t)id));
	}
	TOK(gs_card_get(gs_fd, 3, &c));
	TEQ(c.nvgpus, 0);
	return 0;
}

static int t_quota_sum(void)
{
	const uint32_t C = GPUSLICE_MODE_COMPUTE;
	struct gpuslice_card c;
	int a, b, ids[11];

	TOK(gs_card_set(gs_fd, 1, GPUSLICE_POLICY_FIXED, 20, 0, 0));
	a = gs_vgpu_create(gs_fd, 1, cg[0], 1 << 20, 60, 0, C);
	T(a >= 0, "60%%: %s", gs_errname(errno));
	TE(gs_vgpu_create(gs_fd, 1, cg[1], 1 << 20, 50, 0, C), ENOSPC);
	b = gs_vgpu_create(gs_fd, 1, cg[1], 1 << 20, 40, 0, C);
	T(b >= 0, "60%%+40%%: %s", gs_errname(errno));
	TE(gs_vgpu_create(gs_fd, 1, cg[2], 1 << 20, 5, 0, C), ENOSPC);
	/* an update over 100 %% is refused and changes nothing */
	TE(gs_vgpu_update(gs_fd, 1, (uint32_t)b, cg[1], 1 << 20, 45, 0, C), ENOSPC);
	{
		struct gpuslice_vgpu_stats s;

		TOK(gs_vgpu_stats(gs_fd, 1, (uint32_t)b, &s));
		TEQ(s.spec.quota, 40);
	}
	TOK(gs_vgpu_destroy(gs_fd, 1, (uint32_t)a));
	TOK(gs_vgpu_destroy(gs_fd, 1, (uint32_t)b));

	/* units after rounding: max_inst 10, 5 % = 1 unit (at least one) */
	TOK(gs_card_set(gs_fd, 1, GPUSLICE_POLICY_FIXED, 10, 0, 0));
	for (int i = 0; i < 10; i++) {
		ids[i] = gs_vgpu_create(gs_fd, 1, cg[i], 1 << 20, 5, 0, C);
		T(ids[i] >= 0, "5%% vGPU %d at max_inst 10: %s", i,
		  gs_errname(errno));
	}
	TE(gs_vgpu_create(gs_fd, 1, cg[10], 1 << 20, 5, 0, C), ENOSPC);
	TOK(gs_card_get(gs_fd, 1, &c));
	TEQ(c.nvgpus, 10);
	for (int i = 0; i < 10; i++)
		TOK(gs_vgpu_destroy(gs_fd, 1, (uint32_t)ids[i]));
	return 0;
}

static int t_max_inst(void)
{
	const uint32_t C = GPUSLICE_MODE_COMPUTE;
	struct gpuslice_card c;
	int id;

	TOK(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_AVERAGE, 20, 0, 0));
	for (int i = 0; i < 20; i++) {
		id = gs_vgpu_create(gs_fd, 2, cg[i], 1 << 20, 5, 0, C);
		T(id == i, "vGPU %d: got id %d (%s), expected the lowest free",
		  i, id, id < 0 ? gs_errname(errno) : "-");
	}
	TE(gs_vgpu_create(gs_fd, 2, cg[20], 1 << 20, 5, 0, C), ENOSPC);
	TOK(gs_card_get(gs_fd, 2, &c));
	TEQ(c.nvgpus, 20);
	TEQ(c.mode, C);
	/* a freed id is reused first */
	TOK(gs_vgpu_destroy(gs_fd, 2, 7));
	TOK(gs_vgpu_destroy(gs_fd, 2, 3));
	id = gs_vgpu_create(gs_fd, 2, cg[20], 1 << 20, 5, 0, C);
	TEQ(id, 3);
	id = gs_vgpu_create(gs_fd, 2, cg[7], 1 << 20, 5, 0, C);
	TEQ(id, 7);
	TE(gs_vgpu_create(gs_fd, 2, cg[3], 1 << 20, 5, 0, C), ENOSPC);
	for (int i = 0; i < 20; i++)
		TOK(gs_vgpu_destroy(gs_fd, 2, (uint32_t)i));
	TOK(gs_card_get(gs_fd, 2, &c));
	TEQ(c.nvgpus, 0);
	TEQ(c.mode, GPUSLICE_MODE_NONE);
	return 0;
}

static int t_eexist(void)
{
	const uint32_t M = GPUSLICE_MODE_MEMORY;
	int a, b;

	TOK(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_NATIVE, 20, 0, 0));
	a = gs_vgpu_create(gs_fd, 2, cg[0], 1 << 20, 0, 0, M);
	T(a >= 0, "create: %s", gs_errname(errno));
	TE(gs_vgpu_create(gs_fd, 2, cg[0], 2 << 20, 0, 0, M), EEXIST);
	/* the same cgroup on another card is fine */
	b = gs_vgpu_create(gs_fd, 3, cg[0], 1 << 20, 0, 0, M);
	T(b >= 0, "same cgroup, other card: %s", gs_errname(errno));
	TOK(gs_vgpu_destroy(gs_fd, 2, (uint32_t)a));
	TOK(gs_vgpu_destroy(gs_fd, 3, (uint32_t)b));
	/* and free again once destroyed */
	a = gs_vgpu_create(gs_fd, 2, cg[0], 1 << 20, 0, 0, M);
	T(a >= 0, "re-create after destroy: %s", gs_errname(errno));
	TOK(gs_vgpu_destroy(gs_fd, 2, (uint32_t)a));
	return 0;
}

static int t_exdev(void)
{
	const uint32_t M = GPUSLICE_MODE_MEMORY, C = GPUSLICE_MODE_COMPUTE;
	struct gpuslice_card c;
	int a, b;

	TOK(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_PREEMPTIVE, 20, 0, 0));
	a = gs_vgpu_create(gs_fd, 2, cg[0], 1 << 20, 0, 0, M);
	T(a >= 0, "memory vGPU: %s", gs_errname(errno));
	TOK(gs_card_get(gs_fd, 2, &c));
	TEQ(c.mode, M);
	TE(gs_vgpu_create(gs_fd, 2, cg[1], 1 << 20, 10, 0, C), EXDEV);
	TOK(gs_vgpu_destroy(gs_fd, 2, (uint32_t)a));
	TOK(gs_card_get(gs_fd, 2, &c));
	TEQ(c.mode, GPUSLICE_MODE_NONE);
	a = gs_vgpu_create(gs_fd, 2, cg[1], 1 << 20, 10, 0, C);
	T(a >= 0, "compute vGPU on the emptied card: %s", gs_errname(errno));
	TOK(gs_card_get(gs_fd, 2, &c));
	TEQ(c.mode, C);
	TE(gs_vgpu_create(gs_fd, 2, cg[0], 1 << 20, 0, 0, M), EXDEV);
	b = gs_vgpu_create(gs_fd, 2, cg[2], 1 << 20, 10, 0, C);
	T(b >= 0, "second compute vGPU: %s", gs_errname(errno));
	TOK(gs_vgpu_destroy(gs_fd, 2, (uint32_t)a));
	TE(gs_vgpu_create(gs_fd, 2, cg[0], 1 << 20, 0, 0, M), EXDEV);
	TOK(gs_vgpu_destroy(gs_fd, 2, (uint32_t)b));
	TOK(gs_card_get(gs_fd, 2, &c));
	TEQ(c.mode, GPUSLICE_MODE_NONE);
	return 0;
}

static int t_ebusy(void)
{
	struct gpuslice_card c;
	int a;

	TOK(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_WEIGHTED, 20, 10 * MS, 200 * MS));
	a = gs_vgpu_create(gs_fd, 2, cg[0], 1 << 20, 20, 0, GPUSLICE_MODE_COMPUTE);
	T(a >= 0, "create: %s", gs_errname(errno));
	TE(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_FIXED, 20, 10 * MS, 200 * MS), EBUSY);
	TE(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_WEIGHTED, 40, 10 * MS, 200 * MS), EBUSY);
	TE(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_WEIGHTED, 20, 11 * MS, 200 * MS), EBUSY);
	TE(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_WEIGHTED, 20, 10 * MS, 300 * MS), EBUSY);
	/* identical settings: accepted */
	TOK(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_WEIGHTED, 20, 10 * MS, 200 * MS));
	TOK(gs_card_get(gs_fd, 2, &c));
	TEQ(c.policy, GPUSLICE_POLICY_WEIGHTED);
	TEQ(c.slice_ns, 10 * MS);
	TEQ(c.nvgpus, 1);
	TOK(gs_vgpu_destroy(gs_fd, 2, (uint32_t)a));
	TOK(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_FIXED, 20, 0, 0));
	TOK(gs_card_get(gs_fd, 2, &c));
	TEQ(c.policy, GPUSLICE_POLICY_FIXED);
	return 0;
}

static int t_destroy(void)
{
	int a;

	a = gs_vgpu_create(gs_fd, 2, cg[0], 1 << 20, 20, 0, GPUSLICE_MODE_COMPUTE);
	T(a >= 0, "create: %s", gs_errname(errno));
	TOK(gs_vgpu_destroy(gs_fd, 2, (uint32_t)a));
	TE(gs_vgpu_destroy(gs_fd, 2, (uint32_t)a), ENOENT);
	TE(gs_vgpu_destroy(gs_fd, 2, 19), ENOENT);
	TE(gs_vgpu_destroy(gs_fd, 2, 63), ENOENT);
	TE(gs_vgpu_destroy(gs_fd, 2, 64), ENOENT);
	TE(gs_vgpu_destroy(gs_fd, 2, 0xffffffffu), ENOENT);
	return 0;
}

static int t_update(void)
{
	const uint32_t C = GPUSLICE_MODE_COMPUTE;
	struct gpuslice_vgpu_stats s;
	int a;

	TOK(gs_card_set(gs_fd, 2, GPUSLICE_POLICY_FIXED, 20, 0, 0));
	a = gs_vgpu_create(gs_fd, 2, cg[0], 1 << 20, 20, 0, C);
	T(a >= 0, "create: %s", gs_errname(errno));
	TOK(gs_vgpu_stats(gs_fd, 2, (uint32_t)a, &s));
	TEQ(s.spec.card, 2);
	TEQ(s.spec.id, (uint32_t)a);
	TEQ(s.spec.cgroup_id, cg[0]);
	TEQ(s.spec.mem_cap, 1 << 20);
	TEQ(s.spec.quota, 20);
	TEQ(s.spec.priority, 0);
	TEQ(s.spec.mode, C);
	TEQ(s.mem_used, 0);
	TEQ(s.nprocs, 0);

	TOK(gs_vgpu_update(gs_fd, 2, (uint32_t)a, cg[0], 3ULL << 30, 45, 1, C));
	TOK(gs_vgpu_stats(gs_fd, 2, (uint32_t)a, &s));
	TEQ(s.spec.mem_cap, 3ULL << 30);
	TEQ(s.spec.quota, 45);
	TEQ(s.spec.priority, 1);
	TEQ(s.spec.cgroup_id, cg[0]);

	/* bad values, a changed mode or cgroup: refused, nothing changes */
	TE(gs_vgpu_update(gs_fd, 2, (uint32_t)a, cg[0], 1 << 20, 33, 0, C), EINVAL);
	TE(gs_vgpu_update(gs_fd, 2, (uint32_t)a, cg[0], 1 << 20, 0, 0, C), EINVAL);
	TE(gs_vgpu_update(gs_fd, 2, (uint32_t)a, cg[0], 0, 45, 0, C), EINVAL);
	TE(gs_vgpu_update(gs_fd, 2, (uint32_t)a, cg[0], 1 << 20, 45, 2, C), EINVAL);
	TE(gs_vgpu_update(gs_fd, 2, (uint32_t)a, cg[0], 1 << 20, 105, 0, C), EINVAL);
	errno = 0;
	T(gs_vgpu_update(gs_fd, 2, (uint32_t)a, cg[0], 1 << 20, 0, 0,
			 GPUSLICE_MODE_MEMORY) < 0,
	  "update changing the mode to memory was accepted");
	T(gs_vgpu_update(gs_fd, 2, (uint32_t)a, cg[1], 1 << 20, 45, 0, C) < 0,
	  "update changing the cgroup was accepted");
	TOK(gs_vgpu_stats(gs_fd, 2, (uint32_t)a, &s));
	TEQ(s.spec.mem_cap, 3ULL << 30);
	TEQ(s.spec.quota, 45);
	TEQ(s.spec.priority, 1);
	TEQ(s.spec.mode, C);
	TEQ(s.spec.cgroup_id, cg[0]);

	TE(gs_vgpu_update(gs_fd, 2, 19, cg[1], 1 << 20, 5, 0, C), ENOENT);
	TOK(gs_vgpu_destroy(gs_fd, 2, (uint32_t)a));
	TE(gs_vgpu_update(gs_fd, 2, (uint32_t)a, cg[0], 1 << 20, 5, 0, C), ENOENT);
	return 0;
}

static int t_stats_unknown(void)
{
	struct gpuslice_vgpu_stats s;

	TE(gs_vgpu_stats(gs_fd, 2, 0, &s), ENOENT);
	TE(gs_vgpu_stats(gs_fd, 2, 19, &s), ENOENT);
	TE(gs_vgpu_stats(gs_fd, 2, 64, &s), ENOENT);
	TE(gs_vgpu_stats(gs_fd, 2, 0xffffffffu, &s), ENOENT);
	return 0;
}

static int t_efault(void)
{
	long ps = gs_page_size();
	char *pages, *ro;

	TE(ioctl(gs_fd, GPUSLICE_IOC_VERSION, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_CARD_GET, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_CARD_SET, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_VGPU_CREATE, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_VGPU_UPDATE, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_VGPU_DESTROY, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_VGPU_STATS, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_ATTACH, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_CHARGE, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_ACQUIRE, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_RELEASE, NULL), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_CARD_GET, (void *)1), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_CARD_SET, (void *)0xffffffffffff0000ULL), EFAULT);

	/* a struct running into an unmapped page */
	pages = mmap(NULL, (size_t)ps * 2, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	T(pages != MAP_FAILED, "mmap: %s", gs_errname(errno));
	TOK(munmap(pages + ps, (size_t)ps));
	{
		struct gpuslice_card *c = (void *)(pages + ps - 8);

		c->card = 0;
		c->policy = 4;
		TE(ioctl(gs_fd, GPUSLICE_IOC_CARD_GET, c), EFAULT);
		TE(ioctl(gs_fd, GPUSLICE_IOC_CARD_SET, c), EFAULT);
	}
	/* an answer into a read-only page */
	ro = pages;
	memset(ro, 0, (size_t)ps);
	((struct gpuslice_card *)ro)->card = 0;
	TOK(mprotect(ro, (size_t)ps, PROT_READ));
	TE(ioctl(gs_fd, GPUSLICE_IOC_VERSION, ro), EFAULT);
	TE(ioctl(gs_fd, GPUSLICE_IOC_CARD_GET, ro), EFAULT);
	munmap(pages, (size_t)ps);
	{
		struct gpuslice_card c;

		TOK(gs_card_get(gs_fd, 0, &c));
		TEQ(c.policy, GPUSLICE_POLICY_WEIGHTED);
	}
	return 0;
}

static int t_proc_version(void)
{
	char buf[256];

	T(gs_read_file("/proc/gpuslice/version", buf, sizeof(buf)) > 0,
	  "/proc/gpuslice/version: %s", gs_errname(errno));
	T(!strncmp(buf, "abi 1", 5) && (buf[5] == '\n' || buf[5] == ' ' ||
					 buf[5] == '\t' || buf[5] == 0),
	  "/proc/gpuslice/version starts '%.40s', expected 'abi 1'", buf);
	return 0;
}

int main(void)
{
	gs_init(P, 100);
	for (int i = 0; i < NCG; i++) {
		char name[32];

		snprintf(name, sizeof(name), "gsabi%d", i);
		cg[i] = gs_cg_create(name);
		if (!cg[i]) {
			gs_line("GSTEST " P " FAIL setup: cgroup %s: %s", name,
				gs_errname(errno));
			gs_nfail++;
			return gs_finish();
		}
	}
	gs_run("version", t_version);
	gs_run("card_roundtrip", t_card_roundtrip);
	gs_run("bad_ioctl", t_bad_ioctl);
	gs_run("nonzero_pad", t_nonzero_pad);
	gs_run("card_index", t_card_index);
	gs_run("card_ranges", t_card_ranges);
	gs_run("vgpu_values", t_vgpu_values);
	gs_run("quota_sum", t_quota_sum);
	gs_run("max_inst", t_max_inst);
	gs_run("eexist", t_eexist);
	gs_run("exdev", t_exdev);
	gs_run("ebusy", t_ebusy);
	gs_run("destroy", t_destroy);
	gs_run("update", t_update);
	gs_run("stats_unknown", t_stats_unknown);
	gs_run("efault", t_efault);
	gs_run("proc_version", t_proc_version);
	return gs_finish();
}
