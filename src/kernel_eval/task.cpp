#include "cuda_agent/kernel_eval/task.h"

#include <regex>

#include "cuda_agent/util/file.h"
#include "cuda_agent/util/hash.h"

namespace cuda_agent::kernel_eval {

StatusOr<Task> LoadTask(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return InvalidArgument("task " + path.string() + " is not a file");
  if (path.extension() != ".py") return InvalidArgument("task " + path.string() + " is not a .py file");
  if (std::filesystem::file_size(path, ec) > (4u << 20))
    return InvalidArgument("task " + path.string() + " is larger than 4 MiB");
  auto text = ReadFile(path);
  if (!text.ok()) return InvalidArgument("task " + path.string() + " cannot be read");
  static const std::regex kModel(R"((^|\n)class\s+Model\s*\()");
  static const std::regex kInputs(R"((^|\n)def\s+get_inputs\s*\()");
  static const std::regex kInit(R"((^|\n)def\s+get_init_inputs\s*\()");
  if (!std::regex_search(*text, kModel)) return InvalidArgument("task " + path.string() + " defines no class Model");
  if (!std::regex_search(*text, kInputs)) return InvalidArgument("task " + path.string() + " defines no get_inputs()");
  if (!std::regex_search(*text, kInit))
    return InvalidArgument("task " + path.string() + " defines no get_init_inputs()");
  Task task;
  task.path = std::filesystem::absolute(path);
  task.name = path.stem().string();
  task.source = std::move(text).value();
  task.hash = Sha256Hex(task.source);
  return task;
}

}  // namespace cuda_agent::kernel_eval
