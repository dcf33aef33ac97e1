#include "cuda_agent/kernel_eval/tensor_compare.h"

#include <cmath>
#include <sstream>

namespace cuda_agent::kernel_eval {

CompareResult CompareTensors(const HostTensor& ref, const HostTensor& cand, const CompareOptions& options) {
  CompareResult r;
  if (options.check_dtype && ref.dtype() != cand.dtype()) {
    r.message = "dtype " + cand.dtype() + ", expected " + ref.dtype();
    return r;
  }
  if (ref.shape() != cand.shape()) {
    r.message = "shape " + cand.ShapeString() + ", expected " + ref.ShapeString();
    return r;
  }
  std::ostringstream first;
  const int64_t n = ref.numel();
  for (int64_t i = 0; i < n; ++i) {
    double a = ref[i], b = cand[i];
    bool ok;
    if (!std::isfinite(a) || !std::isfinite(b)) {
      if (options.nan_policy == NanPolicy::kForbid)
        ok = false;
      else
        ok = (std::isnan(a) && std::isnan(b)) || (std::isinf(a) && a == b);
    } else {
      double diff = std::fabs(a - b);
      r.max_abs_error = std::max(r.max_abs_error, diff);
      if (a != 0) r.max_rel_error = std::max(r.max_rel_error, diff / std::fabs(a));
      ok = diff <= options.atol + options.rtol * std::fabs(a);
    }
    if (!ok) {
      if (r.mismatches == 0) first << "element " << i << " is " << b << ", expected " << a;
      ++r.mismatches;
    }
  }
  r.passed = r.mismatches == 0;
  if (!r.passed) {
    std::ostringstream m;
    m << r.mismatches << " of " << n << " elements differ (atol " << options.atol << ", rtol " << options.rtol << "); "
      << first.str() << "; max abs error " << r.max_abs_error;
    r.message = m.str();
  }
  return r;
}

}  // namespace cuda_agent::kernel_eval
