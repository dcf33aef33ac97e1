#include "cuda_agent/kernel_eval/candidate.h"

#include <algorithm>
#include <vector>

#include "cuda_agent/util/file.h"
#include "cuda_agent/util/hash.h"

namespace cuda_agent::kernel_eval {
namespace fs = std::filesystem;

namespace {
constexpr size_t kMaxFiles = 256;
constexpr uintmax_t kMaxBytes = 16u << 20;
}  // namespace

const char* CandidateKindName(CandidateKind kind) {
  return kind == CandidateKind::kWorkspace ? "workspace" : "kernelbench";
}

StatusOr<Candidate> LoadCandidate(const fs::path& path) {
  std::error_code ec;
  auto st = fs::symlink_status(path, ec);
  if (ec || !fs::exists(st)) return InvalidArgument("candidate " + path.string() + " does not exist");
  if (fs::is_symlink(st)) return InvalidArgument("candidate " + path.string() + " is a symlink");
  Candidate c;
  c.root = fs::absolute(path);
  Hasher hasher;
  if (fs::is_regular_file(st)) {
    if (path.extension() != ".py") return InvalidArgument("candidate " + path.string() + " is not a .py file");
    if (fs::file_size(path) > kMaxBytes) return InvalidArgument("candidate " + path.string() + " is too large");
    c.kind = CandidateKind::kKernelBench;
    c.module_name = path.filename();
    CA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    c.hash = hasher.Add(text).HexDigest();
    return c;
  }
  if (!fs::is_directory(st)) return InvalidArgument("candidate " + path.string() + " is not a file or directory");
  if (!fs::is_regular_file(path / "model_new.py"))
    return InvalidArgument("candidate directory " + path.string() + " has no model_new.py");
  c.module_name = "model_new.py";
  c.kind = fs::is_directory(path / "kernels") ? CandidateKind::kWorkspace : CandidateKind::kKernelBench;
  std::vector<fs::path> files;
  uintmax_t bytes = 0;
  for (auto it = fs::recursive_directory_iterator(path, ec); it != fs::recursive_directory_iterator(); ++it) {
    auto s = it->symlink_status();
    if (fs::is_symlink(s)) return InvalidArgument("candidate file " + it->path().string() + " is a symlink");
    if (!fs::is_regular_file(s)) continue;
    files.push_back(it->path());
    bytes += it->file_size();
    if (files.size() > kMaxFiles) return InvalidArgument("candidate " + path.string() + " has more than 256 files");
    if (bytes > kMaxBytes) return InvalidArgument("candidate " + path.string() + " is larger than 16 MiB");
  }
  if (ec) return InvalidArgument("cannot list candidate " + path.string() + ": " + ec.message());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    CA_ASSIGN_OR_RETURN(std::string text, ReadFile(f));
    hasher.Add(f.lexically_relative(path).string()).Add(text);
  }
  c.hash = hasher.HexDigest();
  return c;
}

}  // namespace cuda_agent::kernel_eval
