/* cuda_rt.cu - the CUDA backend's device, memory and error handling
 * (cuda.h). The runtime is linked statically (libcudart_static.a), so the
 * binary needs only the driver's libcuda.so on the GPU machine; without a
 * driver or a GPU, cuda_open fails with the runtime's reason and nothing
 * else in the process changes.
 * Does not: compute (cuda_kern.cu). */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "backend/cuda/cuda.h"
#include "base/mem.h"
}
#include "backend/cuda/cuda_int.h"

cudaStream_t g_stream;

static int g_open_rc = 1; /* 1: not tried yet */
static strata_err g_open_err;
static char g_name[400];

__global__ void k_probe(int *out) { *out = 42; }

/* A kernel must run: a GPU this binary has no code for fails here, with
 * the runtime's reason, not at the first real launch. */
static int probe(strata_err *err) {
    int *d = NULL, v = 0;
    cudaError_t e = cudaMalloc(&d, sizeof(int));
    if (e == cudaSuccess) {
        k_probe<<<1, 1, 0, g_stream>>>(d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(&v, d, sizeof(int), cudaMemcpyDeviceToHost, g_stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g_stream);
    cudaFree(d);
    if (e != cudaSuccess) return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: a test kernel failed: %s", cudaGetErrorString(e));
    if (v != 42) return strata_errf(err, STRATA_EIO, "cuda: a test kernel wrote %d, not 42", v);
    return 0;
}

static int open_device(strata_err *err) {
    /* The runtime reports a missing driver as "driver version is
     * insufficient": say what it means first. */
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY);
    if (!drv) return strata_errf(err, STRATA_EUNSUPPORTED, "no CUDA GPU here: no NVIDIA driver (libcuda.so.1 not found)");
    dlclose(drv);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return strata_errf(err, STRATA_EUNSUPPORTED, "no CUDA GPU usable: %s (cudaGetDeviceCount)", cudaGetErrorString(e));
    if (n == 0) return strata_errf(err, STRATA_EUNSUPPORTED, "no CUDA GPU present");
    cudaDeviceProp p;
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda device 0: %s", cudaGetErrorString(e));
    if ((e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking)) != cudaSuccess)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: creating a stream: %s", cudaGetErrorString(e));
    snprintf(g_name, sizeof g_name, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor, p.multiProcessorCount,
             p.totalGlobalMem / 1073741824.0);
    int optin = 0;
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0)) != cudaSuccess)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda device 0: %s", cudaGetErrorString(e));
    return probe(err) || attn_init(optin, err) || mmv_init(optin, p.multiProcessorCount, err);
}

extern "C" int cuda_built(void) { return 1; }

extern "C" int cuda_open(strata_err *err) {
    if (g_open_rc == 1) g_open_rc = open_device(&g_open_err);
    if (g_open_rc && err) *err = g_open_err;
    return g_open_rc;
}

extern "C" const char *cuda_device_name(void) { return g_name; }

extern "C" void *cuda_alloc(size_t bytes, strata_err *err) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        strata_errf(err, STRATA_ENOMEM, "cuda: allocating %zu bytes: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

extern "C" void cuda_free(void *d_p) {
    if (d_p) cudaFree(d_p);
}

static int check(cudaError_t e, const char *what, strata_err *err) {
    if (e == cudaSuccess) return 0;
    return strata_errf(err, STRATA_EIO, "cuda: %s: %s", what, cudaGetErrorString(e));
}

/* In stream order: after the kernels queued before it. From pageable
 * memory the runtime has taken the bytes when this returns. */
extern "C" int cuda_upload(void *d_dst, const void *src, size_t bytes, strata_err *err) {
    return check(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, g_stream), "upload", err);
}

extern "C" int cuda_download(void *dst, const void *d_src, size_t bytes, strata_err *err) {
    if (check(cudaGetLastError(), "kernel launch", err)) return STRATA_EIO;
    if (check(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, g_stream), "download", err)) return STRATA_EIO;
    return cuda_sync(err);
}

/* A launch error (bad configuration) shows at once; a fault inside a
 * kernel only when the stream is waited for: both are reported here. */
extern "C" int cuda_sync(strata_err *err) {
    if (check(cudaGetLastError(), "kernel launch", err)) return STRATA_EIO;
    return check(cudaStreamSynchronize(g_stream), "kernel", err);
}

/* ---- graphs ---------------------------------------------------------------- */

struct cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" int cuda_graph_begin(strata_err *err) {
    return check(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal), "begin capture", err);
}

extern "C" int cuda_graph_end(cuda_graph **out, strata_err *err) {
    *out = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(g_stream, &graph);
    if (e != cudaSuccess) return check(e, "end capture", err);
    cudaGraphExec_t exec;
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
        cudaGraphDestroy(graph);
        return check(e, "graph instantiate", err);
    }
    cuda_graph *g = (cuda_graph *)xcalloc(1, sizeof *g);
    g->graph = graph;
    g->exec = exec;
    *out = g;
    return 0;
}

extern "C" int cuda_graph_run(cuda_graph *g, strata_err *err) {
    return check(cudaGraphLaunch(g->exec, g_stream), "graph launch", err);
}

extern "C" void cuda_graph_free(cuda_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}

/* ---- device memory for the KV tiers (backend/devmem.h) ----------------------- */

/* Copies up from the RAM tier and the disk run on a stream of their own
 * beside g_stream; made with the first devmem use. */
static cudaStream_t g_copy_stream;

static cudaStream_t stream_of(int s) { return s == DEVMEM_COPY ? g_copy_stream : g_stream; }

static void *dm_alloc(void *self, size_t bytes, strata_err *err) { return cuda_alloc(bytes, err); }
static void dm_free(void *self, void *d) { cuda_free(d); }

static void *dm_host_alloc(void *self, size_t bytes, strata_err *err) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        strata_errf(err, STRATA_ENOMEM, "cuda: pinning %zu bytes of host memory: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void dm_host_free(void *self, void *h) {
    if (h) cudaFreeHost(h);
}

static int dm_copy(void *self, int stream, void *dst, const void *src, size_t bytes, devmem_dir dir, strata_err *err) {
    cudaMemcpyKind k = dir == DEVMEM_H2D ? cudaMemcpyHostToDevice : dir == DEVMEM_D2H ? cudaMemcpyDeviceToHost
                                                                                       : cudaMemcpyDeviceToDevice;
    return check(cudaMemcpyAsync(dst, src, bytes, k, stream_of(stream)), "copy", err);
}

static devmem_event *dm_record(void *self, int stream, strata_err *err) {
    cudaEvent_t ev = NULL;
    if (check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event", err)) return NULL;
    if (check(cudaEventRecord(ev, stream_of(stream)), "event record", err)) {
        cudaEventDestroy(ev);
        return NULL;
    }
    return (devmem_event *)ev;
}

static int dm_done(void *self, devmem_event *ev, strata_err *err) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) return 0;
    return check(e, "event query", err) ? STRATA_EIO : 1;
}

static int dm_wait(void *self, int stream, devmem_event *ev, strata_err *err) {
    return check(cudaStreamWaitEvent(stream_of(stream), (cudaEvent_t)ev, 0), "stream wait", err);
}

static void dm_event_free(void *self, devmem_event *ev) {
    if (ev) cudaEventDestroy((cudaEvent_t)ev);
}

static int dm_sync(void *self, int stream, strata_err *err) {
    if (stream != DEVMEM_COPY) return cuda_sync(err);
    return check(cudaStreamSynchronize(g_copy_stream), "copy stream", err);
}

static const devmem_ops g_dm_ops = {dm_alloc, dm_free, dm_host_alloc, dm_host_free, dm_copy,
                                    dm_record, dm_done, dm_wait, dm_event_free, dm_sync};
static devmem g_devmem = {"cuda", &g_dm_ops, NULL};

extern "C" const devmem *cuda_devmem(void) {
    if (g_open_rc != 0) return NULL; /* not open, or no device */
    if (!g_copy_stream && cudaStreamCreateWithFlags(&g_copy_stream, cudaStreamNonBlocking) != cudaSuccess) return NULL;
    return &g_devmem;
}
