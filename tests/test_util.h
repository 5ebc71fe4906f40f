// File and line helpers shared by the integration tests (header-only): a
// file's text or lines, the lines of a file sink's output files (the sink's
// file and its per-task part files), a fresh temp directory that removes
// itself, the multiset difference of sorted lines for failure messages, and
// SQL string literals.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace caravela {

// The whole file ("" if it cannot be read).
inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The file's lines, without their '\n' (none if it cannot be read).
inline std::vector<std::string> ReadLines(const std::filesystem::path& p) {
  std::vector<std::string> lines;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The files in `dir` (which must exist) whose name starts with `stem`, except
// pending ones and epoch fences (`.fence`, cluster jobs): a file sink's file
// and its per-task part files.
inline std::vector<std::filesystem::path> PartFiles(const std::filesystem::path& dir,
                                                    const std::string& stem) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(stem, 0) != 0 || name.find("pending") != std::string::npos ||
        e.path().extension() == ".fence") {
      continue;
    }
    files.push_back(e.path());
  }
  return files;
}

// The lines of every PartFiles(dir, stem), file after file; none if `dir`
// does not exist.
inline std::vector<std::string> ReadParts(const std::filesystem::path& dir,
                                          const std::string& stem) {
  std::vector<std::string> lines;
  if (!std::filesystem::exists(dir)) return lines;
  for (const std::filesystem::path& file : PartFiles(dir, stem)) {
    for (std::string& l : ReadLines(file)) lines.push_back(std::move(l));
  }
  return lines;
}

// Lines of sorted `a` not in sorted `b` (multiset difference), the first `max`.
inline std::string Missing(const std::vector<std::string>& a, const std::vector<std::string>& b,
                           size_t max = 10) {
  std::vector<std::string> d;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(d));
  std::string s = absl::StrCat(d.size(), " line(s)");
  for (size_t i = 0; i < d.size() && i < max; ++i) absl::StrAppend(&s, "\n    ", d[i]);
  return s;
}

// `s` as a single-quoted SQL string literal.
inline std::string SqlLiteral(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out.push_back('\'');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

// A fresh directory /tmp/caravela_<name>_XXXXXX (path() is empty if it could
// not be made), removed at the end unless the environment variable `keep_env`
// is set; then "<label>: kept <path>" is printed instead.
class TempDir {
 public:
  TempDir(const std::string& name, std::string keep_env, std::string label)
      : keep_env_(std::move(keep_env)), label_(std::move(label)) {
    std::string tmpl = "/tmp/caravela_" + name + "_XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    if (std::getenv(keep_env_.c_str()) != nullptr) {
      std::printf("%s: kept %s\n", label_.c_str(), path_.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::string keep_env_;
  std::string label_;
  std::filesystem::path path_;
};

}  // namespace caravela
