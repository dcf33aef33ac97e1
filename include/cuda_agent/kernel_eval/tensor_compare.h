// Element-wise comparison of a candidate's output with the reference's, done in
// the judge's own process (candidate code never runs here).
#pragma once

#include <string>

#include "cuda_agent/kernel_eval/tensor_file.h"

namespace cuda_agent::kernel_eval {

enum class NanPolicy {
  kMatch,   // NaN where the reference has NaN, +-Inf where it has the same Inf
  kForbid,  // any NaN/Inf in the candidate fails
};

struct CompareOptions {
  double atol = 1e-2;
  double rtol = 1e-2;
  NanPolicy nan_policy = NanPolicy::kMatch;
  bool check_dtype = true;  // false for the float64 trial samples
};

struct CompareResult {
  bool passed = false;
  double max_abs_error = 0;  // over finite elements
  double max_rel_error = 0;
  int64_t mismatches = 0;
  std::string message;  // first reason it failed, with an index and both values
};

// |cand - ref| <= atol + rtol * |ref| for every element, exact dtype and shape.
CompareResult CompareTensors(const HostTensor& reference, const HostTensor& candidate, const CompareOptions& options);

}  // namespace cuda_agent::kernel_eval
