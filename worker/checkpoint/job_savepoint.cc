#include "worker/checkpoint/job_savepoint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "google/protobuf/util/json_util.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/checkpoint/checkpoint_storage.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

constexpr char kMetaKey[] = "job-savepoint.json";
constexpr char kStatePrefix[] = "state/";
constexpr uint32_t kJobSavepointLayout = 1;

std::shared_ptr<spdlog::logger> Log() {
  static const std::shared_ptr<spdlog::logger> logger = SubsystemLogger("checkpoint");
  return logger;
}

std::string TaskPrefix(const std::string& job, int task) {
  return absl::StrCat(job, "/task-", task, "/");
}

std::string ManifestKey(const std::string& job, int task, int64_t id) {
  return absl::StrCat(TaskPrefix(job, task), "chk-", id, ".manifest");
}

// Copies one object between storages: a plain file is streamed by path;
// anything else goes through a temporary local file.
absl::Status CopyObject(CheckpointStorage& from, const std::string& from_key, CheckpointStorage& to,
                        const std::string& to_key) {
  const std::string local = from.LocalPath(from_key);
  if (!local.empty()) return to.Upload(to_key, local);
  const fs::path tmp = fs::temp_directory_path() /
                       absl::StrCat("caravela-copy-", ::getpid(), "-", WallClockMs(), ".tmp");
  absl::Status st;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    st = from.ReadChunks(from_key, [&](std::string_view chunk) {
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      return out ? absl::OkStatus()
                 : absl::InternalError(absl::StrCat("cannot write ", tmp.string()));
    });
  }
  if (st.ok()) st = to.Upload(to_key, tmp.string());
  std::error_code ec;
  fs::remove(tmp, ec);
  return st;
}

// The manifest of `task` at checkpoint `id` in `storage` under `prefix`.
absl::StatusOr<CheckpointManifest> ReadTaskManifest(CheckpointStorage& storage,
                                                    const std::string& prefix,
                                                    const std::string& job, int task, int64_t id) {
  const std::string key = prefix + ManifestKey(job, task, id);
  absl::StatusOr<std::string> bytes = storage.Read(key);
  if (absl::IsNotFound(bytes.status())) {
    return absl::DataLossError(absl::StrCat("task ", task, " of job ", job, ": checkpoint ", id,
                                            " has no manifest at ", storage.url(), "/", key));
  }
  RETURN_IF_ERROR(bytes.status());
  return DecodeManifest(*bytes, absl::StrCat(storage.url(), "/", key));
}

}  // namespace

std::string JobInstanceStorage(const std::string& storage_url, const std::string& job_id) {
  return absl::StrCat(storage_url, "/", job_id);
}

absl::StatusOr<JobSavepoint> WriteJobSavepoint(const JobCheckpointRef& from,
                                               const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  if (from.tasks <= 0 || from.checkpoint_id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", from.job_name, " has no complete checkpoint to save (tasks ",
                     from.tasks, ", checkpoint ", from.checkpoint_id, ")"));
  }
  ASSIGN_OR_RETURN(auto src, OpenCheckpointStorage(from.storage_url));
  ASSIGN_OR_RETURN(auto dst, OpenCheckpointStorage(StorageUrl(dir)));
  ASSIGN_OR_RETURN(bool exists, dst->Exists(kMetaKey));
  if (exists) {
    return absl::AlreadyExistsError(
        absl::StrCat("a savepoint exists already in ", dst->url(), " (", kMetaKey, ")"));
  }
  JobSavepoint sp;
  sp.set_layout_version(kJobSavepointLayout);
  sp.set_job_name(from.job_name);
  sp.set_job_id(from.job_id);
  sp.set_checkpoint_id(from.checkpoint_id);
  sp.set_parallelism(from.parallelism);
  sp.set_tasks(from.tasks);
  const std::string state(kStatePrefix);
  for (int g = 0; g < from.tasks; ++g) {
    ASSIGN_OR_RETURN(CheckpointManifest m,
                     ReadTaskManifest(*src, "", from.job_name, g, from.checkpoint_id));
    sp.set_epoch(std::max(sp.epoch(), m.epoch()));
    if (sp.spec_hash().empty()) sp.set_spec_hash(m.spec_hash());
    const std::string prefix = TaskPrefix(from.job_name, g);
    for (const auto& f : m.files()) {
      const std::string key = prefix + f.key();
      absl::StatusOr<uint64_t> size = src->Size(key);
      if (!size.ok() || *size != f.size()) {
        return absl::DataLossError(absl::StrCat(
            "task ", g, " of job ", from.job_name, ": checkpoint ", from.checkpoint_id, " file ",
            src->url(), "/", key,
            size.ok() ? absl::StrCat(" has ", *size, " bytes, not ", f.size()) : " is missing"));
      }
      RETURN_IF_ERROR(CopyObject(*src, key, *dst, state + key));
      sp.set_files(sp.files() + 1);
      sp.set_bytes(sp.bytes() + f.size());
    }
    // The manifest last among the task's objects.
    const std::string mkey = ManifestKey(from.job_name, g, from.checkpoint_id);
    RETURN_IF_ERROR(CopyObject(*src, mkey, *dst, state + mkey));
  }
  sp.set_created_at_ms(WallClockMs());
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  if (auto st = google::protobuf::util::MessageToJsonString(sp, &json, options); !st.ok()) {
    return absl::InternalError(absl::StrCat("savepoint metadata: ", st.ToString()));
  }
  RETURN_IF_ERROR(dst->Write(kMetaKey, json));
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  Log()->info(
      "job {}: savepoint of checkpoint {} ({} tasks, {} files, {} bytes) written to {} in {} ms",
      from.job_name, from.checkpoint_id, from.tasks, sp.files(), sp.bytes(), dst->url(), ms);
  return sp;
}

absl::StatusOr<JobSavepoint> ReadJobSavepoint(const std::string& dir) {
  ASSIGN_OR_RETURN(auto storage, OpenCheckpointStorage(StorageUrl(dir)));
  absl::StatusOr<std::string> json = storage->Read(kMetaKey);
  if (absl::IsNotFound(json.status())) {
    return absl::NotFoundError(
        absl::StrCat("no savepoint in ", storage->url(), " (", kMetaKey, " does not exist)"));
  }
  RETURN_IF_ERROR(json.status());
  JobSavepoint sp;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (auto st = google::protobuf::util::JsonStringToMessage(*json, &sp, options); !st.ok()) {
    return absl::DataLossError(
        absl::StrCat(storage->url(), "/", kMetaKey, " is not a job savepoint: ", st.ToString()));
  }
  if (sp.layout_version() == 0 || sp.layout_version() > kJobSavepointLayout) {
    return absl::FailedPreconditionError(
        absl::StrCat("savepoint ", storage->url(), " has layout version ", sp.layout_version(),
                     "; this binary reads 1..", kJobSavepointLayout));
  }
  if (sp.tasks() <= 0 || sp.checkpoint_id() <= 0 || sp.job_name().empty()) {
    return absl::DataLossError(absl::StrCat("savepoint ", storage->url(), " names no tasks"));
  }
  ASSIGN_OR_RETURN(auto objects, storage->List(kStatePrefix));
  std::map<std::string, uint64_t> sizes;
  for (const ObjectInfo& o : objects) sizes.emplace(o.key, o.size);
  const std::string state(kStatePrefix);
  for (int g = 0; g < sp.tasks(); ++g) {
    absl::StatusOr<CheckpointManifest> m =
        ReadTaskManifest(*storage, state, sp.job_name(), g, sp.checkpoint_id());
    if (!m.ok()) {
      return absl::DataLossError(
          absl::StrCat("savepoint ", storage->url(), " is incomplete: ", m.status().message()));
    }
    const std::string missing = MissingFile(*m, sizes, state + TaskPrefix(sp.job_name(), g));
    if (!missing.empty()) {
      return absl::DataLossError(
          absl::StrCat("savepoint ", storage->url(), " is incomplete: ", missing));
    }
  }
  return sp;
}

std::vector<SpecError> CheckSavepointFits(const JobSavepoint& savepoint, const std::string& dir,
                                          const JobSpec& spec) {
  std::vector<SpecError> errors;
  if (savepoint.job_name() != spec.name) {
    errors.push_back({"metadata.name",
                      absl::StrCat("the savepoint in ", dir, " is of job ", savepoint.job_name(),
                                   ": a job starts only from its own savepoints (the same name)")});
  }
  if (!savepoint.spec_hash().empty() && !JobGraphHashMatches(spec, savepoint.spec_hash())) {
    errors.push_back(
        {"spec", absl::StrCat("the savepoint in ", dir,
                              " was taken of another job graph (sources, operators or sinks "
                              "changed): its state cannot be restored into this one")});
  }
  if (spec.checkpoint.interval <= 0) {
    errors.push_back({"spec.checkpoint",
                      "a job started from a savepoint needs spec.checkpoint (its state is "
                      "restored like a checkpoint's)"});
  }
  return errors;
}

absl::Status ImportJobSavepoint(const std::string& dir, const JobSavepoint& savepoint,
                                const std::string& storage_url) {
  ASSIGN_OR_RETURN(auto src, OpenCheckpointStorage(StorageUrl(dir)));
  ASSIGN_OR_RETURN(auto dst, OpenCheckpointStorage(storage_url));
  const std::string state(kStatePrefix);
  int64_t copied = 0, kept = 0;
  for (int g = 0; g < savepoint.tasks(); ++g) {
    ASSIGN_OR_RETURN(CheckpointManifest m, ReadTaskManifest(*src, state, savepoint.job_name(), g,
                                                            savepoint.checkpoint_id()));
    const std::string prefix = TaskPrefix(savepoint.job_name(), g);
    for (const auto& f : m.files()) {
      const std::string key = prefix + f.key();
      // Shared files are named by content: one of the same size is the same.
      if (absl::StartsWith(f.key(), "shared/")) {
        absl::StatusOr<uint64_t> size = dst->Size(key);
        if (size.ok() && *size == f.size()) {
          ++kept;
          continue;
        }
      }
      RETURN_IF_ERROR(CopyObject(*src, state + key, *dst, key));
      ++copied;
    }
    const std::string mkey = ManifestKey(savepoint.job_name(), g, savepoint.checkpoint_id());
    RETURN_IF_ERROR(CopyObject(*src, state + mkey, *dst, mkey));
  }
  Log()->info("job {}: savepoint {} (checkpoint {}) imported into {}: {} files copied, {} there",
              savepoint.job_name(), src->url(), savepoint.checkpoint_id(), dst->url(), copied,
              kept);
  return absl::OkStatus();
}

}  // namespace caravela
