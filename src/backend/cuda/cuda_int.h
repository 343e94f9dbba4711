/* cuda_int.h - what the backend's .cu files share, not for C callers.
 * g_stream: the one stream every kernel and copy of the process goes on
 * (created by cuda_open), so decode steps can be captured as a graph. The
 * CUDA context is per process anyway; this is its queue. */
#ifndef STRATA_CUDA_INT_H
#define STRATA_CUDA_INT_H

#include <cuda_runtime.h>

extern cudaStream_t g_stream;

#endif
