/* tkreg's native launcher: binds a call to the op's signature, validates it, picks a variant and
 * launches its kernels through the CUDA driver API on torch's current stream.  Limited API; links
 * nothing (tkreg/native.py hands it libcuda's entry points).  It copies the plan structs
 * tkreg/assemble.py packed and checked (layouts, codes, limits: tkreg/codes.py, whose header it
 * includes), checks each kernel's parameters against the cubin at module load, and reports a
 * refusal as (code, argument, detail) and a failure as its facts: tkreg/diagnose.py writes the
 * messages.  The GIL is held throughout; it drops only in Python callbacks, after which shared
 * slots are re-checked. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <string.h>

#include "cuda_driver.h"
#include "tkreg_codes.h"

enum { CALL, CHECK }; /* what dispatch does after validation */
_Static_assert(sizeof(LaunchAttr) == sizeof(CUlaunchAttribute), "codes.py's LaunchAttr is cuda.h's CUlaunchAttribute");

#define DECLARE_FN(name, args) CUresult(*name) args;
#define NAME_FN(name, args) #name " "
static struct { TKREG_CU_FUNCS(DECLARE_FN) } cu; /* the driver's entry points, as tkreg.driver_api.driver packs them */
static int g_cuda;                                 /* cu is set */
static CUcontext g_ctx[MAXDEV];
static int64_t g_sm[MAXDEV + 1]; /* multiprocessor count per device, from resolve; slot 0 (CPU): per check */
static long g_modules;           /* cuModuleLoadData calls that succeeded (tests: no double load) */
static PyObject *g_dtypes[NDTYPES], *g_empty, *g_get_stream, *g_LaunchError, *g_PackError;
static PyObject *g_describe, *g_empty_like, *g_new_empty, *g_grad_on, *g_driver, *g_fail, *s_requires_grad;

/* torch's ABI-stable C shim (`aoti_torch_*`, found by tkreg/native.py in the libtorch `import
 * torch` loaded): sizes, strides, dtype, device and data of an exact torch.Tensor / Parameter in
 * nanoseconds.  Anything else goes through Python (`describe`). */
static struct {
    int ok, direct, grad_off; /* the TensorImpl* is the word after PyObject_HEAD; its autograd_meta_ at grad_off (0: unknown); checked in Python */
    struct { /* as tkreg.native packs them; stream and grad_on may be NULL */
        int32_t (*data_ptr)(void *, void **), (*sizes)(void *, int64_t **), (*strides)(void *, int64_t **),
            (*dim)(void *, int64_t *), (*dtype)(void *, int32_t *), (*devtype)(void *, int32_t *), (*devidx)(void *, int32_t *),
            (*stream)(int32_t, void **);
        _Bool (*grad_on)(void);
    } fn;
    int32_t scalar_type[NDTYPES], cpu, cuda;
    PyObject *types[2], *cdata;
} g_shim;

/* ---- driver ------------------------------------------------------------------------------ */
/* A copy of bytes Python packed, `size` long (-1: any); into dst, or allocated when NULL. */
static void *take(PyObject *b, Py_ssize_t size, void *dst) {
    char *s; Py_ssize_t n;
    if (PyBytes_AsStringAndSize(b, &s, &n) < 0) return NULL;
    if (size >= 0 && n != size) return PyErr_Format(g_PackError, "a plan struct of %zd bytes, expected %zd", n, size), NULL;
    if (!dst && !(dst = PyMem_Malloc(n + 1))) return PyErr_NoMemory(), NULL;
    return memcpy(dst, s, n);
}

/* Hand a failure to tkreg.diagnose.failure(kind, op, key, *facts), which raises it; returns -1. */
static int fail(const char *fmt, ...) {
    va_list va;
    va_start(va, fmt);
    PyObject *a = Py_VaBuildValue(fmt, va), *r = a ? PyObject_CallObject(g_fail, a) : NULL;
    va_end(va);
    Py_XDECREF(a), Py_XDECREF(r);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "tkreg: the failure hook returned");
    return -1;
}
#define cu_fail(r, op, key, what) fail("(sOOis)", "cuda", op, (key) ? (key) : Py_None, (int)(r), what)

/* The driver's entry points from tkreg.driver_api.driver, which loads libcuda and runs cuInit. */
static int cuda_load(void) {
    PyObject *b = g_cuda ? NULL : PyObject_CallObject(g_driver, NULL); /* Python: the GIL may drop here */
    if (!g_cuda && b && take(b, sizeof cu, &cu)) g_cuda = 1;
    Py_XDECREF(b);
    return g_cuda ? 0 : -1;
}

/* Make cuda:dev's primary context current; *prev gets what was current, which launch restores. */
static int ctx_enter(int dev, CUcontext *prev, PyObject *op) {
    CUresult r; CUdevice d;
    if (!g_ctx[dev] && ((r = cu.cuDeviceGet(&d, dev)) || (r = cu.cuDevicePrimaryCtxRetain(&g_ctx[dev], d))))
        return cu_fail(r, op, NULL, "opening the device's primary context");
    if ((r = cu.cuCtxGetCurrent(prev))) return cu_fail(r, op, NULL, "cuCtxGetCurrent");
    if (*prev != g_ctx[dev] && (r = cu.cuCtxSetCurrent(g_ctx[dev]))) return cu_fail(r, op, NULL, "cuCtxSetCurrent");
    return 0;
}

/* ---- programs ---------------------------------------------------------------------------- */
static int64_t floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }

/* p over its owner's code: 0, -1 when it reads an unbound slot, -2 on a division by zero (or
 * overflow).  assemble.py checked the program, so the stack and the slots are in range. */
static int prog_eval(const int64_t *base, Prog p, const int64_t *env, const char *bound, int64_t *out) {
    const int64_t *code = base + p.off;
    int64_t st[STACK], a, b, r = 0; int sp = 0;
    for (int i = 0; i < p.n; i++) {
        int64_t op = code[i];
        if (op == OP_CONST || op == OP_SYM) {
            int64_t v = code[++i];
            if (op == OP_SYM && bound && !bound[v]) return -1;
            st[sp++] = op == OP_SYM ? env[v] : v;
            continue;
        }
        if (op == OP_NOT || op == OP_NEG) { st[sp - 1] = op == OP_NOT ? !st[sp - 1] : -st[sp - 1]; continue; }
        if (op == OP_SELECT) { sp -= 2; st[sp - 1] = st[sp - 1] ? st[sp] : st[sp + 1]; continue; }
        a = st[sp - 2], b = st[sp - 1];
        if ((op == OP_FLOORDIV || op == OP_FLOORMOD || op == OP_TDIV || op == OP_TMOD) && (!b || (a == INT64_MIN && b == -1))) return -2;
        switch (op) {
        case OP_ADD: r = a + b; break;    case OP_SUB: r = a - b; break;    case OP_MUL: r = a * b; break;
        case OP_FLOORDIV: r = floordiv(a, b); break;      case OP_FLOORMOD: r = a - floordiv(a, b) * b; break;
        case OP_TDIV: r = a / b; break;   case OP_TMOD: r = a % b; break;
        case OP_MIN: r = a < b ? a : b; break;            case OP_MAX: r = a > b ? a : b; break;
        case OP_EQ: r = a == b; break;    case OP_NE: r = a != b; break;    case OP_LT: r = a < b; break;
        case OP_LE: r = a <= b; break;    case OP_GT: r = a > b; break;     case OP_GE: r = a >= b; break;
        case OP_AND: r = a && b; break;   case OP_OR: r = a || b; break;
        }
        st[--sp - 1] = r;
    }
    *out = st[0];
    return 0;
}

static void tp_free_self(PyObject *self) { PyTypeObject *tp = Py_TYPE(self); ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self); Py_DECREF(tp); }
static PyObject *tp_alloc(PyTypeObject *tp) { return ((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0); }

/* ---- Variant ------------------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    VariantPlan p;
    Kernel *kern;
    int64_t *code;
    PyObject *key, *names, *loader, *cubin;
    CUmodule mod[MAXDEV];
    CUfunction *fn[MAXDEV];
    int *smem_set[MAXDEV];
} Variant;

static void Variant_dealloc(PyObject *self) {
    Variant *v = (Variant *)self;
    Py_XDECREF(v->key); Py_XDECREF(v->names); Py_XDECREF(v->loader); Py_XDECREF(v->cubin);
    PyMem_Free(v->kern), PyMem_Free(v->code);
    for (int d = 0; d < MAXDEV; d++) PyMem_Free(v->fn[d]), PyMem_Free(v->smem_set[d]);
    tp_free_self(self); /* modules stay loaded: a kernel may still run on a stream */
}

/* Variant(key, VariantPlan, Kernels, code: bytes, kernel names: tuple[str], loader: callable -> cubin bytes) */
static PyObject *Variant_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *key, *plan, *kern, *code, *names, *loader; Variant *v;
    if (!PyArg_ParseTuple(args, "UO!O!O!O!O:Variant", &key, &PyBytes_Type, &plan, &PyBytes_Type, &kern, &PyBytes_Type, &code,
                          &PyTuple_Type, &names, &loader) || !(v = (Variant *)tp_alloc(tp))) return NULL;
    v->key = Py_NewRef(key), v->names = Py_NewRef(names), v->loader = Py_NewRef(loader);
    if (take(plan, sizeof(VariantPlan), &v->p) && (v->kern = take(kern, v->p.nkern * (Py_ssize_t)sizeof(Kernel), NULL)) &&
        (v->code = take(code, -1, NULL))) return (PyObject *)v;
    return Py_DECREF(v), NULL;
}

static PyType_Slot Variant_slots[] = {
    {Py_tp_new, Variant_new}, {Py_tp_dealloc, Variant_dealloc},
    {Py_tp_doc, "A compiled variant: its launch plan and, once loaded, its module per device."}, {0, NULL}};
static PyType_Spec Variant_spec = {"tkreg._launcher.Variant", sizeof(Variant), 0, Py_TPFLAGS_DEFAULT, Variant_slots};

/* The kernel's parameters as the cubin declares them (count, sizes) must be the plan's.  Each
 * gets its place in the launch buffer here (CUtensorMaps 64-byte aligned, as the encoder needs). */
static int check_params(Variant *v, Kernel *K, CUfunction f, const char *kname, PyObject *op) {
    size_t off, size, want = 0; int n = 0, end = 0; CUresult r;
    for (; (r = cu.cuFuncGetParamInfo(f, n, &off, &size)) == CUDA_SUCCESS; n++) {
        Param *P = &K->p[n < K->np ? n : 0];
        want = P->kind == P_PTR ? 8 : P->kind == P_TMA ? sizeof(CUtensorMap) : (size_t)TYPE_SIZE[P->type];
        if (n < K->np && size != want) break;
        int align = P->kind == P_TMA ? 64 : (int)want;
        if (n < K->np) P->off = (end + align - 1) / align * align, end = P->off + (int)want;
    }
    if (r == CUDA_SUCCESS) return fail("(sOOsinn)", "param_size", op, v->key, kname, n, (Py_ssize_t)size, (Py_ssize_t)want);
    if (r != CUDA_ERROR_INVALID_VALUE) return cu_fail(r, op, v->key, "cuFuncGetParamInfo");
    if (n != K->np) return fail("(sOOsii)", "param_count", op, v->key, kname, n, K->np);
    return end > PBUF ? fail("(sOOsi)", "param_bytes", op, v->key, kname, end) : 0;
}

/* Load the cubin (once per process) and its module (once per device); the context is current. */
static int variant_load(Variant *v, int dev, PyObject *op) {
    if (v->mod[dev]) return 0;
    if (!v->cubin) {
        PyObject *b = PyObject_CallObject(v->loader, NULL); /* Python: the GIL may drop here */
        if (b && !PyBytes_Check(b)) { Py_CLEAR(b); PyErr_SetString(PyExc_TypeError, "cubin loader must return bytes"); }
        if (!b) return -1;
        if (v->cubin) Py_DECREF(b); else v->cubin = b;
        if (v->mod[dev]) return 0; /* another thread finished the load meanwhile */
    }
    /* No Python runs from here until the slot is filled, so no other thread can interleave. */
    CUmodule m;
    CUresult r = cu.cuModuleLoadData(&m, PyBytes_AsString(v->cubin));
    if (r) return cu_fail(r, op, v->key, "cuModuleLoadData");
    CUfunction *f = PyMem_Calloc(v->p.nkern, sizeof(CUfunction));
    int *ss = PyMem_Calloc(v->p.nkern, sizeof(int));
    for (int k = 0; k < v->p.nkern; k++) {
        const char *name = f && ss ? PyUnicode_AsUTF8AndSize(PyTuple_GetItem(v->names, k), NULL) : NULL;
        if (!name) { if (!PyErr_Occurred()) PyErr_NoMemory(); goto undo; }
        if ((r = cu.cuModuleGetFunction(&f[k], m, name))) { fail("(sOOsi)", "no_kernel", op, v->key, name, (int)r); goto undo; }
        if (check_params(v, &v->kern[k], f[k], name, op)) goto undo;
    }
    v->fn[dev] = f, v->smem_set[dev] = ss, v->mod[dev] = m, g_modules++;
    return 0;
undo:
    PyMem_Free(f), PyMem_Free(ss), cu.cuModuleUnload(m);
    return -1;
}

/* ---- Op ----------------------------------------------------------------------------------- */
/* A tensor argument's facts; from dtype on, as tkreg.native.describe packs them (int64 words). */
typedef struct { PyObject *obj; int64_t dtype, rank, dev, contiguous, shape[MAXRANK], stride[MAXRANK], ptr; } TArg;
#define FACTS(a) ((char *)&(a)->dtype)
enum { NFACTS = sizeof(TArg) - offsetof(TArg, dtype) };
typedef union { int32_t i32; int64_t i64; float f32; double f64; _Bool b; } Slot;
typedef struct {
    PyObject_HEAD
    PyObject *name, *names, *defaults, *hook[4]; /* resolve, fallback, grad_hook, on_error */
    OpPlan p;
    int64_t *code;
    PyObject *dev_table[MAXDEV + 1]; /* slot 0: CPU; a tuple of Variants, or unset */
    struct { int idx, dev, late; char has[MAXT]; TArg t[MAXT]; Slot scal[MAXS]; int64_t env[MAXSLOT]; char bound[MAXSLOT]; }
        memo; /* the last call that picked a variant (idx -1: none): reused while a call's facts repeat it */
} Op;
enum { H_RESOLVE, H_FALLBACK, H_GRAD, H_ERROR };

static void Op_dealloc(PyObject *self) {
    Op *o = (Op *)self;
    Py_XDECREF(o->name); Py_XDECREF(o->names); Py_XDECREF(o->defaults);
    for (int i = 0; i < 4; i++) Py_XDECREF(o->hook[i]);
    for (int i = 0; i <= MAXDEV; i++) Py_XDECREF(o->dev_table[i]);
    PyMem_Free(o->code), tp_free_self(self);
}

/* Op(name, OpPlan, code: bytes, names: the calling convention's argument names, defaults: one per
 *    scalar (None: required), hooks: (resolve(dev) -> (variants, SM count) | None,
 *    fallback(bound, rows | None, env), grad_hook(bound), on_error(code, index, detail, bound, env))) */
static PyObject *Op_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *name, *plan, *code, *names, *defaults, *hooks; Op *o;
    if (!PyArg_ParseTuple(args, "UO!O!O!O!O!:Op", &name, &PyBytes_Type, &plan, &PyBytes_Type, &code, &PyTuple_Type, &names,
                          &PyTuple_Type, &defaults, &PyTuple_Type, &hooks)) return NULL;
    if (PyTuple_Size(hooks) != 4) return PyErr_Format(PyExc_TypeError, "Op: expected 4 hooks");
    if (!(o = (Op *)tp_alloc(tp))) return NULL;
    for (int i = 0; i < 4; i++) o->hook[i] = Py_NewRef(PyTuple_GetItem(hooks, i));
    o->name = Py_NewRef(name), o->names = Py_NewRef(names), o->defaults = Py_NewRef(defaults), o->memo.idx = -1;
    if (take(plan, sizeof(OpPlan), &o->p) && (o->code = take(code, -1, NULL))) return (PyObject *)o; /* names, defaults: assemble.py's */
    return Py_DECREF(o), NULL;
}

typedef struct {
    PyObject *a[MAXT + MAXS]; /* bound arguments (borrowed), spec order; NULL: not given */
    TArg t[MAXT]; Slot scal[MAXS];
    int64_t env[MAXSLOT]; char bound[MAXSLOT];
    int dev, late, hit; /* hit: the memo's variant, when the facts repeat it (-1: they do not) */
    PyObject *owned[MAXT];
} Call;

/* The call as Python sees it: bound arguments (spec order, None when absent) and slot values. */
static PyObject *bound_tuple(Op *o, Call *c) {
    PyObject *t = PyTuple_New(o->p.nt + o->p.ns);
    for (int i = 0; t && i < o->p.nt + o->p.ns; i++) PyTuple_SetItem(t, i, Py_NewRef(c->a[i] ? c->a[i] : Py_None));
    return t;
}
static PyObject *env_tuple(Op *o, Call *c) {
    PyObject *t = PyTuple_New(o->p.nslot);
    for (int s = 0; t && s < o->p.nslot; s++) PyTuple_SetItem(t, s, c->bound[s] ? PyLong_FromLongLong(c->env[s]) : Py_NewRef(Py_None));
    return t;
}

/* Hand a refusal to Python, which raises the error it describes; returns -1. */
static int refuse(Op *o, Call *c, int code, int index, int64_t detail, PyObject *obj) {
    PyObject *bound = bound_tuple(o, c), *env = env_tuple(o, c), *d = obj ? Py_NewRef(obj) : PyLong_FromLongLong(detail);
    PyObject *r = bound && env && d ? PyObject_CallFunction(o->hook[H_ERROR], "iiOOO", code, index, d, bound, env) : NULL;
    if (r) { Py_DECREF(r); PyErr_SetString(PyExc_RuntimeError, "tkreg: on_error returned"); }
    Py_XDECREF(bound), Py_XDECREF(env), Py_XDECREF(d);
    return -1;
}

/* The calling convention (inputs, scalars, outputs; by position or by name) -> spec order. */
static int bind_args(Op *o, PyObject *args, PyObject *kw, Call *c) {
    PyObject *k, *val;
    Py_ssize_t pos = 0, n = PyTuple_Size(args);
    memset(c->a, 0, sizeof(PyObject *) * (o->p.nt + o->p.ns)), memset(c->owned, 0, sizeof(PyObject *) * o->p.nt), memset(c->bound, 0, o->p.nslot);
    c->dev = -2, c->late = 0, c->hit = -1;
    if (n > o->p.nuser) return refuse(o, c, E_NARGS, -1, n, NULL);
    for (Py_ssize_t i = 0; i < n; i++) c->a[o->p.user[i]] = PyTuple_GetItem(args, i);
    while (kw && PyDict_Next(kw, &pos, &k, &val)) {
        int j = -1;
        for (int u = 0; u < o->p.nuser && j < 0; u++)
            if (PyTuple_GetItem(o->names, u) == k || (PyUnicode_Check(k) && !PyUnicode_Compare(PyTuple_GetItem(o->names, u), k))) j = u;
        if (j < 0) return refuse(o, c, E_KWARG, -1, 0, k);
        if (c->a[o->p.user[j]]) return refuse(o, c, E_TWICE, o->p.user[j], 0, NULL);
        c->a[o->p.user[j]] = val;
    }
    for (int s = 0; s < o->p.ns; s++)
        if (!c->a[o->p.nt + s] && (c->a[o->p.nt + s] = PyTuple_GetItem(o->defaults, s)) == Py_None) return refuse(o, c, E_MISSING, o->p.nt + s, 0, NULL);
    for (int i = 0; i < o->p.nt; i++) {
        if ((o->p.t[i].role == ROLE_INPUT || o->p.t[i].role == ROLE_INPLACE) && !o->p.t[i].optional && (!c->a[i] || c->a[i] == Py_None))
            return refuse(o, c, c->a[i] ? E_REQUIRED : E_MISSING, i, 0, NULL);
        if (c->a[i] == Py_None) c->a[i] = NULL;
    }
    return 0;
}

/* One tensor's facts through the shim (1), or 0 when it does not apply. */
static int shim_read(PyObject *x, TArg *a) {
    void *impl = NULL, *h = &impl, *ptr; /* an at::Tensor is one TensorImpl* */
    int64_t dim, *sz, *st, numel = 1, expect = 1; int32_t dt, devt, devi;
    if (!g_shim.ok || (Py_TYPE(x) != (PyTypeObject *)g_shim.types[0] && Py_TYPE(x) != (PyTypeObject *)g_shim.types[1])) return 0;
    if (g_shim.direct) impl = *(void **)((char *)x + sizeof(PyObject));
    else {
        PyObject *cd = PyObject_GetAttr(x, g_shim.cdata);
        impl = cd ? PyLong_AsVoidPtr(cd) : NULL;
        Py_XDECREF(cd);
    }
    if (!impl || g_shim.fn.dim(h, &dim) || dim > MAXRANK || g_shim.fn.devtype(h, &devt) || (devt != g_shim.cpu && devt != g_shim.cuda) ||
        g_shim.fn.sizes(h, &sz) || g_shim.fn.strides(h, &st) || g_shim.fn.dtype(h, &dt) || g_shim.fn.devidx(h, &devi) || g_shim.fn.data_ptr(h, &ptr))
        return PyErr_Clear(), 0;
    a->dtype = -1;
    for (int d = 0; d < NDTYPES; d++) a->dtype = g_shim.scalar_type[d] == dt ? d : a->dtype;
    if (a->dtype < 0) return 0; /* Python reports it */
    a->rank = (int)dim, a->contiguous = 1, a->ptr = (uintptr_t)ptr, a->dev = devt == g_shim.cuda ? devi : -1;
    for (int r = 0; r < a->rank; r++) a->shape[r] = sz[r], a->stride[r] = st[r], numel *= sz[r];
    for (int r = a->rank - 1; r >= 0 && numel > 0; expect *= sz[r--]) /* torch's rule: size-1 dims never break it */
        if (sz[r] != 1 && st[r] != expect) { a->contiguous = 0; break; }
    return 1;
}

static int read_tensor(Op *o, Call *c, int i, PyObject *x, TArg *a) {
    if (shim_read(x, a)) return 0;
    PyObject *d = PyObject_CallFunctionObjArgs(g_describe, x, NULL); /* the facts, or why there are none */
    int code = !d ? -1 : PyLong_Check(d) ? (int)PyLong_AsLong(d) : take(d, NFACTS, FACTS(a)) ? 0 : -1;
    Py_XDECREF(d);
    return code > 0 ? refuse(o, c, code, i, 0, NULL) : code;
}

static int expected_dtype(Op *o, Call *c, int i) {
    TSig *t = &o->p.t[i];
    return c->t[i].obj ? c->t[i].dtype : t->dmode == DT_FIXED ? t->darg : t->dmode == DT_SAME && c->t[t->darg].obj ? c->t[t->darg].dtype : -1;
}

/* A program's value, or a refusal naming argument i (detail r) when it cannot be evaluated. */
static int eval_or_refuse(Op *o, Call *c, const int64_t *code, Prog p, int i, int r, int64_t *out) {
    int rc = prog_eval(code, p, c->env, c->bound, out);
    return rc ? refuse(o, c, rc == -1 ? E_UNBOUND : E_EVAL, i, r, NULL) : 0;
}

static int check_dims(Op *o, Call *c, int i) {
    int64_t want;
    for (int r = 0; r < o->p.t[i].rank; r++) {
        int rc = prog_eval(o->code, o->p.t[i].dims[r], c->env, c->bound, &want);
        if (rc == -1 && o->p.t[i].role == ROLE_OUTPUT) { c->late = 1; continue; } /* uses a variant parameter */
        if (rc) return refuse(o, c, rc == -1 ? E_UNBOUND : E_EVAL, i, r, NULL);
        if (c->t[i].shape[r] != want) return refuse(o, c, E_SHAPE, i, r, NULL);
    }
    return 0;
}

/* The checks that read only the facts (all but the data pointers) and the bindings they make. */
static int check_facts(Op *o, Call *c) {
    for (int i = 0; i < o->p.nt; i++) {
        TSig *t = &o->p.t[i];
        TArg *a = &c->t[i];
        if (a->obj && (t->dmode == DT_SET ? !((t->darg >> a->dtype) & 1) : t->dmode == DT_FIXED ? a->dtype != t->darg
                       : c->t[t->darg].obj && a->dtype != c->t[t->darg].dtype))
            return refuse(o, c, E_DTYPE, i, 0, NULL);
        if (a->obj && a->rank != t->rank) return refuse(o, c, E_RANK, i, 0, NULL);
    }
    for (int k = 0; k < o->p.nbind; k++) {
        Bind *b = &o->p.bind[k];
        TArg *a = &c->t[b->a];
        if (c->bound[b->slot] || ((b->kind == S_DIM || b->kind == S_STRIDE) && !a->obj)) continue;
        c->env[b->slot] = b->kind == S_DIM ? a->shape[b->b] / b->div : b->kind == S_STRIDE ? a->stride[b->b] : b->kind == S_PRESENT ? a->obj != NULL
                          : o->p.stype[b->a] == T_INT32 ? c->scal[b->a].i32 : o->p.stype[b->a] == T_BOOL ? c->scal[b->a].b : c->scal[b->a].i64;
        c->bound[b->slot] = 1;
        if (b->kind == S_DIM && !o->p.index64 && c->env[b->slot] > INT32_MAX) return refuse(o, c, E_SIZE32, b->a, c->env[b->slot], NULL);
    }
    for (int i = 0; i < o->p.nt; i++) {
        TArg *a = &c->t[i];
        int64_t numel = 1, want;
        if (!a->obj) continue;
        if (check_dims(o, c, i)) return -1;
        for (int r = 0; r < a->rank; r++) numel *= a->shape[r];
        for (int r = 0; r < a->rank && o->p.t[i].strided && numel > 0; r++) {
            if (a->shape[r] != 1 && eval_or_refuse(o, c, o->code, o->p.t[i].strides[r], i, r, &want)) return -1;
            if (a->shape[r] != 1 && a->stride[r] != want) return refuse(o, c, E_STRIDE, i, r, NULL);
        }
        if (!o->p.t[i].strided && !a->contiguous) return refuse(o, c, E_CONTIGUOUS, i, 0, NULL);
        if (numel > 0 && a->ptr % 16) return refuse(o, c, E_ALIGN, i, (int64_t)(a->ptr % 16), NULL);
        if (!o->p.index64 && numel > INT32_MAX) return refuse(o, c, E_NUMEL32, i, numel, NULL);
    }
    for (int i = 0; i < o->p.nt; i++) { /* one device, checked last so CPU tensors exercise every check above */
        if (c->t[i].obj && c->dev != -2 && c->t[i].dev != c->dev) return refuse(o, c, E_DEVICE, i, c->dev, NULL);
        if (c->t[i].obj) c->dev = c->t[i].dev;
    }
    return c->dev >= MAXDEV ? refuse(o, c, E_MAX_DEVICE, -1, c->dev, NULL) : 0;
}

/* 1 when the call's facts and scalars are the memo's (the memo's bindings and choice then hold). */
static int same_facts(Op *o, Call *c) {
    if (o->memo.idx < 0 || memcmp(c->scal, o->memo.scal, sizeof(Slot) * o->p.ns)) return 0;
    for (int i = 0; i < o->p.nt; i++) {
        TArg *a = &c->t[i], *m = &o->memo.t[i];
        if (!a->obj != !o->memo.has[i] || (a->obj && (memcmp(FACTS(a), FACTS(m), (char *)a->shape - FACTS(a)) ||
            memcmp(a->shape, m->shape, 8 * a->rank) || memcmp(a->stride, m->stride, 8 * a->rank)))) return 0;
    }
    return 1;
}

/* Everything that can be checked without the GPU, in the order a user wants to hear it. */
static int validate(Op *o, Call *c) {
    for (int i = 0; i < o->p.nt; i++) {
        if (c->a[i] && read_tensor(o, c, i, c->a[i], &c->t[i])) return -1;
        c->t[i].obj = c->a[i];
    }
    for (int s = 0; s < o->p.ns; s++) {
        PyObject *x = c->a[o->p.nt + s];
        Slot *v = &c->scal[s];
        int t = o->p.stype[s], b = 0;
        v->i64 = 0;
        if (t == T_FLOAT64) v->f64 = PyFloat_AsDouble(x);
        else if (t == T_FLOAT32) v->f32 = (float)PyFloat_AsDouble(x);
        else if (t == T_BOOL) v->b = (b = PyObject_IsTrue(x)) > 0;
        else v->i64 = PyLong_AsLongLong(x);
        if (PyErr_Occurred() || b < 0 || (t == T_INT32 && v->i64 != (int32_t)v->i64)) return PyErr_Clear(), refuse(o, c, E_SCALAR, o->p.nt + s, 0, NULL);
        if (t == T_INT32) v->i32 = (int32_t)v->i64;
    }
    if (!same_facts(o, c)) return check_facts(o, c);
    c->hit = o->memo.idx, c->dev = o->memo.dev, c->late = o->memo.late;
    memcpy(c->env, o->memo.env, 8 * o->p.nslot), memcpy(c->bound, o->memo.bound, o->p.nslot);
    for (int i = 0; i < o->p.nt; i++) { /* the data pointers: all that can differ */
        int64_t numel = c->t[i].obj != NULL; /* an absent tensor's facts are not read */
        for (int r = 0; numel && r < c->t[i].rank; r++) numel *= c->t[i].shape[r];
        if (numel && c->t[i].ptr % 16) return refuse(o, c, E_ALIGN, i, (int64_t)(c->t[i].ptr % 16), NULL);
    }
    return 0;
}

/* 1 when grad mode is on and an input requires grad: autograd must record the call, which the
 * fast path cannot, so Python's hook routes it (or refuses it).  -1 on error. */
static int needs_autograd(Op *o, Call *c) {
    PyObject *r = NULL; int on = 0, yes = 0;
    if (g_shim.ok && g_shim.fn.grad_on) on = g_shim.fn.grad_on();
    else if ((r = PyObject_CallObject(g_grad_on, NULL))) on = r == Py_True, Py_DECREF(r);
    else PyErr_Clear();
    for (int i = 0; on && !yes && i < o->p.nt; i++) {
        PyObject *x = c->t[i].obj; /* an exact Tensor with no AutogradMeta cannot require grad: skip the attribute */
        if (!x || (o->p.t[i].role != ROLE_INPUT && o->p.t[i].role != ROLE_INPLACE) ||
            (g_shim.grad_off && Py_TYPE(x) == (PyTypeObject *)g_shim.types[0] && !*(void **)(*(char **)((char *)x + sizeof(PyObject)) + g_shim.grad_off))) continue;
        if (!(r = PyObject_GetAttr(x, s_requires_grad))) return -1;
        yes = r == Py_True, Py_DECREF(r);
    }
    return yes;
}

/* The variants for the call's device (cached), or Py_None when the fallback runs.  Borrowed. */
static PyObject *device_table(Op *o, int dev) {
    int slot = dev < 0 ? 0 : dev + 1;
    if (o->dev_table[slot]) return o->dev_table[slot];
    PyObject *got = PyObject_CallFunction(o->hook[H_RESOLVE], "i", dev), *t; /* Python: the GIL may drop here */
    if (!got || got == Py_None) return Py_XDECREF(got), got ? Py_None : NULL; /* fallback: asked again next call */
    if (!PyArg_ParseTuple(got, "O!L", &PyTuple_Type, &t, &g_sm[slot])) return Py_DECREF(got), NULL;
    if (!o->dev_table[slot]) o->dev_table[slot] = Py_NewRef(t); /* unless another thread resolved it meanwhile */
    Py_DECREF(got);
    return o->dev_table[slot];
}

/* R_ACCEPTED, or why v passes over the call (*idx: the tensor or constraint). */
static int accepts(Op *o, Variant *v, Call *c, int *idx) {
    int64_t r;
    for (int i = 0; i < o->p.nt; i++) {
        int d = expected_dtype(o, c, i);
        if (v->p.dtypes[i] >= 0 && d >= 0 && d != v->p.dtypes[i]) return *idx = i, R_DTYPE;
    }
    for (int k = 0; k < v->p.ntma; k++)
        if (!c->t[v->p.tma[k].tensor].obj && (o->p.t[v->p.tma[k].tensor].role == ROLE_INPUT || o->p.t[v->p.tma[k].tensor].role == ROLE_INPLACE))
            return *idx = v->p.tma[k].tensor, R_ABSENT;
    for (int k = 0; k < v->p.ncons; k++)
        if (prog_eval(v->code, v->p.cons[k], c->env, c->bound, &r) || !r) return *idx = k, R_RULE;
    return R_ACCEPTED;
}

static PyObject *reject_rows(Op *o, PyObject *table, Call *c) {
    PyObject *rows = PyTuple_New(PyTuple_Size(table));
    for (Py_ssize_t i = 0; rows && i < PyTuple_Size(table); i++) {
        PyObject *v = PyTuple_GetItem(table, i);
        int idx = -1, why = accepts(o, (Variant *)v, c, &idx);
        PyTuple_SetItem(rows, i, Py_BuildValue("(Oii)", v, why, idx));
    }
    return rows;
}

static int select_variant(Op *o, PyObject *table, Call *c) {
    int idx;
    if (c->hit >= 0) return c->hit;
    for (Py_ssize_t i = 0; i < PyTuple_Size(table); i++)
        if (accepts(o, (Variant *)PyTuple_GetItem(table, i), c, &idx) == R_ACCEPTED) { /* remembered, with the facts it held for */
            o->memo.idx = (int)i, o->memo.dev = c->dev, o->memo.late = c->late;
            memcpy(o->memo.scal, c->scal, sizeof(Slot) * o->p.ns), memcpy(o->memo.env, c->env, 8 * o->p.nslot), memcpy(o->memo.bound, c->bound, o->p.nslot);
            for (int t = 0; t < o->p.nt; t++) o->memo.has[t] = c->t[t].obj != NULL, o->memo.t[t] = c->t[t];
            return (int)i;
        }
    return -1;
}

/* Outputs the caller did not pass, and the scratch the variant uses: empty_like / new_empty of an
 * input where the spec allows (the cheapest allocations torch has), else torch.empty. */
static int allocate(Op *o, Variant *v, Call *c) {
    for (int i = 0; i < o->p.nt; i++) {
        TSig *t = &o->p.t[i];
        TArg *a = &c->t[i];
        if (a->obj || t->role == ROLE_INPUT || t->role == ROLE_INPLACE || (t->role == ROLE_SCRATCH && !((v->p.uses >> i) & 1))) continue;
        int dt = expected_dtype(o, c, i) >= 0 ? expected_dtype(o, c, i) : v->p.dtypes[i];
        PyObject *x = NULL, *shape = NULL, *kw = NULL, *args = NULL;
        if (dt < 0) return refuse(o, c, E_OUT_DTYPE, i, 0, NULL);
        for (int r = 0; r < t->rank; r++)
            if (eval_or_refuse(o, c, o->code, t->dims[r], i, r, &a->shape[r])) return -1;
        if (t->like >= 0 && c->t[t->like].obj) x = PyObject_CallFunctionObjArgs(g_empty_like, c->t[t->like].obj, NULL);
        else if (!(shape = PyTuple_New(t->rank))) return -1;
        for (int r = 0; shape && r < t->rank; r++) PyTuple_SetItem(shape, r, PyLong_FromLongLong(a->shape[r]));
        if (shape && t->newsrc >= 0 && c->t[t->newsrc].obj) x = PyObject_CallFunctionObjArgs(g_new_empty, c->t[t->newsrc].obj, shape, NULL);
        else if (shape) {
            kw = Py_BuildValue("{sOsi}", "dtype", g_dtypes[dt], "device", c->dev), args = kw ? PyTuple_Pack(1, shape) : NULL;
            x = args ? PyObject_Call(g_empty, args, kw) : NULL;
        }
        Py_XDECREF(shape), Py_XDECREF(kw), Py_XDECREF(args);
        if (!(c->owned[i] = x) || read_tensor(o, c, i, x, a)) return -1;
        a->obj = x;
    }
    return 0;
}

static int launch(Op *o, Variant *v, Call *c) {
    CUstream stream; CUcontext prev = NULL; CUresult r; void *sp; int rc = -1;
    if (g_shim.ok && g_shim.fn.stream && g_shim.fn.stream(c->dev, &sp) == 0) stream = (CUstream)sp;
    else {
        PyObject *s = PyObject_CallFunction(g_get_stream, "i", c->dev);
        stream = s ? (CUstream)(uintptr_t)PyLong_AsUnsignedLongLong(s) : NULL;
        Py_XDECREF(s);
        if (!s || PyErr_Occurred()) return -1;
    }
    if (cuda_load() || ctx_enter(c->dev, &prev, o->name)) return -1;
    if (variant_load(v, c->dev, o->name)) goto out;
    for (int i = 0; i < o->p.nt; i++) { /* zero-filled scratch, on the stream the kernels run on */
        size_t bytes = o->p.t[i].zero && c->owned[i] ? ELEM_SIZE[c->t[i].dtype] : 0;
        for (int d = 0; d < c->t[i].rank && bytes; d++) bytes *= (size_t)c->t[i].shape[d];
        if (bytes && (r = cu.cuMemsetD8Async((CUdeviceptr)c->t[i].ptr, 0, bytes, stream))) { cu_fail(r, o->name, v->key, "cuMemsetD8Async"); goto out; }
    }
    for (int k = 0; k < v->p.nkern; k++) {
        Kernel *K = &v->kern[k];
        int64_t g[3], smem, x;
        _Alignas(64) unsigned char buf[PBUF];
        void *pp[MAXP];
        for (int j = 0; j < 4; j++)
            if (eval_or_refuse(o, c, v->code, j < 3 ? K->grid[j] : K->smem, -1, k, j < 3 ? &g[j] : &smem)) goto out;
        if (g[0] <= 0 || g[1] <= 0 || g[2] <= 0) continue; /* empty problem (e.g. M = 0): nothing to launch */
        for (int j = 0; j < K->np; j++) {
            Param *P = &K->p[j];
            unsigned char *dst = pp[j] = buf + P->off;
            if (P->kind == P_PTR) { unsigned long long u = c->t[P->index].obj ? c->t[P->index].ptr : 0; memcpy(dst, &u, 8); }
            else if (P->kind == P_SCALAR) memcpy(dst, &c->scal[P->index], TYPE_SIZE[P->type]);
            else if (P->kind == P_SYM) {
                if (!c->bound[P->index]) { refuse(o, c, E_UNBOUND, -1, P->index, NULL); goto out; }
                int32_t x32 = (int32_t)(x = c->env[P->index]);
                if (P->type == T_INT32 && x != x32) { refuse(o, c, E_PARAM32, -1, x, NULL); goto out; }
                memcpy(dst, P->type == T_INT32 ? (void *)&x32 : (void *)&x, TYPE_SIZE[P->type]);
            } else {
                Tma *t = &v->p.tma[P->index];
                uint64_t dims[5], strides[4];
                for (int q = 0; q < t->rank * 2 - 1; q++) {
                    if (eval_or_refuse(o, c, v->code, q < t->rank ? t->dims[q] : t->strides[q - t->rank], t->tensor, q, &x)) goto out;
                    if (q < t->rank && x <= 0) { refuse(o, c, E_TMA_ZERO, t->tensor, q, NULL); goto out; }
                    if (q >= t->rank && x % 16) { refuse(o, c, E_TMA_STRIDE, t->tensor, x, NULL); goto out; }
                    *(q < t->rank ? &dims[q] : &strides[q - t->rank]) = (uint64_t)x;
                }
                if ((r = cu.cuTensorMapEncodeTiled((CUtensorMap *)dst, t->dtype, t->rank, (void *)(uintptr_t)c->t[t->tensor].ptr, dims, strides,
                                                  t->box, t->estr, t->il, t->sw, t->l2, t->oob))) { cu_fail(r, o->name, v->key, "cuTensorMapEncodeTiled"); goto out; }
            }
        }
        CUfunction f = v->fn[c->dev][k];
        if (smem > 48 * 1024 && smem > v->smem_set[c->dev][k]) { /* opt in to more than 48 KiB, once per size */
            if ((r = cu.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem)))
                { cu_fail(r, o->name, v->key, "cuFuncSetAttribute"); goto out; }
            v->smem_set[c->dev][k] = (int)smem;
        }
        CUlaunchAttribute at[3]; /* cluster dims, cooperative, PDL: assemble.py wrote them as the driver reads them */
        memcpy(at, K->at, sizeof at);
        CUlaunchConfig cfg = {(unsigned)g[0], (unsigned)g[1], (unsigned)g[2], K->block[0], K->block[1], K->block[2], (unsigned)smem, stream, at, (unsigned)K->na};
        if ((r = K->na ? cu.cuLaunchKernelEx(&cfg, f, pp, NULL)
                    : cu.cuLaunchKernel(f, cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ, cfg.sharedMemBytes, stream, pp, NULL)))
            { cu_fail(r, o->name, v->key, K->na ? "cuLaunchKernelEx" : "cuLaunchKernel"); goto out; }
    }
    rc = 0;
out:
    if (prev && prev != g_ctx[c->dev] && (r = cu.cuCtxSetCurrent(prev))) return cu_fail(r, o->name, NULL, "restoring the current context");
    return rc;
}

/* The chosen variant's run: its parameters into the slots, late shape checks, allocation, launch. */
static PyObject *run(Op *o, Variant *v, Call *c) {
    PyObject *res = NULL; int ok = 1;
    for (int k = 0; k < v->p.nset; k++) c->env[v->p.set_slot[k]] = v->p.set_val[k], c->bound[v->p.set_slot[k]] = 1;
    for (int i = 0; i < o->p.nt && c->late && ok; i++) ok = o->p.t[i].role != ROLE_OUTPUT || !c->t[i].obj || !check_dims(o, c, i);
    if (ok && !allocate(o, v, c) && !launch(o, v, c)) {
        res = o->p.nout == 0 ? Py_NewRef(Py_None) : o->p.nout == 1 ? Py_NewRef(c->t[o->p.out[0]].obj) : PyTuple_New(o->p.nout);
        for (int k = 0; o->p.nout > 1 && res && k < o->p.nout; k++) PyTuple_SetItem(res, k, Py_NewRef(c->t[o->p.out[k]].obj));
    }
    for (int i = 0; i < o->p.nt; i++) Py_XDECREF(c->owned[i]);
    return res;
}

static PyObject *dispatch(Op *o, PyObject *args, PyObject *kw, int mode, PyObject *table) {
    Call c; PyObject *bound, *rows = NULL, *env, *r;
    if (bind_args(o, args, kw, &c) || validate(o, &c)) return NULL;
    int g = mode == CALL ? needs_autograd(o, &c) : 0;
    if (g < 0 || (!g && !table && !(table = device_table(o, c.dev)))) return NULL;
    if (table != Py_None && o->p.sm_slot >= 0 && c.dev >= -1) c.env[o->p.sm_slot] = g_sm[c.dev + 1], c.bound[o->p.sm_slot] = g_sm[c.dev + 1] > 0;
    int idx = !g && table != Py_None && mode != CHECK ? select_variant(o, table, &c) : -1;
    if (idx >= 0) return run(o, (Variant *)PyTuple_GetItem(table, idx), &c);
    if (!g && table != Py_None && !(rows = reject_rows(o, table, &c))) return NULL;
    env = env_tuple(o, &c), bound = bound_tuple(o, &c);
    r = !bound || !env ? NULL
        : mode == CHECK ? Py_BuildValue("(iOOO)", c.dev, bound, env, rows ? rows : Py_None)
        : g ? PyObject_CallFunctionObjArgs(o->hook[H_GRAD], bound, NULL)                          /* autograd, or a refusal */
            : PyObject_CallFunctionObjArgs(o->hook[H_FALLBACK], bound, rows ? rows : Py_None, env, NULL); /* reference or NoKernelError */
    Py_XDECREF(bound), Py_XDECREF(rows), Py_XDECREF(env);
    return r;
}

static PyObject *Op_call(PyObject *self, PyObject *args, PyObject *kw) { return dispatch((Op *)self, args, kw, CALL, NULL); }

/* check(args, kwargs, table=None, cpu_sm_count=0) -> (device, bound, env, rows | None): what explain needs. */
static PyObject *Op_check(PyObject *self, PyObject *a) {
    PyObject *args, *kw, *table = NULL;
    long long sm = 0; /* CPU tensors: the SM count explain(sm_count=) assumes; 0 = unknown */
    if (!PyArg_ParseTuple(a, "O!O!|O!L:check", &PyTuple_Type, &args, &PyDict_Type, &kw, &PyTuple_Type, &table, &sm)) return NULL;
    g_sm[0] = sm;
    return dispatch((Op *)self, args, kw, CHECK, table);
}

static PyMethodDef Op_methods[] = {
    {"check", Op_check, METH_VARARGS, "check(args, kwargs, table=None, cpu_sm_count=0) -> (device, bound, env, rows)"}, {NULL}};
static PyType_Slot Op_slots[] = {
    {Py_tp_new, Op_new}, {Py_tp_dealloc, Op_dealloc}, {Py_tp_call, Op_call}, {Py_tp_methods, Op_methods},
    {Py_tp_doc, "One op: binding, validation, variant selection and launch."}, {0, NULL}};
static PyType_Spec Op_spec = {"tkreg._launcher.Op", sizeof(Op), 0, Py_TPFLAGS_DEFAULT, Op_slots};

/* ---- module functions --------------------------------------------------------------------- */
#define SET(var, val) do { PyObject *old_ = (PyObject *)(var); (var) = Py_NewRef(val); Py_XDECREF(old_); } while (0)
/* init(dtypes, torch.empty, get_raw_stream, LaunchError, PackError,
 *      (describe, torch.empty_like, Tensor.new_empty, torch.is_grad_enabled, driver, failure)) */
static PyObject *m_init(PyObject *m, PyObject *args) {
    PyObject *dtypes, *empty, *get_stream, *le, *pe, *fns;
    PyObject **dst[] = {&g_describe, &g_empty_like, &g_new_empty, &g_grad_on, &g_driver, &g_fail};
    if (!PyArg_ParseTuple(args, "O!OOOOO!:init", &PyTuple_Type, &dtypes, &empty, &get_stream, &le, &pe, &PyTuple_Type, &fns)) return NULL;
    if (PyTuple_Size(fns) != 6 || PyTuple_Size(dtypes) != NDTYPES) return PyErr_Format(PyExc_ValueError, "init: bad arguments");
    for (int i = 0; i < NDTYPES; i++) SET(g_dtypes[i], PyTuple_GetItem(dtypes, i));
    for (int i = 0; i < 6; i++) SET(*dst[i], PyTuple_GetItem(fns, i));
    SET(g_empty, empty); SET(g_get_stream, get_stream); SET(g_LaunchError, le); SET(g_PackError, pe);
    Py_RETURN_NONE;
}

/* set_shim(None) turns the shim off; set_shim(the 9 aoti_torch_* addresses packed as uint64, dtype
 * codes, cpu code, cuda code, (Tensor, Parameter), direct, autograd_meta_ offset) turns it on. */
static PyObject *m_set_shim(PyObject *m, PyObject *args) {
    PyObject *fns, *codes, *types; int cpu, cuda, direct, grad_off;
    g_shim.ok = g_shim.direct = g_shim.grad_off = 0;
    if (PyTuple_Size(args) == 1 && PyTuple_GetItem(args, 0) == Py_None) Py_RETURN_NONE;
    if (!PyArg_ParseTuple(args, "O!O!iiO!pi:set_shim", &PyBytes_Type, &fns, &PyTuple_Type, &codes, &cpu, &cuda, &PyTuple_Type, &types, &direct, &grad_off)) return NULL;
    if (PyTuple_Size(codes) != NDTYPES || PyTuple_Size(types) != 2) return PyErr_Format(PyExc_ValueError, "set_shim: bad arguments");
    for (int d = 0; d < NDTYPES; d++) g_shim.scalar_type[d] = (int32_t)PyLong_AsLong(PyTuple_GetItem(codes, d));
    for (int k = 0; k < 2; k++) SET(g_shim.types[k], PyTuple_GetItem(types, k));
    g_shim.cpu = cpu, g_shim.cuda = cuda, g_shim.direct = direct, g_shim.grad_off = direct ? grad_off : 0;
    g_shim.ok = take(fns, sizeof g_shim.fn, &g_shim.fn) && !PyErr_Occurred();
    return PyErr_Occurred() ? NULL : PyBool_FromLong(g_shim.ok);
}

/* shim_probe(t) -> the facts as the shim reads them, packed as describe(t) packs them; or None */
static PyObject *m_shim_probe(PyObject *m, PyObject *x) {
    TArg a = {0};
    return shim_read(x, &a) ? PyBytes_FromStringAndSize(FACTS(&a), NFACTS) : Py_NewRef(Py_None);
}

static PyObject *m_modules_loaded(PyObject *m, PyObject *noargs) { return PyLong_FromLong(g_modules); }

static PyMethodDef methods[] = {
    {"init", m_init, METH_VARARGS, "init(dtypes, torch.empty, get_raw_stream, LaunchError, PackError, (Python hooks))"},
    {"set_shim", m_set_shim, METH_VARARGS, "set_shim(function pointers, dtype codes, cpu, cuda, (Tensor, Parameter), direct, grad_off) -> bool; set_shim(None): off"},
    {"shim_probe", m_shim_probe, METH_O, "what the fast path reads from a tensor, as describe packs it (the self-check)"},
    {"modules_loaded", m_modules_loaded, METH_NOARGS, "how many cubin modules this process loaded"},
    {NULL}};

static int exec_module(PyObject *m) {
    PyObject *vt = PyType_FromSpec(&Variant_spec), *ot = PyType_FromSpec(&Op_spec);
    g_LaunchError = Py_NewRef(PyExc_RuntimeError), g_PackError = Py_NewRef(PyExc_ValueError); /* until init */
    g_driver = Py_NewRef(Py_None), g_fail = Py_NewRef(Py_None);
    s_requires_grad = PyUnicode_InternFromString("requires_grad"), g_shim.cdata = PyUnicode_InternFromString("_cdata");
    if (!vt || !ot || !s_requires_grad || !g_shim.cdata) return -1;
    return PyModule_AddObject(m, "Variant", vt) || PyModule_AddObject(m, "Op", ot) || PyModule_AddStringConstant(m, "DRIVER_FUNCS", TKREG_CU_FUNCS(NAME_FN)) ? -1 : 0;
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, exec_module}, {0, NULL}};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_launcher", "tkreg's native launcher (CUDA driver API)", 0, methods, slots};

PyMODINIT_FUNC PyInit__launcher(void) { return PyModuleDef_Init(&moddef); }
