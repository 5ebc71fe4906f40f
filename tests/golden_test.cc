// Golden end-to-end tests: every directory under tests/golden/ holds a job
// (job.yaml), its input files and expected/ — the exact files the job must
// produce, at the same relative paths (e.g. expected/out/revenue.jsonl).
// Each case is run twice with `caravela run` in fresh temp copies; both runs
// must match expected/ byte for byte (determinism, SPEC §2).
// The example jobs are checked the same way: every config/examples/<name>/
// directory with a job.yaml and an expected/ directory (suite Examples).
//
// Optional: expected/exit_code (default 0) and expected/stderr.txt (lines
// that must each appear in stderr, e.g. spec errors with their YAML paths).
//
// To (re)write expected files after a deliberate change, run with
// CARAVELA_UPDATE_GOLDEN=1 and review the diff line by line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

struct RunResult {
  int exit_code;
  std::string stderr_text;
};

RunResult RunCase(const fs::path& src, const fs::path& work) {
  fs::remove_all(work);
  fs::create_directories(work);
  for (const auto& e : fs::directory_iterator(src)) {
    // out/ may hold the outputs of a run in place (config/examples): not an input.
    if (e.path().filename() == "expected" || e.path().filename() == "out") continue;
    fs::copy(e.path(), work / e.path().filename(), fs::copy_options::recursive);
  }
  std::string cmd = std::string(CARAVELA_BINARY) + " run --quiet job.yaml --data-dir data";
  std::string full = "cd '" + work.string() + "' && " + cmd + " > stdout.txt 2> stderr.txt";
  int rc = std::system(full.c_str());
  return {WEXITSTATUS(rc), ReadFile(work / "stderr.txt")};
}

// The case directories under `root` (relative to the source tree), as paths
// relative to the source tree: those with a job.yaml, and with `need_expected`
// also an expected/ directory.
std::vector<std::string> Cases(const std::string& root, bool need_expected) {
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(fs::path(CARAVELA_SOURCE_DIR) / root)) {
    if (e.is_directory() && fs::exists(e.path() / "job.yaml") &&
        (!need_expected || fs::is_directory(e.path() / "expected"))) {
      dirs.push_back(root + "/" + e.path().filename().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// Test name: the directory's name, '-' and other non-alphanumerics as '_'.
std::string CaseName(const std::string& dir) {
  std::string name = fs::path(dir).filename().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesExpectedAndIsDeterministic) {
  const fs::path src = fs::path(CARAVELA_SOURCE_DIR) / GetParam();
  const fs::path expected = src / "expected";
  const fs::path tmp = fs::temp_directory_path() / ("caravela-golden-" + CaseName(GetParam()) +
                                                    "-" + std::to_string(::getpid()));
  RunResult r1 = RunCase(src, tmp / "run1");
  RunResult r2 = RunCase(src, tmp / "run2");

  int want_exit = 0;
  if (fs::exists(expected / "exit_code")) want_exit = std::stoi(ReadFile(expected / "exit_code"));
  EXPECT_EQ(r1.exit_code, want_exit) << r1.stderr_text;
  EXPECT_EQ(r2.exit_code, want_exit);

  if (fs::exists(expected / "stderr.txt")) {
    std::istringstream lines(ReadFile(expected / "stderr.txt"));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      EXPECT_NE(r1.stderr_text.find(line), std::string::npos)
          << "stderr lacks: " << line << "\nstderr was:\n"
          << r1.stderr_text;
    }
  }

  bool update = std::getenv("CARAVELA_UPDATE_GOLDEN") != nullptr;
  if (update) {
    // Rewrite expected/ from run 1's outputs (files under out/).
    if (fs::exists(tmp / "run1/out")) {
      for (const auto& e : fs::recursive_directory_iterator(tmp / "run1/out")) {
        if (!e.is_regular_file()) continue;
        fs::path rel = fs::relative(e.path(), tmp / "run1");
        WriteFile(expected / rel, ReadFile(e.path()));
      }
    }
  }
  ASSERT_TRUE(fs::exists(expected)) << "no expected/ directory for " << GetParam();
  int compared = 0;
  for (const auto& e : fs::recursive_directory_iterator(expected)) {
    if (!e.is_regular_file()) continue;
    fs::path rel = fs::relative(e.path(), expected);
    if (rel == "exit_code" || rel == "stderr.txt") continue;
    ++compared;
    ASSERT_TRUE(fs::exists(tmp / "run1" / rel)) << rel << " was not produced";
    EXPECT_EQ(ReadFile(tmp / "run1" / rel), ReadFile(e.path())) << "golden mismatch: " << rel;
    EXPECT_EQ(ReadFile(tmp / "run2" / rel), ReadFile(tmp / "run1" / rel))
        << "two runs differ: " << rel;
  }
  if (want_exit == 0) {
    EXPECT_GT(compared, 0) << "a passing case must compare some output";
  }
  // Every file the job wrote under out/ must be covered by expected/.
  if (fs::exists(tmp / "run1/out")) {
    for (const auto& e : fs::recursive_directory_iterator(tmp / "run1/out")) {
      if (!e.is_regular_file()) continue;
      fs::path rel = fs::relative(e.path(), tmp / "run1");
      EXPECT_TRUE(fs::exists(expected / rel)) << "unexpected output " << rel;
    }
  }
  if (!HasFailure()) fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenTest, ::testing::ValuesIn(Cases("tests/golden", false)),
                         [](const auto& info) { return CaseName(info.param); });
INSTANTIATE_TEST_SUITE_P(Examples, GoldenTest, ::testing::ValuesIn(Cases("config/examples", true)),
                         [](const auto& info) { return CaseName(info.param); });

}  // namespace
