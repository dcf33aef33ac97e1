// Differentiable ops of the policy that run as single fused CUDA kernels on a
// GPU (src/model/fused_kernels.cu) and as the equivalent ATen expressions
// elsewhere. On CUDA the arithmetic is fp32 with one rounding to the output
// dtype, where the ATen expressions round after every op in bf16.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <vector>

namespace cuda_agent::model {

// Per row of logits [N, V]: the log-probability of targets[n] (int64) and the
// entropy of the softmax, both fp32 [N] and differentiable in the logits. On
// CUDA this reads the logits once forward and once backward (writing their
// gradient in the logits' dtype) and makes no [N, V] fp32 tensor.
struct TokenLogprobs {
  at::Tensor logprobs, entropy;
};
TokenLogprobs ComputeTokenLogprobs(const at::Tensor& logits, const at::Tensor& targets);

// Rotary position embedding as transformers applies it: x * cos +
// rotate_half(x) * sin, x [B, T, heads, dim], cos and sin [B, T, 1, dim] in
// x's dtype (not differentiated).
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// silu(gate) * up.
at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up);

// True where the fused CUDA kernels are built in.
bool HaveFusedKernels();

// A token per row of logits [rows, vocab] in one kernel (CUDA, with the
// fused kernels): temperatures[row] 0 takes the argmax (the first of ties),
// t > 0 draws from softmax(logits / t) with noise from `generator` (CUDA).
// Returns [2, rows] fp32 on the logits' device: the token ids, then each
// one's logprob (greedy: under softmax(logits); drawn: under
// softmax(logits / t)). `counters`, where given, is the kernel's int32
// zeros on the logits' device, which it leaves zero: a caller that samples
// every step keeps them and saves a fill each step (made, or grown, here).
// `host`, where given, is contiguous pinned fp32 [2, rows] that the kernel
// writes the same into (no copy after it; complete once the stream is).
at::Tensor SampleTokens(const at::Tensor& logits, const std::vector<double>& temperatures, at::Generator& generator,
                        at::Tensor* counters = nullptr, at::Tensor* host = nullptr);

// A decode step's inputs, staged on the host: the first `rows` columns of
// staging [5, S] (int64, pinned where inputs is on CUDA: token ids,
// positions, fed slots, their rows in picks, running slots) into inputs
// [5, S]; then inputs[0][slot] = picks[0][row] for the first `fed` (slot,
// row) pairs: the tokens the last step sampled (SampleTokens's [2, R]
// picks, ids held as floats), fed to the next step without a trip through
// the host. On CUDA with the fused kernels one kernel, which reads staging
// through its device mapping: a copy would go through a copy engine, and
// the GPU idles between a kernel and a copy. Ordered on inputs' stream.
void StageDecodeInputs(const at::Tensor& staging, int64_t rows, const at::Tensor& picks, int64_t fed,
                       at::Tensor& inputs);

// src (fp32) into dst (pinned host memory where src is on CUDA, same
// shape), ordered on src's stream, not waited for: on CUDA with the fused
// kernels one kernel that writes dst through its device mapping (for the
// reason above); else a non-blocking copy.
void CopyToPinned(const at::Tensor& src, at::Tensor& dst);

// ---- The decode step in a few kernels per layer (CUDA; Transformer::Decode) ----

// Rows (one new token each) one fused decode step takes at most; whether a
// model's attention shape fits the fused attention kernel.
int64_t FusedDecodeMaxRows();
bool FusedDecodeFits(int64_t heads, int64_t kv_heads, int64_t head_dim);

struct LinearWeights {
  at::Tensor weight, bias;  // [out, in] and [out] or undefined
};
// For x [B, in]: the concatenated outputs of `parts` applied to x, or to
// RMSNorm(x) * norm_weight when norm_weight is defined; with `swiglu`,
// silu(parts[0] x) * (parts[1] x). `residual` [B, out] is added when defined.
// One kernel; every weight is read once for all rows.
at::Tensor DecodeLinear(const at::Tensor& x, const at::Tensor& norm_weight, double eps,
                        const std::vector<LinearWeights>& parts, bool swiglu, const at::Tensor& residual);

// For qkv [B, (heads + 2 kv_heads) * head_dim] of rows at positions [B]: q/k
// RMSNorm (when the weights are defined), rotary, k and v written into
// k_cache/v_cache [slots, max_len, kv_heads, head_dim] at slot b, and
// attention over keys 0..positions[b] (< span), split over blocks of key
// positions. `counters`: B * kv_heads int32 zeros (left zero). Returns
// [B, heads * head_dim].
at::Tensor DecodeAttention(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& inv_freq,
                           const at::Tensor& q_norm, const at::Tensor& k_norm, double eps, at::Tensor& k_cache,
                           at::Tensor& v_cache, int64_t heads, int64_t kv_heads, int64_t span,
                           const at::Tensor& counters);

// The LM head of one normed row (the persistent decode's output at batch 1):
// logits [1, vocab] of x [1, hidden] against head [vocab, hidden], into *out
// where given ([1, vocab], contiguous). The head is streamed once under an
// evict-first L2 policy, and the kernel starts as the one before it ends
// (programmatic dependent launch), so its first loads are in flight before
// x is ready. HeadRowFits: Hopper, bf16 or fp16, one row, a head whose rows
// (or pairs of rows) are 2 to 3.5 KB in multiples of 512 bytes (Qwen2.5's
// 0.5B and 1.5B heads).
// With `pick`, it also samples the row as it goes, as SampleTokens would
// from its logits with pick's temperature, generator and counters (the same
// token; the logprob up to fp32 rounding): pick->picks is set to their
// [2, 1] fp32 (token id, logprob), and pick->host, where given (contiguous
// pinned fp32 [2, 1]), gets the same. No sampling kernel after the head.
struct RowPick {
  double temperature = 0;                 // 0: greedy
  at::Generator* generator = nullptr;     // CUDA; advanced as SampleTokens advances it
  at::Tensor* counters = nullptr;         // SampleTokens's int32 zeros (made here where undefined)
  at::Tensor* host = nullptr;
  at::Tensor picks;                       // set by HeadRow
};
bool HeadRowFits(const at::Tensor& x, const at::Tensor& head);
at::Tensor HeadRow(const at::Tensor& x, const at::Tensor& head, at::Tensor* out = nullptr, RowPick* pick = nullptr);

// The final RMSNorm and the LM head of a decode step in one kernel: logits
// [B, vocab] of h [B, hidden] against head [vocab, hidden], into *out where
// given ([B, vocab], contiguous). The head is read once, under an evict-first
// L2 policy, so that it does not push the layers' code, keys and values out
// of L2 between steps. DecodeHeadFits: CUDA, bf16 or fp16, B <= 8, hidden a
// multiple of 32. Not yet faster than cuBLAS (see the README): the decode
// paths take it only with CUDA_AGENT_DECODE_HEAD=1.
bool DecodeHeadFits(const at::Tensor& h, const at::Tensor& head);
at::Tensor DecodeHead(const at::Tensor& h, const at::Tensor& norm_weight, double eps, const at::Tensor& head,
                      at::Tensor* out = nullptr);

// Every layer of a decode step in one persistent kernel (Hopper GPUs; rows
// as PersistentDecodeFits allows): h [B, hidden], the embeddings of the new
// tokens, becomes the last layer's output in place (with `ids` [B] int64
// defined, the kernel reads the tokens' rows of `embedding` [vocab, hidden]
// itself, no lookup before it, and h is only written; with `final_norm`
// [hidden] defined, h receives the output normed by it, the LM head's
// input, with no norm kernel after); each layer's keys and
// values go into its caches at `positions` [B] (rows are slots 0..B-1, keys
// < span). `timeline`, when defined (int64 CUDA
// [PersistentDecodeTimelineSize(layers, SMs)], zeros), receives one block's
// clock (ns) at the start and at the end of each stage's work and of the
// grid barrier after it, its SM's cycle count at the start and the end, per
// stage the cycles of the phases of its work, per GEMV stage the cycles its
// weight copies waited for room, and every block's clock at the end of each
// stage's work: a profile of the step (kernels::DecodeLayersArgs::timeline).
// `work`, where given, is the kernel's work space kept from step to step
// (KvCache::decode_work; made or grown here): the kernel leaves it zero, so
// no fill runs before each step. One stream's steps at a time.
struct DecodeLayerWeights {
  at::Tensor input_norm, post_norm, q_norm, k_norm;  // q_norm/k_norm: Qwen3 only
  LinearWeights q, k, v, o, gate, up, down;
  at::Tensor k_cache, v_cache;  // [slots, max_len, kv_heads, head_dim]
};
constexpr int64_t PersistentDecodeTimelineSize(int64_t layers, int64_t blocks) {
  return 27 + 10 * layers + 5 * layers * blocks;
}
// The persistent kernel's blocks on the current device (one per SM; 0
// without the fused kernels).
int64_t PersistentDecodeBlocks();
bool PersistentDecodeFits(c10::ScalarType dtype, int64_t batch, int64_t span, int64_t layers, int64_t hidden,
                          int64_t mlp, int64_t heads, int64_t kv_heads, int64_t head_dim);
void PersistentDecode(at::Tensor& h, const std::vector<DecodeLayerWeights>& layers, const at::Tensor& positions,
                      const at::Tensor& inv_freq, double eps, int64_t heads, int64_t kv_heads, int64_t mlp,
                      int64_t span, const at::Tensor& timeline = {}, const at::Tensor& ids = {},
                      const at::Tensor& embedding = {}, const at::Tensor& final_norm = {}, at::Tensor* work = nullptr);

}  // namespace cuda_agent::model
