#include "cuda_agent/trainer/synthetic_task.h"

#include <algorithm>

namespace cuda_agent::trainer {

std::vector<int32_t> SyntheticTask::Prompt(std::mt19937_64& rng) const {
  std::uniform_int_distribution<int32_t> symbol(2, static_cast<int32_t>(1 + config_.symbols));
  std::vector<int32_t> p{kBos};
  for (int64_t i = 0; i < config_.length; ++i) p.push_back(symbol(rng));
  p.push_back(kSep);
  return p;
}

std::vector<int32_t> SyntheticTask::Answer(const std::vector<int32_t>& prompt) const {
  std::vector<int32_t> a(prompt.begin() + 1, prompt.end() - 1);
  if (config_.kind == "reverse") std::reverse(a.begin(), a.end());
  if (config_.kind == "sort") std::sort(a.begin(), a.end());
  return a;
}

double SyntheticTask::Reward(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) const {
  const std::vector<int32_t> answer = Answer(prompt);
  int64_t right = 0;
  for (size_t i = 0; i < answer.size() && i < response.size(); ++i) right += response[i] == answer[i];
  return static_cast<double>(right) / static_cast<double>(answer.size());
}

}  // namespace cuda_agent::trainer
