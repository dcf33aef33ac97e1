// Data-parallel gradient reduction overlapped with the backward pass: the
// parameters are grouped into buckets of about `bucket_mb` MiB in reverse order
// (the order backward produces their gradients); once every gradient of a
// bucket has arrived during an armed backward pass, its sum over ranks starts
// while backward goes on. Finish() waits for all of them and writes the summed
// gradients into the parameters' .grad.
//
// Arm only the last micro-batch of an optimizer step: earlier micro-batches
// accumulate locally, and the hook adds what is already in .grad.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "cuda_agent/rl/communicator.h"

namespace cuda_agent::rl {

class GradientBuckets {
 public:
  GradientBuckets(const std::vector<at::Tensor>& params, Communicator* comm, double bucket_mb = 25);
  ~GradientBuckets();  // removes its hooks from the parameters
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;
  // The next backward pass reduces as it goes.
  void Arm();
  // Waits for every bucket and installs the summed gradients. Reduces now
  // whatever the armed pass did not produce (parameters it did not reach).
  void Finish();

 private:
  struct Bucket {
    std::vector<size_t> members;  // parameter indices
    at::Tensor flat;              // concatenation of their gradients (the parameters' dtype)
    std::vector<int64_t> offsets;
    size_t ready = 0;
    std::function<void()> wait;
  };
  void OnGradient(size_t param, const at::Tensor& grad);

  std::vector<at::Tensor> params_;
  Communicator* comm_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;  // parameter -> its bucket, its index among the members
  std::vector<bool> seen_;
  std::vector<unsigned> hooks_;
  bool armed_ = false;
};

}  // namespace cuda_agent::rl
