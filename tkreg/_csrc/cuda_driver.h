/* The slice of the CUDA driver API the launcher uses, declared here so the wheel builds with no
 * CUDA toolkit and links no CUDA library: tkreg/native.py loads libcuda.so.1 on first use and
 * hands the launcher these entry points.  Layouts and enum values follow cuda.h of CUDA 12/13
 * (ABI-stable). */
#ifndef TKREG_CUDA_DRIVER_H
#define TKREG_CUDA_DRIVER_H
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8

typedef struct { _Alignas(64) uint64_t opaque[16]; } CUtensorMap;

/* An id (tkreg/codes.py LAUNCH_ATTRS) and its value union; tkreg_codes.h's LaunchAttr spells it out. */
typedef struct { int id; char pad[4]; _Alignas(8) char value[64]; } CUlaunchAttribute;

typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

/* Every driver entry point the launcher calls (in this order: `_launcher.DRIVER_FUNCS`). */
#define TKREG_CU_FUNCS(X)                                                                       \
    X(cuDeviceGet, (CUdevice *, int))                                                           \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                        \
    X(cuCtxGetCurrent, (CUcontext *))                                                           \
    X(cuCtxSetCurrent, (CUcontext))                                                             \
    X(cuModuleLoadData, (CUmodule *, const void *))                                             \
    X(cuModuleUnload, (CUmodule))                                                               \
    X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                              \
    X(cuFuncGetParamInfo, (CUfunction, size_t, size_t *, size_t *))                             \
    X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))                          \
    X(cuFuncSetAttribute, (CUfunction, int, int))                                               \
    X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
                       unsigned, CUstream, void **, void **))                                   \
    X(cuLaunchKernelEx, (const CUlaunchConfig *, CUfunction, void **, void **))                 \
    X(cuTensorMapEncodeTiled, (CUtensorMap *, int, uint32_t, void *, const uint64_t *,          \
                               const uint64_t *, const uint32_t *, const uint32_t *, int, int,  \
                               int, int))

#endif
