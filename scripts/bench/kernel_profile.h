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

  // Stops recording; the `top` kernels by total time, and the GPU's busy
  // total; and where the GPU idled: the time between the end of all work
  // before each kernel (or copy) and its start, summed by the names of the
  // kernel before and the one after, over the `top` pairs with the most.
  nlohmann::json Stop(size_t top) {
    auto result = torch::autograd::profiler::disableProfiler();
    struct Sum {
      double ms = 0;
      int64_t calls = 0;
    };
    struct Span {
      uint64_t start, end;
      std::string name;
    };
    std::map<std::string, Sum> by_name, idle_between;
    std::vector<Span> spans;
    double total_ms = 0;
    for (const auto& e : result->events()) {
      if (e.deviceType() != c10::DeviceType::CUDA) continue;
      std::string name = e.name().substr(0, 160);
      double ms = static_cast<double>(e.durationNs()) * 1e-6;
      by_name[name].ms += ms;
      by_name[name].calls += 1;
      total_ms += ms;
      spans.push_back({e.startNs(), e.endNs(), name});
    }
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
    double idle_ms = 0;
    for (size_t i = 1, last = 0; i < spans.size(); ++i) {  // spans[last]: the one that ends last so far
      if (spans[i].start > spans[last].end) {
        const double ms = static_cast<double>(spans[i].start - spans[last].end) * 1e-6;
        Sum& sum = idle_between[spans[last].name.substr(0, 60) + " -> " + spans[i].name.substr(0, 60)];
        sum.ms += ms;
        sum.calls += 1;
        idle_ms += ms;
      }
      if (spans[i].end > spans[last].end) last = i;
    }
    return {{"gpu_ms_total", total_ms},
            {"gpu_events", spans.size()},
            {"top", Top(by_name, top)},
            {"idle_ms_total", idle_ms},
            {"idle_between", Top(idle_between, top)}};
  }

 private:
  template <typename Sums>
  static nlohmann::json Top(const Sums& sums, size_t top) {
    std::vector<std::pair<std::string, typename Sums::mapped_type>> rows(sums.begin(), sums.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < rows.size() && i < top; ++i)
      list.push_back({{"name", rows[i].first}, {"ms", rows[i].second.ms}, {"calls", rows[i].second.calls}});
    return list;
  }
};
