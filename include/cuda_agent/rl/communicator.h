// Collective operations between the data-parallel ranks of a training run,
// over LibTorch's c10d (DESIGN.md §7): a TCPStore rendezvous, then Gloo on CPU
// or NCCL on GPUs. One rank alone needs no network at all.
//
//   auto comm = Communicator::FromEnvironment();   // torchrun / Slurm variables
//   comm->AllReduceMean(grads);
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::rl {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: every rank ends with the element-wise mean (sum) over ranks.
  virtual void AllReduceMean(std::vector<at::Tensor>& tensors) = 0;
  virtual void AllReduceSum(std::vector<at::Tensor>& tensors) = 0;
  // Starts an in-place sum of `tensor` over ranks; the returned function waits
  // for it. Lets communication overlap the rest of the backward pass.
  virtual std::function<void()> AllReduceSumAsync(at::Tensor tensor) = 0;
  // In place: every rank ends with `root`'s values.
  virtual void Broadcast(std::vector<at::Tensor>& tensors, int root) = 0;
  virtual void Barrier() = 0;

  // A run of one rank.
  static std::unique_ptr<Communicator> Single();
  // Rendezvous at master_addr:master_port (rank 0 serves the store);
  // backend "gloo" or "nccl".
  static StatusOr<std::unique_ptr<Communicator>> Connect(const std::string& master_addr, int master_port, int rank,
                                                         int world_size, const std::string& backend);
  // From MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (torchrun) or the
  // SLURM_PROCID / SLURM_NTASKS equivalents; Single() when none are set.
  static StatusOr<std::unique_ptr<Communicator>> FromEnvironment(const std::string& backend);
};

// This process's GPU on its node: LOCAL_RANK (torchrun), SLURM_LOCALID or
// RANK, modulo the visible GPUs (0 without any of them).
int LocalDeviceIndex();

}  // namespace cuda_agent::rl
