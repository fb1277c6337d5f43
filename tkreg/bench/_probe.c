/* tkreg's bench probes, apart from the launcher: C loops that time the CUDA driver alone.
 *
 *   driver_floor(device, stream, n) -> us per cuLaunchKernel of an empty kernel (the floor any
 *                                      launcher pays; its PTX is JIT'ed by the driver once)
 *   call_loop(fn, args, n)          -> us per fn(*args) from a C loop (no Python loop overhead)
 *
 * libcuda.so.1 is dlopen'ed; the launcher made the device's primary context current before,
 * so these run in it (the bench calls an op first). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../_csrc/cuda_driver.h"

#if defined(__GLIBC__) && defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#elif defined(__GLIBC__) && defined(__aarch64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
#endif

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
static launch_fn p_launch;
static CUresult (*p_load)(CUmodule *, const void *);
static CUresult (*p_get)(CUfunction *, CUmodule, const char *);
static CUresult (*p_dev_ctx)(CUcontext *, CUdevice);
static CUresult (*p_set)(CUcontext);

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }

static int load(void) {
    if (p_launch) return 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        p_launch = (launch_fn)dlsym(h, "cuLaunchKernel");
        p_load = (CUresult(*)(CUmodule *, const void *))dlsym(h, "cuModuleLoadData");
        p_get = (CUresult(*)(CUfunction *, CUmodule, const char *))dlsym(h, "cuModuleGetFunction");
        p_dev_ctx = (CUresult(*)(CUcontext *, CUdevice))dlsym(h, "cuDevicePrimaryCtxRetain");
        p_set = (CUresult(*)(CUcontext))dlsym(h, "cuCtxSetCurrent");
    }
    if (p_launch && p_load && p_get && p_dev_ctx && p_set) return 0;
    p_launch = NULL;
    PyErr_SetString(PyExc_RuntimeError, "cannot load libcuda.so.1");
    return -1;
}

static const char EMPTY_PTX[] = ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry tkreg_empty()\n{\nret;\n}\n";

static PyObject *driver_floor(PyObject *m, PyObject *args) {
    int dev, n;
    unsigned long long stream;
    if (!PyArg_ParseTuple(args, "iKi:driver_floor", &dev, &stream, &n) || load()) return NULL;
    static CUmodule mod[64];
    static CUfunction fn[64];
    CUcontext ctx;
    CUresult r = dev < 0 || dev >= 64 ? 1 : p_dev_ctx(&ctx, dev);
    if (!r) r = p_set(ctx);
    if (!r && !mod[dev] && ((r = p_load(&mod[dev], EMPTY_PTX)) || (r = p_get(&fn[dev], mod[dev], "tkreg_empty")))) mod[dev] = NULL;
    double t0 = now_us();
    for (int i = 0; i < n && !r; i++) r = p_launch(fn[dev], 1, 1, 1, 32, 1, 1, 0, (CUstream)(uintptr_t)stream, NULL, NULL);
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
    {"driver_floor", driver_floor, METH_VARARGS, "driver_floor(device, stream, n) -> us per empty-kernel launch"},
    {"call_loop", call_loop, METH_VARARGS, "call_loop(fn, args, n) -> us per call from a C loop"},
    {NULL}};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_probe", "tkreg's bench probes (CUDA driver timing)", 0, methods};
PyMODINIT_FUNC PyInit__probe(void) { return PyModule_Create(&moddef); }
