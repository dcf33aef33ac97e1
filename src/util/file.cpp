#include "cuda_agent/util/file.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <system_error>

namespace cuda_agent {
namespace fs = std::filesystem;

StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Internal("error reading " + path.string());
  return ss.str();
}

Status WriteFileAtomic(const fs::path& path, const std::string& contents) {
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Internal("cannot create " + tmp.string());
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) return Internal("error writing " + tmp.string() + " (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Internal("cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
  return Status::Ok();
}

Status MakeDirs(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return Internal("cannot create directory " + path.string() + ": " + ec.message());
  return Status::Ok();
}

Status CopyTree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  auto st = fs::symlink_status(from, ec);
  if (ec) return NotFound("cannot stat " + from.string() + ": " + ec.message());
  if (fs::is_symlink(st)) return InvalidArgument(from.string() + " is a symlink; refused");
  if (fs::is_regular_file(st)) {
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) return Internal("cannot copy " + from.string() + ": " + ec.message());
    return Status::Ok();
  }
  if (!fs::is_directory(st)) return InvalidArgument(from.string() + " is not a file or directory");
  CA_RETURN_IF_ERROR(MakeDirs(to));
  for (const auto& entry : fs::directory_iterator(from, ec)) {
    CA_RETURN_IF_ERROR(CopyTree(entry.path(), to / entry.path().filename()));
  }
  if (ec) return Internal("cannot list " + from.string() + ": " + ec.message());
  return Status::Ok();
}

Status ChownTree(const fs::path& path, unsigned uid, unsigned gid) {
  if (::lchown(path.c_str(), uid, gid) != 0) return Internal("cannot chown " + path.string());
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(path, ec))) return Status::Ok();
  for (const auto& entry : fs::recursive_directory_iterator(path, ec)) {
    if (::lchown(entry.path().c_str(), uid, gid) != 0) return Internal("cannot chown " + entry.path().string());
  }
  if (ec) return Internal("cannot list " + path.string() + ": " + ec.message());
  return Status::Ok();
}

std::string TruncateMiddle(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t head = max_bytes / 2, tail = max_bytes - head;
  return text.substr(0, head) + "\n[... " + std::to_string(text.size() - max_bytes) + " bytes cut ...]\n" +
         text.substr(text.size() - tail);
}

StatusOr<TempDir> TempDir::Create(const fs::path& parent, const std::string& prefix) {
  CA_RETURN_IF_ERROR(MakeDirs(parent));
  std::string templ = (parent / (prefix + "XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) return Internal("cannot create a directory under " + parent.string());
  return TempDir(fs::path(templ));
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)), keep_(other.keep_) { other.path_.clear(); }

TempDir::~TempDir() {
  if (path_.empty() || keep_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace cuda_agent
