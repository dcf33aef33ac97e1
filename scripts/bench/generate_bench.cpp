// Decode throughput of the policy's generator on one model and device.
//
//   generate_bench --model DIR --device cuda --dtype bfloat16 --batch 1 --batch 16 --batch 64
//                  --prompt-len 128 --new-tokens 512 --json out.json
//
// Per batch size: `batch` random prompts, greedy, no stop tokens, so every
// sequence generates exactly --new-tokens. The first Step() prefills all
// prompts; decode tokens/s counts the steps after it. On CUDA the decode steps
// replay CUDA graphs unless --cuda-graphs 0.
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "kernel_profile.h"

#include "cuda_agent/model/generate.h"

using namespace cuda_agent;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"generator decode throughput"};
  std::string model_dir, device = "cpu", dtype = "bfloat16", json_path;
  std::vector<int64_t> batches{1};
  int64_t prompt_len = 128, new_tokens = 512;
  bool cuda_graphs = true;
  app.add_option("--model", model_dir, "checkpoint directory")->required();
  app.add_option("--device", device, "cpu or cuda");
  app.add_option("--dtype", dtype, "float32 or bfloat16");
  app.add_option("--batch", batches, "batch sizes (repeatable)");
  app.add_option("--prompt-len", prompt_len, "prompt tokens per sequence");
  app.add_option("--new-tokens", new_tokens, "generated tokens per sequence");
  app.add_option("--cuda-graphs", cuda_graphs, "replay decode steps from CUDA graphs (CUDA only)");
  std::string decode_kernels = "aten";
  app.add_option("--decode-kernels", decode_kernels,
                 "aten, fused (five kernels per layer) or persistent (one kernel for all layers); "
                 "the last two for up to 8 rows on CUDA")
      ->check(CLI::IsMember(model::DecodeKernelsNames()));
  app.add_option("--json", json_path, "write results here");
  bool profile = false, overlap = false;
  app.add_flag("--profile", profile, "add GPU time per kernel over 64 more decode steps to each row");
  app.add_flag("--overlap", overlap,
               "launch each decode step before the last one's tokens are read (GeneratorOptions)");
  CLI11_PARSE(app, argc, argv);

  model::LoadOptions lo;
  lo.dtype = dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  lo.device = c10::Device(device);
  auto model = model::Transformer::Load(model_dir, lo);
  if (!model.ok()) return std::cerr << model.status().ToString() << "\n", 1;
  auto sync = [&] {
    if (lo.device.is_cuda()) at::zeros({1}, at::TensorOptions().device(lo.device)).cpu();  // waits for the stream
  };
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>((*model)->config().vocab_size - 1));
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t b : batches) {
    // One generator for the warm-up and the timed run, as a rollout loop keeps
    // one: CUDA graphs captured in the warm-up are replayed in the timed run.
    model::GeneratorOptions options{b, prompt_len + new_tokens + 1, 0};
    options.cuda_graphs = cuda_graphs;
    options.overlap = overlap;
    options.decode_kernels = model::ParseDecodeKernels(decode_kernels).value();
    model::Generator gen(**model, nullptr, options);
    auto run = [&](int64_t tokens, double* decode_s, double* prefill_s) {
      for (int64_t i = 0; i < b; ++i) {
        model::GenerationRequest r;
        for (int64_t t = 0; t < prompt_len; ++t) r.prompt.push_back(token(rng));
        r.sampling.temperature = 0;
        r.sampling.max_new_tokens = tokens;
        gen.Submit(r);
      }
      auto t0 = Clock::now();
      gen.Step();  // prefill + first token
      sync();
      auto t1 = Clock::now();
      while (!gen.Idle()) gen.Step();
      sync();
      *prefill_s = std::chrono::duration<double>(t1 - t0).count();
      *decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
    };
    double d = 0, p = 0;
    run(new_tokens, &d, &p);  // warm-up: allocator, kernels, every graph the timed run needs
    const double warmup_s = d;
    const model::GeneratorStats before = gen.stats();
    run(new_tokens, &d, &p);
    const auto& stats = gen.stats();
    const double steps = static_cast<double>(stats.decode_steps - before.decode_steps);
    double decoded = static_cast<double>(b * (new_tokens - 1));
    nlohmann::json row = {{"batch", b},
                          {"overlap", overlap},
                          {"prompt_len", prompt_len},
                          {"new_tokens", new_tokens},
                          {"prefill_s", p},
                          {"decode_s", d},
                          {"decode_tokens_per_s", decoded / d},
                          {"decode_steps", stats.decode_steps / 2},
                          {"device", device},
                          {"dtype", dtype},
                          {"graphs_captured", stats.graphs_captured},
                          {"decode_kernels", decode_kernels},
                          {"graph_replays", stats.graph_replays},
                          {"launched_steps", stats.launched_steps},
                          {"graphs_captured_in_timed_run", stats.graphs_captured - before.graphs_captured},
                          // the host's time a step (overlap): launching it, and blocked on the step before
                          {"host_launch_us_per_step", 1e6 * (stats.host_launch_s - before.host_launch_s) / steps},
                          {"host_wait_us_per_step", 1e6 * (stats.host_wait_s - before.host_wait_s) / steps},
                          {"warmup_decode_s", warmup_s}};
    if (profile) {
      const int64_t profiled_from = gen.stats().decode_steps;
      KernelProfile kp;
      run(65, &d, &p);
      sync();
      row["profile_64_steps"] = kp.Stop(40);
      row["profile_64_steps"]["decode_steps"] = gen.stats().decode_steps - profiled_from;  // for step_profile.py
    }
    std::cout << row.dump() << std::endl;
    rows.push_back(row);
  }
  if (!json_path.empty()) std::ofstream(json_path) << rows.dump(1) << "\n";
  return 0;
}
