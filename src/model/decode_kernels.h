// Launchers of the decode kernels behind model/fused_ops.h (decode_kernels.cu:
// per-layer GEMVs and attention; decode_layers.cu: every layer in one kernel;
// head_kernels.cu: the final norm and the LM head):
// plain pointers and sizes, no torch. Every launcher runs on `stream` and
// returns the launch's cudaError_t as an int.
#pragma once

#include <cstdint>

#include "fused_kernels.h"  // Dtype, cudaStream_t

namespace cuda_agent::model::kernels {

// One new token for each of `batch` <= kDecodeMaxRows rows.
constexpr int kDecodeMaxRows = 8;
constexpr int kDecodeMaxGroup = 8;  // query heads per key head

// One weight matrix [rows, k] (row-major) and its optional bias [rows].
struct DecodeMatrix {
  const void* w = nullptr;
  const void* bias = nullptr;
  int64_t rows = 0;
};

// y[b] = W xn[b] + bias for every row b of x [batch, k], where xn = x, or
// RMSNorm(x) * norm_weight when norm_weight is set. The output rows are those
// of m[0], then m[1], then m[2] (unused ones have rows 0), or with `swiglu`
// silu(m[0] xn) * (m[1] xn). `residual` [batch, n] is added when set (y may be
// the same buffer). Each weight is read once for all rows.
struct DecodeGemvArgs {
  const void* x = nullptr;
  int64_t batch = 0, k = 0;
  const void* norm_weight = nullptr;
  float eps = 0;
  DecodeMatrix m[3];
  bool swiglu = false;
  const void* residual = nullptr;
  void* y = nullptr;
};
int DecodeGemv(Dtype dtype, const DecodeGemvArgs& args, cudaStream_t stream);

// Attention of one new token per row b over cache slot b: takes q, k, v from
// qkv [batch, (heads + 2 kv_heads) * head_dim], applies the optional q/k
// RMSNorm and the rotary embedding at positions[b], writes k and v into the
// caches [slots, max_len, kv_heads, head_dim] at positions[b], and attends
// keys 0..positions[b] (at most the first `span`: rows past it are idle and
// their output unused). out: [batch, heads * head_dim]. head_dim 64 or 128.
struct DecodeAttentionArgs {
  const void* qkv = nullptr;
  int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0, max_len = 0, span = 0;
  const int64_t* positions = nullptr;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  const void* q_norm = nullptr;
  const void* k_norm = nullptr;
  float eps = 0, scale = 0;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  void* out = nullptr;
  // Work space of a split over key positions: DecodeAttentionChunks(span)
  // partial results per (row, key head) of kDecodeMaxGroup * (head_dim + 2)
  // floats each, and one int per (row, key head), zero before the launch (the
  // kernel leaves it zero).
  float* partial = nullptr;
  int* counters = nullptr;
};
int64_t DecodeAttentionChunks(int64_t span);
int DecodeAttention(Dtype dtype, const DecodeAttentionArgs& args, cudaStream_t stream);

// ---- The LM head of a decode step ----

// out [rows, vocab] = RMSNorm(h) * norm_weight against head [vocab, hidden]
// (the final norm as at::rms_norm computes it on CUDA), for rows <= 8; 16-bit
// types, hidden a multiple of 32, Ampere or later (HeadLogitsFit). The head
// is read once, under an evict-first L2 policy (head_kernels.cu).
struct HeadLogitsArgs {
  const void* h = nullptr;
  const void* norm_weight = nullptr;
  const void* head = nullptr;
  void* out = nullptr;
  int64_t rows = 0, hidden = 0, vocab = 0;
  float eps = 0;
};
bool HeadLogitsFit(Dtype dtype, int64_t rows, int64_t hidden);
int HeadLogits(Dtype dtype, const HeadLogitsArgs& args, cudaStream_t stream);

// out [1, vocab] = x [1, hidden] against head [vocab, hidden]: the LM head
// of one row, already normed (the persistent kernel's output), the head
// streamed once under an evict-first L2 policy; launched so that it starts
// as the kernel before it ends (programmatic dependent launch). 16-bit
// types, Hopper or later, one or two rows of the head 2 to 3.5 KB and a
// multiple of 512 bytes (HeadRowFits: Qwen2.5-0.5B's and 1.5B's heads, not
// a hidden of 2048), x and head 16-byte aligned.
// With `picks` set it also samples the row as SampleTokens does
// (fused_kernels.h: the same token for the same temperature, seed and
// offset; the logprob up to fp32 rounding) from the logits it stored: no
// sampling kernel after it. `work`: HeadRowWorkFloats floats; `counter`: an
// int32 zero, left zero; picks [2] fp32 (token, logprob), and host_picks
// where set (pinned host memory through its device mapping) the same.
struct HeadRowArgs {
  const void* x = nullptr;
  const void* head = nullptr;
  void* out = nullptr;
  int64_t hidden = 0, vocab = 0;
  float temperature = 0;  // 0: greedy
  uint64_t seed = 0, offset = 0;
  float* work = nullptr;
  int* counter = nullptr;
  float* picks = nullptr;
  float* host_picks = nullptr;
};
bool HeadRowFits(Dtype dtype, int64_t hidden, int64_t vocab);
int64_t HeadRowWorkFloats();
int HeadRow(Dtype dtype, const HeadRowArgs& args, cudaStream_t stream);

// ---- Decode: every layer of a step in one persistent kernel ----
constexpr int kDecodeMaxLayers = 64;

struct DecodeLayer {
  const void* input_norm = nullptr;  // [hidden]
  const void* post_norm = nullptr;   // [hidden]
  const void* q_norm = nullptr;      // [head_dim] (Qwen3) or null
  const void* k_norm = nullptr;
  DecodeMatrix q, k, v, o, gate, up, down;
  void* k_cache = nullptr;  // [slots, max_len, kv_heads, head_dim]
  void* v_cache = nullptr;
};

// One block per SM runs the layers' stages (norm + q/k/v; attention with the
// o projection folded in: the blocks that merge a query head's chunks
// multiply it by that head's columns of the o weights and add the products
// to the residual stream by atomics; norm + gate/up + SwiGLU with the down
// projection folded in the same way), with a grid-wide barrier after the o
// and the down projections (the attention reads the q/k/v outputs, tagged,
// as they arrive). The weights stream into a ring of shared memory by bulk
// copies (TMA) that run ahead of the computation, across stages and layers,
// as far as the ring holds. h [batch, hidden] holds the embeddings on entry
// (or `ids` name them) and the last layer's output on return. Hopper and
// later.
struct DecodeLayersArgs {
  DecodeLayer layers[kDecodeMaxLayers];
  int64_t num_layers = 0, batch = 0, hidden = 0, mlp = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_len = 0, span = 0;
  float eps = 0, scale = 0;
  const int64_t* positions = nullptr;
  const float* inv_freq = nullptr;
  void* h = nullptr;
  // Where set, the new tokens [batch], whose rows of `embedding` [vocab,
  // hidden] are the first layer's input (no embedding kernel before the
  // launch); the kernel writes them into h first.
  const int64_t* ids = nullptr;
  const void* embedding = nullptr;
  // Where set, the final RMSNorm's weight [hidden]: h receives the last
  // layer's output normed by it (the LM head's input), no norm kernel after.
  const void* final_norm = nullptr;
  int64_t vocab = 0;
  // Work space: qkv [batch, (heads + 2 kv_heads) * head_dim]; the residual
  // stream in fp32, two copies of [batch, hidden] each: attn_sum after the
  // attention (to which the o projection is added), h_sum after the MLP (to
  // which the down projection is added); partial as for DecodeAttention,
  // over DecodeLayersAttentionChunks(batch, span, head_dim) chunks (none
  // where the o projection's blocks take the attention themselves). qkv and partial
  // hold each value in 64 bits with the layer's tag (16-byte aligned); they,
  // attn_sum's first copy and barrier (two counts: arrivals, blocks out) are
  // zeros before the launch, and the kernel leaves them and both of
  // attn_sum's copies zero (partial, qkv and attn_sum lie in that order, one
  // run of words).
  uint64_t* qkv = nullptr;
  float* attn_sum = nullptr;
  float* h_sum = nullptr;
  uint64_t* partial = nullptr;
  unsigned* barrier = nullptr;
  // Profiling, when set: block 0's %globaltimer (ns) at the start and, per
  // layer and stage (5 a layer), when its work ends and when the barrier
  // after it opens; then its SM's clock64 at the start and at the end; then
  // per stage (5) the cycles of 4 phases of its thread 0's work, summed over
  // the layers (zero before the launch). GEMV: input, waiting for weights,
  // dot products, outputs; attention: the new token's heads, the chunk's
  // keys and values in shared memory, the softmax, the count of the chunk;
  // the o projection: waiting for the head's chunks and merging them,
  // waiting for weights, dot products, the additions to the residual stream.
  // Then per GEMV stage (4) the cycles its copying warp waited for room in
  // the ring before issuing that stage's tiles. Then per layer and stage
  // each block's %globaltimer when its thread 0 ends the stage's work (at
  // the grid barrier: once the block's computing warps all have), [layers *
  // 5, blocks]. DecodeTimelineSize values.
  unsigned long long* timeline = nullptr;
};
constexpr int64_t DecodeTimelineSize(int64_t layers, int64_t blocks) { return 27 + 10 * layers + 5 * layers * blocks; }
// Whether the persistent kernel takes this shape on this GPU (Hopper or
// later; 16-byte aligned rows; head_dim 64 or 128; up to kDecodeMaxGroup
// query heads per key head; each GEMV's input and a tile of weight rows fit
// in shared memory next to the attention's work space for `span` keys).
bool DecodeLayersFit(Dtype dtype, int64_t batch, int64_t span, int64_t layers, int64_t hidden, int64_t mlp,
                     int64_t heads, int64_t kv_heads, int64_t head_dim);
int64_t DecodeLayersAttentionChunks(int64_t batch, int64_t span, int64_t head_dim);
// The persistent kernel's blocks: one per SM of the current device.
int64_t DecodeLayersBlocks();
int DecodeLayers(Dtype dtype, const DecodeLayersArgs& args, cudaStream_t stream);

}  // namespace cuda_agent::model::kernels
