// The coordinator as users run it (SPEC §8 "Services"): a real `caravela
// coordinator` process on loopback and the CLI (`caravela submit`, `jobs`,
// `job`, `cancel`) as separate processes. Jobs survive a SIGKILL of the
// coordinator; invalid jobs print every error with its YAML path (exit 2);
// with a token, calls without it are refused (exit 3).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tests/child_process.h"
#include "tests/test_util.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using milliseconds = std::chrono::milliseconds;

// Starts a coordinator on `data` and returns its gRPC address ("" if it
// did not print one).
std::string StartCoordinator(std::unique_ptr<ChildProcess>* c, const fs::path& dir,
                             const std::string& extra = "", const std::string& listen = "0") {
  std::vector<std::string> argv = {
      CARAVELA_BINARY, "coordinator",           "--listen", "127.0.0.1:" + listen,
      "--data-dir",    (dir / "data").string(), "--http",   "127.0.0.1:0"};
  if (!extra.empty()) {
    argv.push_back("--token-file");
    argv.push_back(extra);
  }
  *c = std::make_unique<ChildProcess>(argv, dir / "coordinator.log");
  return (*c)->WaitFor(R"(grpc=(\S+))", milliseconds(20000));
}

constexpr char kJob[] = R"(apiVersion: caravela/v1
kind: Job
metadata: {name: revenue}
spec:
  sources:
    - name: purchases
      kafka: {topic: purchases}
      key: [user_id]
      event_time: {field: ts, format: iso8601}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
  sinks:
    - {from: unique, stdout: {}}
)";

TEST(CoordinatorProcessTest, SubmitListCancelAndSurviveAKill) {
  TempDir tmp("coordinator", "CARAVELA_KEEP_TEST_DIRS", "coordinator test");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "job.yaml") << kJob;
  std::unique_ptr<ChildProcess> coordinator;
  const std::string address = StartCoordinator(&coordinator, dir);
  ASSERT_FALSE(address.empty()) << coordinator->Log();
  const std::string at = " --coordinator " + address;
  // `caravela health` (the container health check): SERVING, exit 0; a
  // port nobody serves: exit 1.
  const CliResult health = Cli("health " + address, dir);
  EXPECT_EQ(health.code, 0) << health.out;
  EXPECT_EQ(health.out, address + " SERVING\n");
  EXPECT_EQ(Cli("health 127.0.0.1:1", dir).code, 1);

  CliResult submit = Cli("submit " + (dir / "job.yaml").string() + " --parallelism 3" + at, dir);
  ASSERT_EQ(submit.code, 0) << submit.out;
  EXPECT_EQ(submit.out, "revenue-1\n");
  // One active job per name: a second is refused with the reason.
  CliResult twin = Cli("submit " + (dir / "job.yaml").string() + at, dir);
  EXPECT_EQ(twin.code, 2) << twin.out;
  EXPECT_THAT(twin.out, HasSubstr("metadata.name"));
  EXPECT_THAT(twin.out, HasSubstr("revenue-1"));
  CliResult canceled = Cli("cancel revenue-1" + at, dir);
  ASSERT_EQ(canceled.code, 0) << canceled.out;
  EXPECT_THAT(canceled.out, HasSubstr("CANCELED"));
  ASSERT_EQ(Cli("submit " + (dir / "job.yaml").string() + " --parallelism 3" + at, dir).out,
            "revenue-2\n");

  // SIGKILL: what it answered was synced to its store.
  coordinator->Stop(SIGKILL);
  const std::string port = address.substr(address.rfind(':') + 1);
  const std::string again = StartCoordinator(&coordinator, dir, "", port);
  ASSERT_EQ(again, address) << coordinator->Log();
  CliResult jobs = Cli("jobs" + at, dir);
  ASSERT_EQ(jobs.code, 0) << jobs.out;
  EXPECT_THAT(jobs.out, HasSubstr("revenue-1"));
  EXPECT_THAT(jobs.out, HasSubstr("CANCELED"));
  EXPECT_THAT(jobs.out, HasSubstr("revenue-2"));
  // No worker here: it waits for slots, saying so.
  CliResult one;
  for (int i = 0; i < 40; ++i) {  // the scheduler looks every 50 ms
    one = Cli("job revenue-2 --json" + at, dir);
    if (one.out.find("SCHEDULING") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_THAT(one.out, HasSubstr(R"("parallelism":3)"));
  EXPECT_THAT(one.out, HasSubstr(R"("state":"SCHEDULING")"));
  EXPECT_THAT(one.out, HasSubstr("waiting for workers"));
  ASSERT_EQ(Cli("cancel revenue-2" + at, dir).code, 0);
  EXPECT_EQ(Cli("submit " + (dir / "job.yaml").string() + at, dir).out, "revenue-3\n");

  CliResult missing = Cli("job revenue-9" + at, dir);
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.out, HasSubstr("no job revenue-9"));
  CliResult twice = Cli("cancel revenue-2" + at, dir);
  EXPECT_EQ(twice.code, 1);
  EXPECT_THAT(twice.out, HasSubstr("is CANCELED: it cannot go to CANCELED"));

  // An invalid job: every error with its YAML path, nothing stored.
  std::string bad = kJob;
  bad.replace(bad.find("retention: 1h"), 13, "retention: soon");
  bad.replace(bad.find("topic: purchases"), 16, "topic: 7");
  bad.replace(bad.find("{topic: 7}"), 10, "{topik: purchases}");
  std::ofstream(dir / "bad.yaml") << bad;
  CliResult invalid = Cli("submit " + (dir / "bad.yaml").string() + at, dir);
  EXPECT_EQ(invalid.code, 2) << invalid.out;
  EXPECT_THAT(invalid.out, HasSubstr("spec.sources[0].kafka"));
  EXPECT_THAT(invalid.out, HasSubstr("spec.operators[0].dedup.retention"));
  EXPECT_THAT(Cli("jobs" + at, dir).out, ::testing::Not(HasSubstr("revenue-4")));

  // A job above the limits is refused before it is sent (10 MB would fail
  // at the gRPC message limit), naming the limit; so is a parallelism
  // beyond any job's max_parallelism.
  std::ofstream(dir / "huge.yaml") << kJob << "# " << std::string(10 << 20, 'x') << "\n";
  CliResult huge = Cli("submit " + (dir / "huge.yaml").string() + at, dir);
  EXPECT_EQ(huge.code, 2) << huge.out;
  EXPECT_THAT(huge.out, HasSubstr("a job's YAML may have at most 1048576 (1 MiB)"));
  CliResult wide = Cli("submit " + (dir / "job.yaml").string() + " --parallelism 40000" + at, dir);
  EXPECT_EQ(wide.code, 2) << wide.out;
  CliResult above_max =
      Cli("submit " + (dir / "job.yaml").string() + " --parallelism 200" + at, dir);
  EXPECT_EQ(above_max.code, 2) << above_max.out;
  EXPECT_THAT(above_max.out, HasSubstr("spec.max_parallelism (128), got 200"));

  // Nobody there: a clear error.
  coordinator->Stop(SIGTERM);
  CliResult down = Cli("jobs" + at, dir);
  EXPECT_EQ(down.code, 1);
  EXPECT_THAT(down.out, HasSubstr("cannot reach the coordinator at " + address));
}

// An empty token file must not turn auth off: every server command refuses
// to start, naming the file, and so does a client (exit 2 each).
TEST(CoordinatorProcessTest, AnEmptyTokenFileRefusesToStart) {
  TempDir tmp("coordinator_empty_token", "CARAVELA_KEEP_TEST_DIRS", "empty token test");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "empty") << " \n\t\n";
  const std::string empty = (dir / "empty").string();
  const std::string data = " --data-dir " + (dir / "data").string();
  for (const std::string& command :
       {"coordinator --listen 127.0.0.1:0" + data, "worker --coordinator 127.0.0.1:1" + data,
        "local --workers 0" + data, std::string("jobs --coordinator 127.0.0.1:1")}) {
    const CliResult r = Cli(command + " --token-file " + empty, dir);
    EXPECT_EQ(r.code, 2) << command << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("--token-file " + empty + " is empty")) << command;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("auth=off"))) << command;
  }
  // The variable's form of the flag; and the retired $CARAVELA_TOKEN (the
  // token itself) is refused rather than ignored.
  ::setenv("CARAVELA_TOKEN_FILE", empty.c_str(), 1);
  const CliResult by_env = Cli("coordinator --listen 127.0.0.1:0" + data, dir);
  ::unsetenv("CARAVELA_TOKEN_FILE");
  EXPECT_EQ(by_env.code, 2) << by_env.out;
  EXPECT_THAT(by_env.out, HasSubstr("--token-file " + empty + " is empty"));
  ::setenv("CARAVELA_TOKEN", "s3cret", 1);
  const CliResult retired = Cli("coordinator --listen 127.0.0.1:0" + data, dir);
  ::unsetenv("CARAVELA_TOKEN");
  EXPECT_EQ(retired.code, 2) << retired.out;
  EXPECT_THAT(retired.out, HasSubstr("$CARAVELA_TOKEN is not read"));
}

TEST(CoordinatorProcessTest, TokenIsRequiredWhenConfigured) {
  TempDir tmp("coordinator_auth", "CARAVELA_KEEP_TEST_DIRS", "coordinator auth test");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "job.yaml") << kJob;
  std::ofstream(dir / "token") << "s3cret\n";
  std::ofstream(dir / "wrong") << "guess\n";
  std::unique_ptr<ChildProcess> coordinator;
  const std::string address = StartCoordinator(&coordinator, dir, (dir / "token").string());
  ASSERT_FALSE(address.empty()) << coordinator->Log();
  EXPECT_THAT(coordinator->Log(), HasSubstr("auth=token"));
  const std::string at = " --coordinator " + address;
  CliResult none = Cli("jobs" + at, dir);
  EXPECT_EQ(none.code, 3) << none.out;
  EXPECT_THAT(none.out, HasSubstr("bearer token"));
  EXPECT_EQ(Cli("submit " + (dir / "job.yaml").string() + " --token-file " +
                    (dir / "wrong").string() + at,
                dir)
                .code,
            3);
  CliResult ok = Cli(
      "submit " + (dir / "job.yaml").string() + " --token-file " + (dir / "token").string() + at,
      dir);
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_EQ(ok.out, "revenue-1\n");

  // HTTP: the same token, 401 before anything else; health stays open for
  // probes.
  const std::string http = coordinator->WaitFor(R"(http=(\S+))", milliseconds(1000));
  ASSERT_FALSE(http.empty()) << coordinator->Log();
  httplib::Client client("http://" + http);
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  EXPECT_THAT(health->body, HasSubstr("SERVING"));
  auto anonymous = client.Get("/api/v1/jobs");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_THAT(anonymous->body, ::testing::Not(HasSubstr("revenue-1")));
  auto wrong = client.Get("/api/v1/jobs", {{"Authorization", "Bearer guess"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  const httplib::Headers auth = {{"Authorization", "Bearer s3cret"}};
  auto jobs = client.Get("/api/v1/jobs", auth);
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200);
  EXPECT_THAT(jobs->body, HasSubstr(R"("id":"revenue-1")"));
  EXPECT_EQ(jobs->get_header_value("Content-Type"), "application/json");
  auto one = client.Get("/api/v1/jobs/revenue-1", auth);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_THAT(one->body, HasSubstr(R"("name":"revenue")"));
  auto missing = client.Get("/api/v1/jobs/revenue-9", auth);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_THAT(missing->body, HasSubstr("no job revenue-9"));
  auto workers = client.Get("/api/v1/workers", auth);
  ASSERT_TRUE(workers);
  EXPECT_EQ(workers->status, 200);
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// TLS from certificate files: a client or worker that trusts the
// coordinator's certificate gets through; a plaintext one does not.
TEST(CoordinatorProcessTest, TlsWithCertificateFiles) {
  TempDir tmp("coordinator_tls", "CARAVELA_KEEP_TEST_DIRS", "coordinator TLS test");
  const fs::path& dir = tmp.path();
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  ASSERT_TRUE(MakeSelfSignedCertificate(dir)) << ReadFile(dir / "openssl.log");
  std::ofstream(dir / "job.yaml") << kJob;
  ChildProcess coordinator({CARAVELA_BINARY, "coordinator", "--listen", "127.0.0.1:0", "--data-dir",
                            (dir / "data").string(), "--tls-cert", cert, "--tls-key", key},
                           dir / "coordinator.log");
  const std::string address = coordinator.WaitFor(R"(grpc=(\S+))", milliseconds(20000));
  ASSERT_FALSE(address.empty()) << coordinator.Log();
  const std::string at = " --coordinator " + address;
  CliResult ok = Cli("submit " + (dir / "job.yaml").string() + " --tls-ca " + cert + at, dir);
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_EQ(ok.out, "revenue-1\n");
  CliResult plain = Cli("jobs" + at, dir);  // plaintext against a TLS server
  EXPECT_EQ(plain.code, 1) << plain.out;
  CliResult missing = Cli("jobs --tls-ca " + (dir / "nope.pem").string() + at, dir);
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.out, HasSubstr("cannot read the TLS CA file"));
  ChildProcess worker({CARAVELA_BINARY, "worker", "--coordinator", address, "--tls-ca", cert},
                      dir / "worker.log");
  EXPECT_FALSE(worker.WaitFor(R"(id=(worker-\S+))", milliseconds(20000)).empty()) << worker.Log();
  CliResult workers = Cli("workers --tls-ca " + cert + at, dir);
  EXPECT_EQ(workers.code, 0) << workers.out;
  EXPECT_THAT(workers.out, HasSubstr("ALIVE"));
}

// Workers that serve TLS stream exchange records to each other over TLS: a
// job with an exchange (one file-reading task -> dedup in 2 tasks) runs to
// its end on two TLS workers, and every distinct id comes out once.
TEST(CoordinatorProcessTest, ExchangeStreamsBetweenTlsWorkers) {
  TempDir tmp("worker_tls", "CARAVELA_KEEP_TEST_DIRS", "worker TLS test");
  const fs::path& dir = tmp.path();
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  ASSERT_TRUE(MakeSelfSignedCertificate(dir)) << ReadFile(dir / "openssl.log");
  const fs::path shared = dir / "shared";
  fs::create_directories(shared);
  {
    std::ofstream in(shared / "in.jsonl");
    for (int i = 0; i < 3000; ++i) {  // 1000 ids, each three times
      in << R"({"event_id":"e)" << i % 1000 << R"(","ts":"2026-10-01T10:00:00Z"})"
         << "\n";
    }
  }
  std::ofstream(dir / "job.yaml") << R"(apiVersion: caravela/v1
kind: Job
metadata: {name: tls-exchange}
spec:
  parallelism: 2
  sources:
    - name: purchases
      file: {path: in.jsonl}
      event_time: {field: ts, format: iso8601}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
  sinks:
    - {from: unique, file: {path: out/unique.jsonl}}
)";
  ChildProcess coordinator({CARAVELA_BINARY, "coordinator", "--listen", "127.0.0.1:0", "--data-dir",
                            (dir / "data").string(), "--tls-cert", cert, "--tls-key", key},
                           dir / "coordinator.log");
  const std::string address = coordinator.WaitFor(R"(grpc=(\S+))", milliseconds(20000));
  ASSERT_FALSE(address.empty()) << coordinator.Log();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{CARAVELA_BINARY, "worker", "--coordinator", address, "--slots",
                                 "2", "--data-dir", (dir / absl::StrCat("w", i)).string(),
                                 "--shared-dir", shared.string(), "--tls-ca", cert, "--tls-cert",
                                 cert, "--tls-key", key},
        dir / absl::StrCat("worker-", i, ".log")));
    ASSERT_FALSE(workers.back()->WaitFor(R"(id=(worker-\S+))", milliseconds(20000)).empty())
        << workers.back()->Log();
  }
  const std::string at = " --tls-ca " + cert + " --coordinator " + address;
  CliResult submitted = Cli("submit " + (dir / "job.yaml").string() + at, dir);
  ASSERT_EQ(submitted.code, 0) << submitted.out;
  const std::string id(absl::StripAsciiWhitespace(submitted.out));
  const std::string state = WaitForJobEnd(id, at, dir, std::chrono::seconds(60));
  ASSERT_THAT(state, HasSubstr("FINISHED")) << state << workers[0]->Log() << workers[1]->Log();
  // Tasks on both workers: the records crossed between them.
  EXPECT_THAT(state, HasSubstr("worker-1"));
  EXPECT_THAT(state, HasSubstr("worker-2"));
  std::set<std::string> ids;
  int lines = 0;
  for (const auto& f : fs::directory_iterator(shared / "out")) {
    const std::string name = f.path().filename().string();
    if (name.rfind("unique.", 0) != 0 || f.path().extension() != ".jsonl") continue;
    std::ifstream in(f.path());
    for (std::string line; std::getline(in, line);) {
      ++lines;
      const size_t at_id = line.find("\"event_id\":\"");
      if (at_id != std::string::npos)
        ids.insert(line.substr(at_id + 12, line.find('"', at_id + 12) - at_id - 12));
    }
  }
  EXPECT_EQ(lines, 1000);
  EXPECT_EQ(ids.size(), 1000u);
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// Service options from a TOML file (--config), the environment
// (CARAVELA_<FLAG>) and the command line, in rising precedence; unknown keys
// and bad values are refused naming them; the shipped config/*.toml files
// are valid.
TEST(CoordinatorProcessTest, ConfigFileEnvironmentAndFlags) {
  TempDir tmp("config", "CARAVELA_KEEP_TEST_DIRS", "config test");
  const fs::path& dir = tmp.path();
  // The shipped coordinator config, its example paths replaced by flags.
  ChildProcess coordinator(
      {CARAVELA_BINARY, "coordinator", "--config",
       std::string(CARAVELA_SOURCE_DIR) + "/config/coordinator.toml", "--listen", "127.0.0.1:0",
       "--http", "127.0.0.1:0", "--data-dir", (dir / "coordinator").string(), "--storage",
       "file://" + (dir / "checkpoints").string(), "--allow-path", dir.string()},
      dir / "coordinator.log");
  const std::string address = coordinator.WaitFor(R"(grpc=(\S+))", milliseconds(20000));
  ASSERT_FALSE(address.empty()) << coordinator.Log();
  auto slots = [&](const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {CARAVELA_BINARY, "worker", "--config",
                                     (dir / "worker.toml").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ChildProcess worker(argv, dir / (name + ".log"));
    return worker.WaitFor(R"(slots=(\d+))", milliseconds(20000));
  };
  std::ofstream(dir / "worker.toml")
      << "[worker]\ncoordinator = \"" << address << "\"\nslots = 3\ndata-dir = \""
      << (dir / "worker").string() << "\"\n";
  EXPECT_EQ(slots("from-file", {}), "3");
  ::setenv("CARAVELA_SLOTS", "5", 1);
  EXPECT_EQ(slots("env-over-file", {}), "5");
  EXPECT_EQ(slots("flag-over-env", {"--slots", "7"}), "7");
  ::unsetenv("CARAVELA_SLOTS");
  // The shipped worker config: every key valid (the example address and
  // paths replaced by flags).
  {
    ChildProcess worker({CARAVELA_BINARY, "worker", "--config",
                         std::string(CARAVELA_SOURCE_DIR) + "/config/worker.toml", "--coordinator",
                         address, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir",
                         (dir / "shipped").string()},
                        dir / "shipped.log");
    EXPECT_EQ(worker.WaitFor(R"(slots=(\d+))", milliseconds(20000)), "2") << worker.Log();
  }
  std::ofstream(dir / "worker.toml", std::ios::app) << "slotz = 4\n";
  const CliResult unknown = Cli("worker --config " + (dir / "worker.toml").string(), dir);
  EXPECT_NE(unknown.code, 0) << unknown.out;
  EXPECT_THAT(unknown.out, HasSubstr("slotz"));
  std::ofstream(dir / "bad.toml") << "[worker]\nslots = 0\n";
  const CliResult bad = Cli("worker --config " + (dir / "bad.toml").string(), dir);
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("--slots: Value 0 not in range 1 to 4096"));
}

}  // namespace
}  // namespace caravela
