// Trusted-side checks on a candidate's timings (DESIGN.md §5): anything measured
// inside the candidate's process can be forged, so the judge compares it with
// its own wall clock and with what the hardware can physically do.
#pragma once

#include <string>

namespace cuda_agent::kernel_eval {

// One timed loop as seen from both sides.
struct LoopEvidence {
  double wall_ms = 0;  // the judge's clock: command sent -> results received
  double sum_ms = 0;   // the sum of the per-call times the process reported
  int trials = 0;
};

// The candidate's reported times plus the per-call overhead measured on the
// trusted baseline loop must explain the judge's wall clock within `factor`
// (plus `slack_ms` for scheduling noise). Returns an explanation when not.
bool TimingsForged(const LoopEvidence& baseline, const LoopEvidence& candidate, double factor, double slack_ms,
                   std::string* why);

// The least time a correct implementation needs: every input read and output
// written once at full memory bandwidth, or every FLOP at peak.
double PhysicalLimitMs(double io_bytes, double flops, double bandwidth_gbs, double peak_tflops);

// Conservative (high) bandwidth and peak figures for the device the judge runs on.
double DefaultBandwidthGbs(const std::string& backend, const std::string& device_name);
double DefaultPeakTflops(const std::string& backend, const std::string& device_name);

}  // namespace cuda_agent::kernel_eval
