#include "cuda_agent/kernel_eval/tensor_file.h"

#include <bit>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "cuda_agent/util/file.h"

namespace cuda_agent::kernel_eval {
namespace {

constexpr char kMagic[] = "CATNSR01";

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

double HalfToDouble(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(static_cast<double>(mant), -24);
  else if (exp == 31)
    v = mant ? std::nan("") : INFINITY;
  else
    v = std::ldexp(static_cast<double>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

template <typename T>
double LoadAs(const char* p) {
  return static_cast<double>(Load<T>(p));
}
double LoadHalf(const char* p) { return HalfToDouble(Load<uint16_t>(p)); }
double LoadBFloat16(const char* p) { return std::bit_cast<float>(static_cast<uint32_t>(Load<uint16_t>(p)) << 16); }

struct DtypeInfo {
  const char* name;
  int size;
  double (*load)(const char*);
};

constexpr DtypeInfo kDtypes[] = {
    {"float32", 4, LoadAs<float>}, {"float64", 8, LoadAs<double>}, {"float16", 2, LoadHalf},
    {"bfloat16", 2, LoadBFloat16}, {"int8", 1, LoadAs<int8_t>},    {"uint8", 1, LoadAs<uint8_t>},
    {"bool", 1, LoadAs<uint8_t>},  {"int16", 2, LoadAs<int16_t>},  {"int32", 4, LoadAs<int32_t>},
    {"int64", 8, LoadAs<int64_t>},
};

const DtypeInfo* FindDtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

}  // namespace

StatusOr<HostTensor> HostTensor::FromBytes(std::string dtype, std::vector<int64_t> shape, std::string bytes) {
  const DtypeInfo* info = FindDtype(dtype);
  if (info == nullptr) return InvalidArgument("unsupported dtype " + dtype);
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument("negative dimension");
    numel *= d;
  }
  if (bytes.size() != static_cast<size_t>(numel) * static_cast<size_t>(info->size))
    return InvalidArgument("payload is " + std::to_string(bytes.size()) + " bytes, expected " +
                           std::to_string(numel * info->size));
  HostTensor t;
  t.dtype_ = std::move(dtype);
  t.shape_ = std::move(shape);
  t.bytes_ = std::move(bytes);
  t.numel_ = numel;
  t.element_size_ = info->size;
  t.load_ = info->load;
  return t;
}

HostTensor HostTensor::FromValues(std::string dtype, std::vector<int64_t> shape, const std::vector<double>& values) {
  CA_CHECK(dtype == "float32" || dtype == "float64");
  std::string bytes;
  for (double v : values) {
    if (dtype == "float64")
      bytes.append(reinterpret_cast<const char*>(&v), 8);
    else {
      float f = static_cast<float>(v);
      bytes.append(reinterpret_cast<const char*>(&f), 4);
    }
  }
  auto t = FromBytes(std::move(dtype), std::move(shape), std::move(bytes));
  CA_CHECK_MSG(t.ok(), t.status().ToString());
  return std::move(t).value();
}

std::string HostTensor::ShapeString() const {
  std::string s = "(";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + (shape_.size() == 1 ? ",)" : ")");
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
  std::vector<int64_t> shape;
  for (const auto& d : header["shape"]) shape.push_back(d.get<int64_t>());
  data.erase(0, 12 + header_len);
  auto t = HostTensor::FromBytes(header["dtype"].get<std::string>(), std::move(shape), std::move(data));
  if (!t.ok()) return Internal(name + ": " + t.status().message());
  return t;
}

Status WriteTensorFile(const std::filesystem::path& path, const HostTensor& tensor) {
  std::string header = nlohmann::json{{"dtype", tensor.dtype()}, {"shape", tensor.shape()}}.dump();
  std::string out(kMagic, 8);
  uint32_t len = static_cast<uint32_t>(header.size());
  out.append(reinterpret_cast<const char*>(&len), 4);
  out += header;
  out += tensor.bytes();
  return WriteFileAtomic(path, out);
}

}  // namespace cuda_agent::kernel_eval
