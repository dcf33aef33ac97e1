// GPU time by kernel name over a region of a benchmark, from LibTorch's Kineto
// profiler (CUPTI): where an update's or a decode step's time goes.
//
//   KernelProfile profile;      // starts recording
//   ... work ...
//   nlohmann::json j = profile.Stop(40);   // synchronise first
#pragma once

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

class KernelProfile {
 public:
  KernelProfile() {
    namespace prof = torch::profiler::impl;
    prof::ProfilerConfig config(prof::ProfilerState::KINETO);
    std::set<prof::ActivityType> activities{prof::ActivityType::CPU, prof::ActivityType::CUDA};
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
  }

  // Stops recording; the `top` kernels by total time, and the GPU's busy total.
  nlohmann::json Stop(size_t top) {
    auto result = torch::autograd::profiler::disableProfiler();
    struct Sum {
      double ms = 0;
      int64_t calls = 0;
    };
    std::map<std::string, Sum> by_name;
    double total_ms = 0;
    int64_t kernels = 0;
    for (const auto& e : result->events()) {
      if (e.deviceType() != c10::DeviceType::CUDA) continue;
      std::string name = e.name().substr(0, 160);
      double ms = static_cast<double>(e.durationNs()) * 1e-6;
      by_name[name].ms += ms;
      by_name[name].calls += 1;
      total_ms += ms;
      ++kernels;
    }
    std::vector<std::pair<std::string, Sum>> rows(by_name.begin(), by_name.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < rows.size() && i < top; ++i)
      list.push_back({{"name", rows[i].first}, {"ms", rows[i].second.ms}, {"calls", rows[i].second.calls}});
    return {{"gpu_ms_total", total_ms}, {"gpu_events", kernels}, {"top", list}};
  }
};
