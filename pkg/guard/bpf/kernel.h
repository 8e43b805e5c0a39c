/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * The few kernel types and BPF constants the guard's programs use.
 *
 * Written out rather than generated (bpftool's vmlinux.h is 3 MiB of one
 * kernel's types): the structs carry preserve_access_index, so every
 * field access is a CO-RE relocation that libbpf's loader (here
 * cilium/ebpf) resolves against the running kernel's BTF. Only the fields
 * named here must exist there, under these names; their offsets may
 * differ. The constants are the uapi's (include/uapi/linux/bpf.h), which
 * never change value.
 */
#ifndef GUARD_KERNEL_H
#define GUARD_KERNEL_H

/* The uapi headers' <linux/types.h> wants <asm/types.h>: these are it. */
#define _LINUX_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef signed long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef unsigned short umode_t;
typedef __u32 dev_t;
typedef _Bool bool;
#define true	1
#define false	0

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

#define BPF_F_NO_PREALLOC		(1U << 0)
#define BPF_LOCAL_STORAGE_GET_F_CREATE	(1ULL << 0)

#define EPERM		1
#define S_IFMT		00170000
#define S_IFCHR		0020000
#define S_IFREG		0100000
#define CLONE_THREAD	0x00010000

/* The kernel's dev_t (include/linux/kdev_t.h), not user space's. */
#define MINORBITS	20
#define MAJOR(dev)	((__u32)((dev) >> MINORBITS))

struct super_block {
	dev_t s_dev;
} __attribute__((preserve_access_index));

struct inode {
	umode_t i_mode;
	dev_t i_rdev;
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct dentry {
	struct dentry *d_parent;
	struct inode *d_inode;
} __attribute__((preserve_access_index));

struct path {
	struct dentry *dentry;
} __attribute__((preserve_access_index));

struct file {
	struct path f_path;
	struct inode *f_inode;
	void *private_data;
} __attribute__((preserve_access_index));

struct kernfs_node {
	__u64 id;		/* a cgroup's id (5.5 on) */
} __attribute__((preserve_access_index));

struct cgroup;

struct cgroup_subsys_state {
	struct cgroup *cgroup;
	struct cgroup_subsys_state *parent;
} __attribute__((preserve_access_index));

struct cgroup {
	struct cgroup_subsys_state self;
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup *dfl_cgrp;	/* the task's cgroup v2 */
} __attribute__((preserve_access_index));

struct task_struct {
	struct task_struct *group_leader;
	struct css_set *cgroups;
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

/* The context of an iter/task_file program: one open file of one task. */
struct bpf_iter_meta;

struct bpf_iter__task_file {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	__u32 fd;
	struct file *file;
} __attribute__((preserve_access_index));

struct linux_binprm;

#endif /* GUARD_KERNEL_H */
