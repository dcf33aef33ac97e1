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

// A tensor kept as its raw bytes; elements are converted to double on access,
// so comparing two 256 MiB outputs needs no extra copies.
class HostTensor {
 public:
  // float32, float64, float16, bfloat16, int8..int64, uint8, bool.
  static StatusOr<HostTensor> FromBytes(std::string dtype, std::vector<int64_t> shape, std::string bytes);
  // Encodes `values` as `dtype` (float32 or float64); for tests and fixtures.
  static HostTensor FromValues(std::string dtype, std::vector<int64_t> shape, const std::vector<double>& values);

  const std::string& dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::string& bytes() const { return bytes_; }
  int64_t numel() const { return numel_; }
  double operator[](int64_t i) const { return load_(bytes_.data() + i * element_size_); }
  std::string ShapeString() const;  // "(2, 3)"

 private:
  std::string dtype_;
  std::vector<int64_t> shape_;
  std::string bytes_;
  int64_t numel_ = 0;
  int element_size_ = 0;
  double (*load_)(const char*) = nullptr;
};

// Reads a tensor file; any inconsistency (size, dtype) is an error naming the file.
StatusOr<HostTensor> ReadTensorFile(const std::filesystem::path& path);
Status WriteTensorFile(const std::filesystem::path& path, const HostTensor& tensor);

}  // namespace cuda_agent::kernel_eval
