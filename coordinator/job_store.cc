#include "coordinator/job_store.h"

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace caravela {
namespace {

// Keys: "job/<seq, 16 digits>" -> Job (so a scan lists in submission order),
// "id/<job id>" -> "<seq>", "next" -> the next seq.
constexpr char kNext[] = "next";

std::string JobKey(uint64_t seq) { return absl::StrFormat("job/%016d", seq); }

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("job store: ", what, ": ", s.ToString()));
}

rocksdb::WriteOptions Synced() {
  rocksdb::WriteOptions w;
  w.sync = true;
  return w;
}

}  // namespace

JobStore::~JobStore() = default;

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.keep_log_file_num = 3;
  rocksdb::DB* db = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(options, dir, &db), "open " + dir));
  std::unique_ptr<JobStore> store(new JobStore());
  store->db_.reset(db);
  return store;
}

absl::StatusOr<std::string> JobStore::NewId(const std::string& name) {
  std::lock_guard<std::mutex> lock(id_mu_);
  std::string value;
  uint64_t next = 1;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kNext, &value);
  if (s.ok() && !absl::SimpleAtoi(value, &next)) {
    return absl::DataLossError("job store: corrupt counter " + value);
  }
  if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "read counter");
  RETURN_IF_ERROR(FromRocks(db_->Put(Synced(), kNext, std::to_string(next + 1)), "counter"));
  return absl::StrCat(name, "-", next);
}

absl::Status JobStore::Put(const v1::Job& job) {
  std::string seq;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), "id/" + job.id(), &seq);
  if (s.IsNotFound()) {
    // A new job: its place in the listing is its id's number.
    const size_t dash = job.id().rfind('-');
    uint64_t n = 0;
    if (dash == std::string::npos || !absl::SimpleAtoi(job.id().substr(dash + 1), &n)) {
      return absl::InvalidArgumentError("job store: id without a number: " + job.id());
    }
    seq = std::to_string(n);
  } else if (!s.ok()) {
    return FromRocks(s, "read " + job.id());
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(seq, &n)) return absl::DataLossError("job store: corrupt seq " + seq);
  rocksdb::WriteBatch batch;
  batch.Put("id/" + job.id(), seq);
  batch.Put(JobKey(n), job.SerializeAsString());
  return FromRocks(db_->Write(Synced(), &batch), "write " + job.id());
}

absl::StatusOr<v1::Job> JobStore::Get(const std::string& id) const {
  std::string seq;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), "id/" + id, &seq);
  if (s.IsNotFound()) return absl::NotFoundError("no job " + id);
  RETURN_IF_ERROR(FromRocks(s, "read " + id));
  uint64_t n = 0;
  if (!absl::SimpleAtoi(seq, &n)) return absl::DataLossError("job store: corrupt seq " + seq);
  std::string bytes;
  RETURN_IF_ERROR(FromRocks(db_->Get(rocksdb::ReadOptions(), JobKey(n), &bytes), "read " + id));
  v1::Job job;
  if (!job.ParseFromString(bytes)) return absl::DataLossError("job store: corrupt job " + id);
  return job;
}

absl::StatusOr<std::vector<v1::Job>> JobStore::List() const {
  std::vector<v1::Job> jobs;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("job/"); it->Valid() && it->key().starts_with("job/"); it->Next()) {
    v1::Job job;
    if (!job.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError("job store: corrupt job at " + it->key().ToString());
    }
    jobs.push_back(std::move(job));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "list"));
  return jobs;
}

}  // namespace caravela
