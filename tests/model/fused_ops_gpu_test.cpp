// The fused CUDA kernels (model/fused_ops.h) against the same expressions in
// fp64 on the CPU: values and gradients, on packed and unpacked row widths,
// and a whole model's parameter gradients on the GPU against the CPU.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "cuda_agent/model/fused_ops.h"
#include "cuda_agent/model/generate.h"
#include "cuda_agent/model/transformer.h"

namespace cuda_agent::model {
namespace {

const at::Device kGpu("cuda:0");

void ExpectNear(const at::Tensor& got, const at::Tensor& want, double atol, double rtol, const std::string& what) {
  at::Tensor g = got.detach().to(at::kCPU, at::kDouble), w = want.detach().to(at::kCPU, at::kDouble);
  ASSERT_EQ(g.sizes(), w.sizes()) << what;
  double excess = ((g - w).abs() - rtol * w.abs()).max().item<double>();
  EXPECT_LE(excess, atol) << what << ": max |got - want| = " << (g - w).abs().max().item<double>();
}

TEST(FusedOpsGpuTest, TokenLogprobsMatchFp64WithGradients) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  ASSERT_TRUE(HaveFusedKernels());
  at::manual_seed(0);
  // 4096 rows take the packed loads; 1003 the element-wise ones.
  for (int64_t vocab : {4096, 1003}) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      const int64_t rows = 37;
      at::Tensor logits = (at::randn({rows, vocab}) * 4).to(dtype);  // the values both sides see
      logits.select(0, 3).fill_(-1e4);                                // a flat row: entropy log V
      at::Tensor targets = at::randint(0, vocab, {rows}, at::kLong);
      at::Tensor gl = at::randn({rows}), ge = at::randn({rows});

      at::Tensor ref_in = logits.to(at::kDouble).requires_grad_(true);
      at::Tensor lp = at::log_softmax(ref_in, -1);
      at::Tensor ref_logp = lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), ref_ent = -(lp.exp() * lp).sum(-1);
      ((ref_logp * gl.to(at::kDouble)).sum() + (ref_ent * ge.to(at::kDouble)).sum()).backward();

      at::Tensor in = logits.to(kGpu).requires_grad_(true);
      TokenLogprobs out = ComputeTokenLogprobs(in, targets.to(kGpu));
      ASSERT_EQ(out.logprobs.scalar_type(), at::kFloat);
      ((out.logprobs * gl.to(kGpu)).sum() + (out.entropy * ge.to(kGpu)).sum()).backward();
      std::string what = std::string(c10::toString(dtype)) + " vocab " + std::to_string(vocab);
      ExpectNear(out.logprobs, ref_logp, 2e-5, 1e-6, what + " logprobs");
      ExpectNear(out.entropy, ref_ent, 2e-5, 1e-6, what + " entropy");
      ASSERT_EQ(in.grad().scalar_type(), dtype);
      // The gradient is rounded once to the logits' dtype.
      const double rtol = dtype == at::kFloat ? 1e-5 : 8e-3;
      ExpectNear(in.grad(), ref_in.grad(), 1e-6, rtol, what + " gradient");

      // Only the logprobs carry a gradient (the learner's usual case).
      at::Tensor in2 = logits.to(kGpu).requires_grad_(true);
      (ComputeTokenLogprobs(in2, targets.to(kGpu)).logprobs * gl.to(kGpu)).sum().backward();
      at::Tensor ref2 = logits.to(at::kDouble).requires_grad_(true);
      (at::log_softmax(ref2, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1) * gl.to(at::kDouble))
          .sum()
          .backward();
      ExpectNear(in2.grad(), ref2.grad(), 1e-6, rtol, what + " logprob-only gradient");
    }
  }
}

TEST(FusedOpsGpuTest, RotaryAndSwiGluMatchTheirExpressions) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  at::manual_seed(1);
  const int64_t B = 2, T = 5, H = 3, D = 16;
  at::Tensor x = at::randn({B, T, H, D}, at::kDouble), g = at::randn({B, T, H, D}, at::kDouble);
  at::Tensor angle = at::randn({B, T, 1, D / 2}, at::kDouble);
  at::Tensor cos = at::cat({angle.cos(), angle.cos()}, -1), sin = at::cat({angle.sin(), angle.sin()}, -1);
  at::Tensor xr = x.clone().requires_grad_(true);
  at::Tensor rotated = at::cat({-xr.narrow(-1, D / 2, D / 2), xr.narrow(-1, 0, D / 2)}, -1);
  at::Tensor want = xr * cos + rotated * sin;
  (want * g).sum().backward();
  at::Tensor xg = x.to(kGpu, at::kFloat).requires_grad_(true);
  at::Tensor got = ApplyRotary(xg, cos.to(kGpu, at::kFloat), sin.to(kGpu, at::kFloat));
  (got * g.to(kGpu, at::kFloat)).sum().backward();
  ExpectNear(got, want, 1e-5, 1e-5, "rotary");
  ExpectNear(xg.grad(), xr.grad(), 1e-5, 1e-5, "rotary gradient");
  // Tables broadcast over the batch, as a decode over shared positions passes them.
  at::Tensor one = ApplyRotary(xg.detach(), cos.narrow(0, 0, 1).to(kGpu, at::kFloat),
                               sin.narrow(0, 0, 1).to(kGpu, at::kFloat));
  at::Tensor x0 = x.narrow(0, 0, 1);
  at::Tensor want0 = x0 * cos.narrow(0, 0, 1) +
                     at::cat({-x0.narrow(-1, D / 2, D / 2), x0.narrow(-1, 0, D / 2)}, -1) * sin.narrow(0, 0, 1);
  ExpectNear(one.narrow(0, 0, 1), want0, 1e-5, 1e-5, "rotary with broadcast tables");

  // 7 x 33 elements go one by one, 4 x 64 in packs.
  for (auto shape : {std::vector<int64_t>{7, 33}, std::vector<int64_t>{4, 64}}) {
    at::Tensor gate = at::randn(shape, at::kDouble) * 3, up = at::randn(shape, at::kDouble);
    at::Tensor go = at::randn(shape, at::kDouble);
    at::Tensor gr = gate.clone().requires_grad_(true), ur = up.clone().requires_grad_(true);
    at::Tensor want_s = at::silu(gr) * ur;
    (want_s * go).sum().backward();
    at::Tensor gg = gate.to(kGpu, at::kFloat).requires_grad_(true);
    at::Tensor ug = up.to(kGpu, at::kFloat).requires_grad_(true);
    at::Tensor got_s = SwiGlu(gg, ug);
    (got_s * go.to(kGpu, at::kFloat)).sum().backward();
    std::string what = "swiglu " + std::to_string(shape[1]);
    ExpectNear(got_s, want_s, 1e-5, 1e-5, what);
    ExpectNear(gg.grad(), gr.grad(), 1e-5, 1e-5, what + " gate gradient");
    ExpectNear(ug.grad(), ur.grad(), 1e-5, 1e-5, what + " up gradient");
  }
}

// A Qwen3-shaped model (q/k norms, an odd vocabulary): every parameter's
// gradient of logprobs + entropy on the GPU (fused kernels) equals the CPU's.
TEST(FusedOpsGpuTest, ModelGradientsOnTheGpuEqualTheCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  nlohmann::json cfg = {{"model_type", "qwen3"},        {"vocab_size", 1003},     {"hidden_size", 128},
                        {"intermediate_size", 256},     {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},     {"head_dim", 32},         {"max_position_embeddings", 512},
                        {"tie_word_embeddings", false}, {"rope_theta", 10000.0}};
  ModelConfig config = ParseModelConfig(cfg, "qwen3-test").value();
  auto cpu = Transformer::Random(config, {at::kFloat, at::kCPU, false}, 3);
  auto gpu = Transformer::Random(config, {at::kFloat, kGpu, false}, 4);
  {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < cpu->parameters().size(); ++i)
      gpu->parameters()[i].second.copy_(cpu->parameters()[i].second);
  }
  at::Tensor tokens = at::randint(0, config.vocab_size, {2, 24}, at::kLong);
  at::Tensor positions = at::arange(24, at::kLong).expand({2, 24});
  auto loss = [&](Transformer& m, c10::Device d) {
    for (const auto& [name, p] : m.parameters()) p.set_requires_grad(true);
    at::Tensor t = tokens.to(d);
    at::Tensor logits = m.Forward(t, positions.to(d)).reshape({48, config.vocab_size});
    TokenLogprobs out = ComputeTokenLogprobs(logits, t.roll(-1, 1).reshape({48}));
    (out.logprobs.sum() + 0.5 * out.entropy.sum()).backward();
  };
  loss(*cpu, at::kCPU);
  loss(*gpu, kGpu);
  for (size_t i = 0; i < cpu->parameters().size(); ++i) {
    const auto& [name, p] = cpu->parameters()[i];
    double scale = p.grad().abs().max().item<double>();
    ExpectNear(gpu->parameters()[i].second.grad(), p.grad(), 1e-4 * scale, 1e-4, name);
  }
}

// Models whose attention fits the fused decode kernels (head_dim 64 or 128):
// Llama (q/k/v/o and MLP biases, made non-zero by RandomizeBiases; group 4),
// Qwen2 (q/k/v biases; group 7 as Qwen2.5-0.5B),
// Qwen3 (q/k norms, head_dim 128, untied head).
std::vector<nlohmann::json> FusedDecodeShapes() {
  nlohmann::json base = {{"vocab_size", 1003},       {"hidden_size", 256},     {"intermediate_size", 344},
                         {"num_hidden_layers", 2},   {"max_position_embeddings", 512},
                         {"rope_theta", 10000.0},    {"tie_word_embeddings", true}};
  nlohmann::json llama = base, qwen2 = base, qwen3 = base;
  llama.update({{"model_type", "llama"}, {"num_attention_heads", 4}, {"num_key_value_heads", 1}, {"mlp_bias", true},
                {"attention_bias", true}});
  qwen2.update({{"model_type", "qwen2"}, {"hidden_size", 448}, {"num_attention_heads", 7},
                {"num_key_value_heads", 1}});
  qwen3.update({{"model_type", "qwen3"}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                {"head_dim", 128}, {"tie_word_embeddings", false}});
  // Qwen3's q/k norms with heads of 64, which the persistent kernel's
  // o-projection blocks take at batch 1 (AttendHead).
  nlohmann::json qwen3_64 = qwen3;
  qwen3_64.update({{"num_key_value_heads", 1}, {"head_dim", 64}});
  // Wide enough that the persistent kernel's folded down projection takes
  // several tiles (on an H200: 8 of 256 rows by 32 columns a block).
  nlohmann::json wide = llama;
  wide.update({{"hidden_size", 2048}, {"intermediate_size", 4224}, {"num_attention_heads", 32},
               {"num_key_value_heads", 4}, {"num_hidden_layers", 1}});
  return {llama, qwen2, qwen3, qwen3_64, wide};
}

// A random model's biases start at zero; the decode kernels must add them.
void RandomizeBiases(const Transformer& model) {
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : model.parameters())
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) p.normal_(0, 0.5);
}

const std::vector<std::string> kFusedDecodes = {"fused", "persistent"};

TEST(FusedOpsGpuTest, SampleTokensPicksTheArgmaxAndDrawsFromTheSoftmax) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  at::manual_seed(0);
  at::Generator rng = at::cuda::detail::createCUDAGenerator(0);
  rng.set_current_seed(7);
  // Greedy and tempered rows side by side; 50000 takes packed loads, 1003 not.
  for (int64_t vocab : {50000, 1003}) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      const int64_t rows = 6;
      at::Tensor logits = (at::randn({rows, vocab}) * 3).to(dtype);
      logits[2][vocab - 1] = 40;  // the argmax at the last element
      logits[4].fill_(1);          // all tied: the first wins
      const std::vector<double> temps = {0, 0.7, 0, 1.0, 0, 1.3};
      at::Tensor out = SampleTokens(logits.to(kGpu), temps, rng).cpu();
      at::Tensor z = logits.to(at::kDouble);
      const std::string what = std::string(c10::toString(dtype)) + " vocab " + std::to_string(vocab);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t token = static_cast<int64_t>(out[0][r].item<float>());
        ASSERT_GE(token, 0) << what;
        ASSERT_LT(token, vocab) << what;
        const double t = temps[r] > 0 ? temps[r] : 1.0;
        const double want = at::log_softmax(z[r] / t, -1)[token].item<double>();
        EXPECT_NEAR(out[1][r].item<float>(), want, 1e-4) << what << " row " << r;
        if (temps[r] == 0) {
          EXPECT_EQ(token, z[r].argmax().item<int64_t>()) << what << " row " << r;
        }
      }
      EXPECT_EQ(out[0][2].item<float>(), vocab - 1) << what;
      EXPECT_EQ(out[0][4].item<float>(), 0) << what;
    }
  }
  // Draws follow softmax(z / t): 40960 rows of one 8-token row, each row its
  // own noise; every frequency within 5 standard errors.
  const int64_t n = 40960;
  at::Tensor row = at::tensor({0.5, -1.0, 2.0, 0.0, 1.5, -3.0, 1.0, 0.2}, at::kFloat);
  const double t = 0.8;
  at::Tensor p = at::softmax(row.to(at::kDouble) / t, -1);
  at::Tensor out = SampleTokens(row.unsqueeze(0).expand({n, 8}).contiguous().to(kGpu),
                                std::vector<double>(n, t), rng).cpu();
  at::Tensor counts = at::bincount(out[0].to(at::kLong), {}, 8).to(at::kDouble);
  for (int64_t i = 0; i < 8; ++i) {
    const double pi = p[i].item<double>(), freq = counts[i].item<double>() / n;
    EXPECT_NEAR(freq, pi, 5 * std::sqrt(pi * (1 - pi) / n)) << "token " << i;
  }
  // The same seed repeats the draws; the next call draws anew.
  at::Tensor wide = at::randn({64, 4096}).to(kGpu);
  rng.set_current_seed(11);
  at::Tensor a = SampleTokens(wide, std::vector<double>(64, 1.0), rng).cpu();
  at::Tensor b = SampleTokens(wide, std::vector<double>(64, 1.0), rng).cpu();
  rng.set_current_seed(11);
  // Into pinned memory too (the generator's copy for the host), written by
  // the kernel itself.
  at::Tensor host = at::full({2, 64}, -1.0, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
  at::Tensor c = SampleTokens(wide, std::vector<double>(64, 1.0), rng, nullptr, &host).cpu();
  EXPECT_TRUE(at::equal(a, c));
  EXPECT_TRUE(at::equal(host, c));
  EXPECT_FALSE(at::equal(a[0], b[0]));
  at::Tensor pageable = at::zeros({2, 64});
  EXPECT_THROW(SampleTokens(wide, std::vector<double>(64, 1.0), rng, nullptr, &pageable), c10::Error);
}

// A step's inputs staged in pinned memory, with the last step's picks fed
// into their slots' ids: on the GPU (one kernel reading the staging through
// its device mapping) as on the CPU (a copy, index_select and index_copy);
// columns past `rows` and slots not fed left as they were.
TEST(FusedOpsGpuTest, StageDecodeInputsFeedsEachPickIntoItsSlot) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  at::Tensor picks = at::tensor({11.f, 22.f, 151935.f, 44.f, -0.5f, -1.5f, -2.5f, -3.5f}).view({2, 4});
  at::Tensor staging = at::tensor({5, 6, 0, 0, 8, 9,  // ids; the fed slots' get the picks
                                   3, 4, 5, 6, 7, 9,  // positions
                                   4, 1, 0, 0, 0, 9,  // fed slots
                                   2, 0, 3, 0, 0, 9,  // their picks' rows
                                   0, 1, 2, 3, 4, 9},
                                  at::kLong)
                           .view({5, 6});
  const int64_t rows = 5, fed = 3;
  at::Tensor cpu = at::full({5, 6}, -7, at::kLong), gpu = cpu.to(kGpu);
  StageDecodeInputs(staging, rows, picks, fed, cpu);
  StageDecodeInputs(staging.pin_memory(), rows, picks.to(kGpu), fed, gpu);
  at::Tensor expected = staging.clone();
  expected[0] = at::tensor({44, 11, 0, 0, 151935, 9}, at::kLong);
  expected.select(1, 5).fill_(-7);
  EXPECT_TRUE(at::equal(cpu, expected)) << cpu;
  EXPECT_TRUE(at::equal(gpu.cpu(), expected)) << gpu;
}

// The picks written into pinned memory by a kernel are there once the
// stream is synchronised.
TEST(FusedOpsGpuTest, CopyToPinnedWritesThroughTheMapping) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  at::Tensor src = at::randn({2, 300}, at::TensorOptions().device(kGpu));
  at::Tensor dst = at::full({2, 300}, -1.f, at::TensorOptions().pinned_memory(true));
  CopyToPinned(src, dst);
  c10::cuda::getCurrentCUDAStream().synchronize();
  EXPECT_TRUE(at::equal(dst, src.cpu()));
  at::Tensor pageable = at::empty({2, 300});
  EXPECT_THROW(CopyToPinned(src, pageable), c10::Error);
}

// The batch-1 LM head (HeadRow) against the same product in fp64: heads
// whose spans are two rows (hidden 896, 7 loads; 640, 5) and one (1024, 4;
// 1536, 6), vocabularies that are no multiple of the warps' spans, bf16 and
// fp16, into a given output too; shapes it does not take are refused.
TEST(FusedOpsGpuTest, HeadRowMatchesTheProductInFp64) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  at::manual_seed(0);
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    const auto on = at::TensorOptions().device(kGpu).dtype(dtype);
    for (auto [hidden, vocab] : {std::pair<int64_t, int64_t>{896, 151936}, {896, 1000 + 14}, {640, 4098},
                                 {1024, 3001}, {1536, 3001}}) {
      const std::string what = std::string(c10::toString(dtype)) + " hidden " + std::to_string(hidden) + " vocab " +
                               std::to_string(vocab);
      at::Tensor head = (at::randn({vocab, hidden}) * 0.05).to(on), x = (at::randn({1, hidden}) * 2).to(on);
      if (major < 9) {
        EXPECT_FALSE(HeadRowFits(x, head)) << what << ": Hopper only";
        continue;
      }
      ASSERT_TRUE(HeadRowFits(x, head)) << what;
      at::Tensor want = at::matmul(x.to(at::kDouble), head.to(at::kDouble).t());
      at::Tensor got = HeadRow(x, head);
      ASSERT_EQ(got.scalar_type(), dtype) << what;
      ExpectNear(got, want, 2e-2, 1e-2, what);  // one rounding of each logit to 16 bits
      at::Tensor out = at::full({1, vocab}, -7.0, on);
      HeadRow(x, head, &out);
      EXPECT_TRUE(at::equal(out, got)) << what << ": into a given output";
    }
  }
  const auto bf16 = at::TensorOptions().device(kGpu).dtype(at::kBFloat16);
  EXPECT_FALSE(HeadRowFits(at::zeros({2, 896}, bf16), at::zeros({1000, 896}, bf16)));    // two rows
  EXPECT_FALSE(HeadRowFits(at::zeros({1, 896}, bf16), at::zeros({1001, 896}, bf16)));    // an odd vocabulary of pairs
  EXPECT_FALSE(HeadRowFits(at::zeros({1, 2048}, bf16), at::zeros({1000, 2048}, bf16)));  // 8 loads a span
  EXPECT_FALSE(HeadRowFits(at::zeros({1, 320}, bf16), at::zeros({1000, 320}, bf16)));    // pairs of 1280 bytes
  EXPECT_FALSE(HeadRowFits(at::zeros({1, 896}, bf16.dtype(at::kFloat)),
                           at::zeros({1000, 896}, bf16.dtype(at::kFloat))));  // fp32
  EXPECT_THROW(HeadRow(at::zeros({2, 896}, bf16), at::zeros({1000, 896}, bf16)), c10::Error);
}

// HeadRow sampling its row as it goes draws what SampleTokens draws from
// its logits with the same temperature and generator state: the same token
// (greedy, and three temperatures over draws of several calls, which also
// leave the counter zero), the logprob up to fp32 rounding, the same into
// pinned host memory.
TEST(FusedOpsGpuTest, HeadRowSamplesAsSampleTokens) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major < 9) GTEST_SKIP() << "HeadRow: Hopper only";
  at::manual_seed(1);
  for (auto [hidden, vocab] : {std::pair<int64_t, int64_t>{896, 151936}, {1536, 3001}}) {
    for (auto dtype : {at::kBFloat16, at::kHalf}) {
      const auto on = at::TensorOptions().device(kGpu).dtype(dtype);
      at::Tensor head = (at::randn({vocab, hidden}) * 0.05).to(on), x = (at::randn({1, hidden}) * 2).to(on);
      for (double t : {0.0, 0.5, 1.0, 2.0}) {
        at::Generator fused = at::cuda::detail::createCUDAGenerator(0);
        at::Generator apart = at::cuda::detail::createCUDAGenerator(0);
        fused.set_current_seed(7), apart.set_current_seed(7);
        at::Tensor counters, apart_counters;
        at::Tensor host = at::empty({2, 1}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
        for (int call = 0; call < 3; ++call) {
          const std::string what = std::string(c10::toString(dtype)) + " hidden " + std::to_string(hidden) +
                                   " temperature " + std::to_string(t) + " call " + std::to_string(call);
          RowPick pick{t, &fused, &counters, &host, {}};
          at::Tensor logits = HeadRow(x, head, nullptr, &pick);
          ASSERT_TRUE(pick.picks.defined()) << what;
          at::Tensor want = SampleTokens(logits, {t}, apart, &apart_counters).cpu();
          at::Tensor got = pick.picks.cpu();
          c10::cuda::getCurrentCUDAStream().synchronize();
          EXPECT_EQ(got[0][0].item<float>(), want[0][0].item<float>()) << what;
          EXPECT_NEAR(got[1][0].item<float>(), want[1][0].item<float>(), 1e-4) << what;
          EXPECT_TRUE(at::equal(host, got)) << what << ": host";
          EXPECT_EQ(counters.cpu().sum().item<int64_t>(), 0) << what << ": the counter left zero";
        }
      }
    }
  }
}

// The LM head kernel against the same norm and product in fp64 from the
// same rounded input: a vocabulary that is no multiple of the kernel's 16
// rows, 1, 3 and 8 rows, bf16 and fp16, into a given output too.
TEST(FusedOpsGpuTest, DecodeHeadMatchesTheNormAndProductInFp64) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  at::manual_seed(0);
  const int64_t hidden = 896, vocab = 1000 + 13;
  const double eps = 1e-6;
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    const auto on = at::TensorOptions().device(kGpu).dtype(dtype);
    at::Tensor head = (at::randn({vocab, hidden}) * 0.05).to(on), norm = (at::rand({hidden}) + 0.5).to(on);
    for (int64_t rows : {1, 3, 8}) {
      const std::string what = std::string(c10::toString(dtype)) + " rows " + std::to_string(rows);
      at::Tensor h = (at::randn({rows, hidden}) * 3).to(on);
      ASSERT_TRUE(DecodeHeadFits(h, head)) << what;
      // The kernel's norm: fp32 statistics and arithmetic, one rounding.
      at::Tensor hf = h.to(at::kFloat);
      at::Tensor xn = (hf * at::rsqrt(hf.pow(2).mean(-1, true) + eps) * norm.to(at::kFloat)).to(dtype);
      at::Tensor want = at::matmul(xn.to(at::kDouble), head.to(at::kDouble).t());
      at::Tensor got = DecodeHead(h, norm, eps, head);
      ASSERT_EQ(got.scalar_type(), dtype) << what;
      // One rounding of each logit to 16 bits (and the norm's rsqrt, one
      // input element in a few thousand a unit off).
      ExpectNear(got, want, 2e-2, 1e-2, what);
      at::Tensor out = at::full({rows, vocab}, -7.0, on);
      DecodeHead(h, norm, eps, head, &out);
      EXPECT_TRUE(at::equal(out, got)) << what << ": into a given output";
    }
  }
  const auto bf16 = at::TensorOptions().device(kGpu).dtype(at::kBFloat16);
  EXPECT_FALSE(DecodeHeadFits(at::zeros({1, 100}, bf16), at::zeros({vocab, 100}, bf16)));  // hidden % 32
  EXPECT_FALSE(DecodeHeadFits(at::zeros({9, hidden}, bf16), at::zeros({vocab, hidden}, bf16)));  // rows > 8
  EXPECT_FALSE(DecodeHeadFits(at::zeros({1, hidden}, bf16.dtype(at::kFloat)),
                              at::zeros({vocab, hidden}, bf16.dtype(at::kFloat))));  // fp32
  EXPECT_THROW(DecodeHead(at::zeros({9, hidden}, bf16), at::ones({hidden}, bf16), eps,
                          at::zeros({vocab, hidden}, bf16)),
               c10::Error);
}

// One decode step of a few rows at different positions over a span shorter
// than the cache, after a prompt of `prompt` tokens in every row; of
// several rows the last idle at the cache's last position (its logits not
// compared).
struct DecodeCase {
  int64_t max_len, span, prompt;
  std::vector<int64_t> positions;
};

// One fused decode kernel's step against the ATen step, for one model
// shape, dtype and case (FusedDecodeEqualsTheAtenDecode).
void ExpectFusedDecodeEqualsAten(const std::string& name, at::ScalarType dtype, const nlohmann::json& cfg,
                                 const DecodeCase& dc) {
  const DecodeKernels kernels = ParseDecodeKernels(name).value();
  const int64_t rows = static_cast<int64_t>(dc.positions.size()), active = rows > 1 ? rows - 1 : 1;
  std::string what = name + " " + cfg["model_type"].get<std::string>() + " " + c10::toString(dtype) +
                     " rows " + std::to_string(rows);
  ModelConfig config = ParseModelConfig(cfg, what).value();
  ASSERT_TRUE(FusedDecodeFits(config.num_heads, config.num_kv_heads, config.head_dim)) << what;
  ASSERT_TRUE(PersistentDecodeFits(dtype, rows, dc.span, config.num_layers, config.hidden_size,
                                   config.intermediate_size, config.num_heads, config.num_kv_heads,
                                   config.head_dim))
      << what;
  auto model = Transformer::Random(config, {dtype, kGpu, false}, 7);
  RandomizeBiases(*model);
  KvCache aten = KvCache::Allocate(config, rows + 1, dc.max_len, dtype, kGpu);
  at::Tensor prompt =
      at::randint(0, config.vocab_size, {rows, dc.prompt}, at::TensorOptions().dtype(at::kLong).device(kGpu));
  at::Tensor slots = at::arange(rows, prompt.options());
  model->Forward(prompt, at::arange(dc.prompt, prompt.options()).expand({rows, dc.prompt}), &aten, slots);
  KvCache fused = aten;  // the same prompt keys and values, copied
  for (size_t i = 0; i < aten.k.size(); ++i) {
    fused.k[i] = aten.k[i].clone();
    fused.v[i] = aten.v[i].clone();
  }
  at::Tensor ids = at::randint(0, config.vocab_size, {rows, 1}, prompt.options());
  at::Tensor positions = at::tensor(dc.positions, prompt.options()).view({rows, 1});
  at::Tensor want = model->Decode(ids, positions, aten, dc.span).to(at::kFloat);
  at::Tensor got = model->Decode(ids, positions, fused, dc.span, kernels).to(at::kFloat);
  const double tol = dtype == at::kFloat ? 1e-4 : 0.05;
  const double scale = want.narrow(0, 0, active).abs().max().item<double>();
  ExpectNear(got.narrow(0, 0, active), want.narrow(0, 0, active), tol * scale, 0, what + " logits");
  // The same step again, its logits written into a given tensor (as
  // the generator's graphs do): every row written.
  at::Tensor into = at::full({rows, config.vocab_size}, NAN, prompt.options().dtype(dtype));
  at::Tensor returned = model->Decode(ids, positions, fused, dc.span, kernels, &into);
  EXPECT_EQ(returned.data_ptr(), into.data_ptr()) << what;
  ExpectNear(into, got, tol * scale, 0, what + " logits written into a given tensor");
  if (dtype == at::kFloat) {
    EXPECT_TRUE(got.narrow(0, 0, active).argmax(-1).equal(want.narrow(0, 0, active).argmax(-1))) << what;
  }
  // Keys and values in bf16: layer 0's come from the same embeddings
  // (one rounding apart); a later layer's input carries the earlier
  // layers' bf16 rounding, which Qwen3's k norm can magnify (0.025
  // seen once).
  for (size_t i = 0; i < aten.k.size(); ++i) {
    const double atol = dtype == at::kFloat ? 1e-5 : i == 0 ? 0.02 : 0.05;
    for (int64_t b = 0; b < active; ++b) {
      const int64_t p = dc.positions[b];
      ExpectNear(fused.k[i][b][p], aten.k[i][b][p], atol, 0.01, what + " key, layer " + std::to_string(i));
      ExpectNear(fused.v[i][b][p], aten.v[i][b][p], atol, 0.01, what + " value, layer " + std::to_string(i));
    }
  }
}

// The fused and the persistent step's logits and the keys and values they
// write equal the ATen step's, in fp32 and bf16: three rows (the first past
// the 64-key chunk the attention splits at), and eight over 640 keys (the
// persistent kernel's 20 chunks of 32 keys: its merge takes them in two
// rounds of 16, and each of its o-projection blocks folds every row); one
// row (with heads of 64, the persistent kernel's o-projection blocks take
// its attention over every key themselves) at 600 of 640 keys, at the
// span's last key, and at its first; and one row over 2048 keys, past the
// keys the o-projection blocks take (the batch-1 step's chunks spread over
// the grid).
TEST(FusedOpsGpuTest, FusedDecodeEqualsTheAtenDecode) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  const std::vector<DecodeCase> cases = {{256, 128, 40, {90, 17, 255}},
                                         {704, 640, 601, {600, 17, 333, 599, 64, 1, 520, 703}},
                                         {704, 640, 601, {600}},
                                         {256, 128, 100, {127}},
                                         {256, 128, 1, {0}},
                                         {2112, 2048, 1901, {2000}}};
  for (const std::string& name : kFusedDecodes)
    for (auto dtype : {at::kFloat, at::kBFloat16})
      for (const auto& cfg : FusedDecodeShapes())
        for (const DecodeCase& dc : cases) ExpectFusedDecodeEqualsAten(name, dtype, cfg, dc);
}

// The persistent kernel leaves its work space (KvCache::decode_work) all
// zeros, so that one serves every step of a cache whatever its rows and
// span: steps of one cache through the batch-1 kernel (in AttendHead where
// heads are 64 wide), over the chunks of 2048 keys, a batch of 3 and batch 1
// again, each step's logits equal to the ATen step's (fp32) and the work
// space zero after it.
TEST(FusedOpsGpuTest, PersistentDecodeLeavesItsWorkSpaceZero) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  const std::vector<DecodeCase> steps = {
      {2112, 128, 0, {100}}, {2112, 2048, 0, {2000}}, {2112, 640, 0, {600, 17, 639}}, {2112, 128, 0, {101}}};
  const std::vector<nlohmann::json> shapes = FusedDecodeShapes();
  for (const auto& cfg : {shapes[1], shapes[2], shapes[3]}) {
    const std::string name = cfg["model_type"].get<std::string>() + " head_dim " +
                             std::to_string(cfg.value("head_dim", cfg["hidden_size"].get<int64_t>() /
                                                                      cfg["num_attention_heads"].get<int64_t>()));
    ModelConfig config = ParseModelConfig(cfg, name).value();
    auto model = Transformer::Random(config, {at::kFloat, kGpu, false}, 5);
    RandomizeBiases(*model);
    KvCache aten = KvCache::Allocate(config, 3, 2112, at::kFloat, kGpu), fused = aten;
    for (size_t i = 0; i < aten.k.size(); ++i) {
      aten.k[i].normal_(), aten.v[i].normal_();
      fused.k[i] = aten.k[i].clone(), fused.v[i] = aten.v[i].clone();
    }
    for (const DecodeCase& dc : steps) {
      const int64_t rows = static_cast<int64_t>(dc.positions.size());
      const std::string what = name + " rows " + std::to_string(rows) + " span " + std::to_string(dc.span);
      ASSERT_TRUE(PersistentDecodeFits(at::kFloat, rows, dc.span, config.num_layers, config.hidden_size,
                                       config.intermediate_size, config.num_heads, config.num_kv_heads,
                                       config.head_dim))
          << what;
      const auto on = at::TensorOptions().dtype(at::kLong).device(kGpu);
      at::Tensor ids = at::randint(0, config.vocab_size, {rows, 1}, on);
      at::Tensor positions = at::tensor(dc.positions, on).view({rows, 1});
      at::Tensor want = model->Decode(ids, positions, aten, dc.span);
      at::Tensor got = model->Decode(ids, positions, fused, dc.span, DecodeKernels::kPersistent);
      ExpectNear(got, want, 1e-4 * want.abs().max().item<double>(), 0, what + " logits");
      ASSERT_TRUE(fused.decode_work.defined()) << what;
      EXPECT_EQ(fused.decode_work.count_nonzero().item<int64_t>(), 0) << what << ": the work space after the step";
    }
  }
}

// Greedy generation through captured graphs: the fused and the persistent
// decode give the tokens the ATen decode gives (fp32), batch 1 and a batch of
// 3 with a slot freed and refilled.
TEST(FusedOpsGpuTest, FusedDecodeGeneratesTheSameTokens) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  for (const std::string& name : kFusedDecodes)
    for (const auto& cfg : FusedDecodeShapes()) {
      const DecodeKernels kernels = ParseDecodeKernels(name).value();
      ModelConfig config = ParseModelConfig(cfg, "fused").value();
      auto model = Transformer::Random(config, {at::kFloat, kGpu, false}, 11);
      RandomizeBiases(*model);
      std::vector<GenerationRequest> requests;
      for (int r = 0; r < 4; ++r) {
        GenerationRequest q;
        for (int t = 0; t < 5 + 7 * r; ++t) q.prompt.push_back((t * 37 + r * 101) % config.vocab_size);
        q.sampling.temperature = 0;
        q.sampling.max_new_tokens = 60 + 20 * r;  // past several 64-key chunks
        requests.push_back(q);
      }
      for (int64_t slots : {1, 3}) {
        GeneratorOptions plain{slots, 256, 0}, fused = plain;
        fused.decode_kernels = kernels;
        auto want = Generator(*model, nullptr, plain).Generate(requests);
        Generator gen(*model, nullptr, fused);
        auto got = gen.Generate(requests);
        for (size_t i = 0; i < requests.size(); ++i)
          EXPECT_EQ(got[i].tokens, want[i].tokens)
              << name << " " << cfg["model_type"] << " slots " << slots << " request " << i;
        EXPECT_EQ(gen.stats().graph_replays + gen.stats().launched_steps, gen.stats().decode_steps);
        EXPECT_GT(gen.stats().decode_steps, 0);
      }
    }
}

// Batch-1 generation whose LM head samples as it goes (HeadRow through the
// persistent kernel, overlapped steps) draws the tokens that sampling its
// logits apart draws (the steps not overlapped: SampleTokens after HeadRow)
// from the same seed, greedy and tempered: a bf16 model of Qwen2.5-0.5B's
// hidden size and heads. One request a generator: overlapped steps launch
// one step past a sequence's end, whose draw shifts the next request's
// noise. The layers add nothing to the residual stream (o and down
// projections zero): the persistent kernel adds its fp32 sums in no fixed
// order, and with the layers' outputs in them a bf16 logit could round
// differently between runs and flip a near tie (seen on an H100 at token 33
// of 40); sums of zeros and one residual are exact in any order.
TEST(FusedOpsGpuTest, HeadRowPicksGenerateAsSampledLogits) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU on this host";
  nlohmann::json cfg = {{"model_type", "qwen2"},      {"vocab_size", 4002},     {"hidden_size", 896},
                        {"intermediate_size", 1216},  {"num_hidden_layers", 2}, {"num_attention_heads", 14},
                        {"num_key_value_heads", 2},   {"max_position_embeddings", 512},
                        {"rope_theta", 10000.0},      {"tie_word_embeddings", true}};
  ModelConfig config = ParseModelConfig(cfg, "qwen2-896").value();
  auto model = Transformer::Random(config, {at::kBFloat16, kGpu, false}, 13);
  at::Tensor head;  // tied: the embedding
  {
    at::NoGradGuard no_grad;
    for (const auto& [name, p] : model->parameters()) {
      if (name == "model.embed_tokens.weight") head = p;
      if (name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos) p.zero_();
    }
  }
  const at::Tensor h = at::zeros({1, config.hidden_size}, head.options());
  if (!model->DecodesInOneKernel(1, 128, DecodeKernels::kPersistent) || !HeadRowFits(h, head))
    GTEST_SKIP() << "no persistent kernel and HeadRow on this GPU";
  for (double t : {0.0, 0.8}) {
    std::vector<GenerationRequest> requests;
    for (int r = 0; r < 2; ++r) {
      GenerationRequest q;
      for (int i = 0; i < 9 + 5 * r; ++i) q.prompt.push_back((i * 53 + r * 7) % config.vocab_size);
      q.sampling.temperature = t;
      q.sampling.max_new_tokens = 40;
      requests.push_back(q);
    }
    GeneratorOptions picked{/*max_batch=*/1, /*max_seq_len=*/256, /*seed=*/5}, apart = picked;
    picked.decode_kernels = apart.decode_kernels = DecodeKernels::kPersistent;
    apart.overlap = false;  // each step's logits sampled after the head
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string what = "temperature " + std::to_string(t) + " request " + std::to_string(i);
      auto got = Generator(*model, nullptr, picked).Generate({requests[i]});
      auto want = Generator(*model, nullptr, apart).Generate({requests[i]});
      EXPECT_EQ(got[0].tokens, want[0].tokens) << what;
      ASSERT_EQ(got[0].logprobs.size(), want[0].logprobs.size()) << what;
      for (size_t j = 0; j < got[0].logprobs.size(); ++j)
        EXPECT_NEAR(got[0].logprobs[j], want[0].logprobs[j], 1e-4) << what << " token " << j;
    }
  }
}

}  // namespace
}  // namespace cuda_agent::model
