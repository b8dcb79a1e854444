/*
 * pcompile virtual NVML: the management library's view of the virtual device.
 *
 * Preloaded next to the virtual CUDA device (vcuda.c) into the warm process tree only; its SONAME
 * is libnvidia-ml.so.1, so torch's device count (torch.cuda.device_count() asks NVML first, with
 * ctypes.CDLL("libnvidia-ml.so.1")), pynvml and anything else that dlopens NVML get this one and
 * never the host's. Without it, a warm host's real GPUs (or its lack of them) leak into the count
 * torch uses before CUDA initialises, and disagree with the virtual device's.
 *
 * It answers what device enumeration needs -- init, count, handles (by index, UUID or PCI bus id, the
 * bus ids the virtual CUDA device reports), UUIDs, names, compute capability -- with the same number
 * of devices as the virtual CUDA device. Every other name the installed libraries can ask for is a
 * generated weak stub (build.py, entry_points.txt) returning NVML_ERROR_NOT_SUPPORTED, counted in the
 * virtual CUDA device's stats as "unsupported:NAME".
 *
 * Environment: PCOMPILE_VDEV_DEVICES  number of virtual devices (default 1)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6,
       NVML_ERROR_INSUFFICIENT_SIZE = 7 };

static unsigned n_devices(void) {
  const char *s = getenv("PCOMPILE_VDEV_DEVICES");
  int n = s ? atoi(s) : 1;
  return n > 0 && n <= 64 ? (unsigned)n : 1;
}

int pcompile_vnvml_is_virtual(void) { return 1; }

/* Refusals are counted by the CUDA side's stats when it is loaded (it always is under warm). */
int pcompile_vnvml_unsupported(const char *name) {
  static int (*count)(const char *);
  static int looked;
  if (!looked) {
    count = (int (*)(const char *))dlsym(RTLD_DEFAULT, "pcompile_vdev_unsupported");
    looked = 1;
  }
  if (count) count(name);
  return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned flags) { (void)flags; return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetCount(unsigned *count) {
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = n_devices();
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) { return nvmlDeviceGetCount(count); }

/* Handles are 1-based indices, so a handle is never NULL. */
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t *dev) {
  if (!dev || index >= n_devices()) return NVML_ERROR_INVALID_ARGUMENT;
  *dev = (nvmlDevice_t)(size_t)(index + 1);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *dev) { return nvmlDeviceGetHandleByIndex(index, dev); }

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned *index) {
  size_t i = (size_t)dev;
  if (!index || i == 0 || i > n_devices()) return NVML_ERROR_INVALID_ARGUMENT;
  *index = (unsigned)(i - 1);
  return NVML_SUCCESS;
}

static nvmlReturn_t put(char *buf, unsigned len, const char *s) {
  if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  strcpy(buf, s);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned len) {
  char s[64];
  size_t i = (size_t)dev;
  if (i == 0 || i > n_devices()) return NVML_ERROR_INVALID_ARGUMENT;
  snprintf(s, sizeof s, "GPU-00000000-0000-0000-0000-0000000000%02u", (unsigned)(i - 1));
  return put(uuid, len, s);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned len) {
  (void)dev;
  return put(name, len, "pcompile virtual device");
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned len) { return put(v, len, "pcompile-virtual"); }

const char *nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Not Supported (pcompile virtual NVML)";
  }
}

/* Bus ids as the virtual CUDA device reports them (the profile's location, device i on bus + i), in
 * any domain width and case, as NVML accepts them. */
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *dev) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (!bus_id || !dev) return NVML_ERROR_INVALID_ARGUMENT;
  if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) return NVML_ERROR_INVALID_ARGUMENT;
  int (*at)(int, int, int) = (int (*)(int, int, int))dlsym(RTLD_DEFAULT, "pcompile_vdev_device_at");
  int ordinal = at ? at((int)domain, (int)bus, (int)device) : -1;
  if (ordinal < 0 || (unsigned)ordinal >= n_devices()) return NVML_ERROR_NOT_FOUND;
  *dev = (nvmlDevice_t)(size_t)(ordinal + 1);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, nvmlDevice_t *dev) { return nvmlDeviceGetHandleByPciBusId_v2(bus_id, dev); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) {
  char s[80];
  if (!uuid || !dev) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < n_devices(); i++) {
    if (nvmlDeviceGetUUID((nvmlDevice_t)(size_t)(i + 1), s, sizeof s) == NVML_SUCCESS && !strcmp(s, uuid)) {
      *dev = (nvmlDevice_t)(size_t)(i + 1);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

/* The profile's compute capability, from the CUDA side (same process). */
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t dev, int *major, int *minor) {
  size_t i = (size_t)dev;
  if (!major || !minor || i == 0 || i > n_devices()) return NVML_ERROR_INVALID_ARGUMENT;
  int (*attr)(int *, int, int) = (int (*)(int *, int, int))dlsym(RTLD_DEFAULT, "cuDeviceGetAttribute");
  if (!attr || attr(major, 75, (int)(i - 1)) != 0 || attr(minor, 76, (int)(i - 1)) != 0) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
  int (*get)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
  if (!v) return NVML_ERROR_INVALID_ARGUMENT;
  if (!get || get(v) != 0) *v = 13000;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

/* No NVLink fabric (an H100 outside an NVL system): the query succeeds and says so, so torch picks
 * POSIX file-descriptor handles for expandable segments without warning. Zeroes status (SUCCESS),
 * cliqueId and state (NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) after the caller's version field. */
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t dev, void *info) {
  size_t i = (size_t)dev;
  if (!info || i == 0 || i > n_devices()) return NVML_ERROR_INVALID_ARGUMENT;
  memset((char *)info + 4, 0, 28);
  return NVML_SUCCESS;
}
