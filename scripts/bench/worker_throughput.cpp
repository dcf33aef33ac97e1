// Evaluations per minute and latency percentiles of the worker service, driven
// through rpc::WorkerClient exactly as a trainer would.
//
//   worker_throughput --backend cpu --workers 1 --concurrency 4 --repeat 2 TASK:CANDIDATE ...
//
// Starts `--workers` in-process workers on loopback (or uses --endpoints), then
// submits every case `--repeat` times, `--concurrency` at a time, each with its
// own idempotency key. Pass 1 runs on an empty cache (cold); later passes reuse
// the precompiled header and baselines, and with --unique-sources each
// evaluation gets a never-seen copy of its candidate (as in RL, where every
// sample is new), so nothing is served from the build cache. Prints one line
// per pass and writes --json.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "cuda_agent/config/config.h"
#include "cuda_agent/rpc/worker_client.h"
#include "cuda_agent/rpc/worker_server.h"

using namespace cuda_agent;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// A copy of `c` under `dir` whose model file ends with a unique comment, so its
// hash (and build-cache key) is new while the kernels stay the same.
kernel_eval::Candidate UniqueCopy(const kernel_eval::Candidate& c, const fs::path& dir) {
  fs::create_directories(dir);
  fs::path root = dir / c.root.filename();
  fs::copy(c.root, root, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::path model = fs::is_directory(root) ? root / "model_new.py" : root;
  std::ofstream(model, std::ios::app) << "\n# unique copy " << dir.filename().string() << "\n";
  return kernel_eval::LoadCandidate(root).value();
}

int main(int argc, char** argv) {
  CLI::App app{"worker throughput benchmark"};
  std::vector<std::string> cases, endpoints, overrides;
  std::string backend = "cpu", json_path;
  int workers = 1, concurrency = 4, repeat = 2, max_concurrent = 4;
  bool unique_sources = false;
  app.add_option("cases", cases, "TASK:CANDIDATE pairs")->required();
  app.add_option("--endpoints", endpoints, "existing workers (default: start --workers in-process)");
  app.add_option("--workers", workers, "in-process workers to start");
  app.add_option("--max-concurrent", max_concurrent, "evaluations each in-process worker runs at once");
  app.add_option("--concurrency", concurrency, "requests in flight from the client");
  app.add_option("--repeat", repeat, "passes over the cases (pass 1 is cold)");
  app.add_option("--backend", backend, "cpu or cuda");
  app.add_option("--set", overrides, "config overrides for the in-process workers' judges");
  app.add_option("--json", json_path, "write per-pass results here");
  app.add_flag("--unique-sources", unique_sources, "give every evaluation a new copy of its candidate");
  CLI11_PARSE(app, argc, argv);

  std::string cache = std::filesystem::temp_directory_path() / ("throughput-cache-" + std::to_string(::getpid()));
  std::vector<std::unique_ptr<rpc::WorkerServer>> servers;
  if (endpoints.empty()) {
    std::vector<std::string> all = {"judge.backend=" + backend, "judge.cache_dir=" + cache};
    all.insert(all.end(), overrides.begin(), overrides.end());
    for (int w = 0; w < workers; ++w) {
      auto config = config::LoadConfig("", all);
      if (!config.ok()) return std::cerr << config.status().ToString() << "\n", 2;
      auto judge = kernel_eval::Judge::Create(config->judge, config->sandbox);
      if (!judge.ok()) return std::cerr << judge.status().ToString() << "\n", 1;
      config->worker.listen = "127.0.0.1:0";
      config->worker.name = "w" + std::to_string(w);
      config->worker.max_concurrent = max_concurrent;
      auto server = rpc::WorkerServer::Start(config->worker, std::shared_ptr<kernel_eval::Judge>(std::move(*judge)));
      if (!server.ok()) return std::cerr << server.status().ToString() << "\n", 1;
      endpoints.push_back((*server)->address());
      servers.push_back(std::move(*server));
    }
  }
  config::ClientConfig cc;
  cc.endpoints = endpoints;
  auto client = rpc::WorkerClient::Create(cc);
  if (!client.ok()) return std::cerr << client.status().ToString() << "\n", 1;

  struct Job {
    kernel_eval::Task task;
    kernel_eval::Candidate candidate;
  };
  std::vector<Job> jobs;
  for (const auto& c : cases) {
    size_t colon = c.find(':');
    auto task = kernel_eval::LoadTask(c.substr(0, colon));
    auto cand = kernel_eval::LoadCandidate(c.substr(colon + 1));
    if (!task.ok() || !cand.ok()) return std::cerr << "bad case " << c << "\n", 2;
    jobs.push_back({*task, *cand});
  }
  nlohmann::json report = nlohmann::json::array();
  for (int pass = 1; pass <= repeat; ++pass) {
    std::vector<double> latencies;
    std::map<std::string, int> outcomes;
    std::map<std::string, double> phase_sums;  // seconds per judge phase, summed over verdicts
    std::mutex mu;
    std::atomic<size_t> next{0};
    auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrency; ++t) {
      threads.emplace_back([&] {
        for (size_t i; (i = next++) < jobs.size();) {
          std::string key = "pass" + std::to_string(pass) + "-" + std::to_string(i);
          kernel_eval::Candidate candidate = jobs[i].candidate;
          if (unique_sources) candidate = UniqueCopy(candidate, cache + "-src/" + key);
          auto t0 = Clock::now();
          auto r = (*client)->Evaluate(jobs[i].task, candidate, key);
          double s = std::chrono::duration<double>(Clock::now() - t0).count();
          std::lock_guard<std::mutex> lock(mu);
          latencies.push_back(s);
          outcomes[r.ok() ? kernel_eval::OutcomeName(r->verdict.outcome) : "CALL_FAILED"]++;
          if (r.ok())
            for (const auto& [phase, seconds] : r->verdict.phase_seconds) phase_sums[phase] += seconds;
        }
      });
    }
    for (auto& th : threads) th.join();
    double wall = std::chrono::duration<double>(Clock::now() - start).count();
    std::sort(latencies.begin(), latencies.end());
    auto pct = [&](double p) { return latencies[std::min(latencies.size() - 1, size_t(p * latencies.size()))]; };
    nlohmann::json row = {{"pass", pass},
                          {"cold", pass == 1},
                          {"evaluations", latencies.size()},
                          {"wall_s", wall},
                          {"per_min", 60.0 * latencies.size() / wall},
                          {"p50_s", pct(0.50)},
                          {"p95_s", pct(0.95)},
                          {"outcomes", outcomes},
                          {"phase_sums_s", phase_sums}};
    std::cout << (pass == 1 ? "cold" : "warm") << " pass " << pass << ": " << latencies.size() << " evaluations in "
              << wall << " s = " << row["per_min"].get<double>() << "/min, p50 " << row["p50_s"].get<double>()
              << " s, p95 " << row["p95_s"].get<double>() << " s, outcomes " << nlohmann::json(outcomes).dump()
              << std::endl;
    report.push_back(row);
  }
  if (!json_path.empty()) std::ofstream(json_path) << report.dump(1) << "\n";
  std::filesystem::remove_all(cache);
  std::filesystem::remove_all(cache + "-src");
  return 0;
}
