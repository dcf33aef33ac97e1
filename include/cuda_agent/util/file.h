// Small file-system helpers that return Status instead of throwing.
#pragma once

#include <filesystem>
#include <string>

#include "cuda_agent/util/status.h"

namespace cuda_agent {

StatusOr<std::string> ReadFile(const std::filesystem::path& path);
// Writes `contents` to a temporary sibling and renames it over `path`, so a
// crash never leaves a half-written file.
Status WriteFileAtomic(const std::filesystem::path& path, const std::string& contents);
Status MakeDirs(const std::filesystem::path& path);
// Recursively copies a file or directory; symlinks are refused.
Status CopyTree(const std::filesystem::path& from, const std::filesystem::path& to);
// Recursively changes the owner of `path` (used to hand a work dir to the sandbox uid).
Status ChownTree(const std::filesystem::path& path, unsigned uid, unsigned gid);
// Keeps at most `max_bytes` of `text`, cutting the middle and saying how much went.
std::string TruncateMiddle(const std::string& text, size_t max_bytes);

// A directory created under `parent` with a unique name, removed with its
// contents on destruction unless Keep() was called.
class TempDir {
 public:
  static StatusOr<TempDir> Create(const std::filesystem::path& parent, const std::string& prefix);
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  void Keep() { keep_ = true; }

 private:
  explicit TempDir(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
  bool keep_ = false;
};

}  // namespace cuda_agent
