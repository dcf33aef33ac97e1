#include "cuda_agent/model/fused_ops.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/autograd/custom_function.h>

#include "decode_kernels.h"
#include "fused_kernels.h"
#endif

namespace cuda_agent::model {
namespace {

at::Tensor RotateHalf(const at::Tensor& x) {
  int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool Fusable(const at::Tensor& t) {
  auto s = t.scalar_type();
  return t.is_cuda() && (s == at::kFloat || s == at::kBFloat16 || s == at::kHalf);
}

kernels::Dtype KernelDtype(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16:
      return kernels::Dtype::kBFloat16;
    case at::kHalf:
      return kernels::Dtype::kHalf;
    default:
      return kernels::Dtype::kFloat;
  }
}
kernels::Dtype KernelDtype(const at::Tensor& t) { return KernelDtype(t.scalar_type()); }

// Work space of the decode attention's split over key chunks (decode_kernels.h):
// per (row, key head, chunk) kDecodeMaxGroup maxima, as many sums and
// kDecodeMaxGroup x head_dim outputs.
int64_t AttentionPartialValues(int64_t batch, int64_t kv_heads, int64_t chunks, int64_t head_dim) {
  return batch * kv_heads * chunks * kernels::kDecodeMaxGroup * (head_dim + 2);
}
at::Tensor AttentionPartials(int64_t batch, int64_t kv_heads, int64_t chunks, int64_t head_dim,
                             const at::TensorOptions& options) {
  return at::empty({AttentionPartialValues(batch, kv_heads, chunks, head_dim)}, options.dtype(at::kFloat));
}

cudaStream_t Stream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

// A sampling call's Philox seed and offset from a CUDA generator: each call
// a new offset.
std::pair<uint64_t, uint64_t> PhiloxInputs(at::Generator& generator) {
  auto* gen = at::check_generator<at::CUDAGeneratorImpl>(generator);
  std::lock_guard<std::mutex> lock(gen->mutex_);
  return gen->philox_engine_inputs(4);
}

// The sampling kernels' int32 zeros for `rows` rows on `device`, which they
// leave zero: made, or grown, where they are not.
void SampleCounters(at::Tensor& counters, int64_t rows, const c10::Device& device) {
  if (!counters.defined() || counters.numel() < rows || counters.device() != device)
    counters = at::zeros({rows}, at::TensorOptions().device(device).dtype(at::kInt));
}

// `host`, where given, must be able to take `picks`: contiguous pinned fp32 of its shape.
void CheckHostPicks(const at::Tensor* host, const at::Tensor& picks) {
  TORCH_CHECK(!host || (host->is_pinned() && host->is_contiguous() && host->scalar_type() == at::kFloat &&
                        host->sizes() == picks.sizes()),
              "host picks must be contiguous pinned fp32 ", picks.sizes());
}

void Check(int error, const char* kernel) {
  TORCH_CHECK(error == 0, kernel, " failed to launch: ", cudaGetErrorString(static_cast<cudaError_t>(error)));
}

// The gradient an output received, fp32 and contiguous, or undefined.
at::Tensor FloatGrad(const at::Tensor& g) { return g.defined() ? g.to(at::kFloat).contiguous() : at::Tensor(); }
const float* Ptr(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }
const void* DataOrNull(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

struct TokenLogprobsFn : torch::autograd::Function<TokenLogprobsFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets) {
    at::Tensor z = logits.contiguous(), t = targets.to(at::kLong).contiguous();
    const int64_t rows = z.size(0), vocab = z.size(1);
    auto f32 = z.options().dtype(at::kFloat);
    at::Tensor logp = at::empty({rows}, f32), entropy = at::empty({rows}, f32), stats = at::empty({rows, 2}, f32);
    Check(kernels::TokenLogprobsForward(KernelDtype(z), z.data_ptr(), rows, vocab, t.data_ptr<int64_t>(),
                                        logp.data_ptr<float>(), entropy.data_ptr<float>(), stats.data_ptr<float>(),
                                        Stream(z)),
          "token logprobs");
    ctx->save_for_backward({z, t, stats, entropy});
    return {logp, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &z = saved[0], &t = saved[1], &stats = saved[2], &entropy = saved[3];
    at::Tensor gl = FloatGrad(grads[0]), ge = FloatGrad(grads[1]);
    if (!gl.defined() && !ge.defined()) return {at::Tensor(), at::Tensor()};
    at::Tensor grad = at::empty_like(z);
    Check(kernels::TokenLogprobsBackward(KernelDtype(z), z.data_ptr(), z.size(0), z.size(1), t.data_ptr<int64_t>(),
                                         Ptr(gl), Ptr(ge), stats.data_ptr<float>(), entropy.data_ptr<float>(),
                                         grad.data_ptr(), Stream(z)),
          "token logprobs backward");
    return {grad, at::Tensor()};
  }
};

// x [B, T, H, D]; cos and sin [B * T, D], contiguous.
at::Tensor RotaryKernel(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool transpose) {
  at::Tensor in = x.contiguous(), out = at::empty_like(in);
  Check(kernels::Rotary(KernelDtype(in), in.data_ptr(), cos.data_ptr(), sin.data_ptr(), cos.size(0), in.size(2),
                        in.size(3), transpose, out.data_ptr(), Stream(in)),
        "rotary");
  return out;
}

struct RotaryFn : torch::autograd::Function<RotaryFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return RotaryKernel(x, cos, sin, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {RotaryKernel(grads[0], saved[0], saved[1], true), at::Tensor(), at::Tensor()};
  }
};

struct SwiGluFn : torch::autograd::Function<SwiGluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    at::Tensor g = gate.contiguous(), u = up.contiguous(), out = at::empty_like(g);
    Check(kernels::SwiGluForward(KernelDtype(g), g.data_ptr(), u.data_ptr(), g.numel(), out.data_ptr(), Stream(g)),
          "swiglu");
    ctx->save_for_backward({g, u});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &g = saved[0], &u = saved[1];
    at::Tensor go = grads[0].contiguous(), gg = at::empty_like(g), gu = at::empty_like(u);
    Check(kernels::SwiGluBackward(KernelDtype(g), g.data_ptr(), u.data_ptr(), go.data_ptr(), g.numel(),
                                  gg.data_ptr(), gu.data_ptr(), Stream(g)),
          "swiglu backward");
    return {gg, gu};
  }
};
#endif

}  // namespace

bool HaveFusedKernels() {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  return true;
#else
  return false;
#endif
}

TokenLogprobs ComputeTokenLogprobs(const at::Tensor& logits, const at::Tensor& targets) {
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "token logprobs: logits [N, V] and targets [N], got ", logits.sizes(), " and ", targets.sizes());
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  if (Fusable(logits)) {
    auto out = TokenLogprobsFn::apply(logits, targets);
    return {out[0], out[1]};
  }
#endif
  at::Tensor lp = at::log_softmax(logits.to(at::kFloat), -1);
  return {lp.gather(-1, targets.to(at::kLong).unsqueeze(-1)).squeeze(-1), -(lp.exp() * lp).sum(-1)};
}

at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  if (Fusable(x) && cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type()) {
    const int64_t B = x.size(0), T = x.size(1), D = x.size(3);
    auto table = [&](const at::Tensor& t) { return t.expand({B, T, 1, D}).reshape({B * T, D}).contiguous(); };
    return RotaryFn::apply(x, table(cos), table(sin));
  }
#endif
  return x * cos + RotateHalf(x) * sin;
}

int64_t FusedDecodeMaxRows() {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  return kernels::kDecodeMaxRows;
#else
  return 0;
#endif
}

bool FusedDecodeFits(int64_t heads, int64_t kv_heads, int64_t head_dim) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  return kv_heads > 0 && heads % kv_heads == 0 && heads / kv_heads <= kernels::kDecodeMaxGroup &&
         (head_dim == 64 || head_dim == 128);
#else
  return false;
#endif
}

bool DecodeHeadFits(const at::Tensor& h, const at::Tensor& head) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  return Fusable(h) && h.scalar_type() != at::kFloat && h.dim() == 2 && head.dim() == 2 &&
         head.scalar_type() == h.scalar_type() && head.size(1) == h.size(1) && head.device() == h.device() &&
         kernels::HeadLogitsFit(KernelDtype(h), h.size(0), h.size(1));
#else
  return false;
#endif
}

bool HeadRowFits(const at::Tensor& x, const at::Tensor& head) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  return Fusable(x) && x.scalar_type() != at::kFloat && x.dim() == 2 && x.size(0) == 1 && head.dim() == 2 &&
         head.scalar_type() == x.scalar_type() && head.size(1) == x.size(1) && head.device() == x.device() &&
         kernels::HeadRowFits(KernelDtype(x), x.size(1), head.size(0));
#else
  return false;
#endif
}

at::Tensor HeadRow(const at::Tensor& x, const at::Tensor& head, at::Tensor* out, RowPick* pick) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  TORCH_CHECK(HeadRowFits(x, head), "HeadRow: x ", x.sizes(), " (", x.scalar_type(), ", ", x.device(), ") and head ",
              head.sizes(), " (", head.scalar_type(), ") do not fit the kernel (HeadRowFits)");
  const at::Tensor xc = x.contiguous(), w = head.contiguous();
  at::Tensor y = out ? *out : at::empty({1, head.size(0)}, x.options());
  TORCH_CHECK(y.is_contiguous() && y.size(0) == 1 && y.size(1) == head.size(0) && y.scalar_type() == x.scalar_type(),
              "HeadRow: out ", y.sizes(), " for logits [1, ", head.size(0), "]");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(xc.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0,
              "HeadRow: x and head must be 16-byte aligned");
  kernels::HeadRowArgs a;
  a.x = xc.data_ptr();
  a.head = w.data_ptr();
  a.out = y.data_ptr();
  a.hidden = x.size(1);
  a.vocab = head.size(0);
  at::Tensor work;
  if (pick) {
    TORCH_CHECK(pick->generator && pick->counters, "HeadRow: a pick needs a generator and counters");
    const auto on = x.options().dtype(at::kFloat);
    pick->picks = at::empty({2, 1}, on);
    work = at::empty({kernels::HeadRowWorkFloats()}, on);
    SampleCounters(*pick->counters, 1, x.device());
    CheckHostPicks(pick->host, pick->picks);
    std::tie(a.seed, a.offset) = PhiloxInputs(*pick->generator);
    a.temperature = static_cast<float>(std::max(pick->temperature, 0.0));
    a.work = work.data_ptr<float>();
    a.counter = pick->counters->data_ptr<int>();
    a.picks = pick->picks.data_ptr<float>();
    a.host_picks = pick->host ? pick->host->data_ptr<float>() : nullptr;
  }
  Check(kernels::HeadRow(KernelDtype(x), a, Stream(x)), "LM head row");
  return y;
#else
  (void)x, (void)head, (void)out, (void)pick;
  TORCH_CHECK(false, "HeadRow: built without the fused CUDA kernels");
#endif
}

at::Tensor DecodeHead(const at::Tensor& h, const at::Tensor& norm_weight, double eps, const at::Tensor& head,
                      at::Tensor* out) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  TORCH_CHECK(DecodeHeadFits(h, head), "DecodeHead: h ", h.sizes(), " (", h.scalar_type(), ", ", h.device(),
              ") and head ", head.sizes(), " (", head.scalar_type(), ") do not fit the kernel (DecodeHeadFits)");
  TORCH_CHECK(norm_weight.numel() == h.size(1) && norm_weight.scalar_type() == h.scalar_type(),
              "DecodeHead: norm weight ", norm_weight.sizes(), " for h ", h.sizes());
  const at::Tensor x = h.contiguous(), w = head.contiguous(), g = norm_weight.contiguous();
  at::Tensor y = out ? *out : at::empty({h.size(0), head.size(0)}, h.options());
  TORCH_CHECK(y.is_contiguous() && y.size(0) == h.size(0) && y.size(1) == head.size(0) &&
                  y.scalar_type() == h.scalar_type(),
              "DecodeHead: out ", y.sizes(), " for logits [", h.size(0), ", ", head.size(0), "]");
  kernels::HeadLogitsArgs a;
  a.h = x.data_ptr();
  a.norm_weight = g.data_ptr();
  a.head = w.data_ptr();
  a.out = y.data_ptr();
  a.rows = h.size(0);
  a.hidden = h.size(1);
  a.vocab = head.size(0);
  a.eps = static_cast<float>(eps);
  Check(kernels::HeadLogits(KernelDtype(h), a, Stream(h)), "decode head");
  return y;
#else
  (void)h, (void)norm_weight, (void)eps, (void)head, (void)out;
  TORCH_CHECK(false, "DecodeHead: built without the fused CUDA kernels");
#endif
}

at::Tensor DecodeLinear(const at::Tensor& x, const at::Tensor& norm_weight, double eps,
                        const std::vector<LinearWeights>& parts, bool swiglu, const at::Tensor& residual) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  TORCH_CHECK(Fusable(x) && x.dim() == 2 && x.is_contiguous() && !parts.empty() && parts.size() <= 3 &&
                  (!swiglu || parts.size() == 2),
              "DecodeLinear: a contiguous [B, in] CUDA input and 1-3 weights (2 with swiglu)");
  kernels::DecodeGemvArgs a;
  a.x = x.data_ptr();
  a.batch = x.size(0);
  a.k = x.size(1);
  a.norm_weight = DataOrNull(norm_weight);
  a.eps = static_cast<float>(eps);
  int64_t out = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& p = parts[i];
    TORCH_CHECK(p.weight.is_contiguous() && p.weight.size(1) == a.k && p.weight.scalar_type() == x.scalar_type(),
                "DecodeLinear: weight ", i, " ", p.weight.sizes(), " does not take inputs of ", a.k);
    a.m[i] = {p.weight.data_ptr(), DataOrNull(p.bias), p.weight.size(0)};
    out += p.weight.size(0);
  }
  a.swiglu = swiglu;
  if (swiglu) out = parts[0].weight.size(0);
  at::Tensor y = at::empty({a.batch, out}, x.options());
  a.residual = DataOrNull(residual);
  a.y = y.data_ptr();
  Check(kernels::DecodeGemv(KernelDtype(x), a, Stream(x)), "decode linear");
  return y;
#else
  TORCH_CHECK(false, "DecodeLinear: built without the fused CUDA kernels");
#endif
}

at::Tensor DecodeAttention(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& inv_freq,
                           const at::Tensor& q_norm, const at::Tensor& k_norm, double eps, at::Tensor& k_cache,
                           at::Tensor& v_cache, int64_t heads, int64_t kv_heads, int64_t span,
                           const at::Tensor& counters) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  const int64_t hd = k_cache.size(3);
  TORCH_CHECK(Fusable(qkv) && qkv.is_contiguous() && FusedDecodeFits(heads, kv_heads, hd) &&
                  qkv.size(1) == (heads + 2 * kv_heads) * hd && positions.scalar_type() == at::kLong &&
                  inv_freq.scalar_type() == at::kFloat && k_cache.is_contiguous() && v_cache.is_contiguous(),
              "DecodeAttention: unsupported shapes or dtypes");
  kernels::DecodeAttentionArgs a;
  a.qkv = qkv.data_ptr();
  a.batch = qkv.size(0);
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = hd;
  a.max_len = k_cache.size(1);
  a.span = span;
  at::Tensor pos = positions.reshape({-1}).contiguous(), freq = inv_freq.contiguous();
  a.positions = pos.data_ptr<int64_t>();
  a.inv_freq = freq.data_ptr<float>();
  a.q_norm = DataOrNull(q_norm);
  a.k_norm = DataOrNull(k_norm);
  a.eps = static_cast<float>(eps);
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  a.k_cache = k_cache.data_ptr();
  a.v_cache = v_cache.data_ptr();
  TORCH_CHECK(counters.scalar_type() == at::kInt && counters.is_contiguous() && counters.numel() >= a.batch * kv_heads,
              "DecodeAttention: counters must be ", a.batch * kv_heads, " contiguous int32 zeros");
  at::Tensor out = at::empty({a.batch, heads * hd}, qkv.options());
  at::Tensor partial = AttentionPartials(a.batch, kv_heads, kernels::DecodeAttentionChunks(span), hd, qkv.options());
  a.out = out.data_ptr();
  a.partial = partial.data_ptr<float>();
  a.counters = counters.data_ptr<int>();
  Check(kernels::DecodeAttention(KernelDtype(qkv), a, Stream(qkv)), "decode attention");
  return out;
#else
  TORCH_CHECK(false, "DecodeAttention: built without the fused CUDA kernels");
#endif
}

at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  if (Fusable(gate) && up.scalar_type() == gate.scalar_type() && up.sizes() == gate.sizes())
    return SwiGluFn::apply(gate, up);
#endif
  return at::silu(gate) * up;
}

#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
static_assert(PersistentDecodeTimelineSize(3, 7) == kernels::DecodeTimelineSize(3, 7), "one timeline layout");
#endif

int64_t PersistentDecodeBlocks() {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  return kernels::DecodeLayersBlocks();
#else
  return 0;
#endif
}

bool PersistentDecodeFits(c10::ScalarType dtype, int64_t batch, int64_t span, int64_t layers, int64_t hidden,
                          int64_t mlp, int64_t heads, int64_t kv_heads, int64_t head_dim) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) return false;
  return kernels::DecodeLayersFit(KernelDtype(dtype), batch, span, layers, hidden, mlp, heads, kv_heads, head_dim);
#else
  return false;
#endif
}

void PersistentDecode(at::Tensor& h, const std::vector<DecodeLayerWeights>& layers, const at::Tensor& positions,
                      const at::Tensor& inv_freq, double eps, int64_t heads, int64_t kv_heads, int64_t mlp,
                      int64_t span, const at::Tensor& timeline, const at::Tensor& ids,
                      const at::Tensor& embedding, const at::Tensor& final_norm, at::Tensor* work) {
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  TORCH_CHECK(Fusable(h) && h.dim() == 2 && h.is_contiguous() && !layers.empty(),
              "PersistentDecode: h must be a contiguous [B, hidden] CUDA tensor");
  const int64_t B = h.size(0), hidden = h.size(1), hd = layers[0].k_cache.size(3);
  TORCH_CHECK(PersistentDecodeFits(h.scalar_type(), B, span, static_cast<int64_t>(layers.size()), hidden, mlp,
                                   heads, kv_heads, hd),
              "PersistentDecode: unsupported shape");
  kernels::DecodeLayersArgs a;
  a.num_layers = static_cast<int64_t>(layers.size());
  auto matrix = [&](const LinearWeights& w, int64_t rows, int64_t cols, const char* what) {
    TORCH_CHECK(w.weight.is_contiguous() && w.weight.size(0) == rows && w.weight.size(1) == cols &&
                    w.weight.scalar_type() == h.scalar_type() &&
                    reinterpret_cast<uintptr_t>(w.weight.data_ptr()) % 16 == 0,
                "PersistentDecode: ", what, " weight ", w.weight.sizes(), " is not a contiguous [", rows, ", ", cols,
                "] of the model's dtype");
    return kernels::DecodeMatrix{w.weight.data_ptr(), DataOrNull(w.bias), rows};
  };
  for (size_t l = 0; l < layers.size(); ++l) {
    const DecodeLayerWeights& w = layers[l];
    kernels::DecodeLayer& k = a.layers[l];
    for (const at::Tensor* norm : {&w.input_norm, &w.post_norm})  // read in 16-byte packs
      TORCH_CHECK(norm->is_contiguous() && norm->numel() == hidden && norm->scalar_type() == h.scalar_type() &&
                      reinterpret_cast<uintptr_t>(norm->data_ptr()) % 16 == 0,
                  "PersistentDecode: layer ", l, " norm weight ", norm->sizes(),
                  " is not a 16-byte aligned contiguous [", hidden, "] of the model's dtype");
    k.input_norm = w.input_norm.data_ptr();
    k.post_norm = w.post_norm.data_ptr();
    k.q_norm = DataOrNull(w.q_norm);
    k.k_norm = DataOrNull(w.k_norm);
    k.q = matrix(w.q, heads * hd, hidden, "q");
    k.k = matrix(w.k, kv_heads * hd, hidden, "k");
    k.v = matrix(w.v, kv_heads * hd, hidden, "v");
    k.o = matrix(w.o, hidden, heads * hd, "o");
    k.gate = matrix(w.gate, mlp, hidden, "gate");
    k.up = matrix(w.up, mlp, hidden, "up");
    k.down = matrix(w.down, hidden, mlp, "down");
    TORCH_CHECK(w.k_cache.is_contiguous() && w.v_cache.is_contiguous() && w.k_cache.size(2) == kv_heads,
                "PersistentDecode: caches must be contiguous [slots, max_len, kv_heads, head_dim]");
    k.k_cache = w.k_cache.data_ptr();
    k.v_cache = w.v_cache.data_ptr();
  }
  a.batch = B;
  a.hidden = hidden;
  a.mlp = mlp;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = hd;
  a.max_len = layers[0].k_cache.size(1);
  a.span = span;
  a.eps = static_cast<float>(eps);
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  at::Tensor pos = positions.reshape({-1}).contiguous(), freq = inv_freq.contiguous();
  a.positions = pos.data_ptr<int64_t>();
  a.inv_freq = freq.data_ptr<float>();
  a.h = h.data_ptr();
  at::Tensor tokens;
  if (ids.defined()) {
    TORCH_CHECK(ids.is_cuda() && ids.scalar_type() == at::kLong && ids.numel() == B && embedding.dim() == 2 &&
                    embedding.size(1) == hidden && embedding.scalar_type() == h.scalar_type() &&
                    embedding.is_contiguous() && reinterpret_cast<uintptr_t>(embedding.data_ptr()) % 16 == 0,
                "PersistentDecode: ids must be [", B, "] int64 on the GPU and the embedding a 16-byte aligned "
                "contiguous [vocab, ",
                hidden, "] of the model's dtype; got ids ", ids.sizes(), " and embedding ", embedding.sizes());
    tokens = ids.reshape({-1}).contiguous();
    a.ids = tokens.data_ptr<int64_t>();
    a.embedding = embedding.data_ptr();
    a.vocab = embedding.size(0);
  }
  if (final_norm.defined()) {
    TORCH_CHECK(final_norm.is_cuda() && final_norm.is_contiguous() && final_norm.numel() == hidden &&
                    final_norm.scalar_type() == h.scalar_type(),
                "PersistentDecode: the final norm's weight must be a contiguous [", hidden,
                "] of the model's dtype on the GPU; got ", final_norm.sizes());
    a.final_norm = final_norm.data_ptr();
  }
  // One zeroed buffer of 64-bit words, its parts 16-byte aligned: the
  // barrier's count (two words); the tagged partials and q/k/v outputs, a
  // word a value; the residual stream's fp32 sums after the attention, two
  // copies of [B, hidden], two floats a word. The kernel leaves it zero, so
  // the caller's `work`, where given, serves every step: made or grown here
  // (CUDA_AGENT_DECODE_KEEP_WORK=0: a new one every launch, a fill before
  // each; batch-1 decode on an H200 1953.3 tok/s against 1947.4, the fill
  // and its gap 2.3 us a step). The sums after the MLP (two copies) need no
  // zeros.
  const int64_t partials = AttentionPartialValues(B, kv_heads, kernels::DecodeLayersAttentionChunks(B, span, hd), hd);
  const int64_t qkv_values = B * (heads + 2 * kv_heads) * hd, copies = 2 * B * hidden;  // floats of a sum's copies
  const int64_t words = 2 + partials + qkv_values + copies / 2;
  static const bool keep = [] {
    const char* env = std::getenv("CUDA_AGENT_DECODE_KEEP_WORK");
    return !env || std::string(env) != "0";
  }();
  at::Tensor fresh;
  at::Tensor& zeroed = work && keep ? *work : fresh;
  if (!zeroed.defined() || zeroed.numel() < words || zeroed.device() != h.device())
    zeroed = at::zeros({words}, h.options().dtype(at::kLong));
  at::Tensor h_sums = at::empty({copies}, h.options().dtype(at::kFloat));
  int64_t* base = zeroed.data_ptr<int64_t>();
  a.barrier = reinterpret_cast<unsigned*>(base);
  a.partial = reinterpret_cast<uint64_t*>(base + 2);
  a.qkv = a.partial + partials;
  a.attn_sum = reinterpret_cast<float*>(a.qkv + qkv_values);
  a.h_sum = h_sums.data_ptr<float>();
  if (timeline.defined()) {
    TORCH_CHECK(timeline.is_cuda() && timeline.scalar_type() == at::kLong && timeline.is_contiguous() &&
                    timeline.numel() >= PersistentDecodeTimelineSize(a.num_layers, kernels::DecodeLayersBlocks()),
                "PersistentDecode: timeline must be a contiguous int64 CUDA tensor of 27 + (10 + 5 * SMs) * layers "
                "values");
    a.timeline = reinterpret_cast<unsigned long long*>(timeline.data_ptr<int64_t>());
  }
  Check(kernels::DecodeLayers(KernelDtype(h), a, Stream(h)), "persistent decode");
#else
  TORCH_CHECK(false, "PersistentDecode: built without the fused CUDA kernels");
#endif
}

at::Tensor SampleTokens(const at::Tensor& logits, const std::vector<double>& temperatures, at::Generator& generator,
                        at::Tensor* counters, at::Tensor* host) {
  TORCH_CHECK(logits.dim() == 2 && static_cast<int64_t>(temperatures.size()) == logits.size(0),
              "SampleTokens: logits [rows, vocab] and a temperature per row, got ", logits.sizes(), " and ",
              temperatures.size());
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  TORCH_CHECK(Fusable(logits), "SampleTokens: logits must be float32, bfloat16 or float16 on CUDA");
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  TORCH_CHECK(rows <= 65535 && vocab < (int64_t{1} << 24), "SampleTokens: at most 65535 rows of 2^24 tokens, got ",
              logits.sizes());
  at::Tensor z = logits.contiguous();
  auto on = z.options();
  at::Tensor out = at::empty({2, rows}, on.dtype(at::kFloat));
  CheckHostPicks(host, out);
  if (rows == 0) return out;
  // One temperature for all rows (the usual case) goes by value, not by copy.
  const bool uniform = std::all_of(temperatures.begin(), temperatures.end(),
                                   [&](double t) { return t == temperatures[0]; });
  at::Tensor per_row;
  if (!uniform) {  // through pinned memory: a copy from pageable memory would wait for the stream
    at::Tensor host = at::empty({rows}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    std::copy(temperatures.begin(), temperatures.end(), host.data_ptr<float>());
    per_row = host.to(z.device(), /*non_blocking=*/true);
  }
  const std::pair<uint64_t, uint64_t> seed_offset = PhiloxInputs(generator);
  at::Tensor work = at::empty({kernels::SampleTokensWorkFloats(rows, vocab)}, on.dtype(at::kFloat));
  at::Tensor own;
  at::Tensor& count = counters ? *counters : own;
  SampleCounters(count, rows, z.device());
  Check(kernels::SampleTokens(KernelDtype(z), z.data_ptr(), rows, vocab,
                              per_row.defined() ? per_row.data_ptr<float>() : nullptr,
                              static_cast<float>(temperatures[0]), seed_offset.first, seed_offset.second,
                              work.data_ptr<float>(), count.data_ptr<int>(), out.data_ptr<float>(),
                              host ? host->data_ptr<float>() : nullptr, Stream(z)),
        "sample tokens");
  return out;
#else
  (void)generator;
  (void)counters;
  (void)host;
  TORCH_CHECK(false, "SampleTokens: built without the fused CUDA kernels");
#endif
}

void StageDecodeInputs(const at::Tensor& staging, int64_t rows, const at::Tensor& picks, int64_t fed,
                       at::Tensor& inputs) {
  TORCH_CHECK(staging.dim() == 2 && staging.size(0) == 5 && staging.sizes() == inputs.sizes() &&
                  staging.scalar_type() == at::kLong && inputs.scalar_type() == at::kLong && rows >= 0 &&
                  rows <= inputs.size(1) && fed >= 0 && fed <= rows &&
                  (fed == 0 || (picks.defined() && picks.dim() == 2 && picks.size(0) == 2 &&
                                 picks.scalar_type() == at::kFloat)),
              "StageDecodeInputs: int64 staging and inputs [5, S], rows <= S, fed <= rows and fp32 picks [2, R]; got ",
              staging.sizes(), ", ", inputs.sizes(), ", rows ", rows, ", fed ", fed, ", picks ",
              picks.defined() ? picks.sizes() : at::IntArrayRef{});
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  if (inputs.is_cuda()) {
    TORCH_CHECK(staging.is_pinned() && staging.is_contiguous() && inputs.is_contiguous(),
                "StageDecodeInputs: contiguous staging in pinned memory and contiguous inputs");
    at::Tensor tokens = fed > 0 ? picks[0].contiguous() : at::Tensor();
    Check(kernels::StageDecodeInputs(staging.data_ptr<int64_t>(), rows, inputs.size(1),
                                     fed > 0 ? tokens.data_ptr<float>() : nullptr, fed, inputs.data_ptr<int64_t>(),
                                     Stream(inputs)),
          "stage decode inputs");
    return;
  }
#endif
  inputs.narrow(1, 0, rows).copy_(staging.narrow(1, 0, rows), /*non_blocking=*/true);
  if (fed == 0) return;
  at::Tensor ids = inputs[0];
  ids.index_copy_(0, inputs[2].narrow(0, 0, fed), picks[0].index_select(0, inputs[3].narrow(0, 0, fed)).to(at::kLong));
}

void CopyToPinned(const at::Tensor& src, at::Tensor& dst) {
  TORCH_CHECK(src.sizes() == dst.sizes() && src.scalar_type() == at::kFloat && dst.scalar_type() == at::kFloat,
              "CopyToPinned: fp32 tensors of one shape; got ", src.sizes(), " and ", dst.sizes());
#ifdef CUDA_AGENT_WITH_FUSED_KERNELS
  if (src.is_cuda()) {
    TORCH_CHECK(dst.is_pinned() && dst.is_contiguous(), "CopyToPinned: contiguous pinned memory to write");
    at::Tensor from = src.contiguous();
    Check(kernels::CopyToPinned(from.data_ptr<float>(), dst.data_ptr<float>(), from.numel(), Stream(from)),
          "copy to pinned memory");
    return;
  }
#endif
  dst.copy_(src, /*non_blocking=*/true);
}

}  // namespace cuda_agent::model
