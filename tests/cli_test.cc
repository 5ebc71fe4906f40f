// The `caravela` binary as a user runs it: help, validation of the example
// jobs, the standalone broker with a real Kafka client (kcat), and a Kafka job
// that runs until SIGTERM and shuts down cleanly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace {

using ::testing::HasSubstr;

struct Result {
  int exit_code;
  std::string out;
};

// Runs a shell command; returns its exit code and stdout.
Result Shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  return {WEXITSTATUS(rc), out};
}

Result RunCli(const std::string& args) {
  return Shell(std::string(CARAVELA_BINARY) + " " + args + " 2>&1");
}

bool HaveKcat() { return std::system("command -v kcat > /dev/null 2>&1") == 0; }

// A child process with its stdout+stderr in a file.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const fs::path& log) : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::fopen(log.c_str(), "w");
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
      std::vector<char*> args;
      args.reserve(argv.size() + 1);
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Waits until the log matches `re`; returns the first capture group.
  std::string WaitFor(const std::string& re, int timeout_ms = 10000) {
    std::regex pattern(re);
    for (int waited = 0; waited < timeout_ms; waited += 20) {
      std::smatch m;
      std::string log = Log();
      if (std::regex_search(log, m, pattern)) return m.size() > 1 ? m[1].str() : m[0].str();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "";
  }
  // Sends `sig` and returns the exit status (-1 on timeout).
  int Stop(int sig, int timeout_ms = 15000) {
    kill(pid_, sig);
    for (int waited = 0; waited < timeout_ms; waited += 20) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  fs::path log_;
};

TEST(CliTest, HelpListsSubcommands) {
  Result r = RunCli("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* sub : {"run", "validate", "broker", "demo"}) EXPECT_THAT(r.out, HasSubstr(sub));
  Result bad = RunCli("frobnicate");
  EXPECT_NE(bad.exit_code, 0);
}

// config/examples/*.yaml (Kafka jobs) and config/examples/<name>/job.yaml (file
// jobs with data and expected output, run by golden_test).
TEST(CliTest, ExampleJobsValidate) {
  int checked = 0, in_dirs = 0;
  for (const auto& e : fs::directory_iterator(fs::path(CARAVELA_SOURCE_DIR) / "config/examples")) {
    fs::path job = e.path();
    if (e.is_directory()) {
      job /= "job.yaml";
      if (!fs::exists(job)) continue;
      ++in_dirs;
    } else if (job.extension() != ".yaml") {
      continue;
    }
    Result r = RunCli("validate " + job.string());
    EXPECT_EQ(r.exit_code, 0) << job << "\n" << r.out;
    ++checked;
  }
  EXPECT_GT(checked, in_dirs);  // at least one top-level .yaml
  EXPECT_GT(in_dirs, 0);
}

TEST(CliTest, BrokerServesRealKafkaClients) {
  if (!HaveKcat()) GTEST_SKIP() << "kcat not installed";
  caravela::TempDir tmp("cli-broker", "CARAVELA_KEEP_TEST_DIRS", "cli test");
  const fs::path dir = tmp.path();
  Child broker({CARAVELA_BINARY, "broker", "--partitions", "3", "--topic", "words"},
               dir / "broker.log");
  std::string bootstrap = broker.WaitFor(R"(listening on (\S+))");
  ASSERT_FALSE(bootstrap.empty()) << broker.Log();
  std::string produce =
      "printf 'one\\ntwo\\nthree\\n' | kcat -b " + bootstrap + " -t words -P -p 1 2>&1";
  ASSERT_EQ(std::system(produce.c_str()), 0);
  Result consumed =
      Shell("kcat -b " + bootstrap + " -C -t words -p 1 -o beginning -e -q 2>/dev/null");
  EXPECT_EQ(consumed.out, "one\ntwo\nthree\n");
  EXPECT_EQ(broker.Stop(SIGTERM), 0) << broker.Log();
}

TEST(CliTest, KafkaJobRunsUntilSigtermAndShutsDownCleanly) {
  if (!HaveKcat()) GTEST_SKIP() << "kcat not installed";
  caravela::TempDir tmp("cli-sigterm", "CARAVELA_KEEP_TEST_DIRS", "cli test");
  const fs::path dir = tmp.path();
  Child broker({CARAVELA_BINARY, "broker", "--partitions", "2", "--topic", "events"},
               dir / "broker.log");
  std::string bootstrap = broker.WaitFor(R"(listening on (\S+))");
  ASSERT_FALSE(bootstrap.empty()) << broker.Log();
  std::ofstream(dir / "job.yaml") << R"(apiVersion: caravela/v1
kind: Job
metadata: {name: sigterm}
spec:
  sources:
    - name: events
      kafka: {topic: events, bootstrap: ")"
                                  << bootstrap << R"("}
      event_time: {field: ts, format: epoch_ms}
  operators:
    - name: big
      filter: {from: events, where: "v > 10"}
  sinks:
    - {from: big, file: {path: out/big.jsonl}}
)";
  std::string produce =
      "printf '{\"ts\":1,\"v\":5}\\n{\"ts\":2,\"v\":50}\\n{\"ts\":3,\"v\":500}\\n' | kcat -b " +
      bootstrap + " -t events -P -p 0 2>&1";
  ASSERT_EQ(std::system(produce.c_str()), 0);
  Child job(
      {CARAVELA_BINARY, "run", (dir / "job.yaml").string(), "--data-dir", (dir / "data").string()},
      dir / "job.log");
  // The job keeps running (Kafka is unbounded) and writes the filtered records.
  std::string text;
  for (int i = 0; i < 500 && text.find("500") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream in(dir / "out/big.jsonl");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  EXPECT_EQ(text, "{\"ts\":2,\"v\":50}\n{\"ts\":3,\"v\":500}\n") << job.Log();
  EXPECT_EQ(job.Stop(SIGTERM), 0) << job.Log();
  EXPECT_THAT(job.Log(), HasSubstr("done."));
  fs::remove_all(dir);
}

// With checkpoints, a stopped Kafka job resumes where it stopped: output of
// the first run is kept, nothing is read twice, new records are processed.
TEST(CliTest, KafkaJobStoppedAndRestartedResumesFromItsCheckpoint) {
  if (!HaveKcat()) GTEST_SKIP() << "kcat not installed";
  caravela::TempDir tmp("cli-resume", "CARAVELA_KEEP_TEST_DIRS", "cli test");
  const fs::path dir = tmp.path();
  Child broker({CARAVELA_BINARY, "broker", "--partitions", "2", "--topic", "events"},
               dir / "broker.log");
  std::string bootstrap = broker.WaitFor(R"(listening on (\S+))");
  ASSERT_FALSE(bootstrap.empty()) << broker.Log();
  std::ofstream(dir / "job.yaml") << R"(apiVersion: caravela/v1
kind: Job
metadata: {name: resume}
spec:
  checkpoint: {interval: 200ms}
  sources:
    - name: events
      kafka: {topic: events, bootstrap: ")"
                                  << bootstrap << R"("}
      event_time: {field: ts, format: epoch_ms}
  operators:
    - name: big
      filter: {from: events, where: "v > 10"}
  sinks:
    - {from: big, file: {path: out/big.jsonl}}
)";
  auto produce = [&](const std::string& lines) {
    std::string cmd = "printf '" + lines + "' | kcat -b " + bootstrap + " -t events -P -p 0 2>&1";
    return std::system(cmd.c_str());
  };
  auto wait_for_output = [&](const std::string& want) {
    std::string text;
    for (int i = 0; i < 500 && text != want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::ifstream in(dir / "out/big.jsonl");
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    return text;
  };
  const std::vector<std::string> run = {CARAVELA_BINARY, "run", (dir / "job.yaml").string(),
                                        "--data-dir", (dir / "data").string()};
  ASSERT_EQ(produce("{\"ts\":1,\"v\":5}\\n{\"ts\":2,\"v\":50}\\n"), 0);
  {
    Child job(run, dir / "job1.log");
    // The file sink publishes at checkpoints.
    EXPECT_EQ(wait_for_output("{\"ts\":2,\"v\":50}\n"), "{\"ts\":2,\"v\":50}\n") << job.Log();
    EXPECT_EQ(job.Stop(SIGTERM), 0) << job.Log();
  }
  ASSERT_EQ(produce("{\"ts\":3,\"v\":500}\\n{\"ts\":4,\"v\":6}\\n"), 0);
  Child job(run, dir / "job2.log");
  EXPECT_EQ(wait_for_output("{\"ts\":2,\"v\":50}\n{\"ts\":3,\"v\":500}\n"),
            "{\"ts\":2,\"v\":50}\n{\"ts\":3,\"v\":500}\n")
      << job.Log();
  EXPECT_EQ(job.Stop(SIGTERM), 0) << job.Log();
  EXPECT_THAT(job.Log(), HasSubstr("restored checkpoint"));
  fs::remove_all(dir);
}

TEST(CliTest, DemoRunsTheExampleJobAndDrains) {
  caravela::TempDir tmp("cli-demo", "CARAVELA_KEEP_TEST_DIRS", "cli test");
  const fs::path dir = tmp.path();
  Result r =
      Shell("cd " + dir.string() + " && " + CARAVELA_BINARY + " demo " + CARAVELA_SOURCE_DIR +
            "/config/examples/hourly-revenue.yaml" + " --seconds 3 --events 1500 --quiet 2>&1");
  const std::string& out = r.out;
  EXPECT_EQ(r.exit_code, 0) << out;
  for (const char* state : {"\nON_TIME ", "\nLATE ", "\nFINAL "}) {
    EXPECT_THAT(out, HasSubstr(state)) << out;
  }
  EXPECT_THAT(out, HasSubstr("hourly results are FINAL"));
  EXPECT_THAT(out, testing::ContainsRegex("duplicates dropped: [1-9]"));
  EXPECT_THAT(out, testing::ContainsRegex("invalid: [1-9]"));
  fs::remove_all(dir);
}

}  // namespace
