// SPDX-License-Identifier: Apache-2.0
/*
 * Reads the SIMCUDA_* environment. Every bad value is reported with one
 * line on stderr naming the variable and its valid range, so that a test
 * that mistypes a value fails loudly instead of silently using a default.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state.h"

#define MIB (1024ULL * 1024ULL)
#define MAX_MEM_MIB (1ULL << 18)	/* 256 GiB per device */
#define DEFAULT_MEM_MIB 16384ULL
#define DEFAULT_CTX_MIB 256ULL
#define DEFAULT_NAME "gpuslice simulated GPU"

/* Parses a whole decimal number in [min, max]; -1 when it is not one. */
static int parse_num(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	while (*s == ' ')
		s++;
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	while (*end == ' ')
		end++;
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

static int bad(const char *var, const char *val, const char *range)
{
	fprintf(stderr, "simcuda: %s=\"%s\" is invalid: %s\n", var, val, range);
	return SIMST_EINVAL;
}

static int read_devices(struct simst_config *c)
{
	const char *v = getenv("SIMCUDA_DEVICES");
	uint64_t n;

	c->ndev = 1;
	if (!v)
		return 0;
	if (parse_num(v, 1, SIMST_MAX_DEV, &n))
		return bad("SIMCUDA_DEVICES", v, "expected an integer in 1..16");
	c->ndev = (int)n;
	c->set |= SIMST_SET_DEVICES;
	return 0;
}

/* One value for every device, or a comma list with one value per device. */
static int read_mem(struct simst_config *c)
{
	const char *v = getenv("SIMCUDA_MEM_MIB");
	const char *range = "expected MiB in 1..262144, one value or a "
			    "comma list with one value per device";
	char buf[512], *save = NULL, *tok;
	uint64_t mib[SIMST_MAX_DEV];
	int n = 0;

	for (int i = 0; i < SIMST_MAX_DEV; i++)
		c->cap[i] = DEFAULT_MEM_MIB * MIB;
	if (!v)
		return 0;
	if (strlen(v) >= sizeof(buf))
		return bad("SIMCUDA_MEM_MIB", v, range);
	strcpy(buf, v);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (n == SIMST_MAX_DEV || parse_num(tok, 1, MAX_MEM_MIB, &mib[n]))
			return bad("SIMCUDA_MEM_MIB", v, range);
		n++;
	}
	if (n == 0 || (n != 1 && n != c->ndev)) {
		fprintf(stderr, "simcuda: SIMCUDA_MEM_MIB=\"%s\" lists %d values "
			"but SIMCUDA_DEVICES is %d (give 1 or %d values)\n",
			v, n, c->ndev, c->ndev);
		return SIMST_EINVAL;
	}
	for (int i = 0; i < SIMST_MAX_DEV; i++)
		c->cap[i] = mib[n == 1 ? 0 : (i < n ? i : 0)] * MIB;
	c->set |= SIMST_SET_MEM;
	return 0;
}

static int read_ctx(struct simst_config *c)
{
	const char *v = getenv("SIMCUDA_CONTEXT_MIB");
	uint64_t n;

	c->ctx_bytes = DEFAULT_CTX_MIB * MIB;
	if (!v)
		return 0;
	if (parse_num(v, 0, MAX_MEM_MIB, &n))
		return bad("SIMCUDA_CONTEXT_MIB", v,
			   "expected MiB in 0..262144");
	c->ctx_bytes = n * MIB;
	return 0;
}

static int read_name(struct simst_config *c)
{
	const char *v = getenv("SIMCUDA_NAME");

	strcpy(c->name, DEFAULT_NAME);
	if (!v)
		return 0;
	if (!*v || strlen(v) >= SIMST_NAME_MAX)
		return bad("SIMCUDA_NAME", v, "expected 1..63 characters");
	strcpy(c->name, v);
	c->set |= SIMST_SET_NAME;
	return 0;
}

static int read_path(struct simst_config *c)
{
	const char *v = getenv("SIMCUDA_STATE");

	c->explicit_path = v != NULL;
	if (!v) {
		snprintf(c->path, sizeof(c->path), "/dev/shm/simcuda-%u.state",
			 (unsigned int)getuid());
		return 0;
	}
	if (*v != '/' || strlen(v) + 16 >= sizeof(c->path))
		return bad("SIMCUDA_STATE", v,
			   "expected an absolute path of at most 4080 bytes");
	strcpy(c->path, v);
	return 0;
}

int simst_read_config(struct simst_config *c)
{
	memset(c, 0, sizeof(*c));
	if (read_devices(c) || read_mem(c) || read_ctx(c) || read_name(c) ||
	    read_path(c))
		return SIMST_EINVAL;
	return SIMST_OK;
}
