package sched

// #include "sched_c.h"
import "C"

// Benchmark loops in C (sched_c.c), for bench_test.go: cgo is not allowed
// in test files.

func (c *Card) benchHandover(now uint64, n uint64) uint64 {
	return uint64(C.gs_bench_handover(&c.c, C.u64(now), C.u64(n)))
}

func (c *Card) benchPeek(now uint64, n uint64) uint64 {
	return uint64(C.gs_bench_peek(&c.c, C.u64(now), C.u64(n)))
}

func (c *Card) benchMayRun(now uint64, n uint64) uint64 {
	return uint64(C.gs_bench_may_run(&c.c, C.u64(now), C.u64(n)))
}
