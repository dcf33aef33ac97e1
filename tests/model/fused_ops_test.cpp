// The fused ops' CPU paths (fused_ops.h), which the generator takes off
// CUDA; their CUDA kernels are checked against these in
// fused_ops_gpu_test.cpp.
#include "cuda_agent/model/fused_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace cuda_agent::model {
namespace {

// The staged rows' first `rows` columns, then the fed slots' ids from the
// picks; the other columns left as they were.
TEST(FusedOpsTest, StageDecodeInputsCopiesTheRowsAndFeedsThePicks) {
  at::Tensor picks = at::tensor({11.f, 22.f, 33.f, -0.5f, -1.5f, -2.5f}).view({2, 3});
  at::Tensor staging = at::tensor({5, 0, 0, 8,  // ids; slots 1 and 2 fed
                                   3, 4, 5, 8,  // positions
                                   2, 1, 0, 8,  // fed slots
                                   0, 2, 0, 8,  // their picks' rows
                                   0, 1, 2, 8},
                                  at::kLong)
                           .view({5, 4});
  at::Tensor inputs = at::full({5, 4}, -7, at::kLong);
  StageDecodeInputs(staging, 3, picks, 2, inputs);
  at::Tensor expected = staging.clone();
  expected[0] = at::tensor({5, 33, 11, -7}, at::kLong);
  expected.select(1, 3).fill_(-7);
  EXPECT_TRUE(at::equal(inputs, expected)) << inputs;
}

TEST(FusedOpsTest, StageDecodeInputsNamesWhatIsWrong) {
  at::Tensor staging = at::zeros({5, 4}, at::kLong), inputs = at::zeros({5, 4}, at::kLong);
  try {
    StageDecodeInputs(staging, 3, at::Tensor(), 1, inputs);  // a token to feed, no picks
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("StageDecodeInputs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fed 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(StageDecodeInputs(staging, 5, at::Tensor(), 0, inputs), c10::Error);  // rows past the columns
}

TEST(FusedOpsTest, CopyToPinnedCopiesOnTheCpu) {
  at::Tensor src = at::randn({2, 5}), dst = at::zeros({2, 5});
  CopyToPinned(src, dst);
  EXPECT_TRUE(at::equal(src, dst));
  at::Tensor wrong = at::zeros({2, 4});
  EXPECT_THROW(CopyToPinned(src, wrong), c10::Error);
}

}  // namespace
}  // namespace cuda_agent::model
