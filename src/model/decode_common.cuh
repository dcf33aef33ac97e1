// Device code shared by the per-layer decode kernels (decode_kernels.cu) and
// the persistent decode kernel (decode_layers.cu): the attention warps'
// barrier, coherent activation loads, L2 prefetches, the weight row of a GEMV
// output. Internal to the model component; nvcc only.
#pragma once

#include <cmath>
#include <cstring>

#include "decode_kernels.h"
#include "kernel_util.cuh"

namespace cuda_agent::model::kernels {

constexpr int kAttentionWarps = 8, kAttentionThreads = kAttentionWarps * 32;

// A barrier of a block's first kAttentionThreads threads (the whole block of
// the attention kernel; the computing warps of the persistent kernel, whose
// last warp copies weights and does not take part). Orders shared memory as
// __syncthreads() does.
__device__ inline void SyncAttentionThreads() { asm volatile("bar.sync 1, %0;" ::"n"(kAttentionThreads) : "memory"); }

// The largest shared-memory carveout for a decode kernel and, over 48 KB of
// dynamic shared memory, the opt-in (decode_kernels.cu).
void ConfigureDecodeKernel(const void* kernel, int64_t dynamic_shared_bytes);

__device__ inline void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Loads of activations through L2 (__ldcg): other blocks of a persistent
// kernel may have written them since this SM's L1 last saw the line.
template <typename T>
__device__ inline float LoadCoherent(const T* p) {
  return ToFloat(__ldcg(p));
}
template <typename T, int V>
__device__ inline Pack<T, V> LoadPackCoherent(const T* p) {
  if constexpr (sizeof(T) * V == 16) {
    const uint4 u = __ldcg(reinterpret_cast<const uint4*>(p));
    Pack<T, V> r;
    memcpy(&r, &u, 16);
    return r;
  } else {
    Pack<T, V> r;
#pragma unroll
    for (int i = 0; i < V; ++i) r.v[i] = __ldcg(p + i);
    return r;
  }
}

// Matrix `mat` of output row j (SwiGLU: 0 gate, 1 up; otherwise the segment
// holding j, and mat must be 0): its weight row and bias element.
// Selects, not an index into a.m: the arguments stay in registers.
template <typename T, bool kSwiGlu>
__device__ inline const T* WeightRow(const DecodeGemvArgs& a, int64_t j, int mat, const T** bias) {
  DecodeMatrix m = mat == 0 ? a.m[0] : a.m[1];
  if constexpr (!kSwiGlu) {
    m = a.m[0];
    if (j >= a.m[0].rows) {
      j -= a.m[0].rows;
      m = a.m[1];
      if (j >= a.m[1].rows) j -= a.m[1].rows, m = a.m[2];
    }
  }
  *bias = m.bias ? static_cast<const T*>(m.bias) + j : nullptr;
  return static_cast<const T*>(m.w) + j * a.k;
}

}  // namespace cuda_agent::model::kernels
