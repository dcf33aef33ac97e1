// The file rules of agent workspaces, shared by the worker (which enforces
// them) and the client (which mirrors every workspace so it can move it to
// another worker). Plain C++.
//
// What an agent sees, by path relative to its workspace:
//   model.py                                          the reference (read-only)
//   build/binding_registry.h, build/ext_main.cpp      fixed build files (read-only)
//   model_new.py, kernels/<name>.{cu,cuh,cpp,h,hpp}   the candidate (writable)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cuda_agent::rpc {

struct FileEntry {
  std::string path;
  int64_t size = 0;
  bool read_only = false;
};

// The answer to a file operation. ok=false is the agent's mistake (no such
// file, an ambiguous edit, a read-only path, a limit), with a message for it.
struct FileResult {
  bool ok = true;
  std::string message;
  std::string content;           // Read
  std::vector<FileEntry> files;  // List
  static FileResult Refused(std::string why) { return {false, std::move(why), {}, {}}; }
};

// Replaces `old_text` in `text` with `new_text`: it must occur exactly once,
// or at least once with `replace_all`.
FileResult ApplyEdit(std::string* text, const std::string& old_text, const std::string& new_text, bool replace_all);

// Empty if `path` may hold candidate code (model_new.py or kernels/<name> with
// a source extension); otherwise why not.
std::string CandidatePathProblem(const std::string& path);

}  // namespace cuda_agent::rpc
