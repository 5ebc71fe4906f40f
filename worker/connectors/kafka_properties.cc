#include "worker/connectors/kafka_properties.h"

#include <librdkafka/rdkafka.h>

#include <memory>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/spec_reader.h"
#include "yaml-cpp/yaml.h"

namespace caravela {
namespace {

struct Reserved {
  std::string_view name;
  // Where it is refused: a source's, a sink's, the process's properties.
  bool source, sink, process;
  std::string_view why;
};

// The keys (and their librdkafka aliases) Caravela sets for its guarantees.
constexpr Reserved kReserved[] = {
    {"bootstrap.servers", true, true, true,
     "the cluster is the source's or sink's kafka.bootstrap, else the worker's --bootstrap"},
    {"metadata.broker.list", true, true, true,
     "the cluster is the source's or sink's kafka.bootstrap, else the worker's --bootstrap"},
    {"group.id", true, true, true,
     "sources commit their checkpoints' offsets to the group caravela-<job> (for lag tools)"},
    {"enable.auto.commit", true, true, true,
     "the checkpoints own the source offsets; nothing commits them automatically"},
    {"auto.commit.enable", true, true, true,
     "the checkpoints own the source offsets; nothing commits them automatically"},
    {"enable.auto.offset.store", true, true, true,
     "the checkpoints own the source offsets; nothing commits them automatically"},
    {"auto.offset.reset", true, true, true,
     "a position outside the log fails the job (data loss is never skipped); where a source "
     "starts is its kafka.start"},
    {"enable.partition.eof", true, true, true, "Caravela's clients depend on its setting"},
    {"transactional.id", true, true, true,
     "exactly-once sinks derive it from job, sink and task, so a new epoch fences the old one"},
    {"enable.idempotence", true, true, true,
     "sinks and exchanges write with an idempotent producer (no duplicates on retries)"},
    {"acks", true, true, true, "the idempotent producer needs acks=all"},
    {"request.required.acks", true, true, true, "the idempotent producer needs acks=all"},
    {"linger.ms", true, true, true, "a Kafka sink's linger is its kafka.linger"},
    {"queue.buffering.max.ms", true, true, true, "a Kafka sink's linger is its kafka.linger"},
    // A sink's exactly-once commit markers are read read_committed; a
    // source may choose (read_committed: only committed transactions).
    {"isolation.level", false, true, true,
     "exactly-once sinks read their commit markers read_committed; set it on a source"},
};

struct ConfDeleter {
  void operator()(rd_kafka_conf_t* c) const { rd_kafka_conf_destroy(c); }
};

std::mutex process_mu;
std::vector<std::pair<std::string, std::string>>& ProcessList() {
  static auto* list = new std::vector<std::pair<std::string, std::string>>();
  return *list;
}

}  // namespace

std::string ReservedKafkaProperty(KafkaPropertyScope scope, std::string_view name) {
  for (const Reserved& r : kReserved) {
    if (r.name != name) continue;
    const bool refused = scope == KafkaPropertyScope::kSource ? r.source
                         : scope == KafkaPropertyScope::kSink ? r.sink
                                                              : r.process;
    if (refused) return std::string(r.why);
  }
  return "";
}

bool IsSecretKafkaProperty(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  return absl::StrContains(lower, "password") || absl::StrContains(lower, "secret") ||
         absl::StrContains(lower, "ssl.key.pem") || absl::StrContains(lower, "sasl.jaas") ||
         absl::StrContains(lower, "oauthbearer.config");
}

absl::Status CheckKafkaProperty(KafkaPropertyScope scope, const std::string& name,
                                const std::string& value) {
  if (name.empty()) return absl::InvalidArgumentError("empty kafka property name");
  if (std::string why = ReservedKafkaProperty(scope, name); !why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kafka property ", name, " is set by Caravela: ", why));
  }
  std::unique_ptr<rd_kafka_conf_t, ConfDeleter> conf(rd_kafka_conf_new());
  char err[512];
  if (rd_kafka_conf_set(conf.get(), name.c_str(), value.c_str(), err, sizeof(err)) !=
      RD_KAFKA_CONF_OK) {
    // librdkafka's message names the property (and, for a refused value of
    // an enumeration or a number, the value: never a secret's).
    return absl::InvalidArgumentError(
        IsSecretKafkaProperty(name)
            ? absl::StrCat("kafka property ", name, ": refused by librdkafka (value not shown)")
            : absl::StrCat("kafka property ", name, ": ", err));
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> ReadKafkaProperties(SpecReader& r, const YAML::Node& kafka,
                                                       const std::string& kpath,
                                                       KafkaPropertyScope scope) {
  std::map<std::string, std::string> out;
  const std::string path = SpecReader::Join(kpath, "properties");
  const YAML::Node n = SpecReader::Field(kafka, "properties");
  if (r.Missing(n, path, false)) return out;
  if (!n.IsMap()) {
    r.Err(path, absl::StrCat("expected a mapping of librdkafka property names to values (e.g. "
                             "{security.protocol: SASL_SSL}), got ",
                             SpecReader::Describe(n)));
    return out;
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar() || it->first.Scalar().empty()) {
      r.Err(path, absl::StrCat("expected property names, got ", SpecReader::Describe(it->first),
                               " as a key"));
      continue;
    }
    const std::string& name = it->first.Scalar();
    const std::string item = SpecReader::Join(path, name);
    if (out.count(name) > 0) {
      r.Err(item, absl::StrCat("duplicate property ", SpecReader::Quote(name)));
      continue;
    }
    if (!it->second.IsScalar()) {
      r.Err(item, absl::StrCat("expected a string, got ", SpecReader::Describe(it->second)));
      continue;
    }
    const std::string& value = it->second.Scalar();
    if (absl::Status st = CheckKafkaProperty(scope, name, value); !st.ok()) {
      r.Err(item, std::string(st.message()));
      continue;
    }
    out[name] = value;
  }
  return out;
}

absl::Status SetProcessKafkaProperties(const std::vector<std::string>& items) {
  std::vector<std::pair<std::string, std::string>> props;
  for (const std::string& item : items) {
    if (absl::StripAsciiWhitespace(item).empty()) continue;  // a blank line of the variable
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kafka-property ", item.substr(0, eq),
                       ": expected KEY=VALUE, e.g. security.protocol=SASL_SSL"));
    }
    std::string name = std::string(absl::StripAsciiWhitespace(item.substr(0, eq)));
    std::string value = item.substr(eq + 1);
    if (absl::Status st = CheckKafkaProperty(KafkaPropertyScope::kProcess, name, value); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--kafka-property: ", st.message()));
    }
    props.emplace_back(std::move(name), std::move(value));
  }
  std::lock_guard<std::mutex> lock(process_mu);
  ProcessList() = std::move(props);
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::string>> ProcessKafkaProperties() {
  std::lock_guard<std::mutex> lock(process_mu);
  return ProcessList();
}

}  // namespace caravela
