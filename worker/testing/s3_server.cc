#include "worker/testing/s3_server.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/record.h"
#include "worker/checkpoint/s3_storage.h"
#include "worker/testing/local_server.h"

namespace caravela {
namespace {

std::string S3rverScript() {
  const char* env = std::getenv("CARAVELA_S3RVER");
  if (env != nullptr && *env != '\0') return env;
  return std::string(CARAVELA_SOURCE_DIR) + "/tests/s3/node_modules/s3rver/bin/s3rver.js";
}

// s3rver writes an object's bytes, then its metadata (._S3rver_metadata.json,
// not atomically): a SIGKILL in between leaves an object S3 would never show
// (its PUT never completed), and a truncated metadata file fails every
// listing of its prefix with 500 InternalError for ever (seed 64 of the fault
// campaign). Before a start on old data, such objects are removed: the PUT
// never happened, as with S3. Returns how many.
int DropTornObjects(const std::string& data_dir) {
  constexpr std::string_view kObject = "._S3rver_object";
  std::error_code ec;
  std::vector<std::filesystem::path> torn;
  JsonDecoder decoder;
  Record record;
  for (auto it = std::filesystem::recursive_directory_iterator(data_dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_regular_file(ec) || !name.ends_with(kObject)) continue;
    std::string base = it->path().string();
    base.resize(base.size() - std::string_view("object").size());
    std::ifstream in(base + "metadata.json", std::ios::binary);
    const std::string metadata((std::istreambuf_iterator<char>(in)), {});
    if (!in.is_open() || !decoder.Decode(metadata, &record).ok()) torn.push_back(base);
  }
  for (const std::filesystem::path& base : torn) {
    for (const char* part : {"object", "object.md5", "metadata.json"}) {
      std::filesystem::remove(base.string() + part, ec);
    }
  }
  return static_cast<int>(torn.size());
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
  ASSIGN_OR_RETURN(s->dir_, MakeServerDir("s3rver"));
  ASSIGN_OR_RETURN(s->port_, FreeLoopbackPort());
  RETURN_IF_ERROR(s->StartAgain());
  return s;
}

absl::Status S3Server::StartAgain() {
  if (pid_ > 0) return absl::FailedPreconditionError("s3rver is running");
  const std::string log = dir_ + "/s3rver.log";
  if (const int torn = DropTornObjects(data_dir()); torn > 0) {
    std::fprintf(stderr, "s3rver: %d object(s) whose PUT the kill cut off removed\n", torn);
  }
  // s3rver's continuation tokens use a cipher OpenSSL 3 keeps in its legacy
  // provider.
  ASSIGN_OR_RETURN(pid_, SpawnServer({"node", "--openssl-legacy-provider", S3rverScript(), "-d",
                                      data_dir(), "-a", "127.0.0.1", "-p", std::to_string(port_),
                                      "--configure-bucket", kBucket, "-s"},
                                     log));
  S3Config config;
  config.bucket = kBucket;
  config.endpoint = endpoint();
  config.access_key_id = kAccessKeyId;
  config.secret_access_key = kSecretAccessKey;
  config.retries = 0;
  return WaitUntilServing(&pid_, "s3rver on " + endpoint(), dir_, log,
                          [&] { return OpenS3Storage(config).status(); });
}

void S3Server::Kill() { StopServer(&pid_, std::chrono::milliseconds(0)); }

S3Server::~S3Server() {
  Kill();
  RemoveServerDir(dir_);
}

}  // namespace caravela
