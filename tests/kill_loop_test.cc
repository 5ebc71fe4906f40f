// Random kill loop (issue 4, SPEC §4 and §6): a job with dedup and hourly
// windows reads a generated purchase stream (retries, conflicting copies,
// disorder across partitions, late events within the lateness) from a
// standalone `caravela broker`, with checkpoints every 100 ms. `caravela run`
// is killed with SIGKILL at a random moment and restarted with the same data
// dir, at least 20 times, then runs to completion. Its FINAL window results
// and dedup conflicts must equal those of an uninterrupted run, and per window
// key the published revisions must only ever increase (across epochs too),
// with no (key, revision) published twice and one FINAL per window.
//
// What is compared does not depend on timing: every copy of an event goes to
// one partition (so "the first copy" is the same in every run), and no event
// is delayed within its partition by more than the lateness or the dedup
// retention (so nothing is too late, whatever the read interleaving of the
// partitions). How many EARLY/LATE revisions a window gets depends on
// batching, so revisions are checked for order only.
//
// Kill timing: a kill 100-600 ms after the process starts would almost always
// land before the run's first checkpoint completes (startup takes ~250 ms,
// then the first checkpoint starts 100 ms after the source opens and takes
// ~150 ms), and the loop would only ever restart from scratch. So a fifth of
// the kills come 0-300 ms after the start (startup, restore), the others
// 100-600 ms after the run is ready (source opened and checkpoint restored,
// seen in its log). The delays are capped from the processing rate (of the
// reference run, or of a faster run of the loop) and the progress of the
// latest checkpoint (read from its manifest) so that the job cannot finish
// before the 20th kill on a fast (release) build either: once 70% of the input
// is checkpointed, runs are killed within 150 ms of being ready.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/time_util.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/connectors/kafka_test_util.h"

namespace fs = std::filesystem;

namespace caravela {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kStart = 1793491200000;  // 2026-11-01T00:00:00Z
constexpr int64_t kSecond = 1000;
constexpr int64_t kMinute = 60 * kSecond;
constexpr int kPartitions = 4;
constexpr int kEvents = 180000;
constexpr int kKills = 20;
// Once this share of the input is checkpointed, runs are killed early (no
// more progress), so that the job cannot finish before the last kill.
constexpr double kPhase = 0.7;

// The binary under test; KILL_LOOP_CARAVELA overrides it (e.g. to run the
// loop against a release build).
std::string Binary() {
  const char* b = std::getenv("KILL_LOOP_CARAVELA");
  return b != nullptr ? b : CARAVELA_BINARY;
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> ReadLines(const fs::path& p) {
  std::vector<std::string> lines;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A child process (execv, no shell) with stdout and stderr in a file. The
// destructor kills and reaps it if it is still running.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const fs::path& log) : log_(log) {
    // Everything the child needs is prepared before fork(): the parent has
    // threads (librdkafka), so the child only calls async-signal-safe functions.
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    started_at_ = Clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fd, 1);  // the duplicates do not inherit O_CLOEXEC
      dup2(fd, 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(fd);
  }
  ~Child() {
    if (running()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0; }
  bool running() const { return pid_ > 0 && !exited_; }
  Clock::time_point started_at() const { return started_at_; }
  std::string Log() const { return ReadFile(log_); }

  // Waits until the child exits or `deadline` passes; returns true if it exited.
  bool WaitUntil(Clock::time_point deadline) {
    while (running()) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        status_ = status;
        break;
      }
      const auto now = Clock::now();
      if (now >= deadline) return false;
      std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(2), deadline - now));
    }
    return true;
  }
  // Exit code, or 128 + signal; -1 while running.
  int ExitCode() const {
    if (!exited_) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  // Sends `sig` and waits (up to `timeout`) for the exit; returns ExitCode().
  int Stop(int sig, milliseconds timeout = milliseconds(15000)) {
    if (running()) {
      kill(pid_, sig);
      WaitUntil(Clock::now() + timeout);
    }
    return ExitCode();
  }
  // Waits until the log matches `re` and returns the first capture group (or
  // the match); "" if the child exits or `timeout` passes first.
  std::string WaitFor(const std::string& re, milliseconds timeout) {
    const std::regex pattern(re);
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      std::smatch m;
      const std::string log = Log();
      if (std::regex_search(log, m, pattern)) return m.size() > 1 ? m[1].str() : m[0].str();
      if (Clock::now() >= deadline || WaitUntil(Clock::now())) return "";
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  Clock::time_point started_at_;
  fs::path log_;
};

// A fresh temp directory, removed at the end unless KEEP_KILL_LOOP_DIR is set.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/caravela_kill_loop_XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    if (std::getenv("KEEP_KILL_LOOP_DIR") != nullptr) {
      std::printf("kill loop: kept %s\n", path_.c_str());
      return;
    }
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The generated stream: messages (partition, JSON) in produce order, and what
// dedup must report for it.
struct Stream {
  std::vector<std::pair<int32_t, std::string>> messages;
  int events = 0;      // distinct event ids
  int duplicates = 0;  // byte-identical copies (retries)
  int conflicts = 0;   // same id, different amount
  int late = 0;        // events delayed by 70-100 min within their partition
};

// kEvents purchases over ~40 h of event time, 6 countries, exact decimal
// amounts. An event's copies (retries and conflicting copies) all go to its
// partition, 5-20 s after it in that partition's order; most events are
// delayed 0-30 s, every 40th (on average) by 70-100 min: late, but within the
// 3 h lateness and the 12 h dedup retention, and no partition is ever behind
// another by more, so the in-partition disorder bounds what is late.
Stream Generate() {
  std::mt19937_64 rng(20261101);
  const char* countries[] = {"PT", "BR", "AO", "MZ", "CV", "GW"};
  struct Item {
    int64_t order;  // position in the partition: event time + delay
    int seq;
    std::string json;
  };
  std::vector<std::vector<Item>> parts(kPartitions);
  Stream s;
  int seq = 0;
  auto json = [](int i, const char* country, int cents, int64_t t) {
    return absl::StrFormat(R"({"event_id":"e%06d","country":"%s","amount":%d.%02d,"ts":"%s"})", i,
                           country, cents / 100, cents % 100, FormatIso8601(t));
  };
  for (int i = 0; i < kEvents; ++i) {
    const int64_t t = kStart + int64_t{i} * 800 + static_cast<int64_t>(rng() % (2 * kMinute));
    int64_t delay = static_cast<int64_t>(rng() % (30 * kSecond));
    if (rng() % 40 == 0) {
      delay = 70 * kMinute + static_cast<int64_t>(rng() % (30 * kMinute));
      ++s.late;
    }
    const int p = static_cast<int>(rng() % kPartitions);
    const char* country = countries[rng() % 6];
    const int cents = 100 + static_cast<int>(rng() % 25000);
    const std::string first = json(i, country, cents, t);
    ++s.events;
    parts[p].push_back({t + delay, seq++, first});
    if (rng() % 7 == 0) {  // a retry: the same bytes again
      parts[p].push_back({t + delay + 5 * kSecond, seq++, first});
      ++s.duplicates;
    }
    if (rng() % 97 == 0) {  // a conflicting copy: same id and time, another amount
      parts[p].push_back({t + delay + 20 * kSecond, seq++, json(i, country, cents + 1, t)});
      ++s.conflicts;
    }
  }
  for (auto& items : parts) {
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return a.order != b.order ? a.order < b.order : a.seq < b.seq;
    });
  }
  // Interleaved across partitions (only the order within a partition matters).
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (int p = 0; p < kPartitions; ++p) {
      if (k < parts[p].size()) {
        s.messages.emplace_back(p, std::move(parts[p][k].json));
        any = true;
      }
    }
    if (!any) break;
  }
  return s;
}

std::string JobYaml(const std::string& bootstrap) {
  return absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: kill-loop}
spec:
  checkpoint: {interval: 100ms, retain: 2}
  sources:
    - name: purchases
      kafka: {topic: purchases, bootstrap: ")",
                      bootstrap, R"(", bounded: true}
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
        early_fire_every: 1s
        allowed_lateness: 3h
  sinks:
    - {from: revenue, file: {path: out/revenue.jsonl}}
    - {from: unique.conflicts, file: {path: out/conflicts.jsonl}}
    - {from: unique.too_late, file: {path: out/dedup_too_late.jsonl}}
    - {from: revenue.too_late, file: {path: out/too_late.jsonl}}
    - {from: purchases.invalid, file: {path: out/invalid.jsonl}}
)");
}

std::vector<std::string> RunArgs(const fs::path& dir, bool metrics) {
  std::vector<std::string> args = {
      Binary(), "run", "-q", "--data-dir", (dir / "data").string(), (dir / "job.yaml").string()};
  if (metrics) args.push_back("--print-metrics");
  return args;
}

// The newest checkpoint manifest of the job in `data` (-1: none) and the
// number of input records before its source offsets.
struct Progress {
  int64_t checkpoint = -1;
  int64_t records = 0;
};

Progress ReadProgress(const fs::path& data) {
  Progress p;
  const fs::path task = data / "checkpoints/kill-loop/task-0";
  std::error_code ec;
  if (!fs::is_directory(task, ec)) return p;
  static const std::regex name_re(R"(chk-([0-9]+)\.manifest)");
  for (const auto& e : fs::directory_iterator(task, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, name_re)) continue;
    const int64_t id = std::stoll(m[1].str());
    if (id <= p.checkpoint) continue;
    auto manifest = DecodeManifest(ReadFile(e.path()), name);
    if (!manifest.ok()) continue;
    p.checkpoint = id;
    p.records = 0;
    for (const auto& sc : manifest->sources()) {
      for (const auto& pc : sc.partitions()) p.records += std::max<int64_t>(pc.next_offset(), 0);
    }
  }
  return p;
}

struct WindowLine {
  std::string key;  // window_start|country
  int64_t revision = -1;
  std::string state;
  std::string normalized;  // the line without its revision
};

bool ParseWindowLine(const std::string& line, WindowLine* w) {
  static const std::regex start_re(R"re("window_start":"([^"]+)")re");
  static const std::regex country_re(R"re("country":"([^"]+)")re");
  static const std::regex rev_re(R"re(,?"revision":([0-9]+))re");
  static const std::regex state_re(R"re("state":"([A-Z_]+)")re");
  std::smatch a, b, r, s;
  if (!std::regex_search(line, a, start_re) || !std::regex_search(line, b, country_re) ||
      !std::regex_search(line, r, rev_re) || !std::regex_search(line, s, state_re)) {
    return false;
  }
  w->key = a[1].str() + "|" + b[1].str();
  w->revision = std::stoll(r[1].str());
  w->state = s[1].str();
  w->normalized = r.prefix().str() + r.suffix().str();
  return true;
}

struct WindowOutput {
  std::vector<std::string> finals;  // FINAL lines without revision, sorted
  std::map<std::string, int> finals_per_key;
  int lines = 0;
  int64_t max_epoch = 0;
  std::vector<std::string> errors;  // unparseable lines, revision order violations
};

// Reads a window output file: its FINAL lines, and checks the revision
// contract per key in file order (strictly increasing revisions, at most one
// ON_TIME, nothing after FINAL).
WindowOutput ReadWindowOutput(const fs::path& p) {
  WindowOutput out;
  std::map<std::string, int64_t> last;
  std::set<std::pair<std::string, int64_t>> seen;
  std::set<std::string> on_time, finished;
  for (const std::string& line : ReadLines(p)) {
    ++out.lines;
    WindowLine w;
    if (!ParseWindowLine(line, &w)) {
      out.errors.push_back(absl::StrCat("line ", out.lines, " unparseable: ", line));
      continue;
    }
    out.max_epoch = std::max(out.max_epoch, w.revision / 1'000'000'000);
    if (!seen.emplace(w.key, w.revision).second) {
      out.errors.push_back(absl::StrCat("line ", out.lines, ": window ", w.key, " revision ",
                                        w.revision, " published twice: ", line));
    }
    auto it = last.find(w.key);
    if (it != last.end() && w.revision <= it->second) {
      out.errors.push_back(absl::StrCat("line ", out.lines, ": window ", w.key, " revision ",
                                        w.revision, " after ", it->second, ": ", line));
    }
    last[w.key] = w.revision;
    if (finished.count(w.key) > 0) {
      out.errors.push_back(
          absl::StrCat("line ", out.lines, ": window ", w.key, " published after FINAL: ", line));
    }
    if (w.state == "ON_TIME" && !on_time.insert(w.key).second) {
      out.errors.push_back(
          absl::StrCat("line ", out.lines, ": window ", w.key, " ON_TIME again: ", line));
    }
    if (w.state == "FINAL") {
      finished.insert(w.key);
      out.finals.push_back(w.normalized);
      ++out.finals_per_key[w.key];
    }
  }
  std::sort(out.finals.begin(), out.finals.end());
  return out;
}

std::vector<std::string> SortedLines(const fs::path& p) {
  std::vector<std::string> lines = ReadLines(p);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// Lines of sorted `a` not in sorted `b` (multiset difference), the first `max`.
std::string Missing(const std::vector<std::string>& a, const std::vector<std::string>& b,
                    size_t max = 10) {
  std::vector<std::string> d;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(d));
  std::string s = absl::StrCat(d.size(), " line(s)");
  for (size_t i = 0; i < d.size() && i < max; ++i) absl::StrAppend(&s, "\n    ", d[i]);
  return s;
}

// A metric's value in Prometheus text (`name{labels} value`); -1 if absent.
int64_t Metric(const std::string& text, const std::string& name) {
  const std::regex re("(^|\n)" + name + R"((\{[^}]*\})? ([0-9]+))");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stoll(m[3].str());
}

constexpr char kSourceReady[] = "stopping at end offsets";
// The runtime's line at the end of a restore (sources reopened, sinks recovered).
constexpr char kRestored[] = R"(restored checkpoint ([0-9]+) \(epoch)";

TEST(KillLoopTest, RandomKillsConvergeToTheUninterruptedResult) {
  const auto test_start = Clock::now();
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const fs::path& dir = tmp.path();

  // 1. The broker outlives every job process.
  Child broker({Binary(), "broker", "--port", "0", "--topic", "purchases", "--partitions",
                std::to_string(kPartitions)},
               dir / "broker.log");
  ASSERT_TRUE(broker.started());
  const std::string bootstrap = broker.WaitFor(R"(listening on (\S+))", milliseconds(20000));
  ASSERT_FALSE(bootstrap.empty()) << "broker did not start:\n" << broker.Log();

  // 2. The stream.
  const Stream stream = Generate();
  const int64_t total = static_cast<int64_t>(stream.messages.size());
  {
    absl::Status st = ProduceLines(bootstrap, "purchases", stream.messages, 60000);
    ASSERT_TRUE(st.ok()) << st;
  }
  std::printf(
      "kill loop: %lld messages (%d events, %d retries, %d conflicting copies, %d late) "
      "produced after %lld ms\n",
      static_cast<long long>(total), stream.events, stream.duplicates, stream.conflicts,
      stream.late, static_cast<long long>(MsSince(test_start)));

  // 3. The same job in two directories (outputs resolve against the job file).
  const fs::path ref = dir / "reference", loop = dir / "loop";
  for (const fs::path& d : {ref, loop}) {
    fs::create_directories(d);
    std::ofstream(d / "job.yaml") << JobYaml(bootstrap);
  }

  // 4. The reference: one uninterrupted run. How long it takes from the
  // source being ready to its end bounds the kill delays below.
  int64_t ref_ms = 0;
  {
    Child run(RunArgs(ref, true), ref / "run.log");
    ASSERT_TRUE(run.started());
    ASSERT_FALSE(run.WaitFor(kSourceReady, milliseconds(30000)).empty()) << run.Log();
    const auto ready = Clock::now();
    ASSERT_TRUE(run.WaitUntil(Clock::now() + milliseconds(60000)))
        << "reference run did not finish in 60 s:\n"
        << run.Log();
    ref_ms = MsSince(ready);
    ASSERT_EQ(run.ExitCode(), 0) << run.Log();
    const std::string metrics = run.Log();
    EXPECT_EQ(Metric(metrics, "dedup_passed_total"), stream.events) << metrics;
    EXPECT_EQ(Metric(metrics, "dedup_duplicates_total"), stream.duplicates) << metrics;
    EXPECT_EQ(Metric(metrics, "dedup_conflicts_total"), stream.conflicts) << metrics;
    EXPECT_EQ(Metric(metrics, "records_in_total"), total) << metrics;
  }
  const WindowOutput want = ReadWindowOutput(ref / "out/revenue.jsonl");
  EXPECT_THAT(want.errors, ::testing::IsEmpty());
  ASSERT_GT(want.finals.size(), 200u);
  const std::vector<std::string> want_conflicts = SortedLines(ref / "out/conflicts.jsonl");
  EXPECT_EQ(want_conflicts.size(), static_cast<size_t>(stream.conflicts));
  // Nothing may be too late in this stream, else results would depend on timing.
  EXPECT_THAT(ReadLines(ref / "out/too_late.jsonl"), ::testing::IsEmpty());
  EXPECT_THAT(ReadLines(ref / "out/dedup_too_late.jsonl"), ::testing::IsEmpty());
  EXPECT_THAT(ReadLines(ref / "out/invalid.jsonl"), ::testing::IsEmpty());
  {
    int64_t orders = 0;
    static const std::regex orders_re(R"re("orders":([0-9]+))re");
    for (const std::string& l : want.finals) {
      std::smatch m;
      if (std::regex_search(l, m, orders_re)) orders += std::stoll(m[1].str());
    }
    EXPECT_EQ(orders, stream.events) << "the FINAL results do not count every event once";
  }
  ASSERT_FALSE(::testing::Test::HasFailure());

  // 5. The kill loop: same data dir, SIGKILL at a random moment, kKills times.
  std::mt19937 rng(4);
  auto uniform = [&](int64_t lo, int64_t hi) {  // [lo, hi]
    return hi <= lo ? lo : lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1));
  };
  int kills = 0, runs = 0, startup_kills = 0, restores = 0;
  bool finished_early = false;
  std::set<int64_t> restored_ids;
  std::string delays;
  // Input records per ms: the reference's, or faster if a run of the loop was.
  double rate = static_cast<double>(total) / std::max<int64_t>(1, ref_ms);
  const auto loop_start = Clock::now();
  while (kills < kKills) {
    const Progress before = ReadProgress(loop / "data");
    const double done = static_cast<double>(before.records) / static_cast<double>(total);
    const fs::path log = loop / absl::StrFormat("run-%02d.log", runs++);
    Child run(RunArgs(loop, false), log);
    ASSERT_TRUE(run.started());
    Clock::time_point kill_at;
    std::optional<Clock::time_point> ready_at;
    if (done < kPhase && rng() % 5 == 0) {
      // During startup (process start, state open, Kafka metadata, restore).
      const int64_t d = uniform(0, 300);
      kill_at = run.started_at() + milliseconds(d);
      ++startup_kills;
      absl::StrAppend(&delays, " s", d);
    } else {
      // After the run is ready: source opened, and the newest checkpoint
      // restored if there is one.
      const std::string got =
          run.WaitFor(before.checkpoint >= 0 ? kRestored : kSourceReady, milliseconds(30000));
      ASSERT_FALSE(got.empty()) << "run " << runs - 1 << " not ready after 30 s (exit code "
                                << run.ExitCode() << ", newest checkpoint " << before.checkpoint
                                << "):\n"
                                << run.Log();
      const auto ready = Clock::now();
      if (before.checkpoint >= 0) {
        EXPECT_EQ(std::stoll(got), before.checkpoint)
            << "run " << runs - 1 << " did not restore the newest checkpoint";
      }
      // Never long enough to finish the rest of the input at the fastest
      // rate seen so far (a lower bound of the real rate, hence the margin),
      // and once kPhase of it is checkpointed, short: no more progress
      // before the last kill.
      const double remaining_ms = static_cast<double>(total - before.records) / rate;
      const int64_t cap = std::min<int64_t>(600, static_cast<int64_t>(0.4 * remaining_ms));
      const int64_t d = done >= kPhase ? uniform(0, std::min<int64_t>(150, cap))
                                       : uniform(std::min<int64_t>(100, cap / 2), cap);
      kill_at = ready + milliseconds(d);
      ready_at = ready;
      absl::StrAppend(&delays, " ", d);
    }
    if (run.WaitUntil(kill_at)) {
      ASSERT_EQ(run.ExitCode(), 0) << "run " << runs - 1 << " failed:\n" << run.Log();
      finished_early = true;
      break;
    }
    ASSERT_EQ(run.Stop(SIGKILL), 128 + SIGKILL) << run.Log();
    ++kills;
    if (ready_at.has_value()) {  // records per ms, a lower bound of this run's rate
      const Progress after = ReadProgress(loop / "data");
      const int64_t ms = std::max<int64_t>(1, MsSince(*ready_at));
      rate = std::max(rate, static_cast<double>(after.records - before.records) / ms);
    }
    std::smatch m;
    const std::string text = run.Log();
    if (std::regex_search(text, m, std::regex(kRestored))) {
      ++restores;
      restored_ids.insert(std::stoll(m[1].str()));
    }
  }
  const Progress before_last = ReadProgress(loop / "data");
  // Then to completion.
  {
    const fs::path log = loop / absl::StrFormat("run-%02d.log", runs++);
    Child run(RunArgs(loop, false), log);
    ASSERT_TRUE(run.started());
    ASSERT_TRUE(run.WaitUntil(Clock::now() + milliseconds(60000)))
        << "the last run did not finish in 60 s:\n"
        << run.Log();
    ASSERT_EQ(run.ExitCode(), 0) << run.Log();
    std::smatch m;
    const std::string text = run.Log();
    if (std::regex_search(text, m, std::regex(kRestored))) {
      ++restores;
      restored_ids.insert(std::stoll(m[1].str()));
    }
  }
  std::printf(
      "kill loop: %d restarts (%d SIGKILLs, %d of them during startup; %d runs restored a "
      "checkpoint, %zu distinct checkpoints; the last run resumed at %lld of %lld records); "
      "reference run %lld ms after ready, fastest rate %.0f records/s, kill loop %lld ms\n"
      "kill loop: delays (ms after ready; sN: after start):%s\n",
      runs - 1, kills, startup_kills, restores, restored_ids.size(),
      static_cast<long long>(before_last.records), static_cast<long long>(total),
      static_cast<long long>(ref_ms), rate * 1000, static_cast<long long>(MsSince(loop_start)),
      delays.c_str());
  ::testing::Test::RecordProperty("restarts", runs - 1);
  ::testing::Test::RecordProperty("kills", kills);
  EXPECT_FALSE(finished_early) << "the job finished after " << kills << " kills";
  EXPECT_GE(kills, kKills);
  // Runs made progress and later runs resumed from it (else the loop only
  // tested restarts from scratch). Typically 5-8 distinct checkpoints are
  // restored on a debug build, 2-3 on a release build (faster runs checkpoint
  // more of the input at once, so fewer steps stay below kPhase).
  EXPECT_GE(restored_ids.size(), 1u);

  // 6. Same FINAL results and conflicts; the revision contract held throughout.
  const WindowOutput got = ReadWindowOutput(loop / "out/revenue.jsonl");
  EXPECT_THAT(got.errors, ::testing::IsEmpty());
  EXPECT_GE(got.max_epoch, 1) << "no revision carries the epoch of a restarted run";
  for (const auto& [key, n] : got.finals_per_key) {
    EXPECT_EQ(n, 1) << "window " << key << " has " << n << " FINAL results";
  }
  EXPECT_TRUE(got.finals == want.finals)
      << "FINAL results differ from the uninterrupted run (" << got.finals.size() << " vs "
      << want.finals.size()
      << " lines)\n  only after the kills: " << Missing(got.finals, want.finals)
      << "\n  only in the reference: " << Missing(want.finals, got.finals);
  const std::vector<std::string> got_conflicts = SortedLines(loop / "out/conflicts.jsonl");
  EXPECT_TRUE(got_conflicts == want_conflicts)
      << "conflicts differ from the uninterrupted run\n  only after the kills: "
      << Missing(got_conflicts, want_conflicts)
      << "\n  only in the reference: " << Missing(want_conflicts, got_conflicts);
  EXPECT_THAT(ReadLines(loop / "out/too_late.jsonl"), ::testing::IsEmpty());
  EXPECT_THAT(ReadLines(loop / "out/dedup_too_late.jsonl"), ::testing::IsEmpty());
  EXPECT_THAT(ReadLines(loop / "out/invalid.jsonl"), ::testing::IsEmpty());

  EXPECT_EQ(broker.Stop(SIGTERM), 0) << broker.Log();
  std::printf("kill loop: %d restarts, total %lld ms\n", runs - 1,
              static_cast<long long>(MsSince(test_start)));
}

}  // namespace
}  // namespace caravela
