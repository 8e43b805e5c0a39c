// SPDX-License-Identifier: Apache-2.0
/*
 * The container's configuration, from the variables the node agent sets:
 * GPU_IDX (physical card indices) and GPU_CONTAINER_MEM (caps in MiB), each
 * a comma-separated list for a container with vGPUs on several cards, and
 * the shim's own GPUSLICE_* settings.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"

#define GS_MAX_CAP_MIB (16ULL * 1024 * 1024)	/* 16 TiB */
#define GS_DEFAULT_CONTEXT_MIB 256
#define GS_DEFAULT_LEDGER_DIR "/run/gpuslice/ledger"
#define GS_DEFAULT_SCHED_DIR "/run/gpuslice/sched"
#define GS_DEFAULT_MAX_INST 20
#define GS_DEFAULT_SLICE_MS 5
#define GS_DEFAULT_RECLAIM_MS 100

/* Parses "a,b,c" of integers in [min, max]; returns the count or -1. */
static int parse_list(const char *s, unsigned long long min,
		      unsigned long long max, unsigned long long *out, int cap)
{
	int n = 0;

	while (*s) {
		char *end;
		unsigned long long v;

		if (n == cap || *s < '0' || *s > '9')
			return -1;
		errno = 0;
		v = strtoull(s, &end, 10);
		if (errno || v < min || v > max)
			return -1;
		out[n++] = v;
		if (*end == ',' && end[1])
			end++;
		else if (*end)
			return -1;
		s = end;
	}
	return n;
}

/*
 * Devices appear in PCI order, which is the order of the physical indices:
 * keep the cards in that order whatever order GPU_IDX lists them in.
 */
static void sort_cards(struct gs_config *cfg)
{
	for (int i = 1; i < cfg->ncards; i++) {
		struct gs_card_config c = cfg->cards[i];
		int j = i;

		for (; j > 0 && cfg->cards[j - 1].index > c.index; j--)
			cfg->cards[j] = cfg->cards[j - 1];
		cfg->cards[j] = c;
	}
}

/*
 * One integer in [min, max] from variable name's value val, into *out when
 * set (else *out stays); false with err set when malformed.
 */
static bool parse_one(const char *name, const char *val,
		      unsigned long long min, unsigned long long max,
		      const char *unit, unsigned long long *out, char *err,
		      size_t errlen)
{
	if (!val || !*val)
		return true;
	if (parse_list(val, min, max, out, 1) != 1) {
		snprintf(err, errlen, "%s=%s: want %s %llu-%llu", name, val,
			 unit, min, max);
		return false;
	}
	return true;
}

static void copy_setting(char *dst, size_t len, const char *v, const char *def)
{
	snprintf(dst, len, "%s", v && *v ? v : def);
}

/* One UUID as NVML writes it, "GPU-" and 8-4-4-4-12 hex digits, lower-cased. */
static bool parse_uuid(const char *s, size_t len, char out[GS_UUID_STR_LEN])
{
	if (len != GS_UUID_STR_LEN - 1 || strncmp(s, "GPU-", 4))
		return false;
	for (size_t i = 4; i < len; i++) {
		bool dash = i == 12 || i == 17 || i == 22 || i == 27;

		if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i]))
			return false;
		out[i] = (char)tolower((unsigned char)s[i]);
	}
	memcpy(out, "GPU-", 4);
	out[len] = '\0';
	return true;
}

/*
 * GPUSLICE_CARD_UUIDS (the agent's): each card's UUID in GPU_IDX's order,
 * what devmap.c matches devices by. Fills out (nothing when unset); false
 * with err set when malformed.
 */
static bool parse_card_uuids(const char *v, int ncards,
			     char (*out)[GS_UUID_STR_LEN], char *err,
			     size_t errlen)
{
	const char *s = v;
	int n = 0;

	if (!v || !*v)
		return true;
	while (*s && n < ncards) {
		size_t len = strcspn(s, ",");

		if (!parse_uuid(s, len, out[n]))
			break;
		for (int j = 0; j < n; j++) {
			if (!strcmp(out[j], out[n])) {
				snprintf(err, errlen,
					 "GPUSLICE_CARD_UUIDS=%.120s lists %s twice",
					 v, out[n]);
				return false;
			}
		}
		n++;
		s += len;
		if (*s == ',' && s[1])
			s++;	/* a trailing comma is left over: refused */
	}
	if (!*s && n == ncards)
		return true;
	snprintf(err, errlen,
		 "GPUSLICE_CARD_UUIDS=%.120s: want one UUID per card (%d), in GPU_IDX's order, comma-separated, each GPU- and 8-4-4-4-12 hex digits",
		 v, ncards);
	return false;
}

/*
 * The compute settings of the no-module gate (GPU_POLICY and
 * GPU_CONTAINER_QUOTA_PERCENT: one per card, in GPU_IDX's order). Fills
 * pol and quota (-1 and 0 when unset); false with err set when malformed.
 */
static bool parse_compute(struct gs_config *cfg,
			  const char *(*get)(const char *), int ncards,
			  int *pol, unsigned int *quota, char *err,
			  size_t errlen)
{
	const char *vpol = get("GPU_POLICY");
	const char *vq = get("GPU_CONTAINER_QUOTA_PERCENT");
	const char *vpri = get("GPU_CONTAINER_PRIORITY");
	const char *vinst = get("GPUSLICE_MAX_INST");
	const char *vslice = get("GPUSLICE_SLICE_MS");
	const char *vreclaim = get("GPUSLICE_RECLAIM_MS");
	const char *vkey = get("GPUSLICE_VGPU");
	unsigned long long v[GS_MAX_CARDS];
	unsigned long long max_inst = GS_DEFAULT_MAX_INST;
	unsigned long long slice_ms = GS_DEFAULT_SLICE_MS;
	unsigned long long reclaim_ms = GS_DEFAULT_RECLAIM_MS;
	int n;

	for (int i = 0; i < ncards; i++) {
		pol[i] = -1;
		quota[i] = 0;
	}
	if (vkey && *vkey) {
		if (strlen(vkey) >= sizeof(cfg->vgpu_key)) {
			snprintf(err, errlen,
				 "GPUSLICE_VGPU=%.40s...: want at most %zu characters",
				 vkey, sizeof(cfg->vgpu_key) - 1);
			return false;
		}
		snprintf(cfg->vgpu_key, sizeof(cfg->vgpu_key), "%s", vkey);
	} else if (gethostname(cfg->vgpu_key, sizeof(cfg->vgpu_key) - 1) ||
		   !cfg->vgpu_key[0]) {
		snprintf(cfg->vgpu_key, sizeof(cfg->vgpu_key), "default");
	}
	if (vpol && *vpol) {
		n = parse_list(vpol, 0, 6, v, GS_MAX_CARDS);
		if (n != ncards) {
			snprintf(err, errlen,
				 "GPU_POLICY=%s: want one policy 0-6 per card (%d), comma-separated",
				 vpol, ncards);
			return false;
		}
		for (int i = 0; i < n; i++)
			pol[i] = (int)v[i];
	}
	if (vq && *vq) {
		n = parse_list(vq, 0, 100, v, GS_MAX_CARDS);
		for (int i = 0; i < n; i++)
			if (v[i] % 5)
				n = -1;
		if (n != ncards) {
			snprintf(err, errlen,
				 "GPU_CONTAINER_QUOTA_PERCENT=%s: want one percentage 0-100, a multiple of 5, per card (%d), comma-separated",
				 vq, ncards);
			return false;
		}
		for (int i = 0; i < n; i++)
			quota[i] = (unsigned int)v[i];
	}
	if (vpri && *vpri) {
		if (parse_list(vpri, 0, 1, v, 1) != 1) {
			snprintf(err, errlen,
				 "GPU_CONTAINER_PRIORITY=%s: want 0-1 (0 low, 1 high)",
				 vpri);
			return false;
		}
		cfg->high = (unsigned int)v[0];
	}
	if (!parse_one("GPUSLICE_MAX_INST", vinst, 1, 64, "units per period",
		       &max_inst, err, errlen) ||
	    !parse_one("GPUSLICE_SLICE_MS", vslice, 1, 100, "milliseconds",
		       &slice_ms, err, errlen) ||
	    !parse_one("GPUSLICE_RECLAIM_MS", vreclaim, 1, 10000,
		       "milliseconds", &reclaim_ms, err, errlen))
		return false;
	cfg->max_inst = (unsigned int)max_inst;
	cfg->slice_ns = slice_ms * 1000000ULL;
	cfg->reclaim_ns = reclaim_ms * 1000000ULL;
	return true;
}

int gs_config_parse(struct gs_config *cfg, const char *(*get)(const char *),
		    char *err, size_t errlen)
{
	unsigned long long idx[GS_MAX_CARDS], mem[GS_MAX_CARDS], ctx;
	const char *vidx = get("GPU_IDX"), *vmem = get("GPU_CONTAINER_MEM");
	const char *vctx = get("GPUSLICE_CONTEXT_MIB");
	const char *venf = get("GPUSLICE_ENFORCE");
	int nidx = 0, nmem;
	int pol[GS_MAX_CARDS];
	unsigned int quota[GS_MAX_CARDS];
	const char *vuuid = get("GPUSLICE_CARD_UUIDS");
	char uuid[GS_MAX_CARDS][GS_UUID_STR_LEN] = { { 0 } };

	memset(cfg, 0, sizeof(*cfg));
	copy_setting(cfg->ledger_dir, sizeof(cfg->ledger_dir),
		     get("GPUSLICE_LEDGER_DIR"), GS_DEFAULT_LEDGER_DIR);
	copy_setting(cfg->sched_dir, sizeof(cfg->sched_dir),
		     get("GPUSLICE_SCHED_DIR"), GS_DEFAULT_SCHED_DIR);
	copy_setting(cfg->real_libcuda, sizeof(cfg->real_libcuda),
		     get("GPUSLICE_REAL_LIBCUDA"), "libcuda.so.1");
	copy_setting(cfg->real_libnvml, sizeof(cfg->real_libnvml),
		     get("GPUSLICE_REAL_LIBNVML"), "libnvidia-ml.so.1");
	cfg->context_bytes = GS_DEFAULT_CONTEXT_MIB * GS_MIB;
	if (!vmem || !*vmem)
		return 0;	/* no cap: pure pass-through */

	cfg->invalid = true;	/* until proven otherwise: fail closed */
	nmem = parse_list(vmem, 1, GS_MAX_CAP_MIB, mem, GS_MAX_CARDS);
	if (nmem <= 0) {
		snprintf(err, errlen,
			 "GPU_CONTAINER_MEM=%s: want MiB as integers 1-%llu, comma-separated, at most %d",
			 vmem, GS_MAX_CAP_MIB, GS_MAX_CARDS);
		return -EINVAL;
	}
	if (vidx && *vidx) {
		nidx = parse_list(vidx, 0, 255, idx, GS_MAX_CARDS);
		if (nidx <= 0) {
			snprintf(err, errlen,
				 "GPU_IDX=%s: want card indices 0-255, comma-separated, at most %d",
				 vidx, GS_MAX_CARDS);
			return -EINVAL;
		}
		if (nidx != nmem) {
			snprintf(err, errlen,
				 "GPU_IDX=%s names %d cards but GPU_CONTAINER_MEM=%s gives %d caps: one cap per card",
				 vidx, nidx, vmem, nmem);
			return -EINVAL;
		}
	}
	if (venf && *venf) {
		if (!strcmp(venf, "module")) {
			cfg->enforce = GS_ENFORCE_MODULE;
		} else if (!strcmp(venf, "file")) {
			cfg->enforce = GS_ENFORCE_FILE;
		} else if (strcmp(venf, "auto")) {
			snprintf(err, errlen,
				 "GPUSLICE_ENFORCE=%s: want auto, module or file",
				 venf);
			return -EINVAL;
		}
	}
	if (vctx && *vctx) {
		if (parse_list(vctx, 0, 65536, &ctx, 1) != 1) {
			snprintf(err, errlen,
				 "GPUSLICE_CONTEXT_MIB=%s: want MiB 0-65536",
				 vctx);
			return -EINVAL;
		}
		cfg->context_bytes = ctx * GS_MIB;
	}
	if (!parse_card_uuids(vuuid, nmem, uuid, err, errlen))
		return -EINVAL;
	cfg->uuids = vuuid && *vuuid;
	if (!parse_compute(cfg, get, nmem, pol, quota, cfg->compute_err,
			   sizeof(cfg->compute_err)))
		cfg->compute_invalid = true;
	for (int i = 0; i < nmem; i++) {
		for (int j = 0; j < i && nidx; j++) {
			if (idx[j] == idx[i]) {
				snprintf(err, errlen,
					 "GPU_IDX=%s lists card %llu twice",
					 vidx, idx[i]);
				return -EINVAL;
			}
		}
		cfg->cards[i].index = nidx ? (int)idx[i] : i;
		cfg->cards[i].cap = mem[i] * GS_MIB;
		cfg->cards[i].policy = pol[i];
		cfg->cards[i].quota = quota[i];
		memcpy(cfg->cards[i].uuid, uuid[i], GS_UUID_STR_LEN);
	}
	cfg->ncards = nmem;
	sort_cards(cfg);
	cfg->invalid = false;
	cfg->enabled = true;
	return 0;
}

static struct gs_config config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;

static const char *env_get(const char *name)
{
	return getenv(name);
}

static void config_load(void)
{
	char err[256] = "";

	gs_log_init();
	if (gs_config_parse(&config, env_get, err, sizeof(err)) < 0)
		gs_err("%s; every device allocation will be refused until it is fixed",
		       err);
}

const struct gs_config *gs_config(void)
{
	pthread_once(&config_once, config_load);
	return &config;
}
