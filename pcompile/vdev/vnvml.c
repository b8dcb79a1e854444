/*
 * pcompile virtual NVML: the management library's view of the virtual device.
 *
 * Preloaded next to the virtual CUDA device (vcuda.c) into the warm process tree only; its SONAME
 * is libnvidia-ml.so.1, so torch's device count (torch.cuda.device_count() asks NVML first, with
 * ctypes.CDLL("libnvidia-ml.so.1")), pynvml and anything else that dlopens NVML get this one and
 * never the host's. Without it, a warm host's real GPUs (or its lack of them) leak into the count
 * torch uses before CUDA initialises, and disagree with the virtual device's.
 *
 * It answers what device enumeration needs -- init, count, handles, UUIDs, names -- with the same
 * number of devices as the virtual CUDA device; every other query is NVML_ERROR_NOT_SUPPORTED.
 *
 * Environment: PCOMPILE_VDEV_DEVICES  number of virtual devices (default 1)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_INSUFFICIENT_SIZE = 7 };

static unsigned n_devices(void) {
  const char *s = getenv("PCOMPILE_VDEV_DEVICES");
  int n = s ? atoi(s) : 1;
  return n > 0 && n <= 64 ? (unsigned)n : 1;
}

int pcompile_vnvml_is_virtual(void) { return 1; }

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
