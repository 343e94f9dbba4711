/* forward_cuda_int.h - what the GPU forward pass (forward_cuda.c) shares
 * with qwen35's delta-net layer on the GPU (deltanet_cuda.c); not for
 * other modules. */
#ifndef STRATA_FORWARD_CUDA_INT_H
#define STRATA_FORWARD_CUDA_INT_H

#include "backend/cuda/cuda.h"
#include "model/forward_cuda.h"

/* A weight on the GPU. */
typedef struct dev_tensor {
    const void *d; /* NULL: absent */
    qtype type;
    int rows, cols;
    size_t row_bytes;
} dev_tensor;

/* Device memory freed with c (fwdc_free); NULL and err on failure. */
void *fwdc__alloc(fwdc *c, size_t bytes, strata_err *err);
/* The tensor's bytes to the GPU (an absent one stays absent). */
int fwdc__upload(fwdc *c, const model_tensor *t, dev_tensor *out, strata_err *err);
/* 1 when a and b can share one matmul launch: the same weight type and row size. */
int fwdc__same_kind(const dev_tensor *a, const dev_tensor *b);

/* deltanet_cuda.c: qwen35's gated delta-net layers on the GPU, deltanet.c's
 * steps. dnc_new uploads the layers' tensors and allocates scratch for
 * max_batch tokens through c (freed with it), and for the one-sequence
 * pass (paged 0) the state of every recurrent layer in device memory. */
typedef struct dnc dnc;
int dnc_new(fwdc *c, const model *m, int max_batch, int paged, dnc **out, strata_err *err);
void dnc_free(dnc *d); /* the host side; NULL is fine */
/* Queues the one-sequence state's zeroing (starting at position 0). */
void dnc_reset(dnc *d);
/* Floats of one sequence's state, every recurrent layer's
 * ([rec_layer][conv | delta]): fwd_state_floats's count, the GPU's layout. */
size_t dnc_state_floats(const dnc *d);
/* Paged: the call's runs (tokens of one sequence, its state), which the
 * layers' conv and delta rule take in one launch each; uploaded (at
 * most max_batch). */
int dnc_set_runs(dnc *d, const cuda_delta_run *runs, int n_runs, strata_err *err);
/* Whether recurrent layer il's in-projections can each apply the
 * layer's RMS norm in their launch for n tokens (cuda_matmul_norms). */
int dnc_norms(const dnc *d, int il, int n);
/* Recurrent layer il over n rows d_in, normed already (nw NULL) or
 * normed in the in-projections' launches with weights nw (dnc_norms),
 * continuing the states (paged: dnc_set_runs's; else the one-sequence
 * state). *o gets the gated norm's output (n x ssm_d_inner, device
 * scratch) and *w_out the layer's out-projection, which the caller adds
 * to the residual. */
int dnc_layer(dnc *d, int il, const float *d_in, const float *nw, int n, const float **o, const dev_tensor **w_out,
              strata_err *err);

/* moe_cuda.c: the mixture-of-experts feed-forward on the GPU (qwen3moe,
 * qwen35moe), model/moe.c's steps; mec_new uploads every MoE layer's
 * router, expert stacks and shared expert, and scratch for max_batch
 * tokens through c (freed with it). */
typedef struct mec mec;
int mec_new(fwdc *c, const model *m, int max_batch, mec **out, strata_err *err);
void mec_free(mec *x); /* the host side; NULL is fine */
/* 1 when layer il's feed-forward is a mixture of experts (x may be NULL). */
int mec_is_moe(const mec *x, int il);
/* d_x (the residual, n rows) += layer il's mixture of experts over the n
 * normed rows d_xn, routed on the device: nothing waits on the host, so
 * a graph may hold it. */
int mec_layer(mec *x, int il, const float *d_xn, int n, float *d_x, strata_err *err);

#endif
