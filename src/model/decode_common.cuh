// Device code shared by the per-layer decode kernels (decode_kernels.cu),
// the persistent decode kernel (decode_layers.cu) and the LM head
// (head_kernels.cu): the attention warps' barrier, the launch that lets a
// kernel start while the one before it ends, coherent activation loads, the
// weight row of a GEMV output, the evict-first L2 policy, the tensor cores'
// m16n8k16 product. Internal to the model component; nvcc only.
#pragma once

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

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

// Whether the decode option in environment variable `name` is turned off
// (set to "0").
inline bool EnvOff(const char* name) {
  const char* env = std::getenv(name);
  return env && std::string(env) == "0";
}

// Launches with programmatic stream serialisation where the device has it
// (compute capability 9.0 and later).
template <typename... Params, typename... Args>
void LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                     Args... args) {
  // CUDA_AGENT_DECODE_PDL=0 turns it off, so that a profile shows each
  // kernel's own time rather than time spent waiting for the previous one.
  static const bool pdl = [] {
    int device = 0, major = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    return major >= 9 && !EnvOff("CUDA_AGENT_DECODE_PDL");
  }();
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  cudaLaunchKernelEx(&config, kernel, args...);
}

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

// V floats, rounded to T (V a multiple of 4).
template <typename T, int V>
__device__ inline Pack<T, V> RoundPackCoherent(const float* p) {
  Pack<T, V> r;
#pragma unroll
  for (int i = 0; i < V; i += 4) {
    const float4 f = __ldcg(reinterpret_cast<const float4*>(p + i));
    r.v[i] = FromFloat<T>(f.x), r.v[i + 1] = FromFloat<T>(f.y), r.v[i + 2] = FromFloat<T>(f.z),
    r.v[i + 3] = FromFloat<T>(f.w);
  }
  return r;
}

// The running merge of partial softmaxes (maximum M, sum S, unnormalised
// outputs O of four elements) taking C more chunks: their maxima, sums (0:
// no position) and outputs.
template <int C>
__device__ inline void MergeRound(const float (&cm)[C], const float (&cs)[C], const float4 (&co)[C], float& M, float& S,
                                  float (&O)[4]) {
  float M2 = M;
#pragma unroll
  for (int c = 0; c < C; ++c) M2 = cs[c] > 0 ? fmaxf(M2, cm[c]) : M2;
  const float f = M == -INFINITY ? 0.f : expf(M - M2);
  S *= f;
#pragma unroll
  for (int e = 0; e < 4; ++e) O[e] *= f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const float w = cs[c] > 0 ? expf(cm[c] - M2) : 0.f;
    S += cs[c] * w;
    O[0] += co[c].x * w, O[1] += co[c].y * w, O[2] += co[c].z * w, O[3] += co[c].w * w;
  }
  M = M2;
}

// Elements d .. d + 3 of query head h's attention output (h of the key
// head's group), merged from the partial softmaxes of a split over `chunks`
// chunks at `partials` (a chunk: kDecodeMaxGroup maxima, as many sums (0: no
// position), kDecodeMaxGroup x HD unnormalised outputs), C chunks at a
// time: their loads all in flight together, through L2 (other blocks wrote
// them).
template <int HD, int C = 16>
__device__ inline void MergeFour(const float* partials, int64_t chunks, int h, int d, float (&out)[4]) {
  constexpr int G = kDecodeMaxGroup;
  constexpr int64_t chunk_floats = G * (HD + 2);
  const float* pm = partials + h;
  const float* po = partials + 2 * G + h * HD + d;
  float M = -INFINITY, S = 0, O[4] = {};
  for (int64_t c0 = 0; c0 < chunks; c0 += C) {
    float cm[C], cs[C];
    float4 co[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const bool in = c0 + c < chunks;
      cm[c] = in ? __ldcg(pm + (c0 + c) * chunk_floats) : -INFINITY;
      cs[c] = in ? __ldcg(pm + (c0 + c) * chunk_floats + G) : 0.f;
      co[c] = in ? __ldcg(reinterpret_cast<const float4*>(po + (c0 + c) * chunk_floats)) : float4{};
    }
    MergeRound<C>(cm, cs, co, M, S, O);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) out[e] = O[e] / S;
}

// The attention output of the `group` query heads of one key head, merged
// (MergeFour) into out (the group's heads, HD apart) in T. The attention
// threads, a thread per 4 elements of a head.
template <typename T, int HD>
__device__ void MergeChunks(const float* partials, int64_t chunks, int group, T* out) {
  constexpr int E = 4;
  for (int i = threadIdx.x; i < group * HD / E; i += kAttentionThreads) {
    const int h = i / (HD / E), d = i % (HD / E) * E;
    float o[E];
    MergeFour<HD>(partials, chunks, h, d, o);
    Pack<T, E> merged;
#pragma unroll
    for (int e = 0; e < E; ++e) merged.v[e] = FromFloat<T>(o[e]);
    *reinterpret_cast<Pack<T, E>*>(out + h * HD + d) = merged;
  }
}

// The matrix of output row j, `mat` with SwiGLU (0 gate, 1 up); otherwise
// the segment holding j (matrices of rows0 and rows1 rows, then the third),
// with j made its row.
template <bool kSwiGlu>
__device__ inline int MatrixOfRow(int mat, int64_t rows0, int64_t rows1, int64_t* j) {
  if constexpr (kSwiGlu) return mat;
  if (*j < rows0) return 0;
  *j -= rows0;
  if (*j < rows1) return 1;
  *j -= rows1;
  return 2;
}

// Matrix `mat` of output row j (SwiGLU: 0 gate, 1 up; otherwise the segment
// holding j, and mat must be 0): its weight row and bias element.
// Selects, not an index into a.m: the arguments stay in registers.
template <typename T, bool kSwiGlu>
__device__ inline const T* WeightRow(const DecodeGemvArgs& a, int64_t j, int mat, const T** bias) {
  const int s = MatrixOfRow<kSwiGlu>(mat, a.m[0].rows, a.m[1].rows, &j);
  const DecodeMatrix m = s == 0 ? a.m[0] : s == 1 ? a.m[1] : a.m[2];
  *bias = m.bias ? static_cast<const T*>(m.bias) + j : nullptr;
  return static_cast<const T*>(m.w) + j * a.k;
}

// An L2 policy whose lines go first when L2 needs room: the weights, read
// once a step, then leave the activations, the attention's partials and the
// cached keys and values in L2 (measured on an H200: 785 -> 759 us at batch
// 1, 1096 -> 1130 tok/s).
__device__ inline uint64_t EvictFirst() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// d += a b on the tensor cores (m16n8k16, fp32 sums): a the four registers of
// a 16 x 16 tile of A, b the two of a 16 x 8 tile of B, in the PTX fragment
// layouts.
template <typename T>
__device__ inline void Mma16x8x16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                  uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace cuda_agent::model::kernels
