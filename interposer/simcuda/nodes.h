/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVIDIA device nodes, as the real driver uses them (nodes.c).
 * Compiled into both libcuda.so.1 and libnvidia-ml.so.1, each with
 * descriptors of its own; the callers hold their library's lock.
 */
#ifndef SIMCUDA_NODES_H
#define SIMCUDA_NODES_H

/*
 * The control node, /dev/nvidiactl: opened once and kept (cuInit,
 * nvmlInit). 0, or -EPERM / -EACCES when the kernel refused its open or
 * its ioctl (nothing is kept then).
 */
int simnode_ctl(void);
/* Closes the control node (NVML's last nvmlShutdown). */
void simnode_ctl_close(void);
/* Physical device phys's node, /dev/nvidia<phys>, likewise (its first context). */
int simnode_dev(int phys);
/* In a forked child: the parent's descriptors are not the child's driver's. */
void simnode_forked(void);

#endif /* SIMCUDA_NODES_H */
