/*
 * pcompile compile-only virtual CUDA device.
 *
 * Preloaded (LD_PRELOAD) into the `pcompile warm` process tree only; its SONAME is libcuda.so.1
 * so every dlopen("libcuda.so.1") in the process (torch's lazy driver stubs, Triton's utilities)
 * binds here and never to a real driver. It answers the CUDA runtime calls torch makes while no
 * kernel runs, and the driver calls Inductor/Triton make while loading compiled kernels, from a
 * device profile captured once on a real board. Kernel launches are counted and swallowed; in
 * strict mode a launch is an error, because on this device it can only produce garbage.
 *
 * No CUDA header is needed: the few types and enum values used are declared below (CUDA 13 ABI).
 *
 * This file holds the device, memory table, modules and launches; vstream.c streams, events, capture
 * and graphs; vvmm.c VMM, pools and synthetic addresses (shared declarations: vdev.h). build.py adds a
 * weak, counted NOT_SUPPORTED stub for every other name in entry_points.txt, the list of what the
 * installed torch/triton/NCCL/cuDNN/cuBLAS can ask for, and cuGetProcAddress resolves to them.
 *
 * Environment:
 *   PCOMPILE_VDEV_PROFILE  flat profile file written by pcompile (required)
 *   PCOMPILE_VDEV_DEVICES  how many devices to expose (default 1, at most MAX_DEVICES); all share the
 *                          one profile, as the GPUs of one node do. The current device is per thread,
 *                          as in CUDA; each allocation remembers the device it was made on.
 *   PCOMPILE_VDEV_STRICT   "1": a native launch fails with a clear error instead of being swallowed
 *   PCOMPILE_VDEV_STATS    file to append this process's call counts to (one JSON line) at exit
 *   PCOMPILE_VDEV_TRACE    "1": print a native backtrace for every refused driver call (debugging)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#include <execinfo.h>
#include <stddef.h>
#include <time.h>
#include "vdev.h"

/* ---------------------------------------------------------------- types (CUDA 13 ABI) --- */
typedef int cudaError_t;
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned x, y, z; } dim3;

enum {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotSupported = 801,
  cudaErrorNotPermitted = 800,
};
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801,
};
/* CUfunction_attribute */
enum {
  FA_MAX_THREADS_PER_BLOCK = 0, FA_SHARED_SIZE_BYTES = 1, FA_CONST_SIZE_BYTES = 2,
  FA_LOCAL_SIZE_BYTES = 3, FA_NUM_REGS = 4, FA_PTX_VERSION = 5, FA_BINARY_VERSION = 6,
  FA_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

#define PROP_BYTES_MAX 4096
#define MAX_DEVICES 64
#define N_ATTRS 256
/* cudaDeviceProp offsets (CUDA 13.0 layout) used as fallbacks for driver queries. */
#define OFF_TOTAL_GLOBAL_MEM 288
#define OFF_MAJOR 360
#define OFF_MINOR 364
#define OFF_PCI_BUS 568
#define OFF_PCI_DEVICE 572
#define OFF_PCI_DOMAIN 576

/* ---------------------------------------------------------------- counters --- */
static const char *CALL_NAMES[] = {
#define NAME_ENTRY(n) #n,
  CALLS(NAME_ENTRY)
#undef NAME_ENTRY
};
unsigned long long g_counts[C__COUNT];

#define MAX_UNSUPPORTED 64
static const char *g_unsupported_names[MAX_UNSUPPORTED];
static unsigned long long g_unsupported_counts[MAX_UNSUPPORTED];
/* Driver entry points asked for by name (cudaGetDriverEntryPoint) that this library lacks: a new
 * torch/CUDA build calling something the device never answered shows up here, by name. */
static char *g_missing_names[MAX_UNSUPPORTED];
static unsigned long long g_missing_counts[MAX_UNSUPPORTED];
/* Device attributes asked for that the profile does not hold (e.g. one a newer CUDA added). */
static unsigned long long g_attr_unknown[N_ATTRS + 1];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---------------------------------------------------------------- profile --- */
static unsigned char g_prop[PROP_BYTES_MAX];
static size_t g_prop_len;
static long long g_attr[N_ATTRS];
static int g_attr_known[N_ATTRS];
static char g_name[256] = "pcompile virtual device (no profile)";
static int g_driver_version = 13000;
static int g_runtime_version = 13000;
static int g_profile_ok;
static int g_strict;
static int g_ndev = 1;                  /* PCOMPILE_VDEV_DEVICES */
static int g_ctx_active[MAX_DEVICES];    /* primary context of device i retained/used */
static char g_ctx_token[MAX_DEVICES];    /* &g_ctx_token[i] is device i's (primary) context handle */
static __thread int t_dev;               /* this thread's current device (cudaSetDevice, cuCtxSetCurrent) */
static __thread cudaError_t t_last_error;
static __thread dim3 t_grid, t_block;
static __thread size_t t_shmem;
static __thread void *t_stream;

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static void load_profile(void) {
  const char *path = getenv("PCOMPILE_VDEV_PROFILE");
  if (!path || !*path) {
    fprintf(stderr, "pcompile vdev: PCOMPILE_VDEV_PROFILE is not set; the virtual device reports no GPU\n");
    return;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "pcompile vdev: cannot read profile %s; the virtual device reports no GPU\n", path);
    return;
  }
  size_t cap = 16384;
  char *line = malloc(cap);
  while (line && fgets(line, (int)cap, f)) {
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    if (!strncmp(line, "name ", 5)) {
      snprintf(g_name, sizeof g_name, "%s", line + 5);
    } else if (!strncmp(line, "prop ", 5)) {
      const char *h = line + 5;
      size_t i = 0;
      while (h[0] && h[1] && i < PROP_BYTES_MAX) {
        int a = hexval(h[0]), b = hexval(h[1]);
        if (a < 0 || b < 0) break;
        g_prop[i++] = (unsigned char)(a * 16 + b);
        h += 2;
      }
      g_prop_len = i;
    } else if (!strncmp(line, "attr ", 5)) {
      int idx;
      long long v;
      if (sscanf(line + 5, "%d %lld", &idx, &v) == 2 && idx >= 0 && idx < N_ATTRS) {
        g_attr[idx] = v;
        g_attr_known[idx] = 1;
      }
    } else if (!strncmp(line, "driver_version ", 15)) {
      g_driver_version = atoi(line + 15);
    } else if (!strncmp(line, "runtime_version ", 16)) {
      g_runtime_version = atoi(line + 16);
    }
  }
  free(line);
  fclose(f);
  g_profile_ok = g_prop_len >= 1008;
  if (!g_profile_ok)
    fprintf(stderr, "pcompile vdev: profile %s has no full cudaDeviceProp; the virtual device reports no GPU\n", path);
}

static void dump_stats(void);

__attribute__((constructor)) static void vdev_init(void) {
  const char *s = getenv("PCOMPILE_VDEV_STRICT");
  g_strict = s && *s && strcmp(s, "0") != 0;
  const char *n = getenv("PCOMPILE_VDEV_DEVICES");
  if (n && *n) {
    g_ndev = atoi(n);
    if (g_ndev < 1 || g_ndev > MAX_DEVICES) {
      fprintf(stderr, "pcompile vdev: PCOMPILE_VDEV_DEVICES=%s is not in 1..%d; exposing 1 device\n", n, MAX_DEVICES);
      g_ndev = 1;
    }
  }
  load_profile();
  atexit(dump_stats);
}

/* Devices exist only with a profile; every one of them has that same profile. */
static int n_devices(void) { return g_profile_ok ? g_ndev : 0; }
static int valid_dev(int d) { return d >= 0 && d < n_devices(); }
static CUcontext ctx_of(int d) { return (CUcontext)&g_ctx_token[d]; }
/* The device whose context handle this is, or -1 for a handle this library did not hand out. */
static int dev_of_ctx(CUcontext c) {
  ptrdiff_t i = (char *)c - g_ctx_token;
  return c && i >= 0 && i < MAX_DEVICES ? (int)i : -1;
}

static int32_t prop_i32(size_t off);
static int32_t prop_i32(size_t off) {
  int32_t v;
  memcpy(&v, g_prop + off, sizeof v);
  return v;
}

/* ---------------------------------------------------------------- stats export --- */
/* Writes {"call": count, ...} into buf; returns the length needed (like snprintf). */
int pcompile_vdev_stats(char *buf, size_t n) {
  size_t used = 0;
  int w;
#define EMIT(...) do { w = snprintf(buf ? buf + (used < n ? used : n) : NULL, used < n ? n - used : 0, __VA_ARGS__); used += (size_t)w; } while (0)
  EMIT("{\"pid\": %d, \"strict\": %d, \"profile\": %d, \"devices\": %d", (int)getpid(), g_strict, g_profile_ok, n_devices());
  for (int i = 0; i < C__COUNT; i++)
    if (g_counts[i]) EMIT(", \"%s\": %llu", CALL_NAMES[i], g_counts[i]);
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MAX_UNSUPPORTED && g_unsupported_names[i]; i++)
    EMIT(", \"unsupported:%s\": %llu", g_unsupported_names[i], g_unsupported_counts[i]);
  for (int i = 0; i < MAX_UNSUPPORTED && g_missing_names[i]; i++)
    EMIT(", \"entry_point_missing:%s\": %llu", g_missing_names[i], g_missing_counts[i]);
  for (int i = 0; i <= N_ATTRS; i++)
    if (g_attr_unknown[i]) EMIT(", \"attr_unknown:%d\": %llu", i, g_attr_unknown[i]);
  pthread_mutex_unlock(&g_lock);
  EMIT("}");
#undef EMIT
  return (int)used;
}

int pcompile_vdev_is_virtual(void) { return 1; }

/* Strictness can be switched at run time: warm turns it on only while Inductor compiles. */
void pcompile_vdev_set_strict(int on) { g_strict = on; }
int pcompile_vdev_launches(void) { return (int)g_counts[C_launch]; }
unsigned long long vdev_launches(void) { return __atomic_load_n(&g_counts[C_launch], __ATOMIC_RELAXED); }

static void dump_stats(void) {
  const char *path = getenv("PCOMPILE_VDEV_STATS");
  if (!path || !*path) return;
  char buf[16384];
  int len = pcompile_vdev_stats(buf, sizeof buf);
  if (len <= 0 || (size_t)len >= sizeof buf) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s\n", buf);
  fclose(f);
}

CUresult not_supported(const char *name);
int pcompile_vdev_unsupported(const char *name) { return not_supported(name); }
CUresult not_supported(const char *name) {
  COUNT(not_supported);
  const char *tr = getenv("PCOMPILE_VDEV_TRACE");
  if (tr && *tr && strcmp(tr, "0") != 0) {
    void *frames[32];
    int n = backtrace(frames, 32);
    fprintf(stderr, "pcompile vdev: refused %s, called from:\n", name);
    backtrace_symbols_fd(frames, n, 2);
  }
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MAX_UNSUPPORTED; i++) {
    if (!g_unsupported_names[i]) {
      g_unsupported_names[i] = name;
      g_unsupported_counts[i] = 1;
      break;
    }
    if (g_unsupported_names[i] == name || !strcmp(g_unsupported_names[i], name)) {
      g_unsupported_counts[i]++;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return CUDA_ERROR_NOT_SUPPORTED;
}

static void note_missing_entry_point(const char *sym) {
  COUNT(entry_point_missing);
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MAX_UNSUPPORTED; i++) {
    if (!g_missing_names[i]) {
      g_missing_names[i] = strdup(sym);
      g_missing_counts[i] = 1;
      break;
    }
    if (!strcmp(g_missing_names[i], sym)) {
      g_missing_counts[i]++;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
}

/* ---------------------------------------------------------------- host-backed memory --- */
/* Every block is an anonymous NORESERVE mapping listed in g_blocks with its kind and device, so a
 * pointer anywhere inside a device block (the caching allocator hands out offsets into its
 * segments) maps back to its device, as the driver's pointer attributes do, and a free of anything
 * this library did not hand out (a foreign or interior pointer, a double free) is refused instead of
 * unmapping someone else's memory. A handful of segments is typical, so a linear scan is enough. */
typedef struct { char *start; size_t size; int kind; int dev; } vblock;
static vblock *g_blocks;
static size_t g_nblocks, g_cap_blocks;

void vdev_add_block(void *start, size_t size, int kind, int dev) {
  pthread_mutex_lock(&g_lock);
  if (g_nblocks == g_cap_blocks) {
    size_t cap = g_cap_blocks ? 2 * g_cap_blocks : 256;
    vblock *grown = realloc(g_blocks, cap * sizeof *grown);
    if (grown) { g_blocks = grown; g_cap_blocks = cap; }
  }
  if (g_nblocks < g_cap_blocks) g_blocks[g_nblocks++] = (vblock){(char *)start, size, kind, dev};
  pthread_mutex_unlock(&g_lock);
}
size_t vdev_remove_block(void *start, int kind) {
  size_t size = 0;
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_nblocks; i++)
    if (g_blocks[i].start == start && g_blocks[i].kind == kind) {
      size = g_blocks[i].size;
      g_blocks[i] = g_blocks[--g_nblocks];
      break;
    }
  pthread_mutex_unlock(&g_lock);
  return size;
}
int vdev_device_of(const void *p) {
  int dev = -1;
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_nblocks; i++)
    if (g_blocks[i].kind != BLOCK_HOST && (const char *)p >= g_blocks[i].start &&
        (const char *)p < g_blocks[i].start + g_blocks[i].size) {
      dev = g_blocks[i].dev;
      break;
    }
  pthread_mutex_unlock(&g_lock);
  return dev;
}
int vdev_current_device(void) { return t_dev; }

/* PCI location of device `dev`: the profile's, on bus + dev (as cudaGetDeviceProperties reports). */
int pcompile_vdev_pci(int dev, int *domain, int *bus, int *device) {
  if (!valid_dev(dev)) return -1;
  *domain = prop_i32(OFF_PCI_DOMAIN);
  *bus = prop_i32(OFF_PCI_BUS) + dev;
  *device = prop_i32(OFF_PCI_DEVICE);
  return 0;
}
/* The ordinal at a PCI location, or -1 (NVML's lookup by bus id, vnvml.c). */
int pcompile_vdev_device_at(int domain, int bus, int device) {
  for (int d = 0; d < n_devices(); d++) {
    int a, b, c;
    if (!pcompile_vdev_pci(d, &a, &b, &c) && a == domain && b == bus && c == device) return d;
  }
  return -1;
}

/* Sizes are rounded to pages, so adjacent blocks never share one and offsets stay 512-aligned. */
static void *vmalloc_kind(size_t size, int kind) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t total = ((size ? size : 1) + page - 1) / page * page;
  void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  vdev_add_block(p, total, kind, t_dev);
  return p;
}
static int vfree_kind(void *p, int kind) {
  if (!p) return 0;
  size_t size = vdev_remove_block(p, kind);
  if (!size) return -1;
  munmap(p, size);
  return 0;
}
static void *vmalloc_device(size_t size) { return vmalloc_kind(size, BLOCK_DEVICE); }
static void *vmalloc(size_t size) { return vmalloc_kind(size, BLOCK_HOST); }
static int device_of(const void *p) { return vdev_device_of(p); }

/* ---------------------------------------------------------------- launches --- */
static cudaError_t on_launch(const void *func, const char *what) {
  COUNT(launch);
  if (!g_strict) return cudaSuccess;
  Dl_info info;
  const char *name = "?";
  if (func && dladdr(func, &info) && info.dli_sname) name = info.dli_sname;
  fprintf(stderr,
          "pcompile vdev (strict): a native CUDA kernel was launched during warm (%s %s); on the virtual "
          "device it computes nothing, so anything read back from it is garbage\n",
          what, name);
  t_last_error = cudaErrorNotPermitted;
  return cudaErrorNotPermitted;
}

/* ================================================================ CUDA runtime ==== */
cudaError_t cudaGetDeviceCount(int *count) {
  COUNT(cudaGetDeviceCount);
  if (!count) return cudaErrorInvalidValue;
  *count = n_devices();
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev) {
  COUNT(cudaGetDevice);
  if (!dev) return cudaErrorInvalidValue;
  *dev = t_dev;
  return cudaSuccess;
}

/* Like CUDA: sets this thread's device and makes its primary context active. */
cudaError_t cudaSetDevice(int dev) {
  COUNT(cudaSetDevice);
  if (!valid_dev(dev)) return cudaErrorInvalidDevice;
  t_dev = dev;
  g_ctx_active[dev] = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(void *prop, int dev) {
  COUNT(cudaGetDeviceProperties);
  if (!prop) return cudaErrorInvalidValue;
  if (!valid_dev(dev)) return cudaErrorInvalidDevice;
  memcpy(prop, g_prop, 1008); /* sizeof(cudaDeviceProp) in CUDA 13 headers */
  int32_t bus = prop_i32(OFF_PCI_BUS) + dev; /* the GPUs of one node sit on distinct buses */
  memcpy((char *)prop + OFF_PCI_BUS, &bus, sizeof bus);
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties_v2(void *prop, int dev) { return cudaGetDeviceProperties(prop, dev); }

cudaError_t cudaDeviceGetAttribute(int *value, int attr, int dev) {
  COUNT(cudaDeviceGetAttribute);
  if (!value) return cudaErrorInvalidValue;
  if (!valid_dev(dev)) return cudaErrorInvalidDevice;
  if (attr < 0 || attr >= N_ATTRS || !g_attr_known[attr]) {
    __atomic_add_fetch(&g_attr_unknown[attr < 0 || attr >= N_ATTRS ? N_ATTRS : attr], 1, __ATOMIC_RELAXED);
    return cudaErrorInvalidValue;
  }
  *value = (int)g_attr[attr];
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  COUNT(cudaDeviceGetStreamPriorityRange);
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}


cudaError_t cudaGetLastError(void) {
  COUNT(cudaGetLastError);
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  COUNT(cudaPeekAtLastError);
  return t_last_error;
}

cudaError_t cudaMalloc(void **p, size_t size) {
  COUNT(cudaMalloc);
  if (!p) return cudaErrorInvalidValue;
  g_ctx_active[t_dev] = 1;
  *p = vmalloc_device(size ? size : 1);
  if (!*p) {
    t_last_error = cudaErrorMemoryAllocation;
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  COUNT(cudaFree);
  g_ctx_active[t_dev] = 1;
  if (vfree_kind(p, BLOCK_DEVICE) != 0) {
    t_last_error = cudaErrorInvalidValue; /* not a pointer cudaMalloc returned (or freed twice) */
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t size) {
  COUNT(cudaMallocHost);
  if (!p) return cudaErrorInvalidValue;
  *p = vmalloc(size ? size : 1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaHostAlloc(void **p, size_t size, unsigned flags) {
  (void)flags;
  COUNT(cudaHostAlloc);
  if (!p) return cudaErrorInvalidValue;
  *p = vmalloc(size ? size : 1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) {
  COUNT(cudaFreeHost);
  return vfree_kind(p, BLOCK_HOST) == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaHostRegister(void *p, size_t size, unsigned flags) {
  (void)p; (void)size; (void)flags;
  COUNT(cudaHostRegister);
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void *p) {
  (void)p;
  COUNT(cudaHostUnregister);
  return cudaSuccess;
}

/* Device memory is host memory here, so every copy direction is a plain memmove. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
  (void)kind;
  COUNT(cudaMemcpy);
  if (n && dst && src) memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s) {
  (void)kind; (void)s;
  COUNT(cudaMemcpyAsync);
  if (n && dst && src) memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemset(void *dst, int v, size_t n) {
  COUNT(cudaMemset);
  if (n && dst) memset(dst, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s) {
  (void)s;
  COUNT(cudaMemsetAsync);
  if (n && dst) memset(dst, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
  COUNT(cudaMemGetInfo);
  size_t total = 0;
  if (g_profile_ok) memcpy(&total, g_prop + OFF_TOTAL_GLOBAL_MEM, sizeof total);
  if (free_b) *free_b = total;
  if (total_b) *total_b = total;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; COUNT(cudaStreamSynchronize); return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { COUNT(cudaDeviceSynchronize); return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t s) { (void)s; COUNT(cudaStreamQuery); return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) {
  (void)s; (void)e; (void)f;
  COUNT(cudaStreamWaitEvent);
  return cudaSuccess;
}


cudaError_t cudaDriverGetVersion(int *v) { COUNT(cudaDriverGetVersion); if (v) *v = g_driver_version; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { COUNT(cudaRuntimeGetVersion); if (v) *v = g_runtime_version; return cudaSuccess; }

cudaError_t cudaDeviceCanAccessPeer(int *can, int a, int b) {
  (void)a; (void)b;
  COUNT(cudaDeviceCanAccessPeer);
  if (can) *can = 0;
  return cudaSuccess;
}

/* Driver entry points asked for by name (cuGetProcAddress, cudaGetDriverEntryPoint: c10's driver
 * table, NCCL, the runtime that cuBLAS/cuDNN link statically) resolve to this library only, at the
 * newest ABI it defines (NAME_vN before NAME), as the driver picks the newest version for a caller
 * built against CUDA 13. Unknown names are reported as missing, by name. */
static void *resolve_entry_point(const char *sym) {
  static void *self;
  if (!self) {
    Dl_info info;
    if (dladdr((void *)&resolve_entry_point, &info) && info.dli_fname)
      self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!self) return NULL;
  }
  if (!sym || !*sym || strlen(sym) > 200) return NULL;
  char name[256];
  for (int v = 9; v >= 2; v--) {
    snprintf(name, sizeof name, "%s_v%d", sym, v);
    void *p = dlsym(self, name);
    if (p) return p;
  }
  void *p = dlsym(self, sym);
  if (!p) note_missing_entry_point(sym);
  return p;
}
cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned ver, unsigned long long flags,
                                             int *status) {
  (void)ver; (void)flags;
  COUNT(cudaGetDriverEntryPoint);
  void *p = resolve_entry_point(sym);
  if (fn) *fn = p;
  if (status) *status = p ? 0 : 1; /* cudaDriverEntryPointSuccess / SymbolNotFound */
  return cudaSuccess;
}
cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags, int *status) {
  return cudaGetDriverEntryPointByVersion(sym, fn, 13000, flags, status);
}
CUresult cuGetProcAddress_v2(const char *sym, void **fn, int ver, unsigned long long flags, int *status) {
  (void)ver; (void)flags;
  COUNT(cuGetProcAddress);
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  *fn = resolve_entry_point(sym);
  if (status) *status = *fn ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / SYMBOL_NOT_FOUND */
  return *fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
CUresult cuGetProcAddress(const char *sym, void **fn, int ver, unsigned long long flags) {
  return cuGetProcAddress_v2(sym, fn, ver, flags, NULL);
}

/* ---- fat binary registration (static constructors of every CUDA library linked to cudart) ---
 * Kernels need nothing registered: a launch is swallowed by its host stub's address. Device
 * variables get host-backed device memory on first use, so cudaGetSymbolAddress and
 * cudaMemcpyToSymbol work on them. */
static void *g_fatbin_token[1];
void **__cudaRegisterFatBinary(void *fatbin) { (void)fatbin; return g_fatbin_token; }
void __cudaRegisterFatBinaryEnd(void **h) { (void)h; }
void __cudaUnregisterFatBinary(void **h) { (void)h; }
char __cudaInitModule(void **h) { (void)h; return 1; }
void __cudaRegisterFunction(void **h, const char *host, char *dev, const char *name, int limit, void *tid, void *bid,
                            void *bdim, void *gdim, int *wsize) {
  (void)h; (void)host; (void)dev; (void)name; (void)limit; (void)tid; (void)bid; (void)bdim; (void)gdim; (void)wsize;
}
typedef struct { const void *host; size_t size; void *dev; } vsymbol;
static vsymbol *g_symbols;
static size_t g_nsymbols, g_cap_symbols;
void __cudaRegisterVar(void **h, char *host, char *dev, const char *name, int ext, size_t size, int constant, int global) {
  (void)h; (void)dev; (void)name; (void)ext; (void)constant; (void)global;
  pthread_mutex_lock(&g_lock);
  if (g_nsymbols == g_cap_symbols) {
    size_t cap = g_cap_symbols ? 2 * g_cap_symbols : 64;
    vsymbol *grown = realloc(g_symbols, cap * sizeof *grown);
    if (grown) { g_symbols = grown; g_cap_symbols = cap; }
  }
  if (g_nsymbols < g_cap_symbols) g_symbols[g_nsymbols++] = (vsymbol){host, size, NULL};
  pthread_mutex_unlock(&g_lock);
}
static void *vmalloc_device(size_t size);
static void *symbol_address(const void *host, size_t *size) {
  void *out = NULL;
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_nsymbols; i++)
    if (g_symbols[i].host == host) {
      if (!g_symbols[i].dev) {
        pthread_mutex_unlock(&g_lock); /* vmalloc takes the lock */
        void *mem = vmalloc_device(g_symbols[i].size);
        pthread_mutex_lock(&g_lock);
        if (!g_symbols[i].dev) g_symbols[i].dev = mem;
      }
      out = g_symbols[i].dev;
      if (size) *size = g_symbols[i].size;
      break;
    }
  pthread_mutex_unlock(&g_lock);
  return out;
}
cudaError_t cudaGetSymbolAddress(void **p, const void *symbol) {
  if (!p) return cudaErrorInvalidValue;
  *p = symbol_address(symbol, NULL);
  return *p ? cudaSuccess : 13; /* cudaErrorInvalidSymbol */
}
cudaError_t cudaGetSymbolSize(size_t *n, const void *symbol) {
  if (!n) return cudaErrorInvalidValue;
  return symbol_address(symbol, n) ? cudaSuccess : 13;
}
cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n, size_t off, int kind) {
  (void)kind;
  size_t size = 0;
  char *dst = symbol_address(symbol, &size);
  if (!dst) return 13;
  if (off + n > size) return cudaErrorInvalidValue;
  if (n && src) memmove(dst + off, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t n, size_t off, int kind, cudaStream_t s) {
  (void)s;
  return cudaMemcpyToSymbol(symbol, src, n, off, kind);
}

/* Occupancy: as many blocks per SM as the thread limit allows (no kernel runs, launch math only). */
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *fn, int block, size_t smem, unsigned f) {
  (void)fn; (void)smem; (void)f;
  if (!n || block <= 0) return cudaErrorInvalidValue;
  int per_sm = g_attr_known[39] ? (int)g_attr[39] : 2048; /* MAX_THREADS_PER_MULTIPROCESSOR */
  *n = per_sm / block > 0 ? per_sm / block : 1;
  if (*n > 32) *n = 32;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *fn, int block, size_t smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, fn, block, smem, 0);
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction fn, int block, size_t smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, fn, block, smem, 0);
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction fn, int block, size_t smem, unsigned f) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, fn, block, smem, f);
}

/* The block a pointer falls in (cuMemGetAddressRange: torch's IPC and expandable segments ask). */
int vdev_block_of(const void *p, void **start, size_t *size) {
  int found = 0;
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_nblocks; i++)
    if ((const char *)p >= g_blocks[i].start && (const char *)p < g_blocks[i].start + g_blocks[i].size) {
      if (start) *start = g_blocks[i].start;
      if (size) *size = g_blocks[i].size;
      found = 1;
      break;
    }
  pthread_mutex_unlock(&g_lock);
  return found;
}

cudaError_t cudaPointerGetAttributes(void *attrs, const void *ptr) {
  COUNT(cudaPointerGetAttributes);
  /* struct cudaPointerAttributes { int type; int device; void *devicePointer; void *hostPointer; } */
  if (!attrs) return cudaErrorInvalidValue;
  int dev = device_of(ptr);
  memset(attrs, 0, 24);
  if (dev < 0) return cudaSuccess; /* cudaMemoryTypeUnregistered: plain host memory */
  ((int *)attrs)[0] = 2; /* cudaMemoryTypeDevice */
  ((int *)attrs)[1] = dev;
  ((void **)attrs)[1] = (void *)ptr;
  return cudaSuccess;
}

static const char *STRICT_MSG =
    "pcompile virtual device (strict mode): a native CUDA kernel was launched while warming; it computes "
    "nothing here, so its result would be garbage. Run this step on CPU, or drop --strict to only count it";

const char *cudaGetErrorString(cudaError_t e) {
  COUNT(cudaGetErrorString);
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal (pcompile virtual device)";
    case cudaErrorNotPermitted: return STRICT_MSG;
    case cudaErrorNotSupported: return "operation not supported on the pcompile virtual device";
    default: return "unknown error (pcompile virtual device)";
  }
}
const char *cudaGetErrorName(cudaError_t e) {
  COUNT(cudaGetErrorName);
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotPermitted: return "cudaErrorNotPermitted";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

/* ---- launch ABI used by nvcc-generated host stubs (<<<...>>>) --- */
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, void *stream) {
  COUNT(cudaPushCallConfiguration);
  t_grid = grid;
  t_block = block;
  t_shmem = shmem;
  t_stream = stream;
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream) {
  COUNT(cudaPopCallConfiguration);
  if (grid) *grid = t_grid;
  if (block) *block = t_block;
  if (shmem) *shmem = t_shmem;
  if (stream) *(void **)stream = t_stream;
  return cudaSuccess;
}
/* The kernel handle is the host stub's address, so strict mode can name the kernel. */
cudaError_t __cudaGetKernel(void **kernel, const void *entry) {
  COUNT(cudaGetKernel);
  if (kernel) *kernel = (void *)entry;
  return cudaSuccess;
}
cudaError_t __cudaLaunchKernel(const void *kernel, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s) {
  (void)grid; (void)block; (void)args; (void)shmem; (void)s;
  return on_launch(kernel, "kernel");
}
cudaError_t __cudaLaunchKernel_ptsz(const void *kernel, dim3 grid, dim3 block, void **args, size_t shmem,
                                    cudaStream_t s) {
  return __cudaLaunchKernel(kernel, grid, block, args, shmem, s);
}
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s) {
  (void)grid; (void)block; (void)args; (void)shmem; (void)s;
  return on_launch(func, "kernel");
}
cudaError_t cudaLaunchKernelExC(const void *config, const void *func, void **args) {
  (void)config; (void)args;
  return on_launch(func, "kernel");
}

/* ================================================================ CUDA driver ==== */
CUresult cuInit(unsigned flags) { (void)flags; COUNT(cuInit); return g_profile_ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
CUresult cuDriverGetVersion(int *v) { COUNT(cuDriverGetVersion); if (v) *v = g_driver_version; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *n) { COUNT(cuDeviceGetCount); if (n) *n = n_devices(); return CUDA_SUCCESS; }
/* A CUdevice is its ordinal. */
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  COUNT(cuDeviceGet);
  if (!valid_dev(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  if (d) *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  (void)d;
  COUNT(cuDeviceGetName);
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "%s", g_name);
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  (void)d;
  COUNT(cuDeviceTotalMem);
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  memcpy(bytes, g_prop + OFF_TOTAL_GLOBAL_MEM, sizeof *bytes);
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) { return cuDeviceTotalMem_v2(bytes, d); }
CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice d) {
  COUNT(cuDeviceGetAttribute);
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
  if (attr < 0 || attr >= N_ATTRS || !g_attr_known[attr]) {
    __atomic_add_fetch(&g_attr_unknown[attr < 0 || attr >= N_ATTRS ? N_ATTRS : attr], 1, __ATOMIC_RELAXED);
    return CUDA_ERROR_INVALID_VALUE;
  }
  *value = (int)g_attr[attr];
  return CUDA_SUCCESS;
}
CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice d) {
  (void)d;
  if (major) *major = prop_i32(OFF_MAJOR);
  if (minor) *minor = prop_i32(OFF_MINOR);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags, int *active) {
  COUNT(cuDevicePrimaryCtxGetState);
  if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
  if (flags) *flags = 0;
  if (active) *active = g_ctx_active[d];
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d) {
  COUNT(cuDevicePrimaryCtxRetain);
  if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
  g_ctx_active[d] = 1;
  if (ctx) *ctx = ctx_of(d);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease(CUdevice d) { (void)d; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return CUDA_SUCCESS; }
/* The driver's current context is the runtime's current device, as with primary contexts. */
CUresult cuCtxGetCurrent(CUcontext *ctx) {
  COUNT(cuCtxGetCurrent);
  if (ctx) *ctx = g_ctx_active[t_dev] ? ctx_of(t_dev) : NULL;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext ctx) {
  COUNT(cuCtxSetCurrent);
  int d = dev_of_ctx(ctx);
  if (ctx && !valid_dev(d)) return CUDA_ERROR_INVALID_HANDLE;
  if (ctx) {
    t_dev = d;
    g_ctx_active[d] = 1;
  }
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *d) { COUNT(cuCtxGetDevice); if (d) *d = t_dev; return CUDA_SUCCESS; }
CUresult cuCtxSynchronize(void) { COUNT(cuCtxSynchronize); return CUDA_SUCCESS; }
/* A small per-thread context stack: push makes ctx current, pop restores the previous one. */
#define CTX_STACK 16
static __thread int t_ctx_stack[CTX_STACK];
static __thread int t_ctx_depth;
CUresult cuCtxPushCurrent(CUcontext c) {
  int d = dev_of_ctx(c);
  if (!valid_dev(d)) return CUDA_ERROR_INVALID_HANDLE;
  if (t_ctx_depth < CTX_STACK) t_ctx_stack[t_ctx_depth++] = t_dev;
  t_dev = d;
  g_ctx_active[d] = 1;
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent_v2(CUcontext c) { return cuCtxPushCurrent(c); }
CUresult cuCtxPopCurrent(CUcontext *c) {
  if (c) *c = ctx_of(t_dev);
  if (t_ctx_depth > 0) t_dev = t_ctx_stack[--t_ctx_depth];
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(CUcontext *c) { return cuCtxPopCurrent(c); }
CUresult cuCtxGetLimit(size_t *v, int limit) { (void)limit; if (v) *v = 0; return CUDA_SUCCESS; }
CUresult cuCtxSetLimit(int limit, size_t v) { (void)limit; (void)v; return CUDA_SUCCESS; }

/* torch (c10::cuda::CUDAErrorLogCapture, 2.14 on) registers a driver-log callback at CUDA init, to
 * add the driver's own message to a CUDA error. The virtual device writes no driver logs: the
 * callback is accepted and never called. Refused, it showed as a refused call in every warm. */
static char g_logs_handle;
CUresult cuLogsRegisterCallback(void *callback, void *user_data, void **handle_out) {
  (void)callback; (void)user_data;
  COUNT(cuLogsRegisterCallback);
  if (handle_out) *handle_out = &g_logs_handle;
  return CUDA_SUCCESS;
}
CUresult cuLogsUnregisterCallback(void *handle) {
  COUNT(cuLogsUnregisterCallback);
  return handle == &g_logs_handle ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
  COUNT(cuGetErrorString);
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  switch (e) {
    case CUDA_SUCCESS: *s = "no error"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "operation not supported on the pcompile virtual device"; break;
    case CUDA_ERROR_NOT_PERMITTED: *s = STRICT_MSG; break;
    case CUDA_ERROR_INVALID_IMAGE: *s = "device kernel image is invalid (pcompile virtual device reads cubin ELF only)"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "named symbol not found"; break;
    default: *s = "error (pcompile virtual device)"; break;
  }
  return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult e, const char **s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = e == CUDA_SUCCESS ? "CUDA_SUCCESS" : e == CUDA_ERROR_NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED" : "CUDA_ERROR";
  return CUDA_SUCCESS;
}

/* ---- cubin ELF parsing: the numbers ptxas decided, as the real driver reports them --- */
typedef struct {
  unsigned char *image;
  size_t size;
  unsigned elf_flags;
  int dev; /* the device whose context was current at load: its functions run there only */
} vmodule;

typedef struct {
  vmodule *mod;
  int regs;
  int frame;
  int max_threads;
  int static_smem;
  int const_size;
  int binary_version;
} vfunction;

#pragma pack(push, 1)
typedef struct {
  unsigned char e_ident[16];
  uint16_t e_type, e_machine;
  uint32_t e_version;
  uint64_t e_entry, e_phoff, e_shoff;
  uint32_t e_flags;
  uint16_t e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx;
} Elf64Hdr;
typedef struct {
  uint32_t sh_name, sh_type;
  uint64_t sh_flags, sh_addr, sh_offset, sh_size;
  uint32_t sh_link, sh_info;
  uint64_t sh_addralign, sh_entsize;
} Elf64Shdr;
typedef struct {
  uint32_t st_name;
  unsigned char st_info, st_other;
  uint16_t st_shndx;
  uint64_t st_value, st_size;
} Elf64Sym;
#pragma pack(pop)

#define SHT_SYMTAB 2
#define EIATTR_MAX_THREADS 0x05
#define EIATTR_REQNTID 0x10
#define EIATTR_FRAME_SIZE 0x11
#define EIATTR_REGCOUNT 0x2f
#define EIFMT_NVAL 0x01
#define EIFMT_BVAL 0x02
#define EIFMT_HVAL 0x03
#define EIFMT_SVAL 0x04

static size_t elf_extent(const unsigned char *img) {
  const Elf64Hdr *h = (const Elf64Hdr *)img;
  size_t end = h->e_shoff + (size_t)h->e_shnum * h->e_shentsize;
  size_t ph_end = h->e_phoff + (size_t)h->e_phnum * h->e_phentsize;
  if (ph_end > end) end = ph_end;
  for (unsigned i = 0; i < h->e_shnum; i++) {
    const Elf64Shdr *s = (const Elf64Shdr *)(img + h->e_shoff + (size_t)i * h->e_shentsize);
    if (s->sh_type != 8 /* NOBITS */ && s->sh_offset + s->sh_size > end) end = s->sh_offset + s->sh_size;
  }
  return end;
}

static const Elf64Shdr *elf_section(const vmodule *m, unsigned i) {
  const Elf64Hdr *h = (const Elf64Hdr *)m->image;
  if (i >= h->e_shnum) return NULL;
  return (const Elf64Shdr *)(m->image + h->e_shoff + (size_t)i * h->e_shentsize);
}

static const char *elf_section_name(const vmodule *m, const Elf64Shdr *s) {
  const Elf64Hdr *h = (const Elf64Hdr *)m->image;
  const Elf64Shdr *strs = elf_section(m, h->e_shstrndx);
  if (!strs || s->sh_name >= strs->sh_size) return "";
  return (const char *)(m->image + strs->sh_offset + s->sh_name);
}

static const Elf64Shdr *elf_find_section(const vmodule *m, const char *name) {
  const Elf64Hdr *h = (const Elf64Hdr *)m->image;
  for (unsigned i = 0; i < h->e_shnum; i++) {
    const Elf64Shdr *s = elf_section(m, i);
    if (s && !strcmp(elf_section_name(m, s), name)) return s;
  }
  return NULL;
}

/* Walks an .nv.info-style attribute list; calls fn for each record. */
typedef void (*eiattr_fn)(int attr, const unsigned char *val, unsigned len, void *ctx);
static void walk_nvinfo(const vmodule *m, const Elf64Shdr *s, eiattr_fn fn, void *ctx) {
  if (!s) return;
  const unsigned char *p = m->image + s->sh_offset, *end = p + s->sh_size;
  while (p + 2 <= end) {
    int fmt = p[0], attr = p[1];
    p += 2;
    unsigned len = 0;
    if (fmt == EIFMT_NVAL) len = 0;
    else if (fmt == EIFMT_BVAL) len = 1;
    else if (fmt == EIFMT_HVAL) len = 2;
    else if (fmt == EIFMT_SVAL) {
      if (p + 2 > end) break;
      len = (unsigned)(p[0] | (p[1] << 8));
      p += 2;
    } else break;
    if (p + len > end) break;
    fn(attr, p, len, ctx);
    p += len;
  }
}

struct global_ctx { uint32_t sym; vfunction *f; };
static void on_global_attr(int attr, const unsigned char *v, unsigned len, void *vctx) {
  struct global_ctx *c = vctx;
  if (len < 8) return;
  uint32_t sym, val;
  memcpy(&sym, v, 4);
  memcpy(&val, v + 4, 4);
  if (sym != c->sym) return;
  if (attr == EIATTR_REGCOUNT) c->f->regs = (int)val;
  else if (attr == EIATTR_FRAME_SIZE) c->f->frame = (int)val;
}
static void on_func_attr(int attr, const unsigned char *v, unsigned len, void *vctx) {
  vfunction *f = vctx;
  if ((attr == EIATTR_MAX_THREADS || attr == EIATTR_REQNTID) && len >= 12) {
    uint32_t x, y, z;
    memcpy(&x, v, 4); memcpy(&y, v + 4, 4); memcpy(&z, v + 8, 4);
    long long n = (long long)(x ? x : 1) * (y ? y : 1) * (z ? z : 1);
    if (n > 0 && (f->max_threads == 0 || n < f->max_threads)) f->max_threads = (int)n;
  }
}

/* Register-file limit on threads per block, as the hardware allocates: per warp, in units of 256. */
static int reg_limited_threads(int regs) {
  int regs_per_block = g_attr_known[12] ? (int)g_attr[12] : 65536; /* MAX_REGISTERS_PER_BLOCK */
  int max_block = g_attr_known[1] ? (int)g_attr[1] : 1024;         /* MAX_THREADS_PER_BLOCK */
  if (regs <= 0) return max_block;
  int per_warp = ((regs * 32 + 255) / 256) * 256;
  int warps = regs_per_block / per_warp;
  int t = warps * 32;
  return t < max_block ? t : max_block;
}

static CUresult load_module(CUmodule *out, const void *image) {
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  const unsigned char *img = image;
  if (memcmp(img, "\x7f" "ELF", 4) != 0 || img[4] != 2 /* ELFCLASS64 */) return CUDA_ERROR_INVALID_IMAGE;
  size_t size = elf_extent(img);
  vmodule *m = calloc(1, sizeof *m);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  m->image = malloc(size);
  if (!m->image) { free(m); return CUDA_ERROR_OUT_OF_MEMORY; }
  memcpy(m->image, img, size);
  m->size = size;
  m->elf_flags = ((const Elf64Hdr *)img)->e_flags;
  m->dev = t_dev;
  g_ctx_active[t_dev] = 1;
  *out = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *out, const void *image) {
  COUNT(cuModuleLoadData);
  return load_module(out, image);
}
CUresult cuModuleLoadDataEx(CUmodule *out, const void *image, unsigned n, void *opts, void **vals) {
  (void)n; (void)opts; (void)vals;
  COUNT(cuModuleLoadData);
  return load_module(out, image);
}
CUresult cuModuleLoad(CUmodule *out, const char *path) {
  COUNT(cuModuleLoadData);
  FILE *f = path ? fopen(path, "rb") : NULL;
  if (!f) return CUDA_ERROR_NOT_FOUND;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = n > 0 ? malloc((size_t)n) : NULL;
  CUresult r = CUDA_ERROR_INVALID_IMAGE;
  if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n && n >= (long)sizeof(Elf64Hdr)) r = load_module(out, buf);
  free(buf);
  fclose(f);
  return r;
}
CUresult cuModuleUnload(CUmodule mod) {
  COUNT(cuModuleUnload);
  vmodule *m = mod;
  if (m) { free(m->image); free(m); }
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *out, CUmodule mod, const char *name) {
  COUNT(cuModuleGetFunction);
  vmodule *m = mod;
  if (!out || !m || !name) return CUDA_ERROR_INVALID_VALUE;
  const Elf64Hdr *h = (const Elf64Hdr *)m->image;
  uint32_t sym_index = 0;
  int found = 0;
  for (unsigned i = 0; i < h->e_shnum && !found; i++) {
    const Elf64Shdr *s = elf_section(m, i);
    if (!s || s->sh_type != SHT_SYMTAB || !s->sh_entsize) continue;
    const Elf64Shdr *strs = elf_section(m, s->sh_link);
    if (!strs) continue;
    size_t n = s->sh_size / s->sh_entsize;
    for (size_t k = 0; k < n; k++) {
      const Elf64Sym *sym = (const Elf64Sym *)(m->image + s->sh_offset + k * s->sh_entsize);
      if (sym->st_name < strs->sh_size && (sym->st_info & 0xf) == 2 /* STT_FUNC */ &&
          !strcmp((const char *)(m->image + strs->sh_offset + sym->st_name), name)) {
        sym_index = (uint32_t)k;
        found = 1;
        break;
      }
    }
  }
  if (!found) return CUDA_ERROR_NOT_FOUND;
  vfunction *f = calloc(1, sizeof *f);
  if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
  f->mod = m;
  f->binary_version = (int)(m->elf_flags & 0xff);
  struct global_ctx gctx = {sym_index, f};
  walk_nvinfo(m, elf_find_section(m, ".nv.info"), on_global_attr, &gctx);
  char sec[512];
  snprintf(sec, sizeof sec, ".nv.info.%s", name);
  walk_nvinfo(m, elf_find_section(m, sec), on_func_attr, f);
  int reg_limit = reg_limited_threads(f->regs);
  if (f->max_threads == 0 || reg_limit < f->max_threads) f->max_threads = reg_limit;
  snprintf(sec, sizeof sec, ".nv.shared.%s", name);
  const Elf64Shdr *sh = elf_find_section(m, sec);
  f->static_smem = sh ? (int)sh->sh_size : 0;
  snprintf(sec, sizeof sec, ".nv.constant0.%s", name);
  sh = elf_find_section(m, sec);
  f->const_size = 0; /* user __constant__ data lives in .nv.constant3; bank 0 is parameters */
  (void)sh;
  *out = f;
  return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *value, int attr, CUfunction fn) {
  COUNT(cuFuncGetAttribute);
  vfunction *f = fn;
  if (!value || !f) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case FA_MAX_THREADS_PER_BLOCK: *value = f->max_threads; break;
    case FA_SHARED_SIZE_BYTES: *value = f->static_smem; break;
    case FA_CONST_SIZE_BYTES: *value = f->const_size; break;
    case FA_LOCAL_SIZE_BYTES: *value = f->frame; break;
    case FA_NUM_REGS: *value = f->regs; break;
    case FA_PTX_VERSION: *value = f->binary_version; break;
    case FA_BINARY_VERSION: *value = f->binary_version; break;
    case FA_MAX_DYNAMIC_SHARED_SIZE_BYTES: {
      int optin = g_attr_known[97] ? (int)g_attr[97] : 232448; /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
      *value = optin - f->static_smem;
      break;
    }
    default: *value = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction fn, int attr, int value) {
  (void)fn; (void)attr; (void)value;
  COUNT(cuFuncSetAttribute);
  return CUDA_SUCCESS;
}
CUresult cuFuncSetCacheConfig(CUfunction fn, int cfg) {
  (void)fn; (void)cfg;
  COUNT(cuFuncSetCacheConfig);
  return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction fn, const void *cfg) {
  (void)fn; (void)cfg;
  COUNT(cuOccupancyMaxActiveClusters);
  if (n) *n = 1;
  return CUDA_SUCCESS;
}

/* Launchers check that each pointer argument is device memory (CUpointer_attribute values below). */
CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr) {
  COUNT(cuPointerGetAttribute);
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  int dev = device_of((const void *)(uintptr_t)ptr);
  if (dev < 0) return CUDA_ERROR_INVALID_VALUE; /* what the driver says for plain host memory */
  switch (attr) {
    case 1: *(CUcontext *)data = ctx_of(dev); break;          /* CONTEXT */
    case 2: *(unsigned *)data = 2; break;                      /* MEMORY_TYPE: CU_MEMORYTYPE_DEVICE */
    case 3: *(CUdeviceptr *)data = ptr; break;                 /* DEVICE_POINTER */
    case 8: *(unsigned *)data = 0; break;                      /* IS_MANAGED */
    case 9: *(int *)data = dev; break;                         /* DEVICE_ORDINAL */
    default: return not_supported("cuPointerGetAttribute(attribute)");
  }
  return CUDA_SUCCESS;
}

/* A function runs only in the context it was loaded into, on a stream of that device, as on a
 * real driver: a kernel bound to the wrong GPU fails here instead of passing unnoticed. */
static CUresult check_launch_device(CUfunction fn, CUstream s) {
  const vfunction *f = fn;
  int sdev = vdev_stream_device(s);
  if (!f || !f->mod || (f->mod->dev == t_dev && (sdev < 0 || sdev == t_dev))) return CUDA_SUCCESS;
  fprintf(stderr, "pcompile vdev: kernel loaded on device %d launched with device %d current, stream of device %d\n",
          f->mod->dev, t_dev, sdev);
  return CUDA_ERROR_INVALID_HANDLE;
}

/* Driver-level launches (Triton's launcher, torch's static launcher): counted, swallowed. */
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream s, void **params, void **extra) {
  (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)params; (void)extra;
  COUNT(cuLaunchKernel);
  CUresult r = check_launch_device(f, s);
  if (r != CUDA_SUCCESS) return r;
  return on_launch(NULL, "driver kernel") == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_NOT_PERMITTED;
}
/* CUlaunchConfig starts with gridDimX..Z, blockDimX..Z, sharedMemBytes (7 unsigned), then hStream. */
CUresult cuLaunchKernelEx(const void *cfg, CUfunction f, void **params, void **extra) {
  (void)params; (void)extra;
  COUNT(cuLaunchKernel);
  CUresult r = check_launch_device(f, cfg ? *(CUstream *)((const char *)cfg + 8 * sizeof(unsigned)) : NULL);
  if (r != CUDA_SUCCESS) return r;
  return on_launch(NULL, "driver kernel") == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_NOT_PERMITTED;
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shmem, CUstream s, void **params) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

/* Every other entry point the installed libraries can ask for is a generated weak stub (build.py,
 * entry_points.txt): present, counted by name, and refused with CUDA_ERROR_NOT_SUPPORTED. */
