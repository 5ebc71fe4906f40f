#include "common/free_space.h"

#include <sys/statvfs.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace caravela {

namespace {

// `path`, or its nearest ancestor that exists (a file not created yet).
std::filesystem::path Existing(std::string_view path) {
  std::filesystem::path p(path);
  std::error_code ec;
  while (!p.empty() && !std::filesystem::exists(p, ec) && p.has_parent_path() &&
         p.parent_path() != p) {
    p = p.parent_path();
  }
  return p.empty() ? std::filesystem::path(".") : p;
}

}  // namespace

std::optional<uint64_t> FreeBytes(std::string_view path) {
  struct statvfs st {};
  if (statvfs(Existing(path).c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

std::string FreeSpaceNote(std::string_view path) {
  const std::filesystem::path at = Existing(path);
  const std::optional<uint64_t> free = FreeBytes(at.string());
  return absl::StrCat("; ", free.has_value() ? absl::StrCat(*free) : std::string("unknown"),
                      " bytes free on the file system of ", at.string(),
                      ": free space there and run the job again (it resumes from its last "
                      "complete checkpoint)");
}

}  // namespace caravela
