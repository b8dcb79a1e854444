/*
 * What the virtual device's C files (vcuda.c, vstream.c, vvmm.c) share. Internal: nothing here is
 * exported under a CUDA name; build.py links the files (and the generated stubs) into one library.
 */
#ifndef PCOMPILE_VDEV_H
#define PCOMPILE_VDEV_H
#include <stddef.h>

typedef int cudaError_t;
typedef int CUresult;
typedef int CUdevice;
typedef void *CUstream;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef unsigned long long CUdeviceptr;

enum {
  VDEV_OK = 0,
  VDEV_INVALID_VALUE = 1,
  VDEV_OUT_OF_MEMORY = 2,
  VDEV_INVALID_DEVICE = 101,
  VDEV_INVALID_HANDLE = 400,  /* cudaErrorInvalidResourceHandle == CUDA_ERROR_INVALID_HANDLE */
  VDEV_NOT_FOUND = 500,
  VDEV_NOT_READY = 600,
  VDEV_NOT_PERMITTED = 800,
  VDEV_NOT_SUPPORTED = 801,
  VDEV_CAPTURE_UNSUPPORTED = 900, /* cudaErrorStreamCaptureUnsupported */
  VDEV_CAPTURE_INVALIDATED = 901,
  VDEV_CAPTURE_UNMATCHED = 903,
  VDEV_CAPTURE_WRONG_THREAD = 908,
};

/* ---- call counters (reported by pcompile_vdev_stats) --- */
#define CALLS(X) \
  X(cudaGetDeviceCount) X(cudaGetDevice) X(cudaSetDevice) X(cudaGetDeviceProperties) \
  X(cudaDeviceGetAttribute) X(cudaDeviceGetStreamPriorityRange) X(cudaStreamIsCapturing) \
  X(cudaStreamGetCaptureInfo) X(cudaGetLastError) X(cudaPeekAtLastError) X(cudaMalloc) X(cudaFree) \
  X(cudaMallocHost) X(cudaHostAlloc) X(cudaFreeHost) X(cudaHostRegister) X(cudaHostUnregister) \
  X(cudaMemcpy) X(cudaMemcpyAsync) X(cudaMemset) X(cudaMemsetAsync) X(cudaMemGetInfo) \
  X(cudaStreamSynchronize) X(cudaDeviceSynchronize) X(cudaStreamQuery) X(cudaStreamWaitEvent) \
  X(cudaStreamCreate) X(cudaStreamDestroy) X(cudaStreamGetPriority) X(cudaEventCreate) \
  X(cudaEventDestroy) X(cudaEventRecord) X(cudaEventQuery) X(cudaEventSynchronize) \
  X(cudaEventElapsedTime) X(cudaDriverGetVersion) X(cudaRuntimeGetVersion) \
  X(cudaThreadExchangeStreamCaptureMode) X(cudaDeviceCanAccessPeer) X(cudaGetDriverEntryPoint) \
  X(cudaPointerGetAttributes) X(cudaGetErrorString) X(cudaGetErrorName) \
  X(launch) X(cudaPushCallConfiguration) X(cudaPopCallConfiguration) X(cudaGetKernel) \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName) \
  X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxGetState) \
  X(cuDevicePrimaryCtxRetain) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice) \
  X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuModuleUnload) \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuFuncSetCacheConfig) X(cuGetErrorString) X(cuLogsRegisterCallback) X(cuLogsUnregisterCallback) \
  X(cuLaunchKernel) X(cuOccupancyMaxActiveClusters) X(cuPointerGetAttribute) X(cuStreamIsCapturing) X(not_supported) \
  X(cudaStreamBeginCapture) X(cudaStreamEndCapture) X(cudaGraphInstantiate) X(cudaGraphLaunch) \
  X(cudaGraphDestroy) X(cudaGraphExecDestroy) X(cuMemCreate) X(cuMemMap) X(cuMemUnmap) X(cuMemRelease) \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cudaMallocAsync) X(cudaFreeAsync) X(cuGetProcAddress) X(fake_address) \
  X(entry_point_missing)

enum {
#define ENUM_ENTRY(n) C_##n,
  CALLS(ENUM_ENTRY)
#undef ENUM_ENTRY
  C__COUNT
};
extern unsigned long long g_counts[C__COUNT];
#define COUNT(n) __atomic_add_fetch(&g_counts[C_##n], 1, __ATOMIC_RELAXED)

/* this thread's current device (vcuda.c) */
int vdev_current_device(void);
/* counted refusal, by name (reported in the stats as "unsupported:NAME") */
int pcompile_vdev_unsupported(const char *name);

/* Host-backed memory table: every block the device handed out, by kind, so pointer queries and
 * frees can tell ours from foreign pointers (a foreign pointer is refused, never unmapped). */
enum { BLOCK_DEVICE = 0, BLOCK_HOST = 1, BLOCK_RESERVED = 2,
       BLOCK_FAKE = 3 /* address space behind the warm's fake tensors (vvmm.c): device memory to pointer queries */ };
void vdev_add_block(void *start, size_t size, int kind, int dev);
/* removes the block starting exactly at `start` of `kind`; returns its size, 0 when there is none */
size_t vdev_remove_block(void *start, int kind);
/* the device of a device pointer anywhere inside a block (reserved ranges count), else -1 */
int vdev_device_of(const void *p);
/* the block any pointer falls in (all kinds): 1 and its start and size, else 0 */
int vdev_block_of(const void *p, void **start, size_t *size);

/* the device of a stream this library made; -1 for a default stream or a foreign handle */
int vdev_stream_device(const void *s);

/* Kernel launches, counted by vcuda.c; graph capture reads it to count recorded nodes. */
unsigned long long vdev_launches(void);
#endif
