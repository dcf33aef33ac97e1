// Every layer of a decode step in one persistent kernel (decode_kernels.h).
//
// One block per SM. Each GEMV stage's output rows are split evenly over the
// blocks; a block's weights arrive in tiles (a run of its rows of one stage)
// that the Tensor Memory Accelerator copies into a ring of shared memory.
// The block's last warp only copies: it issues a tile as soon as the ring has
// room for it, so the copies run ahead of the computation through grid
// barriers, stages and layers, and DRAM keeps streaming while the grid
// waits; its lanes copy a row each, padded (RowPitch). Each tile's landing
// and its release by the computing warps are transaction barriers
// (mbarriers). Inputs are read once per stage into shared memory in the
// weights' type; the warps take a tile's dot products on the tensor cores
// (16-bit weights: mma.sync, the batch rows as one side of the product) or
// four rows at a time (fp32), with no block barrier until the stage's
// outputs. The attention splits the keys into chunks of 32, a block per
// chunk and a warp per query head. Neither the o nor the down projection
// has a stage of its own. The o projection is linear in each head's output:
// blocks that merge a query head's chunks once all are written multiply it
// by that head's columns of the o weights (FoldOut); at batch 1 with heads
// of 64, over up to FoldAttentionKeys() keys, those blocks take their
// head's attention over all keys themselves (AttendHead). Each block
// multiplies its gate/up outputs by the same columns of the down weights
// (FoldDown).
// Both add their partial sums into an fp32 copy of the residual stream, so
// a layer has two grid barriers, after the o and the down projections. The
// q/k/v outputs and the attention's partials pass on as values tagged with
// their layer (Tagged): the attention reads the q/k/v it needs as they
// arrive, and FoldOut the chunks it merges, with no barrier, count or fence
// between the stores and the loads.
//
// At batch 1 the kernel is bound by latency, not bandwidth: each stage's
// input is a round trip through L2 after a grid barrier, and only 8
// computing warps per SM hide it. With no weight copies at all after the
// first layer (stale tiles, an experiment) a layer took 18.0 us against 20.7
// on an H200: the chain of each stage's dependent instructions, two warps a
// scheduler, is most of a layer. With no waits on other blocks either
// (scripts/bench/floor) it took 15.2 us against 19.7. `timeline`
// (decode_kernels.h) shows where each stage's time goes. Its code (~8k
// instructions for bf16) does not fit the SM's instruction caches: a layer
// runs through most of it, and taking out ~600 instructions that were only
// skipped (the profiling clocks) made it 7.9% faster. So what each stage
// fetches again is on the critical path: code is kept out of the layer loop
// (the clocks, in a kernel of their own; the biases, loaded once a launch)
// and shared between stages (LoadInput, TileDots, AddStaged), which made the
// layers 14% faster (576.3 -> 496.4 us a step on an H200).
//
// One file past 500 lines: everything in it is the one kernel's device code
// (its ring, stages and shared-memory layout), compiled as one unit so that
// the stages inline into the kernel where that pays.
#include "decode_kernels.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <type_traits>

#include "decode_common.cuh"

namespace cuda_agent::model::kernels {
namespace {

constexpr int kWarps = kAttentionWarps;  // computing warps; one more copies weights
constexpr int kThreads = kWarps * 32;
static_assert(kThreads == kAttentionThreads, "the computing warps share SyncAttentionThreads()");
constexpr int kTilesInFlight = 16;  // one transaction barrier each
constexpr int kStages = 4;          // weight matrices of a layer, in the order they are read
// Key positions per attention block, a lane each.
constexpr int kChunkKeys = 32;
// Chunks FoldOut's merge loads at once (MergeTagged): 8, not 16, is half the
// merge's code for one more round of loads past 256 keys; batch-1 decode on
// an H200 (128-token prompts, 512 new tokens) 1636.2 tok/s against 1610.8.
constexpr int kMergeChunks = 8;
// The batch's rows: 1 in the batch-1 kernel (kOne), whose loops over rows
// and divisions by the batch fold away at compile time (its code ~1.2k
// instructions shorter than the kernel for any batch, bf16), else `batch`.
template <bool kOne>
__host__ __device__ constexpr int Rows(int64_t batch) {
  return kOne ? 1 : static_cast<int>(batch);
}
// kStageOut and kStageDown are no stages of their own: FoldOut's and
// FoldDown's weights.
enum Stage { kStageQkv = 0, kStageOut = 1, kStageGateUp = 2, kStageDown = 3 };

// What the host decides per launch: the ring's size, the input buffer's,
// the stage sums' (TileDots), the most output rows a block has in a stage,
// and per stage the output rows of one tile, the row pitch and the parts of
// k its units take (Splits).
struct RingPlan {
  int64_t ring_bytes = 0, x_floats = 0, red_floats = 0;
  int64_t bias_rows = 0;  // the most q/k/v rows of a block: its biases' room a layer, before gate/up's (LoadBiases)
  int64_t fold_cols = 0;      // the most gate/up rows of a block: its columns of the down projection (FoldDown)
  int64_t fold_box_rows = 0;  // rows of one 2D copy of them; a tile of the down projection is whole copies
  int64_t out_parts = 0;      // FoldOut's output rows split in parts: block u takes part u % out_parts of head
  int64_t out_rows = 0;       // u / out_parts, out_rows rows (a multiple of 4; a 2D copy a tile)
  int64_t tile_rows[kStages] = {};
  int64_t pitch[kStages] = {};  // bytes between rows of weights and of inputs (RowPitch)
  int splits[kStages] = {};
  bool copy_ahead = false;  // tiles worked out before the wait for room (Producer::Run)
  bool rotate_down = false;  // FoldDown's tiles in an order of the block's (DownTileRow)
  int merge_splits = 1;      // groups of threads that share FoldOut's merge of a head's chunks
  bool chunk_runs = false;   // a block's chunks in a run, the new token's heads prepared once (Attend)
};

// ---- Hopper: bulk copies completing on transaction barriers ----

__device__ inline uint32_t SharedAddress(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// A barrier whose phases complete on `arrivals` arrivals (and the bytes expected).
__device__ inline void BarrierInit(uint64_t* bar, int arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SharedAddress(bar)), "r"(arrivals) : "memory");
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
// Global -> shared, 16-byte multiples, counted on `bar`, under the L2 cache
// policy `policy` (EvictFirst).
__device__ inline void BulkCopy(void* dst, const void* src, int64_t bytes, uint64_t* bar, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          SharedAddress(dst)),
      "l"(src), "r"(static_cast<uint32_t>(bytes)), "r"(SharedAddress(bar)), "l"(policy)
      : "memory");
#endif
}
// A box of a 2D tensor (rows `row` on, columns `col` on) -> shared memory,
// dense, counted on `bar`, under `policy`. `map` lies in the kernel's
// parameters.
__device__ inline void TensorCopy(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
      "%3}], [%4], %5;" ::"r"(SharedAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(SharedAddress(bar)), "l"(policy)
      : "memory");
#endif
}
// *p += v, four floats at once, in L2 (16-byte aligned p).
__device__ inline void RedAddFour(float* p, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
#endif
}

// Asks L2 to fetch [p, p + bytes) (16-byte multiples) from DRAM.
__device__ inline void PrefetchL2(const void* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(static_cast<uint32_t>(bytes)) : "memory");
#endif
}

// What every layer reads besides its weights, into L2 at the launch: the
// norms' weights and the cached keys and values of the span. A decode step's
// LM head streams its weights through L2 just before, so otherwise the first
// reads of them come from DRAM, on the critical path. The copying warp,
// before its first tile; the blocks split the layers' pieces. Batch-1 decode
// on an H200: 1670.2 tok/s against 1657.2 (the kernel alone 492.5 us
// against 495.7).
template <typename T, int HD>
__device__ void PrefetchLayerData(const DecodeLayersArgs& a, const DecodeLayer* layers) {
  const int per_layer = 2 + 2 * static_cast<int>(a.batch), items = static_cast<int>(a.num_layers) * per_layer;
  const int64_t cache_bytes = a.span * a.kv_heads * HD * static_cast<int64_t>(sizeof(T));
  for (int i = blockIdx.x * 32 + threadIdx.x % 32; i < items; i += gridDim.x * 32) {
    const DecodeLayer& layer = layers[i / per_layer];
    const int e = i % per_layer;
    if (e < 2) {
      PrefetchL2(e == 0 ? layer.input_norm : layer.post_norm, a.hidden * static_cast<int64_t>(sizeof(T)));
    } else {
      const int b = (e - 2) / 2;
      const T* cache = static_cast<const T*>((e - 2) % 2 ? layer.v_cache : layer.k_cache);
      PrefetchL2(cache + b * a.max_len * a.kv_heads * HD, cache_bytes);
    }
  }
}

// Orders this block's earlier shared-memory reads before later bulk copies.
__device__ inline void AsyncProxyFence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// The calling thread waits until *counter reaches `target`; what was written
// before the arrivals it counts (released) is visible to its later loads.
__device__ inline void WaitForCount(const unsigned* counter, unsigned target) {
  unsigned seen = 0;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
  } while (seen < target);
}

// The attention's partial softmaxes pass to FoldOut as tagged values: each
// float in the low word of 64 bits and the layer's tag (its index + 1; the
// buffer is zeros at the launch) in the high word, written and read as one
// access. A reader that sees the tag has the value, so no count of the
// chunks, no fence and no second round trip stand between the attention's
// stores and the merge: a release (a fence, MEMBAR.ALL.GPU) costs ~0.5-1.3
// us on an H200 in this kernel, and grid barriers with relaxed arrivals
// (timing only) made it 11% faster. The q/k/v outputs pass on the same way.
__device__ inline uint64_t Tagged(float v, uint32_t tag) {
  return static_cast<uint64_t>(tag) << 32 | __float_as_uint(v);
}
__device__ inline void StoreTagged(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// Two at p (16-byte aligned); each is one access of its own.
__device__ inline void StoreTaggedTwo(uint64_t* p, uint64_t v0, uint64_t v1) {
  asm volatile("st.relaxed.gpu.global.v2.b64 [%0], {%1, %2};" ::"l"(p), "l"(v0), "l"(v1) : "memory");
}
__device__ inline void LoadTaggedTwo(const uint64_t* p, uint64_t* v0, uint64_t* v1) {
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(*v0), "=l"(*v1) : "l"(p) : "memory");
}
__device__ inline uint64_t LoadTagged(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline float TaggedValue(uint64_t v) { return __uint_as_float(static_cast<uint32_t>(v)); }
__device__ inline bool HasTag(uint64_t v, uint32_t tag) { return static_cast<uint32_t>(v >> 32) == tag; }

// MergeFour (decode_common.cuh) over tagged partials, chunks [begin, end):
// C chunks' values are loaded together and again, all of them, until every
// one carries `tag`. The merge's maximum M, sum S and unnormalised outputs O
// (M -infinity and S 0 where there is no chunk).
template <int HD, int C>
__device__ inline void MergeTagged(const uint64_t* partials, int64_t begin, int64_t end, int h, int d, uint32_t tag,
                                   float& M, float& S, float (&O)[4]) {
  constexpr int G = kDecodeMaxGroup;
  constexpr int64_t chunk_values = G * (HD + 2);
  const uint64_t* pm = partials + h;
  const uint64_t* po = partials + 2 * G + h * HD + d;
  M = -INFINITY, S = 0, O[0] = O[1] = O[2] = O[3] = 0;
  for (int64_t c0 = begin; c0 < end; c0 += C) {
    uint64_t em[C], es[C], eo[C][4];
    for (bool ready = false; !ready;) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int64_t at = (c0 + c) * chunk_values;
        if (c0 + c < end) {
          em[c] = LoadTagged(pm + at), es[c] = LoadTagged(pm + at + G);
          LoadTaggedTwo(po + at, &eo[c][0], &eo[c][1]);
          LoadTaggedTwo(po + at + 2, &eo[c][2], &eo[c][3]);
        } else {  // no chunk: no weight
          em[c] = es[c] = eo[c][0] = eo[c][1] = eo[c][2] = eo[c][3] = Tagged(0.f, tag);
        }
      }
      ready = true;
#pragma unroll
      for (int c = 0; c < C; ++c)
        ready = ready && HasTag(em[c], tag) && HasTag(es[c], tag) && HasTag(eo[c][0], tag) &&
                HasTag(eo[c][1], tag) && HasTag(eo[c][2], tag) && HasTag(eo[c][3], tag);
    }
    float cm[C], cs[C];
    float4 co[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      cm[c] = TaggedValue(em[c]), cs[c] = TaggedValue(es[c]);
      co[c] = {TaggedValue(eo[c][0]), TaggedValue(eo[c][1]), TaggedValue(eo[c][2]), TaggedValue(eo[c][3])};
    }
    MergeRound<C>(cm, cs, co, M, S, O);
  }
}

// A fold's tile of products, staged [batch, tile_rows] (`rows` of them, a
// multiple of 4), added into `to` (batch row b at b * hidden) four at a time
// by vector reductions. One out-of-line copy for both folds, no division:
// the kernel's code does not fit the instruction cache (see the top).
template <bool kOne>
__device__ __noinline__ void AddStaged(const float* staged, int tile_rows, int rows, int batch, float* to,
                                       int hidden) {
  for (int b = 0; b < Rows<kOne>(batch); ++b)
#pragma unroll 1
    for (int e = threadIdx.x * 4; e < rows; e += kThreads * 4)
      RedAddFour(to + b * hidden + e, *reinterpret_cast<const float4*>(staged + b * tile_rows + e));
}

// The GPU's clock in ns (%globaltimer), one for every SM.
__device__ inline unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Every block of the grid (all resident: a cooperative launch) waits here
// until the blocks' arrivals reach `target`; writes before it are visible
// to L2 loads (__ldcg) after it. The computing warps only. Profiling: the
// block's arrival time into *arrived (where set).
__device__ inline void GridBarrier(unsigned* counter, unsigned target, unsigned long long* arrived) {
  SyncAttentionThreads();
  if (threadIdx.x == 0) {
    if (arrived) *arrived = GlobalTimer();
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    WaitForCount(counter, target);
  }
  SyncAttentionThreads();
}

// Layer l's fp32 copies of the residual stream: after the attention (the o
// projection added) and after the MLP (the down projection added), each in
// two copies by the layer's parity, so that a layer's sums start while
// other blocks still read the last layer's (no grid barrier after q/k/v).
__device__ inline float* AttnSum(const DecodeLayersArgs& a, int64_t l) {
  return a.attn_sum + l % 2 * a.batch * a.hidden;
}
__device__ inline float* HSum(const DecodeLayersArgs& a, int64_t l) { return a.h_sum + l % 2 * a.batch * a.hidden; }

// The GEMV of stage s of `layer` and its output rows n.
__device__ inline DecodeGemvArgs StageGemv(const DecodeLayersArgs& a, int s, const DecodeLayer& layer, int64_t* n) {
  DecodeGemvArgs g;
  g.batch = a.batch;
  g.eps = a.eps;
  if (s == kStageQkv) {
    g.x = a.h, g.k = a.hidden, g.norm_weight = layer.input_norm, g.y = a.qkv;
    g.m[0] = layer.q, g.m[1] = layer.k, g.m[2] = layer.v;
    *n = layer.q.rows + layer.k.rows + layer.v.rows;
  } else if (s == kStageOut) {  // FoldOut's: one head's columns of it
    g.k = a.head_dim, g.m[0] = layer.o;
    *n = a.hidden;
  } else if (s == kStageGateUp) {
    g.x = a.h, g.k = a.hidden, g.norm_weight = layer.post_norm, g.swiglu = true;  // outputs: FoldDown's
    g.m[0] = layer.gate, g.m[1] = layer.up;
    *n = a.mlp;
  } else {  // FoldDown's: inputs from the gate/up stage, outputs added to a.h_sum
    g.k = a.mlp, g.m[0] = layer.down;
    *n = a.hidden;
  }
  return g;
}

// This block's share [j0, j1) of n rows, split in runs of `align` (n a
// multiple of it; n * blocks < 2^31).
__device__ inline void BlockRows(int64_t n, int64_t align, int64_t* j0, int64_t* j1) {
  const int runs = static_cast<int>(n / align);
  *j0 = runs * blockIdx.x / gridDim.x * align;
  *j1 = runs * (blockIdx.x + 1) / gridDim.x * align;
}

// This block's gate/up rows: runs of 16 bytes of weights, as they are its
// columns of the down projection (FoldDown), whose 2D copies start at
// 16-byte aligned addresses.
template <typename T>
__device__ inline void GateUpRows(const DecodeLayersArgs& a, int64_t* j0, int64_t* j1) {
  BlockRows(a.mlp, 16 / sizeof(T), j0, j1);
}

// FoldOut's unit of this block, if it has one: query head *head, output
// rows [j0, j1).
__device__ inline bool OutUnit(const DecodeLayersArgs& a, const RingPlan& p, int* head, int64_t* j0, int64_t* j1) {
  const int64_t u = blockIdx.x;
  if (u >= a.heads * p.out_parts) return false;
  *head = static_cast<int>(u / p.out_parts);
  *j0 = u % p.out_parts * p.out_rows;
  *j1 = min(a.hidden, *j0 + p.out_rows);
  return true;
}

// This block's rows of stage s (of n): q/k/v split evenly, of the o
// projection its OutUnit's, gate/up as GateUpRows; of the folded down
// projection every row (hidden), for a block with gate/up rows.
template <typename T>
__device__ inline void StageRows(const DecodeLayersArgs& a, const RingPlan& p, int s, int64_t n, int64_t* j0,
                                 int64_t* j1) {
  if (s == kStageQkv) return BlockRows(n, 1, j0, j1);
  if (s == kStageOut) {
    int head;
    if (!OutUnit(a, p, &head, j0, j1)) *j0 = *j1 = 0;
    return;
  }
  GateUpRows<T>(a, j0, j1);
  if (s == kStageDown) *j1 = *j0 < *j1 ? n : 0, *j0 = 0;
}

// The first row of FoldDown's tile t (of the n rows' tiles): with
// RingPlan::rotate_down block b takes its tiles from tile b on, so that at
// any moment the grid's vector reductions are spread over every tile's rows
// of the stream rather than all blocks adding into the same rows at once.
__device__ inline int64_t DownTileRow(const RingPlan& p, int64_t n, int64_t t) {
  const int64_t rows = p.tile_rows[kStageDown], tiles = (n + rows - 1) / rows;
  return (p.rotate_down ? (t + blockIdx.x) % tiles : t) * rows;
}

// The o and the down projections as 2D tensors ([hidden, heads * head_dim]
// and [hidden, mlp]), a layer each, whose boxes the copying warp copies for
// FoldOut (head_dim columns by RingPlan::tile_rows[kStageOut] rows) and
// FoldDown (fold_cols columns by fold_box_rows rows). Kernel parameters.
struct FoldMaps {
  CUtensorMap out[kDecodeMaxLayers];
  CUtensorMap down[kDecodeMaxLayers];
};

// Tile t lands on done[t % kTilesInFlight] and is released on
// freed[t % kTilesInFlight], phase t / kTilesInFlight of both.
struct Ring {
  const DecodeLayer* layers;  // a copy of the launch's, in shared memory
  unsigned char* data;
  uint64_t* done;   // [kTilesInFlight]
  uint64_t* freed;  // [kTilesInFlight]
  int* offset;      // [kTilesInFlight]: where in `data` tile t lies
  // [kTilesInFlight]: the copying warp's position past tile t; here, as an
  // array the Producer indexed at run time would put all of it in local memory.
  uint32_t* end;
};

// The copying warp's side of the ring: the next tile to copy and the ring's
// free bytes, the same in every lane; the lanes copy a tile's rows. Positions
// count bytes since the launch; a tile never wraps around.
struct Producer {
  int64_t layer = 0, row = -1;  // -1: this block's first row of the stage
  int stage = 0;
  int64_t issued = 0, consumed = 0;  // tiles
  uint32_t head = 0, tail = 0;       // bytes: ends of the last issued and of the last consumed tile
  uint64_t policy = EvictFirst();    // of the weight copies

  // Waits for the computing warps to release the oldest tile in flight.
  // `ring_full`: block 0's cycles waiting per stage (null: not profiled).
  __device__ void Reclaim(const Ring& ring, unsigned long long* ring_full) {
    const int q = static_cast<int>(consumed % kTilesInFlight);
    const long long start = ring_full ? clock64() : 0;
    BarrierWait(&ring.freed[q], static_cast<uint32_t>(consumed / kTilesInFlight) & 1);
    if (ring_full && threadIdx.x % 32 == 0) ring_full[stage] += clock64() - start;
    tail = ring.end[q];
    ++consumed;
  }

  // Copies every layer's tiles, each as soon as the ring has room for it.
  // With RingPlan::copy_ahead a tile is worked out whole (its rows, each
  // lane's source) before the wait for that room, so that a release is
  // followed by the copies alone; without, it is worked out again after the
  // release. Where a block's weights of a layer are several
  // rings (the Qwen2.5-1.5B shape) the copies follow the releases and that
  // work is on the critical path; where they are about one ring (0.5B) the
  // copies issued sooner slow the computing warps' L2 round trips (PlanRing).
  // A tile of the o or the down projection is 2D copies (boxes), dense, at
  // a 128-byte aligned place in the ring: of the o projection one box of
  // tile_rows rows by head_dim columns, of the down projection boxes of
  // fold_box_rows rows by fold_cols columns. `ring_full`: block 0's cycles
  // waiting for room per stage, in shared memory (null: not profiled),
  // added to the timeline at the end.
  template <typename T>
  __device__ void Run(const DecodeLayersArgs& a, const RingPlan& p, const FoldMaps& maps, const Ring& ring,
                      unsigned long long* ring_full) {
    const int lane = threadIdx.x % 32;
    while (layer < a.num_layers) {
      int64_t n, j0, j1;
      const DecodeGemvArgs g = StageGemv(a, stage, ring.layers[layer], &n);
      StageRows<T>(a, p, stage, n, &j0, &j1);
      if (row < 0) row = j0;
      if (row >= j1) {
        row = -1;
        if (++stage == kStages) stage = 0, ++layer;
        continue;
      }
      const bool fold = stage == kStageOut || stage == kStageDown;
      // The tile's first row: `row` counts the stage's tiles in order.
      const int64_t at = stage == kStageDown ? j0 + DownTileRow(p, j1 - j0, (row - j0) / p.tile_rows[stage]) : row;
      const int64_t rows = min(p.tile_rows[stage], j1 - at), row_bytes = g.k * static_cast<int64_t>(sizeof(T));
      const int count = static_cast<int>(rows) * (g.swiglu ? 2 : 1);  // gate rows, then the same rows of up
      const int64_t box_rows = stage == kStageDown ? p.fold_box_rows : p.tile_rows[stage];
      const int boxes = fold ? static_cast<int>((rows + box_rows - 1) / box_rows) : 0;
      const uint32_t bytes = static_cast<uint32_t>((fold ? boxes * box_rows : count) * p.pitch[stage]);
      const uint32_t size = static_cast<uint32_t>(p.ring_bytes);
      uint32_t start = fold ? (head + 127) / 128 * 128 : head;
      if (start % size + bytes > size) start += size - start % size;
      auto full = [&] { return issued - consumed == kTilesInFlight || start + bytes - tail > size; };
      if (full() && !p.copy_ahead) {
        Reclaim(ring, ring_full);
        continue;
      }
      auto source = [&](int i) {  // row i of the tile: gate rows, then the same rows of up
        const T* bias;
        return g.swiglu ? WeightRow<T, true>(g, at + i % rows, i / rows, &bias)
                        : WeightRow<T, false>(g, at + i, 0, &bias);
      };
      // This lane's first row (or the tile's boxes' first column).
      const CUtensorMap* map = nullptr;
      int64_t col = 0;
      const T* from = nullptr;
      if (fold) {
        int64_t c1;
        if (stage == kStageOut) {
          int out_head;
          OutUnit(a, p, &out_head, &col, &c1);
          col = out_head * a.head_dim;
        } else {
          GateUpRows<T>(a, &col, &c1);
        }
        map = stage == kStageOut ? &maps.out[layer] : &maps.down[layer];
      } else if (lane < count) {
        from = source(lane);
      }
      while (full()) Reclaim(ring, ring_full);
      const int q = static_cast<int>(issued % kTilesInFlight);
      unsigned char* dst = ring.data + start % size;
      if (lane == 0) {
        ring.offset[q] = static_cast<int>(start % size);
        BarrierExpectBytes(&ring.done[q], fold ? bytes : static_cast<uint32_t>(count * row_bytes));
      }
      ring.end[q] = start + bytes;  // the same in every lane
      __syncwarp();
      AsyncProxyFence();
      if (fold) {
        for (int box = lane; box < boxes; box += 32)
          TensorCopy(dst + box * box_rows * p.pitch[stage], map, static_cast<int>(col),
                     static_cast<int>(at + box * box_rows), &ring.done[q], policy);
      } else {
        if (lane < count) BulkCopy(dst + lane * p.pitch[stage], from, row_bytes, &ring.done[q], policy);
        for (int i = lane + 32; i < count; i += 32)  // a row each, RowPitch apart
          BulkCopy(dst + i * p.pitch[stage], source(i), row_bytes, &ring.done[q], policy);
      }
      head = start + bytes;
      ++issued;
      row += p.tile_rows[stage];
    }
    // All issued; the copies complete on their own.
    if (ring_full && threadIdx.x % 32 == 0)
      for (int s = 0; s < kStages; ++s) a.timeline[23 + 10 * a.num_layers + s] = ring_full[s];
  }
};

// Elements [e, e + V) of the residual stream (k a row), plus `bias` where
// set, added by atomics into its fp32 copy `stream`.
template <typename T, int V>
__device__ inline void PassOn(const Pack<T, V>& v, int e, int k, float* stream, const T* bias) {
  float f[V];
  const T* b = bias ? bias + e % k : nullptr;  // the pack lies in one row
#pragma unroll
  for (int i = 0; i < V; ++i) f[i] = ToFloat(v.v[i]) + (b ? ToFloat(b[i]) : 0.f);
#pragma unroll
  for (int i = 0; i < V; i += 4) {
    RedAddFour(stream + e + i, {f[i], f[i + 1], f[i + 2], f[i + 3]});
  }
}

// Bytes between rows of a stage's weights in the ring and of its input in
// shared memory: rows of `bytes`, padded so that the next starts 16 bytes
// into a 128-byte line. The eight rows of a matrix that ldmatrix loads, 16
// bytes each at the same k, then hit different banks (TileDots).
constexpr int64_t RowPitch(int64_t bytes) { return (bytes + 127) / 128 * 128 + 16; }

// The stage's input [batch, k] into xs (row b at b * pitch elements) in T,
// times the RMSNorm weight `norm` (the 1 / rms of each batch row scales the
// outputs instead: each warp's sums of squares go into `squares`, kWarps *
// kDecodeMaxRows floats): x, or with `sum` an fp32 copy of the residual
// stream (FoldOut's or FoldDown's) rounded to T. With `stream` the block
// passes its share of the input, packs [share0, share1), on to the next
// fp32 copy of the stream: adds it there, plus `bias` where set, by
// atomics. The kernel works the share out once a
// launch (Consumer; both stages' k is hidden): here, its two divisions
// came before the first load, on the critical path.
//
// The kernel's code does not fit the instruction cache (see the top), so
// every layer fetches much of it again: this is one out-of-line copy for both
// stages (its arguments values, not a struct by reference, which would
// live in local memory), that loads a pack a thread at a time (a row of 896
// at batch 1 is 112 packs, one round for the block). Four packs at once
// (four copies of the loop's body) made a step's layers 3.6% slower at
// batch 1 on an H200 (577.7 against 557.8 us; at batch 8 1.6% faster).
template <typename T, bool kOne>
__device__ __noinline__ void LoadInput(const T* x, const float* sum, const T* norm, int batch, int k, int pitch,
                                       T* xs, float* squares, float* stream, int share0, int share1,
                                       const T* bias) {
  constexpr int V = 16 / sizeof(T), R = kDecodeMaxRows;
  batch = Rows<kOne>(batch);
  const int packs = batch * k / V;
  float ss[R] = {};
  for (int i = threadIdx.x; i < packs; i += kThreads) {
    Pack<T, V> v = sum ? RoundPackCoherent<T, V>(sum + i * V) : LoadPackCoherent<T, V>(x + i * V);
    const int col = kOne ? i * V : i * V % k, b = kOne ? 0 : i * V / k;  // the pack's place: row b, column col
    const Pack<T, V> w = *reinterpret_cast<const Pack<T, V>*>(norm + col);
    if (stream && i >= share0 && i < share1) PassOn<T, V>(v, i * V, k, stream, bias);
    float s = 0;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float f = ToFloat(v.v[e]);
      s += f * f;
      v.v[e] = FromFloat<T>(f * ToFloat(w.v[e]));
    }
    *reinterpret_cast<Pack<T, V>*>(xs + b * pitch + col) = v;
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r == b) ss[r] += s;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= batch) break;
    const float total = WarpSum(ss[r]);
    if (lane == 0) squares[warp * R + r] = total;
  }
  SyncAttentionThreads();
}

// Profiling: block 0's thread 0 adds the cycles of each phase of a stage's
// work to slots[phase], in shared memory so that the clock costs no global
// round trip (nothing where slots is null).
struct PhaseClock {
  unsigned long long* slots = nullptr;
  long long last = 0;
  __device__ void Start() {
    if (slots && threadIdx.x == 0) last = clock64();
  }
  __device__ void Lap(int phase) {
    if (slots && threadIdx.x == 0) {
      const long long now = clock64();
      slots[phase] += now - last;
      last = now;
    }
  }
};

__device__ inline float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
  return v;
}

// ---- Attention: a block per (row b, key head g, chunk z of kChunkKeys keys) ----
//
// Each warp takes one query head of the group, its lanes one key each: the
// chunk's keys and values are staged in shared memory as fp32, and a warp's
// softmax over the chunk needs only warp shuffles. Each (chunk, head) leaves
// a partial softmax in `partial` (per chunk: kDecodeMaxGroup maxima, as many
// sums, kDecodeMaxGroup x HD unnormalised outputs), tagged with the layer
// (Tagged), which FoldOut merges.

// Shared memory of Attend: the keys (rows padded by 4 floats, so that lanes
// reading different keys hit different banks), the values, the queries.
template <int HD>
constexpr int kAttendFloats = kChunkKeys * (HD + 4) + kChunkKeys * HD + kDecodeMaxGroup * HD;

// Row b's key positions [begin, end) in chunk z, and its new token's
// position: rows past the span (idle slots) see the span.
struct KeyRange {
  int64_t pos, begin, end;
};
__device__ inline KeyRange ChunkKeys(const DecodeAttentionArgs& a, int64_t b, int64_t z) {
  const int64_t pos = a.positions[b], last = pos < a.span ? pos : a.span - 1, begin = z * kChunkKeys;
  return {pos, begin, min(begin + kChunkKeys, last + 1)};
}

// One head of the new token in a warp, lane l holding elements l + 32 i:
// Qwen3's RMSNorm (with `norm`, weights w), then the rotary embedding at
// `pos` (freq: the lane's inverse frequencies).
template <int HD>
__device__ void PrepareHead(float (&x)[HD / 32], bool norm, const float (&w)[HD / 32], const float (&freq)[HD / 64],
                            float eps, int64_t pos) {
  constexpr int N = HD / 32;
  if (norm) {
    float ss = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) ss += x[i] * x[i];
    const float r = rsqrtf(WarpSum(ss) / HD + eps);
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] = x[i] * r * w[i];
  }
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {  // element d pairs with d + HD / 2
    const float angle = static_cast<float>(pos) * freq[i], c = cosf(angle), s = sinf(angle);
    const float x0 = x[i], x1 = x[i + N / 2];
    x[i] = x0 * c - x1 * s;
    x[i + N / 2] = x1 * c + x0 * s;
  }
}

// Row b, key head g, chunk z of `chunks`, by the block. With `heads` it
// prepares the new token's heads (the queries stay in `scratch` for the
// block's next chunks of the row's key head), and with `store_new` writes
// the new key and value into the cache; the chunk holding the new position
// takes them from the warp that prepared them (so it prepares the heads),
// and no block waits for another. `scratch`: kAttendFloats<HD> floats of
// shared memory.
template <typename T, int HD>
__device__ void Attend(const DecodeAttentionArgs& a, int64_t b, int64_t g, int64_t z, int64_t chunks, bool heads,
                       bool store_new, uint64_t* partial, uint32_t tag, float* scratch, PhaseClock& clock) {
  constexpr int G = kDecodeMaxGroup, N = HD / 32, KS = HD + 4, P = 16 / sizeof(T);
  constexpr int packs = kChunkKeys * HD / P, loads = (2 * packs + kThreads - 1) / kThreads;  // of keys and values
  const int group = static_cast<int>(a.heads / a.kv_heads), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const KeyRange r = ChunkKeys(a, b, z);
  const int64_t stride = a.kv_heads * HD;  // between positions
  T* kc = static_cast<T*>(a.k_cache) + (b * a.max_len * a.kv_heads + g) * HD;  // position 0 of slot b, head g
  T* vc = static_cast<T*>(a.v_cache) + (b * a.max_len * a.kv_heads + g) * HD;
  float* keys = scratch;
  float* values = keys + kChunkKeys * KS;
  float* queries = values + kChunkKeys * HD;
  // The cached keys and values first: their loads are in flight while the
  // new token's heads are prepared. Rows past the chunk's keys are zeros
  // (their softmax weight is 0, and 0 times a stale value could be NaN).
  Pack<T, P> kv[loads];
#pragma unroll
  for (int u = 0; u < loads; ++u) {
    const int i = threadIdx.x + u * kThreads, j = i % packs / (HD / P), e = i % packs % (HD / P) * P;
    const int64_t t = r.begin + j;
    if (i < 2 * packs && t < r.end && t != r.pos)
      kv[u] = *reinterpret_cast<const Pack<T, P>*>((i < packs ? kc : vc) + t * stride + e);
    else
      kv[u] = Pack<T, P>{};
  }
  // The new token's heads, a warp each: the group's queries, then the key
  // and value together.
  const uint64_t* row = static_cast<const uint64_t*>(a.qkv) + b * (a.heads + 2 * a.kv_heads) * HD;
  float freq[N / 2], qn[N], kn[N];  // loaded with the heads, not after them
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (i < N / 2) freq[i] = a.inv_freq[lane + 32 * i];
    qn[i] = a.q_norm ? ToFloat(static_cast<const T*>(a.q_norm)[lane + 32 * i]) : 0.f;
    kn[i] = a.k_norm ? ToFloat(static_cast<const T*>(a.k_norm)[lane + 32 * i]) : 0.f;
  }
  for (int h = heads ? warp : group + 1; h <= group; h += kWarps) {
    float x[N], v[N];
    // The q/k/v stage's outputs as they arrive (Tagged): their loads all
    // in flight, then again where one is not this layer's yet.
    const uint64_t* src = row + (h < group ? g * group + h : a.heads + g) * HD + lane;
    const uint64_t* vsrc = row + (a.heads + a.kv_heads + g) * HD + lane;
    uint64_t ex[N], ev[N];
#pragma unroll
    for (int i = 0; i < N; ++i) ex[i] = LoadTagged(src + 32 * i), ev[i] = h == group ? LoadTagged(vsrc + 32 * i) : 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      while (!HasTag(ex[i], tag)) ex[i] = LoadTagged(src + 32 * i);
      while (h == group && !HasTag(ev[i], tag)) ev[i] = LoadTagged(vsrc + 32 * i);
      x[i] = TaggedValue(ex[i]), v[i] = TaggedValue(ev[i]);
    }
    float w[N];  // chosen element by element: a pointer to qn or kn would put both in local memory
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = h < group ? qn[i] : kn[i];
    PrepareHead<HD>(x, a.q_norm != nullptr, w, freq, a.eps, r.pos);
    if (h < group) {
#pragma unroll
      for (int i = 0; i < N; ++i) queries[h * HD + lane + 32 * i] = x[i];
      continue;
    }
    const int64_t at = r.pos - r.begin;  // the new key's row in this chunk, if any
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const T k_t = FromFloat<T>(x[i]), v_t = FromFloat<T>(v[i]);  // as the cache holds them
      if (store_new) kc[r.pos * stride + lane + 32 * i] = k_t, vc[r.pos * stride + lane + 32 * i] = v_t;
      if (at >= 0 && r.pos < r.end)
        keys[at * KS + lane + 32 * i] = ToFloat(k_t), values[at * HD + lane + 32 * i] = ToFloat(v_t);
    }
  }
  clock.Lap(0);
#pragma unroll
  for (int u = 0; u < loads; ++u) {
    const int i = threadIdx.x + u * kThreads, j = i % packs / (HD / P), e = i % packs % (HD / P) * P;
    if (i >= 2 * packs || (r.begin + j == r.pos && r.pos < r.end)) continue;  // the new key's row: its warp's
    float f[P];
#pragma unroll
    for (int x = 0; x < P; ++x) f[x] = ToFloat(kv[u].v[x]);
    float* dst = i < packs ? keys + j * KS + e : values + j * HD + e;
#pragma unroll
    for (int x = 0; x < P; x += 4) *reinterpret_cast<float4*>(dst + x) = *reinterpret_cast<const float4*>(f + x);
  }
  SyncAttentionThreads();
  clock.Lap(1);
  // A warp per query head: lane j scores key begin + j.
  const int present = r.end > r.begin ? static_cast<int>(r.end - r.begin) : 0;
  uint64_t* mine = partial + ((b * a.kv_heads + g) * chunks + z) * G * (HD + 2);
  for (int h = warp; h < group; h += kWarps) {
    const float* q = queries + h * HD;
    const float* k = keys + lane * KS;
    float dot[4] = {};
#pragma unroll
    for (int d = 0; d < HD; d += 4) {
      const float4 qv = *reinterpret_cast<const float4*>(q + d), kv4 = *reinterpret_cast<const float4*>(k + d);
      dot[0] += qv.x * kv4.x, dot[1] += qv.y * kv4.y, dot[2] += qv.z * kv4.z, dot[3] += qv.w * kv4.w;
    }
    const float score = lane < present ? (dot[0] + dot[1] + dot[2] + dot[3]) * a.scale : -INFINITY;
    const float m = WarpMax(score);
    const float p = lane < present ? expf(score - m) : 0.f, sum = WarpSum(p);
    float o[N] = {};
#pragma unroll
    for (int j = 0; j < kChunkKeys; ++j) {  // past `present`: p 0, values 0
      const float pj = __shfl_sync(0xffffffff, p, j);
      const float* vr = values + j * HD + lane * N;
#pragma unroll
      for (int e = 0; e < N; ++e) o[e] += pj * vr[e];
    }
    if (lane == 0) StoreTagged(mine + h, Tagged(m, tag)), StoreTagged(mine + G + h, Tagged(sum, tag));  // sum 0: no key
    static_assert(N % 2 == 0, "a lane's outputs in pairs");
#pragma unroll
    for (int e = 0; e < N; e += 2)
      StoreTaggedTwo(mine + 2 * G + h * HD + lane * N + e, Tagged(o[e], tag), Tagged(o[e + 1], tag));
  }
  clock.Lap(2);
}

// ---- The attention of one query head over all its keys, in the block ----
//
// At batch 1 each block that multiplies a query head by its columns of the
// o weights (FoldOut) takes that head's attention itself, over every key,
// so that no other block's partial softmaxes stand between the q/k/v
// outputs and the o projection. The 9 blocks of a head (14 heads at
// Qwen2.5-0.5B's shape) each read the key head's cached keys and values;
// from L2 that costs about what one block's read does (l2_fanout_bench: 96
// KB into each of 132 blocks at once, 1.02 us a block against 0.90 for one
// alone). kAttendLanes lanes take a key, its elements in as many parts (its
// score: a few shuffles), a warp 32 / kAttendLanes keys a round; the loads
// of R rounds (kAttendPacks 16-byte loads a lane) are in flight together,
// the first R before the wait for the new token's q/k/v, in two halves:
// once a half's keys are taken, its registers load the keys R rounds on
// while the other half's are taken. Each lane keeps a
// running softmax of its keys; the warps' are merged with the new token's
// key in shared memory. On an H200 (decode_ab.sh, 384 keys) the kernel took
// 448.6 us against 478.5 with the chunks split over blocks and merged, 452.1
// with 4 lanes a key, 465.8 with 4 lanes, two rounds and loads under
// branches instead of predicates; the halves made it 444.1 against 456.1
// (all R rounds taken, then the next R loaded).
constexpr int kAttendLanes = 8;         // lanes a key
constexpr int kAttendPacks = 16;        // 16-byte loads of keys and values a lane has in flight: 64 registers

// The most keys over which a batch-1 step's o-projection blocks take the
// attention themselves (the kernel's kFold; CUDA_AGENT_DECODE_FOLD_KEYS
// overrides it), with heads of up to 64 elements: with heads of 128
// (Qwen2.5-1.5B's shape: twice the bytes a key) the kernel took 1160.8 us
// against 1130.8 with the chunks. A block reads its head's every key, so
// the time grows with the span; past these keys the batch-1 kernel takes the
// chunks, which spread the keys over the grid. On an H100 at Qwen2.5-0.5B's
// shape it took 475.1 us at 640 keys against 500.5 through the chunks, 504.6
// against 506.9 at 896, 557.4 against 508.2 at 1280 and 644.8 against 527.1
// at 2048 (the o stage's input 12.69 us a layer against 3.49): the lines
// cross near 900 keys.
constexpr int64_t kFoldAttentionKeys = 896;
int64_t FoldAttentionKeys() {
  static const int64_t keys = [] {
    const char* env = std::getenv("CUDA_AGENT_DECODE_FOLD_KEYS");
    return env ? std::atoll(env) : kFoldAttentionKeys;
  }();
  return keys;
}

// Whether a step of `batch` rows over `span` keys takes its attention in
// the o projection's blocks (the batch-1 kernel, heads of up to 64); the
// host sizes the chunks' partials by it (DecodeLayersAttentionChunks).
bool AttendsInFold(int64_t batch, int64_t span, int64_t head_dim) {
  return batch == 1 && head_dim <= 64 && span <= FoldAttentionKeys();
}

// Shared memory of AttendHead after the batch's outputs: the query, the new
// key and value, and each warp's maximum, sum and outputs.
template <int HD>
constexpr int kAttendHeadFloats = 3 * HD + kWarps * (HD + 2);
static_assert(64 + kAttendHeadFloats<64> <= kAttendFloats<64>,
              "FoldOut's outputs and AttendHead's work space in the stage input's room");

// 16 bytes at p where `pred`, zeros elsewhere: a predicated load, with no
// branch, so that a round of them is in flight together.
__device__ inline uint4 LoadIf(const void* p, bool pred) {
  uint4 v{0, 0, 0, 0};
  asm volatile(
      "{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n @q ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// Element e of 16 bytes of T as float (e a constant once unrolled).
template <typename T>
__device__ inline float PackElement(const uint4& p, int e) {
  const uint32_t w = (&p.x)[e * sizeof(T) / 4];
  if constexpr (sizeof(T) == 4) return __uint_as_float(w);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(e % 2 ? w & 0xffff0000u : w << 16);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(e % 2 ? w >> 16 : w & 0xffffu)));
}

// Head `head` of row b (of `positions`, in shared memory) in `layer`: its
// attention output into out (HD floats, rounded to T as the o projection's
// input is). write_cache: this block stores the new key and value into the
// cache (one block a key head). `scratch`: kAttendHeadFloats<HD> floats.
template <typename T, int HD>
__device__ void AttendHead(const DecodeLayersArgs& a, const DecodeLayer& layer, const int64_t* positions, int64_t b,
                           int head, bool write_cache, uint32_t tag, float* out, float* scratch) {
  constexpr int L = kAttendLanes, Q = HD / L, V = 16 / sizeof(T), PK = Q / V, N = HD / 32;  // a lane's elements
  constexpr int R = 2 * PK >= kAttendPacks ? 1 : kAttendPacks / (2 * PK);  // rounds whose loads are in flight
  constexpr int kRoundKeys = kWarps * 32 / L;
  const int group = static_cast<int>(a.heads / a.kv_heads), g = head / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % L;
  const int64_t pos = positions[b], cached = min(pos, a.span);  // keys [0, cached) from the cache
  const int64_t stride = a.kv_heads * HD, first = warp * (32 / L) + lane / L;
  const T* kc = static_cast<const T*>(layer.k_cache) + (b * a.max_len * a.kv_heads + g) * HD + c * Q;
  const T* vc = static_cast<const T*>(layer.v_cache) + (b * a.max_len * a.kv_heads + g) * HD + c * Q;
  float* query = scratch;
  float* key = query + HD;
  float* value = key + HD;
  float* part = value + HD;  // [kWarps][HD + 2]: maximum, sum, outputs
  // Two halves of the R rounds, one taken while the other's loads are in
  // flight; raw words (PackElement): a Pack of 16-bit values would take a
  // register an element.
  constexpr int H = R / 2;
  static_assert(H >= 1, "two halves of at least a round each");
  uint4 kp[2][H][PK], vp[2][H][PK];
  auto load = [&](uint4 (&k)[H][PK], uint4 (&v)[H][PK], int64_t r0) {
#pragma unroll
    for (int u = 0; u < H; ++u) {
      const int64_t t = (r0 + u) * kRoundKeys + first;
#pragma unroll
      for (int i = 0; i < PK; ++i) {
        k[u][i] = LoadIf(kc + t * stride + i * V, t < cached);
        v[u][i] = LoadIf(vc + t * stride + i * V, t < cached);
      }
    }
  };
  load(kp[0], vp[0], 0);
  load(kp[1], vp[1], H);
  // The new token's query (warp 0) and key and value (warp 1) as the q/k/v
  // stage's outputs arrive (Tagged), normed and rotated.
  if (warp < 2) {
    const uint64_t* row = static_cast<const uint64_t*>(a.qkv) + b * (a.heads + 2 * a.kv_heads) * HD + lane;
    const uint64_t* src = row + (warp == 0 ? head : a.heads + g) * HD;
    const uint64_t* vsrc = row + (a.heads + a.kv_heads + g) * HD;
    uint64_t ex[N], ev[N];
#pragma unroll
    for (int i = 0; i < N; ++i) ex[i] = LoadTagged(src + 32 * i), ev[i] = warp == 1 ? LoadTagged(vsrc + 32 * i) : 0;
    float x[N], v[N], w[N], freq[N / 2];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (i < N / 2) freq[i] = a.inv_freq[lane + 32 * i];
      const void* norm = warp == 0 ? layer.q_norm : layer.k_norm;
      w[i] = norm ? ToFloat(static_cast<const T*>(norm)[lane + 32 * i]) : 0.f;
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      while (!HasTag(ex[i], tag)) ex[i] = LoadTagged(src + 32 * i);
      while (warp == 1 && !HasTag(ev[i], tag)) ev[i] = LoadTagged(vsrc + 32 * i);
      x[i] = TaggedValue(ex[i]), v[i] = TaggedValue(ev[i]);
    }
    PrepareHead<HD>(x, layer.q_norm != nullptr, w, freq, a.eps, pos);
    T* kn = static_cast<T*>(layer.k_cache) + ((b * a.max_len + pos) * a.kv_heads + g) * HD;
    T* vn = static_cast<T*>(layer.v_cache) + ((b * a.max_len + pos) * a.kv_heads + g) * HD;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int d = lane + 32 * i;
      if (warp == 0) {
        query[d] = x[i];
        continue;
      }
      const T k_t = FromFloat<T>(x[i]), v_t = FromFloat<T>(v[i]);  // as the cache holds them
      key[d] = ToFloat(k_t), value[d] = ToFloat(v_t);
      if (write_cache) kn[d] = k_t, vn[d] = v_t;
    }
  }
  SyncAttentionThreads();
  const float* q = query + c * Q;  // read at each use: registers for the keys in flight
  float m = -INFINITY, s = 0, o[Q] = {};
  // Rounds [r0, r0 + H) of the lane's keys into its running softmax.
  auto take = [&](const uint4 (&k)[H][PK], const uint4 (&v)[H][PK], int64_t r0) {
    float score[H], top = m;
#pragma unroll
    for (int u = 0; u < H; ++u) {
      float dot = 0;
#pragma unroll
      for (int i = 0; i < PK; ++i)
#pragma unroll
        for (int e = 0; e < V; ++e) dot = fmaf(q[i * V + e], PackElement<T>(k[u][i], e), dot);
#pragma unroll
      for (int offset = 1; offset < L; offset *= 2) dot += __shfl_xor_sync(0xffffffff, dot, offset);
      score[u] = (r0 + u) * kRoundKeys + first < cached ? dot * a.scale : -INFINITY;
      top = fmaxf(top, score[u]);
    }
    if (top == -INFINITY) return;  // none of this lane's keys yet
    const float f = expf(m - top);  // 0 where m is -inf
    s *= f;
#pragma unroll
    for (int i = 0; i < Q; ++i) o[i] *= f;
#pragma unroll
    for (int u = 0; u < H; ++u) {
      const float p = expf(score[u] - top);  // 0 past the keys
      s += p;
#pragma unroll
      for (int i = 0; i < PK; ++i)
#pragma unroll
        for (int e = 0; e < V; ++e) o[i * V + e] = fmaf(p, PackElement<T>(v[u][i], e), o[i * V + e]);
    }
    m = top;
  };
  for (int64_t r0 = 0; r0 * kRoundKeys < cached; r0 += 2 * H) {
    take(kp[0], vp[0], r0);
    if ((r0 + 2 * H) * kRoundKeys < cached) load(kp[0], vp[0], r0 + 2 * H);
    if ((r0 + H) * kRoundKeys >= cached) break;
    take(kp[1], vp[1], r0 + H);
    if ((r0 + 3 * H) * kRoundKeys < cached) load(kp[1], vp[1], r0 + 3 * H);
  }
  // The warp's keys at a time into lanes 0 .. L - 1.
#pragma unroll
  for (int offset = L; offset < 32; offset *= 2) {
    const float m2 = __shfl_xor_sync(0xffffffff, m, offset), s2 = __shfl_xor_sync(0xffffffff, s, offset);
    const float top = fmaxf(m, m2), f = s > 0 ? expf(m - top) : 0.f, f2 = s2 > 0 ? expf(m2 - top) : 0.f;
    s = s * f + s2 * f2;
#pragma unroll
    for (int i = 0; i < Q; ++i) o[i] = o[i] * f + __shfl_xor_sync(0xffffffff, o[i], offset) * f2;
    m = top;
  }
  float* mine = part + warp * (HD + 2);
  if (lane < L) {
    if (lane == 0) mine[0] = m, mine[1] = s;
#pragma unroll
    for (int i = 0; i < Q; ++i) mine[2 + c * Q + i] = o[i];
  }
  SyncAttentionThreads();
  if (warp != 0) return;
  // Warp 0: the warps' softmaxes and the new key's, lane l holding
  // elements l + 32 i.
  float qk = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) qk += query[lane + 32 * i] * key[lane + 32 * i];
  const bool fresh = pos < a.span;  // the new key is one of the span's
  const float fresh_score = WarpSum(qk) * a.scale;
  float top = fresh ? fresh_score : -INFINITY;
  for (int w = 0; w < kWarps; ++w)
    if (part[w * (HD + 2) + 1] > 0) top = fmaxf(top, part[w * (HD + 2)]);
  float total = fresh ? expf(fresh_score - top) : 0.f, acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = total * value[lane + 32 * i];
  for (int w = 0; w < kWarps; ++w) {
    const float* pw = part + w * (HD + 2);
    const float f = pw[1] > 0 ? expf(pw[0] - top) : 0.f;
    total += pw[1] * f;
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] += pw[2 + lane + 32 * i] * f;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) out[lane + 32 * i] = total > 0 ? ToFloat(FromFloat<T>(acc[i] / total)) : 0.f;
}

// A tile's work comes in units, a warp each, over one part of k: with fp32
// weights kUnitDots (row, matrix) dot products, kUnitDots / M rows; with 16-bit
// weights 16 rows (of the tile's M * rows) on the tensor cores. Splits: how
// many parts of k a stage's units take, so that a full tile's units fill the
// warps, each part at least 32 packs (a load per lane) or two 32-element
// blocks of k. The host's (RingPlan::splits).
constexpr int kUnitDots = 4;
inline int Splits(int64_t tile_rows, int64_t k, int64_t elem, int M) {
  const bool tensor = elem == 2;
  const int64_t groups = tensor ? (M * tile_rows + 15) / 16 : (tile_rows + kUnitDots / M - 1) / (kUnitDots / M);
  const int64_t parts = tensor ? (k + 31) / 32 / 2 : k * elem / 16 / 32;  // the most parts of k
  int s = 1;
  while (groups * s * 2 <= kWarps && s * 2 <= parts) s *= 2;
  return s;
}

// The four sums of each lane, added over the warp: lane 8 i ends with the
// total of v[i] (five shuffles, not twenty).
__device__ inline float WarpSumFour(const float (&v)[4]) {
  const int lane = threadIdx.x % 32;
  const bool hi = lane & 16, mid = lane & 8;
  float k0 = hi ? v[2] : v[0], k1 = hi ? v[3] : v[1];  // kept; the other two go to lane ^ 16
  k0 += __shfl_xor_sync(0xffffffff, hi ? v[0] : v[2], 16);
  k1 += __shfl_xor_sync(0xffffffff, hi ? v[1] : v[3], 16);
  float t = mid ? k1 : k0;
  t += __shfl_xor_sync(0xffffffff, mid ? k0 : k1, 8);
  for (int offset = 4; offset > 0; offset /= 2) t += __shfl_xor_sync(0xffffffff, t, offset);
  return t;
}

// Four 8 x 8 matrices of 16-bit elements from shared memory (ldmatrix):
// lanes 8 i .. 8 i + 7 give the addresses of matrix i's rows, 16 bytes each,
// and lane l gets elements 2 (l % 4), 2 (l % 4) + 1 of row l / 4 of each.
__device__ inline void LoadMatrices(uint32_t* m, uint32_t address) {
  // Not volatile: the loads of a tile may move ahead of the products; the
  // tile landed before TileDots was called.
  asm("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
      : "=r"(m[0]), "=r"(m[1]), "=r"(m[2]), "=r"(m[3])
      : "r"(address));
}

// The two m16n8k16 products of k block kb (32 elements) of a unit (TileDots),
// added to d. kPartial: `left` elements of k remain from kb on, fewer than
// 32 in the last block of a k that is no multiple of 32, and those past k
// are zeros, not the padding. Full blocks skip the masking, which would sit
// between each block's loads and its products.
template <typename T, bool kPartial>
__device__ inline void BlockProducts(float (&d)[2][4], uint32_t a_row, uint32_t x_lane, int kb, int left) {
  uint32_t a[8], b[4];
  LoadMatrices(a, a_row + kb * 64);
  LoadMatrices(a + 4, a_row + kb * 64 + 32);
  LoadMatrices(b, x_lane + kb * 64);
  if constexpr (kPartial) {
    if (left <= 8) a[2] = a[3] = b[1] = 0;
    if (left <= 16) a[4] = a[5] = b[2] = 0;
    if (left <= 24) a[6] = a[7] = b[3] = 0;
  }
  Mma16x8x16<T>(d[0], a[0], a[1], a[2], a[3], b[0], b[1]);
  Mma16x8x16<T>(d[1], a[4], a[5], a[6], a[7], b[2], b[3]);
}

// A tile's dot products: its rows are the block's [first, first + rows) of
// the stage, M * rows of them in the ring (matrix m's rows after those of
// the matrices before it), `pitch` elements apart as the input's rows in xs.
// Each unit's sums go to sums[((row * splits + part) * M + m) *
// kDecodeMaxRows + b], row counted in the block; splits = 1 << shift.
//
// 16-bit weights: a unit is two m16n8k16 products per 32 elements of k: 16
// rows against the input's batch rows (n, up to 8). ldmatrix loads the
// fragments, four 8 x 8 matrices a load: of A, rows 0-7 and 8-15 at k 0-7,
// then at k 8-15; of B, the input rows at k 0-7, 8-15, 16-23 and 24-31.
//
// Not inlined, and the same code for every stage (M a value, not a
// template argument): the kernel runs through all of its code once a layer,
// so code that every stage shares stays in the instruction cache.
template <typename T, bool kOne>
__device__ __noinline__ void TileDots(int batch, int k, int M, int first, int rows, int shift, const T* w, int pitch,
                                      const T* xs, float* sums) {
  constexpr int R = kDecodeMaxRows;
  batch = Rows<kOne>(batch);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, splits = 1 << shift;
  if constexpr (sizeof(T) == 2) {
    const int total = M * rows, units = (total + 15) / 16 << shift, blocks = (k + 31) / 32;
    // The rows whose 16 bytes this lane's address gives: of A, row lane % 16
    // at k 8 (lane / 16); of B, input row lane % 8 at k 8 (lane / 8). Past
    // the tile or the batch: the last row (its sums not stored).
    const uint32_t a_lane = SharedAddress(w + (lane / 16 * 8));
    const uint32_t x_lane = SharedAddress(xs + min(lane % 8, batch - 1) * pitch + lane / 8 * 8);
    for (int u = warp; u < units; u += kWarps) {
      const int g = u >> shift, part = u & (splits - 1);
      const int kb0 = blocks * part >> shift, kb1 = blocks * (part + 1) >> shift;
      const uint32_t a_row = a_lane + min(g * 16 + lane % 16, total - 1) * pitch * 2;
      float d[2][4] = {};  // the two products of a block: two chains, not one
      const int whole = min(kb1, k / 32);  // blocks of 32 elements of k, unmasked
#pragma unroll 2
      for (int kb = kb0; kb < whole; ++kb) BlockProducts<T, false>(d, a_row, x_lane, kb, 32);
      for (int kb = max(kb0, whole); kb < kb1; ++kb) BlockProducts<T, true>(d, a_row, x_lane, kb, k - kb * 32);
      // Lane (r, q) = (lane / 4, lane % 4) holds rows r (j = 0, 1) and r + 8
      // (j = 2, 3) of the unit's 16, batch rows 2 q and 2 q + 1.
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = g * 16 + lane / 4 + j / 2 * 8, b = 2 * (lane % 4) + j % 2;
        const int m = i >= rows, row = i - m * rows;  // i < 2 rows
        if (i < total && b < batch) sums[((((first + row) << shift) + part) * M + m) * R + b] = d[0][j] + d[1][j];
      }
    }
  } else {
    constexpr int V = 16 / sizeof(T);
    const int D = kUnitDots / M, packs = k / V, groups = (rows + D - 1) / D;
    for (int u = warp; u < groups * splits; u += kWarps) {
      const int r0 = u / splits * D, part = u % splits;
      const int p0 = packs * part / splits, p1 = packs * (part + 1) / splits;
      const T* wr[kUnitDots];  // dot i: row r0 + i / M of matrix i % M (past the tile: its last row, not stored)
#pragma unroll
      for (int i = 0; i < kUnitDots; ++i) wr[i] = w + (i % M * rows + min(r0 + i / M, rows - 1)) * pitch;
      for (int b = 0; b < batch; ++b) {
        float acc[kUnitDots] = {};
#pragma unroll 2
        for (int pk = p0 + lane; pk < p1; pk += 32) {
          const Pack<T, V> xv = *reinterpret_cast<const Pack<T, V>*>(xs + b * pitch + pk * V);
          Pack<T, V> wp[kUnitDots];
#pragma unroll
          for (int i = 0; i < kUnitDots; ++i) wp[i] = *reinterpret_cast<const Pack<T, V>*>(wr[i] + pk * V);
#pragma unroll
          for (int i = 0; i < kUnitDots; ++i)
#pragma unroll
            for (int e = 0; e < V; ++e) acc[i] += ToFloat(wp[i].v[e]) * ToFloat(xv.v[e]);
        }
        const float total = WarpSumFour(acc);
        const int i = lane / 8, row = r0 + i / M;
        if (lane % 8 == 0 && row < rows) sums[(((first + row) * splits + part) * M + i % M) * R + b] = total;
      }
    }
  }
}

// The stage's outputs, this block's rows [j0, j0 + rows) of y: the sums of
// their parts (TileDots), scaled by the input's 1 / rms (LoadInput's
// squares), with the biases
// (LoadBiases': matrix m's of row r at m * bias_pitch + r) and SwiGLU.
// SwiGLU's go to `acts` in shared memory instead ([batch, rows], fp32 of
// the rounded values, for FoldDown); the others (q/k/v) into y as rounded
// values tagged with `tag` (Tagged), which the attention waits for.
template <typename T, bool kSwiGlu, bool kOne>
__device__ void StageOutputs(const DecodeGemvArgs& g, int64_t n, int64_t j0, int rows, int splits, const float* sums,
                             const T* biases, int bias_pitch, const float* squares, float* acts, uint32_t tag) {
  constexpr int R = kDecodeMaxRows, M = kSwiGlu ? 2 : 1;
  const int batch = Rows<kOne>(g.batch);
  for (int i = threadIdx.x; i < rows * batch; i += kThreads) {
    const int row = i / batch, b = i % batch;
    float ss = 0;
    for (int w = 0; w < kWarps; ++w) ss += squares[w * R + b];
    const float scale = rsqrtf(ss / static_cast<float>(g.k) + g.eps);
    float y[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float dot = 0;
      for (int part = 0; part < splits; ++part) dot += sums[((row * splits + part) * M + m) * R + b];
      y[m] = ToFloat(biases[m * bias_pitch + row]) + dot * scale;
    }
    float out = y[0];
    if constexpr (kSwiGlu) out = y[0] / (1.f + expf(-y[0])) * y[1];
    const T rounded = FromFloat<T>(out);
    if constexpr (kSwiGlu)
      acts[b * rows + row] = ToFloat(rounded);
    else
      StoreTagged(static_cast<uint64_t*>(g.y) + b * n + j0 + row, Tagged(ToFloat(rounded), tag));
  }
}

// The per-block state of the kernel's consuming side.
struct Consumer {
  Ring ring;
  int64_t tile = 0;  // the next tile to consume
  float* xs;         // the stage's input (in T; Attend's work space and FoldOut's merged head in fp32)
  float* red;        // the stage's sums (TileDots; FoldOut's and FoldDown's products)
  float* squares;    // the stage's input's sums of squares (LoadInput)
  void* biases;      // the biases of the block's rows of every layer (LoadBiases)
  unsigned long long* profile;  // BlockProfile
  int share0, share1;           // this block's share of a stage input's packs (LoadInput)
};

// Block 0's clock into `timeline` (decode_kernels.h; null: not profiled);
// `cycles`: the SM's cycle count too, after the stage marks.
__device__ inline void Mark(unsigned long long* timeline, int64_t layers, int64_t index, int64_t cycles = -1) {
  if (timeline && blockIdx.x == 0 && threadIdx.x == 0) {
    timeline[index] = GlobalTimer();
    if (cycles >= 0) timeline[1 + 10 * layers + cycles] = clock64();
  }
}

// Block 0's profile in shared memory: 4 phases of each of the 5 stages, then
// the cycles the copies of each GEMV stage waited for room in the ring;
// copied into the timeline at the end.
constexpr int kPhaseSlots = 5 * 4, kProfileSlots = kPhaseSlots + kStages;
__device__ inline unsigned long long* BlockProfile(const unsigned long long* timeline,
                                                   unsigned long long* shared_profile) {
  return timeline && blockIdx.x == 0 ? shared_profile : nullptr;
}

// Block 0's phase clock of stage s of the five.
__device__ inline PhaseClock StageClock(unsigned long long* profile, int s) {
  PhaseClock clock;
  if (profile) clock.slots = profile + 4 * s;
  return clock;
}

// The biases of this block's output rows of every layer into `biases`, in
// shared memory, once a launch: per layer bias_rows for q/k/v (its rows in
// the order of q, k and v), then fold_cols for gate and as many for up
// (zeros for rows past the block's and for matrices without a bias). Loaded
// with each stage's input, they cost ~0.6 us of a layer's critical path
// (the out-of-line choice of each element's matrix, then the loads).
template <typename T>
__device__ void LoadBiases(const DecodeLayersArgs& a, const RingPlan& p, const DecodeLayer* layers, T* biases) {
  constexpr int U = 8;  // loads in flight a thread
  int64_t q0, q1, g0, g1;
  BlockRows((a.heads + 2 * a.kv_heads) * a.head_dim, 1, &q0, &q1);
  GateUpRows<T>(a, &g0, &g1);
  const int stride = static_cast<int>(p.bias_rows + 2 * p.fold_cols), total = static_cast<int>(a.num_layers) * stride;
  for (int i0 = threadIdx.x; i0 < total; i0 += U * kThreads) {
    T v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * kThreads, l = i / stride, e = i % stride;
      const DecodeLayer& layer = layers[min(l, static_cast<int>(a.num_layers) - 1)];
      const void* bias = nullptr;
      int64_t j = 0;
      if (e < p.bias_rows) {
        j = q0 + e;
        const int m = MatrixOfRow<false>(0, layer.q.rows, layer.k.rows, &j);
        if (q0 + e < q1) bias = m == 0 ? layer.q.bias : m == 1 ? layer.k.bias : layer.v.bias;
      } else {
        const int f = static_cast<int>(e - p.bias_rows), m = f / static_cast<int>(p.fold_cols);
        j = g0 + f % p.fold_cols;
        if (j < g1) bias = m == 0 ? layer.gate.bias : layer.up.bias;
      }
      v[u] = i < total && bias ? static_cast<const T*>(bias)[j] : FromFloat<T>(0.f);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * kThreads < total) biases[i0 + u * kThreads] = v[u];
  }
}

// Stage s of layer l: this block's rows, tile by tile as they land; each
// warp releases a tile once done with it, and the outputs follow the last.
// The q/k/v stage reads the residual stream from FoldDown's fp32 sums after
// the first layer and starts FoldOut's (with the o projection's bias); the
// gate/up stage reads FoldOut's and adds itself to FoldDown's, whose
// outputs stay in shared memory (c.xs) for FoldDown.
// A block without rows still passes its share of the stream on.
template <typename T, bool kSwiGlu, bool kOne>
__device__ void GemvStage(const DecodeLayersArgs& a, const RingPlan& p, int s, int64_t l, Consumer& c) {
  int64_t n, j0, j1;
  const DecodeLayer& layer = c.ring.layers[l];
  const DecodeGemvArgs g = StageGemv(a, s, layer, &n);
  StageRows<T>(a, p, s, n, &j0, &j1);
  PhaseClock clock = StageClock(c.profile, s == kStageQkv ? 0 : s + 1);
  clock.Start();
  T* xs = reinterpret_cast<T*>(c.xs);
  const int pitch = static_cast<int>(p.pitch[s] / sizeof(T));
  const bool qkv = s == kStageQkv;
  const float* sum = qkv ? (l > 0 ? HSum(a, l - 1) : nullptr) : AttnSum(a, l);
  LoadInput<T, kOne>(static_cast<const T*>(g.x), sum, static_cast<const T*>(g.norm_weight),
                     static_cast<int>(g.batch), static_cast<int>(g.k), pitch, xs, c.squares,
                     qkv ? AttnSum(a, l) : HSum(a, l), c.share0, c.share1,
                     qkv ? static_cast<const T*>(layer.o.bias) : nullptr);
  if (j0 >= j1) return;
  clock.Lap(0);
  const int splits = p.splits[s], shift = 31 - __clz(splits);
  for (int64_t r = j0; r < j1; r += p.tile_rows[s], ++c.tile) {
    const int rows = static_cast<int>(min(p.tile_rows[s], j1 - r));
    const int q = static_cast<int>(c.tile % kTilesInFlight);
    BarrierWait(&c.ring.done[q], static_cast<uint32_t>(c.tile / kTilesInFlight) & 1);
    clock.Lap(1);
    TileDots<T, kOne>(static_cast<int>(g.batch), static_cast<int>(g.k), kSwiGlu ? 2 : 1, static_cast<int>(r - j0),
                      rows, shift, reinterpret_cast<const T*>(c.ring.data + c.ring.offset[q]), pitch, xs, c.red);
    __syncwarp();
    if (threadIdx.x % 32 == 0) BarrierArrive(&c.ring.freed[q]);
    clock.Lap(2);
  }
  SyncAttentionThreads();
  const T* biases = static_cast<const T*>(c.biases) + l * (p.bias_rows + 2 * p.fold_cols) + (qkv ? 0 : p.bias_rows);
  StageOutputs<T, kSwiGlu, kOne>(g, n, j0, static_cast<int>(j1 - j0), splits, c.red, biases,
                                 static_cast<int>(p.fold_cols), c.squares, kSwiGlu ? c.xs : nullptr,
                                 static_cast<uint32_t>(l + 1));
  clock.Lap(3);
}

// The down projection of layer l, folded into the gate/up stage: this
// block's gate/up outputs (its rows [j0, j1), in c.xs) times the same
// columns of the down weights, a tile of rows at a time as it lands, a
// thread per row; the partial sums, staged in c.red, are added into the
// residual stream's fp32 copy (a.h_sum: the attention stage starts it from
// the down bias, the gate/up stage adds its input to it) four at a time by
// vector reductions (every block adds to every element: scalar atomics,
// four times as many, queued in L2 for 6.6 us a layer on an H200).
// So the down projection needs no grid barrier and no input of its own.
template <typename T, bool kOne>
__device__ void FoldDown(const DecodeLayersArgs& a, const RingPlan& p, int64_t l, Consumer& c) {
  constexpr int V = 16 / sizeof(T);
  int64_t j0, j1;
  GateUpRows<T>(a, &j0, &j1);
  if (j0 >= j1) return;
  PhaseClock clock = StageClock(c.profile, 4);
  clock.Start();
  SyncAttentionThreads();  // c.xs holds every row's outputs
  clock.Lap(0);
  const int batch = Rows<kOne>(a.batch), cols = static_cast<int>(j1 - j0), C = static_cast<int>(p.fold_cols);
  const int hidden = static_cast<int>(a.hidden), tile_rows = static_cast<int>(p.tile_rows[kStageDown]);
  const float* acts = c.xs;
  for (int t = 0; t * tile_rows < hidden; ++t, ++c.tile) {
    const int r0 = static_cast<int>(DownTileRow(p, hidden, t));
    const int q = static_cast<int>(c.tile % kTilesInFlight);
    BarrierWait(&c.ring.done[q], static_cast<uint32_t>(c.tile / kTilesInFlight) & 1);
    clock.Lap(1);
    const T* w = reinterpret_cast<const T*>(c.ring.data + c.ring.offset[q]);
    const int rows = min(tile_rows, hidden - r0);  // a multiple of 4, as tile_rows
    // Two rows a thread at once (i and i + kThreads; past the tile the last
    // row again, not stored) and four packs of columns a round, so that the
    // loads of a round are in flight together: the products are a chain of
    // shared-memory loads and multiply-adds, bound by their latency. A row
    // at a time, pack by pack, took 1.74 us a layer on an H200, this 1.43
    // (batch-1 decode 1638.6 -> 1658.4 tok/s).
    for (int i = threadIdx.x; i < rows; i += 2 * kThreads) {
      const int i2 = min(i + kThreads, rows - 1);
      for (int b = 0; b < batch; ++b) {  // the rows' dot products with each batch row's outputs
        const float* x = acts + b * cols;
        float acc[2][2] = {};  // two chains a row
#pragma unroll 4
        for (int j = 0; j < cols; j += V) {
          const Pack<T, V> w1 = *reinterpret_cast<const Pack<T, V>*>(w + i * C + j);
          const Pack<T, V> w2 = *reinterpret_cast<const Pack<T, V>*>(w + i2 * C + j);
#pragma unroll
          for (int e = 0; e < V; e += 4) {
            const float4 xv = *reinterpret_cast<const float4*>(x + j + e);
            const float xe[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
            for (int f = 0; f < 4; ++f) {
              acc[0][e / 4 % 2] = fmaf(ToFloat(w1.v[e + f]), xe[f], acc[0][e / 4 % 2]);
              acc[1][e / 4 % 2] = fmaf(ToFloat(w2.v[e + f]), xe[f], acc[1][e / 4 % 2]);
            }
          }
        }
        c.red[b * tile_rows + i] = acc[0][0] + acc[0][1];
        if (i + kThreads < rows) c.red[b * tile_rows + i + kThreads] = acc[1][0] + acc[1][1];
      }
    }
    __syncwarp();
    if (threadIdx.x % 32 == 0) BarrierArrive(&c.ring.freed[q]);
    SyncAttentionThreads();
    AddStaged<kOne>(c.red, tile_rows, rows, batch, HSum(a, l) + r0, hidden);
    if ((t + 1) * tile_rows < hidden) SyncAttentionThreads();  // c.red is free for the next tile
    clock.Lap(2);
  }
}

// The o projection of layer l, folded into the attention: the block of an
// OutUnit merges its query head's chunks (each batch row's) as their tagged
// partials arrive (MergeTagged), or at batch 1 takes the head's attention
// itself (AttendHead; `positions`: the rows', in shared memory), and
// multiplies it by the head's columns of the o weights for the unit's output rows, a
// tile at a time as it lands, a thread per (row, batch row); the products,
// staged in c.red, are added into the residual stream's fp32 copy after the
// attention (a.attn_sum, which the q/k/v stage started) four at a time by
// vector reductions. So the o projection needs no grid barrier, and the
// attention's merge is no grid-wide step of its own.
template <typename T, int HD, bool kOne, bool kFold>
__device__ void FoldOut(const DecodeLayersArgs& a, const RingPlan& p, const int64_t* positions, int64_t l,
                        int64_t chunks, Consumer& c) {
  constexpr int V = 16 / sizeof(T), P = HD / V;  // packs of a row
  int head;
  int64_t r0, r1;
  if (!OutUnit(a, p, &head, &r0, &r1)) return;
  PhaseClock clock = StageClock(c.profile, 2);
  clock.Start();
  const int batch = Rows<kOne>(a.batch), group = static_cast<int>(a.heads / a.kv_heads), g = head / group;
  float* attn = c.xs;  // [batch, HD], rounded to T as the o projection's input is
  if constexpr (kFold) {  // one row
    AttendHead<T, HD>(a, c.ring.layers[l], positions, 0, head, head % group == 0 && r0 == 0,
                      static_cast<uint32_t>(l + 1), attn, attn + HD);
  } else {
    // A thread merges 4 elements of a row's head; with threads to spare,
    // p.merge_splits groups of them take shares of the chunks, merged again
    // in shared memory after the head's outputs.
    static_assert(kDecodeMaxRows * HD + kThreads * 6 <= kAttendFloats<HD>, "the splits' merges after the heads");
    const int units = batch * HD / 4, splits = p.merge_splits;
    const int64_t share = (chunks + splits - 1) / splits;
    const uint64_t* partials = a.partial + g * chunks * kDecodeMaxGroup * (HD + 2);
    const int64_t row_values = a.kv_heads * chunks * kDecodeMaxGroup * (HD + 2);
    float* parts = attn + batch * HD;  // [splits, units, 6]: M, S, O
    auto store = [attn](int u, const float (&O)[4], float S) {  // unit u's outputs, attn[u * 4...]
#pragma unroll
      for (int e = 0; e < 4; ++e) attn[u * 4 + e] = ToFloat(FromFloat<T>(O[e] / S));
    };
    for (int i = threadIdx.x; i < units * splits; i += kThreads) {
      const int u = i % units, split = i / units, b = u / (HD / 4), d = u % (HD / 4) * 4;
      float M, S, O[4];
      MergeTagged<HD, kMergeChunks>(partials + b * row_values, split * share, min(chunks, (split + 1) * share),
                                    head % group, d, static_cast<uint32_t>(l + 1), M, S, O);
      if (splits == 1) {
        store(u, O, S);
      } else {
        float* q = parts + (split * units + u) * 6;
        q[0] = M, q[1] = S, q[2] = O[0], q[3] = O[1], q[4] = O[2], q[5] = O[3];
      }
    }
    if (splits > 1) {
      SyncAttentionThreads();
      for (int u = threadIdx.x; u < units; u += kThreads) {
        float M = -INFINITY, S = 0, O[4] = {};
        for (int split = 0; split < splits; ++split) {
          const float* q = parts + (split * units + u) * 6;
          const float cm[1] = {q[0]}, cs[1] = {q[1]};
          const float4 co[1] = {{q[2], q[3], q[4], q[5]}};
          MergeRound<1>(cm, cs, co, M, S, O);
        }
        store(u, O, S);
      }
    }
  }
  SyncAttentionThreads();
  clock.Lap(0);
  const int hidden = static_cast<int>(a.hidden), tile_rows = static_cast<int>(p.tile_rows[kStageOut]);
  for (int64_t r = r0; r < r1; r += tile_rows, ++c.tile) {
    const int q = static_cast<int>(c.tile % kTilesInFlight);
    BarrierWait(&c.ring.done[q], static_cast<uint32_t>(c.tile / kTilesInFlight) & 1);
    clock.Lap(1);
    const T* w = reinterpret_cast<const T*>(c.ring.data + c.ring.offset[q]);  // rows of HD, dense
    const int rows = static_cast<int>(min(static_cast<int64_t>(tile_rows), r1 - r));  // a multiple of 4
    for (int i = threadIdx.x; i < rows * batch; i += kThreads) {
      const int row = i / batch, b = i % batch;
      const float* x = attn + b * HD;
      float acc[2] = {};  // two chains
#pragma unroll
      for (int j = 0; j < P; ++j) {
        // Each row from its own pack on: rows HD elements apart, read at the
        // same pack, would all hit the same banks.
        const int pk = (j + row) % P;
        const Pack<T, V> wp = *reinterpret_cast<const Pack<T, V>*>(w + row * HD + pk * V);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e % 2] = fmaf(ToFloat(wp.v[e]), x[pk * V + e], acc[e % 2]);
      }
      c.red[b * tile_rows + row] = acc[0] + acc[1];
    }
    __syncwarp();
    if (threadIdx.x % 32 == 0) BarrierArrive(&c.ring.freed[q]);
    SyncAttentionThreads();
    clock.Lap(2);
    AddStaged<kOne>(c.red, tile_rows, rows, batch, AttnSum(a, l) + r, hidden);
    if (r + tile_rows < r1) SyncAttentionThreads();  // c.red is free for the next tile
    clock.Lap(3);
  }
}

// The new tokens' embeddings (a.ids' rows of a.embedding) into a.h, the
// first layer's input, by every block: each reads back only what its own
// threads wrote (the other blocks write the same bytes), so no grid barrier
// stands before the first layer, and no lookup kernel before the launch.
// Once a launch, after the biases, while the first tiles land; out of the
// layer loop's code.
template <typename T>
__device__ __noinline__ void GatherEmbeddings(const DecodeLayersArgs& a) {
  constexpr int V = 16 / sizeof(T);
  const int k = static_cast<int>(a.hidden);
  T* rows = static_cast<T*>(a.h);
  for (int i = threadIdx.x; i < a.batch * k / V; i += kThreads) {
    const int b = i * V / k, e = i * V % k;
    const int64_t id = a.ids[b];
    if (id < 0 || id >= a.vocab) __trap();  // as an embedding lookup's device assert
    *reinterpret_cast<Pack<T, V>*>(rows + b * k + e) =
        *reinterpret_cast<const Pack<T, V>*>(static_cast<const T*>(a.embedding) + id * k + e);
  }
  SyncAttentionThreads();  // the block's loads of them (LoadInput) come after
}

// The work space as the launch found it, all zeros, for the next launch
// (the caller may keep it, KvCache::decode_work, and no fill kernel runs
// before each step): the tagged partials and q/k/v outputs, whose tags a
// later step's would otherwise match, and both copies of the sums after the
// attention, one run of words from a.partial on (DecodeLayersArgs), by every
// block after the last grid barrier, which every read of them precedes; the
// barrier's count by the last block past it. Out of line: no code added to
// the layer loop.
__device__ __noinline__ void ClearWork(const DecodeLayersArgs& a) {
  const int64_t words = reinterpret_cast<const uint64_t*>(a.attn_sum) - a.partial + a.batch * a.hidden;
  uint4* pairs = reinterpret_cast<uint4*>(a.partial);  // 16 bytes each
  for (int64_t i = blockIdx.x * kThreads + threadIdx.x; i < words / 2; i += gridDim.x * kThreads)
    pairs[i] = make_uint4(0, 0, 0, 0);
  if (threadIdx.x == 0 && atomicAdd(&a.barrier[1], 1u) == gridDim.x - 1) a.barrier[0] = 0, a.barrier[1] = 0;
}

// The residual stream's fp32 sums into h, the layers' output, rounded to T,
// a share a block; where a.final_norm is set, normed (times their 1 / rms
// and the weight, as at::rms_norm, one rounding): the LM head's input, with
// no norm kernel and no gap after the launch. Each block then takes every
// row's sum of squares itself (3.5 KB of L2 a row at Qwen2.5-0.5B's shape).
// `squares`: kWarps * kDecodeMaxRows floats of shared memory. Out of line:
// the kernel's code around its layer loop stays as it was.
template <typename T>
__device__ __noinline__ void StoreOutput(const DecodeLayersArgs& a, float* squares) {
  constexpr int V = 16 / sizeof(T), R = kDecodeMaxRows;
  const int k = static_cast<int>(a.hidden), packs = static_cast<int>(a.batch) * k / V;
  const float* sums = HSum(a, a.num_layers - 1);
  if (!a.final_norm) {
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < packs; i += gridDim.x * kThreads)
      *reinterpret_cast<Pack<T, V>*>(static_cast<T*>(a.h) + i * V) = RoundPackCoherent<T, V>(sums + i * V);
    return;
  }
  float ss[R] = {};
  for (int i = threadIdx.x; i < packs; i += kThreads) {
    const Pack<T, V> v = RoundPackCoherent<T, V>(sums + i * V);
    float s = 0;
#pragma unroll
    for (int e = 0; e < V; ++e) s += ToFloat(v.v[e]) * ToFloat(v.v[e]);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r == i * V / k) ss[r] += s;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float total = WarpSum(ss[r]);
    if (lane == 0) squares[warp * R + r] = total;
  }
  SyncAttentionThreads();
  const T* w = static_cast<const T*>(a.final_norm);
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < packs; i += gridDim.x * kThreads) {
    const int b = i * V / k, e0 = i * V % k;
    float total = 0;
    for (int j = 0; j < kWarps; ++j) total += squares[j * R + b];
    const float rstd = rsqrtf(total / static_cast<float>(k) + a.eps);
    Pack<T, V> v = RoundPackCoherent<T, V>(sums + i * V);
#pragma unroll
    for (int e = 0; e < V; ++e) v.v[e] = FromFloat<T>(ToFloat(v.v[e]) * rstd * ToFloat(w[e0 + e]));
    *reinterpret_cast<Pack<T, V>*>(static_cast<T*>(a.h) + i * V) = v;
  }
}

// The attention of `layer` as DecodeAttention's arguments; `positions`: a's,
// in shared memory.
template <int HD>
__device__ DecodeAttentionArgs LayerAttention(const DecodeLayersArgs& a, const DecodeLayer& layer,
                                              const int64_t* positions) {
  DecodeAttentionArgs att;
  att.qkv = a.qkv, att.batch = a.batch, att.heads = a.heads, att.kv_heads = a.kv_heads, att.head_dim = HD;
  att.max_len = a.max_len, att.span = a.span, att.positions = positions, att.inv_freq = a.inv_freq;
  att.q_norm = layer.q_norm, att.k_norm = layer.k_norm, att.eps = a.eps, att.scale = a.scale;
  att.k_cache = layer.k_cache, att.v_cache = layer.v_cache;
  return att;
}

// Kernel parameters: CUDA 12.1 and later take up to 32764 bytes of them.
static_assert(sizeof(DecodeLayersArgs) + sizeof(RingPlan) + sizeof(FoldMaps) <= 32764,
              "the persistent kernel's parameters");

// kProfile: the kernel that fills a.timeline. The other has no clock code
// at all: the kernel's code does not fit the instruction cache, every layer
// fetches much of it again, and the clocks' ~600 instructions (though
// skipped) made a step's layers 7.9% slower on an H200 (557.8 against
// 517.1 us).
template <typename T, int HD, bool kProfile, bool kOne, bool kFold>
__global__ void __launch_bounds__(kThreads + 32, 1)
    DecodeLayersKernel(const __grid_constant__ DecodeLayersArgs a, const RingPlan p,
                       const __grid_constant__ FoldMaps maps) {
  static_assert(!kFold || (kOne && HD <= 64), "AttendHead: one row, heads of up to 64");
  extern __shared__ __align__(128) unsigned char dynamic_shared[];
  // The ring from a 128-byte boundary, as the 2D copies land (PlanRing
  // leaves the room).
  unsigned char* shared = dynamic_shared + (128 - SharedAddress(dynamic_shared) % 128) % 128;
  __shared__ uint64_t tile_done[kTilesInFlight], tile_freed[kTilesInFlight];
  __shared__ int tile_offset[kTilesInFlight];
  __shared__ uint32_t tile_end[kTilesInFlight];
  __shared__ float squares[kWarps * kDecodeMaxRows];
  __shared__ unsigned long long profile[kProfileSlots];
  // Read once: each layer's attention starts from them (a global load would
  // be an L2 round trip before its first key load).
  __shared__ int64_t positions[kDecodeMaxRows];
  // Shared memory: the ring, the stage inputs (or the attention's work
  // space), the stage sums, the layers' descriptors (8-byte aligned), the
  // biases (LoadBiases).
  Consumer c;
  c.xs = reinterpret_cast<float*>(shared + p.ring_bytes);
  c.red = c.xs + p.x_floats;
  c.squares = squares;
  {  // both stages' inputs are [batch, hidden]
    const int packs = static_cast<int>(a.batch * a.hidden * static_cast<int64_t>(sizeof(T)) / 16);
    c.share0 = packs * blockIdx.x / gridDim.x, c.share1 = packs * (blockIdx.x + 1) / gridDim.x;
  }
  // Null in the kernel that does not profile, which takes every clock's
  // code out of it.
  unsigned long long* const timeline = kProfile ? a.timeline : nullptr;
  c.profile = BlockProfile(timeline, profile);
  if (threadIdx.x < kProfileSlots) profile[threadIdx.x] = 0;
  if (threadIdx.x < a.batch) positions[threadIdx.x] = a.positions[threadIdx.x];
  DecodeLayer* layers = reinterpret_cast<DecodeLayer*>(c.red + p.red_floats);
  c.biases = layers + a.num_layers;
  c.ring = {layers, shared, tile_done, tile_freed, tile_offset, tile_end};
  {
    const int64_t words = a.num_layers * sizeof(DecodeLayer) / 8;
    const uint64_t* from = reinterpret_cast<const uint64_t*>(a.layers);
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x) reinterpret_cast<uint64_t*>(layers)[i] = from[i];
  }
  if (threadIdx.x == 0)
    for (int q = 0; q < kTilesInFlight; ++q) BarrierInit(&tile_done[q], 1), BarrierInit(&tile_freed[q], kWarps);
  __syncthreads();                // the last one of the whole block
  if (threadIdx.x >= kThreads) {  // the copying warp
    PrefetchLayerData<T, HD>(a, layers);
    Producer().Run<T>(a, p, maps, c.ring, c.profile ? c.profile + kPhaseSlots : nullptr);
    return;
  }
  LoadBiases<T>(a, p, layers, static_cast<T*>(c.biases));
  if (a.ids) GatherEmbeddings<T>(a);
  Mark(timeline, a.num_layers, 0, 0);
  const int64_t batch = Rows<kOne>(a.batch);
  const int64_t chunks = (a.span + kChunkKeys - 1) / kChunkKeys, items = batch * a.kv_heads * chunks;
  unsigned arrivals = 0;
  // Every block's arrival at stage s's end (profiling): at a grid barrier
  // once all its warps are there, elsewhere when thread 0 is.
  auto barrier = [&](int64_t l, int s, bool wait) {
    Mark(timeline, a.num_layers, 1 + (l * 5 + s) * 2);
    unsigned long long* arrived =
        timeline ? timeline + 27 + 10 * a.num_layers + (l * 5 + s) * gridDim.x + blockIdx.x : nullptr;
    if (!wait && arrived && threadIdx.x == 0) *arrived = GlobalTimer();
    if (wait) GridBarrier(a.barrier, ++arrivals * gridDim.x, arrived);
    Mark(timeline, a.num_layers, 2 + (l * 5 + s) * 2, l + 1 == a.num_layers && s == 4 ? 1 : -1);
  };
  for (int64_t l = 0; l < a.num_layers; ++l) {
    GemvStage<T, false, kOne>(a, p, kStageQkv, l, c);
    barrier(l, 0, false);  // the attention waits for the q/k/v outputs it reads, no more
    // FoldDown's sums start from the down projection's bias, a share a block
    // (the gate/up stage adds the residual stream), and the next layer's
    // sums after the attention from zeros (the q/k/v stage adds the stream):
    // the copies of the layer before last, which every block has read.
    {
      const T* bias = static_cast<const T*>(layers[l].down.bias);
      float *h_sum = HSum(a, l), *attn_sum = AttnSum(a, l + 1);
      for (int64_t i = blockIdx.x * kThreads + threadIdx.x; i < batch * a.hidden; i += gridDim.x * kThreads)
        h_sum[i] = bias ? ToFloat(bias[i % a.hidden]) : 0.f, attn_sum[i] = 0.f;
    }
    // A block's items (row, key head, chunk): a run of ceil(items / grid)
    // (p.chunk_runs), else one every gridDim.x. Within a run, a row's key
    // head prepares its heads once, at the chunk holding the new position
    // if the run has it, else at its first.
    const int run = p.chunk_runs ? static_cast<int>((items + gridDim.x - 1) / gridDim.x) : 1;
    const int all = static_cast<int>(items), per_row = static_cast<int>(chunks);
    for (int start = kFold ? all : blockIdx.x * run; start < all; start += gridDim.x * run)
      for (int i = start, end = min(all, start + run); i < end;) {
        const DecodeAttentionArgs att = LayerAttention<HD>(a, layers[l], positions);
        const int b = i / per_row / static_cast<int>(a.kv_heads), g = i / per_row % static_cast<int>(a.kv_heads);
        const int z0 = i % per_row, n = min(per_row - z0, end - i);
        const int new_chunk = static_cast<int>(positions[b] / kChunkKeys);
        const int first = new_chunk >= z0 && new_chunk < z0 + n ? new_chunk : z0;
        for (int k = 0; k < n; ++k) {
          PhaseClock clock = StageClock(c.profile, 1);
          clock.Start();
          const int z = k == 0 ? first : (z0 + k - 1 < first ? z0 + k - 1 : z0 + k);
          Attend<T, HD>(att, b, g, z, chunks, k == 0, z0 == 0, a.partial, static_cast<uint32_t>(l + 1), c.xs,
                        clock);
          SyncAttentionThreads();  // the work space is free for the next chunk
          clock.Lap(3);
        }
        i += n;
      }
    barrier(l, 1, false);
    FoldOut<T, HD, kOne, kFold>(a, p, positions, l, chunks, c);
    barrier(l, 2, true);
    GemvStage<T, true, kOne>(a, p, kStageGateUp, l, c);
    barrier(l, 3, false);
    FoldDown<T, kOne>(a, p, l, c);
    barrier(l, 4, true);
  }
  ClearWork(a);
  StoreOutput<T>(a, squares);
  if (c.profile && threadIdx.x == 0)
    for (int i = 0; i < kPhaseSlots; ++i) timeline[3 + 10 * a.num_layers + i] = c.profile[i];
}

// The launch's shared memory: the stage inputs (or the attention's work
// space), the stage sums, and a ring of what is left, whose tiles are at
// most a third of it (half where the weights stream, below) so that
// several are in flight (smaller tiles leave warps without rows: an eighth
// was slower; a quarter, 4 gate/up tiles of 10 rows at Qwen2.5-0.5B's
// shape, was 3.6% slower on an H200), except that
// a stage whose rows of a block fit in half of it is one tile: the tensor
// cores take 16 rows at a time, and two tiles of a few rows each would take
// two passes over k (q/k/v's 9 rows a block). False where a tile of one
// output row would not fit.
template <typename T, int HD>
bool PlanRing(const DecodeLayersArgs& a, RingPlan* plan, int64_t* dynamic_bytes) {
  // The shared memory a block may have, less the profiling kernel's static
  // share (at least the other's): asked of the runtime once, as
  // MultiprocessorCount is (a plan is made at every launch, and the
  // generator asks whether a step fits before it). Negative: unknown.
  static const int64_t room = [] {
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, DecodeLayersKernel<T, HD, true, false, false>) != cudaSuccess)
      return int64_t{-1};
    int device = 0, optin = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    return static_cast<int64_t>(optin) - static_cast<int64_t>(attributes.sharedSizeBytes);
  }();
  if (room < 0) return false;
  const int64_t widest = std::max({a.hidden, a.mlp, a.heads * a.head_dim}), grid = MultiprocessorCount();
  const int64_t elem = sizeof(T);
  plan->fold_cols = (a.mlp * elem / 16 + grid - 1) / grid * (16 / elem);  // GateUpRows
  if (plan->fold_cols > 256) return false;                                 // a 2D copy's box: 256 columns at most
  // FoldOut: each head's output rows in as many parts as the grid has
  // blocks for, each at least 4 rows (FoldOut's vector reductions).
  if (a.heads > grid) return false;
  plan->out_rows = (a.hidden + grid / a.heads - 1) / (grid / a.heads);
  plan->out_rows = std::max<int64_t>(4, (plan->out_rows + 3) / 4 * 4);
  plan->out_parts = (a.hidden + plan->out_rows - 1) / plan->out_rows;
  plan->x_floats =
      std::max<int64_t>({a.batch * RowPitch(widest * elem) / 4, a.batch * plan->fold_cols, kAttendFloats<HD>});
  plan->bias_rows = ((a.heads + 2 * a.kv_heads) * a.head_dim + grid - 1) / grid;
  const int64_t fixed = plan->x_floats * 4 + a.num_layers * (static_cast<int64_t>(sizeof(DecodeLayer)) +
                                                             (plan->bias_rows + 2 * plan->fold_cols) * elem);
  const int64_t n[kStages] = {(a.heads + 2 * a.kv_heads) * a.head_dim, a.hidden, a.mlp, a.hidden};
  const int64_t k[kStages] = {a.hidden, a.head_dim, a.hidden, a.mlp};
  const int M[kStages] = {1, 1, 2, 1};
  // A block's weights of a layer.
  const int64_t block_bytes =
      elem * a.hidden * ((a.heads + 2 * a.kv_heads) * a.head_dim + a.heads * a.head_dim + 3 * a.mlp) / grid;
  // The sums take room from the ring, and a smaller ring can ask for more
  // sums (smaller tiles, more parts of k): a few rounds settle it.
  static const bool rotate = !EnvOff("CUDA_AGENT_DECODE_ROTATE");
  // FoldOut's merge takes a thread per 4 elements of a row's head; where
  // threads are to spare, groups of them take shares of the chunks, at
  // least kMergeChunks each. CUDA_AGENT_DECODE_MERGE_SPLITS=0 keeps one.
  static const bool split_merge = !EnvOff("CUDA_AGENT_DECODE_MERGE_SPLITS");
  // A block's chunks of the attention in a run, the new token's heads
  // prepared once for a row's key head (Attend); CUDA_AGENT_DECODE_CHUNK_RUNS=0
  // takes one every gridDim.x, each preparing them. On an H200 the kernel
  // alone at batch 8 over 640 keys 1207.9 us against 1221.6, at batch 1 over
  // 4096 keys 605.2 against 628.3; batch-1 decode after 3072-token prompts
  // 1476.4 tok/s against 1443.6.
  static const bool chunk_runs = !EnvOff("CUDA_AGENT_DECODE_CHUNK_RUNS");
  plan->chunk_runs = chunk_runs;
  const int64_t chunks = (a.span + kChunkKeys - 1) / kChunkKeys, units = a.batch * HD / 4;
  const int64_t splits = std::clamp<int64_t>((chunks + kMergeChunks - 1) / kMergeChunks, 1, kThreads / units);
  plan->merge_splits = split_merge ? static_cast<int>(splits) : 1;
  plan->red_floats = 0;
  for (int round = 0;; ++round) {
    plan->ring_bytes = (room - fixed - plan->red_floats * 4 - 1024) / 128 * 128;
    if (plan->ring_bytes < 32 * 1024 || round == 4) return false;
    // Where a block's weights of a layer are two rings or more, the copies
    // follow the releases (the weights stream): copying ahead, and tiles of
    // at most half the ring (fewer tiles, each with more rows for the tensor
    // cores). On an H200 at the Qwen2.5-1.5B shape (709 KB against a 202 KB
    // ring) the kernel took 1192.3 us copying ahead and 1125.6 with both,
    // against 1326.8; at the 0.5B shape (226 KB against 200 KB) copying
    // ahead was 6.6% slower.
    plan->copy_ahead = block_bytes >= 2 * plan->ring_bytes;
    // FoldDown's tiles rotated by block (DownTileRow) where the weights do
    // not stream: at the 0.5B shape the barrier after the fold waits for the
    // reductions to drain from L2, and spread over both tiles' rows they
    // drain sooner (on an H100 the kernel alone 437 us against 476-482,
    // batch-1 decode 1765.4 tok/s against 1691.6; block 0 leaves the barrier
    // 1.40 us after the last block's end against 1.99). Where they stream
    // (1.5B) each block's first tile waits for DRAM instead: 1366-1374 us
    // against 1324-1327. CUDA_AGENT_DECODE_ROTATE=0 keeps every block's
    // tiles in the same order.
    plan->rotate_down = rotate && !plan->copy_ahead;
    const int64_t tile_cap = plan->ring_bytes / (plan->copy_ahead ? 2 : 3);
    int64_t red = 0;
    for (int s = 0; s < kStages; ++s) {
      if (s == kStageOut) {  // FoldOut's: tiles of one 2D copy, of at most 256 rows by head_dim columns
        plan->pitch[s] = HD * elem;
        const int64_t most = std::min<int64_t>(256, tile_cap / plan->pitch[s]) / 4 * 4;
        if (most == 0) return false;
        plan->tile_rows[s] = std::min(plan->out_rows, most);
        plan->splits[s] = 1;
        red = std::max(red, plan->tile_rows[s] * a.batch);  // FoldOut's products
        continue;
      }
      if (s == kStageDown) {  // FoldDown's: 2D copies of at most 256 rows, every row of the matrix
        plan->pitch[s] = plan->fold_cols * elem;
        if (plan->pitch[s] > tile_cap) return false;
        // Copies of rows in fours (FoldDown's vector reductions), as even as
        // rows allow; a tile is half of them (at most as many as fit in a
        // third of the ring): the ring has room for the first half as soon
        // as the gate/up tiles before it leave some, where the whole matrix
        // (72 KB a block at Qwen2.5-0.5B's shape) waited 2.2 us a layer for
        // it behind the third gate/up tile.
        const int64_t most = std::min<int64_t>(256, tile_cap / plan->pitch[s]) / 4 * 4;
        if (most == 0) return false;
        const int64_t boxes = (a.hidden + most - 1) / most;
        plan->fold_box_rows = ((a.hidden + boxes - 1) / boxes + 3) / 4 * 4;
        const int64_t box_bytes = plan->fold_box_rows * plan->pitch[s];
        const int64_t per_tile = std::min((boxes + 1) / 2, tile_cap / box_bytes);  // a box fits in tile_cap
        plan->tile_rows[s] = per_tile * plan->fold_box_rows;
        plan->splits[s] = 1;
        red = std::max(red, plan->tile_rows[s] * a.batch);  // FoldDown's partial sums
        continue;
      }
      plan->pitch[s] = RowPitch(k[s] * elem);
      const int64_t unit = M[s] * plan->pitch[s];  // an output row's bytes in the ring
      if (unit > tile_cap) return false;
      const int64_t block_rows = s == kStageGateUp ? plan->fold_cols : (n[s] + grid - 1) / grid;
      // Tiles of at most tile_cap, as even as rows allow, and on the tensor
      // cores whole units of 16 rows of the tile's M * rows where a tile
      // holds that many: 40 gate/up rows of 17 at most are tiles of 16, 16
      // and 8 rows (2, 2 and 1 units), not 14, 14 and 12 (a unit and a unit
      // of 12 rows of 16 each). Gate/up's dot products: 2.9 -> 1.5 us a
      // layer.
      int64_t cap = tile_cap / unit, whole = elem == 2 ? 16 / M[s] : 1;  // rows of a tile in multiples of whole
      if (cap < whole) whole = 1;
      cap = cap / whole * whole;
      const int64_t tiles = (block_rows + cap - 1) / cap;
      const int64_t even = ((block_rows + tiles - 1) / tiles + whole - 1) / whole * whole;
      plan->tile_rows[s] = block_rows * unit <= plan->ring_bytes / 2 ? block_rows : std::min(cap, even);
      plan->splits[s] = Splits(plan->tile_rows[s], k[s], elem, M[s]);
      red = std::max(red, block_rows * plan->splits[s] * M[s] * kDecodeMaxRows);
    }
    if (red <= plan->red_floats) break;
    plan->red_floats = red;
  }
  const int64_t rest = fixed + plan->red_floats * 4;
  *dynamic_bytes = plan->ring_bytes + rest + 128;  // and the ring's alignment
  return true;
}

// The layers' o and down projections as FoldMaps for `plan`; false where
// the driver refuses one.
template <typename T>
bool EncodeFoldMaps(const DecodeLayersArgs& a, const RingPlan& plan, FoldMaps* maps) {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (!encode) return false;
  const CUtensorMapDataType type = std::is_same_v<T, float>           ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  // A row-major [rows, cols] matrix at w in boxes of box_cols by box_rows.
  auto map = [&](CUtensorMap* m, const void* w, int64_t rows, int64_t cols, int64_t box_cols, int64_t box_rows) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(T)};  // bytes between rows
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
    const cuuint32_t steps[2] = {1, 1};
    return encode(m, type, 2, const_cast<void*>(w), dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  };
  for (int64_t l = 0; l < a.num_layers; ++l)
    if (!map(&maps->out[l], a.layers[l].o.w, a.hidden, a.heads * a.head_dim, a.head_dim, plan.tile_rows[kStageOut]) ||
        !map(&maps->down[l], a.layers[l].down.w, a.hidden, a.mlp, plan.fold_cols, plan.fold_box_rows))
      return false;
  return true;
}

// The kernel for a step: of one row or any, attending in FoldOut or over
// the chunks (AttendsInFold).
template <typename T, int HD, bool kProfile>
auto Kernel(bool one, bool fold) {
  auto kernel = &DecodeLayersKernel<T, HD, kProfile, false, false>;
  if (one) kernel = &DecodeLayersKernel<T, HD, kProfile, true, false>;
  if constexpr (HD <= 64)
    if (fold) kernel = &DecodeLayersKernel<T, HD, kProfile, true, true>;
  return kernel;
}

// Calls f(kernel, plan, dynamic_bytes, maps) for the shape's kernel, maps
// null where `encode` is false; false where it does not fit.
template <typename F>
bool WithPlan(Dtype dtype, const DecodeLayersArgs& a, bool encode, F&& f) {
  bool ok = false;
  Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto plan = [&](auto kernel, auto planner) {
      RingPlan p;
      int64_t bytes = 0;
      FoldMaps maps;
      ok = planner(a, &p, &bytes) && (!encode || EncodeFoldMaps<T>(a, p, &maps));
      if (ok) f(kernel, p, bytes, encode ? &maps : nullptr);
    };
    // The batch-1 kernel, which with heads of 64 takes the attention in
    // FoldOut up to FoldAttentionKeys() keys, or the kernel for any batch.
    const bool profile = a.timeline != nullptr, one = a.batch == 1,
               fold = AttendsInFold(a.batch, a.span, a.head_dim);
    if (a.head_dim == 64)
      plan(profile ? Kernel<T, 64, true>(one, fold) : Kernel<T, 64, false>(one, fold), PlanRing<T, 64>);
    else if (a.head_dim == 128)
      plan(profile ? Kernel<T, 128, true>(one, fold) : Kernel<T, 128, false>(one, fold), PlanRing<T, 128>);
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

int64_t DecodeLayersAttentionChunks(int64_t batch, int64_t span, int64_t head_dim) {
  if (AttendsInFold(batch, span, head_dim)) return 0;  // no chunks: no partials to zero at every step
  return std::max<int64_t>(1, (span + kChunkKeys - 1) / kChunkKeys);
}

int64_t DecodeLayersBlocks() { return MultiprocessorCount(); }

bool DecodeLayersFit(Dtype dtype, int64_t batch, int64_t span, int64_t layers, int64_t hidden, int64_t mlp,
                     int64_t heads, int64_t kv_heads, int64_t head_dim) {
  DecodeLayersArgs a;
  a.span = span, a.batch = batch, a.num_layers = layers, a.hidden = hidden, a.mlp = mlp, a.heads = heads,
  a.kv_heads = kv_heads, a.head_dim = head_dim;
  return ShapeFits(dtype, a) && WithPlan(dtype, a, false, [](auto, const RingPlan&, int64_t, const FoldMaps*) {});
}

int DecodeLayers(Dtype dtype, const DecodeLayersArgs& args, cudaStream_t stream) {
  if (args.batch == 0) return 0;
  cudaError_t error = cudaSuccess;
  const bool fits =
      ShapeFits(dtype, args) &&
      WithPlan(dtype, args, true, [&](auto kernel, const RingPlan& plan, int64_t bytes, const FoldMaps* maps) {
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
        error = cudaLaunchKernelEx(&config, kernel, args, plan, *maps);
      });
  if (!fits) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(error != cudaSuccess ? error : cudaGetLastError());
}

}  // namespace cuda_agent::model::kernels
