// SPDX-License-Identifier: Apache-2.0
/*
 * Fork handlers. A fork must not leave the child with a lock some other
 * parent thread held, nor with the parent's charges: the driver's state
 * does not carry over, so the child starts with nothing.
 *
 * They are registered once the real driver is loaded, after its own:
 * prepare handlers run in reverse order of registration, so the shim's
 * locks are taken before the driver's, the order in which a thread inside
 * a wrapped call takes them (a shim lock, then the driver's).
 */
#include "shim.h"

static void before_fork(void)
{
	gs_graph_before_fork();
	gs_vmm_before_fork();
	gs_limits_before_fork();
	gs_contexts_before_fork();
	gs_pools_before_fork();
	gs_pending_before_fork();
	gs_track_before_fork();
}

static void after_fork_parent(void)
{
	gs_track_after_fork_parent();
	gs_pending_after_fork_parent();
	gs_pools_after_fork_parent();
	gs_contexts_after_fork_parent();
	gs_limits_after_fork_parent();
	gs_vmm_after_fork_parent();
	gs_graph_after_fork_parent();
}

static void after_fork_child(void)
{
	gs_track_after_fork_child();
	gs_pending_after_fork_child();
	gs_pools_after_fork_child();
	gs_contexts_after_fork_child();
	gs_limits_after_fork_child();
	gs_vmm_after_fork_child();
	gs_graph_after_fork_child();
	gs_capture_after_fork_child();
	gs_devmap_after_fork_child();
}

static void register_handlers(void)
{
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void gs_fork_handlers_once(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, register_handlers);
}
