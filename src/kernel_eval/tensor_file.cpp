#include "cuda_agent/kernel_eval/tensor_file.h"

#include <bit>
#include <cstring>

#include <nlohmann/json.hpp>

#include "cuda_agent/util/file.h"

namespace cuda_agent::kernel_eval {
namespace {

constexpr char kMagic[] = "CATNSR01";

int ElementSize(const std::string& dtype) {
  if (dtype == "float64" || dtype == "int64") return 8;
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16") return 2;
  if (dtype == "int8" || dtype == "uint8" || dtype == "bool") return 1;
  return 0;
}

double HalfToDouble(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(static_cast<double>(mant), -24);
  else if (exp == 31) v = mant ? std::nan("") : INFINITY;
  else v = std::ldexp(static_cast<double>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

double Convert(const std::string& dtype, const char* p) {
  if (dtype == "float32") return Load<float>(p);
  if (dtype == "float64") return Load<double>(p);
  if (dtype == "float16") return HalfToDouble(Load<uint16_t>(p));
  if (dtype == "bfloat16") return std::bit_cast<float>(static_cast<uint32_t>(Load<uint16_t>(p)) << 16);
  if (dtype == "int8") return Load<int8_t>(p);
  if (dtype == "uint8" || dtype == "bool") return Load<uint8_t>(p);
  if (dtype == "int16") return Load<int16_t>(p);
  if (dtype == "int32") return Load<int32_t>(p);
  return static_cast<double>(Load<int64_t>(p));
}

}  // namespace

bool HostTensor::IsFloating() const { return dtype.rfind("float", 0) == 0 || dtype == "bfloat16"; }

std::string HostTensor::ShapeString() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

StatusOr<HostTensor> ReadTensorFile(const std::filesystem::path& path) {
  CA_ASSIGN_OR_RETURN(std::string data, ReadFile(path));
  const std::string name = path.string();
  if (data.size() < 12 || data.compare(0, 8, kMagic) != 0) return Internal(name + ": not a tensor file");
  uint32_t header_len = Load<uint32_t>(data.data() + 8);
  if (12 + static_cast<size_t>(header_len) > data.size()) return Internal(name + ": truncated header");
  auto header = nlohmann::json::parse(data.substr(12, header_len), nullptr, false);
  if (header.is_discarded() || !header.contains("dtype") || !header.contains("shape"))
    return Internal(name + ": malformed header");
  HostTensor t;
  t.dtype = header["dtype"].get<std::string>();
  int esize = ElementSize(t.dtype);
  if (esize == 0) return Internal(name + ": unsupported dtype " + t.dtype);
  int64_t numel = 1;
  for (const auto& d : header["shape"]) {
    t.shape.push_back(d.get<int64_t>());
    numel *= t.shape.back();
  }
  size_t offset = 12 + header_len;
  if (data.size() - offset != static_cast<size_t>(numel) * static_cast<size_t>(esize))
    return Internal(name + ": payload is " + std::to_string(data.size() - offset) + " bytes, expected " +
                    std::to_string(numel * esize));
  t.values.resize(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) t.values[static_cast<size_t>(i)] = Convert(t.dtype, data.data() + offset + i * esize);
  return t;
}

Status WriteTensorFile(const std::filesystem::path& path, const HostTensor& tensor) {
  if (tensor.dtype != "float64" && tensor.dtype != "float32")
    return InvalidArgument("WriteTensorFile supports float32 and float64, not " + tensor.dtype);
  std::string header = nlohmann::json{{"dtype", tensor.dtype}, {"shape", tensor.shape}}.dump();
  std::string out(kMagic, 8);
  uint32_t len = static_cast<uint32_t>(header.size());
  out.append(reinterpret_cast<const char*>(&len), 4);
  out += header;
  for (double v : tensor.values) {
    if (tensor.dtype == "float64") out.append(reinterpret_cast<const char*>(&v), 8);
    else {
      float f = static_cast<float>(v);
      out.append(reinterpret_cast<const char*>(&f), 4);
    }
  }
  return WriteFileAtomic(path, out);
}

}  // namespace cuda_agent::kernel_eval
