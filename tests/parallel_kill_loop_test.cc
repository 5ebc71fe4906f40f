// Random kill loop of a PARALLEL job (SPEC §6-§8): `caravela run
// --parallelism 3` runs purchases keyed by user_id -> dedup by event_id ->
// hourly revenue by country, i.e. three stages of three tasks with two
// exchanges, reading a generated purchase stream (retries, conflicting
// copies, disorder, late events within the lateness) from 4 partitions of a
// standalone `caravela broker`, with job-wide checkpoints every 100 ms. Its
// window results go to three sinks: the file sink (one part file per task of
// the window stage), a Kafka changelog topic on the same broker and a
// PostgreSQL table (a real server; that part is skipped, saying so, when the
// PostgreSQL binaries are missing). The process is killed with SIGKILL at a
// random moment and restarted with the same data dir at least 20 times, then
// runs to completion; once with the in-memory exchange (caravela run's
// default) and once through Kafka exchange topics (pre-created on the broker
// with 3 partitions: `caravela broker --topic NAME:3`).
//
// Then:
// - file sink: the FINAL results of the part files equal those of an
//   uninterrupted run; every window has exactly one FINAL, in one part file,
//   and per window key the revisions only increase (across epochs), with no
//   revision published twice and nothing after FINAL;
// - Kafka changelog, read from the beginning: per key the revisions only
//   increase (in offset order, across epochs), every FINAL published (also by
//   a killed run) equals the reference FINAL, and the last record per key is
//   that FINAL;
// - every run restores the job's last complete checkpoint (its job-checkpoint
//   record): each task's part of it must survive the task's checkpoint GC,
//   however many runs died after some tasks stored a later checkpoint that
//   never completed job-wide;
// - PostgreSQL: after every kill, no row's revision went below what an
//   earlier snapshot (taken after an earlier kill) held: the guard never let
//   a lower revision replace a higher one; at the end the table holds the
//   reference FINAL results, each row with state FINAL, its value's revision,
//   the epoch of that revision, and the highest revision the changelog saw.
//
// What is compared does not depend on timing: every copy of an event (the
// retries and conflicting copies) belongs to the same user, hence to one
// partition, in a fixed order (so "the first copy" is the same in every run
// and every task layout), and no event is delayed within its partition by
// more than the lateness (3 h) or the dedup retention (12 h): a record is
// preceded in its partition by event times at most its delay (<= 100 min)
// above its own, and every watermark (source tasks, exchange markers taking
// the min over producing tasks, window stage) is at most the min over the
// source partitions of their max event time minus 2 min, so nothing is ever
// too late, whatever the interleaving of partitions, tasks and exchanges. How
// many EARLY/LATE revisions a window gets depends on timing, so revisions
// are checked for order only.
//
// Kill timing (as in kill_loop_test.cc): a fifth of the kills come during
// startup (0 to the last start-to-ready time seen, up to ~1 s with a
// restore: 9 RocksDB instances, Kafka metadata, every task's restore), the
// others 100-600 ms after the run is ready (the job runner's "N tasks in 3
// stages ..." line, logged once every task has restored the job's last
// complete checkpoint and opened its inputs). The delays are capped from the
// processing rate (of the reference run, or of a faster run of the loop) and
// the progress of the job's last complete checkpoint (its record and the
// source tasks' manifests), so that the job cannot finish before the 20th
// kill: once 70% of the input is checkpointed, runs are killed within 150 ms
// of being ready, or during startup within the shortest startup seen.
//
// The input fits the embedded broker only compressed: librdkafka's mock
// cluster keeps 5 MiB per partition and drops older data (checked after
// producing). PARALLEL_KILL_LOOP_RETAIN sets spec.checkpoint.retain (2).
//
// The loop found (and now guards) a GC bug: each task's GC kept its newest
// retain + 1 manifests, so three runs killed after the source tasks stored
// a checkpoint that never completed job-wide (each run uses new ids) pushed
// the job's complete one out and the job could never restart ("checkpoint N
// is complete job-wide but this task's part of it is missing"). Tasks now
// pin the job's last complete checkpoint (CheckpointManager::Pin).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/child_process.h"
#include "tests/kill_loop_util.h"
#include "tests/test_util.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/testing/postgres_server.h"
#include "worker/testing/status_testing.h"

namespace fs = std::filesystem;

namespace caravela {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kPartitions = 4;
constexpr int kParallelism = 3;
constexpr int kEvents = 700000;
constexpr int kUsers = 3000;
constexpr int kKills = 20;
// Once this share of the input is checkpointed, runs are killed early (no
// more progress), so that the job cannot finish before the last kill.
constexpr double kPhase = 0.7;
// After this many runs in a row killed after ready without completing a
// checkpoint (a loaded machine), the next one waits for a checkpoint.
constexpr int kMaxStalled = 3;
constexpr int64_t kEpochFactor = 1'000'000'000;

// The lines of `<dir>/<stem>.part-<i>.jsonl` for every task i of a stage
// (and of `<dir>/<stem>.jsonl`, which a parallel run must not write).
std::vector<std::string> ReadStageParts(const fs::path& dir, const std::string& stem) {
  std::vector<std::string> lines = ReadLines(dir / (stem + ".jsonl"));
  for (int i = 0; i < kParallelism; ++i) {
    for (std::string& l : ReadLines(dir / absl::StrCat(stem, ".part-", i, ".jsonl"))) {
      lines.push_back(std::move(l));
    }
  }
  return lines;
}

// kEvents purchases over ~39 h of event time by kUsers users, a user's
// events all in partition user % 4 (see GeneratePurchases).
PurchaseStream Generate() {
  return GeneratePurchases({.seed = 20261102,
                            .events = kEvents,
                            .step_ms = 200,
                            .partitions = kPartitions,
                            .users = kUsers});
}

// Produces `records` (explicit partitions) compressed with zstd in large
// batches, and checks that the broker kept them all. The embedded broker
// (librdkafka's mock cluster) keeps at most 5 MiB of message sets per
// partition and silently drops older ones (bench/README.md); compressed, the
// stream fits several times over, uncompressed it would not.
absl::Status ProduceCompressed(const std::string& bootstrap, const std::string& topic,
                               const std::vector<KafkaTestRecord>& records) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  for (const auto& [k, v] : std::vector<std::pair<const char*, const char*>>{
           {"bootstrap.servers", bootstrap.c_str()},
           {"client.id", "parallel-kill-loop-producer"},
           {"enable.idempotence", "true"},
           {"compression.codec", "zstd"},
           {"linger.ms", "50"},
           {"batch.num.messages", "100000"},
           {"batch.size", "900000"},
           {"queue.buffering.max.messages", "1000000"},
           {"queue.buffering.max.kbytes", "1048576"}}) {
    if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return absl::InvalidArgumentError(absl::StrCat(k, ": ", err));
    }
  }
  std::atomic<int64_t> failed{0};
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR)
      static_cast<std::atomic<int64_t>*>(opaque)->fetch_add(1);
  });
  rd_kafka_conf_set_opaque(conf, &failed);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    return absl::InternalError(absl::StrCat("producer: ", err));
  }
  std::map<int32_t, int64_t> per_partition;
  absl::Status status;
  for (const KafkaTestRecord& r : records) {
    for (;;) {
      const rd_kafka_resp_err_t e = rd_kafka_producev(
          rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(r.partition),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_KEY(const_cast<char*>(r.key.data()), r.key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(r.value.data()), r.value.size()), RD_KAFKA_V_END);
      if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(rk, 10);
        continue;
      }
      if (e != RD_KAFKA_RESP_ERR_NO_ERROR) status = absl::InternalError(rd_kafka_err2str(e));
      break;
    }
    if (!status.ok()) break;
    ++per_partition[r.partition];
  }
  if (status.ok() && rd_kafka_flush(rk, 60000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    status = absl::DeadlineExceededError("flush did not finish in 60 s");
  }
  if (status.ok() && failed.load() > 0) {
    status = absl::UnavailableError(absl::StrCat(failed.load(), " deliveries failed"));
  }
  for (const auto& [p, n] : per_partition) {
    if (!status.ok()) break;
    int64_t low = -1, high = -1;
    const rd_kafka_resp_err_t e =
        rd_kafka_query_watermark_offsets(rk, topic.c_str(), p, &low, &high, 10000);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR || low != 0 || high != n) {
      status = absl::DataLossError(
          absl::StrCat(topic, "[", p, "] holds offsets [", low, ", ", high, ") of the ", n,
                       " records produced (", rd_kafka_err2str(e),
                       "): the broker dropped old data; produce less (or smaller) input"));
    }
  }
  rd_kafka_destroy(rk);
  return status;
}

// spec.checkpoint.retain; PARALLEL_KILL_LOOP_RETAIN overrides it.
std::string Retain() {
  const char* r = std::getenv("PARALLEL_KILL_LOOP_RETAIN");
  return r != nullptr && *r != '\0' ? r : "2";
}

// The job; `changelog` and `table` add the Kafka changelog and PostgreSQL
// sinks of the window results (none if empty).
std::string JobYaml(const std::string& name, const std::string& bootstrap,
                    const std::string& changelog, const std::string& dsn,
                    const std::string& table) {
  std::string yaml = KillLoopJobYaml(name, Retain(), bootstrap, true);
  if (!changelog.empty()) {
    absl::StrAppend(&yaml, "    - {from: revenue, kafka: {topic: ", changelog, ", bootstrap: \"",
                    bootstrap, "\", mode: changelog}}\n");
  }
  if (!table.empty()) {
    absl::StrAppend(&yaml, "    - {from: revenue, postgres: {dsn: \"", dsn, "\", table: ", table,
                    "}}\n");
  }
  return yaml;
}

std::vector<std::string> RunArgs(const fs::path& dir, const std::string& exchange, bool metrics) {
  const std::string binary = KillLoopBinary();
  std::vector<std::string> args = {
      binary,       "run",    "-q",         "--parallelism",         std::to_string(kParallelism),
      "--exchange", exchange, "--data-dir", (dir / "data").string(), (dir / "job.yaml").string()};
  if (metrics) args.push_back("--print-metrics");
  return args;
}

// The job's last complete checkpoint (its commit record; -1: none) and the
// number of input records before the source offsets of its manifests.
CheckpointProgress ReadProgress(const fs::path& data, const std::string& job) {
  CheckpointProgress p;
  const fs::path dir = data / "checkpoints" / job;
  static const std::regex record_re(R"(checkpoint=([0-9]+))");
  std::smatch m;
  const std::string record = ReadFile(dir / "job-checkpoint");
  if (!std::regex_search(record, m, record_re)) return p;
  p.checkpoint = std::stoll(m[1].str());
  // The source stage's tasks (global ids 0..N-1) hold the source offsets;
  // the other tasks' manifests name no source.
  for (int task = 0; task < 3 * kParallelism; ++task) {
    const std::string name = absl::StrCat("chk-", p.checkpoint, ".manifest");
    const fs::path file = dir / absl::StrCat("task-", task) / name;
    std::error_code ec;
    if (!fs::exists(file, ec)) continue;
    auto manifest = DecodeManifest(ReadFile(file), name);
    if (!manifest.ok()) continue;
    for (const auto& sc : manifest->sources()) {
      if (sc.name() != "purchases") continue;
      for (const auto& pc : sc.partitions()) p.records += std::max<int64_t>(pc.next_offset(), 0);
    }
  }
  return p;
}

struct WindowOutput {
  std::map<std::string, std::string> finals;  // key -> FINAL line without revision
  std::map<std::string, int> finals_per_key;
  std::map<std::string, int64_t> max_revision;
  int lines = 0;
  int64_t max_epoch = 0;
  std::vector<std::string> errors;  // unparseable lines, revision order violations
};

// Reads the window stage's part files: the FINAL lines, and the revision
// contract per key in file order (strictly increasing revisions, no revision
// twice, at most one ON_TIME, nothing after FINAL, every key in one part).
WindowOutput ReadWindowOutput(const fs::path& out_dir) {
  WindowOutput out;
  if (fs::exists(out_dir / "revenue.jsonl")) {
    out.errors.push_back("a parallel run wrote revenue.jsonl instead of part files");
  }
  std::map<std::string, int> part_of;
  for (int part = 0; part < kParallelism; ++part) {
    const std::string file = absl::StrCat("revenue.part-", part, ".jsonl");
    RevisionContract contract;
    int n = 0;
    for (const std::string& line : ReadLines(out_dir / file)) {
      ++out.lines;
      ++n;
      const std::string where = absl::StrCat(file, ":", n);
      WindowLine w;
      if (!ParseWindowLine(line, &w)) {
        out.errors.push_back(absl::StrCat(where, " unparseable: ", line));
        continue;
      }
      auto [it_part, fresh_part] = part_of.emplace(w.key, part);
      if (it_part->second != part) {
        out.errors.push_back(
            absl::StrCat(where, ": window ", w.key, " also in part ", it_part->second, ": ", line));
      }
      out.max_epoch = std::max(out.max_epoch, w.revision / kEpochFactor);
      int64_t& max_rev = out.max_revision[w.key];
      max_rev = std::max(max_rev, w.revision);
      contract.Check(w, where, line, &out.errors);
      if (w.state == "FINAL") {
        out.finals[w.key] = w.normalized;
        ++out.finals_per_key[w.key];
      }
    }
  }
  return out;
}

std::vector<std::string> Values(const std::map<std::string, std::string>& m) {
  std::vector<std::string> v;
  v.reserve(m.size());
  for (const auto& [k, s] : m) v.push_back(s);
  std::sort(v.begin(), v.end());
  return v;
}

// The sum of a metric's values in Prometheus text (`name{labels} value`, one
// line per task or label set); -1 if absent.
int64_t Metric(const std::string& text, const std::string& name) {
  const std::regex re("(^|\n)" + name + R"((\{[^}]*\})? ([0-9]+))");
  int64_t sum = -1;
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    sum = std::max<int64_t>(sum, 0) + std::stoll((*it)[3].str());
  }
  return sum;
}

// The job runner's line once every task is created: state restored, inputs
// opened (group 1: the epoch, group 2: the restored checkpoint, if any).
constexpr char kReady[] =
    R"(tasks in [0-9]+ stages, [0-9]+ exchanges \([^)]*\), epoch ([0-9]+)(?:, restored checkpoint ([0-9]+))?\r?\n)";

// Everything the loops share: the broker (it outlives every job process),
// the stream, PostgreSQL and the uninterrupted reference run.
struct Shared {
  TempDir tmp{"parallel_kill_loop", "KEEP_KILL_LOOP_DIR", "parallel kill loop"};
  std::unique_ptr<ChildProcess> broker;
  std::string bootstrap;
  PurchaseStream stream;
  int64_t total = 0;
  std::unique_ptr<PostgresServer> postgres;  // null: the PostgreSQL part is skipped
  std::string postgres_skipped;              // why
  WindowOutput want;
  std::vector<std::string> want_conflicts;
  int64_t ref_ms = 0;  // the reference run, from ready to its end
  std::string setup_error;
};

class ParallelKillLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new Shared();
    Shared& s = *shared_;
    s.setup_error = SetUpShared(s);
  }
  static void TearDownTestSuite() {
    if (shared_->broker != nullptr) {
      const int rc = shared_->broker->Stop(SIGTERM);
      if (rc != 0) std::printf("parallel kill loop: the broker exited with %d\n", rc);
    }
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(shared_->setup_error, "") << shared_->setup_error; }

  static std::string SetUpShared(Shared& s) {
    const auto t0 = Clock::now();
    if (s.tmp.path().empty()) return "no temp dir";
    const fs::path& dir = s.tmp.path();

    // PostgreSQL, unless its binaries are missing.
    const char* env_bin = std::getenv("CARAVELA_PG_BINDIR");
    const std::string pg_bin =
        env_bin != nullptr && *env_bin != '\0' ? env_bin : "/usr/lib/postgresql/15/bin";
    if (!fs::exists(pg_bin + "/postgres") || !fs::exists(pg_bin + "/initdb")) {
      s.postgres_skipped = absl::StrCat("no PostgreSQL binaries in ", pg_bin,
                                        " (scripts/install-deps, or set CARAVELA_PG_BINDIR)");
    } else {
      auto pg = PostgresServer::Start();
      if (!pg.ok()) return absl::StrCat("PostgreSQL did not start: ", pg.status().ToString());
      s.postgres = std::move(*pg);
    }

    // The broker: the source topic (4 partitions), a changelog topic per
    // loop, and the Kafka exchange loop's exchange topics (3 partitions: one
    // per task of the consuming stage; the broker of another process cannot
    // create topics for a client).
    std::vector<std::string> args = {KillLoopBinary(), "broker",
                                     "--port",         "0",
                                     "--topic",        absl::StrCat("purchases:", kPartitions)};
    for (const char* exchange : {"memory", "kafka"}) {
      args.push_back("--topic");
      args.push_back(absl::StrCat("changelog-", exchange, ":4"));
    }
    for (const char* op : {"unique", "revenue"}) {
      args.push_back("--topic");
      args.push_back(absl::StrCat("caravela.", JobName("kafka"), ".", op, ":", kParallelism));
    }
    s.broker = std::make_unique<ChildProcess>(args, dir / "broker.log");
    if (!s.broker->started()) return "broker did not start";
    const auto got = s.broker->WaitForMatch(R"(listening on (\S+))", milliseconds(20000));
    if (got.size() < 2) return "broker did not start:\n" + s.broker->Log();
    s.bootstrap = got[1];

    // The stream.
    s.stream = Generate();
    s.total = static_cast<int64_t>(s.stream.records.size());
    absl::Status st = ProduceCompressed(s.bootstrap, "purchases", s.stream.records);
    if (!st.ok()) return absl::StrCat("produce: ", st.ToString());
    std::printf(
        "parallel kill loop: %lld messages (%d events, %d retries, %d conflicting copies, %d "
        "late) produced after %lld ms\n",
        static_cast<long long>(s.total), s.stream.events, s.stream.duplicates, s.stream.conflicts,
        s.stream.late, static_cast<long long>(MsSince(t0)));

    // The reference: one uninterrupted run with the same parallelism (the
    // FINAL results do not depend on it), file sinks only.
    const fs::path ref = dir / "reference";
    fs::create_directories(ref);
    std::ofstream(ref / "job.yaml") << JobYaml("pkill-ref", s.bootstrap, "", "", "");
    {
      ChildProcess run(RunArgs(ref, "memory", true), ref / "run.log");
      if (!run.started()) return "reference run did not start";
      if (run.WaitForMatch(kReady, milliseconds(30000)).empty()) {
        return "reference run not ready:\n" + run.Log();
      }
      const auto ready = Clock::now();
      if (!run.WaitUntil(Clock::now() + milliseconds(60000))) {
        return "reference run did not finish in 60 s:\n" + run.Log();
      }
      s.ref_ms = MsSince(ready);
      if (run.ExitCode() != 0) return "reference run failed:\n" + run.Log();
      const std::string metrics = run.Log();
      EXPECT_EQ(Metric(metrics, "dedup_passed_total"), s.stream.events) << metrics;
      EXPECT_EQ(Metric(metrics, "dedup_duplicates_total"), s.stream.duplicates) << metrics;
      EXPECT_EQ(Metric(metrics, "dedup_conflicts_total"), s.stream.conflicts) << metrics;
    }
    s.want = ReadWindowOutput(ref / "out");
    EXPECT_THAT(s.want.errors, ::testing::IsEmpty());
    EXPECT_GT(s.want.finals.size(), 100u);
    for (const auto& [key, n] : s.want.finals_per_key) EXPECT_EQ(n, 1) << key;
    s.want_conflicts = ReadStageParts(ref / "out", "conflicts");
    std::sort(s.want_conflicts.begin(), s.want_conflicts.end());
    EXPECT_EQ(s.want_conflicts.size(), static_cast<size_t>(s.stream.conflicts));
    // Nothing may be too late in this stream, else results would depend on timing.
    EXPECT_THAT(ReadStageParts(ref / "out", "too_late"), ::testing::IsEmpty());
    EXPECT_THAT(ReadStageParts(ref / "out", "dedup_too_late"), ::testing::IsEmpty());
    EXPECT_THAT(ReadStageParts(ref / "out", "invalid"), ::testing::IsEmpty());
    EXPECT_EQ(SumField(Values(s.want.finals), "orders"), s.stream.events)
        << "the FINAL results do not count every event once";
    std::printf(
        "parallel kill loop: reference run %lld ms after ready, %zu windows; setup %lld ms\n",
        static_cast<long long>(s.ref_ms), s.want.finals.size(),
        static_cast<long long>(MsSince(t0)));
    if (::testing::Test::HasFailure()) return "the reference run is not usable (see above)";
    return "";
  }

  static std::string JobName(const std::string& exchange) { return "pkill-" + exchange; }

  // Per window key (window_start|country) the revision of its row; empty if
  // the table does not exist yet.
  static std::map<std::string, int64_t> TableRevisions(const std::string& table) {
    std::map<std::string, int64_t> out;
    auto rows = shared_->postgres->Query(
        absl::StrCat("SELECT window_start, country, revision FROM ", table));
    if (!rows.ok()) return out;  // created at the first flush
    for (const auto& r : *rows) out[r[0] + "|" + r[1]] = std::stoll(r[2]);
    return out;
  }

  void RunLoop(const std::string& exchange, uint32_t seed);

  static Shared* shared_;
};

Shared* ParallelKillLoopTest::shared_ = nullptr;

void ParallelKillLoopTest::RunLoop(const std::string& exchange, uint32_t seed) {
  Shared& s = *shared_;
  const auto loop_start = Clock::now();
  const std::string job = JobName(exchange);
  const std::string changelog = "changelog-" + exchange;
  const std::string table = s.postgres != nullptr ? "revenue_" + exchange : "";
  const fs::path loop = s.tmp.path() / exchange;
  fs::create_directories(loop);
  std::ofstream(loop / "job.yaml") << JobYaml(
      job, s.bootstrap, changelog, s.postgres != nullptr ? s.postgres->Dsn() : "", table);
  if (s.postgres == nullptr) {
    std::printf("parallel kill loop (%s): PostgreSQL sink SKIPPED: %s\n", exchange.c_str(),
                s.postgres_skipped.c_str());
  }

  // The kill loop: same data dir, SIGKILL at a random moment, kKills times.
  // Every run is traced (stdout) as it ends: where it restarted from, when it
  // was killed, and the job's last complete checkpoint after it.
  KillTiming timing(seed);
  int kills = 0, runs = 0, startup_kills = 0, restores = 0;
  int stalled = 0;  // runs in a row killed after ready without a new checkpoint
  bool finished_early = false;
  std::set<int64_t> restored_ids;
  std::string delays;
  // PostgreSQL: each key's highest revision in any snapshot so far, and
  // where it was seen.
  std::map<std::string, std::pair<int64_t, int>> table_high;
  int guard_violations = 0;
  auto check_table = [&](int run) {
    if (s.postgres == nullptr) return;
    for (const auto& [key, rev] : TableRevisions(table)) {
      auto [it, fresh] = table_high.emplace(key, std::make_pair(rev, run));
      if (fresh) continue;
      if (rev < it->second.first && ++guard_violations <= 10) {
        ADD_FAILURE() << "PostgreSQL: after run " << run << " the row of " << key
                      << " has revision " << rev << ", after run " << it->second.second
                      << " it had " << it->second.first << " (a lower revision replaced a higher "
                      << "one)";
      }
      if (rev > it->second.first) it->second = {rev, run};
    }
  };
  // Why a run of the loop failed on its own, for the failure message.
  auto diagnose = [&](const std::string& log) {
    std::string why;
    if (log.find("is complete job-wide but this task's part of it is missing") !=
        std::string::npos) {
      why =
          "BUG: the job's last complete checkpoint (its job-checkpoint record) lost a task's "
          "manifest: a task's checkpoint GC collected it although it is pinned. The job can no "
          "longer restart.\n";
    }
    absl::StrAppend(
        &why, "the job's record: ", ReadFile(loop / "data/checkpoints" / job / "job-checkpoint"),
        "manifests per task:");
    for (int t = 0; t < 3 * kParallelism; ++t) {
      std::vector<std::string> names;
      std::error_code ec;
      for (const auto& e :
           fs::directory_iterator(loop / "data/checkpoints" / job / absl::StrCat("task-", t), ec)) {
        const std::string name = e.path().filename().string();
        if (name.size() > 9 && name.substr(name.size() - 9) == ".manifest") names.push_back(name);
      }
      std::sort(names.begin(), names.end());
      absl::StrAppend(&why, "\n  task-", t, ": ", absl::StrJoin(names, " "));
    }
    absl::StrAppend(&why, "\nruns so far:\n", delays, "log:\n", log);
    return why;
  };
  // Input records per ms: the reference's, or faster if a run of the loop was.
  double rate = static_cast<double>(s.total) / std::max<int64_t>(1, s.ref_ms);
  // Process start to ready: the last one seen, and the shortest (a kill
  // within it lands in startup whatever the phase).
  int64_t startup_ms = 300, min_startup_ms = 300;
  while (kills < kKills) {
    const CheckpointProgress before = ReadProgress(loop / "data", job);
    const double done = static_cast<double>(before.records) / static_cast<double>(s.total);
    const int n = runs++;
    ChildProcess run(RunArgs(loop, exchange, false), loop / absl::StrFormat("run-%02d.log", n));
    ASSERT_TRUE(run.started());
    Clock::time_point kill_at;
    std::optional<Clock::time_point> ready_at;
    std::string what;
    if (timing.DuringStartup()) {
      // During startup (process start, state open, Kafka metadata, every
      // task's restore); after kPhase only within the shortest startup
      // seen, so that the run makes no progress.
      const int64_t d = timing.Uniform(0, done < kPhase ? startup_ms : min_startup_ms);
      kill_at = run.started_at() + milliseconds(d);
      ++startup_kills;
      what = absl::StrCat("killed ", d, " ms after its start");
    } else {
      // After the run is ready: every task restored the job's last complete
      // checkpoint, if any, and opened its inputs.
      const std::vector<std::string> got = run.WaitForMatch(kReady, milliseconds(30000));
      ASSERT_FALSE(got.empty()) << "run " << n << " not ready after 30 s (exit code "
                                << run.ExitCode() << ", last complete checkpoint "
                                << before.checkpoint << "): " << diagnose(run.Log());
      const auto ready = Clock::now();
      startup_ms = MsSince(run.started_at());
      min_startup_ms = std::min(min_startup_ms, startup_ms);
      if (before.checkpoint >= 0) {
        EXPECT_EQ(got[2], std::to_string(before.checkpoint))
            << "run " << n << " did not restore the job's last complete checkpoint";
      } else {
        EXPECT_EQ(got[2], "") << "run " << n << " restored a checkpoint without a job record";
      }
      // Never long enough to finish the rest of the input at the fastest
      // rate seen so far, and short once kPhase of it is checkpointed.
      const double remaining_ms = static_cast<double>(s.total - before.records) / rate;
      int64_t d = timing.AfterReady(remaining_ms, done >= kPhase);
      ready_at = ready;
      what = absl::StrCat("ready after ", startup_ms, " ms, killed ", d, " ms later");
      if (stalled >= kMaxStalled && done < kPhase) {
        // A loaded machine: runs killed within the window made no checkpoint
        // kMaxStalled times in a row. This one is killed `d` (at most 100 ms)
        // after its next complete checkpoint, so the loop still restores
        // later states, whatever the machine's speed.
        d = timing.Uniform(0, 100);
        const auto deadline = ready + milliseconds(30000);
        while (ReadProgress(loop / "data", job).checkpoint == before.checkpoint &&
               !run.WaitUntil(std::min(deadline, Clock::now() + milliseconds(10)))) {
          if (Clock::now() >= deadline) break;
        }
        what = absl::StrCat("ready after ", startup_ms, " ms, killed ", d,
                            " ms after its first checkpoint, ", MsSince(ready), " ms after ready");
        ready_at = ready;
        kill_at = Clock::now() + milliseconds(d);
      } else {
        kill_at = ready + milliseconds(d);
      }
    }
    if (run.WaitUntil(kill_at)) {
      ASSERT_EQ(run.ExitCode(), 0) << "run " << n << " failed: " << diagnose(run.Log());
      finished_early = true;
      break;
    }
    ASSERT_EQ(run.Stop(SIGKILL), 128 + SIGKILL) << run.Log();
    ++kills;
    const CheckpointProgress after = ReadProgress(loop / "data", job);
    if (ready_at.has_value()) stalled = after.checkpoint == before.checkpoint ? stalled + 1 : 0;
    if (ready_at.has_value()) {  // records per ms, a lower bound of this run's rate
      const int64_t ms = std::max<int64_t>(1, MsSince(*ready_at));
      rate = std::max(rate, static_cast<double>(after.records - before.records) / ms);
    }
    std::smatch m;
    const std::string text = run.Log();
    if (std::regex_search(text, m, std::regex(kReady)) && m[2].matched) {
      ++restores;
      restored_ids.insert(std::stoll(m[2].str()));
    }
    const std::string line = absl::StrFormat(
        "run %02d: from checkpoint %lld (%.0f%% of the input), %s; job checkpoint now %lld\n", n,
        static_cast<long long>(before.checkpoint), 100 * done, what,
        static_cast<long long>(after.checkpoint));
    std::printf("parallel kill loop (%s): %s", exchange.c_str(), line.c_str());
    std::fflush(stdout);
    absl::StrAppend(&delays, "  ", line);
    check_table(n);
  }
  const CheckpointProgress before_last = ReadProgress(loop / "data", job);
  // Then to completion.
  {
    const int n = runs++;
    ChildProcess run(RunArgs(loop, exchange, false), loop / absl::StrFormat("run-%02d.log", n));
    ASSERT_TRUE(run.started());
    ASSERT_TRUE(run.WaitUntil(Clock::now() + milliseconds(60000)))
        << "the last run did not finish in 60 s:\n"
        << run.Log();
    ASSERT_EQ(run.ExitCode(), 0) << "the last run failed: " << diagnose(run.Log());
    std::smatch m;
    const std::string text = run.Log();
    if (std::regex_search(text, m, std::regex(kReady)) && m[2].matched) {
      ++restores;
      restored_ids.insert(std::stoll(m[2].str()));
    }
    check_table(n);
  }
  std::printf(
      "parallel kill loop (%s): %d restarts (%d SIGKILLs, %d of them during startup; %d runs "
      "restored a checkpoint, %zu distinct checkpoints; the last run resumed at %lld of %lld "
      "records); fastest rate %.0f records/s, loop %lld ms\n",
      exchange.c_str(), runs - 1, kills, startup_kills, restores, restored_ids.size(),
      static_cast<long long>(before_last.records), static_cast<long long>(s.total), rate * 1000,
      static_cast<long long>(MsSince(loop_start)));
  EXPECT_FALSE(finished_early) << "the job finished after " << kills << " kills";
  EXPECT_GE(kills, kKills);
  // Runs made progress and later runs resumed from it (else the loop only
  // tested restarts from scratch).
  EXPECT_GE(restored_ids.size(), 1u);

  // 1. The file sink: same FINAL results and conflicts; the revision
  // contract held throughout.
  const WindowOutput got = ReadWindowOutput(loop / "out");
  EXPECT_THAT(got.errors, ::testing::IsEmpty());
  EXPECT_GE(got.max_epoch, 1) << "no revision carries the epoch of a restarted run";
  for (const auto& [key, n] : got.finals_per_key) {
    EXPECT_EQ(n, 1) << "window " << key << " has " << n << " FINAL results";
  }
  const std::vector<std::string> want_finals = Values(s.want.finals);
  const std::vector<std::string> got_finals = Values(got.finals);
  EXPECT_TRUE(got_finals == want_finals)
      << "file sink: FINAL results differ from the uninterrupted run (" << got_finals.size()
      << " vs " << want_finals.size() << " windows)"
      << Differences(got_finals, want_finals, "after the kills");
  std::vector<std::string> got_conflicts = ReadStageParts(loop / "out", "conflicts");
  std::sort(got_conflicts.begin(), got_conflicts.end());
  EXPECT_TRUE(got_conflicts == s.want_conflicts)
      << "conflicts differ from the uninterrupted run"
      << Differences(got_conflicts, s.want_conflicts, "after the kills");
  EXPECT_THAT(ReadStageParts(loop / "out", "too_late"), ::testing::IsEmpty());
  EXPECT_THAT(ReadStageParts(loop / "out", "dedup_too_late"), ::testing::IsEmpty());
  EXPECT_THAT(ReadStageParts(loop / "out", "invalid"), ::testing::IsEmpty());

  // 2. The Kafka changelog, from the beginning (every run's output, killed
  // ones included): per key the revisions only increase, in offset order
  // (a key's records are in one partition); every FINAL anyone published is
  // the reference's; the last record of a key is its FINAL.
  std::map<std::string, int64_t> changelog_high;
  {
    auto records = ConsumeAll(s.bootstrap, changelog, 30000);
    ASSERT_OK(records.status());
    std::map<std::string, WindowLine> last;
    std::map<std::string, int32_t> partition_of;
    std::vector<std::string> errors;
    int finals = 0;
    int64_t max_epoch = 0;
    for (const KafkaConsumedRecord& r : *records) {
      const std::string where = absl::StrCat(changelog, "[", r.partition, "]@", r.offset);
      WindowLine w;
      if (!ParseWindowLine(r.value, &w)) {
        errors.push_back(absl::StrCat(where, " unparseable: ", r.value));
        continue;
      }
      max_epoch = std::max(max_epoch, w.revision / kEpochFactor);
      auto [pit, fresh_partition] = partition_of.emplace(w.key, r.partition);
      if (pit->second != r.partition) {
        errors.push_back(
            absl::StrCat(where, ": window ", w.key, " also in partition ", pit->second));
      }
      auto it = last.find(w.key);
      if (it != last.end() && w.revision <= it->second.revision) {
        errors.push_back(absl::StrCat(where, ": window ", w.key, " revision ", w.revision, " (",
                                      w.state, ") after ", it->second.revision, " (",
                                      it->second.state, "): ", r.value));
      }
      if (w.state == "FINAL") {
        ++finals;
        auto want = s.want.finals.find(w.key);
        if (want == s.want.finals.end()) {
          errors.push_back(
              absl::StrCat(where, ": FINAL of a window the reference lacks: ", r.value));
        } else if (want->second != w.normalized) {
          errors.push_back(absl::StrCat(where, ": FINAL ", w.normalized,
                                        " differs from the reference ", want->second));
        }
      }
      int64_t& high = changelog_high[w.key];
      high = std::max(high, w.revision);
      last[w.key] = w;
    }
    EXPECT_THAT(errors, ::testing::IsEmpty()) << "Kafka changelog " << changelog;
    EXPECT_GE(max_epoch, 1) << "no changelog revision carries the epoch of a restarted run";
    std::vector<std::string> last_values;
    for (const auto& [key, w] : last) {
      EXPECT_EQ(w.state, "FINAL") << "Kafka changelog: the last record of " << key << " is "
                                  << w.state << " revision " << w.revision;
      last_values.push_back(w.normalized);
    }
    std::sort(last_values.begin(), last_values.end());
    EXPECT_TRUE(last_values == want_finals)
        << "Kafka changelog: the last value per key differs from the reference FINAL ("
        << last_values.size() << " vs " << want_finals.size() << " keys)"
        << Differences(last_values, want_finals, "in the changelog");
    std::printf(
        "parallel kill loop (%s): changelog %zu records, %d FINAL (%zu windows), epochs up to "
        "%lld\n",
        exchange.c_str(), records->size(), finals, want_finals.size(),
        static_cast<long long>(max_epoch));
  }

  // 3. PostgreSQL: the reference FINAL results, each row the highest
  // revision published for its key, with its state, revision and epoch.
  if (s.postgres != nullptr) {
    EXPECT_EQ(guard_violations, 0) << "PostgreSQL: the revision guard let lower revisions win";
    std::string values;
    for (const auto& [key, line] : s.want.finals) {
      absl::StrAppend(&values, values.empty() ? "(" : ", (", SqlLiteral(key), ", ",
                      SqlLiteral(line), "::jsonb)");
    }
    // The reference (without revision) against the table's value without
    // its revision, both in jsonb's normal form.
    auto want_rows = s.postgres->Query(
        absl::StrCat("SELECT k, v::text FROM (VALUES ", values, ") AS f(k, v) ORDER BY 1"));
    ASSERT_OK(want_rows.status());
    auto rows =
        s.postgres->Query(absl::StrCat("SELECT window_start || '|' || country, (value - "
                                       "'revision')::text, revision, state, epoch, "
                                       "value->>'revision' FROM ",
                                       table, " ORDER BY 1"));
    ASSERT_OK(rows.status());
    std::vector<std::string> want_pg, got_pg;
    for (const auto& r : *want_rows) want_pg.push_back(r[0] + " " + r[1]);
    for (const auto& r : *rows) {
      got_pg.push_back(r[0] + " " + r[1]);
      const int64_t rev = std::stoll(r[2]);
      EXPECT_EQ(r[3], "FINAL") << "PostgreSQL row " << r[0];
      EXPECT_EQ(r[5], r[2]) << "PostgreSQL row " << r[0] << ": value's revision vs its column";
      EXPECT_EQ(r[4], std::to_string(rev / kEpochFactor))
          << "PostgreSQL row " << r[0] << ": epoch column vs revision " << rev;
      auto high = changelog_high.find(r[0]);
      if (high != changelog_high.end()) {
        EXPECT_EQ(rev, high->second)
            << "PostgreSQL row " << r[0] << " is not the highest revision published for its key";
      }
      auto file_high = got.max_revision.find(r[0]);
      if (file_high != got.max_revision.end()) {
        EXPECT_EQ(rev, file_high->second)
            << "PostgreSQL row " << r[0] << " is not the file sink's last revision";
      }
    }
    EXPECT_TRUE(got_pg == want_pg)
        << "PostgreSQL table " << table << " differs from the reference FINAL results ("
        << got_pg.size() << " vs " << want_pg.size() << " rows)"
        << Differences(got_pg, want_pg, "in the table");
    std::set<std::string> epochs;
    for (const auto& r : *rows) epochs.insert(r[4]);
    std::printf(
        "parallel kill loop (%s): PostgreSQL table %s: %zu rows (reference %zu), rows of epochs "
        "{%s}; revisions checked after each of the %d runs\n",
        exchange.c_str(), table.c_str(), got_pg.size(), want_pg.size(),
        absl::StrJoin(epochs, ",").c_str(), runs);
  }
  std::printf("parallel kill loop (%s): %d restarts, %lld ms\n", exchange.c_str(), runs - 1,
              static_cast<long long>(MsSince(loop_start)));
}

TEST_F(ParallelKillLoopTest, InMemoryExchange) { RunLoop("memory", 4); }

TEST_F(ParallelKillLoopTest, KafkaExchange) { RunLoop("kafka", 5); }

}  // namespace
}  // namespace caravela
