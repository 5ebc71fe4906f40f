// Crash matrix (issue 4, SPEC §6): the `caravela` binary runs a job with dedup,
// hourly windows and an interval join over a generated stream (retries,
// disorder, late and too-late events), with checkpoints. It is killed with
// SIGKILL by a failpoint (CARAVELA_FAILPOINT) at each point of the checkpoint
// protocol, restarted with the same data dir, and must end with exactly the
// output of an uninterrupted run: file sinks hold committed output only, and
// the replay regenerates the rest. Revisions published after a restart carry
// the new epoch (epoch * 10^9 + n), so outputs are compared with the epoch
// part removed, and per key they must only ever increase.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/free_space.h"
#include "common/time_util.h"
#include "tests/test_util.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/testing/operator_harness.h"
#include "worker/testing/postgres_server.h"
#include "worker/testing/status_testing.h"

namespace fs = std::filesystem;

namespace caravela {
namespace {

constexpr int64_t kStart = 1790848800000;  // 2026-10-01T10:00:00Z
constexpr int64_t kMinute = 60'000;

struct RunResult {
  int exit_code = -1;
  int signal = 0;
  std::string log;
};

// Runs `caravela run` with an optional failpoint; returns how it ended.
RunResult RunJob(const fs::path& job, const fs::path& data, const std::string& failpoint,
                 const std::string& extra_args = "") {
  const fs::path log = data.string() + ".log";
  std::string cmd = absl::StrCat(failpoint.empty() ? "" : "CARAVELA_FAILPOINT=" + failpoint + " ",
                                 CARAVELA_BINARY, " run -q --data-dir ", data.string(), " ",
                                 extra_args, " ", job.string(), " > ", log.string(), " 2>&1");
  int rc = std::system(cmd.c_str());
  RunResult r;
  // system() runs sh -c: a child killed by a signal shows as exit 128 + signal.
  if (WIFEXITED(rc)) {
    r.exit_code = WEXITSTATUS(rc);
    if (r.exit_code > 128) r.signal = r.exit_code - 128;
  }
  r.log = ReadFile(log);
  return r;
}

// Replaces "revision":E000000NNN by "revision":NNN; records the epochs seen.
std::string StripEpoch(const std::string& line, int64_t* max_epoch) {
  static const std::regex re("\"revision\":([0-9]+)");
  std::smatch m;
  if (!std::regex_search(line, m, re)) return line;
  int64_t rev = std::stoll(m[1]);
  *max_epoch = std::max(*max_epoch, rev / 1'000'000'000);
  return m.prefix().str() + "\"revision\":" + std::to_string(rev % 1'000'000'000) +
         m.suffix().str();
}

class CrashRecoveryTest : public ::testing::Test {
 protected:
  // One real PostgreSQL server for the suite; each run gets its own database.
  static void SetUpTestSuite() {
    auto server = PostgresServer::Start();
    ASSERT_OK(server.status());
    server_ = std::move(*server).release();
    auto broker = EmbeddedBroker::Start(0, 4);
    ASSERT_OK(broker.status());
    broker_ = std::move(*broker).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete broker_;
    broker_ = nullptr;
  }

  // The Kafka changelog topic of database `db`'s run: per record key, the
  // revisions in offset order (must increase) and the last value without its
  // revision.
  static std::map<std::string, std::string> Topic(const std::string& db) {
    auto records = ConsumeAll(broker_->bootstrap(), "hourly_" + db);
    EXPECT_OK(records.status());
    std::map<std::string, std::string> last;
    std::map<std::string, int64_t> last_rev;
    if (!records.ok()) return last;
    for (const auto& r : *records) {
      int64_t epoch = 0;
      static const std::regex re("\"revision\":([0-9]+)");
      std::smatch m;
      if (!std::regex_search(r.value, m, re)) continue;
      const int64_t rev = std::stoll(m[1]);
      EXPECT_GT(rev, last_rev[r.key])
          << "topic hourly_" << db << ": key " << r.key << " went back from revision "
          << last_rev[r.key] << " to " << rev;
      last_rev[r.key] = rev;
      last[r.key] = StripEpoch(r.value, &epoch);
    }
    return last;
  }

  // The hourly results in the database `db`, without revisions (they carry
  // the epoch), sorted.
  static std::vector<std::string> Table(const std::string& db) {
    auto rows = server_->Query(
        "SELECT window_start || ' ' || country || ' ' || state || ' ' || (value - "
        "'revision')::text "
        "FROM hourly ORDER BY 1",
        db);
    EXPECT_OK(rows.status());
    std::vector<std::string> out;
    if (rows.ok()) {
      for (const auto& r : *rows) out.push_back(r[0]);
    }
    return out;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    // Each test has its own reference database (the suite shares the server).
    ref_db_ = "ref_" + std::to_string(++test_count_);
    ASSERT_OK(server_->CreateDatabase(ref_db_));
    char tmpl[] = "/tmp/caravela_crash_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Generate();
    WriteJob();
    reference_ = RunJob(job_, dir_ / "reference", "");
    ASSERT_EQ(reference_.exit_code, 0) << reference_.log;
    // Outputs go next to the job file.
    ASSERT_GT(ReadLines(dir_ / "out/revenue.jsonl").size(), 20u);
    ASSERT_GT(ReadLines(dir_ / "out/paid.jsonl").size(), 20u);
    ASSERT_GT(ReadLines(dir_ / "out/too_late.jsonl").size(), 0u);
  }
  void TearDown() override {
    if (std::getenv("KEEP_CRASH_DIR") == nullptr) RemoveTree(dir_.string());
  }

  // Purchases (with retries, disorder, late and too-late uploads) and
  // payments for ~60% of them, 0-40 min later; arrival-driven, so every run
  // is deterministic.
  void Generate() {
    std::mt19937_64 rng(11);
    std::ofstream purchases(dir_ / "purchases.jsonl"), payments(dir_ / "payments.jsonl");
    struct Line {
      int64_t arrival;
      std::string json;
    };
    std::vector<Line> p, q;
    const char* countries[] = {"PT", "BR", "AO", "MZ"};
    for (int i = 0; i < 3000; ++i) {
      const int64_t t = kStart + i * 4000 + static_cast<int64_t>(rng() % 120'000);
      int64_t delay = static_cast<int64_t>(rng() % 30'000);
      if (i % 50 == 0) delay = 90 * kMinute;    // late, within the lateness
      if (i % 301 == 0) delay = 400 * kMinute;  // too late
      const std::string json = absl::StrFormat(
          R"({"event_id":"e%d","country":"%s","amount":%d.%02d,"ts":"%s","arrival":%d})", i,
          countries[rng() % 4], static_cast<int>(rng() % 200), static_cast<int>(rng() % 100),
          FormatIso8601(t), t + delay);
      p.push_back({t + delay, json});
      if (i % 7 == 0) {  // a retry: the same event again, a bit later
        p.push_back({t + delay + 5000, json});
      }
      if (rng() % 10 < 6) {
        const int64_t pt = t + static_cast<int64_t>(rng() % (40 * kMinute));
        const int64_t pa = pt + static_cast<int64_t>(rng() % 20'000);
        q.push_back(
            {pa, absl::StrFormat(R"({"payment_id":"p%d","event_id":"e%d","ts":"%s","arrival":%d})",
                                 i, i, FormatIso8601(pt), pa)});
      }
    }
    auto by_arrival = [](const Line& a, const Line& b) { return a.arrival < b.arrival; };
    std::stable_sort(p.begin(), p.end(), by_arrival);
    std::stable_sort(q.begin(), q.end(), by_arrival);
    for (const Line& l : p) purchases << l.json << "\n";
    for (const Line& l : q) payments << l.json << "\n";
  }

  void WriteJob() {
    job_ = dir_ / "job.yaml";
    std::ofstream y(job_);
    y << JobText(ref_db_);
  }

  static std::string JobText(const std::string& db) {
    std::string text = JobTemplate();
    text.replace(text.find("DSN"), 3, server_->Dsn(db));
    text.replace(text.find("TOPIC"), 5, "hourly_" + db);
    text.replace(text.find("BOOTSTRAP"), 9, broker_->bootstrap());
    return text;
  }

  static std::string JobTemplate() {
    return R"(apiVersion: caravela/v1
kind: Job
metadata: {name: crash-matrix}
spec:
  checkpoint: {interval: 10m, retain: 2}
  sources:
    - name: purchases
      file: {path: purchases.jsonl, arrival_field: arrival}
      event_time: {field: ts, format: iso8601}
      watermark: {max_out_of_orderness: 2m}
    - name: payments
      file: {path: payments.jsonl, arrival_field: arrival}
      event_time: {field: ts, format: iso8601}
      watermark: {max_out_of_orderness: 2m}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 12h}
    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: revenue, sum: amount}, {as: orders, count: "*"}]
        early_fire_every: 5m
        allowed_lateness: 2h
        reconcile: {id: event_id}
    - name: paid
      interval_join:
        type: left
        left: unique
        right: payments
        on: [event_id]
        between: {lower: 0s, upper: 30m}
  sinks:
    - {from: revenue, file: {path: out/revenue.jsonl}}
    - {from: paid, file: {path: out/paid.jsonl}}
    - {from: revenue.too_late, file: {path: out/too_late.jsonl}}
    - {from: revenue, postgres: {dsn: "DSN", table: hourly}}
    - {from: revenue, kafka: {topic: TOPIC, bootstrap: "BOOTSTRAP", mode: changelog}}
  dead_letter: {path: out/dead-letter.jsonl}
)";
  }

  // Runs the job in its own directory (job + inputs copied), first with the
  // failpoint (must die by SIGKILL), then without until it finishes; checks
  // the output.
  void CrashAndRecover(const std::string& name, const std::string& failpoint, bool expect_restore) {
    RecoverAfter(name, expect_restore, [&](const fs::path& run_dir) {
      RunResult crashed = RunJob(run_dir / "job.yaml", run_dir / "data", failpoint);
      ASSERT_EQ(crashed.signal, 9) << "failpoint " << failpoint << " did not kill the run:\n"
                                   << crashed.log;
      EXPECT_THAT(crashed.log, ::testing::HasSubstr("failpoint"));
    });
  }

  // Prepares the job's own directory (job + inputs copied), calls `first`
  // (a run that must not finish), then runs the job until it finishes and
  // checks the output against the uninterrupted run's.
  void RecoverAfter(const std::string& name, bool expect_restore,
                    const std::function<void(const fs::path& run_dir)>& first) {
    const fs::path run_dir = dir_ / name;
    fs::create_directories(run_dir);
    for (const char* f : {"purchases.jsonl", "payments.jsonl"})
      fs::copy_file(dir_ / f, run_dir / f);
    const std::string db = "run_" + std::regex_replace(name, std::regex("-"), "_");
    ASSERT_OK(server_->CreateDatabase(db));
    std::ofstream(run_dir / "job.yaml") << JobText(db);
    ASSERT_TRUE(fs::exists(run_dir / "job.yaml"));
    first(run_dir);
    if (HasFatalFailure()) return;
    const std::string failpoint = name;  // for the messages below
    RunResult resumed = RunJob(run_dir / "job.yaml", run_dir / "data", "");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.log;
    if (expect_restore) {
      EXPECT_THAT(resumed.log, ::testing::HasSubstr("restored checkpoint")) << resumed.log;
    }
    for (const char* out :
         {"out/revenue.jsonl", "out/paid.jsonl", "out/too_late.jsonl", "out/dead-letter.jsonl"}) {
      const std::vector<std::string> want = ReadLines(dir_ / out);
      std::vector<std::string> got = ReadLines(run_dir / out);
      int64_t epoch = 0;
      for (std::string& l : got) l = StripEpoch(l, &epoch);
      size_t first = 0;
      while (first < got.size() && first < want.size() && got[first] == want[first]) ++first;
      EXPECT_TRUE(got == want) << out << " after a crash at " << failpoint << ": " << got.size()
                               << " lines, want " << want.size() << "; first difference at line "
                               << first + 1
                               << ":\n got: " << (first < got.size() ? got[first] : "(end)")
                               << "\nwant: " << (first < want.size() ? want[first] : "(end)");
      if (std::string(out) == "out/revenue.jsonl" && expect_restore) {
        EXPECT_GE(epoch, 1) << "no revision of the resumed run carries its epoch";
      }
    }
    // PostgreSQL: the same final rows as the uninterrupted run, all FINAL
    // (the revision guard let no older result overwrite a newer one).
    const std::vector<std::string> want_rows = Table(ref_db_);
    EXPECT_FALSE(want_rows.empty());
    EXPECT_EQ(Table(db), want_rows) << "table after a crash at " << failpoint;
    for (const std::string& row : Table(db)) EXPECT_THAT(row, ::testing::HasSubstr(" FINAL "));
    // Kafka changelog (at-least-once: output after the last checkpoint was
    // published before the crash and again after it): per key, revisions
    // only increase, and the last value is the uninterrupted run's.
    const auto want_topic = Topic(ref_db_);
    EXPECT_FALSE(want_topic.empty());
    EXPECT_EQ(Topic(db), want_topic) << "topic after a crash at " << failpoint;
    // Per window key, published revisions only ever increase.
    std::map<std::string, int64_t> last;
    static const std::regex key_re(
        R"re("window_start":"([^"]+)".*"country":"([^"]+)".*"revision":([0-9]+))re");
    static const std::regex key_re2(
        R"re("country":"([^"]+)".*"window_start":"([^"]+)".*"revision":([0-9]+))re");
    for (const std::string& l : ReadLines(run_dir / "out/revenue.jsonl")) {
      std::smatch m;
      if (!std::regex_search(l, m, key_re) && !std::regex_search(l, m, key_re2)) continue;
      std::string key = m[1].str() + "|" + m[2].str();
      int64_t rev = std::stoll(m[3]);
      EXPECT_GT(rev, last[key]) << key << " went back from " << last[key] << " to " << rev;
      last[key] = rev;
    }
    EXPECT_FALSE(last.empty());
  }

  fs::path dir_, job_;
  RunResult reference_;
  std::string ref_db_;
  static PostgresServer* server_;
  static EmbeddedBroker* broker_;
  static int test_count_;
};

PostgresServer* CrashRecoveryTest::server_ = nullptr;
EmbeddedBroker* CrashRecoveryTest::broker_ = nullptr;
int CrashRecoveryTest::test_count_ = 0;

// A savepoint written when the run ends restores into a fresh data dir: the
// restored run reads nothing again and leaves every output as it was.
TEST_F(CrashRecoveryTest, SavepointRestoresIntoAFreshDataDir) {
  const fs::path run_dir = dir_ / "savepoint";
  fs::create_directories(run_dir);
  for (const char* f : {"purchases.jsonl", "payments.jsonl"}) fs::copy_file(dir_ / f, run_dir / f);
  ASSERT_OK(server_->CreateDatabase("run_savepoint"));
  std::ofstream(run_dir / "job.yaml") << JobText("run_savepoint");
  const fs::path sp = run_dir / "sp";
  RunResult first =
      RunJob(run_dir / "job.yaml", run_dir / "data1", "", "--savepoint-on-stop " + sp.string());
  ASSERT_EQ(first.exit_code, 0) << first.log;
  ASSERT_TRUE(fs::exists(sp / "savepoint.manifest"));
  const std::vector<std::string> revenue = ReadLines(run_dir / "out/revenue.jsonl");
  const std::vector<std::string> paid = ReadLines(run_dir / "out/paid.jsonl");
  EXPECT_EQ(revenue, ReadLines(dir_ / "out/revenue.jsonl"));
  RunResult second =
      RunJob(run_dir / "job.yaml", run_dir / "data2", "", "--from-savepoint " + sp.string());
  ASSERT_EQ(second.exit_code, 0) << second.log;
  EXPECT_THAT(second.log, ::testing::HasSubstr("restored savepoint"));
  EXPECT_EQ(ReadLines(run_dir / "out/revenue.jsonl"), revenue);
  EXPECT_EQ(ReadLines(run_dir / "out/paid.jsonl"), paid);
  // A savepoint of another job graph is refused with a message.
  std::string other = JobText("run_savepoint");
  other.replace(other.find("name: paid"), 10, "name: paid2");
  other.replace(other.find("from: paid,"), 11, "from: paid2,");
  std::ofstream(run_dir / "other.yaml") << other;
  RunResult refused =
      RunJob(run_dir / "other.yaml", run_dir / "data3", "", "--from-savepoint " + sp.string());
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.log, ::testing::HasSubstr("different job graph"));
}

TEST_F(CrashRecoveryTest, AfterReadingInputBeforeAnyCheckpoint) {
  CrashAndRecover("read", "source.after_batch:40", false);
}

TEST_F(CrashRecoveryTest, AfterReadingInputBetweenCheckpoints) {
  CrashAndRecover("read-later", "source.after_batch:1500", true);
}

TEST_F(CrashRecoveryTest, AfterCheckpointFilesBeforeManifest) {
  CrashAndRecover("files", "checkpoint.after_files:3", true);
}

TEST_F(CrashRecoveryTest, AfterManifestBeforeSinkCommit) {
  CrashAndRecover("manifest", "checkpoint.after_manifest:3", true);
}

TEST_F(CrashRecoveryTest, AfterSinkCommitBeforeNextCheckpoint) {
  CrashAndRecover("commit", "checkpoint.after_sink_commit:3", true);
}

TEST_F(CrashRecoveryTest, AfterSinkWriteBeforeNextCheckpoint) {
  CrashAndRecover("write", "sink.after_write:700", true);
}

// A full disk under the data dir (RocksDB state and the checkpoint storage,
// file://<data dir>/checkpoints): a small tmpfs, in a mount namespace of this
// test process's own, filled until about half of what the run needs is
// left. The run fails (no crash) with a message naming the path and the free
// space, and no checkpoint is corrupted: once the space is back, the job
// resumes and ends with exactly the uninterrupted run's output.
TEST_F(CrashRecoveryTest, FullDiskFailsWithTheFreeSpaceAndResumesOnceSpaceIsBack) {
  ASSERT_EQ(unshare(CLONE_NEWNS), 0)
      << "unshare(CLONE_NEWNS): " << strerror(errno) << " (the test needs root)";
  ASSERT_EQ(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << strerror(errno);
  // What a whole run leaves in its data dir (state and retained checkpoints).
  uint64_t needed = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "reference")) {
    if (e.is_regular_file()) needed += e.file_size();
  }
  ASSERT_GT(needed, 64u << 10);
  fs::path data;
  RecoverAfter("full-disk", /*expect_restore=*/false, [&](const fs::path& run_dir) {
    data = run_dir / "data";
    fs::create_directories(data);
    ASSERT_EQ(mount("tmpfs", data.c_str(), "tmpfs", 0, "size=64m"), 0) << strerror(errno);
    const fs::path filler = data / "filler";
    {
      const std::optional<uint64_t> free = FreeBytes(data.string());
      ASSERT_TRUE(free.has_value());
      std::ofstream f(filler, std::ios::binary);
      const std::string block(1 << 16, 'x');
      for (uint64_t left = *free - needed / 2; left >= block.size(); left -= block.size()) {
        f.write(block.data(), static_cast<std::streamsize>(block.size()));
      }
    }
    RunResult full = RunJob(run_dir / "job.yaml", data, "");
    EXPECT_NE(full.exit_code, 0) << "the run did not fail on a full disk:\n" << full.log;
    EXPECT_EQ(full.signal, 0) << full.log;
    EXPECT_THAT(full.log, ::testing::HasSubstr("No space left on device")) << full.log;
    EXPECT_THAT(full.log, ::testing::HasSubstr("bytes free on the file system of " + data.string()))
        << full.log;
    EXPECT_THAT(full.log, ::testing::HasSubstr("free space there and run the job again"));
    fs::remove(filler);  // the space is back
  });
  if (!data.empty()) umount2(data.c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace caravela
