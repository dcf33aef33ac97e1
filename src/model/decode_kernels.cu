// The per-layer decode kernels (decode_kernels.h): one new token for up to
// kDecodeMaxRows rows in five kernels per layer (GEMVs with the norm in their
// prologue, attention over the cache) launched as programmatic dependents.
// Arithmetic in fp32.
#include "decode_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "decode_common.cuh"

namespace cuda_agent::model::kernels {
namespace {

constexpr int kGemvWarps = 8;
// Weights a GEMV block copies into shared memory before waiting for the
// previous kernel. Two such blocks fit on one SM (227 KB), so a kernel stages
// its weights while the one before it still runs.
constexpr int64_t kGemvStageBytes = 100 * 1024;
constexpr int kAttentionChunk = 64;  // key positions per attention block

// Attention of one new token in blocks of (row b, key head g, chunk z of
// kPasses * kKeysPerPass<HD> key positions): the group of query heads
// sharing key head g against the chunk's keys. Chunk 0 writes the new key and
// value into the cache; every block takes the new position's key and value
// from its own registers, so none waits for another. Each block leaves its
// partial softmax in `partial` (per chunk: kDecodeMaxGroup maxima, as many
// sums, kDecodeMaxGroup x HD unnormalised outputs); the last block of (b, g)
// to finish (counted in `counters`) merges them into `out`.
template <int HD>
constexpr int kKeysPerPass = kAttentionWarps * (32 / (HD / 8));  // a lane group of HD / 8 per key

__device__ inline void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

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
__device__ void AttendChunk(const DecodeAttentionArgs& a, int64_t b, int64_t g, int64_t z, int64_t chunks,
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
    if (chunks == 1) {
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
  if (chunks == 1) return;
  // The last block of (b, g) to finish merges the chunks.
  if (LastToFinish(a.counters + bg, chunks, &merging, [] { SyncAttentionThreads(); }))
    MergeChunks<T, HD>(pm, chunks, group, static_cast<T*>(a.out) + (b * a.heads + g * group) * HD);
}

// Programmatic dependent launch (Hopper): the decode kernels are launched
// while the previous one runs; each starts with what does not depend on it
// (loading its weights), waits for it, then lets the next launch.
__device__ inline void AwaitPreviousKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}

// 16 bytes from global to shared memory without passing through registers.
__device__ inline void CopyAsync16(void* shared, const void* global) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(global));
#endif
}
__device__ inline void CopyAsyncWaitAll() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\ncp.async.wait_all;" ::: "memory");
#endif
}

template <typename T, int V, bool kSwiGlu>
__device__ void StageWeights(const DecodeGemvArgs& a, int64_t j0, int64_t staged_end, T* stage) {
  constexpr int M = kSwiGlu ? 2 : 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // A warp per weight row (no divisions: they would cost more than the copy).
  for (int64_t j = j0 + warp; j < staged_end; j += blockDim.x / 32)
    for (int mat = 0; mat < M; ++mat) {
      const T* bias;
      const T* src = WeightRow<T, kSwiGlu>(a, j, mat, &bias);
      T* dst = stage + ((j - j0) * M + mat) * a.k;
      for (int64_t c = static_cast<int64_t>(lane) * V; c < a.k; c += 32 * V) CopyAsync16(dst + c, src + c);
    }
}

// rstd[b] = 1 / sqrt(mean(x[b]^2) + eps) for each row of the batch; the whole
// block takes part and finds it in shared memory after the call's barrier.
template <typename T>
__device__ void RowRstd(const DecodeGemvArgs& a, float* rstd) {
  constexpr int R = kDecodeMaxRows;
  __shared__ float partial[32][R];
  const T* x = static_cast<const T*>(a.x);
  const int batch = static_cast<int>(a.batch), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float ss[R] = {};
  for (int64_t i = threadIdx.x; i < a.k; i += blockDim.x) {
#pragma unroll
    for (int b = 0; b < R; ++b) {
      if (b < batch) {
        const float v = LoadCoherent(x + b * a.k + i);
        ss[b] += v * v;
      }
    }
  }
#pragma unroll
  for (int b = 0; b < R; ++b) ss[b] = WarpSum(ss[b]);
  if (lane == 0)
    for (int b = 0; b < R; ++b) partial[warp][b] = ss[b];
  __syncthreads();
  if (threadIdx.x < R) {
    float total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += partial[w][threadIdx.x];
    rstd[threadIdx.x] = rsqrtf(total / static_cast<float>(a.k) + a.eps);
  }
  __syncthreads();
}

// Output rows [j0, j1) of the GEMV (n rows in all), those below staged_end
// with their weights in `stage`, the rest streamed from global memory. A warp
// computes G rows at a time so that several weight rows are in flight; V
// elements per load. kNorm: x is normalised with rstd (RowRstd) first.
template <typename T, int V, bool kNorm, bool kSwiGlu>
__device__ void GemvRows(const DecodeGemvArgs& a, int64_t n, int64_t j0, int64_t j1, int64_t staged_end,
                         const T* stage, const float* rstd) {
  constexpr int R = kDecodeMaxRows, M = kSwiGlu ? 2 : 1, G = kSwiGlu ? 2 : 4;
  const T* x = static_cast<const T*>(a.x);
  const T* norm_weight = static_cast<const T*>(a.norm_weight);
  const int64_t k = a.k;
  const int batch = static_cast<int>(a.batch);
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t base = j0 + warp * G; base < j1; base += warps * G) {
    const T* w[G][M];
    const T* bias[G][M];
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int mat = 0; mat < M; ++mat) {
        const int64_t j = base + g < j1 ? base + g : j1 - 1;  // past the end: a duplicate, not written
        w[g][mat] = WeightRow<T, kSwiGlu>(a, j, mat, &bias[g][mat]);
        if (j < staged_end) w[g][mat] = stage + ((j - j0) * M + mat) * k;
      }
    float acc[G][M][R] = {};
#pragma unroll 4
    for (int64_t c = static_cast<int64_t>(lane) * V; c < k; c += 32 * V) {
      Pack<T, V> wp[G][M], np;
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int mat = 0; mat < M; ++mat) wp[g][mat] = *reinterpret_cast<const Pack<T, V>*>(w[g][mat] + c);
      if constexpr (kNorm) np = *reinterpret_cast<const Pack<T, V>*>(norm_weight + c);
#pragma unroll
      for (int b = 0; b < R; ++b) {
        if (b >= batch) break;
        const Pack<T, V> xp = LoadPackCoherent<T, V>(x + b * k + c);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          float xv = ToFloat(xp.v[i]);
          if constexpr (kNorm) xv = xv * rstd[b] * ToFloat(np.v[i]);
#pragma unroll
          for (int g = 0; g < G; ++g)
#pragma unroll
            for (int mat = 0; mat < M; ++mat) acc[g][mat][b] += ToFloat(wp[g][mat].v[i]) * xv;
        }
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mine[M] = {};  // lane b keeps row b's sums
#pragma unroll
      for (int b = 0; b < R; ++b) {
        if (b >= batch) break;
#pragma unroll
        for (int mat = 0; mat < M; ++mat) {
          const float total = WarpSum(acc[g][mat][b]);
          if (lane == b) mine[mat] = total;
        }
      }
      const int64_t j = base + g;
      if (j >= j1 || lane >= batch) continue;
      float y = mine[0] + (bias[g][0] ? ToFloat(*bias[g][0]) : 0.f);
      if constexpr (kSwiGlu) {
        const float up = mine[1] + (bias[g][1] ? ToFloat(*bias[g][1]) : 0.f);
        y = y / (1.f + expf(-y)) * up;
      }
      if (a.residual) y += LoadCoherent(static_cast<const T*>(a.residual) + lane * n + j);
      static_cast<T*>(a.y)[lane * n + j] = FromFloat<T>(y);
    }
  }
}

// Block i owns output rows [i * rows_per_block, +rows_per_block). It copies
// the weights of its first `staged_rows` rows into shared memory before
// waiting for the previous kernel, then computes; the rest (large matrices
// such as the LM head) stream from global memory.
template <typename T, int V, bool kNorm, bool kSwiGlu>
__global__ void __launch_bounds__(kGemvWarps * 32)
    DecodeGemvKernel(DecodeGemvArgs a, int64_t n, int64_t rows_per_block, int64_t staged_rows) {
  constexpr int M = kSwiGlu ? 2 : 1;
  extern __shared__ __align__(16) unsigned char gemv_stage[];
  T* stage = reinterpret_cast<T*>(gemv_stage);
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t j1 = j0 + rows_per_block < n ? j0 + rows_per_block : n;
  const int64_t staged_end = j0 + staged_rows < j1 ? j0 + staged_rows : j1;
  if constexpr (V > 1) {  // staged only when rows move in 16-byte packs
    StageWeights<T, V, kSwiGlu>(a, j0, staged_end, stage);
    // The first streamed rows, into L2.
    for (int64_t j = staged_end; j < j1 && j < staged_end + 16; ++j)
      for (int mat = 0; mat < M; ++mat) {
        const T* bias;
        const char* w = reinterpret_cast<const char*>(WeightRow<T, kSwiGlu>(a, j, mat, &bias));
        for (int64_t off = threadIdx.x * 128; off < a.k * static_cast<int64_t>(sizeof(T)); off += blockDim.x * 128)
          PrefetchL2(w + off);
      }
  }
  AwaitPreviousKernel();
  __shared__ float rstd[kDecodeMaxRows];
  if constexpr (kNorm) RowRstd<T>(a, rstd);
  CopyAsyncWaitAll();
  __syncthreads();
  GemvRows<T, V, kNorm, kSwiGlu>(a, n, j0, j1, staged_end, stage, rstd);
}

// One block per (row b, key head g, chunk z): prefetches its chunk while the
// previous kernel runs, then attends.
template <typename T, int HD>
__global__ void __launch_bounds__(kAttentionWarps * 32) DecodeAttentionKernel(DecodeAttentionArgs a) {
  __shared__ float scratch[kAttentionScratchFloats<HD>];
  constexpr int kPasses = kAttentionChunk / kKeysPerPass<HD>;
  PrefetchChunk<T, HD, kPasses>(a, blockIdx.x, blockIdx.y, blockIdx.z);
  AwaitPreviousKernel();
  AttendChunk<T, HD, kPasses>(a, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.z, scratch);
}

}  // namespace

// Every decode kernel asks for the largest shared-memory carveout: an SM
// configured for one kernel then takes blocks of the next without draining
// (programmatic dependent launch needs both resident). Over 48 KB of dynamic
// shared memory needs an opt-in; a failure shows in the launch's error.
void ConfigureDecodeKernel(const void* kernel, int64_t dynamic_shared_bytes) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (dynamic_shared_bytes > 0)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic_shared_bytes));
}

int64_t MultiprocessorCount() {
  static const int64_t count = [] {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return static_cast<int64_t>(sms > 0 ? sms : 132);
  }();
  return count;
}

int DecodeGemv(Dtype dtype, const DecodeGemvArgs& args, cudaStream_t stream) {
  const int64_t n = args.swiglu ? args.m[0].rows : args.m[0].rows + args.m[1].rows + args.m[2].rows;
  if (args.batch == 0 || n == 0) return 0;
  if (args.batch > kDecodeMaxRows) return static_cast<int>(cudaErrorInvalidValue);
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    const bool packed = Packed<T>({args.x, args.norm_weight, args.m[0].w, args.m[1].w, args.m[2].w}, args.k);
    // Matrices that (mostly) fit in shared memory: one block per SM (fewer
    // for small ones), each over a contiguous run of rows, staged before the
    // wait. Larger ones (the LM head) stream through four blocks per SM, whose
    // many warps keep enough loads in flight.
    const int64_t sms = MultiprocessorCount();
    const int64_t row_bytes = args.k * static_cast<int64_t>(sizeof(T)) * (args.swiglu ? 2 : 1);
    const bool stage = packed && n * row_bytes <= 2 * sms * kGemvStageBytes;
    const int64_t blocks = std::min<int64_t>(stage ? sms : 4 * sms, (n + kGemvWarps - 1) / kGemvWarps);
    const int64_t rows_per_block = (n + blocks - 1) / blocks;
    const int64_t staged = stage ? std::min<int64_t>(rows_per_block, kGemvStageBytes / row_bytes) : 0;
    auto with_width = [&](auto norm, auto swiglu) {
      WithPackWidth<T>(packed, [&](auto width) {
        auto kernel = DecodeGemvKernel<T, decltype(width)::value, decltype(norm)::value, decltype(swiglu)::value>;
        static const bool configured = (ConfigureDecodeKernel(reinterpret_cast<const void*>(kernel), kGemvStageBytes), true);
        (void)configured;
        LaunchDependent(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kGemvWarps * 32),
                        static_cast<size_t>(staged * row_bytes), stream, args, n, rows_per_block, staged);
      });
    };
    auto with_norm = [&](auto swiglu) {
      if (args.norm_weight)
        with_width(std::true_type{}, swiglu);
      else
        with_width(std::false_type{}, swiglu);
    };
    if (args.swiglu)
      with_norm(std::true_type{});
    else
      with_norm(std::false_type{});
  });
}

int64_t DecodeAttentionChunks(int64_t span) { return std::max<int64_t>(1, (span + kAttentionChunk - 1) / kAttentionChunk); }

int DecodeAttention(Dtype dtype, const DecodeAttentionArgs& args, cudaStream_t stream) {
  if (args.batch == 0) return 0;
  const int64_t group = args.kv_heads > 0 ? args.heads / args.kv_heads : 0;
  if (group < 1 || group > kDecodeMaxGroup || args.heads % args.kv_heads != 0 ||
      (args.head_dim != 64 && args.head_dim != 128))
    return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(args.batch), static_cast<unsigned>(args.kv_heads),
                  static_cast<unsigned>(DecodeAttentionChunks(args.span)));
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (args.head_dim == 64) {
      static const bool configured = (ConfigureDecodeKernel(reinterpret_cast<const void*>(DecodeAttentionKernel<T, 64>), 0), true);
      (void)configured;
      LaunchDependent(DecodeAttentionKernel<T, 64>, grid, dim3(kAttentionWarps * 32), 0, stream, args);
    } else {
      static const bool configured = (ConfigureDecodeKernel(reinterpret_cast<const void*>(DecodeAttentionKernel<T, 128>), 0), true);
      (void)configured;
      LaunchDependent(DecodeAttentionKernel<T, 128>, grid, dim3(kAttentionWarps * 32), 0, stream, args);
    }
  });
}


}  // namespace cuda_agent::model::kernels
