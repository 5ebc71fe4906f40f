// librdkafka client properties that users pass through (SASL, TLS, client
// tuning), at two levels:
//
//  * a job's `kafka: {properties: {KEY: VALUE}}` on a Kafka source or sink:
//    applied, verbatim, to every client that source or sink creates;
//  * the process's (`caravela worker --kafka-property KEY=VALUE`, repeatable,
//    or CARAVELA_KAFKA_PROPERTY): applied to every client the process
//    creates (sources, sinks, exchanges, topic administration).
//
// Order on each client: Caravela's own settings, then the process's
// properties, then the job's: the job's win over the worker's, and both win
// over Caravela's tuning defaults (client.id, linger of exchanges, fetch
// waits, ...). The keys Caravela needs for its guarantees are refused at
// both levels with the reason (ReservedKafkaProperty): bootstrap.servers,
// group.id, offsets and commits, transactional.id, idempotence and acks,
// linger.ms (a sink's `linger`), ...
//
// Every name and value is checked with librdkafka itself
// (rd_kafka_conf_set on a scratch configuration): an unknown property or a
// value it refuses is an error naming the property when the job is
// validated or the worker starts, not when a task opens its client.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace YAML {
class Node;
}  // namespace YAML

namespace caravela {

class SpecReader;

// Where a property is given.
enum class KafkaPropertyScope { kSource, kSink, kProcess };

// Why `name` cannot be set at `scope` ("" when it can).
std::string ReservedKafkaProperty(KafkaPropertyScope scope, std::string_view name);

// True for properties whose values are secrets (passwords, keys): errors
// never print their value.
bool IsSecretKafkaProperty(std::string_view name);

// OK, or InvalidArgument naming the property: reserved at `scope`, unknown
// to librdkafka, or a value librdkafka refuses (its own message).
absl::Status CheckKafkaProperty(KafkaPropertyScope scope, const std::string& name,
                                const std::string& value);

// Reads the optional `properties` mapping of a source's or sink's `kafka:`
// (`kafka`, at YAML path `kpath`): string keys to scalar values. Errors go
// to `r` with their YAML path, e.g.
//   spec.sinks[0].kafka.properties.sasl.password: expected a string, got a mapping
std::map<std::string, std::string> ReadKafkaProperties(SpecReader& r, const YAML::Node& kafka,
                                                       const std::string& kpath,
                                                       KafkaPropertyScope scope);

// Parses and checks `KEY=VALUE` items (the worker's --kafka-property) and
// makes them the process's properties, replacing any before. On an error
// (naming the item; InvalidArgument) nothing changes. Call before the
// process creates Kafka clients.
absl::Status SetProcessKafkaProperties(const std::vector<std::string>& items);
// The process's properties (empty unless set), in the order given.
std::vector<std::pair<std::string, std::string>> ProcessKafkaProperties();

}  // namespace caravela
