// JobStore: the coordinator's durable record of jobs (SPEC §8), a RocksDB
// instance in its data dir. Every write is synced before it returns, so a
// coordinator killed right after answering keeps what it answered.
// Thread-safe (RocksDB is; ids are taken under a mutex).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "caravela/v1/job.pb.h"
#include "common/status.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace caravela {

class JobStore {
 public:
  // Opens or creates the store under `dir` (created if missing).
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& dir);
  ~JobStore();

  // A new id "<name>-<n>", n counting up over every job ever stored.
  absl::StatusOr<std::string> NewId(const std::string& name);
  absl::Status Put(const v1::Job& job);
  // NotFound naming the id.
  absl::StatusOr<v1::Job> Get(const std::string& id) const;
  // Every job, in submission order.
  absl::StatusOr<std::vector<v1::Job>> List() const;

 private:
  JobStore() = default;
  std::unique_ptr<rocksdb::DB> db_;
  std::mutex id_mu_;
};

}  // namespace caravela
