// A real S3-protocol server for tests: s3rver (npm, installed by
// scripts/install-deps into tests/s3/node_modules) on 127.0.0.1 at a free
// port, its data in a new temp directory, with bucket `caravela` created at
// start. Start() returns once the bucket answers a listing; the destructor
// kills the server and deletes the directory.
//
// ExportEnvironment() points this process (and the children it starts) at
// it: AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY (s3rver's S3RVER / S3RVER), path-style addressing.
// s3rver checks the access key id, not the secret.
//
// If node or s3rver is missing, Start() fails with a message naming
// scripts/install-deps: tests fail, they do not skip.
//
// For fault tests: Kill() and StartAgain() end the server and start it
// again on the same port and data (without the objects whose PUT the kill
// cut off: s3rver is not crash-safe, S3's PUTs are atomic); pid() is for
// SIGSTOP/SIGCONT.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace caravela {

class S3Server {
 public:
  static constexpr const char* kBucket = "caravela";
  static constexpr const char* kAccessKeyId = "S3RVER";
  static constexpr const char* kSecretAccessKey = "S3RVER";

  static absl::StatusOr<std::unique_ptr<S3Server>> Start();
  ~S3Server();
  S3Server(const S3Server&) = delete;
  S3Server& operator=(const S3Server&) = delete;

  std::string endpoint() const;  // http://127.0.0.1:<port>
  int port() const { return port_; }
  // Where s3rver keeps the objects (a directory per bucket).
  std::string data_dir() const { return dir_ + "/data"; }
  pid_t pid() const { return pid_; }
  void ExportEnvironment() const;

  // SIGKILL, as a crashed server (idempotent).
  void Kill();
  // Starts the server again on the same port and data; returns once the
  // bucket answers.
  absl::Status StartAgain();

 private:
  S3Server() = default;
  std::string dir_;  // temp dir: the log and data/
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace caravela
