#include "cuda_agent/util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>

namespace cuda_agent::log {
namespace {

std::atomic<Level> g_level{Level::kInfo};

spdlog::logger& Logger() {
  // Logs go to stderr so that stdout stays machine-readable (--json).
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("cuda-agent");
    l->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
    l->set_level(spdlog::level::trace);
    return l;
  }();
  return *logger;
}

}  // namespace

void Write(Level level, std::string_view message) {
  if (level < g_level.load()) return;
  switch (level) {
    case Level::kDebug:
      Logger().debug("{}", message);
      break;
    case Level::kInfo:
      Logger().info("{}", message);
      break;
    case Level::kWarn:
      Logger().warn("{}", message);
      break;
    case Level::kError:
      Logger().error("{}", message);
      break;
    case Level::kOff:
      break;
  }
}

void SetLevel(Level level) { g_level.store(level); }
Level GetLevel() { return g_level.load(); }

bool ParseLevel(std::string_view name, Level* level) {
  if (name == "debug")
    *level = Level::kDebug;
  else if (name == "info")
    *level = Level::kInfo;
  else if (name == "warn")
    *level = Level::kWarn;
  else if (name == "error")
    *level = Level::kError;
  else if (name == "off")
    *level = Level::kOff;
  else
    return false;
  return true;
}

}  // namespace cuda_agent::log
