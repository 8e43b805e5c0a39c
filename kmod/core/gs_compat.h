/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * The scheduler core's only dependency: fixed-width types. In the kernel
 * they come from <linux/types.h>; in user space from <stdint.h> and
 * <stdbool.h>. Nothing else belongs here.
 */
#ifndef GS_COMPAT_H
#define GS_COMPAT_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdbool.h>
#include <stdint.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef int16_t s16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;
#endif

#endif /* GS_COMPAT_H */
