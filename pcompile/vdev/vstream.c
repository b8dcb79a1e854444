/*
 * Streams, events, stream capture and CUDA graphs of the virtual device.
 *
 * Streams and events are small heap tokens that remember their device; a handle is freed only if
 * it carries this library's magic (a destroy of a default-stream constant or a foreign handle is
 * refused, not passed to free()). Events record the host's monotonic clock, so elapsed_time is the
 * wall time between two records (floored at a small positive value: timing arithmetic in scripts
 * never divides by zero). Capture keeps CUDA's state machine -- a stream is capturing between
 * BeginCapture and EndCapture, GetCaptureInfo reports it with an id, EndCapture yields a graph --
 * and a graph records how many launches happened while capturing; launching it runs nothing, as
 * every kernel here runs nothing.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "vdev.h"

#define STREAM_MAGIC 0x7663646bu
#define EVENT_MAGIC 0x76657674u
#define GRAPH_MAGIC 0x76677266u
#define EXEC_MAGIC 0x76657865u
#define DEAD_MAGIC 0xdeadbeefu
/* cudaStreamCaptureStatus */
enum { CAPTURE_NONE = 0, CAPTURE_ACTIVE = 1, CAPTURE_INVALIDATED = 2 };
/* cudaEventDisableTiming */
#define EVENT_DISABLE_TIMING 0x02u
/* the smallest elapsed time reported, ms: a real GPU never reports 0 for two records around work */
#define MIN_ELAPSED_MS 1e-3

typedef struct vgraph {
  unsigned magic;
  unsigned long long nodes; /* launches recorded while capturing */
} vgraph;
typedef struct { unsigned magic; unsigned long long nodes; } vexec;
typedef struct {
  unsigned magic;
  int dev;
  int capture;              /* CAPTURE_* */
  unsigned long long capture_id;
  unsigned long long launches_at_begin;
  vgraph *graph;            /* while capturing: the graph being built */
} vstream;
typedef struct {
  unsigned magic;
  int dev;
  unsigned flags;
  int recorded;
  struct timespec when;
} vevent;

/* Capture on the legacy/per-thread default stream (handles 0, 1, 2) lives here. */
static vstream g_default_stream = {STREAM_MAGIC, 0, CAPTURE_NONE, 0, 0, NULL};
static unsigned long long g_next_capture_id = 1;
static int g_capturing; /* streams capturing now, all threads */
static pthread_mutex_t g_capture_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int t_capture_mode; /* cudaStreamCaptureModeGlobal */

static vstream *as_stream(void *s) {
  if ((uintptr_t)s <= 2) return &g_default_stream;
  vstream *v = s;
  return v->magic == STREAM_MAGIC ? v : NULL;
}
int vdev_stream_device(const void *s) {
  if ((uintptr_t)s <= 2) return -1;
  const vstream *v = s;
  return v->magic == STREAM_MAGIC ? v->dev : -1;
}

/* ------------------------------------------------------------------ streams --- */
cudaError_t cudaStreamCreate(cudaStream_t *s) {
  COUNT(cudaStreamCreate);
  if (!s) return VDEV_INVALID_VALUE;
  vstream *v = calloc(1, sizeof *v);
  if (!v) return VDEV_OUT_OF_MEMORY;
  v->magic = STREAM_MAGIC;
  v->dev = vdev_current_device();
  *s = v;
  return VDEV_OK;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) { (void)f; return cudaStreamCreate(s); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned f, int prio) { (void)f; (void)prio; return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  COUNT(cudaStreamDestroy);
  if ((uintptr_t)s <= 2) return VDEV_INVALID_HANDLE;
  vstream *v = as_stream(s);
  if (!v) return VDEV_INVALID_HANDLE;
  v->magic = DEAD_MAGIC;
  free(v->graph);
  free(v);
  return VDEV_OK;
}
cudaError_t cudaStreamGetPriority(cudaStream_t s, int *prio) { (void)s; COUNT(cudaStreamGetPriority); if (prio) *prio = 0; return VDEV_OK; }
CUresult cuStreamCreate(CUstream *s, unsigned f) { (void)f; return cudaStreamCreate(s); }
CUresult cuStreamDestroy_v2(CUstream s) { return cudaStreamDestroy(s); }
CUresult cuStreamDestroy(CUstream s) { return cudaStreamDestroy(s); }
CUresult cuStreamSynchronize(CUstream s) { (void)s; return VDEV_OK; }
CUresult cuStreamQuery(CUstream s) { (void)s; return VDEV_OK; }

/* ------------------------------------------------------------------ events --- */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) {
  COUNT(cudaEventCreate);
  if (!e) return VDEV_INVALID_VALUE;
  vevent *v = calloc(1, sizeof *v);
  if (!v) return VDEV_OUT_OF_MEMORY;
  v->magic = EVENT_MAGIC;
  v->dev = vdev_current_device();
  v->flags = f;
  *e = v;
  return VDEV_OK;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
static vevent *as_event(void *e) {
  vevent *v = e;
  return v && v->magic == EVENT_MAGIC ? v : NULL;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  COUNT(cudaEventDestroy);
  vevent *v = as_event(e);
  if (!v) return VDEV_INVALID_HANDLE;
  v->magic = DEAD_MAGIC;
  free(v);
  return VDEV_OK;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  (void)s;
  COUNT(cudaEventRecord);
  vevent *v = as_event(e);
  if (!v) return VDEV_INVALID_HANDLE;
  clock_gettime(CLOCK_MONOTONIC, &v->when);
  v->recorded = 1;
  return VDEV_OK;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned f) { (void)f; return cudaEventRecord(e, s); }
cudaError_t cudaEventQuery(cudaEvent_t e) { COUNT(cudaEventQuery); return as_event(e) ? VDEV_OK : VDEV_INVALID_HANDLE; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { COUNT(cudaEventSynchronize); return as_event(e) ? VDEV_OK : VDEV_INVALID_HANDLE; }
/* Wall time between the two records, as the GPU's clock would measure work the host waited for. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  COUNT(cudaEventElapsedTime);
  vevent *x = as_event(a), *y = as_event(b);
  if (!ms) return VDEV_INVALID_VALUE;
  if (!x || !y || (x->flags & EVENT_DISABLE_TIMING) || (y->flags & EVENT_DISABLE_TIMING)) return VDEV_INVALID_HANDLE;
  if (!x->recorded || !y->recorded) return VDEV_INVALID_HANDLE;
  double d = (double)(y->when.tv_sec - x->when.tv_sec) * 1e3 + (double)(y->when.tv_nsec - x->when.tv_nsec) / 1e6;
  *ms = (float)(d < MIN_ELAPSED_MS ? MIN_ELAPSED_MS : d);
  return VDEV_OK;
}
cudaError_t cudaEventElapsedTime_v2(float *ms, cudaEvent_t a, cudaEvent_t b) { return cudaEventElapsedTime(ms, a, b); }
CUresult cuEventCreate(cudaEvent_t *e, unsigned f) { return cudaEventCreateWithFlags(e, f); }
CUresult cuEventDestroy_v2(cudaEvent_t e) { return cudaEventDestroy(e); }
CUresult cuEventRecord(cudaEvent_t e, CUstream s) { return cudaEventRecord(e, s); }
CUresult cuEventRecordWithFlags(cudaEvent_t e, CUstream s, unsigned f) { return cudaEventRecordWithFlags(e, s, f); }
CUresult cuEventQuery(cudaEvent_t e) { return cudaEventQuery(e); }
CUresult cuEventSynchronize(cudaEvent_t e) { return cudaEventSynchronize(e); }
CUresult cuEventElapsedTime_v2(float *ms, cudaEvent_t a, cudaEvent_t b) { return cudaEventElapsedTime(ms, a, b); }
CUresult cuEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { return cudaEventElapsedTime(ms, a, b); }

/* ------------------------------------------------------------------ capture --- */
static cudaError_t begin_capture(void *s, int mode) {
  vstream *v = as_stream(s);
  if (!v) return VDEV_INVALID_HANDLE;
  if ((uintptr_t)s == 0) return VDEV_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
  pthread_mutex_lock(&g_capture_lock);
  cudaError_t r = VDEV_OK;
  if (v->capture != CAPTURE_NONE) {
    r = VDEV_INVALID_VALUE; /* already capturing: cudaErrorIllegalState in CUDA; invalid here */
  } else {
    vgraph *g = calloc(1, sizeof *g);
    if (!g) {
      r = VDEV_OUT_OF_MEMORY;
    } else {
      g->magic = GRAPH_MAGIC;
      v->graph = g;
      v->capture = CAPTURE_ACTIVE;
      v->capture_id = g_next_capture_id++;
      v->launches_at_begin = vdev_launches();
      g_capturing++;
    }
  }
  pthread_mutex_unlock(&g_capture_lock);
  (void)mode;
  return r;
}
static cudaError_t end_capture(void *s, void **graph) {
  vstream *v = as_stream(s);
  if (!v) return VDEV_INVALID_HANDLE;
  if (!graph) return VDEV_INVALID_VALUE;
  pthread_mutex_lock(&g_capture_lock);
  cudaError_t r = VDEV_OK;
  if (v->capture == CAPTURE_NONE) {
    r = VDEV_CAPTURE_UNMATCHED;
  } else {
    /* What the script captured ran on fakes and launched nothing this library could see; a GPU's
     * graph of the same region is not empty, so never report it empty (torch warns on that). */
    unsigned long long n = vdev_launches() - v->launches_at_begin;
    v->graph->nodes = n ? n : 1;
    *graph = v->graph;
    v->graph = NULL;
    v->capture = CAPTURE_NONE;
    g_capturing--;
  }
  pthread_mutex_unlock(&g_capture_lock);
  return r;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode) { COUNT(cudaStreamBeginCapture); return begin_capture(s, mode); }
cudaError_t cudaStreamEndCapture(cudaStream_t s, void **graph) { COUNT(cudaStreamEndCapture); return end_capture(s, graph); }
CUresult cuStreamBeginCapture_v2(CUstream s, int mode) { COUNT(cudaStreamBeginCapture); return begin_capture(s, mode); }
CUresult cuStreamBeginCapture(CUstream s, int mode) { return cuStreamBeginCapture_v2(s, mode); }
CUresult cuStreamEndCapture(CUstream s, void **graph) { COUNT(cudaStreamEndCapture); return end_capture(s, graph); }

static cudaError_t capture_info(void *s, int *status, unsigned long long *id, void **graph, const void **deps,
                                const void **edges, size_t *ndeps) {
  vstream *v = as_stream(s);
  if (!v) return VDEV_INVALID_HANDLE;
  pthread_mutex_lock(&g_capture_lock);
  int st = v->capture;
  if (status) *status = st;
  if (id) *id = st ? v->capture_id : 0;
  if (graph) *graph = st ? v->graph : NULL;
  pthread_mutex_unlock(&g_capture_lock);
  if (deps) *deps = NULL;
  if (edges) *edges = NULL;
  if (ndeps) *ndeps = 0;
  return VDEV_OK;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, int *status) {
  COUNT(cudaStreamIsCapturing);
  if (!status) return VDEV_INVALID_VALUE;
  return capture_info(s, status, NULL, NULL, NULL, NULL, NULL);
}
/* CUDA 13's cudaStreamGetCaptureInfo is the one with edge data (v3's signature). */
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, int *st, unsigned long long *id, void **g, const void **d,
                                     const void **e, size_t *n) {
  COUNT(cudaStreamGetCaptureInfo);
  return capture_info(s, st, id, g, d, e, n);
}
cudaError_t cudaStreamGetCaptureInfo_v2(cudaStream_t s, int *st, unsigned long long *id, void **g, const void **d, size_t *n) {
  COUNT(cudaStreamGetCaptureInfo);
  return capture_info(s, st, id, g, d, NULL, n);
}
cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t s, int *st, unsigned long long *id, void **g, const void **d,
                                        const void **e, size_t *n) {
  return cudaStreamGetCaptureInfo(s, st, id, g, d, e, n);
}
CUresult cuStreamIsCapturing(CUstream s, int *status) {
  COUNT(cuStreamIsCapturing);
  if (!status) return VDEV_INVALID_VALUE;
  return capture_info(s, status, NULL, NULL, NULL, NULL, NULL);
}
CUresult cuStreamGetCaptureInfo_v2(CUstream s, int *st, unsigned long long *id, void **g, const void **d, size_t *n) {
  return capture_info(s, st, id, g, d, NULL, n);
}
CUresult cuStreamGetCaptureInfo_v3(CUstream s, int *st, unsigned long long *id, void **g, const void **d,
                                   const void **e, size_t *n) {
  return capture_info(s, st, id, g, d, e, n);
}
CUresult cuStreamGetCaptureInfo(CUstream s, int *st, unsigned long long *id) { return capture_info(s, st, id, NULL, NULL, NULL, NULL); }
/* Nothing is recorded per node, so there are no dependencies to update. */
cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, void *deps, size_t n, unsigned flags) {
  (void)deps; (void)n; (void)flags;
  return as_stream(s) ? VDEV_OK : VDEV_INVALID_HANDLE;
}
cudaError_t cudaStreamUpdateCaptureDependencies_v2(cudaStream_t s, void *deps, const void *e, size_t n, unsigned f) {
  (void)e;
  return cudaStreamUpdateCaptureDependencies(s, deps, n, f);
}
cudaError_t cudaThreadExchangeStreamCaptureMode(int *mode) {
  COUNT(cudaThreadExchangeStreamCaptureMode);
  if (!mode) return VDEV_INVALID_VALUE;
  int old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return VDEV_OK;
}
CUresult cuThreadExchangeStreamCaptureMode(int *mode) { return cudaThreadExchangeStreamCaptureMode(mode); }

/* ------------------------------------------------------------------ graphs --- */
static vgraph *as_graph(void *g) {
  vgraph *v = g;
  return v && v->magic == GRAPH_MAGIC ? v : NULL;
}
cudaError_t cudaGraphCreate(void **g, unsigned flags) {
  (void)flags;
  if (!g) return VDEV_INVALID_VALUE;
  vgraph *v = calloc(1, sizeof *v);
  if (!v) return VDEV_OUT_OF_MEMORY;
  v->magic = GRAPH_MAGIC;
  *g = v;
  return VDEV_OK;
}
static cudaError_t instantiate(void **exec, void *graph) {
  vgraph *g = as_graph(graph);
  if (!exec || !g) return VDEV_INVALID_VALUE;
  vexec *x = calloc(1, sizeof *x);
  if (!x) return VDEV_OUT_OF_MEMORY;
  x->magic = EXEC_MAGIC;
  x->nodes = g->nodes;
  *exec = x;
  COUNT(cudaGraphInstantiate);
  return VDEV_OK;
}
cudaError_t cudaGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) { (void)flags; return instantiate(exec, graph); }
cudaError_t cudaGraphInstantiate(void **exec, void *graph, unsigned long long flags) { (void)flags; return instantiate(exec, graph); }
cudaError_t cudaGraphInstantiateWithParams(void **exec, void *graph, void *params) { (void)params; return instantiate(exec, graph); }
/* Replaying runs nothing: every captured kernel was a no-op on this device. */
cudaError_t cudaGraphLaunch(void *exec, cudaStream_t s) {
  (void)s;
  COUNT(cudaGraphLaunch);
  vexec *x = exec;
  return x && x->magic == EXEC_MAGIC ? VDEV_OK : VDEV_INVALID_HANDLE;
}
cudaError_t cudaGraphUpload(void *exec, cudaStream_t s) { return cudaGraphLaunch(exec, s); }
cudaError_t cudaGraphExecDestroy(void *exec) {
  COUNT(cudaGraphExecDestroy);
  vexec *x = exec;
  if (!x || x->magic != EXEC_MAGIC) return VDEV_INVALID_HANDLE;
  x->magic = DEAD_MAGIC;
  free(x);
  return VDEV_OK;
}
cudaError_t cudaGraphDestroy(void *graph) {
  COUNT(cudaGraphDestroy);
  vgraph *g = as_graph(graph);
  if (!g) return VDEV_INVALID_HANDLE;
  g->magic = DEAD_MAGIC;
  free(g);
  return VDEV_OK;
}
/* Node handles are never handed out (nothing reads them here); the count is what was captured. */
cudaError_t cudaGraphGetNodes(void *graph, void **nodes, size_t *n) {
  vgraph *g = as_graph(graph);
  if (!g || !n) return VDEV_INVALID_VALUE;
  if (nodes) {
    for (size_t i = 0; i < *n && i < g->nodes; i++) nodes[i] = NULL;
    return VDEV_NOT_SUPPORTED;
  }
  *n = (size_t)g->nodes;
  return VDEV_OK;
}
cudaError_t cudaGraphDebugDotPrint(void *graph, const char *path, unsigned flags) {
  (void)flags;
  vgraph *g = as_graph(graph);
  if (!g || !path) return VDEV_INVALID_VALUE;
  FILE *f = fopen(path, "w");
  if (!f) return VDEV_INVALID_VALUE;
  fprintf(f, "digraph pcompile_virtual_graph {\n  label=\"%llu kernel launches captured on the pcompile virtual device\";\n}\n",
          g->nodes);
  fclose(f);
  return VDEV_OK;
}
CUresult cuGraphCreate(void **g, unsigned flags) { return cudaGraphCreate(g, flags); }
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) { return cudaGraphInstantiateWithFlags(exec, graph, flags); }
CUresult cuGraphInstantiate_v2(void **exec, void *graph, void *a, void *b, size_t c) { (void)a; (void)b; (void)c; return instantiate(exec, graph); }
CUresult cuGraphInstantiateWithParams(void **exec, void *graph, void *params) { return cudaGraphInstantiateWithParams(exec, graph, params); }
CUresult cuGraphLaunch(void *exec, CUstream s) { return cudaGraphLaunch(exec, s); }
CUresult cuGraphUpload(void *exec, CUstream s) { return cudaGraphLaunch(exec, s); }
CUresult cuGraphExecDestroy(void *exec) { return cudaGraphExecDestroy(exec); }
CUresult cuGraphDestroy(void *graph) { return cudaGraphDestroy(graph); }
CUresult cuGraphGetNodes(void *graph, void **nodes, size_t *n) { return cudaGraphGetNodes(graph, nodes, n); }
CUresult cuGraphDebugDotPrint(void *graph, const char *path, unsigned flags) { return cudaGraphDebugDotPrint(graph, path, flags); }

/* User objects keep a graph's resources alive (torch attaches its private pool): a refcount. */
typedef struct { unsigned magic; int refs; void *ptr; void (*destroy)(void *); } vuserobj;
#define USEROBJ_MAGIC 0x76756f62u
cudaError_t cudaUserObjectCreate(void **obj, void *ptr, void (*destroy)(void *), unsigned refs, unsigned flags) {
  (void)flags;
  if (!obj) return VDEV_INVALID_VALUE;
  vuserobj *u = calloc(1, sizeof *u);
  if (!u) return VDEV_OUT_OF_MEMORY;
  *u = (vuserobj){USEROBJ_MAGIC, (int)refs, ptr, destroy};
  *obj = u;
  return VDEV_OK;
}
cudaError_t cudaUserObjectRelease(void *obj, unsigned count) {
  vuserobj *u = obj;
  if (!u || u->magic != USEROBJ_MAGIC) return VDEV_INVALID_VALUE;
  u->refs -= (int)count;
  if (u->refs <= 0) {
    if (u->destroy) u->destroy(u->ptr);
    u->magic = DEAD_MAGIC;
    free(u);
  }
  return VDEV_OK;
}
cudaError_t cudaUserObjectRetain(void *obj, unsigned count) {
  vuserobj *u = obj;
  if (!u || u->magic != USEROBJ_MAGIC) return VDEV_INVALID_VALUE;
  u->refs += (int)count;
  return VDEV_OK;
}
/* A graph takes over the references it is given (cudaGraphUserObjectMove) and never dies before
 * the process here, so the objects stay alive, as on a GPU while the graph exists. */
cudaError_t cudaGraphRetainUserObject(void *graph, void *obj, unsigned count, unsigned flags) {
  (void)count; (void)flags;
  return as_graph(graph) && obj ? VDEV_OK : VDEV_INVALID_VALUE;
}
cudaError_t cudaGraphReleaseUserObject(void *graph, void *obj, unsigned count) {
  (void)graph;
  return cudaUserObjectRelease(obj, count);
}
cudaError_t cudaDeviceGetGraphMemAttribute(int dev, int attr, void *value) {
  (void)dev; (void)attr;
  if (value) *(unsigned long long *)value = 0;
  return VDEV_OK;
}
cudaError_t cudaDeviceSetGraphMemAttribute(int dev, int attr, void *value) { (void)dev; (void)attr; (void)value; return VDEV_OK; }
cudaError_t cudaDeviceGraphMemTrim(int dev) { (void)dev; return VDEV_OK; }
