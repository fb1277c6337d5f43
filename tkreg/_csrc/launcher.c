/* tkreg's native launcher: validates a call against the op's signature, picks a variant, and
 * launches its kernels through the CUDA driver API on torch's current stream.
 *
 * One generic launcher reads the plan that build_tools extracted from tilelang's IR (assembled
 * into int64 words by tkreg/assemble.py); no per-kernel C is generated.  Built against the
 * Python limited API (abi3); links nothing from CUDA or torch: libcuda.so.1 is dlopen'ed on
 * the first launch, so `import tkreg` works on machines without a GPU.  The GIL is held
 * throughout, which also serializes the lazy per-(variant, device) module loads.  Every error
 * becomes a Python exception; nothing here ends the process. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cuda_driver.h"

/* Bind dl* to their pre-2.34 versions so the wheel keeps an old manylinux tag. */
#if defined(__GLIBC__) && defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
#elif defined(__GLIBC__) && defined(__aarch64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
__asm__(".symver dlerror,dlerror@GLIBC_2.17");
#endif

#define MAXDEV 64
#define MAXRANK 8
#define MAXT 32
#define MAXSYM 32
#define MAXP 64
#define MAXTMA 16
#define STACK 64

enum { OP_CONST, OP_SYM, OP_ADD, OP_SUB, OP_MUL, OP_FLOORDIV, OP_FLOORMOD, OP_MIN, OP_MAX, OP_EQ,
       OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_AND, OP_OR, OP_NOT, OP_NEG, OP_TDIV, OP_TMOD,
       OP_SELECT };
enum { ROLE_IN, ROLE_OUT, ROLE_INPLACE, ROLE_SCRATCH };
enum { DT_SET, DT_SAME, DT_FIXED };
enum { P_PTR, P_TMA, P_SYM, P_SCALAR };
enum { T_I32, T_I64, T_F32, T_F64, T_BOOL };
#define NDTYPES 12
static const int ELEM_SIZE[NDTYPES] = {4, 2, 2, 1, 1, 4, 8, 1, 1, 1, 8, 1};

/* ---- driver ------------------------------------------------------------------------------ */
#define DECLARE_FN(name, args) static CUresult(*p_##name) args;
TKREG_CU_FUNCS(DECLARE_FN)
static int g_cuda_state = 0; /* 0 untried, 1 ready, -1 failed */
static char g_cuda_err[512];
static CUcontext g_ctx[MAXDEV];

static PyObject *g_dtypes[NDTYPES], *g_empty, *g_get_stream;
/* torch.Tensor's own method descriptors, called directly: skips the per-call method lookup. */
static PyObject *m_data_ptr, *m_size, *m_is_contiguous, *m_get_device, *m_stride, *m_empty_like, *m_new_empty;
static PyObject *g_LaunchError;
static PyObject *s_dtype, *s_cdata, *s_requires_grad, *g_is_grad_enabled;

/* Fast path: torch's ABI-stable C shim (the AOTInductor `aoti_torch_*` functions, exported by
 * the libtorch that `import torch` already loaded; dlsym'ed, never linked) reads sizes, strides,
 * dtype, device and data pointer of a plain tensor in nanoseconds, where the attribute calls cost
 * ~350 ns per tensor.  The handle is the address of the tensor's TensorImpl* (`Tensor._cdata`),
 * which is what an at::Tensor is.  Used only for exact torch.Tensor / nn.Parameter objects on CPU
 * or CUDA, and only after a self-check against the attribute path; anything else takes that path. */
typedef int32_t (*shim_get_p)(void *, void **);
typedef int32_t (*shim_get_pi64)(void *, int64_t **);
typedef int32_t (*shim_get_i64)(void *, int64_t *);
typedef int32_t (*shim_get_i32)(void *, int32_t *);
static struct {
    int ok;
    shim_get_p data_ptr;
    shim_get_pi64 sizes, strides;
    shim_get_i64 dim;
    shim_get_i32 dtype, device_type, device_index;
    int32_t (*stream)(int32_t, void **);
    _Bool (*grad_enabled)(void);
    int32_t scalar_type[NDTYPES], cpu, cuda;
    PyObject *types[2];
    int direct; /* THPVariable holds its at::Tensor right after PyObject_HEAD (checked by enable_direct) */
} g_shim;


static int cuda_load(void) {
    if (g_cuda_state == 1) return 0;
    if (g_cuda_state == 0) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(g_cuda_err, sizeof g_cuda_err, "cannot load libcuda.so.1 (%s): is the NVIDIA driver installed?",
                     dlerror());
            g_cuda_state = -1;
        } else {
#define LOAD_FN(name, args)                                                                   \
    if (g_cuda_state == 0 && !(p_##name = (CUresult(*) args)dlsym(h, #name))) {               \
        snprintf(g_cuda_err, sizeof g_cuda_err, "libcuda.so.1 lacks %s: the driver is too old " \
                 "(tkreg needs CUDA 12.0 or newer)", #name);                                  \
        g_cuda_state = -1;                                                                    \
    }
            TKREG_CU_FUNCS(LOAD_FN)
            if (g_cuda_state == 0) {
                CUresult r = p_cuInit(0);
                if (r != CUDA_SUCCESS) {
                    snprintf(g_cuda_err, sizeof g_cuda_err, "cuInit failed with error %d", r);
                    g_cuda_state = -1;
                } else {
                    g_cuda_state = 1;
                }
            }
        }
    }
    if (g_cuda_state == 1) return 0;
    PyErr_SetString(g_LaunchError ? g_LaunchError : PyExc_RuntimeError, g_cuda_err);
    return -1;
}

static const char *cu_str(CUresult r) {
    const char *name = NULL, *s = NULL;
    static char buf[256];
    if (p_cuGetErrorName) p_cuGetErrorName(r, &name);
    if (p_cuGetErrorString) p_cuGetErrorString(r, &s);
    snprintf(buf, sizeof buf, "%s: %s", name ? name : "CUDA error", s ? s : "unknown");
    return buf;
}

static int cu_fail(CUresult r, PyObject *op, PyObject *variant, const char *what) {
    PyErr_Format(g_LaunchError, "%U[%U]: %s failed: %s", op, variant, what, cu_str(r));
    return -1;
}

/* Make device `dev`'s primary context current; *prev gets what was current so it is restored
 * afterwards (torch keeps its own notion of the current device). */
static int ctx_enter(int dev, CUcontext *prev, PyObject *op) {
    CUresult r;
    if (!g_ctx[dev]) {
        CUdevice d;
        if ((r = p_cuDeviceGet(&d, dev)) || (r = p_cuDevicePrimaryCtxRetain(&g_ctx[dev], d))) {
            PyErr_Format(g_LaunchError, "%U: cannot open cuda:%d: %s", op, dev, cu_str(r));
            return -1;
        }
    }
    p_cuCtxGetCurrent(prev);
    if (*prev != g_ctx[dev] && (r = p_cuCtxSetCurrent(g_ctx[dev]))) {
        PyErr_Format(g_LaunchError, "%U: cannot make cuda:%d current: %s", op, dev, cu_str(r));
        return -1;
    }
    return 0;
}

static void ctx_exit(int dev, CUcontext prev) {
    if (prev && prev != g_ctx[dev]) p_cuCtxSetCurrent(prev);
}

/* ---- programs ---------------------------------------------------------------------------- */
typedef struct { int n; const int64_t *code; } Prog;

static int64_t floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static int64_t floormod(int64_t a, int64_t b) { return a - floordiv(a, b) * b; }

/* 0 on success; -1 on a malformed program, a division by zero or an unbound symbol. */
static int prog_eval(Prog p, const int64_t *syms, const char *bound, int64_t *out) {
    int64_t st[STACK];
    int sp = 0;
    for (int i = 0; i < p.n; i++) {
        int64_t op = p.code[i];
        if (op == OP_CONST || op == OP_SYM) {
            if (i + 1 >= p.n || sp >= STACK) return -1;
            int64_t v = p.code[++i];
            if (op == OP_SYM) {
                if (v < 0 || v >= MAXSYM || (bound && !bound[v])) return -1;
                v = syms[v];
            }
            st[sp++] = v;
            continue;
        }
        if (op == OP_NOT || op == OP_NEG) {
            if (sp < 1) return -1;
            st[sp - 1] = op == OP_NOT ? !st[sp - 1] : -st[sp - 1];
            continue;
        }
        if (op == OP_SELECT) {
            if (sp < 3) return -1;
            int64_t c = st[sp - 3], a = st[sp - 2], b = st[sp - 1];
            sp -= 2;
            st[sp - 1] = c ? a : b;
            continue;
        }
        if (sp < 2) return -1;
        int64_t a = st[sp - 2], b = st[sp - 1], r;
        switch (op) {
        case OP_ADD: r = a + b; break;
        case OP_SUB: r = a - b; break;
        case OP_MUL: r = a * b; break;
        case OP_FLOORDIV: if (!b) return -1; r = floordiv(a, b); break;
        case OP_FLOORMOD: if (!b) return -1; r = floormod(a, b); break;
        case OP_TDIV: if (!b) return -1; r = a / b; break;
        case OP_TMOD: if (!b) return -1; r = a % b; break;
        case OP_MIN: r = a < b ? a : b; break;
        case OP_MAX: r = a > b ? a : b; break;
        case OP_EQ: r = a == b; break;
        case OP_NE: r = a != b; break;
        case OP_LT: r = a < b; break;
        case OP_LE: r = a <= b; break;
        case OP_GT: r = a > b; break;
        case OP_GE: r = a >= b; break;
        case OP_AND: r = a && b; break;
        case OP_OR: r = a || b; break;
        default: return -1;
        }
        st[--sp - 1] = r;
    }
    if (sp != 1) return -1;
    *out = st[0];
    return 0;
}

/* A cursor over the int64 words Python assembled; errors set *bad. */
typedef struct { const int64_t *w; Py_ssize_t n, i; int bad; } Cur;
static int64_t next(Cur *c) { if (c->i >= c->n) { c->bad = 1; return 0; } return c->w[c->i++]; }
static Prog next_prog(Cur *c) {
    Prog p = {0, NULL};
    int64_t n = next(c);
    if (n < 0 || c->i + n > c->n) { c->bad = 1; return p; }
    p.n = (int)n; p.code = c->w + c->i; c->i += n;
    return p;
}

static int64_t *copy_words(PyObject *buf, Py_ssize_t *n) {
    char *data; Py_ssize_t len;
    if (PyBytes_AsStringAndSize(buf, &data, &len) < 0) return NULL;
    if (len % 8) { PyErr_SetString(PyExc_ValueError, "plan words: length not a multiple of 8"); return NULL; }
    int64_t *w = PyMem_Malloc(len ? len : 8);
    if (!w) { PyErr_NoMemory(); return NULL; }
    memcpy(w, data, len);
    *n = len / 8;
    return w;
}

/* ---- Variant ------------------------------------------------------------------------------ */
typedef struct { int tensor, dtype, rank; Prog dims[MAXRANK], strides[MAXRANK]; uint32_t box[MAXRANK], estr[MAXRANK];
                 int interleave, swizzle, l2, oob; } Tma;
typedef struct { int kind, index, type; } Param;
typedef struct { int name; Prog grid[3], smem; unsigned block[3], cluster[3]; int coop, pdl, nparams;
                 Param params[MAXP]; } Kernel;
typedef struct { int text; Prog prog; } Constraint;

typedef struct {
    PyObject_HEAD
    int nt, ncons, ntma, nkern;
    int dtypes[MAXT];
    Constraint *cons;
    Tma *tma;
    Kernel *kern;
    PyObject *key, *strings, *loader, *cubin;
    CUmodule mod[MAXDEV];
    CUfunction *funcs[MAXDEV];
    int *smem_set[MAXDEV];
    int64_t *words;
} Variant;

static void Variant_dealloc(PyObject *self) {
    Variant *v = (Variant *)self;
    Py_XDECREF(v->key); Py_XDECREF(v->strings); Py_XDECREF(v->loader); Py_XDECREF(v->cubin);
    PyMem_Free(v->cons); PyMem_Free(v->tma); PyMem_Free(v->kern); PyMem_Free(v->words);
    for (int d = 0; d < MAXDEV; d++) { PyMem_Free(v->funcs[d]); PyMem_Free(v->smem_set[d]); }
    /* Modules stay loaded: unloading while a kernel may still run on a stream is unsafe. */
    PyTypeObject *tp = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

/* Variant(key, words: bytes, strings: tuple, loader: callable -> cubin bytes) */
static PyObject *Variant_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *key, *buf, *strings, *loader;
    if (!PyArg_ParseTuple(args, "UOO!O:Variant", &key, &buf, &PyTuple_Type, &strings, &loader)) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    Variant *v = (Variant *)alloc(tp, 0);
    if (!v) return NULL;
    Py_INCREF(key); v->key = key;
    Py_INCREF(strings); v->strings = strings;
    Py_INCREF(loader); v->loader = loader;
    Py_ssize_t n;
    if (!(v->words = copy_words(buf, &n))) goto fail;
    Cur c = {v->words, n, 0, 0};
    v->nt = (int)next(&c);
    if (v->nt < 0 || v->nt > MAXT) c.bad = 1;
    for (int i = 0; i < v->nt && !c.bad; i++) v->dtypes[i] = (int)next(&c);
    v->ncons = (int)next(&c);
    v->cons = PyMem_Calloc(v->ncons > 0 ? v->ncons : 1, sizeof(Constraint));
    for (int i = 0; i < v->ncons && !c.bad; i++) { v->cons[i].text = (int)next(&c); v->cons[i].prog = next_prog(&c); }
    v->ntma = (int)next(&c);
    if (v->ntma < 0 || v->ntma > MAXTMA) c.bad = 1;
    v->tma = PyMem_Calloc(v->ntma > 0 ? v->ntma : 1, sizeof(Tma));
    for (int i = 0; i < v->ntma && !c.bad; i++) {
        Tma *t = &v->tma[i];
        t->tensor = (int)next(&c); t->dtype = (int)next(&c); t->rank = (int)next(&c);
        if (t->rank < 1 || t->rank > 5) { c.bad = 1; break; }
        for (int r = 0; r < t->rank; r++) t->dims[r] = next_prog(&c);
        for (int r = 0; r < t->rank - 1; r++) t->strides[r] = next_prog(&c);
        for (int r = 0; r < t->rank; r++) t->box[r] = (uint32_t)next(&c);
        for (int r = 0; r < t->rank; r++) t->estr[r] = (uint32_t)next(&c);
        t->interleave = (int)next(&c); t->swizzle = (int)next(&c); t->l2 = (int)next(&c); t->oob = (int)next(&c);
    }
    v->nkern = (int)next(&c);
    if (v->nkern < 1 || v->nkern > 16) c.bad = 1;
    v->kern = PyMem_Calloc(v->nkern > 0 ? v->nkern : 1, sizeof(Kernel));
    for (int i = 0; i < v->nkern && !c.bad; i++) {
        Kernel *k = &v->kern[i];
        k->name = (int)next(&c);
        for (int j = 0; j < 3; j++) k->grid[j] = next_prog(&c);
        for (int j = 0; j < 3; j++) k->block[j] = (unsigned)next(&c);
        k->smem = next_prog(&c);
        for (int j = 0; j < 3; j++) k->cluster[j] = (unsigned)next(&c);
        k->coop = (int)next(&c); k->pdl = (int)next(&c);
        k->nparams = (int)next(&c);
        if (k->nparams < 0 || k->nparams > MAXP) { c.bad = 1; break; }
        for (int j = 0; j < k->nparams; j++) {
            k->params[j].kind = (int)next(&c); k->params[j].index = (int)next(&c); k->params[j].type = (int)next(&c);
        }
    }
    if (c.bad || c.i != c.n || !v->cons || !v->tma || !v->kern) {
        PyErr_Format(PyExc_ValueError, "variant %U: malformed plan words", key);
        goto fail;
    }
    return (PyObject *)v;
fail:
    Py_DECREF(v);
    return NULL;
}

static PyObject *Variant_key(PyObject *self, void *closure) { Py_INCREF(((Variant *)self)->key); return ((Variant *)self)->key; }
static PyGetSetDef Variant_getset[] = {
    {"key", Variant_key, NULL, "the variant's key", NULL},
    {NULL}};
static PyType_Slot Variant_slots[] = {
    {Py_tp_new, Variant_new}, {Py_tp_dealloc, Variant_dealloc}, {Py_tp_getset, Variant_getset},
    {Py_tp_doc, "A compiled variant: its launch plan and, once loaded, its module per device."}, {0, NULL}};
static PyType_Spec Variant_spec = {"tkreg._launcher.Variant", sizeof(Variant), 0, Py_TPFLAGS_DEFAULT, Variant_slots};

static PyObject *vstr(Variant *v, int i) { return PyTuple_GetItem(v->strings, i); }

/* Load the cubin (once per process) and its module (once per device); ctx must be current. */
static int variant_load(Variant *v, int dev, PyObject *opname) {
    if (v->mod[dev]) return 0;
    if (!v->cubin) {
        PyObject *b = PyObject_CallObject(v->loader, NULL);
        if (!b) return -1;
        if (!PyBytes_Check(b)) { Py_DECREF(b); PyErr_SetString(PyExc_TypeError, "cubin loader must return bytes"); return -1; }
        v->cubin = b;
    }
    CUmodule m;
    CUresult r = p_cuModuleLoadData(&m, PyBytes_AsString(v->cubin));
    if (r) return cu_fail(r, opname, v->key, "cuModuleLoadData");
    CUfunction *f = PyMem_Calloc(v->nkern, sizeof(CUfunction));
    int *ss = PyMem_Calloc(v->nkern, sizeof(int));
    if (!f || !ss) { PyMem_Free(f); PyMem_Free(ss); PyErr_NoMemory(); return -1; }
    for (int k = 0; k < v->nkern; k++) {
        PyObject *name = vstr(v, v->kern[k].name);
        const char *cname = name ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
        if (!cname) { PyMem_Free(f); PyMem_Free(ss); return -1; }
        if ((r = p_cuModuleGetFunction(&f[k], m, cname))) { PyMem_Free(f); PyMem_Free(ss); return cu_fail(r, opname, v->key, "cuModuleGetFunction"); }
    }
    v->funcs[dev] = f;
    v->smem_set[dev] = ss;
    v->mod[dev] = m;
    return 0;
}

/* ---- Op ----------------------------------------------------------------------------------- */
/* like: an input whose shape and dtype an allocated output shares (empty_like); newsrc: one
 * whose dtype it shares (new_empty); -1 when none. */
typedef struct { int role, optional, rank, dmode, darg, name, like, newsrc; Prog dims[MAXRANK]; } TSig;

typedef struct {
    PyObject_HEAD
    PyObject *name, *strings, *resolve, *fallback, *grad_hook;
    int nt, ns, nsym, nout;
    TSig t[MAXT];
    int stype[MAXT], sname[MAXT];
    PyObject *dev_table[MAXDEV + 1]; /* slot 0: CPU; tuple of Variants or Py_None (fallback) */
    int64_t *words;
    /* last decision, reused when device, dtypes and symbols repeat */
    int memo_dev, memo_idx, memo_dt[MAXT];
    int64_t memo_syms[MAXSYM];
} Op;

static void Op_dealloc(PyObject *self) {
    Op *o = (Op *)self;
    Py_XDECREF(o->name); Py_XDECREF(o->strings); Py_XDECREF(o->resolve); Py_XDECREF(o->fallback); Py_XDECREF(o->grad_hook);
    for (int i = 0; i <= MAXDEV; i++) Py_XDECREF(o->dev_table[i]);
    PyMem_Free(o->words);
    PyTypeObject *tp = Py_TYPE(self);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

/* Op(name, words: bytes, strings: tuple, resolve: callable(dev) -> tuple[Variant] | None,
 *    grad_hook: callable(args) -> result, called instead when autograd must see the call,
 *    fallback: callable(args, miss) -> result: runs the reference, or raises NoKernelError(miss)) */
static PyObject *Op_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *name, *buf, *strings, *resolve, *fallback, *grad_hook;
    if (!PyArg_ParseTuple(args, "UOO!OOO:Op", &name, &buf, &PyTuple_Type, &strings, &resolve, &fallback, &grad_hook)) return NULL;
    Op *o = (Op *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0);
    if (!o) return NULL;
    Py_INCREF(name); o->name = name;
    Py_INCREF(strings); o->strings = strings;
    Py_INCREF(resolve); o->resolve = resolve;
    Py_INCREF(fallback); o->fallback = fallback;
    Py_INCREF(grad_hook); o->grad_hook = grad_hook;
    o->memo_idx = -1;
    Py_ssize_t n;
    if (!(o->words = copy_words(buf, &n))) goto fail;
    Cur c = {o->words, n, 0, 0};
    o->nt = (int)next(&c); o->ns = (int)next(&c); o->nsym = (int)next(&c);
    if (o->nt < 0 || o->nt > MAXT || o->ns < 0 || o->ns > MAXT || o->nsym < 0 || o->nsym > MAXSYM) c.bad = 1;
    for (int i = 0; i < o->nt && !c.bad; i++) {
        TSig *t = &o->t[i];
        t->role = (int)next(&c); t->optional = (int)next(&c); t->rank = (int)next(&c);
        t->dmode = (int)next(&c); t->darg = (int)next(&c); t->name = (int)next(&c);
        t->like = (int)next(&c); t->newsrc = (int)next(&c);
        if (t->like >= MAXT || t->newsrc >= MAXT) c.bad = 1;
        if (t->rank < 0 || t->rank > MAXRANK) { c.bad = 1; break; }
        for (int r = 0; r < t->rank; r++) t->dims[r] = next_prog(&c);
        if (t->role == ROLE_OUT) o->nout++;
    }
    for (int i = 0; i < o->ns && !c.bad; i++) { o->stype[i] = (int)next(&c); o->sname[i] = (int)next(&c); }
    if (c.bad || c.i != c.n) { PyErr_Format(PyExc_ValueError, "op %U: malformed signature words", name); goto fail; }
    return (PyObject *)o;
fail:
    Py_DECREF(o);
    return NULL;
}

static PyObject *ostr(Op *o, int i) { return PyTuple_GetItem(o->strings, i); }

typedef struct {
    PyObject *obj; /* borrowed; NULL when None */
    int dtype, rank, dev, contiguous;
    int64_t shape[MAXRANK];
    uint64_t ptr;
} TArg;

typedef struct {
    TArg t[MAXT];
    int64_t syms[MAXSYM];
    char bound[MAXSYM];
    int dev;
} Call;

static const char *dtype_name(int code) {
    static const char *n[NDTYPES] = {"float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int32",
                                     "int64", "int8", "uint8", "bool", "float64", "float8_e8m0fnu"};
    return code >= 0 && code < NDTYPES ? n[code] : "?";
}

static void fmt_shape(char *buf, size_t n, const int64_t *s, int rank) {
    size_t k = snprintf(buf, n, "(");
    for (int i = 0; i < rank && k < n; i++) k += snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)s[i]);
    if (k < n) snprintf(buf + k, n - k, rank == 1 ? ",)" : ")");
}

static int read_int_tuple(PyObject *tup, int64_t *out, int max, int *n) {
    Py_ssize_t len = PyTuple_Size(tup);
    if (len < 0) return -1;
    if (len > max) { PyErr_Format(PyExc_ValueError, "rank %zd exceeds the launcher's limit %d", len, max); return -1; }
    for (Py_ssize_t i = 0; i < len; i++) {
        out[i] = PyLong_AsLongLong(PyTuple_GetItem(tup, i));
        if (out[i] == -1 && PyErr_Occurred()) return -1;
    }
    *n = (int)len;
    return 0;
}

/* Read one tensor's facts through its Python attributes (no libtorch). */
/* Fill `a` through the shim; 0 when this tensor must take the attribute path. */
static int shim_read(PyObject *x, TArg *a) {
    if (!g_shim.ok || (Py_TYPE(x) != (PyTypeObject *)g_shim.types[0] && Py_TYPE(x) != (PyTypeObject *)g_shim.types[1]))
        return 0;
    void *impl;
    if (g_shim.direct) {
        impl = *(void **)((char *)x + sizeof(PyObject));
    } else {
        PyObject *cd = PyObject_GetAttr(x, s_cdata);
        if (!cd) { PyErr_Clear(); return 0; }
        impl = PyLong_AsVoidPtr(cd);
        Py_DECREF(cd);
    }
    if (!impl) { PyErr_Clear(); return 0; }
    void *h = &impl; /* an at::Tensor is one TensorImpl* */
    int64_t dim, *sz, *st;
    int32_t dt, devt, devi;
    void *ptr;
    if (g_shim.dim(h, &dim) || dim > MAXRANK || g_shim.device_type(h, &devt) || (devt != g_shim.cpu && devt != g_shim.cuda) ||
        g_shim.sizes(h, &sz) || g_shim.strides(h, &st) || g_shim.dtype(h, &dt) || g_shim.device_index(h, &devi) ||
        g_shim.data_ptr(h, &ptr))
        return 0;
    a->dtype = -1;
    for (int d = 0; d < NDTYPES; d++) if (g_shim.scalar_type[d] == dt) { a->dtype = d; break; }
    if (a->dtype < 0) return 0; /* the attribute path reports it */
    a->rank = (int)dim;
    int64_t numel = 1, expect = 1;
    for (int r = 0; r < a->rank; r++) { a->shape[r] = sz[r]; numel *= sz[r]; }
    a->contiguous = 1; /* torch's rule: empty tensors and size-1 dims never break contiguity */
    for (int r = a->rank - 1; r >= 0 && numel > 0; r--) {
        if (sz[r] != 1 && st[r] != expect) { a->contiguous = 0; break; }
        expect *= sz[r];
    }
    a->ptr = (uint64_t)(uintptr_t)ptr;
    a->dev = devt == g_shim.cuda ? devi : -1;
    return 1;
}

static int read_tensor(Op *o, int i, PyObject *x, TArg *a) {
    if (shim_read(x, a)) return 0;
    PyObject *argname = ostr(o, o->t[i].name);
    PyObject *dt = PyObject_GetAttr(x, s_dtype);
    if (!dt) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%U: argument `%U` must be a torch.Tensor, got %R", o->name, argname,
                     (PyObject *)Py_TYPE(x));
        return -1;
    }
    a->dtype = -1;
    for (int d = 0; d < NDTYPES; d++) if (g_dtypes[d] == dt) { a->dtype = d; break; }
    if (a->dtype < 0) {
        PyErr_Format(PyExc_TypeError, "%U: argument `%U` has dtype %R, which no tkreg kernel takes", o->name, argname, dt);
        Py_DECREF(dt);
        return -1;
    }
    Py_DECREF(dt);
    PyObject *shape = PyObject_CallFunctionObjArgs(m_size, x, NULL);
    if (!shape) return -1;
    int r = read_int_tuple(shape, a->shape, MAXRANK, &a->rank);
    Py_DECREF(shape);
    if (r) return -1;
    PyObject *cont = PyObject_CallFunctionObjArgs(m_is_contiguous, x, NULL);
    if (!cont) return -1;
    a->contiguous = cont == Py_True;
    Py_DECREF(cont);
    PyObject *p = PyObject_CallFunctionObjArgs(m_data_ptr, x, NULL);
    if (!p) return -1;
    a->ptr = PyLong_AsUnsignedLongLong(p);
    Py_DECREF(p);
    if (PyErr_Occurred()) return -1;
    PyObject *dv = PyObject_CallFunctionObjArgs(m_get_device, x, NULL);
    if (!dv) return -1;
    a->dev = (int)PyLong_AsLong(dv);
    Py_DECREF(dv);
    return PyErr_Occurred() ? -1 : 0;
}

static int expected_dtype(Op *o, Call *c, int i) {
    TSig *t = &o->t[i];
    if (t->dmode == DT_FIXED) return t->darg;
    if (t->dmode == DT_SAME) return c->t[t->darg].obj ? c->t[t->darg].dtype : expected_dtype(o, c, t->darg);
    return -1;
}

/* Everything that can be checked without the GPU, in the order a user would want to hear it. */
static int validate(Op *o, PyObject *args, Call *c) {
    Py_ssize_t nargs = PyTuple_Size(args);
    if (nargs != o->nt + o->ns) {
        PyErr_Format(PyExc_TypeError, "%U takes %d arguments (tensors then scalars), got %zd", o->name, o->nt + o->ns, nargs);
        return -1;
    }
    c->dev = -2;
    memset(c->bound, 0, sizeof c->bound);
    for (int i = 0; i < o->nt; i++) {
        PyObject *x = PyTuple_GetItem(args, i);
        TArg *a = &c->t[i];
        a->obj = NULL;
        if (x == Py_None) {
            if (o->t[i].role == ROLE_IN || o->t[i].role == ROLE_INPLACE) {
                if (!o->t[i].optional) {
                    PyErr_Format(PyExc_TypeError, "%U: argument `%U` is required, got None", o->name, ostr(o, o->t[i].name));
                    return -1;
                }
            }
            continue;
        }
        if (read_tensor(o, i, x, a)) return -1;
        a->obj = x;
    }
    /* dtypes */
    for (int i = 0; i < o->nt; i++) {
        TArg *a = &c->t[i];
        if (!a->obj) continue;
        TSig *t = &o->t[i];
        int ok = t->dmode == DT_SET ? (a->dtype < 63 && ((t->darg >> a->dtype) & 1)) : a->dtype == expected_dtype(o, c, i);
        if (!ok) {
            char want[256] = "";
            if (t->dmode == DT_SET) {
                size_t k = 0;
                for (int d = 0; d < NDTYPES; d++)
                    if ((t->darg >> d) & 1) k += snprintf(want + k, sizeof want - k, "%storch.%s", k ? " or " : "", dtype_name(d));
            } else {
                snprintf(want, sizeof want, "torch.%s%s%s", dtype_name(expected_dtype(o, c, i)),
                         t->dmode == DT_SAME ? ", the dtype of " : "", "");
            }
            if (t->dmode == DT_SAME)
                PyErr_Format(PyExc_TypeError, "%U: argument `%U` has dtype torch.%s; expected %s`%U`", o->name,
                             ostr(o, t->name), dtype_name(a->dtype), want, ostr(o, o->t[t->darg].name));
            else
                PyErr_Format(PyExc_TypeError, "%U: argument `%U` has dtype torch.%s; expected %s", o->name,
                             ostr(o, t->name), dtype_name(a->dtype), want);
            return -1;
        }
    }
    /* ranks, then bind symbols from bare-symbol dims of inputs */
    for (int i = 0; i < o->nt; i++) {
        TArg *a = &c->t[i];
        if (a->obj && a->rank != o->t[i].rank) {
            char got[160];
            fmt_shape(got, sizeof got, a->shape, a->rank);
            PyErr_Format(PyExc_ValueError, "%U: argument `%U` must have %d dims, got shape %s", o->name,
                         ostr(o, o->t[i].name), o->t[i].rank, got);
            return -1;
        }
    }
    for (int i = 0; i < o->nt; i++) {
        TArg *a = &c->t[i];
        TSig *t = &o->t[i];
        if (!a->obj || t->role == ROLE_OUT || t->role == ROLE_SCRATCH) continue;
        for (int r = 0; r < t->rank; r++) {
            Prog p = t->dims[r];
            if (p.n == 2 && p.code[0] == OP_SYM && !c->bound[p.code[1]]) {
                c->syms[p.code[1]] = a->shape[r];
                c->bound[p.code[1]] = 1;
            }
        }
    }
    for (int s = 0; s < o->nsym; s++)
        if (!c->bound[s]) {
            PyErr_Format(PyExc_ValueError, "%U: cannot infer every size: an input that defines one is None", o->name);
            return -1;
        }
    for (int i = 0; i < o->nt; i++) {
        TArg *a = &c->t[i];
        TSig *t = &o->t[i];
        if (!a->obj) continue;
        for (int r = 0; r < t->rank; r++) {
            int64_t want;
            if (prog_eval(t->dims[r], c->syms, c->bound, &want)) {
                PyErr_Format(PyExc_ValueError, "%U: cannot evaluate the size of `%U` dim %d", o->name, ostr(o, t->name), r);
                return -1;
            }
            if (a->shape[r] != want) {
                char got[160], exp[160];
                int64_t e[MAXRANK];
                for (int q = 0; q < t->rank; q++) if (prog_eval(t->dims[q], c->syms, c->bound, &e[q])) e[q] = -1;
                fmt_shape(got, sizeof got, a->shape, a->rank);
                fmt_shape(exp, sizeof exp, e, t->rank);
                PyErr_Format(PyExc_ValueError, "%U: argument `%U` has shape %s; expected %s from the other arguments (dim %d differs)",
                             o->name, ostr(o, t->name), got, exp, r);
                return -1;
            }
        }
    }
    /* layout: row-major contiguous (torch's is_contiguous()), 16-byte aligned */
    for (int i = 0; i < o->nt; i++) {
        TArg *a = &c->t[i];
        if (!a->obj) continue;
        int64_t numel = 1;
        for (int r = 0; r < a->rank; r++) numel *= a->shape[r];
        if (!a->contiguous) {
            char s[160] = "?";
            int64_t st[MAXRANK];
            int n;
            PyObject *t = PyObject_CallFunctionObjArgs(m_stride, a->obj, NULL);
            if (t && !read_int_tuple(t, st, MAXRANK, &n)) fmt_shape(s, sizeof s, st, n);
            Py_XDECREF(t);
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%U: argument `%U` must be contiguous (row-major), got strides %s; call .contiguous() first",
                         o->name, ostr(o, o->t[i].name), s);
            return -1;
        }
        if (numel > 0 && a->ptr % 16) {
            PyErr_Format(PyExc_ValueError, "%U: argument `%U` data pointer is not 16-byte aligned (offset %d); "
                         "kernels load 16 bytes at a time: pass a tensor that starts at an aligned address (e.g. .clone())",
                         o->name, ostr(o, o->t[i].name), (int)(a->ptr % 16));
            return -1;
        }
        if (numel > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "%U: argument `%U` has %lld elements; the kernels index with int32 (max %d)",
                         o->name, ostr(o, o->t[i].name), (long long)numel, INT32_MAX);
            return -1;
        }
    }
    for (int s = 0; s < o->nsym; s++)
        if (c->syms[s] > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "%U: a size is %lld, over the int32 range the kernels take", o->name, (long long)c->syms[s]);
            return -1;
        }
    /* one CUDA device (checked last so CPU tensors exercise every check above) */
    for (int i = 0; i < o->nt; i++) {
        TArg *a = &c->t[i];
        if (!a->obj) continue;
        if (c->dev == -2) c->dev = a->dev;
        else if (a->dev != c->dev) {
            char d1[32], d2[32];
            snprintf(d1, sizeof d1, a->dev < 0 ? "cpu" : "cuda:%d", a->dev);
            snprintf(d2, sizeof d2, c->dev < 0 ? "cpu" : "cuda:%d", c->dev);
            PyErr_Format(PyExc_ValueError, "%U: argument `%U` is on %s but earlier arguments are on %s; all must share one CUDA device",
                         o->name, ostr(o, o->t[i].name), d1, d2);
            return -1;
        }
    }
    if (c->dev >= MAXDEV) { PyErr_Format(PyExc_ValueError, "%U: device index %d over the launcher's limit", o->name, c->dev); return -1; }
    return 0;
}

/* 1 when grad mode is on and an input requires grad: autograd must record this call, which the
 * fast path cannot do, so Python's hook routes it (or refuses it).  -1 on error. */
static int needs_autograd(Op *o, Call *c) {
    int on;
    if (g_shim.ok && g_shim.grad_enabled) {
        on = g_shim.grad_enabled();
    } else {
        PyObject *r = g_is_grad_enabled ? PyObject_CallObject(g_is_grad_enabled, NULL) : NULL;
        if (!r) { PyErr_Clear(); return 0; }
        on = r == Py_True;
        Py_DECREF(r);
    }
    if (!on) return 0;
    for (int i = 0; i < o->nt; i++) {
        if (!c->t[i].obj || (o->t[i].role != ROLE_IN && o->t[i].role != ROLE_INPLACE)) continue;
        PyObject *r = PyObject_GetAttr(c->t[i].obj, s_requires_grad);
        if (!r) return -1;
        int yes = r == Py_True;
        Py_DECREF(r);
        if (yes) return 1;
    }
    return 0;
}

/* The variants for the call's device (cached), or Py_None when the fallback runs.  Borrowed. */
static PyObject *device_table(Op *o, int dev) {
    int slot = dev < 0 ? 0 : dev + 1;
    if (!o->dev_table[slot]) {
        PyObject *t = PyObject_CallFunction(o->resolve, "i", dev);
        if (!t) return NULL;
        if (t == Py_None) { Py_DECREF(t); return Py_None; } /* fallback: asked again next call */
        if (!PyTuple_Check(t)) { Py_DECREF(t); PyErr_SetString(PyExc_TypeError, "resolve must return a tuple or None"); return NULL; }
        o->dev_table[slot] = t;
    }
    return o->dev_table[slot];
}

/* Does variant v accept the call?  On rejection, *why (if given) gets a new str. */
static int accepts(Op *o, Variant *v, Call *c, PyObject **why) {
    for (int i = 0; i < o->nt && i < v->nt; i++) {
        int d = c->t[i].obj ? c->t[i].dtype : expected_dtype(o, c, i);
        if (v->dtypes[i] >= 0 && d >= 0 && d != v->dtypes[i]) {
            if (why) *why = PyUnicode_FromFormat("`%U` is %s, variant takes %s", ostr(o, o->t[i].name), dtype_name(d), dtype_name(v->dtypes[i]));
            return 0;
        }
    }
    for (int k = 0; k < v->ncons; k++) {
        int64_t r;
        if (prog_eval(v->cons[k].prog, c->syms, c->bound, &r) || !r) {
            if (why) *why = PyUnicode_FromFormat("needs %U", vstr(v, v->cons[k].text));
            return 0;
        }
    }
    if (why) *why = PyUnicode_FromString("accepted");
    return 1;
}

/* The "no variant accepts" message: every candidate and why it was passed over (new ref). */
static PyObject *no_kernel_message(Op *o, PyObject *table, Call *c) {
    PyObject *lines = PyUnicode_FromString("");
    char syms[512] = "";
    for (Py_ssize_t i = 0; i < PyTuple_Size(table) && lines; i++) {
        Variant *v = (Variant *)PyTuple_GetItem(table, i);
        PyObject *why = NULL;
        accepts(o, v, c, &why);
        PyObject *line = why ? PyUnicode_FromFormat("\n  %U: %U", v->key, why) : NULL;
        Py_XDECREF(why);
        PyObject *joined = line ? PyUnicode_Concat(lines, line) : NULL;
        Py_XDECREF(line);
        Py_DECREF(lines);
        lines = joined;
    }
    if (!lines) return NULL;
    size_t k = 0;
    for (int s = 0; s < o->nsym && k < sizeof syms; s++) k += snprintf(syms + k, sizeof syms - k, "%s%lld", s ? ", " : "", (long long)c->syms[s]);
    PyObject *msg = PyUnicode_FromFormat("%U: no variant accepts these arguments (sizes %s); candidates:%U\n"
                                         "Set TKREG_FALLBACK=reference to run the torch reference instead.", o->name, syms, lines);
    Py_DECREF(lines);
    return msg;
}

static int select_variant(Op *o, PyObject *table, Call *c) {
    int dt[MAXT];
    for (int i = 0; i < o->nt; i++) dt[i] = c->t[i].obj ? c->t[i].dtype : expected_dtype(o, c, i);
    if (o->memo_idx >= 0 && o->memo_dev == c->dev && !memcmp(o->memo_dt, dt, sizeof(int) * o->nt) &&
        !memcmp(o->memo_syms, c->syms, sizeof(int64_t) * o->nsym))
        return o->memo_idx;
    for (Py_ssize_t i = 0; i < PyTuple_Size(table); i++)
        if (accepts(o, (Variant *)PyTuple_GetItem(table, i), c, NULL)) {
            o->memo_dev = c->dev; o->memo_idx = (int)i;
            memcpy(o->memo_dt, dt, sizeof(int) * o->nt);
            memcpy(o->memo_syms, c->syms, sizeof(int64_t) * o->nsym);
            return (int)i;
        }
    return -1;
}

/* Outputs the caller did not pass: torch.empty_like / new_empty of an input where the spec
 * allows (the cheapest allocations torch offers), else torch.empty(shape, dtype, device). */
static int allocate(Op *o, Call *c, PyObject **owned) {
    for (int i = 0; i < o->nt; i++) {
        if (c->t[i].obj || o->t[i].role == ROLE_IN || o->t[i].role == ROLE_INPLACE) continue;
        TSig *t = &o->t[i];
        int dt = expected_dtype(o, c, i);
        if (dt < 0) { PyErr_Format(PyExc_TypeError, "%U: cannot tell the dtype of `%U`; pass it", o->name, ostr(o, t->name)); return -1; }
        for (int r = 0; r < t->rank; r++)
            if (prog_eval(t->dims[r], c->syms, c->bound, &c->t[i].shape[r])) { PyErr_SetString(PyExc_ValueError, "bad output shape"); return -1; }
        PyObject *x;
        if (t->like >= 0 && c->t[t->like].obj) {
            x = PyObject_CallFunctionObjArgs(m_empty_like, c->t[t->like].obj, NULL);
        } else {
            PyObject *shape = PyTuple_New(t->rank);
            if (!shape) return -1;
            for (int r = 0; r < t->rank; r++) PyTuple_SetItem(shape, r, PyLong_FromLongLong(c->t[i].shape[r]));
            if (t->newsrc >= 0 && c->t[t->newsrc].obj) {
                x = PyObject_CallFunctionObjArgs(m_new_empty, c->t[t->newsrc].obj, shape, NULL);
            } else {
                PyObject *kw = Py_BuildValue("{sOsi}", "dtype", g_dtypes[dt], "device", c->dev);
                PyObject *a = kw ? PyTuple_Pack(1, shape) : NULL;
                x = a ? PyObject_Call(g_empty, a, kw) : NULL;
                Py_XDECREF(kw); Py_XDECREF(a);
            }
            Py_DECREF(shape);
        }
        if (!x) return -1;
        owned[i] = x;
        PyObject *p = PyObject_CallFunctionObjArgs(m_data_ptr, x, NULL);
        if (!p) return -1;
        c->t[i].ptr = PyLong_AsUnsignedLongLong(p);
        Py_DECREF(p);
        c->t[i].obj = x;
        c->t[i].dtype = dt;
        c->t[i].rank = t->rank;
        c->t[i].dev = c->dev;
    }
    return 0;
}

typedef union { uint64_t u64; int32_t i32; int64_t i64; float f32; double f64; } Slot;

/* bench_op's probe: when > 0, launch() also times this many bare cuLaunchKernel calls of its
 * first kernel with the call's own parameters (the driver cost of exactly this launch). */
static int g_probe_n;
static double g_probe_us;
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }

static int launch(Op *o, Variant *v, Call *c, PyObject *args) {
    CUtensorMap maps[MAXTMA];
    Slot slots[MAXP];
    void *pp[MAXP];
    Slot scal[MAXT];
    for (int s = 0; s < o->ns; s++) {
        PyObject *x = PyTuple_GetItem(args, o->nt + s);
        switch (o->stype[s]) {
        case T_F32: scal[s].f32 = (float)PyFloat_AsDouble(x); break;
        case T_F64: scal[s].f64 = PyFloat_AsDouble(x); break;
        case T_I32: scal[s].i32 = (int32_t)PyLong_AsLong(x); break;
        case T_I64: scal[s].i64 = PyLong_AsLongLong(x); break;
        default: { int b = PyObject_IsTrue(x); if (b < 0) return -1; scal[s].i32 = b; }
        }
        if (PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%U: scalar `%U` must be a number, got %R", o->name, ostr(o, o->sname[s]), x);
            return -1;
        }
    }
    CUstream stream;
    void *sp;
    if (g_shim.ok && g_shim.stream && g_shim.stream(c->dev, &sp) == 0) {
        stream = (CUstream)sp;
    } else {
        PyObject *devnum = PyLong_FromLong(c->dev); /* small ints are cached: no allocation */
        PyObject *stream_obj = devnum ? PyObject_CallFunctionObjArgs(g_get_stream, devnum, NULL) : NULL;
        Py_XDECREF(devnum);
        if (!stream_obj) return -1;
        stream = (CUstream)(uintptr_t)PyLong_AsUnsignedLongLong(stream_obj);
        Py_DECREF(stream_obj);
        if (PyErr_Occurred()) return -1;
    }

    if (cuda_load()) return -1;
    CUcontext prev = NULL;
    if (ctx_enter(c->dev, &prev, o->name)) return -1;
    int rc = -1;
    if (variant_load(v, c->dev, o->name)) goto out;
    for (int k = 0; k < v->nkern; k++) {
        Kernel *K = &v->kern[k];
        int64_t g[3], smem;
        for (int j = 0; j < 3; j++)
            if (prog_eval(K->grid[j], c->syms, c->bound, &g[j])) { PyErr_Format(PyExc_ValueError, "%U[%U]: bad grid program", o->name, v->key); goto out; }
        if (prog_eval(K->smem, c->syms, c->bound, &smem)) { PyErr_Format(PyExc_ValueError, "%U[%U]: bad smem program", o->name, v->key); goto out; }
        if (g[0] <= 0 || g[1] <= 0 || g[2] <= 0) continue; /* empty problem (e.g. M = 0): nothing to launch */
        for (int j = 0; j < K->nparams; j++) {
            Param *P = &K->params[j];
            switch (P->kind) {
            case P_PTR: slots[j].u64 = c->t[P->index].obj ? c->t[P->index].ptr : 0; pp[j] = &slots[j]; break;
            case P_SYM:
                if (P->type == T_I64) slots[j].i64 = c->syms[P->index]; else slots[j].i32 = (int32_t)c->syms[P->index];
                pp[j] = &slots[j]; break;
            case P_SCALAR: pp[j] = &scal[P->index]; break;
            case P_TMA: {
                Tma *t = &v->tma[P->index];
                TArg *a = &c->t[t->tensor];
                uint64_t dims[MAXRANK], strides[MAXRANK];
                for (int r = 0; r < t->rank; r++) {
                    int64_t x;
                    if (prog_eval(t->dims[r], c->syms, c->bound, &x)) { PyErr_Format(PyExc_ValueError, "%U[%U]: bad TMA program", o->name, v->key); goto out; }
                    if (x <= 0) {
                        PyErr_Format(PyExc_ValueError, "%U: argument `%U` has a zero-sized dimension; this kernel reads it "
                                     "with TMA, which needs every size > 0", o->name, ostr(o, o->t[t->tensor].name));
                        goto out;
                    }
                    dims[r] = (uint64_t)x;
                }
                for (int r = 0; r < t->rank - 1; r++) {
                    int64_t x;
                    if (prog_eval(t->strides[r], c->syms, c->bound, &x)) { PyErr_Format(PyExc_ValueError, "%U[%U]: bad TMA program", o->name, v->key); goto out; }
                    if (x % 16) {
                        PyErr_Format(PyExc_ValueError, "%U: argument `%U` has a row stride of %lld bytes; TMA needs a multiple "
                                     "of 16 (pad the last dim to a multiple of %d elements)", o->name, ostr(o, o->t[t->tensor].name),
                                     (long long)x, 16 / ELEM_SIZE[a->dtype]);
                        goto out;
                    }
                    strides[r] = (uint64_t)x;
                }
                CUresult r = p_cuTensorMapEncodeTiled(&maps[P->index], t->dtype, t->rank, (void *)(uintptr_t)a->ptr, dims, strides,
                                                      t->box, t->estr, t->interleave, t->swizzle, t->l2, t->oob);
                if (r) { cu_fail(r, o->name, v->key, "cuTensorMapEncodeTiled"); goto out; }
                pp[j] = &maps[P->index];
                break;
            }
            }
        }
        CUfunction f = v->funcs[c->dev][k];
        if (smem > 48 * 1024 && smem > v->smem_set[c->dev][k]) {
            CUresult r = p_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
            if (r) { cu_fail(r, o->name, v->key, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"); goto out; }
            v->smem_set[c->dev][k] = (int)smem;
        }
        CUlaunchAttribute attrs[3];
        unsigned na = 0;
        if (K->cluster[0] * K->cluster[1] * K->cluster[2] > 1) {
            attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[na].value.clusterDim.x = K->cluster[0]; attrs[na].value.clusterDim.y = K->cluster[1]; attrs[na].value.clusterDim.z = K->cluster[2];
            na++;
        }
        if (K->coop) { attrs[na].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE; attrs[na].value.cooperative = 1; na++; }
        if (K->pdl) { attrs[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; attrs[na].value.programmaticStreamSerializationAllowed = 1; na++; }
        CUresult r;
        if (na) {
            CUlaunchConfig cfg = {(unsigned)g[0], (unsigned)g[1], (unsigned)g[2], K->block[0], K->block[1], K->block[2],
                                  (unsigned)smem, stream, attrs, na};
            r = p_cuLaunchKernelEx(&cfg, f, pp, NULL);
        } else { /* the common case: no cluster / cooperative / PDL attribute */
            if (g_probe_n > 0 && k == 0) {
                double t0 = now_us();
                for (int i = 0; i < g_probe_n; i++)
                    p_cuLaunchKernel(f, (unsigned)g[0], (unsigned)g[1], (unsigned)g[2], K->block[0], K->block[1], K->block[2],
                                     (unsigned)smem, stream, pp, NULL);
                g_probe_us = (now_us() - t0) / g_probe_n;
                g_probe_n = 0;
            }
            r = p_cuLaunchKernel(f, (unsigned)g[0], (unsigned)g[1], (unsigned)g[2], K->block[0], K->block[1], K->block[2],
                                 (unsigned)smem, stream, pp, NULL);
        }
        if (r) { cu_fail(r, o->name, v->key, na ? "cuLaunchKernelEx" : "cuLaunchKernel"); goto out; }
    }
    rc = 0;
out:
    ctx_exit(c->dev, prev);
    return rc;
}

static PyObject *Op_call(PyObject *self, PyObject *args, PyObject *kw) {
    Op *o = (Op *)self;
    if (kw && PyDict_Size(kw)) { PyErr_Format(PyExc_TypeError, "%U: the launcher takes positional arguments only", o->name); return NULL; }
    Call c;
    if (validate(o, args, &c)) return NULL;
    int g = needs_autograd(o, &c);
    if (g) return g < 0 ? NULL : PyObject_CallFunctionObjArgs(o->grad_hook, args, NULL);
    PyObject *table = device_table(o, c.dev);
    if (!table) return NULL;
    if (table == Py_None) return PyObject_CallFunctionObjArgs(o->fallback, args, Py_None, NULL);
    int idx = select_variant(o, table, &c);
    if (idx < 0) { /* Python raises NoKernelError with this message, or runs the reference */
        PyObject *msg = no_kernel_message(o, table, &c);
        PyObject *r = msg ? PyObject_CallFunctionObjArgs(o->fallback, args, msg, NULL) : NULL;
        Py_XDECREF(msg);
        return r;
    }
    PyObject *owned[MAXT] = {0};
    PyObject *result = NULL;
    if (allocate(o, &c, owned) == 0 && launch(o, (Variant *)PyTuple_GetItem(table, idx), &c, args) == 0) {
        if (o->nout == 0) { result = Py_None; Py_INCREF(result); }
        else if (o->nout == 1) {
            for (int i = 0; i < o->nt; i++) if (o->t[i].role == ROLE_OUT) { result = c.t[i].obj; Py_INCREF(result); }
        } else {
            result = PyTuple_New(o->nout);
            for (int i = 0, k = 0; i < o->nt && result; i++)
                if (o->t[i].role == ROLE_OUT) { Py_INCREF(c.t[i].obj); PyTuple_SetItem(result, k++, c.t[i].obj); }
        }
    }
    for (int i = 0; i < o->nt; i++) Py_XDECREF(owned[i]);
    return result;
}

/* explain(args, table) -> [(key, accepted, reason)] for the given variants (no launch). */
static PyObject *Op_explain(PyObject *self, PyObject *a) {
    Op *o = (Op *)self;
    PyObject *args, *table;
    if (!PyArg_ParseTuple(a, "O!O!:explain", &PyTuple_Type, &args, &PyTuple_Type, &table)) return NULL;
    Call c;
    if (validate(o, args, &c)) return NULL;
    PyObject *out = PyList_New(0);
    int chosen = 0;
    for (Py_ssize_t i = 0; i < PyTuple_Size(table) && out; i++) {
        Variant *v = (Variant *)PyTuple_GetItem(table, i);
        PyObject *why = NULL;
        int ok = accepts(o, v, &c, &why);
        if (ok && chosen) { Py_DECREF(why); why = PyUnicode_FromString("accepted, but a higher-priority variant was chosen"); }
        PyObject *row = why ? Py_BuildValue("(OOO)", v->key, (ok && !chosen) ? Py_True : Py_False, why) : NULL;
        chosen |= ok;
        Py_XDECREF(why);
        if (!row || PyList_Append(out, row)) { Py_XDECREF(row); Py_CLEAR(out); break; }
        Py_DECREF(row);
    }
    return out;
}

/* device of a call's tensors, after validation (for Python's explain). */
static PyObject *Op_device(PyObject *self, PyObject *args) {
    Call c;
    if (validate((Op *)self, args, &c)) return NULL;
    return PyLong_FromLong(c.dev);
}

static PyObject *Op_name(PyObject *self, void *closure) { Py_INCREF(((Op *)self)->name); return ((Op *)self)->name; }
static PyMethodDef Op_methods[] = {
    {"explain", Op_explain, METH_VARARGS, "explain(args, variants) -> [(key, chosen, reason)]"},
    {"device_of", Op_device, METH_VARARGS, "validate a call and return its device index"},
    {NULL}};
static PyGetSetDef Op_getset[] = {{"name", Op_name, NULL, "qualified op name", NULL}, {NULL}};
static PyType_Slot Op_slots[] = {
    {Py_tp_new, Op_new}, {Py_tp_dealloc, Op_dealloc}, {Py_tp_call, Op_call}, {Py_tp_methods, Op_methods},
    {Py_tp_getset, Op_getset}, {Py_tp_doc, "One op: validation, variant selection and launch."}, {0, NULL}};
static PyType_Spec Op_spec = {"tkreg._launcher.Op", sizeof(Op), 0, Py_TPFLAGS_DEFAULT, Op_slots};

/* ---- module functions --------------------------------------------------------------------- */
static PyObject *m_init(PyObject *m, PyObject *args) {
    PyObject *dtypes, *empty, *get_stream, *launcherr, *meth;
    if (!PyArg_ParseTuple(args, "O!OOOO!:init", &PyTuple_Type, &dtypes, &empty, &get_stream, &launcherr, &PyTuple_Type, &meth)) return NULL;
    if (PyTuple_Size(meth) != 8) { PyErr_SetString(PyExc_ValueError, "init: expected 8 torch callables"); return NULL; }
    if (PyTuple_Size(dtypes) != NDTYPES) { PyErr_Format(PyExc_ValueError, "init: expected %d dtypes", NDTYPES); return NULL; }
#define SET(var, val) do { PyObject *old_ = (var); Py_INCREF(val); (var) = (val); Py_XDECREF(old_); } while (0)
    for (int i = 0; i < NDTYPES; i++) SET(g_dtypes[i], PyTuple_GetItem(dtypes, i));
    SET(g_empty, empty);
    SET(g_get_stream, get_stream);
    SET(g_LaunchError, launcherr);
    SET(m_data_ptr, PyTuple_GetItem(meth, 0));
    SET(m_size, PyTuple_GetItem(meth, 1));
    SET(m_is_contiguous, PyTuple_GetItem(meth, 2));
    SET(m_get_device, PyTuple_GetItem(meth, 3));
    SET(m_stride, PyTuple_GetItem(meth, 4));
    SET(m_empty_like, PyTuple_GetItem(meth, 5));
    SET(m_new_empty, PyTuple_GetItem(meth, 6));
    SET(g_is_grad_enabled, PyTuple_GetItem(meth, 7));
#undef SET
    Py_RETURN_NONE;
}

/* enable_shim(libs: tuple[str], dtype_names: tuple[str], types: (Tensor, Parameter)) -> bool */
static PyObject *m_enable_shim(PyObject *m, PyObject *args) {
    PyObject *libs, *names, *types;
    if (!PyArg_ParseTuple(args, "O!O!O!:enable_shim", &PyTuple_Type, &libs, &PyTuple_Type, &names, &PyTuple_Type, &types)) return NULL;
    if (PyTuple_Size(names) != NDTYPES || PyTuple_Size(types) != 2) { PyErr_SetString(PyExc_ValueError, "enable_shim: bad arguments"); return NULL; }
    g_shim.ok = 0;
    void *hs[8] = {0};
    int nh = 0;
    for (Py_ssize_t i = 0; i < PyTuple_Size(libs) && nh < 8; i++) {
        const char *path = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(libs, i), NULL);
        if (!path) return NULL;
        void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD); /* only what torch already loaded */
        if (h) hs[nh++] = h;
    }
#define FIND(var, name) do { void *f_ = NULL; for (int k = 0; k < nh && !f_; k++) f_ = dlsym(hs[k], name); memcpy(&(var), &f_, sizeof f_); } while (0)
    FIND(g_shim.data_ptr, "aoti_torch_get_data_ptr");
    FIND(g_shim.sizes, "aoti_torch_get_sizes");
    FIND(g_shim.strides, "aoti_torch_get_strides");
    FIND(g_shim.dim, "aoti_torch_get_dim");
    FIND(g_shim.dtype, "aoti_torch_get_dtype");
    FIND(g_shim.device_type, "aoti_torch_get_device_type");
    FIND(g_shim.device_index, "aoti_torch_get_device_index");
    FIND(g_shim.stream, "aoti_torch_get_current_cuda_stream");
    FIND(g_shim.grad_enabled, "aoti_torch_grad_mode_is_enabled");
    int32_t (*code)(void);
    FIND(code, "aoti_torch_device_type_cpu");
    g_shim.cpu = code ? code() : -99;
    FIND(code, "aoti_torch_device_type_cuda");
    g_shim.cuda = code ? code() : -99;
    for (int d = 0; d < NDTYPES; d++) {
        char sym[96];
        const char *n = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(names, d), NULL);
        if (!n) return NULL;
        snprintf(sym, sizeof sym, "aoti_torch_dtype_%s", n);
        FIND(code, sym);
        g_shim.scalar_type[d] = code ? code() : -99;
    }
#undef FIND
    for (int k = 0; k < 2; k++) {
        PyObject *t = PyTuple_GetItem(types, k), *old = g_shim.types[k];
        Py_INCREF(t);
        g_shim.types[k] = t;
        Py_XDECREF(old);
    }
    g_shim.ok = g_shim.data_ptr && g_shim.sizes && g_shim.strides && g_shim.dim && g_shim.dtype && g_shim.device_type &&
                g_shim.device_index && g_shim.cpu != -99 && g_shim.cuda != -99;
    return PyBool_FromLong(g_shim.ok);
}

static PyObject *m_disable_shim(PyObject *m, PyObject *noargs) { g_shim.ok = g_shim.direct = 0; Py_RETURN_NONE; }

/* enable_direct(probes) -> bool: read the TensorImpl* straight from the object (saves the
 * `_cdata` attribute call, ~60 ns per tensor) when, for every probe, the word after PyObject_HEAD
 * is what `_cdata` says.  Older torch keeps a MaybeOwned<Tensor> there, which fails the check. */
static PyObject *m_enable_direct(PyObject *m, PyObject *probes) {
    g_shim.direct = 0;
    if (!g_shim.ok || !PyTuple_Check(probes) || PyTuple_Size(probes) == 0) Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < PyTuple_Size(probes); i++) {
        PyObject *x = PyTuple_GetItem(probes, i);
        if (Py_TYPE(x) != (PyTypeObject *)g_shim.types[0] && Py_TYPE(x) != (PyTypeObject *)g_shim.types[1]) Py_RETURN_FALSE;
        PyObject *cd = PyObject_GetAttr(x, s_cdata);
        if (!cd) return NULL;
        void *impl = PyLong_AsVoidPtr(cd);
        Py_DECREF(cd);
        if (!impl || *(void **)((char *)x + sizeof(PyObject)) != impl) Py_RETURN_FALSE;
    }
    g_shim.direct = 1;
    Py_RETURN_TRUE;
}

/* shim_probe(t) -> (shape, contiguous, data_ptr, dtype code, device) as the fast path reads them, or None */
static PyObject *m_shim_probe(PyObject *m, PyObject *x) {
    TArg a;
    if (!shim_read(x, &a)) Py_RETURN_NONE;
    PyObject *shape = PyTuple_New(a.rank);
    for (int r = 0; shape && r < a.rank; r++) PyTuple_SetItem(shape, r, PyLong_FromLongLong(a.shape[r]));
    return shape ? Py_BuildValue("(NiKii)", shape, a.contiguous, (unsigned long long)a.ptr, a.dtype, a.dev) : NULL;
}

static PyObject *m_eval(PyObject *m, PyObject *args) {
    PyObject *buf, *syms;
    if (!PyArg_ParseTuple(args, "OO!:eval_program", &buf, &PyTuple_Type, &syms)) return NULL;
    Py_ssize_t n;
    int64_t *w = copy_words(buf, &n), s[MAXSYM] = {0}, out;
    if (!w) return NULL;
    int ns;
    if (read_int_tuple(syms, s, MAXSYM, &ns)) { PyMem_Free(w); return NULL; }
    Prog p = {(int)n, w};
    int r = prog_eval(p, s, NULL, &out);
    PyMem_Free(w);
    if (r) { PyErr_SetString(PyExc_ZeroDivisionError, "program failed (division by zero or malformed)"); return NULL; }
    return PyLong_FromLongLong(out);
}

/* driver_info() -> (driver_version, [(major, minor)] per device); raises LaunchError without a driver. */
static PyObject *m_driver_info(PyObject *m, PyObject *noargs) {
    if (cuda_load()) return NULL;
    int ver = 0, n = 0;
    p_cuDriverGetVersion(&ver);
    CUresult r = p_cuDeviceGetCount(&n);
    if (r) { PyErr_Format(g_LaunchError, "cuDeviceGetCount failed: %s", cu_str(r)); return NULL; }
    PyObject *l = PyList_New(0);
    for (int i = 0; i < n && l; i++) {
        CUdevice d; int ma = 0, mi = 0;
        p_cuDeviceGet(&d, i);
        p_cuDeviceGetAttribute(&ma, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
        p_cuDeviceGetAttribute(&mi, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
        PyObject *t = Py_BuildValue("(ii)", ma, mi);
        PyList_Append(l, t);
        Py_XDECREF(t);
    }
    return l ? Py_BuildValue("(iN)", ver, l) : NULL;
}

/* The floor every launcher pays: a C loop of cuLaunchKernel on an empty kernel (PTX JIT'ed by
 * the driver once).  bench_driver_launch(device, stream, n) -> microseconds per launch. */
static const char EMPTY_PTX[] = ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry tkreg_empty()\n{\nret;\n}\n";
static PyObject *m_bench(PyObject *m, PyObject *args) {
    int dev, n;
    unsigned long long stream;
    PyObject *clock;
    if (!PyArg_ParseTuple(args, "iKiO:bench_driver_launch", &dev, &stream, &n, &clock)) return NULL;
    if (cuda_load()) return NULL;
    PyObject *name = PyUnicode_FromString("bench");
    CUcontext prev = NULL;
    if (ctx_enter(dev, &prev, name)) { Py_DECREF(name); return NULL; }
    static CUmodule mod[MAXDEV];
    static CUfunction fn[MAXDEV];
    CUresult r = 0;
    if (!mod[dev] && ((r = p_cuModuleLoadData(&mod[dev], EMPTY_PTX)) || (r = p_cuModuleGetFunction(&fn[dev], mod[dev], "tkreg_empty")))) {
        mod[dev] = NULL;
        ctx_exit(dev, prev);
        cu_fail(r, name, name, "loading the empty kernel");
        Py_DECREF(name);
        return NULL;
    }
    PyObject *t0 = PyObject_CallObject(clock, NULL);
    for (int i = 0; i < n && !r; i++) r = p_cuLaunchKernel(fn[dev], 1, 1, 1, 32, 1, 1, 0, (CUstream)(uintptr_t)stream, NULL, NULL);
    PyObject *t1 = PyObject_CallObject(clock, NULL);
    ctx_exit(dev, prev);
    if (r) { cu_fail(r, name, name, "cuLaunchKernel"); Py_DECREF(name); Py_XDECREF(t0); Py_XDECREF(t1); return NULL; }
    Py_DECREF(name);
    if (!t0 || !t1) { Py_XDECREF(t0); Py_XDECREF(t1); return NULL; }
    double us = (PyFloat_AsDouble(t1) - PyFloat_AsDouble(t0)) * 1e6 / n;
    Py_DECREF(t0); Py_DECREF(t1);
    return PyFloat_FromDouble(us);
}

/* bench_op(op, args, n) -> (us per op(*args) from a C loop, us per bare cuLaunchKernel of the
 * same kernel and parameters): splits a call's host cost into launcher and driver.  The second is
 * -1 when the op's first kernel needs cuLaunchKernelEx attributes (cluster, PDL): not probed. */
static PyObject *m_bench_op(PyObject *m, PyObject *a) {
    PyObject *op, *args;
    int n;
    if (!PyArg_ParseTuple(a, "OO!i:bench_op", &op, &PyTuple_Type, &args, &n)) return NULL;
    double t0 = now_us();
    for (int i = 0; i < n; i++) {
        PyObject *r = PyObject_Call(op, args, NULL);
        if (!r) return NULL;
        Py_DECREF(r);
    }
    double full = (now_us() - t0) / n;
    g_probe_n = n; g_probe_us = -1;
    PyObject *r = PyObject_Call(op, args, NULL);
    g_probe_n = 0;
    if (!r) return NULL;
    Py_DECREF(r);
    return Py_BuildValue("(dd)", full, g_probe_us);
}

static PyMethodDef methods[] = {
    {"init", m_init, METH_VARARGS, "init(dtypes, torch.empty, get_raw_stream, LaunchError, (Tensor.data_ptr, .size, .is_contiguous, .get_device, .stride, torch.empty_like, Tensor.new_empty, torch.is_grad_enabled))"},
    {"enable_shim", m_enable_shim, METH_VARARGS, "enable_shim(libtorch paths, dtype names, (Tensor, Parameter)) -> bool"},
    {"disable_shim", m_disable_shim, METH_NOARGS, "use the attribute path only"},
    {"enable_direct", m_enable_direct, METH_O, "enable_direct(probes) -> bool: read TensorImpl* without `_cdata`"},
    {"shim_probe", m_shim_probe, METH_O, "what the fast path reads from a tensor (for the self-check)"},
    {"eval_program", m_eval, METH_VARARGS, "eval_program(words: bytes, symbols: tuple) -> int"},
    {"driver_info", m_driver_info, METH_NOARGS, "driver_info() -> (version, [(major, minor)])"},
    {"bench_driver_launch", m_bench, METH_VARARGS, "bench_driver_launch(device, stream, n, clock) -> us per launch"},
    {"bench_op", m_bench_op, METH_VARARGS, "bench_op(op, args, n) -> (us per call from C, us per bare launch of its kernel)"},
    {NULL}};

static int exec_module(PyObject *m) {
#define INTERN(var, s) if (!(var = PyUnicode_InternFromString(s))) return -1;
    INTERN(s_dtype, "dtype") INTERN(s_cdata, "_cdata") INTERN(s_requires_grad, "requires_grad")
    PyObject *vt = PyType_FromSpec(&Variant_spec);
    if (!vt || PyModule_AddObject(m, "Variant", vt)) return -1;
    PyObject *ot = PyType_FromSpec(&Op_spec);
    if (!ot || PyModule_AddObject(m, "Op", ot)) return -1;
    return 0;
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, exec_module}, {0, NULL}};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_launcher", "tkreg's native launcher (CUDA driver API)", 0, methods, slots};

PyMODINIT_FUNC PyInit__launcher(void) { return PyModuleDef_Init(&moddef); }
