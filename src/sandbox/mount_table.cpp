#include "mount_table.h"

#include <sstream>

#include "cuda_agent/util/file.h"

namespace cuda_agent::sandbox {
namespace {

std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        if (s[i + k] < '0' || s[i + k] > '7')
          ok = false;
        else
          v = v * 8 + (s[i + k] - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

StatusOr<std::vector<std::string>> ReadMountPoints() {
  CA_ASSIGN_OR_RETURN(std::string text, ReadFile("/proc/self/mountinfo"));
  std::vector<std::string> points;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    // id parent major:minor root mount-point options ...
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    if (!(fields >> id >> parent >> dev >> root >> point)) continue;
    points.push_back(Unescape(point));
  }
  if (points.empty()) return Internal("/proc/self/mountinfo lists no mounts");
  return points;
}

}  // namespace cuda_agent::sandbox
