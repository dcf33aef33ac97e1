#include "cuda_agent/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "cuda_agent/util/file.h"

namespace cuda_agent::model {
namespace fs = std::filesystem;
using nlohmann::json;

size_t DtypeSize(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

struct SafetensorsReader::Mapping {
  fs::path path;
  void* base = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, size);
  }
};

namespace {

StatusOr<std::unique_ptr<SafetensorsReader>> Fail(const fs::path& file, const std::string& why) {
  return InvalidArgument(file.string() + ": " + why);
}

}  // namespace

SafetensorsReader::~SafetensorsReader() = default;

StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(const fs::path& path) {
  std::vector<fs::path> files;
  std::unique_ptr<SafetensorsReader> r(new SafetensorsReader());
  if (fs::is_directory(path)) {
    fs::path index = path / "model.safetensors.index.json";
    if (fs::exists(index)) {
      CA_ASSIGN_OR_RETURN(std::string text, ReadFile(index));
      json j = json::parse(text, nullptr, false);
      if (j.is_discarded() || !j.contains("weight_map") || !j["weight_map"].is_object())
        return Fail(index, "not a safetensors index (no weight_map object)");
      for (const auto& [name, file] : j["weight_map"].items()) {
        fs::path f = path / file.get<std::string>();
        if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
      }
      r->where_ = index.string();
    } else if (fs::exists(path / "model.safetensors")) {
      files.push_back(path / "model.safetensors");
    } else {
      return NotFound(path.string() + " holds neither model.safetensors nor model.safetensors.index.json");
    }
  } else {
    files.push_back(path);
  }
  if (r->where_.empty()) r->where_ = files.front().string();
  for (const auto& f : files) {
    auto m = std::make_unique<Mapping>();
    m->path = f;
    int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NotFound(f.string() + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    m->size = static_cast<size_t>(st.st_size);
    if (m->size < 8) {
      ::close(fd);
      return Fail(f, "too short to be a safetensors file (" + std::to_string(m->size) + " bytes)");
    }
    m->base = ::mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m->base == MAP_FAILED) return Fail(f, std::string("cannot map: ") + std::strerror(errno));
    const auto* bytes = static_cast<const unsigned char*>(m->base);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
    if (header_len > m->size - 8) return Fail(f, "header length " + std::to_string(header_len) + " exceeds the file");
    json header = json::parse(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len), nullptr, false);
    if (header.is_discarded() || !header.is_object()) return Fail(f, "header is not a JSON object");
    size_t data_start = 8 + header_len, data_size = m->size - data_start;
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      TensorView v;
      v.file = f;
      if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
        return Fail(f, "tensor " + name + ": needs dtype, shape and data_offsets");
      v.dtype = info["dtype"].get<std::string>();
      v.shape = info["shape"].get<std::vector<int64_t>>();
      auto offsets = info["data_offsets"].get<std::vector<uint64_t>>();
      size_t elem = DtypeSize(v.dtype);
      if (elem == 0) return Fail(f, "tensor " + name + ": unknown dtype " + v.dtype);
      uint64_t numel = 1;
      for (int64_t d : v.shape) numel *= static_cast<uint64_t>(d);
      if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] > data_size ||
          offsets[1] - offsets[0] != numel * elem)
        return Fail(f, "tensor " + name + ": data_offsets do not match its shape and dtype, or lie past the file end");
      v.data = bytes + data_start + offsets[0];
      v.bytes = offsets[1] - offsets[0];
      r->tensors_[name] = std::move(v);
    }
    r->mappings_.push_back(std::move(m));
  }
  return r;
}

StatusOr<TensorView> SafetensorsReader::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return NotFound("tensor " + name + " is not in " + where_);
  return it->second;
}

bool SafetensorsReader::Has(const std::string& name) const { return tensors_.count(name) > 0; }

std::vector<std::string> SafetensorsReader::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, v] : tensors_) names.push_back(name);
  return names;
}

Status WriteSafetensors(const fs::path& path, const std::vector<TensorBytes>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorBytes*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* t : sorted) {
    size_t elem = DtypeSize(t->dtype);
    uint64_t numel = 1;
    for (int64_t d : t->shape) numel *= static_cast<uint64_t>(d);
    if (elem == 0 || numel * elem != t->data.size())
      return InvalidArgument("tensor " + t->name + ": " + std::to_string(t->data.size()) + " bytes do not fit " +
                             t->dtype + " of its shape");
    header[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->data.size()}}};
    offset += t->data.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += h;
  out.reserve(out.size() + offset);
  for (const auto* t : sorted) out += t->data;
  return WriteFileAtomic(path, out);
}

}  // namespace cuda_agent::model
