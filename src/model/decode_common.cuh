// Device code shared by the per-layer decode kernels (decode_kernels.cu) and
// the persistent decode kernel (decode_layers.cu): coherent activation loads,
// the weight row of a GEMV output, and attention of one new token over one
// chunk of the KV cache. Internal to the model component; nvcc only.
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

// Blocks on the GPU; the largest shared-memory carveout for a decode kernel
// and, over 48 KB of dynamic shared memory, the opt-in (decode_kernels.cu).
int64_t MultiprocessorCount();
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

// The attention output of head h (of its group), element d, from the
// partial softmaxes of `chunks` chunks at pm (AttendChunk's layout, G heads
// a chunk): one online merge, loads through L2 (__ldcg: other blocks'
// writes), none waiting on another.
__device__ inline float MergeChunks(const float* pm, int64_t chunks, int G, int HD, int h, int d) {
  float M = -INFINITY, S = 0, O = 0;
#pragma unroll 4
  for (int64_t c = 0; c < chunks; ++c) {
    const float* p = pm + c * G * (HD + 2);
    const float cm = __ldcg(p + h), cs = __ldcg(p + G + h), co = __ldcg(p + 2 * G + h * HD + d);
    if (cs == 0) continue;  // a chunk past the row's last position
    const float M2 = fmaxf(M, cm), fa = expf(M - M2), fb = expf(cm - M2);
    S = S * fa + cs * fb;
    O = O * fa + co * fb;
    M = M2;
  }
  return O / S;
}

// Attention of one new token in blocks of (row b, key head g, chunk z of
// kPasses * kKeysPerPass<HD> key positions): the group of query heads
// sharing key head g against the chunk's keys. Chunk 0 writes the new key and
// value into the cache; every block takes the new position's key and value
// from its own registers, so none waits for another. Each block leaves its
// partial softmax in `partial` (per chunk: kDecodeMaxGroup maxima, as many
// sums, kDecodeMaxGroup x HD unnormalised outputs); with `merge`, the last
// block of (b, g) to finish (counted in `counters`) merges them into `out`
// (the persistent kernel merges them as the next stage reads them).
template <int HD>
constexpr int kKeysPerPass = kAttentionWarps * (32 / (HD / 8));  // a lane group of HD / 8 per key

// The chunk's cached keys and values (written by earlier steps) into L2.
template <typename T, int HD, int kPasses>
__device__ void PrefetchChunk(const DecodeAttentionArgs& a, int64_t b, int64_t g, int64_t z) {
  constexpr int C = kPasses * kKeysPerPass<HD>, lines = HD * sizeof(T) / 128 > 0 ? HD * sizeof(T) / 128 : 1;
  const int64_t pos = a.positions[b];
  const int64_t last = pos < a.span ? pos : a.span - 1, begin = z * C;
  const int end = static_cast<int>((begin + C <= last ? begin + C : last) - begin);  // the new one excluded
  for (int i = threadIdx.x; i < end * lines * 2; i += kAttentionThreads) {
    const int64_t t = begin + i / (lines * 2), line = i % lines;
    const char* cache = static_cast<const char*>((i / lines) % 2 ? a.v_cache : a.k_cache);
    PrefetchL2(cache + (((b * a.max_len + t) * a.kv_heads + g) * HD) * sizeof(T) + line * 128);
  }
}

// Shared memory AttendChunk works in: the group's query heads, the new key
// and value, the rotary frequencies, the q/k norm weights, and each warp's
// partial outputs.
template <int HD>
constexpr int kAttentionScratchFloats =
    (kDecodeMaxGroup + 2) * HD + HD / 2 + 2 * HD + kAttentionWarps * kDecodeMaxGroup * HD;

// Row b, key head g, chunk z of `chunks`, by the whole block;
// `scratch`: kAttentionScratchFloats<HD> floats of shared memory.
template <typename T, int HD, int kPasses>
__device__ void AttendChunk(const DecodeAttentionArgs& a, int64_t b, int64_t g, int64_t z, int64_t chunks, bool merge,
                            float* scratch) {
  constexpr int G = kDecodeMaxGroup, half = HD / 2, L = HD / 8, P = 32 / L, C = kPasses * kKeysPerPass<HD>;
  const int group = static_cast<int>(a.heads / a.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / L, part = lane % L;
  const int64_t pos = a.positions[b];
  const int64_t last = pos < a.span ? pos : a.span - 1;  // idle rows (pos >= span) see the span
  const int64_t begin = z * C, end = begin + C <= last + 1 ? begin + C : last + 1;
  T* kc = static_cast<T*>(a.k_cache) + (b * a.max_len * a.kv_heads + g) * HD;  // position 0 of slot b, head g
  T* vc = static_cast<T*>(a.v_cache) + (b * a.max_len * a.kv_heads + g) * HD;
  const int64_t stride = a.kv_heads * HD;  // between positions
  // This lane's cached keys and values first: their loads are in flight
  // while the new token's heads are prepared. Lanes work in groups of L, one
  // key position per group, 8 elements of the head per lane (16-byte loads).
  Pack<T, 8> kp[kPasses], vp[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int64_t t = begin + i * kKeysPerPass<HD> + warp * P + sub;
    if (t < end && t != pos) {
      kp[i] = *reinterpret_cast<const Pack<T, 8>*>(kc + t * stride + part * 8);
      vp[i] = *reinterpret_cast<const Pack<T, 8>*>(vc + t * stride + part * 8);
    }
  }
  // Heads 0..group-1: queries; head `group`: the key; head group+1: the value.
  float(*head)[HD] = reinterpret_cast<float(*)[HD]>(scratch);
  float* freq = scratch + (G + 2) * HD;
  float* qk_norm = freq + half;  // q norm weights, then k norm weights
  float(*part_acc)[G][HD] = reinterpret_cast<float(*)[G][HD]>(qk_norm + 2 * HD);
  __shared__ float part_m[kAttentionWarps][G], part_s[kAttentionWarps][G];
  __shared__ bool merging;
  const T* row = static_cast<const T*>(a.qkv) + b * (a.heads + 2 * a.kv_heads) * HD;
  for (int i = threadIdx.x; i < (group + 2) * HD; i += kAttentionThreads) {
    const int h = i / HD, d = i % HD;
    const int64_t src = h < group ? (g * group + h) : h == group ? a.heads + g : a.heads + a.kv_heads + g;
    head[h][d] = LoadCoherent(row + src * HD + d);
  }
  for (int d = threadIdx.x; d < half; d += kAttentionThreads) freq[d] = a.inv_freq[d];
  if (a.q_norm)
    for (int d = threadIdx.x; d < 2 * HD; d += kAttentionThreads)
      qk_norm[d] = ToFloat(static_cast<const T*>(d < HD ? a.q_norm : a.k_norm)[d % HD]);
  SyncAttentionThreads();
  // Qwen3's q/k RMSNorm over each head, one warp per head.
  if (a.q_norm) {
    for (int h = warp; h <= group; h += kAttentionWarps) {
      float ss = 0;
      for (int d = lane; d < HD; d += 32) ss += head[h][d] * head[h][d];
      const float r = rsqrtf(WarpSum(ss) / HD + a.eps);
      const float* w = qk_norm + (h < group ? 0 : HD);
      for (int d = lane; d < HD; d += 32) head[h][d] = head[h][d] * r * w[d];
    }
    SyncAttentionThreads();
  }
  // Rotary on the queries and the key: out = x * cos + rotate_half(x) * sin.
  for (int i = threadIdx.x; i < (group + 1) * half; i += kAttentionThreads) {
    const int h = i / half, d = i % half;
    const float angle = static_cast<float>(pos) * freq[d], c = cosf(angle), s = sinf(angle);
    const float x0 = head[h][d], x1 = head[h][d + half];
    head[h][d] = x0 * c - x1 * s;
    head[h][d + half] = x1 * c + x0 * s;
  }
  SyncAttentionThreads();
  // The new key and value as the cache holds them (in T).
  for (int d = threadIdx.x; d < HD; d += kAttentionThreads) {
    head[group][d] = ToFloat(FromFloat<T>(head[group][d]));
    head[group + 1][d] = ToFloat(FromFloat<T>(head[group + 1][d]));
  }
  SyncAttentionThreads();
  if (z == 0)
    for (int d = threadIdx.x; d < HD; d += kAttentionThreads) {
      kc[pos * stride + d] = FromFloat<T>(head[group][d]);
      vc[pos * stride + d] = FromFloat<T>(head[group + 1][d]);
    }

  // Each lane group keeps an online softmax over its positions; groups,
  // then warps, are merged at the end. The queries stay in shared memory
  // (registers go to the outputs).
  float m[G], s[G], acc[G][8];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    s[h] = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[h][e] = 0;
  }
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int64_t t = begin + i * kKeysPerPass<HD> + warp * P + sub;
    const bool valid = t < end;
    float kf[8], vf[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      kf[e] = t == pos ? head[group][part * 8 + e] : ToFloat(kp[i].v[e]);
      vf[e] = t == pos ? head[group + 1][part * 8 + e] : ToFloat(vp[i].v[e]);
    }
#pragma unroll
    for (int h = 0; h < G; ++h) {
      if (h >= group) break;
      float dot = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) dot += valid ? head[h][part * 8 + e] * kf[e] : 0.f;
      for (int offset = L / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffff, dot, offset);
      dot *= a.scale;
      if (!valid) continue;
      const float m_new = fmaxf(m[h], dot), f = expf(m[h] - m_new), p = expf(dot - m_new);
      s[h] = s[h] * f + p;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] = acc[h][e] * f + p * vf[e];
      m[h] = m_new;
    }
  }
  // Merge the P groups of the warp (lanes with the same `part`), then the warps.
#pragma unroll
  for (int h = 0; h < G; ++h) {
    if (h >= group) break;
    for (int offset = L; offset < 32; offset *= 2) {
      const float om = __shfl_xor_sync(0xffffffff, m[h], offset), os = __shfl_xor_sync(0xffffffff, s[h], offset);
      const float M = fmaxf(m[h], om);
      const float fa = s[h] > 0 ? expf(m[h] - M) : 0.f, fb = os > 0 ? expf(om - M) : 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float oa = __shfl_xor_sync(0xffffffff, acc[h][e], offset);
        acc[h][e] = acc[h][e] * fa + oa * fb;
      }
      s[h] = s[h] * fa + os * fb;
      m[h] = M;
    }
    if (lane == 0) {
      part_m[warp][h] = m[h];
      part_s[warp][h] = s[h];
    }
    if (sub == 0)
#pragma unroll
      for (int e = 0; e < 8; ++e) part_acc[warp][h][part * 8 + e] = acc[h][e];
  }
  SyncAttentionThreads();
  // The block's softmax over its chunk, per (head h, element d): its max, sum
  // (0: no position) and unnormalised output.
  const int64_t bg = b * a.kv_heads + g;
  float* pm = a.partial + bg * chunks * G * (HD + 2);  // per chunk: G maxima, G sums, G x HD outputs
  for (int i = threadIdx.x; i < group * HD; i += kAttentionThreads) {
    const int h = i / HD, d = i % HD;
    float M = -INFINITY;
    for (int w = 0; w < kAttentionWarps; ++w) M = fmaxf(M, part_m[w][h]);
    float S = 0, O = 0;
    for (int w = 0; w < kAttentionWarps; ++w) {
      if (part_s[w][h] == 0) continue;  // a warp that saw no position
      const float f = expf(part_m[w][h] - M);
      S += part_s[w][h] * f;
      O += part_acc[w][h][d] * f;
    }
    if (merge && chunks == 1) {
      static_cast<T*>(a.out)[b * a.heads * HD + (g * group + h) * HD + d] = FromFloat<T>(O / S);
      continue;
    }
    float* mine = pm + z * G * (HD + 2);
    if (d == 0) {
      mine[h] = M;
      mine[G + h] = S;
    }
    mine[2 * G + h * HD + d] = O;
  }
  if (!merge || chunks == 1) return;
  // The last block of (b, g) to finish merges the chunks.
  __threadfence();
  SyncAttentionThreads();
  if (threadIdx.x == 0) {
    merging = atomicAdd(a.counters + bg, 1) == chunks - 1;
    if (merging) a.counters[bg] = 0;  // ready for the next step
  }
  SyncAttentionThreads();
  if (!merging) return;
  __threadfence();
  for (int i = threadIdx.x; i < group * HD; i += kAttentionThreads) {
    const int h = i / HD, d = i % HD;
    static_cast<T*>(a.out)[b * a.heads * HD + (g * group + h) * HD + d] =
        FromFloat<T>(MergeChunks(pm, chunks, G, HD, h, d));
  }
}

}  // namespace cuda_agent::model::kernels
