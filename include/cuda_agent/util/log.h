// The project's logging facade. Implemented over spdlog in a torch-free file, so
// targets compiled with torch's include path (which ships its own fmt) can log
// without including spdlog (DESIGN.md §3, "two worlds").
//
//   CA_LOG(kInfo) << "compiled " << name << " in " << secs << " s";
//
// Thread-safe.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace cuda_agent::log {

enum class Level { kDebug = 0, kInfo, kWarn, kError, kOff };

// Emits one line at `level` if it passes the current threshold.
void Write(Level level, std::string_view message);
void SetLevel(Level level);
Level GetLevel();
// Parses "debug", "info", "warn", "error", "off"; returns false on anything else.
bool ParseLevel(std::string_view name, Level* level);

// Collects one line and writes it on destruction.
class LineWriter {
 public:
  explicit LineWriter(Level level) : level_(level) {}
  ~LineWriter() { Write(level_, stream_.str()); }
  template <typename T>
  LineWriter& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream stream_;
};

}  // namespace cuda_agent::log

#define CA_LOG(level)                                                    \
  if (::cuda_agent::log::Level::level < ::cuda_agent::log::GetLevel()) { \
  } else                                                                 \
    ::cuda_agent::log::LineWriter(::cuda_agent::log::Level::level)
