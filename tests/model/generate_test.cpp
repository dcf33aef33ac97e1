// The generator: continuous batching, the KV cache and sampling, checked
// against transformers' greedy decoding and logits (make_fixtures.py).
#include "cuda_agent/model/generate.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "cuda_agent/model/safetensors.h"
#include "cuda_agent/util/file.h"
#include "model_fixtures.h"

namespace cuda_agent::model {
namespace {
using nlohmann::json;

struct Fixture {
  std::unique_ptr<Transformer> model;
  std::vector<std::vector<int32_t>> prompts, continuations;
  at::Tensor expected_logits(int i) const {
    return ReadFixtureTensor(ModelFixtureDir() / "qwen3" / "expected.safetensors", "logits_" + std::to_string(i));
  }
};

Fixture Load(const std::string& arch = "qwen3") {
  Fixture f;
  f.model = Transformer::Load(ModelFixtureDir() / arch, {}).value();
  json g = json::parse(ReadFile(ModelFixtureDir() / arch / "greedy.json").value());
  f.prompts = g["prompts"].get<std::vector<std::vector<int32_t>>>();
  f.continuations = g["continuations"].get<std::vector<std::vector<int32_t>>>();
  return f;
}

GenerationRequest Greedy(const std::vector<int32_t>& prompt, int64_t n) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = n;
  return r;
}

TEST(GeneratorTest, ContinuousBatchingMatchesTransformersGreedy) {
  for (std::string arch : {"llama", "qwen2", "qwen3"}) {
    Fixture f = Load(arch);
    Generator gen(*f.model, nullptr, {/*max_batch=*/2, /*max_seq_len=*/64, 0});  // 3 requests, 2 slots
    std::vector<GenerationRequest> requests;
    for (const auto& p : f.prompts) requests.push_back(Greedy(p, static_cast<int64_t>(f.continuations[0].size())));
    auto results = gen.Generate(requests);
    for (size_t i = 0; i < results.size(); ++i) {
      EXPECT_EQ(results[i].tokens, f.continuations[i]) << arch << " prompt " << i;
      EXPECT_EQ(results[i].finish_reason, "length");
    }
    // All three prompts (lengths 9, 1 and 17) prefilled together, and in chunks of one row.
    for (int64_t chunk : {int64_t{16384}, int64_t{8}}) {
      GeneratorOptions options{4, 64, 0};
      options.prefill_chunk_tokens = chunk;
      Generator together(*f.model, nullptr, options);
      auto again = together.Generate(requests);
      for (size_t i = 0; i < again.size(); ++i)
        EXPECT_EQ(again[i].tokens, f.continuations[i]) << arch << " prompt " << i << " chunk " << chunk;
    }
    // The fixed-shape decode CUDA graphs capture: every slot up to the highest
    // running one, idle rows included, keys up to a multiple of 128 (or all).
    for (int64_t max_seq_len : {int64_t{64}, int64_t{300}}) {
      GeneratorOptions options{4, max_seq_len, 0};
      options.slot_decode = true;
      Generator slotted(*f.model, nullptr, options);
      std::vector<GenerationRequest> spaced = requests;
      spaced.insert(spaced.begin() + 1, Greedy(f.prompts[0], 1));  // frees slot 1 early: an idle row below slot 2
      auto again = slotted.Generate(spaced);
      EXPECT_EQ(again[0].tokens, f.continuations[0]) << arch;
      EXPECT_EQ(again[2].tokens, f.continuations[1]) << arch;
      EXPECT_EQ(again[3].tokens, f.continuations[2]) << arch;
    }
  }
}

// The names the command lines take: each parses to decode kernels that, on
// the CPU, fall back to the ATen step (the transformers tokens); others are
// refused by name.
TEST(GeneratorTest, DecodeKernelsByNameFallBackToAtenOnTheCpu) {
  Fixture f = Load("qwen2");
  std::vector<GenerationRequest> requests;
  for (const auto& p : f.prompts) requests.push_back(Greedy(p, static_cast<int64_t>(f.continuations[0].size())));
  for (const std::string& name : DecodeKernelsNames()) {
    auto kernels = ParseDecodeKernels(name);
    ASSERT_TRUE(kernels.ok()) << name;
    GeneratorOptions options{2, 64, 0};
    options.decode_kernels = *kernels;
    auto results = Generator(*f.model, nullptr, options).Generate(requests);
    for (size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].tokens, f.continuations[i]) << name << " " << i;
  }
  auto bad = ParseDecodeKernels("persistent-folded");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'persistent-folded'"), std::string::npos) << bad.status().message();
}

TEST(GeneratorTest, DecodeOverLeadingSlotsEqualsTheGeneralForward) {
  Fixture f = Load("qwen2");  // grouped-query attention: 2 query heads per key head
  KvCache general = KvCache::Allocate(f.model->config(), 3, 40, at::kFloat, at::kCPU);
  KvCache slotted = KvCache::Allocate(f.model->config(), 3, 40, at::kFloat, at::kCPU);
  at::Tensor ids = at::randint(0, f.model->config().vocab_size, {3, 9}, at::kLong);
  at::Tensor positions = at::arange(9, at::kLong).repeat({3, 1});
  at::Tensor slots = at::arange(3, at::kLong);
  f.model->Forward(ids, positions, &general, slots);
  f.model->Forward(ids, positions, &slotted, slots);
  at::Tensor next = at::randint(0, f.model->config().vocab_size, {3, 1}, at::kLong);
  at::Tensor at_pos = at::tensor(std::vector<int64_t>{9, 4, 9}, at::kLong).view({3, 1});  // row 1 rewinds
  at::Tensor expected = f.model->Forward(next, at_pos, &general, slots).select(1, 0);
  at::Tensor got = f.model->Decode(next, at_pos, slotted, 16);
  EXPECT_LT((got - expected).abs().max().item<double>(), 1e-5);
  for (size_t l = 0; l < general.k.size(); ++l) {
    EXPECT_LT((general.k[l] - slotted.k[l]).abs().max().item<double>(), 1e-5) << "layer " << l;
    EXPECT_LT((general.v[l] - slotted.v[l]).abs().max().item<double>(), 1e-5) << "layer " << l;
  }
}

TEST(GeneratorTest, GreedyLogprobsAreTheModelsLogSoftmax) {
  Fixture f = Load();
  Generator gen(*f.model, nullptr, {4, 64, 0});
  auto r = gen.Generate({Greedy(f.prompts[0], 1)})[0];
  at::Tensor last = f.expected_logits(0)[-1];
  double expected = at::log_softmax(last, -1)[r.tokens[0]].item<double>();
  EXPECT_NEAR(r.logprobs[0], expected, 1e-4);
}

TEST(GeneratorTest, SamplesFollowTheTruncatedDistributionAndReportItsLogprobs) {
  Fixture f = Load();
  at::Tensor probs = at::softmax(f.expected_logits(0)[-1] / 0.7, -1);
  auto [top, top_ids] = probs.topk(5);
  at::Tensor top_probs = top / top.sum();
  std::map<int32_t, double> allowed;
  for (int k = 0; k < 5; ++k) allowed[top_ids[k].item<int32_t>()] = top_probs[k].item<double>();

  Generator gen(*f.model, nullptr, {64, 32, 7});
  GenerationRequest r = Greedy(f.prompts[0], 1);
  r.sampling.temperature = 0.7;
  r.sampling.top_k = 5;
  const int n = 3000;
  auto results = gen.Generate(std::vector<GenerationRequest>(n, r));
  std::map<int32_t, int> counts;
  for (const auto& res : results) {
    int32_t t = res.tokens[0];
    ASSERT_TRUE(allowed.count(t)) << "token " << t << " is outside the top 5";
    EXPECT_NEAR(res.logprobs[0], std::log(allowed[t]), 1e-4);
    ++counts[t];
  }
  for (const auto& [t, p] : allowed)  // 4.5 sigma of a binomial with n = 3000
    EXPECT_NEAR(counts[t] / double(n), p, 4.5 * std::sqrt(p * (1 - p) / n) + 1e-3) << "token " << t;
}

TEST(GeneratorTest, UntruncatedSamplesFollowTheTemperedSoftmax) {  // the sort-free path
  Fixture f = Load();
  at::Tensor probs = at::softmax(f.expected_logits(0)[-1] / 0.7, -1);
  Generator gen(*f.model, nullptr, {64, 32, 7});
  GenerationRequest r = Greedy(f.prompts[0], 1);
  r.sampling.temperature = 0.7;
  const int n = 3000;
  auto results = gen.Generate(std::vector<GenerationRequest>(n, r));
  std::map<int32_t, int> counts;
  for (const auto& res : results) {
    EXPECT_NEAR(res.logprobs[0], std::log(probs[res.tokens[0]].item<double>()), 1e-4);
    ++counts[res.tokens[0]];
  }
  auto [top, top_ids] = probs.topk(5);
  for (int k = 0; k < 5; ++k) {
    double p = top[k].item<double>();
    EXPECT_NEAR(counts[top_ids[k].item<int32_t>()] / double(n), p, 4.5 * std::sqrt(p * (1 - p) / n) + 1e-3)
        << "rank " << k;
  }
}

TEST(GeneratorTest, TinyTopPOrTopOneIsGreedy) {
  Fixture f = Load();
  Generator gen(*f.model, nullptr, {4, 64, 3});
  GenerationRequest a = Greedy(f.prompts[2], 12), b = a;
  a.sampling.temperature = 1.0;
  a.sampling.top_p = 1e-9;
  b.sampling.temperature = 1.3;
  b.sampling.top_k = 1;
  auto results = gen.Generate({a, b});
  EXPECT_EQ(results[0].tokens, f.continuations[2]);
  EXPECT_EQ(results[1].tokens, f.continuations[2]);
  EXPECT_NEAR(results[1].logprobs[3], 0.0, 1e-6);  // one candidate: probability 1
}

TEST(GeneratorTest, ANextTurnReusesItsCachedPrefix) {
  Fixture f = Load();
  Generator gen(*f.model, nullptr, {2, 64, 0});
  GenerationRequest first = Greedy(f.prompts[0], 6);
  first.cache_key = "trajectory-1";
  auto a = gen.Generate({first})[0];
  // Another trajectory runs meanwhile; it must not take trajectory-1's slot.
  GenerationRequest other = Greedy(f.prompts[1], 3);
  other.cache_key = "trajectory-2";
  gen.Generate({other});
  GenerationRequest next = first;
  next.prompt.insert(next.prompt.end(), a.tokens.begin(), a.tokens.end());
  for (int32_t t : {5, 6, 7}) next.prompt.push_back(t);  // the tool's answer
  GenerationRequest newcomer = Greedy(f.prompts[2], 6);  // prefilled in the same batch
  auto both = gen.Generate({next, newcomer});
  const auto& b = both[0];
  EXPECT_EQ(b.reused_prefix, static_cast<int64_t>(f.prompts[0].size() + a.tokens.size() - 1));
  Generator fresh(*f.model, nullptr, {1, 64, 0});
  EXPECT_EQ(b.tokens, fresh.Generate({next})[0].tokens);
  EXPECT_EQ(both[1].tokens, std::vector<int32_t>(f.continuations[2].begin(), f.continuations[2].begin() + 6));
}

TEST(GeneratorTest, StopTokensStopStringsAndLimitsEndSequences) {
  Fixture f = Load();
  auto tok = tokenizer::Tokenizer::Load(ModelFixtureDir() / "qwen3").value();
  Generator gen(*f.model, tok, {4, 16, 0});
  const auto& cont = f.continuations[0];
  GenerationRequest stop_token = Greedy(f.prompts[0], 12);
  stop_token.sampling.stop_token_ids = {cont[2]};
  GenerationRequest stop_string = Greedy(f.prompts[0], 12);
  stop_string.sampling.stop_strings = {tok->Decode({cont[1], cont[2]})};
  GenerationRequest context = Greedy(f.prompts[0], 100);  // 9 prompt tokens, 16 in all
  GenerationRequest too_long = Greedy(std::vector<int32_t>(16, 3), 4);
  auto r = gen.Generate({stop_token, stop_string, context, too_long});
  size_t first = std::find(cont.begin(), cont.end(), cont[2]) - cont.begin();
  EXPECT_EQ(r[0].finish_reason, "stop_token");
  EXPECT_EQ(r[0].tokens.size(), first + 1);
  EXPECT_EQ(r[1].finish_reason, "stop_string");
  EXPECT_LE(r[1].tokens.size(), 3u);
  EXPECT_EQ(r[2].finish_reason, "context");
  EXPECT_EQ(r[2].tokens.size(), 16u - f.prompts[0].size());
  EXPECT_EQ(r[3].finish_reason, "context");
  EXPECT_TRUE(r[3].tokens.empty());
}

// Overlapped steps (each launched before the last one's tokens are read)
// give what plain steps give: through continuous batching with admissions,
// stop tokens and strings, the length and context limits, and a next turn
// whose prefix is cached (one token more of it: the first turn's last token
// was fed to a step launched before its sequence was seen to end).
TEST(GeneratorTest, OverlappedStepsGiveWhatPlainStepsGive) {
  Fixture f = Load();
  auto tok = tokenizer::Tokenizer::Load(ModelFixtureDir() / "qwen3").value();
  const auto& cont = f.continuations[0];
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < f.prompts.size(); ++i) requests.push_back(Greedy(f.prompts[i], 4 + 3 * i));
  requests.push_back(Greedy(f.prompts[0], 1));  // ends at its prefill
  requests.push_back(Greedy(f.prompts[0], 12));
  requests.back().sampling.stop_token_ids = {cont[2]};
  requests.push_back(Greedy(f.prompts[0], 12));
  requests.back().sampling.stop_strings = {tok->Decode({cont[1], cont[2]})};
  requests.push_back(Greedy(f.prompts[0], 100));               // up to the context limit
  requests.push_back(Greedy(std::vector<int32_t>(40, 3), 4));  // too long
  requests.push_back(Greedy(f.prompts[1], 8));
  requests.back().sampling.temperature = 0.9;  // drawn: the streams differ, the lengths not
  for (int64_t max_batch : {int64_t{2}, int64_t{4}}) {
    GeneratorOptions plain{max_batch, 40, 0};
    plain.slot_decode = true;
    plain.overlap = false;
    GeneratorOptions overlapped = plain;
    overlapped.overlap = true;
    Generator a(*f.model, tok, plain), b(*f.model, tok, overlapped);
    auto want = a.Generate(requests);
    auto got = b.Generate(requests);
    EXPECT_TRUE(b.Idle());
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string what = "batch " + std::to_string(max_batch) + " request " + std::to_string(i);
      EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << what;
      ASSERT_EQ(got[i].tokens.size(), want[i].tokens.size()) << what;
      if (requests[i].sampling.temperature > 0) continue;
      EXPECT_EQ(got[i].tokens, want[i].tokens) << what;
      for (size_t t = 0; t < got[i].tokens.size(); ++t) EXPECT_NEAR(got[i].logprobs[t], want[i].logprobs[t], 1e-4);
    }
    EXPECT_EQ(b.stats().generated_tokens, a.stats().generated_tokens);
    // Only overlapped steps are timed; on the CPU nothing waits for a device.
    EXPECT_GT(b.stats().host_launch_s, 0.0);
    EXPECT_EQ(b.stats().host_wait_s, 0.0);
    EXPECT_EQ(a.stats().host_launch_s, 0.0);
    GenerationRequest first = Greedy(f.prompts[0], 6);
    first.cache_key = "trajectory";
    const int64_t a_steps = a.stats().decode_steps, b_steps = b.stats().decode_steps;
    auto turn = b.Generate({first})[0];
    EXPECT_EQ(turn.tokens, a.Generate({first})[0].tokens);
    // One step more: launched for the token that ended the sequence.
    EXPECT_EQ(b.stats().decode_steps - b_steps, a.stats().decode_steps - a_steps + 1);
    GenerationRequest next = first;
    next.prompt.insert(next.prompt.end(), turn.tokens.begin(), turn.tokens.end());
    next.prompt.push_back(5);
    const auto n = static_cast<int64_t>(next.prompt.size());
    auto plain_next = a.Generate({next})[0], overlapped_next = b.Generate({next})[0];
    EXPECT_EQ(plain_next.reused_prefix, n - 2);  // the first turn's last token was never fed
    EXPECT_EQ(overlapped_next.reused_prefix, n - 1);
    EXPECT_EQ(overlapped_next.tokens, plain_next.tokens);
  }
}

}  // namespace
}  // namespace cuda_agent::model
