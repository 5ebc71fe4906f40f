#include "worker/state/unsynced_env.h"

#include <memory>
#include <string>
#include <utility>

#include "rocksdb/file_system.h"

namespace caravela {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;

class UnsyncedFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  using FSWritableFileOwnerWrapper::FSWritableFileOwnerWrapper;
  IOStatus Sync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return IOStatus::OK();
  }
  IOStatus Fsync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return IOStatus::OK();
  }
  IOStatus RangeSync(uint64_t /*offset*/, uint64_t /*nbytes*/, const IOOptions& /*options*/,
                     IODebugContext* /*dbg*/) override {
    return IOStatus::OK();
  }
  bool IsSyncThreadSafe() const override { return true; }
};

class UnsyncedDirectory : public rocksdb::FSDirectoryWrapper {
 public:
  using FSDirectoryWrapper::FSDirectoryWrapper;
  IOStatus Fsync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return IOStatus::OK();
  }
  IOStatus FsyncWithDirOptions(const IOOptions& /*options*/, IODebugContext* /*dbg*/,
                               const rocksdb::DirFsyncOptions& /*dir_fsync_options*/) override {
    return IOStatus::OK();
  }
};

class UnsyncedFileSystem : public rocksdb::FileSystemWrapper {
 public:
  using FileSystemWrapper::FileSystemWrapper;
  const char* Name() const override { return "CaravelaUnsynced"; }

  IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& options,
                           std::unique_ptr<rocksdb::FSWritableFile>* result,
                           IODebugContext* dbg) override {
    return Wrap(target()->NewWritableFile(fname, options, result, dbg), result);
  }
  IOStatus ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& options,
                              std::unique_ptr<rocksdb::FSWritableFile>* result,
                              IODebugContext* dbg) override {
    return Wrap(target()->ReopenWritableFile(fname, options, result, dbg), result);
  }
  IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                             const rocksdb::FileOptions& options,
                             std::unique_ptr<rocksdb::FSWritableFile>* result,
                             IODebugContext* dbg) override {
    return Wrap(target()->ReuseWritableFile(fname, old_fname, options, result, dbg), result);
  }
  IOStatus NewDirectory(const std::string& name, const IOOptions& io_opts,
                        std::unique_ptr<rocksdb::FSDirectory>* result,
                        IODebugContext* dbg) override {
    IOStatus s = target()->NewDirectory(name, io_opts, result, dbg);
    if (s.ok()) *result = std::make_unique<UnsyncedDirectory>(std::move(*result));
    return s;
  }

 private:
  static IOStatus Wrap(IOStatus s, std::unique_ptr<rocksdb::FSWritableFile>* result) {
    if (s.ok()) *result = std::make_unique<UnsyncedFile>(std::move(*result));
    return s;
  }
};

}  // namespace

rocksdb::Env* UnsyncedEnv() {
  static rocksdb::Env* env =
      rocksdb::NewCompositeEnv(std::make_shared<UnsyncedFileSystem>(rocksdb::FileSystem::Default()))
          .release();
  return env;
}

}  // namespace caravela
