#include "worker/testing/s3_server.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/checkpoint/s3_storage.h"
#include "worker/testing/local_port.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

std::string S3rverScript() {
  const char* env = std::getenv("CARAVELA_S3RVER");
  if (env != nullptr && *env != '\0') return env;
  return std::string(CARAVELA_SOURCE_DIR) + "/tests/s3/node_modules/s3rver/bin/s3rver.js";
}

}  // namespace

std::string S3Server::endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }

void S3Server::ExportEnvironment() const {
  setenv("AWS_ENDPOINT_URL_S3", endpoint().c_str(), 1);
  setenv("AWS_REGION", "us-east-1", 1);
  setenv("AWS_ACCESS_KEY_ID", kAccessKeyId, 1);
  setenv("AWS_SECRET_ACCESS_KEY", kSecretAccessKey, 1);
  setenv("CARAVELA_S3_PATH_STYLE", "true", 1);
  unsetenv("AWS_SESSION_TOKEN");
}

absl::StatusOr<std::unique_ptr<S3Server>> S3Server::Start() {
  const std::string script = S3rverScript();
  if (access(script.c_str(), R_OK) != 0 || std::system("command -v node > /dev/null 2>&1") != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("s3rver (", script, ") or node not found: run scripts/install-deps (npm ",
                     "ci in tests/s3), or set CARAVELA_S3RVER to s3rver's bin/s3rver.js"));
  }
  std::unique_ptr<S3Server> s(new S3Server());
  char tmpl[] = "/tmp/caravela-s3rver-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  s->dir_ = tmpl;
  ASSIGN_OR_RETURN(s->port_, FreeLoopbackPort());
  const std::string data = s->dir_ + "/data";
  const std::string log = s->dir_ + "/s3rver.log";
  const std::string port = std::to_string(s->port_);
  s->pid_ = fork();
  if (s->pid_ < 0) return absl::InternalError("fork failed");
  if (s->pid_ == 0) {
    FILE* f = std::freopen(log.c_str(), "a", stdout);
    (void)f;
    dup2(1, 2);
    // Dies with the test, and holds none of its descriptors (a death test's
    // pipe held open would keep its parent waiting).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    // s3rver's continuation tokens use a cipher OpenSSL 3 keeps in its
    // legacy provider.
    execlp("node", "node", "--openssl-legacy-provider", script.c_str(), "-d", data.c_str(), "-a",
           "127.0.0.1", "-p", port.c_str(), "--configure-bucket", kBucket, "-s",
           static_cast<char*>(nullptr));
    _exit(127);
  }
  S3Config config;
  config.bucket = kBucket;
  config.endpoint = s->endpoint();
  config.access_key_id = kAccessKeyId;
  config.secret_access_key = kSecretAccessKey;
  config.retries = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    absl::StatusOr<std::unique_ptr<CheckpointStorage>> probe = OpenS3Storage(config);
    if (probe.ok()) return s;
    int status = 0;
    if (waitpid(s->pid_, &status, WNOHANG) == s->pid_) {
      s->pid_ = -1;
      std::ifstream in(log);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      return absl::InternalError(absl::StrCat("s3rver exited at start: ", text.substr(0, 2000)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("s3rver did not answer on ", s->endpoint(),
                                                      " within 30 s: ", probe.status().message()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

S3Server::~S3Server() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (std::getenv("CARAVELA_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

}  // namespace caravela
