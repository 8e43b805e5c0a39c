// SPDX-License-Identifier: Apache-2.0
/* The schedule file's page: publish and the futex wait (sched_file.c). */
#include "sched_file_page.c"
