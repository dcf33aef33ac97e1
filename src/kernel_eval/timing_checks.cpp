#include "cuda_agent/kernel_eval/timing_checks.h"

#include <algorithm>
#include <sstream>

namespace cuda_agent::kernel_eval {

bool TimingsForged(const LoopEvidence& baseline, const LoopEvidence& candidate, double factor, double slack_ms,
                   std::string* why) {
  double overhead_per_call = std::max(0.0, (baseline.wall_ms - baseline.sum_ms) / std::max(1, baseline.trials));
  double explained = candidate.sum_ms + overhead_per_call * candidate.trials;
  if (candidate.wall_ms <= factor * explained + slack_ms) return false;
  std::ostringstream s;
  s << "the judge's wall clock saw " << candidate.wall_ms << " ms for the timed loop; the reported times plus the "
    << "measured loop overhead explain " << explained << " ms";
  *why = s.str();
  return true;
}

double PhysicalLimitMs(double io_bytes, double flops, double bandwidth_gbs, double peak_tflops) {
  double memory_ms = bandwidth_gbs > 0 ? io_bytes / (bandwidth_gbs * 1e9) * 1e3 : 0;
  double compute_ms = peak_tflops > 0 ? flops / (peak_tflops * 1e12) * 1e3 : 0;
  return std::max(memory_ms, compute_ms);
}

double DefaultBandwidthGbs(const std::string& backend, const std::string& device) {
  if (backend == "cpu") return 500;
  if (device.find("H200") != std::string::npos) return 4800;
  if (device.find("H100") != std::string::npos) return 3350;
  if (device.find("A100") != std::string::npos) return 2039;
  return 10000;
}

double DefaultPeakTflops(const std::string& backend, const std::string& device) {
  if (backend == "cpu") return 10;
  if (device.find("H200") != std::string::npos || device.find("H100") != std::string::npos) return 990;
  if (device.find("A100") != std::string::npos) return 312;
  return 5000;
}

}  // namespace cuda_agent::kernel_eval
