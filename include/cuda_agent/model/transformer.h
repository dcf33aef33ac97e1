// The policy network: a decoder-only transformer (Llama / Qwen2 / Qwen3) in
// plain ATen ops, with Hugging Face parameter names, so one set of weights
// serves generation (KV cache) and training (autograd) in the same process.
//
//   auto model = Transformer::Load("Qwen2.5-0.5B", {at::kBFloat16, at::kCUDA});
//   at::Tensor logits = (*model)->Forward(ids, positions);          // [B, T, V]
//
// Numerics follow transformers: RMSNorm in fp32 then cast, rotary tables in
// fp32 cast to the activation dtype, attention through
// at::scaled_dot_product_attention (flash on CUDA), SwiGLU MLP.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_agent/model/model_config.h"
#include "cuda_agent/util/status.h"

namespace cuda_agent::model {

struct RowPick;  // model/fused_ops.h

struct LoadOptions {
  c10::ScalarType dtype = c10::kFloat;  // weights and activations
  c10::Device device = c10::kCPU;
  bool value_head = false;  // a scalar head on the last hidden state (PPO's critic)
};

// How Transformer::Decode computes a step on CUDA (model/fused_ops.h); each
// falls back to the ATen ops where its kernels do not take the batch or shape.
enum class DecodeKernels {
  kAten,        // ATen ops (cuBLAS GEMMs, flash attention, fused elementwise kernels)
  kFused,       // five kernels per layer, up to FusedDecodeMaxRows() rows
  kPersistent,  // every layer in one persistent kernel (Hopper; rows as PersistentDecodeFits allows)
};
// Their names on command lines: aten, fused, persistent.
const std::vector<std::string>& DecodeKernelsNames();
StatusOr<DecodeKernels> ParseDecodeKernels(const std::string& name);

// Keys and values of every layer for `slots` sequences of up to `max_len` tokens.
struct KvCache {
  std::vector<at::Tensor> k, v;  // per layer [slots, max_len, kv_heads, head_dim]
  int64_t slots = 0, max_len = 0;
  // The persistent decode's work space, zeros between its steps
  // (PersistentDecode's `work`); made at the first.
  at::Tensor decode_work;
  static KvCache Allocate(const ModelConfig& config, int64_t slots, int64_t max_len, c10::ScalarType dtype,
                          c10::Device device);
};

class Transformer {
 public:
  // config.json + safetensors (single or sharded) of `dir`; every tensor must be
  // present with its exact shape, and no unknown tensor may be left over.
  static StatusOr<std::unique_ptr<Transformer>> Load(const std::filesystem::path& dir, const LoadOptions& options);
  // Fresh weights as transformers initialises them (normal(0, 0.02), norms 1).
  static std::unique_ptr<Transformer> Random(const ModelConfig& config, const LoadOptions& options, uint64_t seed);
  ~Transformer();

  // ids, positions: [B, T] int64 on the model's device. Without a cache, row
  // b attends causally within itself (right padding is harmless). With one,
  // row b's keys and values are written into cache slot slots[b] at
  // positions[b, t], and each query attends the slot's keys at positions up to
  // its own. `values` (value head only): [B, T].
  at::Tensor Forward(const at::Tensor& ids, const at::Tensor& positions, KvCache* cache = nullptr,
                     const at::Tensor& slots = {}, at::Tensor* values = nullptr) const;

  // One new token for each of the cache's first B slots (row b is slot b):
  // ids, positions [B, 1]; keys at positions < span are visible, and
  // span > every position. Returns logits [B, V], written into *logits
  // (contiguous, the model's dtype) where given. No host synchronisation and
  // fixed shapes for fixed (B, span), so a CUDA graph can capture it.
  // `pick`: where the step's LM head can sample its row as it goes (one row
  // through the persistent kernel and HeadRow, fused_ops.h), it does, and
  // sets pick->picks; elsewhere pick->picks is left undefined.
  at::Tensor Decode(const at::Tensor& ids, const at::Tensor& positions, KvCache& cache, int64_t span,
                    DecodeKernels kernels = DecodeKernels::kAten, at::Tensor* logits = nullptr,
                    RowPick* pick = nullptr) const;
  // Whether Decode of B rows over `span` keys with `kernels` runs every layer
  // in the one persistent kernel (CUDA; the rows and shape it takes).
  bool DecodesInOneKernel(int64_t B, int64_t span, DecodeKernels kernels) const;

  // Hugging Face name -> parameter; the value head as value_head.weight/bias.
  const std::vector<std::pair<std::string, at::Tensor>>& parameters() const;
  const ModelConfig& config() const;
  const LoadOptions& options() const;

  // A Hugging Face directory: config.json, model.safetensors (in the model's
  // dtype), and the tokenizer files of `tokenizer_dir` if given. The value head
  // is written only with `with_value_head`.
  Status Save(const std::filesystem::path& dir, const std::filesystem::path& tokenizer_dir = {},
              bool with_value_head = false) const;

 private:
  Transformer();
  at::Tensor DecodeFused(const at::Tensor& ids, const at::Tensor& positions, KvCache& cache, int64_t span,
                         at::Tensor* logits) const;
  at::Tensor DecodePersistent(const at::Tensor& ids, const at::Tensor& positions, KvCache& cache, int64_t span,
                              at::Tensor* logits, RowPick* pick) const;
  template <typename Attend>
  at::Tensor Run(const at::Tensor& ids, const at::Tensor& positions, at::Tensor* values, Attend&& attend) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda_agent::model
