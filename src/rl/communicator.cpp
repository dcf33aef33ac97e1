#include "cuda_agent/rl/communicator.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef CUDA_AGENT_WITH_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>

namespace cuda_agent::rl {
namespace {

class SingleRank final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void AllReduceMean(std::vector<at::Tensor>&) override {}
  void AllReduceSum(std::vector<at::Tensor>&) override {}
  std::function<void()> AllReduceSumAsync(at::Tensor) override {
    return [] {};
  }
  void Broadcast(std::vector<at::Tensor>&, int) override {}
  void Barrier() override {}
};

class ProcessGroupCommunicator final : public Communicator {
 public:
  ProcessGroupCommunicator(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::Backend> backend, int rank,
                           int world)
      : store_(std::move(store)), backend_(std::move(backend)), rank_(rank), world_(world) {}
  // Releases the backend's resources (NCCL communicators) before the process exits.
  ~ProcessGroupCommunicator() override { backend_->shutdown(); }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  void AllReduceSum(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      backend_->allreduce(one)->wait();
    }
  }
  std::function<void()> AllReduceSumAsync(at::Tensor tensor) override {
    std::vector<at::Tensor> one{std::move(tensor)};
    auto work = backend_->allreduce(one);
    return [work, one] { work->wait(); };
  }
  void AllReduceMean(std::vector<at::Tensor>& tensors) override {
    AllReduceSum(tensors);
    for (auto& t : tensors) t.div_(world_);
  }
  // One collective for the whole list where it shares a dtype and device:
  // flattened on the root, split back into place elsewhere.
  void Broadcast(std::vector<at::Tensor>& tensors, int root) override {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    bool uniform = true;
    int64_t total = 0;
    for (const auto& t : tensors) {
      uniform = uniform && t.scalar_type() == tensors[0].scalar_type() && t.device() == tensors[0].device();
      total += t.numel();
    }
    if (tensors.size() < 2 || !uniform) {
      for (auto& t : tensors) {
        std::vector<at::Tensor> one{t};
        backend_->broadcast(one, options)->wait();
      }
      return;
    }
    std::vector<at::Tensor> flat_parts;
    for (const auto& t : tensors) flat_parts.push_back(t.reshape(-1));
    std::vector<at::Tensor> one{rank_ == root ? at::cat(flat_parts) : at::empty({total}, tensors[0].options())};
    backend_->broadcast(one, options)->wait();
    if (rank_ == root) return;
    std::vector<at::Tensor> parts;
    int64_t offset = 0;
    for (const auto& t : tensors) {
      parts.push_back(one[0].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
    at::_foreach_copy_(tensors, parts);
  }
  void Barrier() override { backend_->barrier()->wait(); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  int rank_, world_;
};

}  // namespace

std::unique_ptr<Communicator> Communicator::Single() { return std::make_unique<SingleRank>(); }

StatusOr<std::unique_ptr<Communicator>> Communicator::Connect(const std::string& master_addr, int master_port, int rank,
                                                              int world_size, const std::string& backend) {
  if (world_size <= 1) return Single();
  if (rank < 0 || rank >= world_size)
    return InvalidArgument("rank " + std::to_string(rank) + " is outside world size " + std::to_string(world_size));
  if (backend != "gloo" && backend != "nccl") return InvalidArgument("backend '" + backend + "' is not gloo or nccl");
#ifndef CUDA_AGENT_WITH_NCCL
  if (backend == "nccl") return FailedPrecondition("this binary was built without NCCL (no nccl.h was found)");
#endif
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(master_port);
    // Under torchrun the agent already serves the store at MASTER_PORT.
    const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
    opts.isServer = rank == 0 && !(agent_store && std::string(agent_store) == "True");
    opts.numWorkers = world_size;
    opts.timeout = std::chrono::seconds(300);
    auto store = c10::make_intrusive<c10d::TCPStore>(master_addr, opts);
#ifdef CUDA_AGENT_WITH_NCCL
    if (backend == "nccl") {  // the caller has selected this rank's GPU (FromEnvironment: LOCAL_RANK)
      auto options = c10d::ProcessGroupNCCL::Options::create();
      auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
      return std::unique_ptr<Communicator>(new ProcessGroupCommunicator(store, group, rank, world_size));
    }
#endif
    auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(300));
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(master_addr));
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
    return std::unique_ptr<Communicator>(new ProcessGroupCommunicator(store, group, rank, world_size));
  } catch (const std::exception& e) {
    return Unavailable("rendezvous at " + master_addr + ":" + std::to_string(master_port) + " as rank " +
                       std::to_string(rank) + " of " + std::to_string(world_size) + " failed: " + e.what());
  }
}

int LocalDeviceIndex() {
  int index = 0;
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID", "RANK"}) {
    const char* v = std::getenv(name);
    if (v && *v) {
      index = std::atoi(v);
      break;
    }
  }
#ifdef CUDA_AGENT_WITH_NCCL
  const int count = c10::cuda::device_count();
  if (count > 0) index %= count;
#endif
  return index;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::FromEnvironment(const std::string& backend) {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  std::string rank = env("RANK"), world = env("WORLD_SIZE");
  if (rank.empty()) rank = env("SLURM_PROCID");
  if (world.empty()) world = env("SLURM_NTASKS");
  if (world.empty() || world == "1") return Single();
  std::string addr = env("MASTER_ADDR"), port = env("MASTER_PORT");
  if (addr.empty() || port.empty())
    return InvalidArgument("WORLD_SIZE=" + world + " but MASTER_ADDR or MASTER_PORT is unset");
  try {
#ifdef CUDA_AGENT_WITH_NCCL
    if (backend == "nccl") {  // one GPU per rank on each node
      if (c10::cuda::device_count() == 0) return FailedPrecondition("backend nccl, but no GPU is visible");
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(LocalDeviceIndex()));
    }
#endif
    return Connect(addr, std::stoi(port), std::stoi(rank), std::stoi(world), backend);
  } catch (const std::exception&) {
    return InvalidArgument("RANK=" + rank + ", WORLD_SIZE=" + world + ", MASTER_PORT=" + port + ": not integers");
  }
}

}  // namespace cuda_agent::rl
