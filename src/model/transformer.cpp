#include "cuda_agent/model/transformer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "cuda_agent/model/fused_ops.h"
#include "cuda_agent/model/safetensors.h"
#include "cuda_agent/util/file.h"

namespace cuda_agent::model {
namespace fs = std::filesystem;

namespace {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  enum Init { kNormal, kOnes, kZeros } init;
};

// Every parameter of `c`, in Hugging Face's names and order.
std::vector<ParamSpec> Specs(const ModelConfig& c, bool value_head) {
  int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  std::vector<ParamSpec> s{{"model.embed_tokens.weight", {c.vocab_size, h}, ParamSpec::kNormal}};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    s.push_back({p + "input_layernorm.weight", {h}, ParamSpec::kOnes});
    s.push_back({p + "self_attn.q_proj.weight", {q, h}, ParamSpec::kNormal});
    s.push_back({p + "self_attn.k_proj.weight", {kv, h}, ParamSpec::kNormal});
    s.push_back({p + "self_attn.v_proj.weight", {kv, h}, ParamSpec::kNormal});
    if (c.attention_bias) {
      s.push_back({p + "self_attn.q_proj.bias", {q}, ParamSpec::kZeros});
      s.push_back({p + "self_attn.k_proj.bias", {kv}, ParamSpec::kZeros});
      s.push_back({p + "self_attn.v_proj.bias", {kv}, ParamSpec::kZeros});
    }
    s.push_back({p + "self_attn.o_proj.weight", {h, q}, ParamSpec::kNormal});
    if (c.o_bias) s.push_back({p + "self_attn.o_proj.bias", {h}, ParamSpec::kZeros});
    if (c.qk_norm) {
      s.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, ParamSpec::kOnes});
      s.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, ParamSpec::kOnes});
    }
    s.push_back({p + "post_attention_layernorm.weight", {h}, ParamSpec::kOnes});
    s.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}, ParamSpec::kNormal});
    s.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}, ParamSpec::kNormal});
    s.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}, ParamSpec::kNormal});
    if (c.mlp_bias) {
      s.push_back({p + "mlp.gate_proj.bias", {c.intermediate_size}, ParamSpec::kZeros});
      s.push_back({p + "mlp.up_proj.bias", {c.intermediate_size}, ParamSpec::kZeros});
      s.push_back({p + "mlp.down_proj.bias", {h}, ParamSpec::kZeros});
    }
  }
  s.push_back({"model.norm.weight", {h}, ParamSpec::kOnes});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, h}, ParamSpec::kNormal});
  if (value_head) {
    s.push_back({"value_head.weight", {1, h}, ParamSpec::kNormal});
    s.push_back({"value_head.bias", {1}, ParamSpec::kZeros});
  }
  return s;
}

StatusOr<c10::ScalarType> ScalarTypeOf(const std::string& dtype) {
  if (dtype == "F32") return c10::kFloat;
  if (dtype == "BF16") return c10::kBFloat16;
  if (dtype == "F16") return c10::kHalf;
  if (dtype == "F64") return c10::kDouble;
  return InvalidArgument("dtype " + dtype + " is not a floating-point weight type");
}

std::string SafetensorsDtype(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat:
      return "F32";
    case c10::kBFloat16:
      return "BF16";
    case c10::kHalf:
      return "F16";
    default:
      return "F64";
  }
}

std::string TorchDtypeName(c10::ScalarType t) {
  return t == c10::kBFloat16 ? "bfloat16" : t == c10::kHalf ? "float16" : "float32";
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// RMSNorm. On CUDA one fused kernel (fp32 statistics and arithmetic, one
// rounding); elsewhere as transformers does it: in fp32, back to the input
// dtype, then the weight.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (x.is_cuda()) return at::rms_norm(x, {x.size(-1)}, weight, eps);
  at::Tensor h = at::rms_norm(x.to(at::kFloat), {x.size(-1)}, {}, eps);
  return weight * h.to(x.scalar_type());
}

// Inverse frequencies of the rotary embedding, with the configured scaling.
at::Tensor InverseFrequencies(const ModelConfig& c, c10::Device device) {
  auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor inv = 1.0 / at::pow(c.rope_theta, at::arange(0, c.head_dim, 2, at::TensorOptions().dtype(at::kLong))
                                                   .to(at::kFloat)
                                                   .div(static_cast<double>(c.head_dim)));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == "linear") inv = inv / rs.factor;
  if (rs.type == "llama3") {
    double old_len = static_cast<double>(rs.original_max_position_embeddings);
    double low_wavelen = old_len / rs.low_freq_factor, high_wavelen = old_len / rs.high_freq_factor;
    at::Tensor wavelen = 2 * M_PI / inv;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv / rs.factor, inv);
    at::Tensor smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled;
    at::Tensor medium = at::logical_not(wavelen < high_wavelen).logical_and(at::logical_not(wavelen > low_wavelen));
    inv = at::where(medium, smoothed, scaled);
  }
  return inv.to(options);
}

}  // namespace

KvCache KvCache::Allocate(const ModelConfig& c, int64_t slots, int64_t max_len, c10::ScalarType dtype,
                          c10::Device device) {
  KvCache cache;
  cache.slots = slots;
  cache.max_len = max_len;
  auto options = at::TensorOptions().dtype(dtype).device(device);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    cache.k.push_back(at::zeros({slots, max_len, c.num_kv_heads, c.head_dim}, options));
    cache.v.push_back(at::zeros({slots, max_len, c.num_kv_heads, c.head_dim}, options));
  }
  return cache;
}

struct Transformer::Impl {
  ModelConfig config;
  LoadOptions options;
  std::vector<std::pair<std::string, at::Tensor>> params;
  std::map<std::string, at::Tensor> by_name;
  at::Tensor inv_freq;

  const at::Tensor& P(const std::string& name) const { return by_name.at(name); }
  at::Tensor Opt(const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? at::Tensor() : it->second;
  }

  void Index() {
    for (auto& [name, t] : params) by_name[name] = t;
    inv_freq = InverseFrequencies(config, options.device);
  }

  const at::Tensor& Head() const {
    return config.tie_word_embeddings ? P("model.embed_tokens.weight") : P("lm_head.weight");
  }

  // Layer i's weights and caches, for the fused decode paths.
  DecodeLayerWeights DecodeWeights(int64_t i, KvCache& cache) const {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto linear = [&](const std::string& name) {
      return LinearWeights{P(p + name + ".weight"), Opt(p + name + ".bias")};
    };
    DecodeLayerWeights w;
    w.input_norm = P(p + "input_layernorm.weight");
    w.post_norm = P(p + "post_attention_layernorm.weight");
    if (config.qk_norm) {
      w.q_norm = P(p + "self_attn.q_norm.weight");
      w.k_norm = P(p + "self_attn.k_norm.weight");
    }
    w.q = linear("self_attn.q_proj");
    w.k = linear("self_attn.k_proj");
    w.v = linear("self_attn.v_proj");
    w.o = linear("self_attn.o_proj");
    w.gate = linear("mlp.gate_proj");
    w.up = linear("mlp.up_proj");
    w.down = linear("mlp.down_proj");
    w.k_cache = cache.k[static_cast<size_t>(i)];
    w.v_cache = cache.v[static_cast<size_t>(i)];
    return w;
  }

  // The final norm and the LM head of the decode paths, into *out where
  // given. The LM head is one large GEMV (136M weights for Qwen2.5-0.5B),
  // which cuBLAS streams faster than DecodeLinear does, and so far than
  // DecodeHead (the norm and the head in one kernel, the head evict-first
  // in L2): 1636.1 against 1574.6 tok/s at batch 1 on an H200. With
  // CUDA_AGENT_DECODE_HEAD=1 the decode paths take DecodeHead where it fits
  // (not the persistent one, which norms in its kernel).
  at::Tensor DecodeLogits(const at::Tensor& h, at::Tensor* out) const {
    static const bool head_kernel = [] {
      const char* env = std::getenv("CUDA_AGENT_DECODE_HEAD");
      return env && std::string(env) == "1";
    }();
    if (head_kernel && DecodeHeadFits(h, Head()))
      return DecodeHead(h, P("model.norm.weight"), config.rms_norm_eps, Head(), out);
    return HeadLogits(RmsNorm(h, P("model.norm.weight"), config.rms_norm_eps), out);
  }
  // The LM head of the normed x, into *out where given (the persistent
  // decode norms in its kernel).
  at::Tensor HeadLogits(const at::Tensor& x, at::Tensor* out) const {
    return out ? at::linear_out(*out, x, Head()) : at::linear(x, Head());
  }
};

Transformer::Transformer() : impl_(std::make_unique<Impl>()) {}
Transformer::~Transformer() = default;

std::unique_ptr<Transformer> Transformer::Random(const ModelConfig& config, const LoadOptions& options, uint64_t seed) {
  std::unique_ptr<Transformer> t(new Transformer());
  t->impl_->config = config;
  t->impl_->options = options;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const auto& s : Specs(config, options.value_head)) {
    at::Tensor p = s.init == ParamSpec::kOnes    ? at::ones(s.shape)
                   : s.init == ParamSpec::kZeros ? at::zeros(s.shape)
                                                 : at::normal(0.0, 0.02, s.shape, gen);
    t->impl_->params.emplace_back(s.name, p.to(options.device, options.dtype));
  }
  t->impl_->Index();
  return t;
}

StatusOr<std::unique_ptr<Transformer>> Transformer::Load(const fs::path& dir, const LoadOptions& options) {
  CA_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  CA_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(dir));
  std::unique_ptr<Transformer> t(new Transformer());
  t->impl_->config = config;
  t->impl_->options = options;
  std::set<std::string> used;
  for (const auto& s : Specs(config, false)) {
    CA_ASSIGN_OR_RETURN(TensorView v, reader->Get(s.name));
    if (v.shape != s.shape)
      return InvalidArgument(v.file.string() + ": tensor " + s.name + " has shape " + ShapeString(v.shape) +
                             ", but config.json implies " + ShapeString(s.shape));
    auto type = ScalarTypeOf(v.dtype);
    if (!type.ok()) return InvalidArgument(v.file.string() + ": tensor " + s.name + ": " + type.status().message());
    at::Tensor host = at::from_blob(const_cast<void*>(v.data), v.shape, at::TensorOptions().dtype(*type));
    t->impl_->params.emplace_back(s.name, host.to(options.device, options.dtype, false, /*copy=*/true));
    used.insert(s.name);
  }
  std::vector<std::string> unknown;
  for (const auto& name : reader->Names()) {
    if (used.count(name) || name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;  // some tied checkpoints store it
    if (name.rfind("value_head.", 0) == 0 && options.value_head) continue;
    unknown.push_back(name);
  }
  if (!unknown.empty())
    return InvalidArgument(dir.string() + ": tensors the " + config.model_type +
                           " architecture does not use: " + unknown.front() +
                           (unknown.size() > 1 ? " and " + std::to_string(unknown.size() - 1) + " more" : ""));
  if (options.value_head) {
    if (reader->Has("value_head.weight")) {
      for (const char* name : {"value_head.weight", "value_head.bias"}) {
        CA_ASSIGN_OR_RETURN(TensorView v, reader->Get(name));
        CA_ASSIGN_OR_RETURN(c10::ScalarType type, ScalarTypeOf(v.dtype));
        at::Tensor host = at::from_blob(const_cast<void*>(v.data), v.shape, at::TensorOptions().dtype(type));
        t->impl_->params.emplace_back(name, host.to(options.device, options.dtype, false, true));
      }
    } else {  // a new head on a pretrained trunk
      auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
      t->impl_->params.emplace_back(
          "value_head.weight", at::normal(0.0, 0.02, {1, config.hidden_size}, gen).to(options.device, options.dtype));
      t->impl_->params.emplace_back("value_head.bias", at::zeros({1}).to(options.device, options.dtype));
    }
  }
  t->impl_->Index();
  return t;
}

// The layers, with attention left to `attend(layer, q, k, v)`: q, k, v are
// [B, T, heads, head_dim] with rotary applied; it returns the attention output
// as at::scaled_dot_product_attention lays it out, [B, heads, T, head_dim].
template <typename Attend>
at::Tensor Transformer::Run(const at::Tensor& ids, const at::Tensor& positions, at::Tensor* values,
                            Attend&& attend) const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.config;
  const int64_t B = ids.size(0), T = ids.size(1);
  const double eps = c.rms_norm_eps;

  at::Tensor h = at::embedding(m.P("model.embed_tokens.weight"), ids);
  // Rotary tables for these positions, computed in fp32 as transformers does.
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * m.inv_freq;  // [B, T, hd/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(2);               // [B, T, 1, hd]
  at::Tensor cos = emb.cos().to(h.scalar_type()), sin = emb.sin().to(h.scalar_type());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    at::Tensor x = RmsNorm(h, m.P(p + "input_layernorm.weight"), eps);
    at::Tensor q = at::linear(x, m.P(p + "self_attn.q_proj.weight"), m.Opt(p + "self_attn.q_proj.bias"))
                       .view({B, T, c.num_heads, c.head_dim});
    at::Tensor k = at::linear(x, m.P(p + "self_attn.k_proj.weight"), m.Opt(p + "self_attn.k_proj.bias"))
                       .view({B, T, c.num_kv_heads, c.head_dim});
    at::Tensor v = at::linear(x, m.P(p + "self_attn.v_proj.weight"), m.Opt(p + "self_attn.v_proj.bias"))
                       .view({B, T, c.num_kv_heads, c.head_dim});
    if (c.qk_norm) {
      q = RmsNorm(q, m.P(p + "self_attn.q_norm.weight"), eps);
      k = RmsNorm(k, m.P(p + "self_attn.k_norm.weight"), eps);
    }
    q = ApplyRotary(q, cos, sin);
    k = ApplyRotary(k, cos, sin);
    at::Tensor attn = attend(i, q, k, v).transpose(1, 2).reshape({B, T, c.num_heads * c.head_dim});
    h = h + at::linear(attn, m.P(p + "self_attn.o_proj.weight"), m.Opt(p + "self_attn.o_proj.bias"));
    x = RmsNorm(h, m.P(p + "post_attention_layernorm.weight"), eps);
    at::Tensor gate = at::linear(x, m.P(p + "mlp.gate_proj.weight"), m.Opt(p + "mlp.gate_proj.bias"));
    at::Tensor up = at::linear(x, m.P(p + "mlp.up_proj.weight"), m.Opt(p + "mlp.up_proj.bias"));
    h = h + at::linear(SwiGlu(gate, up), m.P(p + "mlp.down_proj.weight"), m.Opt(p + "mlp.down_proj.bias"));
  }
  h = RmsNorm(h, m.P("model.norm.weight"), eps);
  if (values != nullptr && m.by_name.count("value_head.weight"))
    *values = at::linear(h, m.P("value_head.weight"), m.P("value_head.bias")).squeeze(-1);
  return at::linear(h, m.Head());
}

at::Tensor Transformer::Forward(const at::Tensor& ids, const at::Tensor& positions, KvCache* cache,
                                const at::Tensor& slots, at::Tensor* values) const {
  const ModelConfig& c = impl_->config;
  const int64_t B = ids.size(0), T = ids.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  if (cache == nullptr) {
    return Run(ids, positions, values, [&](int64_t, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), {}, 0.0, true,
                                              scale, true);
    });
  }
  const bool leading_slots = slots.equal(at::arange(B, slots.options()));  // the cache rows need no gather
  const int64_t span = positions.max().item<int64_t>() + 1;                // keys any query here may see
  at::Tensor key_pos = at::arange(span, positions.options());
  at::Tensor mask = key_pos.view({1, 1, 1, span}) <= positions.view({B, 1, T, 1});  // [B, 1, T, span]
  at::Tensor slot_rows = slots.view({B, 1}).expand({B, T});
  return Run(ids, positions, values, [&](int64_t i, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    cache->k[i].index_put_({slot_rows, positions}, k);
    cache->v[i].index_put_({slot_rows, positions}, v);
    auto rows = [&](const at::Tensor& t) {
      return (leading_slots ? t.narrow(0, 0, B) : t.index_select(0, slots)).narrow(1, 0, span).transpose(1, 2);
    };
    return at::scaled_dot_product_attention(q.transpose(1, 2), rows(cache->k[i]), rows(cache->v[i]), mask, 0.0, false,
                                            scale, true);
  });
}

namespace {
// Each kind of decode kernels by its name on command lines.
const std::pair<const char*, DecodeKernels> kDecodeKernelsByName[] = {
    {"aten", DecodeKernels::kAten}, {"fused", DecodeKernels::kFused}, {"persistent", DecodeKernels::kPersistent}};
}  // namespace

const std::vector<std::string>& DecodeKernelsNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const auto& [name, kind] : kDecodeKernelsByName) all.push_back(name);
    return all;
  }();
  return names;
}

StatusOr<DecodeKernels> ParseDecodeKernels(const std::string& name) {
  std::string known;
  for (const auto& [each, kind] : kDecodeKernelsByName) {
    if (name == each) return kind;
    known += (known.empty() ? "" : ", ") + std::string(each);
  }
  return InvalidArgument("unknown decode kernels '" + name + "' (" + known + ")");
}

at::Tensor Transformer::Decode(const at::Tensor& ids, const at::Tensor& positions, KvCache& cache, int64_t span,
                               DecodeKernels kernels, at::Tensor* logits, RowPick* pick) const {
  const ModelConfig& c = impl_->config;
  const int64_t B = ids.size(0), kv = c.num_kv_heads, group = c.num_heads / c.num_kv_heads, hd = c.head_dim;
  const bool small = ids.is_cuda() && B <= FusedDecodeMaxRows();
  if (DecodesInOneKernel(B, span, kernels)) return DecodePersistent(ids, positions, cache, span, logits, pick);
  if (kernels == DecodeKernels::kFused && small && FusedDecodeFits(c.num_heads, kv, hd))
    return DecodeFused(ids, positions, cache, span, logits);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  at::Tensor pos = positions.view({B});
  at::Tensor flat = at::arange(B, pos.options()) * cache.max_len + pos;  // row b -> (slot b, its position)
  // Additive, made once for all layers (a boolean mask is converted per call).
  at::Tensor visible = at::arange(span, pos.options()).view({1, 1, 1, span}) <= pos.view({B, 1, 1, 1});
  at::Tensor mask = at::zeros({B, 1, 1, span}, pos.options().dtype(impl_->options.dtype))
                        .masked_fill_(visible.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor out =
      Run(ids, positions, nullptr, [&](int64_t i, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        cache.k[i].view({-1, kv, hd}).index_copy_(0, flat, k.view({B, kv, hd}));
        cache.v[i].view({-1, kv, hd}).index_copy_(0, flat, v.view({B, kv, hd}));
        // One query position per row: the `group` query heads that share a key
        // head become `group` queries against it, so no key or value is repeated.
        at::Tensor kk = cache.k[i].narrow(0, 0, B).narrow(1, 0, span).transpose(1, 2);  // [B, kv, span, hd]
        at::Tensor vv = cache.v[i].narrow(0, 0, B).narrow(1, 0, span).transpose(1, 2);
        return at::scaled_dot_product_attention(q.reshape({B, kv, group, hd}), kk, vv, mask, 0.0, false, scale)
            .reshape({B, c.num_heads, 1, hd});
      });
  return logits ? logits->copy_(out.select(1, 0)) : out.select(1, 0);
}

bool Transformer::DecodesInOneKernel(int64_t B, int64_t span, DecodeKernels kernels) const {
  const ModelConfig& c = impl_->config;
  return kernels == DecodeKernels::kPersistent && impl_->options.device.is_cuda() && B <= FusedDecodeMaxRows() &&
         PersistentDecodeFits(impl_->options.dtype, B, span, c.num_layers, c.hidden_size, c.intermediate_size,
                              c.num_heads, c.num_kv_heads, c.head_dim);
}

// Five kernels per layer (fused_ops.h): norm + q/k/v projections; q/k norm,
// rotary, cache write and attention; output projection + residual; norm +
// gate/up projections + SwiGLU; down projection + residual.
at::Tensor Transformer::DecodeFused(const at::Tensor& ids, const at::Tensor& positions, KvCache& cache,
                                    int64_t span, at::Tensor* logits) const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.config;
  const double eps = c.rms_norm_eps;
  at::Tensor h = at::embedding(m.P("model.embed_tokens.weight"), ids.view({-1}));  // [B, hidden]
  at::Tensor counters = at::zeros({c.num_layers, ids.size(0) * c.num_kv_heads}, ids.options().dtype(at::kInt));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    DecodeLayerWeights w = m.DecodeWeights(i, cache);
    at::Tensor qkv = DecodeLinear(h, w.input_norm, eps, {w.q, w.k, w.v}, false, {});
    at::Tensor attn = DecodeAttention(qkv, positions, m.inv_freq, w.q_norm, w.k_norm, eps, w.k_cache, w.v_cache,
                                      c.num_heads, c.num_kv_heads, span, counters[i]);
    h = DecodeLinear(attn, {}, eps, {w.o}, false, h);
    at::Tensor act = DecodeLinear(h, w.post_norm, eps, {w.gate, w.up}, true, {});
    h = DecodeLinear(act, {}, eps, {w.down}, false, h);
  }
  return m.DecodeLogits(h, logits);
}

// Every layer in one persistent kernel (fused_ops.h), then the final norm
// and the LM head.
at::Tensor Transformer::DecodePersistent(const at::Tensor& ids, const at::Tensor& positions, KvCache& cache,
                                         int64_t span, at::Tensor* logits, RowPick* pick) const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.config;
  std::vector<DecodeLayerWeights> layers;
  for (int64_t i = 0; i < c.num_layers; ++i) layers.push_back(m.DecodeWeights(i, cache));
  // The kernel reads the tokens' embeddings itself where it can (16-byte
  // rows): no lookup kernel and no gap before it.
  const at::Tensor& embedding = m.P("model.embed_tokens.weight");
  if (embedding.is_contiguous() && reinterpret_cast<uintptr_t>(embedding.data_ptr()) % 16 == 0) {
    at::Tensor h = at::empty({ids.size(0), c.hidden_size}, embedding.options());  // [B, hidden], its output
    PersistentDecode(h, layers, positions, m.inv_freq, c.rms_norm_eps, c.num_heads, c.num_kv_heads, c.intermediate_size,
                     span, {}, ids, embedding, m.P("model.norm.weight"), &cache.decode_work);
    // h normed in the kernel; at batch 1 the head as its dependent (HeadRow).
    if (HeadRowFits(h, m.Head())) return HeadRow(h, m.Head(), logits, pick);
    return m.HeadLogits(h, logits);
  }
  at::Tensor h = at::embedding(embedding, ids.view({-1})).contiguous();  // [B, hidden]
  PersistentDecode(h, layers, positions, m.inv_freq, c.rms_norm_eps, c.num_heads, c.num_kv_heads, c.intermediate_size,
                   span, {}, {}, {}, {}, &cache.decode_work);
  return m.DecodeLogits(h, logits);
}

const std::vector<std::pair<std::string, at::Tensor>>& Transformer::parameters() const { return impl_->params; }
const ModelConfig& Transformer::config() const { return impl_->config; }
const LoadOptions& Transformer::options() const { return impl_->options; }

Status Transformer::Save(const fs::path& dir, const fs::path& tokenizer_dir, bool with_value_head) const {
  CA_RETURN_IF_ERROR(MakeDirs(dir));
  nlohmann::json config = impl_->config.raw;
  config["torch_dtype"] = TorchDtypeName(impl_->options.dtype);
  CA_RETURN_IF_ERROR(WriteFileAtomic(dir / "config.json", config.dump(2) + "\n"));
  std::vector<TensorBytes> tensors;
  for (const auto& [name, p] : impl_->params) {
    if (!with_value_head && name.rfind("value_head.", 0) == 0) continue;
    at::Tensor host = p.detach().to(at::kCPU).contiguous();
    TensorBytes t{name, SafetensorsDtype(host.scalar_type()), host.sizes().vec(),
                  std::string(static_cast<const char*>(host.data_ptr()), host.nbytes())};
    tensors.push_back(std::move(t));
  }
  CA_RETURN_IF_ERROR(WriteSafetensors(dir / "model.safetensors", tensors, {{"format", "pt"}}));
  if (!tokenizer_dir.empty()) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                          "generation_config.json", "chat_template.jinja"}) {
      if (!fs::exists(tokenizer_dir / f)) continue;
      CA_ASSIGN_OR_RETURN(std::string text, ReadFile(tokenizer_dir / f));
      CA_RETURN_IF_ERROR(WriteFileAtomic(dir / f, text));
    }
  }
  return Status::Ok();
}

}  // namespace cuda_agent::model
