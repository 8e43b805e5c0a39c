// SPDX-License-Identifier: Apache-2.0
/*
 * What the process holds: every charged allocation by (kind, handle), so a
 * free uncharges exactly what its allocation charged, and the destruction
 * of a context uncharges everything the driver frees with it.
 *
 * A chained hash table with striped locks: allocations from many threads
 * rarely meet on one lock.
 */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define NBUCKETS 4096
#define NSTRIPES 64

struct node {
	struct gs_alloc a;
	struct node *next;
};

static struct node *buckets[NBUCKETS];
static pthread_mutex_t stripes[NSTRIPES] = {
	[0 ... NSTRIPES - 1] = PTHREAD_MUTEX_INITIALIZER
};

static unsigned int bucket_of(enum gs_kind kind, uint64_t key)
{
	uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ULL;

	return (unsigned int)(h >> 52) & (NBUCKETS - 1);
}

static pthread_mutex_t *stripe_of(unsigned int bucket)
{
	return &stripes[bucket % NSTRIPES];
}

void gs_track_add(const struct gs_alloc *a)
{
	unsigned int b = bucket_of(a->kind, a->key);
	struct node *n = malloc(sizeof(*n));

	if (!n) {
		/* Without a record the free cannot uncharge: keep the bytes. */
		gs_err("out of host memory tracking an allocation; its %llu bytes stay charged",
		       (unsigned long long)a->bytes);
		return;
	}
	n->a = *a;
	pthread_mutex_lock(stripe_of(b));
	n->next = buckets[b];
	buckets[b] = n;
	pthread_mutex_unlock(stripe_of(b));
}

/* The link pointing at the entry, or NULL; the stripe must be held. */
static struct node **find(unsigned int b, enum gs_kind kind, uint64_t key)
{
	for (struct node **p = &buckets[b]; *p; p = &(*p)->next) {
		if ((*p)->a.kind == kind && (*p)->a.key == key)
			return p;
	}
	return NULL;
}

bool gs_track_take(enum gs_kind kind, uint64_t key, struct gs_alloc *out)
{
	unsigned int b = bucket_of(kind, key);
	struct node **p, *n = NULL;

	pthread_mutex_lock(stripe_of(b));
	p = find(b, kind, key);
	if (p) {
		n = *p;
		*p = n->next;
	}
	pthread_mutex_unlock(stripe_of(b));
	if (!n)
		return false;
	if (out)
		*out = n->a;
	free(n);
	return true;
}

bool gs_track_update(enum gs_kind kind, uint64_t key,
		     bool (*fn)(struct gs_alloc *a, void *arg), void *arg)
{
	unsigned int b = bucket_of(kind, key);
	struct node **p, *gone = NULL;

	pthread_mutex_lock(stripe_of(b));
	p = find(b, kind, key);
	if (p && !fn(&(*p)->a, arg)) {
		/* fn says the entry is finished: unlink it. */
		gone = *p;
		*p = gone->next;
	}
	pthread_mutex_unlock(stripe_of(b));
	free(gone);
	return p != NULL;
}

/* Kinds whose memory the driver frees when their context is destroyed. */
static bool context_bound(enum gs_kind kind)
{
	return kind == GS_LINEAR || kind == GS_ARRAY || kind == GS_MIPMAP ||
	       kind == GS_LIMIT || kind == GS_MODULE || kind == GS_LIBRARY;
}

/* Puts a node back after the driver refused to free what it records. */
static void relink(struct node *n)
{
	unsigned int b = bucket_of(n->a.kind, n->a.key);

	pthread_mutex_lock(stripe_of(b));
	n->next = buckets[b];
	buckets[b] = n;
	pthread_mutex_unlock(stripe_of(b));
}

void *gs_track_detach_context(CUcontext ctx)
{
	struct node *all = NULL;

	for (unsigned int b = 0; b < NBUCKETS; b++) {
		struct node **p;

		pthread_mutex_lock(stripe_of(b));
		p = &buckets[b];
		while (*p) {
			struct node *n = *p;

			if (n->a.ctx == ctx && context_bound(n->a.kind)) {
				*p = n->next;
				n->next = all;
				all = n;
			} else {
				p = &n->next;
			}
		}
		pthread_mutex_unlock(stripe_of(b));
	}
	return all;
}

void gs_track_settle_detached(void *list, bool freed)
{
	struct node *n = list;

	while (n) {
		struct node *next = n->next;

		if (freed) {
			gs_uncharge(n->a.card, n->a.bytes);
			free(n);
		} else {
			relink(n);
		}
		n = next;
	}
}

void gs_track_before_fork(void)
{
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_lock(&stripes[i]);
}

void gs_track_after_fork_parent(void)
{
	for (int i = NSTRIPES - 1; i >= 0; i--)
		pthread_mutex_unlock(&stripes[i]);
}

/* The child's driver state does not carry over: it holds nothing. */
void gs_track_after_fork_child(void)
{
	for (unsigned int b = 0; b < NBUCKETS; b++) {
		while (buckets[b]) {
			struct node *n = buckets[b];

			buckets[b] = n->next;
			free(n);
		}
	}
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_init(&stripes[i], NULL);
}
