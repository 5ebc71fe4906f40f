// S3Storage: CheckpointStorage on an S3 bucket (AWS S3 or an S3-compatible
// store: MinIO, Ceph, s3rver), for `checkpoint.storage: s3://bucket/prefix`.
//
// Key "a/b/c" is the object "<prefix>/a/b/c" of the bucket. Requests are
// signed with AWS Signature V4 by libcurl (CURLOPT_AWS_SIGV4; no signer of
// our own), payloads sent as UNSIGNED-PAYLOAD (integrity: the transport's
// TLS, and the checkpoint manager's XXH3 of every file, checked at restore).
//
// Configuration, none of it in the job YAML (S3ConfigFromEnvironment):
//   * endpoint: AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else
//     https://s3.<region>.amazonaws.com;
//   * region: AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1;
//   * credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and
//     AWS_SESSION_TOKEN), else the shared credentials file
//     (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials; profile
//     AWS_PROFILE, else "default");
//   * addressing: CARAVELA_S3_PATH_STYLE=true|false (default: path style,
//     http://host/bucket/key, with a custom endpoint; virtual-hosted,
//     https://bucket.host/key, on AWS).
//
// The contract (checkpoint_storage.h) on S3:
//   * a PUT is atomic: readers see the old object or the whole new one;
//   * objects above `multipart_threshold` go up as a multipart upload: parts
//     of `part_size` bytes, `parallel_parts` at a time, the object appearing
//     only when the upload completes; a failed upload is aborted, and one cut
//     short by a crash stays an invisible "incomplete upload" that
//     DeleteStaleTemporaries aborts (where the store lists them);
//   * connection errors, 500/502/503/504 and SlowDown are retried with
//     exponential backoff; errors name the s3:// URL, the key and S3's code.
// Threading: as CheckpointStorage (requests take a curl handle from a pool).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "worker/checkpoint/checkpoint_storage.h"

namespace caravela {

struct S3Config {
  std::string bucket;
  std::string prefix;  // object key prefix, no leading or trailing '/'; may be empty
  std::string endpoint;
  std::string region = "us-east-1";
  bool path_style = true;
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  size_t multipart_threshold = size_t{16} << 20;
  size_t part_size = size_t{8} << 20;  // S3's minimum is 5 MiB (but the last part)
  int parallel_parts = 4;
  int list_page_size = 1000;  // keys per listing request (S3's maximum)
  int retries = 5;
  int64_t backoff_ms = 100;
};

// Parses "s3://bucket[/prefix]" (InvalidArgument naming the URL: no bucket,
// a bad bucket name) and fills the rest from the environment as above
// (InvalidArgument when no credentials are found, saying where it looked).
absl::StatusOr<S3Config> S3ConfigFromEnvironment(const std::string& url);

// Opens the bucket and checks it is reachable with these credentials (a
// one-key listing): Unavailable naming the endpoint when it cannot be
// reached, PermissionDenied / NotFound with S3's code otherwise.
absl::StatusOr<std::unique_ptr<CheckpointStorage>> OpenS3Storage(const S3Config& config);

// Bytes and objects S3 storages of this process have sent (PUT bodies and
// parts), for tests and benchmarks.
struct S3Traffic {
  int64_t objects_written = 0;
  int64_t bytes_written = 0;
  int64_t multipart_uploads = 0;
};
S3Traffic S3TrafficSoFar();

}  // namespace caravela
