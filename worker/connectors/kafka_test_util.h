// Small Kafka client helpers for tests, demos and benchmarks: produce a list
// of records and read a whole topic back. Not for the data path: they are
// synchronous and build a client per call.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace caravela {

struct KafkaTestRecord {
  int32_t partition = -1;  // -1: chosen by the partitioner (murmur2 of the key)
  std::string key;         // empty: null key
  std::string value;
  bool null_value = false;  // a tombstone: the value is null
};

// Produces `records` in order and waits until all are acknowledged. Records
// sent to the same partition keep their order. Errors: Unavailable if any
// delivery failed or did not finish within `timeout_ms`.
absl::Status ProduceRecords(const std::string& bootstrap, const std::string& topic,
                            const std::vector<KafkaTestRecord>& records, int timeout_ms = 10000);

// Produces unkeyed values to explicit partitions (partition -1: any).
absl::Status ProduceLines(const std::string& bootstrap, const std::string& topic,
                          const std::vector<std::pair<int32_t, std::string>>& msgs,
                          int timeout_ms = 10000);

struct KafkaConsumedRecord {
  int32_t partition = 0;
  int64_t offset = 0;
  bool has_key = false;
  std::string key;
  std::string value;
};

// Reads every partition of `topic` from its log start up to the end offsets
// observed when the call starts (the high watermarks; the last stable
// offsets on a topic with transactions, read read_committed: records of
// aborted or still open transactions are not returned), and returns the records ordered
// by (partition, offset). Deterministic once producers have flushed.
// Errors: NotFound (topic missing), DeadlineExceeded (not all records read
// within `timeout_ms`), or the source's error.
absl::StatusOr<std::vector<KafkaConsumedRecord>> ConsumeAll(const std::string& bootstrap,
                                                            const std::string& topic,
                                                            int timeout_ms = 10000);

// The offsets consumer group `group` committed for partitions 0..partitions-1
// of `topic` (-1: none), as lag tools read them.
absl::StatusOr<std::vector<int64_t>> CommittedOffsets(const std::string& bootstrap,
                                                      const std::string& group,
                                                      const std::string& topic, int partitions);

// ConsumeAll(), values only.
absl::StatusOr<std::vector<std::string>> ConsumeAllValues(const std::string& bootstrap,
                                                          const std::string& topic,
                                                          int timeout_ms = 10000);

}  // namespace caravela
