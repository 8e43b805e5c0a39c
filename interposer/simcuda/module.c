// SPDX-License-Identifier: Apache-2.0
/*
 * Modules, libraries and their functions.
 *
 * An image is PTX text; every ".entry NAME" in it becomes a function.
 * Nothing is compiled or run (launch.c has the launch contract).
 *
 * A module (cuModuleLoadData) belongs to the context current when it was
 * loaded; its functions are CUfunction handles. A library
 * (cuLibraryLoadData, CUDA 12.0's context-independent loading) belongs to
 * no context: its kernels are CUkernel handles, which a launch accepts in
 * place of a CUfunction and runs in the context of the launch's stream, or
 * the current one for the NULL stream, as the driver API documents.
 * cuKernelGetFunction gives the kernel's function in the current context.
 *
 * Functions also keep what the launch calls of before CUDA 4.0 need: the
 * block shape (cuFuncSetBlockShape) and the parameter buffer (cuParamSet*).
 *
 * Device memory (module_mem.c has what one copy costs): a module takes its
 * copy from its context's device at load and gives it back at unload or
 * with its context. A library is loaded lazily, as CUDA_MODULE_LOADING=LAZY
 * (the default since CUDA 12.2) has it: a context gets its copy when it
 * first needs one of the library's kernels (cuKernelGetFunction, a launch
 * in that context), until the library is unloaded or the context goes.
 * Each copy is charged to the process that made it.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* A library's copy in one context. */
struct sim_copy {
	struct sim_copy *next;
	struct sim_ctx *ctx;
};

struct sim_module {
	int nfunc;
	struct sim_func **funcs;
	int library;		/* cuLibraryLoadData: its funcs are kernels */
	uint64_t bytes;		/* device memory of one copy */
	int dev;		/* a module's device; -1 for a library */
	struct sim_copy *copies;	/* a library's, by context */
};

static int name_char(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '$';
}

/*
 * Finds the next ".entry NAME" of text at or after *pos; returns the
 * name's length, 0 when there is none left.
 */
static size_t next_entry(const char *text, const char **pos,
			 const char **name)
{
	const char *p = *pos;

	while ((p = strstr(p, ".entry")) != NULL) {
		const char *q = p + 6;
		int starts = p == text || isspace((unsigned char)p[-1]);

		p = q;
		if (!starts || !isspace((unsigned char)*q))
			continue;
		while (isspace((unsigned char)*q))
			q++;
		*name = q;
		while (name_char(*q))
			q++;
		*pos = q;
		if (q > *name)
			return (size_t)(q - *name);
	}
	*pos = NULL;
	return 0;
}

static struct sim_func *func_new(struct sim_module *m, const char *name,
				 size_t len, int kind)
{
	struct sim_func *f = calloc(1, sizeof(*f) + len + 1);

	if (!f)
		return NULL;
	f->mod = m;
	f->block[0] = f->block[1] = f->block[2] = 1;
	memcpy(f->name, name, len);
	f->name[len] = '\0';
	if (sim_handle_add(f, kind, m, -1)) {
		free(f);
		return NULL;
	}
	return f;
}

static int add_func(struct sim_module *m, const char *name, size_t len)
{
	struct sim_func **v, *f;

	v = realloc(m->funcs, (size_t)(m->nfunc + 1) * sizeof(*v));
	if (!v)
		return -1;
	m->funcs = v;
	f = func_new(m, name, len, m->library ? SH_KERNEL : SH_FUNC);
	if (!f)
		return -1;
	m->funcs[m->nfunc++] = f;
	return 0;
}

static void func_free(struct sim_func *f)
{
	while (f->per_ctx) {
		struct sim_func *g = f->per_ctx;

		f->per_ctx = g->per_ctx;
		sim_handle_del(g);
		free(g);
	}
	sim_handle_del(f);
	free(f);
}

static void module_destroy(struct sim_module *m)
{
	for (int i = 0; i < m->nfunc; i++)
		func_free(m->funcs[i]);
	free(m->funcs);
	free(m);
}

/* Gives back the device memory of a module or of a library's copies. */
static void module_release(struct sim_module *m)
{
	if (m->dev >= 0)
		sim_uncharge(m->dev, m->bytes);
	while (m->copies) {
		struct sim_copy *cp = m->copies;

		m->copies = cp->next;
		sim_uncharge(cp->ctx->dev, m->bytes);
		free(cp);
	}
}

void sim_module_free(struct sim_entry *e)
{
	struct sim_module *m = (struct sim_module *)(uintptr_t)e->key;

	sim_table_del(&sim.handles, e);
	module_release(m);
	module_destroy(m);
}

/* Entered: the library of kernel k gets its copy in c, if it has none. */
CUresult sim_kernel_load(struct sim_func *k, struct sim_ctx *c)
{
	struct sim_module *m = k->mod;
	struct sim_copy *cp;

	for (cp = m->copies; cp; cp = cp->next)
		if (cp->ctx == c)
			return CUDA_SUCCESS;
	cp = calloc(1, sizeof(*cp));
	if (!cp || sim_charge(c->dev, m->bytes) != CUDA_SUCCESS) {
		free(cp);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	cp->ctx = c;
	cp->next = m->copies;
	m->copies = cp;
	return CUDA_SUCCESS;
}

/* Entered: context c is going away; the libraries' copies in it go too. */
void sim_libraries_drop_ctx(struct sim_ctx *c)
{
	for (size_t i = 0; i < sim.handles.n; i++) {
		struct sim_module *m;
		struct sim_copy **pp;

		if (sim.handles.v[i].kind != SH_LIBRARY)
			continue;
		m = (struct sim_module *)(uintptr_t)sim.handles.v[i].key;
		for (pp = &m->copies; *pp;) {
			struct sim_copy *cp = *pp;

			if (cp->ctx != c) {
				pp = &cp->next;
				continue;
			}
			*pp = cp->next;
			sim_uncharge(c->dev, m->bytes);
			free(cp);
		}
	}
}

/* Entries and, from each one's body up to the next, its stack frame. */
static CUresult parse(struct sim_module *m, const char *text)
{
	const char *pos = text, *name = NULL, *body = NULL;
	size_t len;

	while ((len = next_entry(text, &pos, &name)) != 0) {
		if (body)
			m->funcs[m->nfunc - 1]->stack = sim_local_bytes(body, name);
		if (add_func(m, name, len))
			return CUDA_ERROR_OUT_OF_MEMORY;
		body = pos;
	}
	if (body)
		m->funcs[m->nfunc - 1]->stack =
			sim_local_bytes(body, body + strlen(body));
	return m->nfunc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}

/*
 * Called entered; a new module of image (len bytes: a text's with its NUL,
 * or a file's) owned by ctx (NULL: a library). A module takes its device
 * memory now; a library when a context first uses it.
 */
static CUresult load(struct sim_ctx *ctx, const char *image, uint64_t len,
		     struct sim_module **out)
{
	struct sim_module *m = calloc(1, sizeof(*m));
	int dev = ctx ? ctx->dev : -1;
	CUresult rc;

	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->library = !ctx;
	m->dev = -1;
	m->bytes = sim_image_bytes(image, len);
	rc = parse(m, image);
	if (rc == CUDA_SUCCESS && ctx) {
		rc = sim_charge(dev, m->bytes);
		if (rc == CUDA_SUCCESS)
			m->dev = dev;
	}
	if (rc == CUDA_SUCCESS &&
	    sim_handle_add(m, ctx ? SH_MODULE : SH_LIBRARY, ctx, dev))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc != CUDA_SUCCESS) {
		module_release(m);
		module_destroy(m);
		return rc;
	}
	*out = m;
	return CUDA_SUCCESS;
}

/* A module of image (len bytes) in the current context. */
static CUresult module_load(CUmodule *module, const char *image,
			    uint64_t len)
{
	struct sim_module *m;
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!module || !image)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = load(c, image, len, &m);
	if (rc == CUDA_SUCCESS)
		*module = (CUmodule)m;
	return sim_leave_rc(rc);
}

/* The images here are PTX text, whatever the call: its bytes and NUL. */
static uint64_t text_len(const void *image)
{
	return image ? strlen(image) + 1 : 0;
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	return module_load(module, image, text_len(image));
}

/* JIT options are accepted and ignored: nothing is compiled here. */
SIM_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
				    unsigned int numOptions,
				    CUjit_option *options, void **optionValues)
{
	if (numOptions && (!options || !optionValues))
		return CUDA_ERROR_INVALID_VALUE;
	return module_load(module, image, text_len(image));
}

SIM_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	return module_load(module, fatCubin, text_len(fatCubin));
}

static CUresult library_load(CUlibrary *library, const char *code,
			     uint64_t len, int bad_options);

/* The image in file path, loaded as a module (library 0) or a library. */
static CUresult load_file(const char *path, void *out, int library)
{
	uint64_t len;
	char *text;
	CUresult rc;

	if (!out || !path)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_read_image(path, &text, &len);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = library ? library_load(out, text, len, 0) :
		       module_load(out, text, len);
	free(text);
	return rc;
}

SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
	return load_file(fname, module, 0);
}

static CUresult unload(const void *h, int kind)
{
	CUresult rc = sim_enter();
	struct sim_entry *e;

	if (rc != CUDA_SUCCESS)
		return rc;
	e = sim_handle_entry(h);
	if (!e || e->kind != kind)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	sim_module_free(e);
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuModuleUnload(CUmodule hmod)
{
	return unload(hmod, SH_MODULE);
}

static struct sim_func *find(struct sim_module *m, const char *name)
{
	for (int i = 0; i < m->nfunc; i++)
		if (!strcmp(m->funcs[i]->name, name))
			return m->funcs[i];
	return NULL;
}

/* The function (or kernel) called name in the module or library at h. */
static CUresult get_func(void **out, const void *h, int kind,
			 const char *name)
{
	CUresult rc = sim_enter();
	struct sim_module *m;
	struct sim_func *f;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out || !name)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	m = sim_handle_get(h, kind);
	if (!m)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	f = find(m, name);
	if (!f)
		return sim_leave_rc(CUDA_ERROR_NOT_FOUND);
	*out = f;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod,
				     const char *name)
{
	return get_func((void **)hfunc, hmod, SH_MODULE, name);
}

/* A library of code (len bytes). Options are accepted and ignored. */
static CUresult library_load(CUlibrary *library, const char *code,
			     uint64_t len, int bad_options)
{
	CUresult rc = sim_enter();
	struct sim_module *m;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!library || !code || bad_options)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	rc = load(NULL, code, len, &m);
	if (rc == CUDA_SUCCESS)
		*library = (CUlibrary)m;
	return sim_leave_rc(rc);
}

#define BAD_OPTIONS							\
	((numJitOptions && (!jitOptions || !jitOptionsValues)) ||	\
	 (numLibraryOptions && (!libraryOptions || !libraryOptionValues)))

SIM_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
				   CUjit_option *jitOptions,
				   void **jitOptionsValues,
				   unsigned int numJitOptions,
				   CUlibraryOption *libraryOptions,
				   void **libraryOptionValues,
				   unsigned int numLibraryOptions)
{
	return library_load(library, code, text_len(code), BAD_OPTIONS);
}

SIM_API CUresult cuLibraryLoadFromFile(CUlibrary *library,
				       const char *fileName,
				       CUjit_option *jitOptions,
				       void **jitOptionsValues,
				       unsigned int numJitOptions,
				       CUlibraryOption *libraryOptions,
				       void **libraryOptionValues,
				       unsigned int numLibraryOptions)
{
	if (BAD_OPTIONS)
		return CUDA_ERROR_INVALID_VALUE;
	return load_file(fileName, library, 1);
}

SIM_API CUresult cuLibraryUnload(CUlibrary library)
{
	return unload(library, SH_LIBRARY);
}

SIM_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library,
				    const char *name)
{
	return get_func((void **)pKernel, library, SH_LIBRARY, name);
}

/* The kernel's function in the current context, made on first use. */
SIM_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	struct sim_func *k, *f;
	struct sim_ctx *c;
	CUresult rc = sim_enter_ctx(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pFunc)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	k = sim_handle_get(kernel, SH_KERNEL);
	if (!k)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	for (f = k->per_ctx; f && f->ctx != c; f = f->per_ctx)
		;
	rc = sim_kernel_load(k, c);
	if (rc != CUDA_SUCCESS)
		return sim_leave_rc(rc);
	if (!f) {
		f = func_new(k->mod, k->name, strlen(k->name), SH_FUNC);
		if (!f)
			return sim_leave_rc(CUDA_ERROR_OUT_OF_MEMORY);
		f->stack = k->stack;
		f->ctx = c;
		f->per_ctx = k->per_ctx;
		k->per_ctx = f;
	}
	*pFunc = (CUfunction)f;
	return sim_leave_rc(CUDA_SUCCESS);
}

/* Entered; the function at h for the legacy launch calls, or NULL. */
static struct sim_func *legacy_func(CUfunction h)
{
	return sim_handle_get(h, SH_FUNC);
}

SIM_API CUresult cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z)
{
	CUresult rc = sim_enter();
	struct sim_func *f;

	if (rc != CUDA_SUCCESS)
		return rc;
	f = legacy_func(hfunc);
	if (!f)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	if (x <= 0 || y <= 0 || z <= 0)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	f->block[0] = (unsigned int)x;
	f->block[1] = (unsigned int)y;
	f->block[2] = (unsigned int)z;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuParamSetSize(CUfunction hfunc, unsigned int numbytes)
{
	CUresult rc = sim_enter();
	struct sim_func *f;

	if (rc != CUDA_SUCCESS)
		return rc;
	f = legacy_func(hfunc);
	if (!f)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	if (numbytes > SIM_PARAM_BYTES)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	f->param_size = numbytes;
	return sim_leave_rc(CUDA_SUCCESS);
}

SIM_API CUresult cuParamSetv(CUfunction hfunc, int offset, void *ptr,
			     unsigned int numbytes)
{
	CUresult rc = sim_enter();
	struct sim_func *f;

	if (rc != CUDA_SUCCESS)
		return rc;
	f = legacy_func(hfunc);
	if (!f)
		return sim_leave_rc(CUDA_ERROR_INVALID_HANDLE);
	if (!ptr || offset < 0 || numbytes > SIM_PARAM_BYTES ||
	    (unsigned int)offset > SIM_PARAM_BYTES - numbytes)
		return sim_leave_rc(CUDA_ERROR_INVALID_VALUE);
	memcpy(f->params + offset, ptr, numbytes);
	return sim_leave_rc(CUDA_SUCCESS);
}
