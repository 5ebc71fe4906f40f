// Golden end-to-end tests: every directory under tests/golden/ holds a job
// (job.yaml), its input files and expected/ — the exact files the job must
// produce, at the same relative paths (e.g. expected/out/revenue.jsonl).
// Each case is run twice with `caravela run` in fresh temp copies; both runs
// must match expected/ byte for byte (determinism, SPEC §2).
//
// Optional: expected/exit_code (default 0) and expected/stderr.txt (lines
// that must each appear in stderr, e.g. spec errors with their YAML paths).
//
// To (re)write expected files after a deliberate change, run with
// CARAVELA_UPDATE_GOLDEN=1 and review the diff line by line.
#include <gtest/gtest.h>

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
    if (e.path().filename() == "expected") continue;
    fs::copy(e.path(), work / e.path().filename(), fs::copy_options::recursive);
  }
  std::string cmd = std::string(CARAVELA_BINARY) + " run --quiet job.yaml --data-dir data";
  std::string full = "cd '" + work.string() + "' && " + cmd + " > stdout.txt 2> stderr.txt";
  int rc = std::system(full.c_str());
  return {WEXITSTATUS(rc), ReadFile(work / "stderr.txt")};
}

std::vector<std::string> Cases() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(CARAVELA_SOURCE_DIR) / "tests/golden")) {
    if (e.is_directory() && fs::exists(e.path() / "job.yaml")) {
      names.push_back(e.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesExpectedAndIsDeterministic) {
  const fs::path src = fs::path(CARAVELA_SOURCE_DIR) / "tests/golden" / GetParam();
  const fs::path expected = src / "expected";
  const fs::path tmp = fs::temp_directory_path() / ("caravela-golden-" + GetParam() + "-" +
                                                   std::to_string(::getpid()));
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
  if (want_exit == 0) EXPECT_GT(compared, 0) << "a passing case must compare some output";
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

INSTANTIATE_TEST_SUITE_P(Cases, GoldenTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param; });

}  // namespace
