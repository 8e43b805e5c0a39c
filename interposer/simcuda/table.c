// SPDX-License-Identifier: Apache-2.0
/*
 * A table of ranges sorted by start address, used for device allocations
 * (so an interior pointer finds its allocation by binary search) and as a
 * registry of live handles. Handles are validated by lookup before they are
 * ever dereferenced, so a stale or made-up handle yields an error code
 * rather than a crash. New device addresses only grow, so inserts are
 * nearly always appends.
 */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* Index of the first entry whose key is >= key. */
size_t sim_table_lower(const struct sim_table *t, uint64_t key)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->v[mid].key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int sim_table_add(struct sim_table *t, const struct sim_entry *e)
{
	size_t i;

	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		struct sim_entry *v = realloc(t->v, cap * sizeof(*v));

		if (!v)
			return -1;
		t->v = v;
		t->cap = cap;
	}
	i = sim_table_lower(t, e->key);
	memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof(*t->v));
	t->v[i] = *e;
	t->n++;
	return 0;
}

struct sim_entry *sim_table_get(struct sim_table *t, uint64_t key)
{
	size_t i = sim_table_lower(t, key);

	return i < t->n && t->v[i].key == key ? &t->v[i] : NULL;
}

/* The range that contains addr, if any. */
struct sim_entry *sim_table_covering(struct sim_table *t, uint64_t addr)
{
	size_t i = sim_table_lower(t, addr);

	if (i < t->n && t->v[i].key == addr)
		return &t->v[i];
	if (i == 0)
		return NULL;
	i--;
	return addr - t->v[i].key < t->v[i].len ? &t->v[i] : NULL;
}

void sim_table_del(struct sim_table *t, struct sim_entry *e)
{
	size_t i = (size_t)(e - t->v);

	memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof(*t->v));
	t->n--;
}

/*
 * First gap of size bytes (align a power of two) in [lo, hi) at or after
 * *cursor, wrapping around once; 0 when there is none. The cursor only
 * grows until the window is used up, so a freed address is normally not
 * handed out again soon, and a stale pointer is caught rather than
 * aliasing a new allocation.
 */
uint64_t sim_table_gap(const struct sim_table *t, uint64_t lo, uint64_t hi,
		       uint64_t *cursor, uint64_t size, uint64_t align)
{
	uint64_t at = sim_roundup(*cursor < lo ? lo : *cursor, align);
	int wrapped = 0;

	for (;;) {
		size_t i;

		if (at > hi || size > hi - at) {
			if (wrapped++)
				return 0;
			at = sim_roundup(lo, align);
			continue;
		}
		i = sim_table_lower(t, at);
		if (i > 0 && t->v[i - 1].key + t->v[i - 1].len > at) {
			i--;
		} else if (i == t->n || t->v[i].key - at >= size) {
			*cursor = at + size;
			return at;
		}
		at = sim_roundup(t->v[i].key + (t->v[i].len ? t->v[i].len : 1),
				 align);
	}
}

int sim_handle_add(const void *h, int kind, void *owner, int dev)
{
	struct sim_entry e = {
		.key = (uint64_t)(uintptr_t)h,
		.owner = owner,
		.kind = kind,
		.dev = dev,
	};

	return sim_table_add(&sim.handles, &e);
}

struct sim_entry *sim_handle_entry(const void *h)
{
	if (!h)
		return NULL;
	return sim_table_get(&sim.handles, (uint64_t)(uintptr_t)h);
}

/* h itself when it is a live handle of that kind, else NULL. */
void *sim_handle_get(const void *h, int kind)
{
	struct sim_entry *e = sim_handle_entry(h);

	return e && e->kind == kind ? (void *)(uintptr_t)h : NULL;
}

void sim_handle_del(const void *h)
{
	struct sim_entry *e = sim_handle_entry(h);

	if (e)
		sim_table_del(&sim.handles, e);
}
