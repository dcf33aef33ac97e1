// Loading tasks and candidates: bad inputs give errors that name the file.
#include <gtest/gtest.h>

#include <filesystem>

#include "cuda_agent/kernel_eval/candidate.h"
#include "cuda_agent/kernel_eval/task.h"

namespace cuda_agent::kernel_eval {
namespace {
namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(CUDA_AGENT_TEST_FIXTURES) / "kernel_eval" / "fixtures";

TEST(TaskTest, LoadsAKernelBenchTask) {
  auto t = LoadTask(kFixtures / "tasks" / "relu.py");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->name, "relu");
  EXPECT_EQ(t->hash.size(), 64u);
}

TEST(TaskTest, BadTasksNameTheFileAndTheProblem) {
  auto none = LoadTask(kFixtures / "tasks" / "no_model.py");
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no_model.py defines no class Model"), std::string::npos);
  EXPECT_NE(LoadTask("/nonexistent/task.py").status().message().find("is not a file"), std::string::npos);
  EXPECT_NE(LoadTask(kFixtures / "cheats").status().message().find("is not a file"), std::string::npos);
}

TEST(CandidateTest, RecognisesBothFormats) {
  auto kb = LoadCandidate(kFixtures / "cpu" / "relu_ok.py");
  ASSERT_TRUE(kb.ok());
  EXPECT_EQ(kb->kind, CandidateKind::kKernelBench);
  EXPECT_EQ(kb->module_name, "relu_ok.py");
  auto ws = LoadCandidate(kFixtures / "cpu" / "row_sum_ws");
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  EXPECT_EQ(ws->kind, CandidateKind::kWorkspace);
  EXPECT_EQ(ws->module_name, "model_new.py");
  EXPECT_NE(kb->hash, ws->hash);
}

TEST(CandidateTest, RefusesSymlinksAndMissingModel) {
  fs::path dir = fs::temp_directory_path() / "candidate-test";
  fs::remove_all(dir);
  fs::create_directories(dir / "kernels");
  EXPECT_NE(LoadCandidate(dir).status().message().find("has no model_new.py"), std::string::npos);
  fs::copy_file(kFixtures / "cpu" / "relu_ok.py", dir / "model_new.py");
  fs::create_symlink("/etc/shadow", dir / "kernels" / "x.cpp");
  EXPECT_NE(LoadCandidate(dir).status().message().find("is a symlink"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cuda_agent::kernel_eval
