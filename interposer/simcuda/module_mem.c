// SPDX-License-Identifier: Apache-2.0
/*
 * What a loaded image costs on the device, and reading an image from a
 * file (module.c loads them).
 *
 * A driver places a module's code and its data in device memory. The model
 * (a modelling choice, see README.md): one copy of an image takes the
 * image's bytes (its code and initialised data), plus the bytes of the
 * variables its PTX defines in the .global state space (a zero-initialised
 * global is not in the image, and takes its size all the same), with no
 * granularity. A kernel's stack frame is what its body declares in the
 * .local state space (nvcc's __local_depot), per thread.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim.h"

#define SIM_IMAGE_MAX (256ULL << 20)	/* a larger file is not loaded */

/* Bytes of a PTX fundamental type (.b8 ... .f64), 0 for anything else. */
static unsigned int type_bytes(const char *tok, size_t len)
{
	static const struct {
		const char *name;
		unsigned int bytes;
	} types[] = {
		{ ".b8", 1 },  { ".u8", 1 },  { ".s8", 1 },  { ".b16", 2 },
		{ ".u16", 2 }, { ".s16", 2 }, { ".f16", 2 }, { ".bf16", 2 },
		{ ".b32", 4 }, { ".u32", 4 }, { ".s32", 4 }, { ".f32", 4 },
		{ ".b64", 8 }, { ".u64", 8 }, { ".s64", 8 }, { ".f64", 8 },
		{ ".f16x2", 4 }, { ".bf16x2", 4 }, { ".b128", 16 },
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (strlen(types[i].name) == len &&
		    !strncmp(tok, types[i].name, len))
			return types[i].bytes;
	return 0;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/*
 * The bytes one declarator takes: "name", "name[4]", "name[4][8]",
 * "name[2] = {...}" with elements of elem bytes.
 */
static uint64_t declarator_bytes(const char *p, const char *end,
				 uint64_t elem)
{
	uint64_t bytes = elem;

	while (p < end && *p != '[' && *p != '=')
		p++;
	while (p < end && *p == '[') {
		char *q;
		unsigned long long n = strtoull(p + 1, &q, 10);

		if (q >= end || *q != ']' ||
		    __builtin_mul_overflow(bytes, (uint64_t)n, &bytes))
			return bytes;
		p = q + 1;
	}
	return bytes;
}

/* Past the number (and the blanks before it) at p. */
static const char *skip_number(const char *p, const char *end)
{
	while (p < end && isspace((unsigned char)*p))
		p++;
	while (p < end && isalnum((unsigned char)*p))
		p++;
	return p;
}

/* One ".global ... ;" statement from just after ".global" to end. */
static uint64_t statement_bytes(const char *p, const char *end)
{
	uint64_t elem = 0, vec = 1, sum = 0;
	const char *tok;

	/* The directives: .align N, .v2/.v4/.v8, the type. */
	for (;;) {
		while (p < end && isspace((unsigned char)*p))
			p++;
		if (p >= end || *p != '.')
			break;
		tok = p;
		while (p < end && !isspace((unsigned char)*p))
			p++;
		if (!strncmp(tok, ".align", 6) && p - tok == 6)
			p = skip_number(p, end);
		else if (tok[1] == 'v' && isdigit((unsigned char)tok[2]))
			vec = strtoull(tok + 2, NULL, 10);
		else if (type_bytes(tok, (size_t)(p - tok)))
			elem = type_bytes(tok, (size_t)(p - tok));
	}
	if (!elem)
		return 0;
	/* Declarators, separated by commas outside initialisers. */
	while (p < end) {
		const char *d = p;
		int depth = 0;

		while (p < end && (depth || *p != ',')) {
			depth += *p == '{';
			depth -= *p == '}';
			p++;
		}
		sum = add_sat(sum, declarator_bytes(d, p, elem * vec));
		p++;
	}
	return sum;
}

/*
 * The bytes of the variables [text, stop) declares in state space (".global",
 * ".local"): every space that begins a declaration (not the ".global" of
 * an instruction such as ld.global), unless the declaration is .extern.
 */
static uint64_t space_bytes(const char *text, const char *stop,
			    const char *space)
{
	size_t n = strlen(space);
	const char *p = text, *line, *end;
	uint64_t sum = 0;

	while (p < stop && (p = memmem(p, (size_t)(stop - p), space, n))) {
		const char *after = p + n;

		if ((p != text && !isspace((unsigned char)p[-1])) ||
		    !isspace((unsigned char)*after)) {
			p = after;
			continue;
		}
		end = strchr(after, ';');
		if (!end || end > stop)
			break;
		for (line = p; line > text && line[-1] != '\n' &&
		     line[-1] != ';' && line[-1] != '{' && line[-1] != '}';
		     line--)
			;
		if (!memmem(line, (size_t)(p - line), ".extern", 7))
			sum = add_sat(sum, statement_bytes(after, end));
		p = end + 1;
	}
	return sum;
}

uint64_t sim_local_bytes(const char *body, const char *end)
{
	return space_bytes(body, end, ".local");
}

uint64_t sim_image_bytes(const char *text, uint64_t len)
{
	return add_sat(len, space_bytes(text, text + strlen(text), ".global"));
}

CUresult sim_read_image(const char *path, char **text, uint64_t *len)
{
	struct stat st;
	ssize_t n;
	char *buf;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? CUDA_ERROR_FILE_NOT_FOUND :
					 CUDA_ERROR_INVALID_VALUE;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > SIM_IMAGE_MAX ||
	    !(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	n = pread(fd, buf, (size_t)st.st_size, 0);
	close(fd);
	if (n != st.st_size) {
		free(buf);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	buf[n] = '\0';
	*text = buf;
	*len = (uint64_t)n;
	return CUDA_SUCCESS;
}
