/*
 * Virtual memory management, memory pools and synthetic addresses of the virtual device.
 *
 * The allocator settings a script may set work as on a GPU: `expandable_segments:True` drives the
 * driver's VMM calls (reserve an address range, create physical allocations, map them into it,
 * set access, unmap, release, free the range) and `backend:cudaMallocAsync` the stream-ordered
 * allocator with its pools. VMM is backed by host memory the same way: a reservation is a
 * PROT_NONE NORESERVE mapping (address space only), a physical allocation is a memfd of its size
 * (sparse until touched), and cuMemMap maps that file into the reservation with MAP_FIXED, so
 * bytes written through one mapping are there for every other mapping of the same handle.
 *
 * pcompile_vdev_fake_address gives tensors that have no memory at all (the warm's fake tensors)
 * distinct, stable, non-zero, 512-aligned device addresses from address space reserved here, so
 * they never collide with a real allocation of this process.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "vdev.h"

#define GRANULARITY (2u << 20) /* what a GPU reports for device memory: 2 MiB */
#define HANDLE_MAGIC 0x76686e64u
#define DEAD_MAGIC 0xdeadbeefu

/* A physical allocation: its memfd, size and device (CUmemGenericAllocationHandle is a pointer to it). */
typedef struct { unsigned magic; int fd; size_t size; int dev; int refs; } vphys;

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option) {
  (void)prop; (void)option;
  if (!g) return VDEV_INVALID_VALUE;
  *g = GRANULARITY;
  return VDEV_OK;
}

/* CUmemAllocationProp: {type, requestedHandleTypes, location{type, id}, win32Handle, allocFlags} */
CUresult cuMemCreate(unsigned long long *handle, size_t size, const int *prop, unsigned long long flags) {
  (void)flags;
  COUNT(cuMemCreate);
  if (!handle || !size || size % GRANULARITY) return VDEV_INVALID_VALUE;
  vphys *p = calloc(1, sizeof *p);
  if (!p) return VDEV_OUT_OF_MEMORY;
  p->fd = memfd_create("pcompile-vdev-phys", MFD_CLOEXEC);
  if (p->fd < 0 || ftruncate(p->fd, (off_t)size) != 0) {
    if (p->fd >= 0) close(p->fd);
    free(p);
    return VDEV_OUT_OF_MEMORY;
  }
  p->magic = HANDLE_MAGIC;
  p->size = size;
  p->dev = prop ? prop[3] : vdev_current_device(); /* location.id */
  p->refs = 1;
  *handle = (unsigned long long)(uintptr_t)p;
  return VDEV_OK;
}
static vphys *as_phys(unsigned long long h) {
  vphys *p = (vphys *)(uintptr_t)h;
  return p && p->magic == HANDLE_MAGIC ? p : NULL;
}
static void phys_unref(vphys *p) {
  if (--p->refs > 0) return;
  close(p->fd);
  p->magic = DEAD_MAGIC;
  free(p);
}
/* Released handles stay valid while mapped (the mapping holds the file), as on the driver. */
CUresult cuMemRelease(unsigned long long handle) {
  COUNT(cuMemRelease);
  vphys *p = as_phys(handle);
  if (!p) return VDEV_INVALID_VALUE;
  phys_unref(p);
  return VDEV_OK;
}
CUresult cuMemRetainAllocationHandle(unsigned long long *handle, void *addr) {
  (void)handle; (void)addr;
  return pcompile_vdev_unsupported("cuMemRetainAllocationHandle");
}
CUresult cuMemGetAllocationPropertiesFromHandle(int *prop, unsigned long long handle) {
  vphys *p = as_phys(handle);
  if (!p || !prop) return VDEV_INVALID_VALUE;
  memset(prop, 0, 32);
  prop[0] = 1; /* CU_MEM_ALLOCATION_TYPE_PINNED */
  prop[1] = 1; /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
  prop[2] = 1; /* CU_MEM_LOCATION_TYPE_DEVICE */
  prop[3] = p->dev;
  return VDEV_OK;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
  (void)align; (void)flags;
  COUNT(cuMemAddressReserve);
  if (!ptr || !size) return VDEV_INVALID_VALUE;
  size = round_up(size, GRANULARITY);
  /* over-reserve by one granule so the start can be aligned to it, then trim the ends */
  char *raw = mmap(addr ? (void *)(uintptr_t)addr : NULL, size + GRANULARITY, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return VDEV_OUT_OF_MEMORY;
  char *start = (char *)round_up((size_t)(uintptr_t)raw, GRANULARITY);
  if (start > raw) munmap(raw, (size_t)(start - raw));
  size_t tail = (size_t)(raw + size + GRANULARITY - (start + size));
  if (tail) munmap(start + size, tail);
  vdev_add_block(start, size, BLOCK_RESERVED, vdev_current_device());
  *ptr = (CUdeviceptr)(uintptr_t)start;
  return VDEV_OK;
}
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  COUNT(cuMemAddressFree);
  size_t had = vdev_remove_block((void *)(uintptr_t)ptr, BLOCK_RESERVED);
  if (!had || round_up(size, GRANULARITY) != had) {
    if (had) vdev_add_block((void *)(uintptr_t)ptr, had, BLOCK_RESERVED, vdev_current_device());
    return VDEV_INVALID_VALUE;
  }
  munmap((void *)(uintptr_t)ptr, had);
  return VDEV_OK;
}
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long handle, unsigned long long flags) {
  (void)flags;
  COUNT(cuMemMap);
  vphys *p = as_phys(handle);
  if (!p || !size || offset + size > p->size || vdev_device_of((void *)(uintptr_t)ptr) < 0 ||
      vdev_device_of((void *)(uintptr_t)(ptr + size - 1)) < 0)
    return VDEV_INVALID_VALUE;
  void *m = mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, p->fd, (off_t)offset);
  return m == MAP_FAILED ? VDEV_OUT_OF_MEMORY : VDEV_OK;
}
/* Back to reserved-only address space: the range stays ours, its pages are dropped. */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  COUNT(cuMemUnmap);
  if (!size || vdev_device_of((void *)(uintptr_t)ptr) < 0) return VDEV_INVALID_VALUE;
  void *m = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return m == MAP_FAILED ? VDEV_INVALID_VALUE : VDEV_OK;
}
/* Mapping already made the range readable and writable for the one process that sees it. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count) {
  (void)desc; (void)count;
  return size && vdev_device_of((void *)(uintptr_t)ptr) >= 0 ? VDEV_OK : VDEV_INVALID_VALUE;
}
CUresult cuMemExportToShareableHandle(void *out, unsigned long long handle, int type, unsigned long long flags) {
  (void)flags;
  vphys *p = as_phys(handle);
  if (!p || !out) return VDEV_INVALID_VALUE;
  if (type != 1) return pcompile_vdev_unsupported("cuMemExportToShareableHandle(non-fd)");
  int fd = dup(p->fd);
  if (fd < 0) return VDEV_OUT_OF_MEMORY;
  *(int *)out = fd;
  return VDEV_OK;
}

/* The reservation or allocation a pointer falls in (torch's IPC and expandable segments ask). */
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
  void *start = NULL;
  size_t n = 0;
  if (!vdev_block_of((void *)(uintptr_t)ptr, &start, &n)) return VDEV_NOT_FOUND;
  if (base) *base = (CUdeviceptr)(uintptr_t)start;
  if (size) *size = n;
  return VDEV_OK;
}

/* ------------------------------------------------ stream-ordered allocator and pools --- */
/* backend:cudaMallocAsync: allocations come from the same host-backed blocks as cudaMalloc. */
extern cudaError_t cudaMalloc(void **p, size_t size);
extern cudaError_t cudaFree(void *p);
static char g_pool_token[64]; /* every device's default pool: one opaque handle per device */
cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s) { (void)s; COUNT(cudaMallocAsync); return cudaMalloc(p, size); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { (void)s; COUNT(cudaFreeAsync); return cudaFree(p); }
cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, void *pool, cudaStream_t s) { (void)pool; return cudaMallocAsync(p, size, s); }
cudaError_t cudaDeviceGetDefaultMemPool(void **pool, int dev) {
  if (!pool || dev < 0 || dev >= 64) return VDEV_INVALID_VALUE;
  *pool = &g_pool_token[dev];
  return VDEV_OK;
}
cudaError_t cudaDeviceGetMemPool(void **pool, int dev) { return cudaDeviceGetDefaultMemPool(pool, dev); }
cudaError_t cudaDeviceSetMemPool(int dev, void *pool) { (void)dev; (void)pool; return VDEV_OK; }
/* Pool attributes (release threshold, reuse flags, usage counters) read back as 0 and accept any value. */
cudaError_t cudaMemPoolSetAttribute(void *pool, int attr, void *value) { (void)pool; (void)attr; (void)value; return VDEV_OK; }
cudaError_t cudaMemPoolGetAttribute(void *pool, int attr, void *value) {
  (void)pool; (void)attr;
  if (value) *(unsigned long long *)value = 0;
  return VDEV_OK;
}
cudaError_t cudaMemPoolTrimTo(void *pool, size_t keep) { (void)pool; (void)keep; return VDEV_OK; }
cudaError_t cudaMemPoolSetAccess(void *pool, const void *desc, size_t n) { (void)pool; (void)desc; (void)n; return VDEV_OK; }

/* -------------------------------------------------------------- driver allocations --- */
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) { return cudaMalloc((void **)p, size); }
CUresult cuMemFree_v2(CUdeviceptr p) { return cudaFree((void *)(uintptr_t)p); }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s) { return cudaMallocAsync((void **)p, size, s); }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return cudaFreeAsync((void *)(uintptr_t)p, s); }
/* torch's symmetric-memory signal pads: plain stores into host-backed memory */
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  (void)s;
  if (vdev_device_of((void *)(uintptr_t)dst) < 0) return VDEV_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) ((unsigned *)(uintptr_t)dst)[i] = v;
  return VDEV_OK;
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned v, size_t n, CUstream s) { return cuMemsetD32Async(dst, v, n, s); }
CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, unsigned v, unsigned flags) {
  (void)s; (void)flags;
  if (vdev_device_of((void *)(uintptr_t)addr) < 0) return VDEV_INVALID_VALUE;
  *(volatile unsigned *)(uintptr_t)addr = v;
  return VDEV_OK;
}
CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, unsigned v, unsigned flags) { return cuStreamWriteValue32_v2(s, addr, v, flags); }

/* ---------------------------------------------------------------- PCI identity --- */
int pcompile_vdev_pci(int dev, int *domain, int *bus, int *device);
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int dev) {
  int domain, bus, device;
  if (!buf || len < 13) return VDEV_INVALID_VALUE;
  if (pcompile_vdev_pci(dev, &domain, &bus, &device)) return VDEV_INVALID_DEVICE;
  snprintf(buf, (size_t)len, "%08X:%02X:%02X.0", domain, bus, device);
  return VDEV_OK;
}
CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice dev) { return cudaDeviceGetPCIBusId(buf, len, dev); }

/* ---------------------------------------------------------------- synthetic addresses --- */
#define FAKE_CHUNK (1ull << 40) /* address space reserved at a time: 1 TiB, PROT_NONE, costs nothing */
#define FAKE_ALIGN 512ull       /* what the CUDA caching allocator aligns blocks to */
#define FAKE_DEVICES 64         /* vcuda.c's MAX_DEVICES */
static pthread_mutex_t g_fake_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t g_fake_next[FAKE_DEVICES], g_fake_end[FAKE_DEVICES];

/* A distinct device address for `nbytes` on device `dev` that no allocation of this process will
 * ever get: taken from reserved, never-mapped address space; never reused. 0 when address space
 * runs out. Each device's chunks are listed as its memory (BLOCK_FAKE), so pointer queries answer
 * for them as for a cudaMalloc'd block: a user-defined Triton kernel launched eagerly on fake
 * tensors passes its launcher's "is this device memory" check (cuPointerGetAttribute). */
unsigned long long pcompile_vdev_fake_address_on(size_t nbytes, int dev) {
  COUNT(fake_address);
  if (dev < 0 || dev >= FAKE_DEVICES) return 0;
  size_t need = round_up(nbytes ? nbytes : 1, FAKE_ALIGN);
  pthread_mutex_lock(&g_fake_lock);
  if (g_fake_next[dev] + need > g_fake_end[dev] || !g_fake_next[dev]) {
    size_t chunk = need > FAKE_CHUNK ? round_up(need, FAKE_CHUNK) : FAKE_CHUNK;
    void *r = mmap(NULL, chunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
      pthread_mutex_unlock(&g_fake_lock);
      return 0;
    }
    vdev_add_block(r, chunk, BLOCK_FAKE, dev);
    g_fake_next[dev] = (uintptr_t)r;
    g_fake_end[dev] = g_fake_next[dev] + chunk;
  }
  uintptr_t a = g_fake_next[dev];
  g_fake_next[dev] += need;
  pthread_mutex_unlock(&g_fake_lock);
  return a;
}
/* The same on this thread's current device. */
unsigned long long pcompile_vdev_fake_address(size_t nbytes) {
  return pcompile_vdev_fake_address_on(nbytes, vdev_current_device());
}
