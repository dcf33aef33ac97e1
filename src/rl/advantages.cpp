#include "cuda_agent/rl/advantages.h"

#include <ATen/ATen.h>

#include <map>
#include <set>

namespace cuda_agent::rl {

at::Tensor GaeAdvantages(const at::Tensor& rewards, const at::Tensor& values, const at::Tensor& mask, double gamma,
                         double lambda, at::Tensor* returns) {
  at::Tensor r = rewards.detach().to(at::kCPU, at::kDouble).contiguous();
  at::Tensor v = values.detach().to(at::kCPU, at::kDouble).contiguous();
  at::Tensor m = mask.to(at::kCPU, at::kBool).contiguous();
  const int64_t B = r.size(0), T = r.size(1);
  at::Tensor adv = at::zeros({B, T}, at::kDouble);
  auto ra = r.accessor<double, 2>(), va = v.accessor<double, 2>(), aa = adv.accessor<double, 2>();
  auto ma = m.accessor<bool, 2>();
  for (int64_t b = 0; b < B; ++b) {
    double last = 0, next_value = 0;
    for (int64_t t = T - 1; t >= 0; --t) {
      if (!ma[b][t]) continue;
      double delta = ra[b][t] + gamma * next_value - va[b][t];
      last = delta + gamma * lambda * last;
      aa[b][t] = last;
      next_value = va[b][t];
    }
  }
  if (returns != nullptr)
    *returns = at::where(m, adv + v, at::zeros_like(adv)).to(at::kFloat).to(rewards.device());
  return adv.to(at::kFloat).to(rewards.device());
}

namespace {

// Members of each group, by index.
std::map<int64_t, std::vector<int64_t>> Members(const at::Tensor& groups) {
  at::Tensor g = groups.to(at::kCPU, at::kLong).contiguous();
  std::map<int64_t, std::vector<int64_t>> out;
  for (int64_t i = 0; i < g.numel(); ++i) out[g.data_ptr<int64_t>()[i]].push_back(i);
  return out;
}

}  // namespace

at::Tensor GroupNormalizedAdvantages(const at::Tensor& scores, const at::Tensor& groups, bool divide_by_std,
                                     double eps) {
  at::Tensor s = scores.to(at::kCPU, at::kDouble).contiguous();
  at::Tensor out = at::zeros_like(s);
  const double* sp = s.data_ptr<double>();
  double* op = out.data_ptr<double>();
  for (const auto& [g, idx] : Members(groups)) {
    double mean = 0;
    for (int64_t i : idx) mean += sp[i];
    mean /= static_cast<double>(idx.size());
    double var = 0;
    for (int64_t i : idx) var += (sp[i] - mean) * (sp[i] - mean);
    double std = idx.size() > 1 ? std::sqrt(var / static_cast<double>(idx.size() - 1)) : 0.0;
    for (int64_t i : idx) op[i] = divide_by_std ? (sp[i] - mean) / (std + eps) : sp[i] - mean;
  }
  return out.to(at::kFloat).to(scores.device());
}

at::Tensor RlooAdvantages(const at::Tensor& scores, const at::Tensor& groups) {
  at::Tensor s = scores.to(at::kCPU, at::kDouble).contiguous();
  at::Tensor out = at::zeros_like(s);
  const double* sp = s.data_ptr<double>();
  double* op = out.data_ptr<double>();
  for (const auto& [g, idx] : Members(groups)) {
    double sum = 0;
    for (int64_t i : idx) sum += sp[i];
    double n = static_cast<double>(idx.size());
    for (int64_t i : idx) op[i] = n > 1 ? sp[i] - (sum - sp[i]) / (n - 1) : 0.0;
  }
  return out.to(at::kFloat).to(scores.device());
}

at::Tensor TokenAdvantages(const at::Tensor& per_sequence, const at::Tensor& mask) {
  return per_sequence.to(at::kFloat).unsqueeze(1) * mask.to(at::kFloat);
}

at::Tensor GroupsWithSpread(const at::Tensor& scores, const at::Tensor& groups) {
  at::Tensor s = scores.to(at::kCPU, at::kDouble).contiguous();
  at::Tensor out = at::zeros({s.numel()}, at::kBool);
  for (const auto& [g, idx] : Members(groups)) {
    std::set<double> distinct;
    for (int64_t i : idx) distinct.insert(s.data_ptr<double>()[i]);
    for (int64_t i : idx) out.data_ptr<bool>()[i] = distinct.size() > 1;
  }
  return out.to(scores.device());
}

double OverlongPenalty(int64_t length, int64_t max_length, int64_t cache_length) {
  int64_t free_length = max_length - cache_length;
  if (length <= free_length) return 0.0;
  if (length <= max_length) return static_cast<double>(free_length - length) / static_cast<double>(cache_length);
  return -1.0;
}

}  // namespace cuda_agent::rl
