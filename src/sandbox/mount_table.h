// The mount points of the calling process, read from /proc/self/mountinfo.
#pragma once

#include <string>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::sandbox {

// Mount points in mountinfo order (parents before children), with octal escapes
// such as "\040" decoded.
StatusOr<std::vector<std::string>> ReadMountPoints();

}  // namespace cuda_agent::sandbox
