#include "cuda_agent/rl/gradient_buckets.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

namespace cuda_agent::rl {

GradientBuckets::GradientBuckets(const std::vector<at::Tensor>& params, Communicator* comm, double bucket_mb)
    : params_(params), comm_(comm), bucket_of_(params.size()), slot_of_(params.size()), seen_(params.size(), false) {
  // Buckets hold gradients in the parameters' dtype, as the gradients are kept:
  // summing in fp32 would be rounded back when copied into them.
  const at::ScalarType dtype = params_.empty() ? at::kFloat : params_[0].scalar_type();
  const int64_t limit = static_cast<int64_t>(bucket_mb * (1 << 20)) / static_cast<int64_t>(c10::elementSize(dtype));
  for (size_t k = params_.size(); k-- > 0;) {  // backward reaches the last layers first
    if (buckets_.empty() || buckets_.back().offsets.back() + params_[k].numel() > limit) {
      buckets_.emplace_back();
      buckets_.back().offsets.push_back(0);
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    slot_of_[k] = b.members.size();
    b.members.push_back(k);
    b.offsets.push_back(b.offsets.back() + params_[k].numel());
  }
  for (auto& b : buckets_) b.flat = at::zeros({b.offsets.back()}, params_[b.members[0]].options().dtype(dtype));
  for (size_t k = 0; k < params_.size(); ++k)
    hooks_.push_back(params_[k].register_hook([this, k](const at::Tensor& grad) {
      OnGradient(k, grad);
      return grad;
    }));
}

GradientBuckets::~GradientBuckets() {
  for (size_t k = 0; k < params_.size(); ++k) params_[k].remove_hook(hooks_[k]);
}

void GradientBuckets::Arm() {
  armed_ = comm_->world_size() > 1;
  for (auto& b : buckets_) {
    b.ready = 0;
    b.wait = nullptr;
  }
  std::fill(seen_.begin(), seen_.end(), false);
}

void GradientBuckets::OnGradient(size_t k, const at::Tensor& grad) {
  if (!armed_ || seen_[k]) return;
  seen_[k] = true;
  c10::NoGradGuard no_grad;
  Bucket& b = buckets_[bucket_of_[k]];
  size_t slot = slot_of_[k];
  at::Tensor total = params_[k].grad().defined() ? params_[k].grad() + grad : grad;  // earlier micro-batches too
  b.flat.narrow(0, b.offsets[slot], params_[k].numel()).copy_(total.reshape(-1));
  if (++b.ready == b.members.size()) b.wait = comm_->AllReduceSumAsync(b.flat);
}

void GradientBuckets::Finish() {
  c10::NoGradGuard no_grad;
  if (comm_->world_size() == 1) return;
  for (auto& b : buckets_) {
    if (!b.wait) {  // some parameters got no gradient in the armed pass
      for (size_t slot = 0; slot < b.members.size(); ++slot) {
        size_t k = b.members[slot];
        if (seen_[k]) continue;
        at::Tensor g = params_[k].grad().defined() ? params_[k].grad() : at::zeros_like(params_[k]);
        b.flat.narrow(0, b.offsets[slot], params_[k].numel()).copy_(g.reshape(-1));
      }
      b.wait = comm_->AllReduceSumAsync(b.flat);
    }
  }
  for (auto& b : buckets_) {
    b.wait();
    for (size_t slot = 0; slot < b.members.size(); ++slot) {
      at::Tensor& p = params_[b.members[slot]];
      at::Tensor summed = b.flat.narrow(0, b.offsets[slot], p.numel()).view(p.sizes());
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      p.mutable_grad().copy_(summed);
    }
  }
  armed_ = false;
}

}  // namespace cuda_agent::rl
