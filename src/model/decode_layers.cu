// Every layer of a decode step in one persistent kernel (decode_kernels.h).
//
// One block per SM. Each GEMV stage's output rows are split evenly over the
// blocks; a block's weights arrive in tiles (a run of its rows of one stage)
// that the Tensor Memory Accelerator copies into a ring of shared memory.
// The block's last warp only copies: it issues a tile as soon as the ring has
// room for it, so the copies run ahead of the computation through grid
// barriers, stages and layers, and DRAM keeps streaming while the grid
// waits. Each tile's landing and its release by the computing warps are
// transaction barriers (mbarriers). Inputs are read once per stage into shared
// memory as fp32 (normalised where the stage starts with an RMSNorm).
#include "decode_kernels.h"

#include <algorithm>

#include "decode_common.cuh"

namespace cuda_agent::model::kernels {
namespace {

constexpr int kWarps = kAttentionWarps;  // computing warps; one more copies weights
constexpr int kThreads = kWarps * 32;
static_assert(kThreads == kAttentionThreads, "the computing warps share SyncAttentionThreads()");
constexpr int kTilesInFlight = 16;  // one transaction barrier each
constexpr int kTileUnits = 64;      // (row, part of k) work units of a tile at most
constexpr int kStages = 4;          // GEMV stages of a layer
// Key positions per attention block: kAttentionPasses * kKeysPerPass<HD>.
// One pass: a block's attention is a chain of dependent instructions, so
// more blocks with fewer keys each finish sooner.
constexpr int kAttentionPasses = 1;
enum Stage { kStageQkv = 0, kStageOut = 1, kStageGateUp = 2, kStageDown = 3 };

// What the host decides per launch: the ring's size, the input buffer's,
// the most output rows a block has in a stage, the attention chunks'
// weights (batch * heads * chunks), and the output rows of one tile per
// stage.
struct RingPlan {
  int64_t ring_bytes = 0, x_floats = 0, block_rows = 0, chunk_weights = 0;
  int64_t tile_rows[kStages] = {};
};

// ---- Hopper: bulk copies completing on transaction barriers ----

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ inline uint32_t SharedAddress(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
#endif
__device__ inline void BarrierInit(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SharedAddress(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// The next phase of `bar` completes once `bytes` more have landed.
__device__ inline void BarrierExpectBytes(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(bar)), "r"(bytes)
               : "memory");
#endif
}
__device__ inline void BarrierWait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}" ::"r"(SharedAddress(bar)),
      "r"(parity)
      : "memory");
#endif
}
__device__ inline void BarrierArrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SharedAddress(bar)) : "memory");
#endif
}
// Global -> shared, 16-byte multiples, counted on `bar`.
__device__ inline void BulkCopy(void* dst, const void* src, int64_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   SharedAddress(dst)),
               "l"(src), "r"(static_cast<uint32_t>(bytes)), "r"(SharedAddress(bar))
               : "memory");
#endif
}
// Orders this block's earlier shared-memory reads before later bulk copies.
__device__ inline void AsyncProxyFence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Every block of the grid (all resident: a cooperative launch) waits here
// until the blocks' arrivals reach `target`; writes before it are visible
// to L2 loads (__ldcg) after it. The computing warps only.
__device__ inline void GridBarrier(unsigned* counter, unsigned target) {
  SyncAttentionThreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target);
  }
  SyncAttentionThreads();
}

// The GEMV of stage s of `layer` and its output rows n.
__device__ inline DecodeGemvArgs StageGemv(const DecodeLayersArgs& a, int s, const DecodeLayer& layer, int64_t* n) {
  DecodeGemvArgs g;
  g.batch = a.batch;
  g.eps = a.eps;
  if (s == kStageQkv) {
    g.x = a.h, g.k = a.hidden, g.norm_weight = layer.input_norm, g.y = a.qkv;
    g.m[0] = layer.q, g.m[1] = layer.k, g.m[2] = layer.v;
    *n = layer.q.rows + layer.k.rows + layer.v.rows;
  } else if (s == kStageOut) {
    g.x = a.attn, g.k = a.heads * a.head_dim, g.m[0] = layer.o, g.residual = a.h, g.y = a.h;
    *n = a.hidden;
  } else if (s == kStageGateUp) {
    g.x = a.h, g.k = a.hidden, g.norm_weight = layer.post_norm, g.swiglu = true, g.y = a.act;
    g.m[0] = layer.gate, g.m[1] = layer.up;
    *n = a.mlp;
  } else {
    g.x = a.act, g.k = a.mlp, g.m[0] = layer.down, g.residual = a.h, g.y = a.h;
    *n = a.hidden;
  }
  return g;
}

// This block's output rows of a stage with n rows (n * blocks < 2^31).
__device__ inline void BlockRows(int64_t n, int64_t* j0, int64_t* j1) {
  *j0 = static_cast<int>(n) * blockIdx.x / gridDim.x;
  *j1 = static_cast<int>(n) * (blockIdx.x + 1) / gridDim.x;
}

// Tile t lands on done[t % kTilesInFlight] and is released on
// freed[t % kTilesInFlight], phase t / kTilesInFlight of both.
struct Ring {
  const DecodeLayer* layers;  // a copy of the launch's, in shared memory
  unsigned char* data;
  uint64_t* done;   // [kTilesInFlight]
  uint64_t* freed;  // [kTilesInFlight]
  int* offset;      // [kTilesInFlight]: where in `data` tile t lies
};

// The copying warp's side of the ring (one lane): the next tile to copy and
// the ring's free bytes. Positions count bytes since the launch; a tile
// never wraps around.
struct Producer {
  int64_t layer = 0, row = -1;  // -1: this block's first row of the stage
  int stage = 0;
  int64_t issued = 0, consumed = 0;  // tiles
  uint32_t head = 0, tail = 0;       // bytes: ends of the last issued and of the last consumed tile
  uint32_t end[kTilesInFlight];

  // Issues tiles while the ring has room for the next.
  template <typename T>
  __device__ void Issue(const DecodeLayersArgs& a, const RingPlan& p, const Ring& ring) {
    while (layer < a.num_layers && issued - consumed < kTilesInFlight) {
      int64_t n, j0, j1;
      const DecodeGemvArgs g = StageGemv(a, stage, ring.layers[layer], &n);
      BlockRows(n, &j0, &j1);
      if (row < 0) row = j0;
      if (row >= j1) {
        row = -1;
        if (++stage == kStages) stage = 0, ++layer;
        continue;
      }
      const int64_t rows = min(p.tile_rows[stage], j1 - row), row_bytes = g.k * static_cast<int64_t>(sizeof(T));
      const uint32_t bytes = static_cast<uint32_t>(rows * row_bytes * (g.swiglu ? 2 : 1));
      const uint32_t size = static_cast<uint32_t>(p.ring_bytes);
      uint32_t start = head;
      if (start % size + bytes > size) start += size - start % size;
      if (start + bytes - tail > size) return;  // the oldest tiles are still in use
      const int q = static_cast<int>(issued % kTilesInFlight);
      unsigned char* dst = ring.data + start % size;
      ring.offset[q] = static_cast<int>(start % size);
      end[q] = start + bytes;
      AsyncProxyFence();
      BarrierExpectBytes(&ring.done[q], bytes);
      if (g.swiglu) {  // gate rows, then the same rows of up
        BulkCopy(dst, static_cast<const T*>(g.m[0].w) + row * g.k, rows * row_bytes, &ring.done[q]);
        BulkCopy(dst + rows * row_bytes, static_cast<const T*>(g.m[1].w) + row * g.k, rows * row_bytes, &ring.done[q]);
      } else {  // the rows of each matrix the tile spans (q, k, v)
        for (int m = 0, first = 0; m < 3; first += static_cast<int>(g.m[m].rows), ++m) {
          const int64_t lo = max(row, static_cast<int64_t>(first)), hi = min(row + rows, first + g.m[m].rows);
          if (lo >= hi) continue;
          BulkCopy(dst, static_cast<const T*>(g.m[m].w) + (lo - first) * g.k, (hi - lo) * row_bytes, &ring.done[q]);
          dst += (hi - lo) * row_bytes;
        }
      }
      head = start + bytes;
      ++issued;
      row += rows;
    }
  }

  // Copies every layer's tiles, waiting for the computing warps to release
  // the oldest whenever the ring is full.
  template <typename T>
  __device__ void Run(const DecodeLayersArgs& a, const RingPlan& p, const Ring& ring) {
    for (;;) {
      Issue<T>(a, p, ring);
      if (layer >= a.num_layers) return;  // all issued; the copies complete on their own
      const int q = static_cast<int>(consumed % kTilesInFlight);
      BarrierWait(&ring.freed[q], static_cast<uint32_t>(consumed / kTilesInFlight) & 1);
      tail = end[q];
      ++consumed;
    }
  }
};

// Element i of `side` for this block's output rows [j0, j0 + rows) of a
// stage: the bias of matrix m at m * rows + r (0 where it has none), the
// residual of batch row b at (2 + b) * rows + r (0 without one).
template <typename T, bool kSwiGlu>
__device__ inline float SideValue(const DecodeGemvArgs& g, int64_t n, int64_t j0, int rows, int i) {
  constexpr int M = kSwiGlu ? 2 : 1;
  const int m = i / rows, r = i % rows;
  if (m < M) {
    const T* bias;
    WeightRow<T, kSwiGlu>(g, j0 + r, m, &bias);
    return bias ? ToFloat(*bias) : 0.f;
  }
  if (m >= 2 && g.residual) return LoadCoherent(static_cast<const T*>(g.residual) + (m - 2) * n + j0 + r);
  return 0.f;
}

// The stage's input [batch, k] into xs as fp32, with kNorm normalised:
// RMSNorm(x) * norm_weight; with it (in the same round of loads) the bias
// and residual elements of this block's output rows [j0, j1) into `side`
// (bias of matrix m at m * rows + r, residual of row b at (2 + b) * rows +
// r, rows = j1 - j0). `scratch`: kWarps * kDecodeMaxRows floats.
template <typename T, bool kNorm, bool kSwiGlu>
__device__ void LoadInput(const DecodeGemvArgs& g, int64_t n, int64_t j0, int64_t j1, float* xs, float* side,
                          float* scratch) {
  constexpr int V = 16 / sizeof(T), R = kDecodeMaxRows, U = 4;  // U: packs a thread loads at once
  const int batch = static_cast<int>(g.batch), k = static_cast<int>(g.k), packs = batch * k / V;
  const int rows = static_cast<int>(j1 - j0), sides = rows * (2 + batch);
  const T* x = static_cast<const T*>(g.x);
  const T* norm = static_cast<const T*>(g.norm_weight);
  // The side elements first, at most two a thread in this round.
  float side_v[2] = {};
#pragma unroll
  for (int u = 0; u < 2; ++u)
    if (threadIdx.x + u * kThreads < sides)
      side_v[u] = SideValue<T, kSwiGlu>(g, n, j0, rows, threadIdx.x + u * kThreads);
  float ss[R] = {};
  for (int i0 = threadIdx.x; i0 < packs; i0 += U * kThreads) {
    Pack<T, V> v[U], w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * kThreads;
      if (i >= packs) break;
      v[u] = LoadPackCoherent<T, V>(x + i * V);
      if constexpr (kNorm) w[u] = *reinterpret_cast<const Pack<T, V>*>(norm + i * V % k);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * kThreads;
      if (i >= packs) break;
      float f[V], s = 0;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        f[e] = ToFloat(v[u].v[e]);
        s += f[e] * f[e];
        if constexpr (kNorm) f[e] *= ToFloat(w[u].v[e]);
      }
#pragma unroll
      for (int e = 0; e < V; e += 4) *reinterpret_cast<float4*>(xs + i * V + e) = *reinterpret_cast<float4*>(f + e);
      if constexpr (kNorm) {
        const int b = i * V / k;
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (r == b) ss[r] += s;
      }
    }
  }
#pragma unroll
  for (int u = 0; u < 2; ++u)
    if (threadIdx.x + u * kThreads < sides) side[threadIdx.x + u * kThreads] = side_v[u];
  for (int i = threadIdx.x + 2 * kThreads; i < sides; i += kThreads)  // rows past two a thread
    side[i] = SideValue<T, kSwiGlu>(g, n, j0, rows, i);
  if constexpr (kNorm) {
    __shared__ float rstd[R];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= batch) break;
      const float total = WarpSum(ss[r]);
      if (lane == 0) scratch[warp * R + r] = total;
    }
    SyncAttentionThreads();
    if (threadIdx.x < batch) {
      float total = 0;
      for (int w = 0; w < kWarps; ++w) total += scratch[w * R + threadIdx.x];
      rstd[threadIdx.x] = rsqrtf(total / static_cast<float>(k) + g.eps);
    }
    SyncAttentionThreads();
    for (int b = 0; b < batch; ++b)
      for (int d = threadIdx.x; d < k; d += kThreads) xs[b * k + d] *= rstd[b];
  }
  SyncAttentionThreads();
}

// The o stage's input: the attention output [batch, heads * HD], merged
// from the chunks' partial softmaxes (AttendChunk without `merge`) and
// rounded to T as a stored output would be; `side` as LoadInput.
template <typename T, int HD>
__device__ void LoadAttention(const DecodeLayersArgs& a, const DecodeGemvArgs& g, int64_t n, int64_t j0, int64_t j1,
                              int64_t chunks, float* xs, float* side, float* weights) {
  constexpr int G = kDecodeMaxGroup, U = 4;
  const int group = static_cast<int>(a.heads / a.kv_heads), heads = static_cast<int>(a.heads);
  const int rows = static_cast<int>(j1 - j0), batch = static_cast<int>(a.batch);
  for (int i = threadIdx.x; i < rows * (2 + batch); i += kThreads) side[i] = SideValue<T, false>(g, n, j0, rows, i);
  // Per (row b, head h): each chunk's weight exp(m_c - M) / S in `weights`.
  for (int i = threadIdx.x; i < batch * heads; i += kThreads) {
    const int b = i / heads, h = i % heads;
    const float* pm = a.partial + (b * a.kv_heads + h / group) * chunks * G * (HD + 2);
    // No branch on a loaded value: every chunk's loads are in flight at once.
    float M = -INFINITY, S = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const float cm = __ldcg(pm + c * G * (HD + 2) + h % group), cs = __ldcg(pm + c * G * (HD + 2) + G + h % group);
      weights[i * chunks + c] = cs > 0 ? cm : -INFINITY;
      M = fmaxf(M, cs > 0 ? cm : -INFINITY);
    }
    for (int64_t c = 0; c < chunks; ++c) {
      const float cs = __ldcg(pm + c * G * (HD + 2) + G + h % group), f = expf(weights[i * chunks + c] - M);
      weights[i * chunks + c] = f;
      S += cs * f;
    }
    for (int64_t c = 0; c < chunks; ++c) weights[i * chunks + c] /= S;
  }
  SyncAttentionThreads();
  // Outputs: U elements a thread at once, every chunk's loads in flight.
  const int total = batch * heads * HD;
  const int64_t chunk_floats = G * (HD + 2);
  for (int i0 = threadIdx.x; i0 < total; i0 += U * kThreads) {
    const float* src[U];
    const float* w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = min(i0 + u * kThreads, total - 1);  // past the end: a duplicate, not written
      const int bh = i / HD, h = bh % heads, b = bh / heads;
      src[u] = a.partial + (b * a.kv_heads + h / group) * chunks * chunk_floats + 2 * G + (h % group) * HD + i % HD;
      w[u] = weights + bh * chunks;
    }
    float o[U] = {};
    for (int64_t c = 0; c < chunks; ++c)
#pragma unroll
      for (int u = 0; u < U; ++u) o[u] += w[u][c] * __ldcg(src[u] + c * chunk_floats);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * kThreads < total) xs[i0 + u * kThreads] = ToFloat(FromFloat<T>(o[u]));
  }
  SyncAttentionThreads();
}

// How many parts of k each of a tile's rows is split into, so that the
// warps share the tile's work evenly: each part at least 32 packs (a load
// per lane), at most kTileUnits units in all.
__device__ inline int Splits(int rows, int packs) {
  int best = 1;
  for (int s = 2; s <= kWarps && rows * s <= kTileUnits && packs / s >= 32; s *= 2)
    if ((rows * s + kWarps - 1) / kWarps * best < (rows * best + kWarps - 1) / kWarps * s) best = s;
  return best;
}

// A tile's dot products: unit u (row u / splits, part u % splits of k) by
// one warp, its sums per (matrix, batch row) into red.
template <typename T, bool kSwiGlu>
__device__ void TileDots(const DecodeGemvArgs& g, int rows, const T* w, const float* xs, float* red) {
  constexpr int V = 16 / sizeof(T), R = kDecodeMaxRows, M = kSwiGlu ? 2 : 1;
  const int batch = static_cast<int>(g.batch), k = static_cast<int>(g.k), packs = k / V;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, splits = Splits(rows, packs);
  for (int u = warp; u < rows * splits; u += kWarps) {
    const int row = u / splits, part = u % splits;
    const int p0 = packs * part / splits, p1 = packs * (part + 1) / splits;
    const T* wr[M];
#pragma unroll
    for (int m = 0; m < M; ++m) wr[m] = w + static_cast<int64_t>(m * rows + row) * k;
    float acc[M][R] = {};
    for (int pk = p0 + lane; pk < p1; pk += 32) {
      Pack<T, V> wp[M];
#pragma unroll
      for (int m = 0; m < M; ++m) wp[m] = *reinterpret_cast<const Pack<T, V>*>(wr[m] + pk * V);
#pragma unroll
      for (int b = 0; b < R; ++b) {
        if (b >= batch) break;
        float xv[V];
#pragma unroll
        for (int e = 0; e < V; e += 4)
          *reinterpret_cast<float4*>(xv + e) = *reinterpret_cast<const float4*>(xs + b * k + pk * V + e);
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
          for (int e = 0; e < V; ++e) acc[m][b] += ToFloat(wp[m].v[e]) * xv[e];
      }
    }
#pragma unroll
    for (int b = 0; b < R; ++b) {
      if (b >= batch) break;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float total = WarpSum(acc[m][b]);
        if (lane == 0) red[(u * M + m) * R + b] = total;
      }
    }
  }
}

// A tile's outputs: rows [r0, r0 + rows) of y from the sums in red, with
// the bias, SwiGLU and the residual from `side` (LoadInput's, for the
// block's `block_rows` rows from j0).
template <typename T, bool kSwiGlu>
__device__ void TileOutputs(const DecodeGemvArgs& g, int64_t n, int64_t j0, int block_rows, int64_t r0, int rows,
                            const float* red, const float* side) {
  constexpr int V = 16 / sizeof(T), R = kDecodeMaxRows, M = kSwiGlu ? 2 : 1;
  const int batch = static_cast<int>(g.batch), splits = Splits(rows, static_cast<int>(g.k) / V);
  for (int i = threadIdx.x; i < rows * batch; i += kThreads) {
    const int row = i / batch, b = i % batch;
    const int64_t j = r0 + row;
    float y[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      y[m] = side[m * block_rows + (j - j0)];
      for (int part = 0; part < splits; ++part) y[m] += red[((row * splits + part) * M + m) * R + b];
    }
    float out = y[0];
    if constexpr (kSwiGlu) out = y[0] / (1.f + expf(-y[0])) * y[1];
    if (g.residual) out += side[(2 + b) * block_rows + (j - j0)];
    static_cast<T*>(g.y)[b * n + j] = FromFloat<T>(out);
  }
}

// The per-block state of the kernel's consuming side.
struct Consumer {
  Ring ring;
  int64_t tile = 0;  // the next tile to consume
  float* xs;         // the stage's input
  float* red;        // two buffers of kTileUnits * 2 * kDecodeMaxRows sums
  float* side;       // biases and residuals of the stage's rows (LoadInput)
  float* weights;    // the attention chunks' weights (LoadAttention)
};

__device__ inline unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Block 0's clock into the timeline (decode_kernels.h); `cycles`: the SM's
// cycle count too, after the stage marks.
__device__ inline void Mark(const DecodeLayersArgs& a, int64_t index, int64_t cycles = -1) {
  if (a.timeline && blockIdx.x == 0 && threadIdx.x == 0) {
    a.timeline[index] = GlobalTimer();
    if (cycles >= 0) a.timeline[1 + 10 * a.num_layers + cycles] = clock64();
  }
}

// Stage s of layer l: this block's rows, tile by tile as they land. The o
// stage (HD > 0) reads its input from the attention's partial results.
template <typename T, bool kNorm, bool kSwiGlu, int HD = 0>
__device__ void GemvStage(const DecodeLayersArgs& a, const RingPlan& p, int s, int64_t l, Consumer& c,
                          int64_t chunks = 0) {
  constexpr int R = kDecodeMaxRows;
  int64_t n, j0, j1;
  const DecodeGemvArgs g = StageGemv(a, s, c.ring.layers[l], &n);
  BlockRows(n, &j0, &j1);
  if (j0 >= j1) return;
  if constexpr (HD > 0)
    LoadAttention<T, HD>(a, g, n, j0, j1, chunks, c.xs, c.side, c.weights);
  else
    LoadInput<T, kNorm, kSwiGlu>(g, n, j0, j1, c.xs, c.side, c.red);
  for (int64_t r = j0; r < j1; r += p.tile_rows[s], ++c.tile) {
    const int rows = static_cast<int>(min(p.tile_rows[s], j1 - r));
    const int q = static_cast<int>(c.tile % kTilesInFlight);
    const bool timed = a.timeline && blockIdx.x == 0 && threadIdx.x == 0;
    const unsigned long long start = timed ? GlobalTimer() : 0;
    BarrierWait(&c.ring.done[q], static_cast<uint32_t>(c.tile / kTilesInFlight) & 1);
    if (timed) a.timeline[3 + 10 * a.num_layers + s] += GlobalTimer() - start;  // waiting for weights
    // Alternate sum buffers: one barrier a tile keeps this tile's sums from
    // the previous tile's outputs.
    float* red = c.red + (c.tile % 2) * kTileUnits * 2 * R;
    TileDots<T, kSwiGlu>(g, rows, reinterpret_cast<const T*>(c.ring.data + c.ring.offset[q]), c.xs, red);
    SyncAttentionThreads();
    if (threadIdx.x == 0) BarrierArrive(&c.ring.freed[q]);
    TileOutputs<T, kSwiGlu>(g, n, j0, static_cast<int>(j1 - j0), r, rows, red, c.side);
  }
}

// The attention of `layer` as DecodeAttention's arguments.
template <int HD>
__device__ DecodeAttentionArgs LayerAttention(const DecodeLayersArgs& a, const DecodeLayer& layer) {
  DecodeAttentionArgs att;
  att.qkv = a.qkv, att.batch = a.batch, att.heads = a.heads, att.kv_heads = a.kv_heads, att.head_dim = HD;
  att.max_len = a.max_len, att.span = a.span, att.positions = a.positions, att.inv_freq = a.inv_freq;
  att.q_norm = layer.q_norm, att.k_norm = layer.k_norm, att.eps = a.eps, att.scale = a.scale;
  att.k_cache = layer.k_cache, att.v_cache = layer.v_cache, att.out = a.attn;
  att.partial = a.partial;  // no counters: AttendChunk does not merge here
  return att;
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads + 32, 1)
    DecodeLayersKernel(const __grid_constant__ DecodeLayersArgs a, const RingPlan p) {
  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ uint64_t tile_done[kTilesInFlight], tile_freed[kTilesInFlight];
  __shared__ int tile_offset[kTilesInFlight];
  // Shared memory: the ring, the stage inputs, two sum buffers, the side
  // elements, the chunk weights, the layers' descriptors (8-byte aligned).
  Consumer c;
  c.xs = reinterpret_cast<float*>(shared + p.ring_bytes);
  c.red = c.xs + p.x_floats;
  c.side = c.red + 2 * kTileUnits * 2 * kDecodeMaxRows;
  c.weights = c.side + p.block_rows * (2 + kDecodeMaxRows);
  DecodeLayer* layers = reinterpret_cast<DecodeLayer*>(c.weights + p.chunk_weights);
  c.ring = {layers, shared, tile_done, tile_freed, tile_offset};
  {
    const int64_t words = a.num_layers * sizeof(DecodeLayer) / 8;
    const uint64_t* from = reinterpret_cast<const uint64_t*>(a.layers);
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x) reinterpret_cast<uint64_t*>(layers)[i] = from[i];
  }
  if (threadIdx.x == 0)
    for (int q = 0; q < kTilesInFlight; ++q) BarrierInit(&tile_done[q]), BarrierInit(&tile_freed[q]);
  __syncthreads();                // the last one of the whole block
  if (threadIdx.x >= kThreads) {  // the copying warp
    if (threadIdx.x == kThreads) Producer().Run<T>(a, p, c.ring);
    return;
  }
  Mark(a, 0, 0);
  constexpr int64_t C = kAttentionPasses * kKeysPerPass<HD>;
  const int64_t chunks = (a.span + C - 1) / C, items = a.batch * a.kv_heads * chunks;
  unsigned arrivals = 0;
  auto barrier = [&](int64_t l, int s, bool wait) {
    Mark(a, 1 + (l * 5 + s) * 2);
    if (wait) GridBarrier(a.barrier, ++arrivals * gridDim.x);
    Mark(a, 2 + (l * 5 + s) * 2, l + 1 == a.num_layers && s == 4 ? 1 : -1);
  };
  for (int64_t l = 0; l < a.num_layers; ++l) {
    const DecodeAttentionArgs att = LayerAttention<HD>(a, layers[l]);
    // This block's cached keys and values of the layer, into L2 meanwhile.
    for (int64_t i = blockIdx.x; i < items; i += gridDim.x)
      PrefetchChunk<T, HD, kAttentionPasses>(att, i / chunks / a.kv_heads, i / chunks % a.kv_heads, i % chunks);
    GemvStage<T, true, false>(a, p, kStageQkv, l, c);
    barrier(l, 0, true);
    for (int64_t i = blockIdx.x; i < items; i += gridDim.x) {
      AttendChunk<T, HD, kAttentionPasses>(att, i / chunks / a.kv_heads, i / chunks % a.kv_heads, i % chunks, chunks,
                                           false, c.xs);
      SyncAttentionThreads();
    }
    barrier(l, 1, true);
    GemvStage<T, false, false, HD>(a, p, kStageOut, l, c, chunks);
    barrier(l, 2, true);
    GemvStage<T, true, true>(a, p, kStageGateUp, l, c);
    barrier(l, 3, true);
    GemvStage<T, false, false>(a, p, kStageDown, l, c);
    barrier(l, 4, l + 1 < a.num_layers);
  }
}

// The launch's shared memory: the stage inputs (or the attention's work
// space), two sum buffers, and a ring of what is left, whose tiles are at
// most a quarter of it so that several are in flight. False where a tile of
// one output row would not fit.
template <typename T, int HD>
bool PlanRing(const DecodeLayersArgs& a, RingPlan* plan, int64_t* dynamic_bytes) {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, DecodeLayersKernel<T, HD>) != cudaSuccess) return false;
  int device = 0, optin = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  const int64_t widest = std::max({a.hidden, a.mlp, a.heads * a.head_dim}), grid = MultiprocessorCount();
  plan->x_floats = std::max<int64_t>(a.batch * widest, kAttentionScratchFloats<HD>);
  plan->block_rows = (std::max({a.mlp, a.hidden, (a.heads + 2 * a.kv_heads) * a.head_dim}) + grid - 1) / grid;
  const int64_t red_floats = 2 * kTileUnits * 2 * kDecodeMaxRows;
  plan->chunk_weights = (a.batch * a.heads * DecodeLayersAttentionChunks(a.span, HD) + 1) / 2 * 2;
  const int64_t rest =
      (plan->x_floats + red_floats + plan->block_rows * (2 + kDecodeMaxRows) + plan->chunk_weights) * 4 +
      a.num_layers * static_cast<int64_t>(sizeof(DecodeLayer));
  plan->ring_bytes = (optin - static_cast<int64_t>(attributes.sharedSizeBytes) - rest - 1024) / 128 * 128;
  if (plan->ring_bytes < 32 * 1024) return false;
  const int64_t tile_cap = plan->ring_bytes / 4, elem = sizeof(T);
  const int64_t n[kStages] = {(a.heads + 2 * a.kv_heads) * a.head_dim, a.hidden, a.mlp, a.hidden};
  const int64_t unit[kStages] = {a.hidden * elem, a.heads * a.head_dim * elem, 2 * a.hidden * elem, a.mlp * elem};
  for (int s = 0; s < kStages; ++s) {
    if (unit[s] > tile_cap) return false;
    const int64_t block_rows = (n[s] + grid - 1) / grid;
    const int64_t tiles = (block_rows * unit[s] + tile_cap - 1) / tile_cap;
    plan->tile_rows[s] = std::min<int64_t>({(block_rows + tiles - 1) / tiles, kTileUnits, tile_cap / unit[s]});
  }
  *dynamic_bytes = plan->ring_bytes + rest;
  return true;
}

// Calls f(kernel, plan, dynamic_bytes) for the shape's kernel; false where
// it does not fit.
template <typename F>
bool WithPlan(Dtype dtype, const DecodeLayersArgs& a, F&& f) {
  bool ok = false;
  Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto plan = [&](auto kernel, auto planner) {
      RingPlan p;
      int64_t bytes = 0;
      ok = planner(a, &p, &bytes);
      if (ok) f(kernel, p, bytes);
    };
    if (a.head_dim == 64)
      plan(DecodeLayersKernel<T, 64>, PlanRing<T, 64>);
    else if (a.head_dim == 128)
      plan(DecodeLayersKernel<T, 128>, PlanRing<T, 128>);
  });
  return ok;
}

// The shape checks that need no plan of shared memory.
bool ShapeFits(Dtype dtype, const DecodeLayersArgs& a) {
  static const bool hopper = [] {
    int device = 0, major = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    return major >= 9;
  }();
  const int64_t pack = dtype == Dtype::kFloat ? 4 : 8;  // elements in 16 bytes
  return hopper && a.batch >= 1 && a.batch <= kDecodeMaxRows && a.num_layers >= 1 && a.num_layers <= kDecodeMaxLayers &&
         a.kv_heads > 0 && a.heads % a.kv_heads == 0 && a.heads / a.kv_heads <= kDecodeMaxGroup &&
         (a.head_dim == 64 || a.head_dim == 128) && a.hidden % pack == 0 && a.mlp % pack == 0;
}

}  // namespace

int64_t DecodeLayersAttentionChunks(int64_t span, int64_t head_dim) {
  const int64_t keys = kAttentionPasses * (head_dim == 64 ? kKeysPerPass<64> : kKeysPerPass<128>);
  return std::max<int64_t>(1, (span + keys - 1) / keys);
}

bool DecodeLayersFit(Dtype dtype, int64_t batch, int64_t span, int64_t layers, int64_t hidden, int64_t mlp,
                     int64_t heads, int64_t kv_heads, int64_t head_dim) {
  DecodeLayersArgs a;
  a.span = span, a.batch = batch, a.num_layers = layers, a.hidden = hidden, a.mlp = mlp, a.heads = heads,
  a.kv_heads = kv_heads, a.head_dim = head_dim;
  return ShapeFits(dtype, a) && WithPlan(dtype, a, [](auto, const RingPlan&, int64_t) {});
}

int DecodeLayers(Dtype dtype, const DecodeLayersArgs& args, cudaStream_t stream) {
  if (args.batch == 0) return 0;
  cudaError_t error = cudaSuccess;
  const bool fits =
      ShapeFits(dtype, args) && WithPlan(dtype, args, [&](auto kernel, const RingPlan& plan, int64_t bytes) {
        ConfigureDecodeKernel(reinterpret_cast<const void*>(kernel), bytes);
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeCooperative;  // all blocks resident, or the launch fails
        attribute[0].val.cooperative = 1;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(static_cast<unsigned>(MultiprocessorCount()));
        config.blockDim = dim3(kThreads + 32);
        config.dynamicSmemBytes = static_cast<size_t>(bytes);
        config.stream = stream;
        config.attrs = attribute;
        config.numAttrs = 1;
        error = cudaLaunchKernelEx(&config, kernel, args, plan);
      });
  if (!fits) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(error != cudaSuccess ? error : cudaGetLastError());
}

}  // namespace cuda_agent::model::kernels
