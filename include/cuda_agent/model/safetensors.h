// The safetensors format (8-byte little-endian header length, a JSON header of
// name -> {dtype, shape, data_offsets}, then raw little-endian data), read by
// memory-mapping and written atomically. A model directory may hold one
// model.safetensors or shards listed by model.safetensors.index.json.
// Torch-free: the model component turns the byte views into tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::model {

// One tensor's bytes inside a mapped file.
struct TensorView {
  std::string dtype;  // "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
  std::filesystem::path file;  // for messages
};

// Bytes per element of a safetensors dtype; 0 if unknown.
size_t DtypeSize(std::string_view dtype);

// The tensors of a model directory (or a single .safetensors file), mapped
// read-only for as long as this object lives.
class SafetensorsReader {
 public:
  static StatusOr<std::unique_ptr<SafetensorsReader>> Open(const std::filesystem::path& path);
  ~SafetensorsReader();

  // kNotFound naming the tensor and where it was looked for.
  StatusOr<TensorView> Get(const std::string& name) const;
  bool Has(const std::string& name) const;
  std::vector<std::string> Names() const;

 private:
  SafetensorsReader() = default;
  struct Mapping;
  std::vector<std::unique_ptr<Mapping>> mappings_;
  std::map<std::string, TensorView> tensors_;
  std::string where_;
};

struct TensorBytes {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string data;  // little-endian, row-major
};

// Writes one .safetensors file (tensors sorted by name, 8-byte aligned data).
Status WriteSafetensors(const std::filesystem::path& path, const std::vector<TensorBytes>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace cuda_agent::model
