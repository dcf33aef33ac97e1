// GPU time of each fused decode kernel alone (model/fused_ops.h) at one
// model's shapes, next to cuBLAS (at::linear) on the same weights, and the
// bandwidth each reaches: where a batch-1 decode step's time goes. Last, the
// persistent kernel over all layers and its time per layer.
//
//   decode_kernels_bench --batch 1 --span 384 --json out.json
//   decode_kernels_bench --shape qwen2.5-1.5b   # 28 layers of hidden 1536
//   CUDA_AGENT_DECODE_PDL=0 decode_kernels_bench ...   # without programmatic launch
//   ncu --kernel-name regex:Decode decode_kernels_bench --plain --iters 5
//
// Shapes (kShapes): Qwen2.5-0.5B or Qwen2.5-1.5B, bf16. Each kernel runs
// --iters times back to back under the profiler; the time is the kernel's
// mean duration.
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "kernel_profile.h"

#include "cuda_agent/model/fused_ops.h"

using namespace cuda_agent;

namespace {

bool plain = false;  // --plain: no profiler of our own (under ncu)

struct Shape {
  const char* name;
  int64_t hidden, mlp, heads, kv_heads, head_dim, layers;
};
constexpr Shape kShapes[] = {{"qwen2.5-0.5b", 896, 4864, 14, 2, 64, 24}, {"qwen2.5-1.5b", 1536, 8960, 12, 2, 128, 28}};

// Mean GPU microseconds per call of `fn` (all its kernels summed).
double MeanMicros(const std::function<void()>& fn, int iters) {
  for (int i = 0; i < 10; ++i) fn();
  at::zeros({1}, at::kCUDA).cpu();
  if (plain) {
    for (int i = 0; i < iters; ++i) fn();
    at::zeros({1}, at::kCUDA).cpu();
    return 0;
  }
  KernelProfile profile;
  for (int i = 0; i < iters; ++i) fn();
  at::zeros({1}, at::kCUDA).cpu();
  return profile.Stop(1)["gpu_ms_total"].get<double>() * 1e3 / iters;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fused decode kernels, one at a time"};
  int64_t batch = 1, span = 384, num_layers = 0;
  int iters = 200;
  std::string json_path, shape = kShapes[0].name;
  app.add_option("--shape", shape, "model shape")->check(CLI::IsMember({kShapes[0].name, kShapes[1].name}));
  app.add_option("--batch", batch, "rows (1..8)");
  app.add_option("--span", span, "cached key positions the attention reads");
  app.add_option("--layers", num_layers, "layers of the persistent kernel's run (default: the shape's)");
  app.add_option("--iters", iters, "calls timed per kernel");
  app.add_option("--json", json_path, "write results here");
  app.add_flag("--plain", plain, "run the kernels without timing them (for an external profiler such as ncu)");
  CLI11_PARSE(app, argc, argv);

  const Shape& m = shape == kShapes[0].name ? kShapes[0] : kShapes[1];
  const int64_t hidden = m.hidden, mlp = m.mlp, heads = m.heads, kv = m.kv_heads, hd = m.head_dim, vocab = 151936;
  if (num_layers <= 0) num_layers = m.layers;
  auto bf16 = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  auto w = [&](int64_t out, int64_t in) { return at::randn({out, in}, bf16) * 0.02; };
  const at::Tensor x = at::randn({batch, hidden}, bf16), xm = at::randn({batch, mlp}, bf16);
  const at::Tensor norm = at::ones({hidden}, bf16);
  struct Gemv {
    std::string name;
    at::Tensor x, norm;
    std::vector<model::LinearWeights> parts;
    bool swiglu;
    at::Tensor residual;
  };
  at::Tensor q = w(heads * hd, hidden), k = w(kv * hd, hidden), v = w(kv * hd, hidden);
  std::vector<Gemv> gemvs = {
      {"norm + qkv", x, norm, {{q, at::randn({heads * hd}, bf16)}, {k, at::randn({kv * hd}, bf16)},
                               {v, at::randn({kv * hd}, bf16)}}, false, {}},
      {"o + residual", x, {}, {{w(hidden, heads * hd), {}}}, false, x},
      {"norm + gate/up + SwiGLU", x, norm, {{w(mlp, hidden), {}}, {w(mlp, hidden), {}}}, true, {}},
      {"down + residual", xm, {}, {{w(hidden, mlp), {}}}, false, x},
      {"norm + LM head", x, norm, {{w(vocab, hidden), {}}}, false, {}},
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const Gemv& g : gemvs) {
    int64_t bytes = 0;
    for (const auto& p : g.parts) bytes += p.weight.nbytes() + (p.bias.defined() ? p.bias.nbytes() : 0);
    const double fused = MeanMicros(
        [&] { model::DecodeLinear(g.x, g.norm, 1e-6, g.parts, g.swiglu, g.residual); }, iters);
    // cuBLAS on the same bytes: one GEMV per part (no norm, no fusion).
    const double cublas = MeanMicros(
        [&] {
          for (const auto& p : g.parts) at::linear(g.x, p.weight, p.bias);
        },
        iters);
    rows.push_back({{"kernel", g.name}, {"weight_mb", bytes / 1e6}, {"fused_us", fused},
                    {"fused_tb_s", bytes / fused / 1e6}, {"cublas_us", cublas}, {"cublas_tb_s", bytes / cublas / 1e6}});
    std::printf("%-26s %8.2f MB  fused %8.2f us (%5.2f TB/s)  cuBLAS %8.2f us (%5.2f TB/s)\n", g.name.c_str(),
                bytes / 1e6, fused, bytes / fused / 1e6, cublas, bytes / cublas / 1e6);
  }
  // The final norm and the LM head in one kernel (DecodeHead: the head read
  // once, evict-first), the decode paths' LM head on CUDA in 16 bits.
  if (model::DecodeHeadFits(x, gemvs.back().parts[0].weight)) {
    const at::Tensor& head = gemvs.back().parts[0].weight;
    const double us = MeanMicros([&] { model::DecodeHead(x, norm, 1e-6, head); }, iters);
    rows.push_back({{"kernel", "norm + LM head, DecodeHead"}, {"weight_mb", head.nbytes() / 1e6}, {"fused_us", us},
                    {"fused_tb_s", head.nbytes() / us / 1e6}});
    std::printf("%-26s %8.2f MB  fused %8.2f us (%5.2f TB/s)\n", "norm + LM head, DecodeHead", head.nbytes() / 1e6,
                us, head.nbytes() / us / 1e6);
  }
  // The batch-1 LM head of a normed row (HeadRow: the head streamed once,
  // evict-first), the persistent decode's head at batch 1. Timed back to back
  // as cuBLAS's GEMV above: the launches overlap (programmatic dependent
  // launch) as they do after the persistent kernel.
  if (model::HeadRowFits(x.narrow(0, 0, 1), gemvs.back().parts[0].weight)) {
    const at::Tensor& head = gemvs.back().parts[0].weight;
    const at::Tensor row = x.narrow(0, 0, 1).contiguous();
    const double us = MeanMicros([&] { model::HeadRow(row, head); }, iters);
    rows.push_back({{"kernel", "LM head, HeadRow (1 row)"}, {"weight_mb", head.nbytes() / 1e6}, {"fused_us", us},
                    {"fused_tb_s", head.nbytes() / us / 1e6}});
    std::printf("%-26s %8.2f MB  fused %8.2f us (%5.2f TB/s)\n", "LM head, HeadRow (1 row)", head.nbytes() / 1e6, us,
                head.nbytes() / us / 1e6);
  }
  // Attention over `span` cached positions per row.
  const int64_t max_len = span + 8;
  at::Tensor qkv = at::randn({batch, (heads + 2 * kv) * hd}, bf16);
  at::Tensor k_cache = at::randn({batch, max_len, kv, hd}, bf16), v_cache = at::randn({batch, max_len, kv, hd}, bf16);
  at::Tensor positions = at::full({batch}, span - 1, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
  at::Tensor inv_freq = at::ones({hd / 2}, at::TensorOptions().device(at::kCUDA));
  at::Tensor counters = at::zeros({batch * kv}, at::TensorOptions().device(at::kCUDA).dtype(at::kInt));
  const double attention = MeanMicros(
      [&] {
        model::DecodeAttention(qkv, positions, inv_freq, {}, {}, 1e-6, k_cache, v_cache, heads, kv, span, counters);
      },
      iters);
  const double kv_bytes = 2.0 * batch * span * kv * hd * 2;
  rows.push_back({{"kernel", "attention"}, {"kv_mb", kv_bytes / 1e6}, {"fused_us", attention}});
  std::printf("%-26s %8.2f MB  fused %8.2f us\n", "attention", kv_bytes / 1e6, attention);
  // The persistent kernel over --layers layers of this shape, and its time per layer
  // against the bytes each layer reads.
  std::vector<model::DecodeLayerWeights> layers(static_cast<size_t>(num_layers));
  for (auto& l : layers) {
    l.input_norm = norm;
    l.post_norm = norm;
    l.q = {w(heads * hd, hidden), at::randn({heads * hd}, bf16)};
    l.k = {w(kv * hd, hidden), at::randn({kv * hd}, bf16)};
    l.v = {w(kv * hd, hidden), at::randn({kv * hd}, bf16)};
    l.o = {w(hidden, heads * hd), {}};
    l.gate = {w(mlp, hidden), {}};
    l.up = {w(mlp, hidden), {}};
    l.down = {w(hidden, mlp), {}};
    l.k_cache = at::randn({batch, max_len, kv, hd}, bf16);
    l.v_cache = at::randn({batch, max_len, kv, hd}, bf16);
  }
  at::Tensor h0 = at::randn({batch, hidden}, bf16);
  const double persistent = MeanMicros(
      [&] {
        at::Tensor h = h0.clone();
        model::PersistentDecode(h, layers, positions, inv_freq, 1e-6, heads, kv, mlp, span);
      },
      iters);
  const double layer_mb = ((heads + 2 * kv) * hd * hidden + heads * hd * hidden + 3.0 * mlp * hidden) * 2 / 1e6;
  // Where a layer's time goes: block 0's clock at the end of each stage's
  // work and of the barrier after it, averaged over runs and layers.
  const char* stages[5] = {"norm + qkv", "attention", "o, in attention", "norm + gate/up", "down, in gate/up"};
  const int64_t blocks = model::PersistentDecodeBlocks();
  at::Tensor timeline = at::zeros({model::PersistentDecodeTimelineSize(num_layers, blocks)},
                                  at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
  std::vector<double> work(5), wait(5);
  // Every block's arrival at each stage's end against the first block's:
  // the median's and the last's lag, and how often each block is the last.
  std::vector<double> median_lag(5), last_lag(5);
  // At a grid barrier: block 0's exit after the last block's arrival (the
  // barrier's own latency, the spread of the ends left out), and block 0's
  // end after the first block's.
  std::vector<double> exit_after_last(5), own_lag(5);
  std::vector<std::vector<int>> last_counts(5, std::vector<int>(static_cast<size_t>(blocks)));
  std::vector<double> phases(20);    // per stage: 4 phases of its work, us a layer
  std::vector<double> ring_full(5);  // the copies of a stage's tiles waiting for room, us a layer
  double mhz = 0;  // block 0's SM clock over the step
  const int timed_runs = plain ? 0 : 20;
  for (int r = 0; r < timed_runs; ++r) {
    at::Tensor h = h0.clone();
    timeline.zero_();
    model::PersistentDecode(h, layers, positions, inv_freq, 1e-6, heads, kv, mlp, span, timeline);
    at::Tensor t = timeline.cpu();
    const int64_t* ns = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < 5 * num_layers; ++i) {
      work[i % 5] += (ns[1 + 2 * i] - ns[2 * i]) / 1e3 / timed_runs / num_layers;
      wait[i % 5] += (ns[2 + 2 * i] - ns[1 + 2 * i]) / 1e3 / timed_runs / num_layers;
    }
    const int64_t end = 10 * num_layers;
    const double cycles_per_us = static_cast<double>(ns[end + 2] - ns[end + 1]) / (ns[end] - ns[0]) * 1e3;
    mhz += cycles_per_us / timed_runs;
    for (int i = 0; i < 20; ++i) phases[i] += ns[end + 3 + i] / cycles_per_us / timed_runs / num_layers;
    const int gemv_stage[4] = {0, 2, 3, 4};  // q/k/v, o, gate/up, down among the five
    for (int i = 0; i < 4; ++i)
      ring_full[gemv_stage[i]] += ns[end + 23 + i] / cycles_per_us / timed_runs / num_layers;
    for (int64_t i = 0; i < 5 * num_layers; ++i) {
      std::vector<int64_t> arrived(ns + end + 27 + i * blocks, ns + end + 27 + (i + 1) * blocks);
      const auto last = std::max_element(arrived.begin(), arrived.end());
      ++last_counts[i % 5][static_cast<size_t>(last - arrived.begin())];
      const int64_t first = *std::min_element(arrived.begin(), arrived.end()), latest = *last;
      std::nth_element(arrived.begin(), arrived.begin() + blocks / 2, arrived.end());
      median_lag[i % 5] += (arrived[static_cast<size_t>(blocks / 2)] - first) / 1e3 / timed_runs / num_layers;
      last_lag[i % 5] += (latest - first) / 1e3 / timed_runs / num_layers;
      exit_after_last[i % 5] += (static_cast<int64_t>(ns[2 + 2 * i]) - latest) / 1e3 / timed_runs / num_layers;
      own_lag[i % 5] += (ns[end + 27 + i * blocks] - first) / 1e3 / timed_runs / num_layers;
    }
  }
  nlohmann::json breakdown = nlohmann::json::array();
  for (int s = 0; s < 5; ++s) {
    breakdown.push_back({{"stage", stages[s]}, {"work_us", work[s]}, {"barrier_us", wait[s]}});
    std::printf("  persistent %-18s work %6.2f us  barrier %6.2f us (block 0, a layer)\n", stages[s], work[s],
                wait[s]);
    std::printf("    phases (thread 0) %s %5.2f  %s %5.2f  %s %5.2f  %s %5.2f us\n", s == 1 ? "heads" : "input",
                phases[4 * s], s == 1 ? "keys" : "weights", phases[4 * s + 1], s == 1 ? "softmax" : "dots",
                phases[4 * s + 2], s == 1 ? "count" : "outputs", phases[4 * s + 3]);
    breakdown.back()["phases_us"] = {phases[4 * s], phases[4 * s + 1], phases[4 * s + 2], phases[4 * s + 3]};
    if (s != 1) {
      std::printf("    its weight copies waited %5.2f us for room in the ring\n", ring_full[s]);
      breakdown.back()["ring_full_us"] = ring_full[s];
    }
    // The three blocks most often last to end the stage.
    std::vector<int> order(static_cast<size_t>(blocks));
    for (int i = 0; i < blocks; ++i) order[static_cast<size_t>(i)] = i;
    std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                      [&](int x, int y) { return last_counts[s][x] > last_counts[s][y]; });
    std::printf("    blocks' ends after the first's: median %5.2f us, last %5.2f us; last most often: "
                "block %d (%d), %d (%d), %d (%d) of %d\n",
                median_lag[s], last_lag[s], order[0], last_counts[s][order[0]], order[1], last_counts[s][order[1]],
                order[2], last_counts[s][order[2]], static_cast<int>(timed_runs * num_layers));
    if (s == 2 || s == 4) {  // the stages that end at a grid barrier
      std::printf("    block 0's end after the first's %5.2f us; its exit after the last's end %5.2f us\n",
                  own_lag[s], exit_after_last[s]);
      breakdown.back()["block0_end_lag_us"] = own_lag[s];
      breakdown.back()["exit_after_last_end_us"] = exit_after_last[s];
    }
    breakdown.back()["median_end_lag_us"] = median_lag[s];
    breakdown.back()["last_end_lag_us"] = last_lag[s];
  }
  std::printf("  persistent SM clock %.0f MHz (block 0)\n", mhz);
  rows.push_back({{"kernel", "persistent"}, {"layers", num_layers}, {"us", persistent}, {"sm_mhz", mhz},
                  {"us_per_layer", persistent / num_layers}, {"layer_weight_mb", layer_mb}, {"stages", breakdown}});
  std::printf("%-26s %8.2f MB/layer  %d layers %8.2f us (%6.2f us a layer, %5.2f TB/s)\n", "persistent", layer_mb,
              static_cast<int>(num_layers), persistent, persistent / num_layers,
              layer_mb * num_layers / persistent);
  if (!json_path.empty())
    std::ofstream(json_path)
        << nlohmann::json{{"shape", shape}, {"batch", batch}, {"span", span}, {"rows", rows}}.dump(1) << "\n";
  return 0;
}
