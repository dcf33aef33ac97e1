// AdamW (Loshchilov & Hutter, 2019) for the learner: fp32 moments, fp32 master
// weights for bf16/fp16 parameters, LibTorch's fused kernel (_fused_adamw_),
// warm-up then constant or cosine learning rate, global-norm gradient clipping.
//
// With a communicator of N ranks the optimizer state is sharded (ZeRO stage 1):
// each parameter is owned by one rank, which alone keeps its moments and master
// copy and updates it; owners then broadcast the new values. With shard_state
// off every rank keeps the whole state and takes the same step (no broadcast:
// faster while the state fits). Gradients must already be averaged over ranks
// when Step() is called.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cuda_agent/rl/communicator.h"
#include "cuda_agent/util/status.h"

namespace cuda_agent::rl {

struct OptimizerConfig {
  double lr = 1e-6;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.01;
  int64_t warmup_steps = 0;
  std::string schedule = "constant";  // constant or cosine (to min_lr_ratio * lr at total_steps)
  int64_t total_steps = 1000;
  double min_lr_ratio = 0.1;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  bool shard_state = true;     // ZeRO-1 over the ranks; false: every rank keeps all of it
};

class AdamW {
 public:
  // `params` are leaf tensors that require grad; `comm` (may be null: one rank)
  // must outlive the optimizer.
  AdamW(std::vector<at::Tensor> params, const OptimizerConfig& config, Communicator* comm = nullptr);

  // The learning rate of update number `step` (0-based).
  double LearningRate(int64_t step) const;
  // Clips gradients to max_grad_norm, updates, zeroes gradients. Returns the
  // gradient norm before clipping.
  double Step();
  int64_t step() const { return step_; }
  // Which rank updates parameter i (this rank for all of them when unsharded).
  int Owner(size_t i) const { return owner_[i]; }

  // This rank's shard of the state (moments, master weights, step) in one
  // safetensors file; Load() needs the same parameters and world size.
  Status Save(const std::filesystem::path& file) const;
  Status Load(const std::filesystem::path& file);

 private:
  std::vector<at::Tensor> params_;
  OptimizerConfig config_;
  Communicator* comm_;
  std::vector<int> owner_;
  // For the parameters this rank owns (empty tensors otherwise):
  std::vector<at::Tensor> master_, exp_avg_, exp_avg_sq_, state_step_;
  int64_t step_ = 0;
};

}  // namespace cuda_agent::rl
