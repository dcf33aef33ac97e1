// Tensors written by the harness (src/harness/cuda_agent_harness/tensor_io.py):
// magic "CATNSR01", u32 little-endian header length, JSON header
// {"dtype": "float32", "shape": [..]}, then the C-contiguous little-endian bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::kernel_eval {

struct HostTensor {
  std::string dtype;            // float32, float64, float16, bfloat16, int8..int64, uint8, bool
  std::vector<int64_t> shape;
  std::vector<double> values;   // every element converted to double, row-major

  int64_t numel() const { return static_cast<int64_t>(values.size()); }
  bool IsFloating() const;
  std::string ShapeString() const;  // "(2, 3)"
};

// Reads and converts a tensor file; any inconsistency (size, dtype) is an error
// naming the file.
StatusOr<HostTensor> ReadTensorFile(const std::filesystem::path& path);
// Writes one (used by tests to build fixtures).
Status WriteTensorFile(const std::filesystem::path& path, const HostTensor& tensor);

}  // namespace cuda_agent::kernel_eval
