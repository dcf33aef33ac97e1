// The generator on CUDA: decode steps replayed from CUDA graphs give what the
// uncaptured path and transformers give (make_fixtures.py), in fp32 and bf16.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cuda_agent/model/generate.h"
#include "cuda_agent/util/file.h"
#include "model_fixtures.h"

namespace cuda_agent::model {
namespace {

std::vector<GenerationRequest> GreedyRequests(const std::string& arch, std::vector<std::vector<int32_t>>* expected) {
  auto g = nlohmann::json::parse(ReadFile(ModelFixtureDir() / arch / "greedy.json").value());
  *expected = g["continuations"].get<std::vector<std::vector<int32_t>>>();
  std::vector<GenerationRequest> requests;
  for (const auto& p : g["prompts"].get<std::vector<std::vector<int32_t>>>()) {
    GenerationRequest r;
    r.prompt = p;
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = static_cast<int64_t>(expected->front().size());
    requests.push_back(r);
  }
  return requests;
}

// ATen's decode through graphs; the persistent kernel's steps, launched.
TEST(GeneratorGpuTest, GraphReplaysMatchTransformersGreedy) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  for (std::string arch : {"llama", "qwen2", "qwen3"}) {
    auto model = Transformer::Load(ModelFixtureDir() / arch, {at::kFloat, at::Device("cuda:0")}).value();
    std::vector<std::vector<int32_t>> expected;
    auto requests = GreedyRequests(arch, &expected);
    for (auto kernels : {DecodeKernels::kAten, DecodeKernels::kPersistent}) {
      GeneratorOptions options{/*max_batch=*/2, /*max_seq_len=*/300, 0};  // 3 requests, 2 slots
      options.decode_kernels = kernels;
      Generator gen(*model, nullptr, options);
      auto results = gen.Generate(requests);
      for (size_t i = 0; i < results.size(); ++i)
        EXPECT_EQ(results[i].tokens, expected[i])
            << arch << " kernels " << static_cast<int>(kernels) << " prompt " << i;
      const GeneratorStats& s = gen.stats();
      EXPECT_EQ(s.graph_replays + s.launched_steps, s.decode_steps);
      if (kernels == DecodeKernels::kAten) {
        EXPECT_GT(s.graphs_captured, 0);
        EXPECT_EQ(s.launched_steps, 0);
      } else if (model->DecodesInOneKernel(1, 128, kernels)) {
        EXPECT_GT(s.launched_steps, 0) << arch;
      }
    }
  }
}

TEST(GeneratorGpuTest, Bf16GraphsEqualTheUncapturedDecode) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  auto model = Transformer::Load(ModelFixtureDir() / "qwen3", {at::kBFloat16, at::Device("cuda:0")}).value();
  std::vector<std::vector<int32_t>> unused;
  auto requests = GreedyRequests("qwen3", &unused);
  for (auto& r : requests) r.sampling.max_new_tokens = 40;
  GeneratorOptions with{4, 256, 0};
  with.decode_kernels = DecodeKernels::kAten;  // the persistent kernel's steps are launched either way
  GeneratorOptions without = with;
  without.cuda_graphs = false;
  without.slot_decode = true;  // the same kernels, launched one by one
  auto a = Generator(*model, nullptr, with).Generate(requests);
  auto b = Generator(*model, nullptr, without).Generate(requests);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "prompt " << i;
    EXPECT_EQ(a[i].logprobs, b[i].logprobs) << "prompt " << i;
  }
}

// Steps launched before the last one's tokens are read, their inputs fed on
// the device, through graphs (ATen) or launched (the persistent kernel): the
// transformers tokens, two slots for three requests.
TEST(GeneratorGpuTest, OverlappedGraphStepsMatchTransformersGreedy) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  auto model = Transformer::Load(ModelFixtureDir() / "qwen2", {at::kFloat, at::Device("cuda:0")}).value();
  std::vector<std::vector<int32_t>> expected;
  auto requests = GreedyRequests("qwen2", &expected);
  for (auto kernels : {DecodeKernels::kAten, DecodeKernels::kPersistent}) {
    GeneratorOptions options{/*max_batch=*/2, /*max_seq_len=*/300, 0};
    options.decode_kernels = kernels;
    options.overlap = true;
    Generator gen(*model, nullptr, options);
    auto results = gen.Generate(requests);
    for (size_t i = 0; i < results.size(); ++i)
      EXPECT_EQ(results[i].tokens, expected[i]) << "kernels " << static_cast<int>(kernels) << " prompt " << i;
    EXPECT_TRUE(gen.Idle());
    EXPECT_EQ(gen.stats().graph_replays + gen.stats().launched_steps, gen.stats().decode_steps);
  }
}

}  // namespace
}  // namespace cuda_agent::model
