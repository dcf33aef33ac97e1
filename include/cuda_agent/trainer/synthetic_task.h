// Tasks with a verifiable reward in token space, for training and testing the
// RL loop without a judge: the prompt is BOS, `length` symbols, SEP (token ids
// 0, 2.., 1) and the answer is the symbols copied, reversed or sorted.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "cuda_agent/config/train_config.h"

namespace cuda_agent::trainer {

// A task with a verifiable reward in token space (config::TaskConfig).
class SyntheticTask {
 public:
  static constexpr int32_t kBos = 0, kSep = 1;
  explicit SyntheticTask(const config::TaskConfig& config) : config_(config) {}
  int64_t vocab_size() const { return 2 + config_.symbols; }
  int64_t response_tokens() const { return config_.length; }
  std::vector<int32_t> Prompt(std::mt19937_64& rng) const;
  // The expected response to `prompt`.
  std::vector<int32_t> Answer(const std::vector<int32_t>& prompt) const;
  // The fraction of the answer's positions the response gets right.
  double Reward(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) const;

 private:
  config::TaskConfig config_;
};

}  // namespace cuda_agent::trainer
