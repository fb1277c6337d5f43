/* tkreg's bench probes, apart from the launcher: C loops that time the CUDA driver alone.
 *
 *   driver_floor(device, stream, n, entry points) -> us per cuLaunchKernel of an empty kernel (the
 *                                      floor any launcher pays; its PTX is JIT'ed by the driver once)
 *   call_loop(fn, args, n)          -> us per fn(*args) from a C loop (no Python loop overhead)
 *
 * Links nothing: the entry points are tkreg.driver_api.driver's, packed in PROBE_FUNCS order.  The
 * launcher made the device's primary context current before, so these run in it (the bench calls
 * an op first). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../_csrc/cuda_driver.h"

#define PROBE_FUNCS "cuLaunchKernel cuModuleLoadData cuModuleGetFunction cuDevicePrimaryCtxRetain cuCtxSetCurrent"
static struct {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*get)(CUfunction *, CUmodule, const char *);
    CUresult (*dev_ctx)(CUcontext *, CUdevice);
    CUresult (*set)(CUcontext);
} cu;

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }

static const char EMPTY_PTX[] = ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry tkreg_empty()\n{\nret;\n}\n";

static PyObject *driver_floor(PyObject *m, PyObject *args) {
    int dev, n;
    unsigned long long stream;
    const char *fns;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "iKiy#:driver_floor", &dev, &stream, &n, &fns, &len)) return NULL;
    if (len != sizeof cu) return PyErr_Format(PyExc_ValueError, "driver_floor: the entry points of " PROBE_FUNCS);
    memcpy(&cu, fns, sizeof cu);
    static CUmodule mod[64];
    static CUfunction fn[64];
    CUcontext ctx;
    CUresult r = dev < 0 || dev >= 64 ? 1 : cu.dev_ctx(&ctx, dev);
    if (!r) r = cu.set(ctx);
    if (!r && !mod[dev] && ((r = cu.load(&mod[dev], EMPTY_PTX)) || (r = cu.get(&fn[dev], mod[dev], "tkreg_empty")))) mod[dev] = NULL;
    double t0 = now_us();
    for (int i = 0; i < n && !r; i++) r = cu.launch(fn[dev], 1, 1, 1, 32, 1, 1, 0, (CUstream)(uintptr_t)stream, NULL, NULL);
    double us = (now_us() - t0) / n;
    if (r) return PyErr_Format(PyExc_RuntimeError, "driver_floor: CUDA error %d", r);
    return PyFloat_FromDouble(us);
}

static PyObject *call_loop(PyObject *m, PyObject *a) {
    PyObject *fn, *args;
    int n;
    if (!PyArg_ParseTuple(a, "OO!i:call_loop", &fn, &PyTuple_Type, &args, &n)) return NULL;
    double t0 = now_us();
    for (int i = 0; i < n; i++) {
        PyObject *r = PyObject_Call(fn, args, NULL);
        if (!r) return NULL;
        Py_DECREF(r);
    }
    return PyFloat_FromDouble((now_us() - t0) / n);
}

static PyMethodDef methods[] = {
    {"driver_floor", driver_floor, METH_VARARGS, "driver_floor(device, stream, n, entry points) -> us per empty-kernel launch"},
    {"call_loop", call_loop, METH_VARARGS, "call_loop(fn, args, n) -> us per call from a C loop"},
    {NULL}};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_probe", "tkreg's bench probes (CUDA driver timing)", 0, methods};
PyMODINIT_FUNC PyInit__probe(void) {
    PyObject *m = PyModule_Create(&moddef);
    if (m && PyModule_AddStringConstant(m, "PROBE_FUNCS", PROBE_FUNCS)) Py_CLEAR(m);
    return m;
}
