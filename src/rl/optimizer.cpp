#include "cuda_agent/rl/optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "cuda_agent/model/safetensors.h"

namespace cuda_agent::rl {

AdamW::AdamW(std::vector<at::Tensor> params, const OptimizerConfig& config, Communicator* comm)
    : params_(std::move(params)), config_(config), comm_(comm) {
  const int rank = comm_ ? comm_->rank() : 0;
  const int world = comm_ && config_.shard_state ? comm_->world_size() : 1;  // unsharded: as if alone
  // Greedy balance: each parameter, largest first, to the least loaded rank.
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  owner_.assign(params_.size(), rank);
  for (size_t i : order) {
    if (world == 1) break;
    int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner_[i] = r;
    load[static_cast<size_t>(r)] += params_[i].numel();
  }
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    if (owner_[i] != rank) {
      master_.emplace_back();
      exp_avg_.emplace_back();
      exp_avg_sq_.emplace_back();
      state_step_.emplace_back();
      continue;
    }
    master_.push_back(p.scalar_type() == at::kFloat ? p.detach() : p.detach().to(at::kFloat).clone());
    exp_avg_.push_back(at::zeros_like(master_.back()));
    exp_avg_sq_.push_back(at::zeros_like(master_.back()));
    state_step_.push_back(at::zeros({}, master_.back().options()));
  }
}

double AdamW::LearningRate(int64_t step) const {
  if (config_.warmup_steps > 0 && step < config_.warmup_steps)
    return config_.lr * static_cast<double>(step + 1) / static_cast<double>(config_.warmup_steps);
  if (config_.schedule != "cosine") return config_.lr;
  double span = std::max<double>(1.0, static_cast<double>(config_.total_steps - config_.warmup_steps));
  double progress = std::min(1.0, static_cast<double>(step - config_.warmup_steps) / span);
  double min_lr = config_.lr * config_.min_lr_ratio;
  return min_lr + 0.5 * (config_.lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

double AdamW::Step() {
  c10::NoGradGuard no_grad;
  const int rank = comm_ ? comm_->rank() : 0;
  // The global norm over every gradient (identical on all ranks: gradients are averaged).
  std::vector<at::Tensor> grads;
  for (auto& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    grads.push_back(p.grad());
  }
  // One multi-tensor kernel and one host read for the whole model.
  double norm = at::stack(at::_foreach_norm(grads, 2, at::kFloat)).norm().item<double>();
  double clip = config_.max_grad_norm > 0 && norm > config_.max_grad_norm ? config_.max_grad_norm / (norm + 1e-6) : 1.0;

  std::vector<at::Tensor> self, g32, m, v, steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owner_[i] != rank) continue;
    self.push_back(master_[i]);
    g32.push_back(grads[i].to(at::kFloat).contiguous());  // may alias the gradient, which is zeroed below
    m.push_back(exp_avg_[i]);
    v.push_back(exp_avg_sq_[i]);
    steps.push_back(state_step_[i]);
  }
  if (!self.empty()) {
    if (clip != 1.0) at::_foreach_mul_(g32, clip);
    at::_foreach_add_(steps, 1);  // the kernel reads the already-incremented step, as torch.optim does
    at::_fused_adamw_(self, g32, m, v, {}, steps, LearningRate(step_), config_.beta1, config_.beta2,
                      config_.weight_decay, config_.eps, false, false);
  }
  std::vector<at::Tensor> weights, masters;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owner_[i] != rank || master_[i].data_ptr() == params_[i].data_ptr()) continue;
    weights.push_back(params_[i]);
    masters.push_back(master_[i]);
  }
  if (!weights.empty()) at::_foreach_copy_(weights, masters);
  at::_foreach_zero_(grads);
  if (comm_ != nullptr && comm_->world_size() > 1 && config_.shard_state) {
    for (int r = 0; r < comm_->world_size(); ++r) {
      std::vector<at::Tensor> owned;
      for (size_t i = 0; i < params_.size(); ++i)
        if (owner_[i] == r) owned.push_back(params_[i]);
      comm_->Broadcast(owned, r);
    }
  }
  ++step_;
  return norm;
}

Status AdamW::Save(const std::filesystem::path& file) const {
  std::vector<model::TensorBytes> tensors;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    at::Tensor host = t.detach().to(at::kCPU, at::kFloat).contiguous();
    tensors.push_back({name, "F32", host.sizes().vec(),
                       std::string(static_cast<const char*>(host.data_ptr()), host.nbytes())});
  };
  add("global_step", at::tensor({static_cast<float>(step_)}));
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    std::string k = std::to_string(i);
    add("master." + k, master_[i]);
    add("exp_avg." + k, exp_avg_[i]);
    add("exp_avg_sq." + k, exp_avg_sq_[i]);
    add("step." + k, state_step_[i]);
  }
  return model::WriteSafetensors(file, tensors,
                                 {{"step", std::to_string(step_)},
                                  {"world_size", std::to_string(comm_ ? comm_->world_size() : 1)},
                                  {"parameters", std::to_string(params_.size())}});
}

Status AdamW::Load(const std::filesystem::path& file) {
  CA_ASSIGN_OR_RETURN(auto reader, model::SafetensorsReader::Open(file));
  c10::NoGradGuard no_grad;
  CA_ASSIGN_OR_RETURN(model::TensorView global_step, reader->Get("global_step"));
  step_ = static_cast<int64_t>(*static_cast<const float*>(global_step.data));
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    std::string k = std::to_string(i);
    for (auto [name, target] : {std::pair<std::string, at::Tensor*>{"master." + k, &master_[i]},
                                {"exp_avg." + k, &exp_avg_[i]},
                                {"exp_avg_sq." + k, &exp_avg_sq_[i]},
                                {"step." + k, &state_step_[i]}}) {
      CA_ASSIGN_OR_RETURN(model::TensorView v, reader->Get(name));
      if (v.shape != target->sizes().vec())
        return InvalidArgument(file.string() + ": " + name + " does not match the parameter's shape");
      target->copy_(at::from_blob(const_cast<void*>(v.data), v.shape, at::kFloat));
    }
    if (master_[i].data_ptr() != params_[i].data_ptr()) params_[i].copy_(master_[i]);
  }
  return Status::Ok();
}

}  // namespace cuda_agent::rl
