#include "common/logging.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace caravela {
namespace {

thread_local const LogContext* t_context = nullptr;

void Put(spdlog::memory_buf_t& dest, std::string_view s) {
  dest.append(s.data(), s.data() + s.size());
}

// `s` escaped for a JSON string.
void PutJsonEscaped(spdlog::memory_buf_t& dest, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : s) {
    switch (c) {
      case '"':
        Put(dest, "\\\"");
        break;
      case '\\':
        Put(dest, "\\\\");
        break;
      case '\n':
        Put(dest, "\\n");
        break;
      case '\t':
        Put(dest, "\\t");
        break;
      case '\r':
        Put(dest, "\\r");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          const char esc[] = {'\\', 'u', '0', '0', kHex[(c >> 4) & 0xf], kHex[c & 0xf]};
          dest.append(esc, esc + sizeof esc);
        } else {
          dest.push_back(c);
        }
    }
  }
}

// %* : the message, escaped for a JSON string.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm& /*tm*/,
              spdlog::memory_buf_t& dest) override {
    PutJsonEscaped(dest, std::string_view(msg.payload.data(), msg.payload.size()));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// %& : the thread's LogContext, as JSON fields ("job":"x","task":"y",) in
// JSON lines or as a prefix ([job=x task=y] ) in text lines; nothing without one.
class ContextFlag : public spdlog::custom_flag_formatter {
 public:
  explicit ContextFlag(bool json) : json_(json) {}
  void format(const spdlog::details::log_msg& /*msg*/, const std::tm& /*tm*/,
              spdlog::memory_buf_t& dest) override {
    const LogContext* c = LogContext::Current();
    if (c == nullptr) return;
    if (json_) {
      Put(dest, "\"job\":\"");
      PutJsonEscaped(dest, c->job());
      Put(dest, "\",");
      if (!c->task().empty()) {
        Put(dest, "\"task\":\"");
        PutJsonEscaped(dest, c->task());
        Put(dest, "\",");
      }
      if (c->partition() >= 0) Put(dest, absl::StrCat("\"partition\":", c->partition(), ","));
      return;
    }
    Put(dest, "[job=");
    Put(dest, c->job());
    if (!c->task().empty()) Put(dest, absl::StrCat(" task=", c->task()));
    if (c->partition() >= 0) Put(dest, absl::StrCat(" partition=", c->partition()));
    Put(dest, "] ");
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<ContextFlag>(json_);
  }

 private:
  bool json_;
};

// The text format, with the context flag.
void InstallTextFormat() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<ContextFlag>('&', false).set_pattern("[%H:%M:%S.%e] [%n] [%l] %&%v");
  spdlog::set_formatter(std::move(formatter));
}

}  // namespace

LogContext::LogContext(std::string job, std::string task, int partition)
    : job_(std::move(job)), task_(std::move(task)), partition_(partition), outer_(t_context) {
  t_context = this;
}

LogContext::~LogContext() { t_context = outer_; }

const LogContext* LogContext::Current() { return t_context; }

std::shared_ptr<spdlog::logger> SubsystemLogger(const std::string& name) {
  if (auto existing = spdlog::get(name)) return existing;
  auto created = spdlog::default_logger()->clone(name);
  try {
    // Registers it with the registry's formatter and its level for `name`
    // (ConfigureLogging).
    spdlog::initialize_logger(created);
  } catch (const spdlog::spdlog_ex&) {
    if (auto existing = spdlog::get(name)) return existing;  // another thread won the race
  }
  return created;
}

void LogToStderr() {
  auto err = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("", err));
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) { l->sinks().assign({err}); });
}

absl::Status ConfigureLogging(const std::string& format, const std::string& levels) {
  if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('*');
    formatter->add_flag<ContextFlag>('&', true);
    formatter->set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","subsystem":"%n",%&"msg":"%*"})");
    spdlog::set_formatter(std::move(formatter));
  } else if (format == "text") {
    InstallTextFormat();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("log format ", format, ": expected text or json"));
  }
  if (levels.empty()) return absl::OkStatus();
  spdlog::details::registry::log_levels per_logger;
  spdlog::level::level_enum global = spdlog::get_level();
  bool has_global = false;
  for (absl::string_view part : absl::StrSplit(levels, ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    const std::string& level_name = kv.second.empty() ? kv.first : kv.second;
    const spdlog::level::level_enum level = spdlog::level::from_str(level_name);
    if (level == spdlog::level::off && level_name != "off") {
      return absl::InvalidArgumentError(absl::StrCat(
          "log level \"", std::string(part),
          "\": expected LEVEL or SUBSYSTEM=LEVEL with trace, debug, info, warn, error, critical "
          "or off"));
    }
    if (kv.second.empty()) {
      global = level;
      has_global = true;
    } else {
      per_logger[kv.first] = level;
    }
  }
  spdlog::details::registry::instance().set_levels(std::move(per_logger),
                                                   has_global ? &global : nullptr);
  return absl::OkStatus();
}

}  // namespace caravela
