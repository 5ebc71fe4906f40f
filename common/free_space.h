// What a "no space left on device" error should tell the user: how much
// space the file system holding a path has left, and what to do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace caravela {

// Bytes available to unprivileged writers on the file system holding `path`
// (or its nearest existing ancestor); nullopt if statvfs fails.
std::optional<uint64_t> FreeBytes(std::string_view path);

// "; N bytes free on the file system of DIR: free space there and run the
// job again (it resumes from its last complete checkpoint)".
std::string FreeSpaceNote(std::string_view path);

}  // namespace caravela
