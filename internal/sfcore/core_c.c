// SPDX-License-Identifier: Apache-2.0
/* The scheduler core, from kmod/core. */
#include "gs_sched.c"
#include "gs_drain.c"
