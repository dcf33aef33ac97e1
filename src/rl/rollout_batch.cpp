#include "cuda_agent/rl/rollout_batch.h"

#include <ATen/ATen.h>

#include <map>

#include "cuda_agent/rl/advantages.h"

namespace cuda_agent::rl {

namespace {

// `f` applied to every defined tensor of `b`.
template <typename F>
RolloutBatch EachField(const RolloutBatch& b, F f) {
  auto g = [&](const at::Tensor& t) { return t.defined() ? f(t) : t; };
  return {g(b.tokens), g(b.action_mask), g(b.old_logprobs), g(b.rewards),   g(b.scores),
          g(b.groups), g(b.advantages),  g(b.returns),      g(b.old_values)};
}

}  // namespace

RolloutBatch RolloutBatch::Slice(int64_t begin, int64_t n) const {
  return EachField(*this, [&](const at::Tensor& t) { return t.narrow(0, begin, n); });
}

RolloutBatch RolloutBatch::To(c10::Device device) const {
  return EachField(*this, [&](const at::Tensor& t) { return t.to(device); });
}

RolloutBatch RolloutBatch::Select(const at::Tensor& keep) const {
  at::Tensor idx = keep.to(at::kBool).nonzero().squeeze(1).to(tokens.device());
  return EachField(*this, [&](const at::Tensor& t) { return t.index_select(0, idx.to(t.device())); });
}

void RolloutBatch::DropLoss(const at::Tensor& rows) {
  action_mask = action_mask.logical_and(rows.to(at::kBool).logical_not().unsqueeze(1).to(action_mask.device()));
}

RolloutBatch RolloutBatch::Concat(const std::vector<RolloutBatch>& parts) {
  int64_t T = 0;
  for (const auto& p : parts) T = std::max(T, p.tokens.size(1));
  auto pad = [&](const at::Tensor& t) { return t.size(1) == T ? t : at::constant_pad_nd(t, {0, T - t.size(1)}, 0); };
  std::vector<at::Tensor> tokens, mask, old, rewards, scores, groups;
  int64_t next_group = 0;
  for (const auto& p : parts) {
    tokens.push_back(pad(p.tokens));
    mask.push_back(pad(p.action_mask.to(at::kByte)).to(at::kBool));
    old.push_back(pad(p.old_logprobs));
    rewards.push_back(pad(p.rewards));
    scores.push_back(p.scores);
    at::Tensor g = p.groups.to(at::kCPU).contiguous();
    std::map<int64_t, int64_t> renumber;
    at::Tensor out = at::empty_like(g);
    for (int64_t i = 0; i < g.numel(); ++i) {
      int64_t id = g.data_ptr<int64_t>()[i];
      if (!renumber.count(id)) renumber[id] = next_group++;
      out.data_ptr<int64_t>()[i] = renumber[id];
    }
    groups.push_back(out.to(p.groups.device()));
  }
  RolloutBatch b;
  b.tokens = at::cat(tokens);
  b.action_mask = at::cat(mask);
  b.old_logprobs = at::cat(old);
  b.rewards = at::cat(rewards);
  b.scores = at::cat(scores);
  b.groups = at::cat(groups);
  return b;
}

DynamicSampler::DynamicSampler(int64_t target_groups, int64_t max_rounds)
    : target_groups_(target_groups), max_rounds_(max_rounds) {}

void DynamicSampler::Add(const RolloutBatch& round) {
  ++rounds_;
  at::Tensor spread = GroupsWithSpread(round.scores, round.groups).to(at::kCPU);
  at::Tensor groups = round.groups.to(at::kCPU).contiguous();
  std::map<int64_t, bool> keep;  // group -> kept (in order of first appearance)
  std::vector<int64_t> order;
  for (int64_t i = 0; i < groups.numel(); ++i) {
    int64_t g = groups.data_ptr<int64_t>()[i];
    if (!keep.count(g)) {
      order.push_back(g);
      keep[g] = spread.data_ptr<bool>()[i];
    }
  }
  for (int64_t g : order) {
    if (!keep[g]) {
      ++dropped_groups_;
    } else if (kept_groups_ < target_groups_) {
      ++kept_groups_;
    } else {
      keep[g] = false;  // over the target: not needed
    }
  }
  at::Tensor rows = at::zeros({groups.numel()}, at::kBool);
  for (int64_t i = 0; i < groups.numel(); ++i) rows.data_ptr<bool>()[i] = keep[groups.data_ptr<int64_t>()[i]];
  if (rows.any().item<bool>()) kept_.push_back(round.Select(rows.to(round.groups.device())));
}

RolloutBatch DynamicSampler::Take() {
  RolloutBatch out = kept_.empty() ? RolloutBatch{} : RolloutBatch::Concat(kept_);
  kept_.clear();
  kept_groups_ = dropped_groups_ = rounds_ = 0;
  return out;
}

}  // namespace cuda_agent::rl
