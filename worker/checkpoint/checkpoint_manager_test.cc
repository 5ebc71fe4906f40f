// CheckpointManager against the real RocksDB backend and FileStorage, in
// fresh temporary directories.
#include "worker/checkpoint/checkpoint_manager.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/failpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/testing/operator_harness.h"
#include "worker/testing/s3_server.h"
#include "worker/testing/status_testing.h"
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::SizeIs;

using Contents = std::map<std::string, std::map<std::string, std::string>>;  // table -> kv

std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = (fs::path(::testing::TempDir()) / ("caravela_" + tag + "_XXXXXX")).string();
  char* made = mkdtemp(tmpl.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << tmpl;
  return tmpl;
}

// Incompressible pseudo-random bytes, deterministic in `seed`.
std::string RandomBytes(uint64_t seed, size_t n) {
  std::string out;
  out.reserve(n + 8);
  for (uint64_t i = 0; out.size() < n; ++i) {
    uint64_t v = XXH64(&i, sizeof i, seed);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  out.resize(n);
  return out;
}

std::string Key(uint64_t i) {
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(i));
  return buf;
}

// Puts keys [from, to) with ~100-byte random values (version `v` of each).
void Fill(StateBackend& b, const std::string& table, uint64_t from, uint64_t to, uint64_t v = 0) {
  auto t = b.OpenTable(table);
  ASSERT_TRUE(t.ok()) << t.status();
  for (uint64_t i = from; i < to; ++i) (*t)->Put(Key(i), RandomBytes(i * 1000 + v, 84));
  ASSERT_OK(b.Commit());
}

Contents Dump(StateBackend& b, const std::vector<std::string>& tables) {
  Contents out;
  for (const auto& name : tables) {
    auto t = b.OpenTable(name);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) continue;
    auto& kv = out[name];
    EXPECT_TRUE((*t)->Scan("", "",
                           [&](std::string_view k, std::string_view v) {
                             kv.emplace(k, v);
                             return true;
                           })
                    .ok());
  }
  return out;
}

std::unique_ptr<StateBackend> NewBackend(const std::string& path) {
  auto b = OpenRocksDbBackend(path);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

CheckpointManifest RuntimeFields() {
  CheckpointManifest m;
  m.set_spec_hash("spec-abc");
  m.set_epoch(7);
  auto* src = m.add_sources();
  src->set_name("purchases");
  auto* p = src->add_partitions();
  p->set_partition(2);
  p->set_next_offset(12345);
  p->set_watermark(1700000000000);
  p->set_idle(true);
  auto* op = m.add_operators();
  op->set_name("revenue");
  op->set_state(std::string("timers\0bytes", 12));
  auto* sink = m.add_sinks();
  sink->set_index(1);
  sink->set_state("txn-42");
  (*m.mutable_extra())["note"] = "x";
  return m;
}

// Every test runs against file:// and against s3:// (a real s3rver,
// started once for the suite): the CheckpointStorage contract as the manager
// uses it.
class CheckpointManagerTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Stops the s3rver and removes its directory (it used to outlive the
  // process and leave its objects under /tmp).
  static void TearDownTestSuite() {
    delete s3_;
    s3_ = nullptr;
  }
  void SetUp() override {
    root_ = MakeTempDir("checkpoint");
    if (file()) {
      url_ = "file://" + root_ + "/store";
      return;
    }
    if (s3_ == nullptr) {
      auto s = S3Server::Start();
      ASSERT_TRUE(s.ok()) << s.status();
      s3_ = s->release();
    }
    s3_->ExportEnvironment();
    // A prefix of its own per test (the bucket is shared).
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    url_ = absl::StrCat("s3://", S3Server::kBucket, "/", name, "-", prefixes_++);
  }
  bool file() const { return GetParam() == "file"; }
  void TearDown() override {
    backend_.reset();
    RemoveTree(root_);
  }

  std::unique_ptr<CheckpointManager> OpenManager(int retain = 3) {
    auto m = CheckpointManager::Open(url_, "job-1", 3, root_ + "/scratch", retain);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  // Keys under the task prefix (relative to it).
  std::vector<std::string> Listing(CheckpointManager& mgr) {
    auto list = mgr.storage().List(mgr.prefix());
    EXPECT_TRUE(list.ok()) << list.status();
    std::vector<std::string> out;
    for (const auto& o : *list) out.push_back(o.key.substr(mgr.prefix().size()));
    return out;
  }
  int CountShared(CheckpointManager& mgr) {
    auto keys = Listing(mgr);
    return std::count_if(keys.begin(), keys.end(),
                         [](const std::string& k) { return k.starts_with("shared/"); });
  }
  CheckpointManifest LatestOrDie(CheckpointManager& mgr) {
    auto latest = mgr.Latest();
    EXPECT_TRUE(latest.ok()) << latest.status();
    EXPECT_TRUE(latest.ok() && latest->has_value());
    return latest.ok() && latest->has_value() ? **latest : CheckpointManifest();
  }
  Contents RestoreAndDump(CheckpointManager& mgr, const CheckpointManifest& m,
                          const std::vector<std::string>& tables) {
    auto fresh = NewBackend(root_ + "/restored-" + std::to_string(restores_++));
    auto stats = mgr.RestoreState(m, *fresh);
    EXPECT_TRUE(stats.ok()) << stats.status();
    return Dump(*fresh, tables);
  }

  static inline S3Server* s3_ = nullptr;  // one per suite (TearDownTestSuite stops it)
  static inline int prefixes_ = 0;
  std::string root_;
  std::string url_;
  std::unique_ptr<StateBackend> backend_;
  int restores_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Storage, CheckpointManagerTest, ::testing::Values("file", "s3"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST_P(CheckpointManagerTest, WriteThenRestoreGivesIdenticalState) {
  backend_ = NewBackend(root_ + "/db");
  Fill(*backend_, "a", 0, 3000);
  Fill(*backend_, "b", 100, 900, 1);
  auto mgr = OpenManager();
  EXPECT_EQ(mgr->next_checkpoint_id(), 1);
  auto stats = mgr->Write(*backend_, RuntimeFields());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->checkpoint_id, 1);
  EXPECT_EQ(stats->files_uploaded, stats->files_total);
  EXPECT_GT(stats->bytes_total, 300'000u);
  EXPECT_GE(stats->bytes_uploaded, stats->bytes_total);
  EXPECT_EQ(mgr->next_checkpoint_id(), 2);
  EXPECT_FALSE(fs::exists(root_ + "/scratch/snap-1"));

  CheckpointManifest m = LatestOrDie(*mgr);
  EXPECT_EQ(m.checkpoint_id(), 1);
  EXPECT_EQ(m.layout_version(), 1u);
  EXPECT_EQ(m.job_name(), "job-1");
  EXPECT_EQ(m.task_id(), 3);
  EXPECT_GT(m.created_at_ms(), 1600000000000);
  EXPECT_EQ(m.spec_hash(), "spec-abc");
  EXPECT_EQ(m.epoch(), 7);
  ASSERT_THAT(m.sources(), SizeIs(1));
  EXPECT_EQ(m.sources(0).partitions(0).next_offset(), 12345);
  EXPECT_TRUE(m.sources(0).partitions(0).idle());
  EXPECT_EQ(m.operators(0).state(), std::string("timers\0bytes", 12));
  EXPECT_EQ(m.sinks(0).state(), "txn-42");
  EXPECT_EQ(m.extra().at("note"), "x");
  bool has_sst = false;
  for (const auto& f : m.files()) {
    EXPECT_EQ(f.xxh3_128().size(), 32u) << f.name();
    if (f.name().ends_with(".sst")) {
      has_sst = true;
      EXPECT_TRUE(f.key().starts_with("shared/")) << f.key();
      EXPECT_TRUE(f.key().ends_with("-" + std::to_string(f.size()) + ".sst")) << f.key();
    } else {
      EXPECT_EQ(f.key(), "chk-1/" + f.name());
    }
  }
  EXPECT_TRUE(has_sst);
  EXPECT_TRUE(*mgr->storage().Exists(mgr->prefix() + "chk-1.manifest"));

  Contents expected = Dump(*backend_, {"a", "b"});
  EXPECT_EQ(expected["a"].size(), 3000u);
  // Same filesystem: SSTs are hard-linked from the store, others copied.
  EXPECT_EQ(RestoreAndDump(*mgr, m, {"a", "b"}), expected);
  for (const auto& f : m.files()) {
    if (!file()) break;  // S3: everything is downloaded
    auto links = fs::hard_link_count(root_ + "/store/job-1/task-3/" + f.key());
    EXPECT_EQ(links, f.name().ends_with(".sst") ? 2u : 1u) << f.key();
  }
  // Copy path.
  mgr->set_restore_hard_links(false);
  EXPECT_EQ(RestoreAndDump(*mgr, m, {"a", "b"}), expected);
  mgr->set_restore_hard_links(true);

  // Restoring into the live backend itself works too (recovery in place).
  Fill(*backend_, "a", 5000, 5100);
  auto restored = mgr->RestoreState(m, *backend_);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->bytes, stats->bytes_total);
  EXPECT_EQ(Dump(*backend_, {"a", "b"}), expected);
}

// Write() in its two halves, as a task of a parallel job takes it: the
// snapshot, then writes and compactions of the live state while the upload
// runs on another thread; the checkpoint holds the state of the snapshot.
TEST_P(CheckpointManagerTest, AnUploadBesideNewWritesHoldsTheSnapshotsState) {
  backend_ = NewBackend(root_ + "/db");
  Fill(*backend_, "a", 0, 2000);
  Contents at_snapshot = Dump(*backend_, {"a"});
  auto mgr = OpenManager();
  auto snap = mgr->Snapshot(*backend_, RuntimeFields());
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->stats.checkpoint_id, 1);
  EXPECT_EQ(mgr->next_checkpoint_id(), 2);
  EXPECT_FALSE(*mgr->storage().Exists(mgr->prefix() + "chk-1.manifest"));  // not yet
  std::future<absl::StatusOr<CheckpointStats>> upload =
      std::async(std::launch::async,
                 [&mgr, s = *std::move(snap)]() mutable { return mgr->Upload(std::move(s)); });
  Fill(*backend_, "a", 0, 4000, /*v=*/9);  // overwrites every key of the snapshot
  ASSERT_OK(backend_->Compact());
  mgr->Pin(1);  // the task thread may pin meanwhile
  absl::StatusOr<CheckpointStats> stats = upload.get();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->checkpoint_id, 1);
  EXPECT_GE(stats->duration_ms, stats->snapshot_ms);
  EXPECT_FALSE(fs::exists(root_ + "/scratch/snap-1"));
  CheckpointManifest m = LatestOrDie(*mgr);
  EXPECT_EQ(m.checkpoint_id(), 1);
  EXPECT_EQ(RestoreAndDump(*mgr, m, {"a"}), at_snapshot);
}

TEST_P(CheckpointManagerTest, SecondCheckpointUploadsOnlyNewSsts) {
  // ~3.6 MB over three tables: one SST per table (each below the L0
  // compaction trigger, so no background compaction rewrites them).
  backend_ = NewBackend(root_ + "/db");
  for (const char* t : {"t0", "t1", "t2"}) Fill(*backend_, t, 0, 12000);
  auto mgr = OpenManager();
  auto first = mgr->Write(*backend_, CheckpointManifest());
  ASSERT_TRUE(first.ok()) << first.status();
  int shared_after_first = CountShared(*mgr);
  EXPECT_GE(shared_after_first, 3);
  EXPECT_GT(first->bytes_total, 3'000'000u);

  Fill(*backend_, "t0", 10, 30, /*v=*/1);  // change 20 keys
  auto second = mgr->Write(*backend_, CheckpointManifest());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->bytes_total, first->bytes_total);
  EXPECT_LT(second->bytes_uploaded, second->bytes_total / 5)
      << "uploaded " << second->bytes_uploaded << " of " << second->bytes_total;
  EXPECT_LT(second->files_uploaded, second->files_total);
  EXPECT_EQ(CountShared(*mgr), shared_after_first + 1);  // just the new flush

  Contents at_second = Dump(*backend_, {"t0", "t1", "t2"});
  EXPECT_EQ(RestoreAndDump(*mgr, LatestOrDie(*mgr), {"t0", "t1", "t2"}), at_second);

  // A new manager (a restarted task) learns the shared files from storage:
  // an unchanged state uploads no SST again.
  mgr.reset();
  auto again = OpenManager();
  EXPECT_EQ(again->next_checkpoint_id(), 3);
  auto third = again->Write(*backend_, CheckpointManifest());
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->checkpoint_id, 3);
  EXPECT_LT(third->bytes_uploaded, third->bytes_total / 20);
  EXPECT_EQ(CountShared(*again), shared_after_first + 1);
}

TEST_P(CheckpointManagerTest, TornCheckpointsAreSkipped) {
  backend_ = NewBackend(root_ + "/db");
  Fill(*backend_, "a", 0, 1000);
  auto mgr = OpenManager(/*retain=*/5);
  ASSERT_OK(mgr->Write(*backend_, CheckpointManifest()));
  Contents at_first = Dump(*backend_, {"a"});

  // Files without a manifest: the crash between files and manifest.
  Fill(*backend_, "a", 1000, 2000);
  ASSERT_OK(mgr->Write(*backend_, CheckpointManifest()));
  ASSERT_OK(mgr->storage().Delete(mgr->prefix() + "chk-2.manifest"));
  EXPECT_EQ(LatestOrDie(*mgr).checkpoint_id(), 1);

  // A manifest whose file is missing (lost by the storage).
  Fill(*backend_, "a", 2000, 3000);
  auto third = mgr->Write(*backend_, CheckpointManifest());
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->checkpoint_id, 3);
  CheckpointManifest m3 = LatestOrDie(*mgr);
  ASSERT_EQ(m3.checkpoint_id(), 3);
  std::string victim;
  for (const auto& f : m3.files()) {
    if (f.key().starts_with("chk-3/")) victim = f.key();
  }
  ASSERT_FALSE(victim.empty());
  ASSERT_OK(mgr->storage().Delete(mgr->prefix() + victim));
  CheckpointManifest latest = LatestOrDie(*mgr);
  EXPECT_EQ(latest.checkpoint_id(), 1);
  EXPECT_EQ(RestoreAndDump(*mgr, latest, {"a"}), at_first);

  // LatestUpTo only considers ids up to its bound.
  auto up_to_2 = mgr->LatestUpTo(2);
  ASSERT_TRUE(up_to_2.ok()) << up_to_2.status();
  ASSERT_TRUE(up_to_2->has_value());
  EXPECT_EQ((*up_to_2)->checkpoint_id(), 1);
  auto up_to_0 = mgr->LatestUpTo(0);
  ASSERT_OK(up_to_0);
  EXPECT_FALSE(up_to_0->has_value());

  // A file with the wrong size counts as missing too.
  ASSERT_OK(mgr->storage().Write(mgr->prefix() + victim, "short"));
  EXPECT_EQ(LatestOrDie(*mgr).checkpoint_id(), 1);

  // Nothing complete at all: nullopt, not an error.
  ASSERT_OK(mgr->storage().Delete(mgr->prefix() + "chk-1.manifest"));
  auto none = mgr->Latest();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
}

// A shared file lost by the storage makes the checkpoints referencing it
// torn; the manager notices at its next GC and uploads the file again.
TEST_P(CheckpointManagerTest, LostSharedFileIsUploadedAgain) {
  backend_ = NewBackend(root_ + "/db");
  Fill(*backend_, "a", 0, 2000);
  auto mgr = OpenManager();
  ASSERT_OK(mgr->Write(*backend_, CheckpointManifest()));
  std::string lost;
  CheckpointManifest first = LatestOrDie(*mgr);
  for (const auto& f : first.files()) {
    if (f.key().starts_with("shared/")) lost = f.key();
  }
  ASSERT_FALSE(lost.empty());
  ASSERT_OK(mgr->storage().Delete(mgr->prefix() + lost));
  // Checkpoint 2 still believes the file is there: it is torn (its GC resyncs).
  ASSERT_OK(mgr->Write(*backend_, CheckpointManifest()));
  auto latest = mgr->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
  // Checkpoint 3 uploads it again and is complete.
  auto third = mgr->Write(*backend_, CheckpointManifest());
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(*mgr->storage().Exists(mgr->prefix() + lost));
  CheckpointManifest m = LatestOrDie(*mgr);
  EXPECT_EQ(m.checkpoint_id(), 3);
  EXPECT_EQ(RestoreAndDump(*mgr, m, {"a"}), Dump(*backend_, {"a"}));
}

TEST_P(CheckpointManagerTest, CorruptManifestFailsNamingTheFile) {
  backend_ = NewBackend(root_ + "/db");
  Fill(*backend_, "a", 0, 100);
  auto mgr = OpenManager();
  ASSERT_OK(mgr->Write(*backend_, CheckpointManifest()));
  ASSERT_OK(mgr->Write(*backend_, CheckpointManifest()));
  std::string key = mgr->prefix() + "chk-2.manifest";
  auto good = mgr->storage().Read(key);
  ASSERT_OK(good);

  for (const std::string& bad : {std::string("garbage"), good->substr(0, good->size() - 3),
                                 good->substr(0, 16) + "x" + good->substr(17)}) {
    ASSERT_OK(mgr->storage().Write(key, bad));
    auto latest = mgr->Latest();
    EXPECT_TRUE(absl::IsDataLoss(latest.status())) << latest.status();
    EXPECT_THAT(latest.status().message(),
                AllOf(HasSubstr(url_ + "/job-1/task-3/chk-2.manifest"), HasSubstr("corrupt")));
  }
  // A bound below the corrupt manifest does not read it.
  auto below = mgr->LatestUpTo(1);
  ASSERT_TRUE(below.ok()) << below.status();
  ASSERT_TRUE(below->has_value());
  EXPECT_EQ((*below)->checkpoint_id(), 1);
  // DecodeManifest directly: the name given is the one reported.
  auto decoded = DecodeManifest("CVCKMAN1", "some/name");
  EXPECT_THAT(decoded.status().message(), HasSubstr("some/name"));
}

TEST_P(CheckpointManagerTest, NewerLayoutVersionIsRefused) {
  backend_ = NewBackend(root_ + "/db");
  Fill(*backend_, "a", 0, 100);
  auto mgr = OpenManager();
  ASSERT_OK(mgr->Write(*backend_, CheckpointManifest()));
  std::string key = mgr->prefix() + "chk-1.manifest";
  auto m = DecodeManifest(*mgr->storage().Read(key), key);
  ASSERT_TRUE(m.ok()) << m.status();
  m->set_layout_version(2);
  ASSERT_OK(mgr->storage().Write(key, EncodeManifest(*m)));
  auto latest = mgr->Latest();
  EXPECT_TRUE(absl::IsFailedPrecondition(latest.status())) << latest.status();
  EXPECT_THAT(latest.status().message(), HasSubstr("checkpoint " + url_ +
                                                   "/job-1/task-3/chk-1.manifest was written by a "
                                                   "newer layout version 2; this binary reads ≤1"));
  m->set_layout_version(0);
  EXPECT_TRUE(absl::IsDataLoss(DecodeManifest(EncodeManifest(*m), "x").status()));
}

TEST_P(CheckpointManagerTest, GarbageCollectionLeavesNoUnreferencedFiles) {
  backend_ = NewBackend(root_ + "/db");
  auto mgr = OpenManager(/*retain=*/2);
  std::map<int64_t, Contents> states;
  auto checkpoint = [&](int64_t id_hint) {
    CheckpointManifest m;
    m.set_checkpoint_id(id_hint);
    auto stats = mgr->Write(*backend_, m);
    ASSERT_TRUE(stats.ok()) << stats.status();
    states[stats->checkpoint_id] = Dump(*backend_, {"a"});
  };
  for (int round = 0; round < 2; ++round) {
    Fill(*backend_, "a", round * 1000, round * 1000 + 1000);
    ASSERT_OK(backend_->Compact());  // rewrites every SST: old ones become garbage
    checkpoint(0);
  }
  // Leftovers of a crashed run: an uploaded SST no manifest references, the
  // small files of checkpoint 3 that never got its manifest, and an old
  // temporary of an interrupted upload.
  CheckpointStorage& s = mgr->storage();
  ASSERT_OK(s.Write(mgr->prefix() + "shared/00000000000000000000000000000000-3.sst", "abc"));
  ASSERT_OK(s.Write(mgr->prefix() + "chk-3/MANIFEST-000009", "m"));
  std::string tmp = root_ + "/store/job-1/task-3/shared/.x.sst.tmp.1.1";
  if (file()) {
    std::ofstream(tmp) << "partial";
    fs::last_write_time(tmp, fs::file_time_type::clock::now() - std::chrono::hours(1));
  }

  for (int round = 2; round < 5; ++round) {
    Fill(*backend_, "a", round * 1000, round * 1000 + 1000);
    ASSERT_OK(backend_->Compact());
    checkpoint(round == 2 ? 4 : 0);  // skip id 3, as a restarted task would
  }
  // Checkpoints 1, 2, 4, 5, 6 were written; retain=2 keeps 5 and 6.
  std::set<std::string> expected = {"chk-5.manifest", "chk-6.manifest"};
  for (int64_t id : {5, 6}) {
    auto bytes = s.Read(mgr->prefix() + "chk-" + std::to_string(id) + ".manifest");
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    auto m = DecodeManifest(*bytes, "m");
    ASSERT_TRUE(m.ok()) << m.status();
    for (const auto& f : m->files()) expected.insert(f.key());
  }
  std::vector<std::string> listed = Listing(*mgr);
  EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()), expected);
  EXPECT_EQ(listed.size(), expected.size());
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(root_ + "/store/job-1/task-3/chk-3"));
  EXPECT_FALSE(fs::exists(root_ + "/store/job-1/task-3/chk-1"));

  // Both kept checkpoints still restore exactly.
  CheckpointManifest latest = LatestOrDie(*mgr);
  EXPECT_EQ(latest.checkpoint_id(), 6);
  EXPECT_EQ(RestoreAndDump(*mgr, latest, {"a"}), states[6]);
  auto m5 = DecodeManifest(*s.Read(mgr->prefix() + "chk-5.manifest"), "m5");
  ASSERT_OK(m5);
  EXPECT_EQ(RestoreAndDump(*mgr, *m5, {"a"}), states[5]);
  EXPECT_NE(states[5], states[6]);

  // GC is idempotent.
  auto again = mgr->CollectGarbage();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 0);
}

// A parallel task pins the job's last complete checkpoint: any number of
// newer checkpoints it stored alone (runs that died before the job completed
// them) never push it out.
TEST_P(CheckpointManagerTest, PinnedCheckpointSurvivesNewerOnes) {
  backend_ = NewBackend(root_ + "/db");
  auto mgr = OpenManager(/*retain=*/2);
  std::map<int64_t, Contents> states;
  for (int round = 0; round < 6; ++round) {
    Fill(*backend_, "a", round * 1000, round * 1000 + 1000);
    ASSERT_OK(backend_->Compact());  // every SST rewritten: old ones are garbage unless pinned
    auto stats = mgr->Write(*backend_, CheckpointManifest());
    ASSERT_TRUE(stats.ok()) << stats.status();
    states[stats->checkpoint_id] = Dump(*backend_, {"a"});
    if (stats->checkpoint_id == 2) mgr->Pin(2);
  }
  CheckpointStorage& s = mgr->storage();
  auto pinned = s.Read(mgr->prefix() + "chk-2.manifest");
  ASSERT_TRUE(pinned.ok()) << "the pinned checkpoint's manifest was collected";
  auto m2 = DecodeManifest(*pinned, "m2");
  ASSERT_OK(m2);
  EXPECT_EQ(RestoreAndDump(*mgr, *m2, {"a"}), states[2]);
  // Unpinned, older than the newest 2: gone.
  for (int64_t id : {1, 3, 4}) {
    EXPECT_FALSE(s.Exists(mgr->prefix() + "chk-" + std::to_string(id) + ".manifest").value()) << id;
  }
  mgr->Pin(6);
  ASSERT_OK(mgr->CollectGarbage());
  EXPECT_FALSE(s.Exists(mgr->prefix() + "chk-2.manifest").value());
}

TEST_P(CheckpointManagerTest, RestoreDetectsCorruptFileAndKeepsState) {
  backend_ = NewBackend(root_ + "/db");
  Fill(*backend_, "a", 0, 2000);
  auto mgr = OpenManager();
  ASSERT_OK(mgr->Write(*backend_, CheckpointManifest()));
  CheckpointManifest m = LatestOrDie(*mgr);
  const v1::StateFile* sst = nullptr;
  for (const auto& f : m.files()) {
    if (f.key().starts_with("shared/")) sst = &f;
  }
  ASSERT_NE(sst, nullptr);
  std::string key = mgr->prefix() + sst->key();
  std::string data = *mgr->storage().Read(key);
  data[data.size() / 2] ^= 0x55;  // same size, different content
  ASSERT_OK(mgr->storage().Write(key, data));

  Fill(*backend_, "a", 5000, 5001);
  Contents before = Dump(*backend_, {"a"});
  auto st = mgr->RestoreState(m, *backend_);
  EXPECT_TRUE(absl::IsDataLoss(st.status())) << st.status();
  EXPECT_THAT(st.status().message(), AllOf(HasSubstr(sst->key()), HasSubstr("corrupt")));
  EXPECT_EQ(Dump(*backend_, {"a"}), before);  // untouched
}

TEST_P(CheckpointManagerTest, SavepointIsSelfContained) {
  backend_ = NewBackend(root_ + "/db");
  Fill(*backend_, "a", 0, 2000);
  Fill(*backend_, "b", 0, 10);
  auto mgr = OpenManager();
  std::string dest = root_ + "/savepoints/sp-1";
  auto stats = mgr->WriteSavepoint(*backend_, RuntimeFields(), dest);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->files_uploaded, stats->files_total);
  Contents expected = Dump(*backend_, {"a", "b"});
  // Never touches the checkpoint storage.
  EXPECT_TRUE(Listing(*mgr).empty());

  auto m = CheckpointManager::LoadSavepoint(dest);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->savepoint());
  EXPECT_EQ(m->sinks(0).state(), "txn-42");
  for (const auto& f : m->files()) {
    EXPECT_EQ(f.key(), "state/" + f.name());
    EXPECT_TRUE(fs::exists(dest + "/state/" + f.name()));
  }
  EXPECT_TRUE(fs::exists(dest + "/savepoint.manifest"));

  // Restore with another manager (another job even), after the original DB
  // and store are gone.
  backend_.reset();
  mgr.reset();
  RemoveTree(root_ + "/db");
  RemoveTree(root_ + "/store");
  auto other =
      CheckpointManager::Open("file://" + root_ + "/store2", "job-2", 0, root_ + "/scratch2", 1);
  ASSERT_TRUE(other.ok()) << other.status();
  auto fresh = NewBackend(root_ + "/db2");
  auto restored = (*other)->RestoreSavepoint("file://" + dest, *fresh);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->checkpoint_id(), m->checkpoint_id());
  EXPECT_EQ(Dump(*fresh, {"a", "b"}), expected);

  // Writing over an existing savepoint is refused.
  auto twice = (*other)->WriteSavepoint(*fresh, CheckpointManifest(), dest);
  EXPECT_TRUE(absl::IsAlreadyExists(twice.status())) << twice.status();

  // Missing savepoint, newer layout, missing file.
  auto missing = CheckpointManager::LoadSavepoint(root_ + "/nowhere");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  CheckpointManifest newer = *m;
  newer.set_layout_version(9);
  std::ofstream(dest + "/savepoint.manifest", std::ios::binary | std::ios::trunc)
      << EncodeManifest(newer);
  auto refused = CheckpointManager::LoadSavepoint(dest);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("was written by a newer layout version 9; this binary reads ≤1"));
  std::ofstream(dest + "/savepoint.manifest", std::ios::binary | std::ios::trunc)
      << EncodeManifest(*m);
  fs::remove(dest + "/state/CURRENT");
  auto incomplete = CheckpointManager::LoadSavepoint(dest);
  EXPECT_TRUE(absl::IsDataLoss(incomplete.status())) << incomplete.status();
  EXPECT_THAT(incomplete.status().message(), HasSubstr("state/CURRENT"));
}

TEST_P(CheckpointManagerTest, ArgumentErrors) {
  for (const char* job : {"", ".hidden", "a/b", "job name"}) {
    auto m = CheckpointManager::Open(url_, job, 0, root_ + "/scratch", 1);
    EXPECT_TRUE(absl::IsInvalidArgument(m.status())) << job << ": " << m.status();
  }
  EXPECT_FALSE(CheckpointManager::Open(url_, "j", -1, root_ + "/scratch", 1).ok());
  EXPECT_FALSE(CheckpointManager::Open(url_, "j", 0, root_ + "/scratch", 0).ok());
  auto s3 = CheckpointManager::Open("s3://b/p", "j", 0, root_ + "/scratch", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(s3.status())) << s3.status();
  EXPECT_THAT(s3.status().message(), HasSubstr("\"b\" is not a bucket name"));

  backend_ = NewBackend(root_ + "/db");
  Fill(*backend_, "a", 0, 10);
  auto mgr = OpenManager();
  CheckpointManifest m;
  m.set_checkpoint_id(5);
  auto five = mgr->Write(*backend_, m);
  ASSERT_TRUE(five.ok()) << five.status();
  EXPECT_EQ(five->checkpoint_id, 5);
  EXPECT_EQ(mgr->next_checkpoint_id(), 6);
  auto stale = mgr->Write(*backend_, m);  // id 5 again
  EXPECT_TRUE(absl::IsInvalidArgument(stale.status())) << stale.status();
  CheckpointManifest other_job;
  other_job.set_job_name("other");
  EXPECT_TRUE(absl::IsInvalidArgument(mgr->Write(*backend_, other_job).status()));
  // Uncommitted writes: the backend's FailedPrecondition comes through.
  (*backend_->OpenTable("a"))->Put("k", "v");
  EXPECT_TRUE(absl::IsFailedPrecondition(mgr->Write(*backend_, CheckpointManifest()).status()));
}

// ---- Real crashes (failpoints) ----
//
// The crashing writer runs in a child process ("threadsafe" death tests
// re-execute the test binary, so RocksDB's threads are sound in the child).
// The child re-runs the test body, so the directory is handed over through
// an environment variable the parent sets before the child starts.
std::string CrashDir() {
  const char* dir = getenv("CARAVELA_CHECKPOINT_CRASH_DIR");
  if (dir != nullptr) return dir;
  std::string made = MakeTempDir("checkpoint_crash");
  setenv("CARAVELA_CHECKPOINT_CRASH_DIR", made.c_str(), 1);
  return made;
}

// Checkpoint 1 = keys [0, 1000), then keys [1000, 1500) and checkpoint 2
// with `failpoint` armed. Only returns if the failpoint did not fire.
// The store: file://<dir>/store, or the URL the parent put in
// CARAVELA_CHECKPOINT_CRASH_URL (the child inherits the environment).
std::string CrashStore(const std::string& dir) {
  const char* url = getenv("CARAVELA_CHECKPOINT_CRASH_URL");
  return url != nullptr ? std::string(url) : "file://" + dir + "/store";
}

void WriteTwoCheckpoints(const std::string& dir, const std::string& failpoint) {
  auto backend = OpenRocksDbBackend(dir + "/db");
  if (!backend.ok()) exit(2);
  auto mgr = CheckpointManager::Open(CrashStore(dir), "job", 0, dir + "/scratch", 3);
  if (!mgr.ok()) exit(3);
  Fill(**backend, "a", 0, 1000);
  if (!(*mgr)->Write(**backend, CheckpointManifest()).ok()) exit(4);
  Fill(**backend, "a", 1000, 1500);
  ConfigureFailpoints(failpoint);
  if (!(*mgr)->Write(**backend, CheckpointManifest()).ok()) exit(5);
}

void CheckRecovery(const std::string& dir, int64_t expect_id, size_t expect_keys) {
  auto mgr = CheckpointManager::Open(CrashStore(dir), "job", 0, dir + "/scratch", 3);
  ASSERT_TRUE(mgr.ok()) << mgr.status();
  EXPECT_EQ((*mgr)->next_checkpoint_id(), 3);  // id 2 is used even if not committed
  auto latest = (*mgr)->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->checkpoint_id(), expect_id);
  auto fresh = OpenRocksDbBackend(dir + "/recovered");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_OK((*mgr)->RestoreState(**latest, **fresh));
  auto table = (*fresh)->OpenTable("a");
  ASSERT_OK(table);
  EXPECT_EQ(*(*table)->CountKeys(), expect_keys);

  // The next checkpoint commits and its GC removes the crashed one's files.
  auto third = (*mgr)->Write(**fresh, CheckpointManifest());
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->checkpoint_id, 3);
  auto list = (*mgr)->storage().List("job/task-0/chk-2/");
  ASSERT_OK(list);
  if (expect_id == 1) {
    EXPECT_TRUE(list->empty());
  }
}

class CheckpointCrashTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  void TearDown() override {
    GTEST_FLAG_SET(death_test_style, "fast");
    unsetenv("CARAVELA_CHECKPOINT_CRASH_DIR");
    unsetenv("CARAVELA_CHECKPOINT_CRASH_URL");
    RemoveTree(dir_);
  }
  std::string dir_;
};

TEST_F(CheckpointCrashTest, CrashAfterFilesBeforeManifestRecoversPreviousCheckpoint) {
  dir_ = CrashDir();
  EXPECT_EXIT(
      {
        WriteTwoCheckpoints(dir_, "checkpoint.after_files");
        exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "failpoint checkpoint.after_files hit 1");
  // The crashed checkpoint's files are there, its manifest is not.
  EXPECT_TRUE(fs::exists(dir_ + "/store/job/task-0/chk-2"));
  EXPECT_FALSE(fs::exists(dir_ + "/store/job/task-0/chk-2.manifest"));
  CheckRecovery(dir_, 1, 1000);
}

// The same crash on S3 (a real s3rver): SIGKILL after the SSTs and small
// files went up, before the manifest.
TEST_F(CheckpointCrashTest, CrashAfterUploadBeforeManifestOnS3) {
  dir_ = CrashDir();
  // The death test's child re-runs this body: the server and the URL are
  // the parent's (inherited through the environment).
  std::unique_ptr<S3Server> s3;
  if (getenv("CARAVELA_CHECKPOINT_CRASH_URL") == nullptr) {
    auto started = S3Server::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    s3 = std::move(*started);
    s3->ExportEnvironment();
  }
  const std::string url = absl::StrCat("s3://", S3Server::kBucket, "/crash");
  setenv("CARAVELA_CHECKPOINT_CRASH_URL", url.c_str(), 1);
  EXPECT_EXIT(
      {
        WriteTwoCheckpoints(dir_, "checkpoint.after_files");
        exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "failpoint checkpoint.after_files hit 1");
  auto storage = OpenCheckpointStorage(url);
  ASSERT_TRUE(storage.ok()) << storage.status();
  auto uploaded = (*storage)->List("job/task-0/chk-2/");
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_FALSE(uploaded->empty());
  EXPECT_FALSE(*(*storage)->Exists("job/task-0/chk-2.manifest"));
  CheckRecovery(dir_, 1, 1000);
}

TEST_F(CheckpointCrashTest, CrashAfterManifestRecoversNewCheckpoint) {
  dir_ = CrashDir();
  EXPECT_EXIT(
      {
        WriteTwoCheckpoints(dir_, "checkpoint.after_manifest");
        exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "failpoint checkpoint.after_manifest hit 1");
  CheckRecovery(dir_, 2, 1500);
}

}  // namespace
}  // namespace caravela
