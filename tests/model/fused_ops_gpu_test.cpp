// The fused CUDA kernels (model/fused_ops.h) against the same expressions in
// fp64 on the CPU: values and gradients, on packed and unpacked row widths,
// and a whole model's parameter gradients on the GPU against the CPU.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cuda_agent/model/fused_ops.h"
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

}  // namespace
}  // namespace cuda_agent::model
