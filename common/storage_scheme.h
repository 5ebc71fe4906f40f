// Checkpoint-storage schemes: a URL scheme of spec.checkpoint.storage
// ("file", "s3") is one descriptor in its storage's own file under
// worker/checkpoint/ (file_storage.cc, s3_storage.cc), listed in
// worker/registry/builtin_kinds.cc. The job parser validates a URL through
// its scheme, and OpenCheckpointStorage opens it through its scheme.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace caravela {

class CheckpointStorage;  // worker/checkpoint/checkpoint_storage.h

class StorageScheme {
 public:
  virtual ~StorageScheme() = default;

  // The scheme: URLs are "<name>://...".
  virtual std::string_view name() const = 0;
  // The URL form, for messages: "s3://bucket/prefix".
  virtual std::string_view example() const = 0;
  // Whether `url` (which starts with "<name>://") is one of this scheme's at
  // all; a job spec with another is told the schemes' forms.
  virtual bool Matches(std::string_view url) const { return true; }
  // What is wrong with a matching URL, as far as the job spec can tell
  // (InvalidArgument with the message); OK if it may be opened.
  virtual absl::Status Validate(std::string_view url) const { return absl::OkStatus(); }
  // The local directory the URL names, for CheckAllowedPaths ("" if none).
  virtual std::string LocalPath(std::string_view url) const { return ""; }
  virtual absl::StatusOr<std::unique_ptr<CheckpointStorage>> Open(const std::string& url) const = 0;
};

}  // namespace caravela
