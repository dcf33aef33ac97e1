// The judge on the cuda backend (label gpu): skipped where no GPU is visible.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cuda_agent/config/config.h"
#include "cuda_agent/kernel_eval/judge.h"

namespace cuda_agent::kernel_eval {
namespace {
namespace fs = std::filesystem;
// The bundled examples of data/examples are the GPU fixtures.
const fs::path kExamples = fs::path(CUDA_AGENT_TEST_FIXTURES).parent_path() / "data" / "examples";

struct GpuCase {
  const char* name;
  const char* task;
  const char* candidate;
  Outcome outcome;
};
void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.candidate; }

class JudgeGpuTest : public ::testing::TestWithParam<GpuCase> {
 protected:
  void SetUp() override {
    if (!fs::exists("/dev/nvidia0")) GTEST_SKIP() << "no GPU on this host";
    if (::geteuid() != 0) GTEST_SKIP() << "the judge's sandbox needs root";
  }
};

TEST_P(JudgeGpuTest, Verdict) {
  const GpuCase& c = GetParam();
  auto config = config::LoadConfig(
      "", {"judge.backend=cuda", std::string("judge.cache_dir=") + CUDA_AGENT_TEST_CACHE, "sandbox.allow_weaker=true"});
  ASSERT_TRUE(config.ok());
  auto judge = Judge::Create(config->judge, config->sandbox);
  ASSERT_TRUE(judge.ok()) << judge.status().ToString();
  auto task = LoadTask(kExamples / "tasks" / (std::string(c.task) + ".py"));
  auto cand = LoadCandidate(kExamples / c.candidate);
  ASSERT_TRUE(task.ok() && cand.ok());
  auto v = (*judge)->Evaluate(*task, *cand);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->outcome, c.outcome) << v->ToJson().dump(1);
  if (c.outcome == Outcome::kOk) {
    EXPECT_GT(v->candidate.median_ms, 0);
    EXPECT_GE(v->reward, 1);
  }
  std::cout << c.name << ": " << v->Summary();
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, JudgeGpuTest,
    ::testing::Values(GpuCase{"KernelBenchHonest", "relu_large", "cuda/relu_kernelbench.py", Outcome::kOk},
                      GpuCase{"WorkspaceHonest", "relu_large", "cuda/relu_workspace", Outcome::kOk},
                      GpuCase{"KernelBenchWrong", "relu_large", "cuda/relu_wrong.py", Outcome::kIncorrect},
                      GpuCase{"WorkspaceWrong", "relu_large", "cuda/relu_workspace_wrong", Outcome::kIncorrect},
                      GpuCase{"KernelBenchCheat", "relu_large", "cuda/relu_cheat.py", Outcome::kForbidden},
                      GpuCase{"WorkspaceCheat", "relu_large", "cuda/relu_workspace_cheat", Outcome::kForbidden}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cuda_agent::kernel_eval
