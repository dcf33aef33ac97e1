// Data parallelism over NCCL: two GPUs, each with half of the global batch,
// end with the same parameters as one GPU with the whole batch.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

#include "distributed_fixture.h"

namespace cuda_agent::rl {
namespace {
using namespace testing_fixture;

TEST(DistributedGpuTest, TwoNcclRanksMatchOneGpuOnTheWholeBatch) {
  if (!at::hasCUDA() || c10::cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  const int kSteps = 3;
  const c10::Device first("cuda:0");
  Replica single(nullptr, Opt(), first);
  RolloutBatch full = Batch().To(first);
  for (int s = 0; s < kSteps; ++s) {
    single.learner->ComputeAdvantages(full);
    single.learner->Update(full);
  }
  std::vector<std::unique_ptr<Replica>> ranks(2);
  RolloutBatch shared = Batch();
  OnTwoRanks(
      [&](int r, Communicator* comm) {
        const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(r));
        ranks[r] = std::make_unique<Replica>(comm, Opt(), device);
        RolloutBatch half = shared.Slice(4 * r, 4).To(device);
        for (int s = 0; s < kSteps; ++s) {
          ranks[r]->learner->ComputeAdvantages(half);
          ranks[r]->learner->Update(half);
        }
      },
      "nccl", [](int r) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(r)); });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(MaxDiff(*ranks[r]->policy, *single.policy), 1e-5) << "rank " << r << " policy";
    EXPECT_LT(MaxDiff(*ranks[r]->critic, *single.critic), 1e-5) << "rank " << r << " critic";
  }
}

}  // namespace
}  // namespace cuda_agent::rl
