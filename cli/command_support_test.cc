// InheritOption: a setting a command was not given comes from a sibling's
// option, as CLI11 parsed it from the environment or a --config section.
#include "cli/command_support.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace caravela {
namespace {

// The shape of `caravela`: a coordinator and a worker whose options have
// environment variables, a client whose options have none. Parse() parses
// `args` and returns the client's settings after InheritOption.
struct Resolved {
  std::string token_file;
  std::vector<std::string> paths;
};

Resolved Parse(std::vector<std::string> args) {
  CLI::App app;
  app.set_config("--config");
  app.allow_config_extras(false);
  app.require_subcommand(1);
  app.fallthrough();  // --config after the subcommand, as in main
  std::string worker_token, coordinator_token, client_token;
  std::vector<std::string> coordinator_paths, client_paths;
  CLI::App* coordinator = app.add_subcommand("coordinator");
  coordinator->add_option("--token-file", coordinator_token)->envname("CARAVELA_TEST_TOKEN_FILE");
  coordinator->add_option("--allow-path", coordinator_paths)->envname("CARAVELA_TEST_ALLOW_PATH");
  CLI::App* worker = app.add_subcommand("worker");
  worker->add_option("--token-file", worker_token)->envname("CARAVELA_TEST_TOKEN_FILE");
  CLI::App* client = app.add_subcommand("client");
  client->add_option("--token-file", client_token);
  client->add_option("--allow-path", client_paths);
  args.insert(args.begin(), "caravela");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  app.parse(static_cast<int>(argv.size()), argv.data());
  Resolved r;
  r.token_file = client_token;
  r.paths = client_paths;
  InheritOption(*client, "--token-file", {"worker", "coordinator"}, &r.token_file);
  InheritOption(*client, "--allow-path", {"coordinator"}, &r.paths);
  return r;
}

class InheritOptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("CARAVELA_TEST_TOKEN_FILE");
    ::unsetenv("CARAVELA_TEST_ALLOW_PATH");
  }
  void TearDown() override { SetUp(); }

  std::string Config(const std::string& text) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("caravela-inherit-" + std::to_string(::getpid()) + ".toml"))
                                 .string();
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(InheritOptionTest, NothingGivenLeavesTheDefault) {
  const Resolved r = Parse({"client"});
  EXPECT_EQ(r.token_file, "");
  EXPECT_TRUE(r.paths.empty());
}

TEST_F(InheritOptionTest, TheSiblingsEnvironmentVariable) {
  ::setenv("CARAVELA_TEST_TOKEN_FILE", "/env/token", 1);
  ::setenv("CARAVELA_TEST_ALLOW_PATH", "/env/files", 1);
  const Resolved r = Parse({"client"});
  EXPECT_EQ(r.token_file, "/env/token");
  EXPECT_EQ(r.paths, std::vector<std::string>{"/env/files"});
}

TEST_F(InheritOptionTest, ItsOwnValueWinsEvenWhenEmpty) {
  ::setenv("CARAVELA_TEST_TOKEN_FILE", "/env/token", 1);
  EXPECT_EQ(Parse({"client", "--token-file", "/own/token"}).token_file, "/own/token");
  EXPECT_EQ(Parse({"client", "--token-file", ""}).token_file, "");
}

TEST_F(InheritOptionTest, TheSiblingsConfigSectionInOrder) {
  const std::string both = Config(
      "[coordinator]\ntoken-file = \"/coordinator/token\"\nallow-path = [\"/a\", \"/b\"]\n"
      "[worker]\ntoken-file = \"/worker/token\"\n");
  Resolved r = Parse({"client", "--config", both});
  EXPECT_EQ(r.token_file, "/worker/token");  // the first of {"worker", "coordinator"}
  EXPECT_EQ(r.paths, (std::vector<std::string>{"/a", "/b"}));
  const std::string coordinator = Config("[coordinator]\ntoken-file = \"/coordinator/token\"\n");
  EXPECT_EQ(Parse({"client", "--config", coordinator}).token_file, "/coordinator/token");
  const std::string own =
      Config("[worker]\ntoken-file = \"/worker/token\"\n[client]\ntoken-file = \"/own/token\"\n");
  EXPECT_EQ(Parse({"client", "--config", own}).token_file, "/own/token");
  std::filesystem::remove(own);  // one path for all three
}

// ReadToken: one word of visible ASCII, whitespace around it stripped; an
// empty file must not turn auth off.
class ReadTokenTest : public ::testing::Test {
 protected:
  void SetUp() override { ::unsetenv("CARAVELA_TOKEN"); }
  void TearDown() override {
    SetUp();
    for (const std::string& f : files_) std::filesystem::remove(f);
  }
  std::string File(const std::string& text) {
    // Per process and file: ctest runs the tests of this suite in parallel.
    const std::string path = ::testing::TempDir() + "read_token_" + std::to_string(::getpid()) +
                             "_" + std::to_string(n_++);
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }
  int n_ = 0;
  std::vector<std::string> files_;
};

TEST_F(ReadTokenTest, StripsTheWhitespaceAroundTheToken) {
  std::string token = "stale";
  EXPECT_TRUE(ReadToken(File("  s3cret\n\n"), &token));
  EXPECT_EQ(token, "s3cret");
  EXPECT_TRUE(ReadToken("", &token));  // no file: no auth
  EXPECT_EQ(token, "");
}

TEST_F(ReadTokenTest, RefusesAnEmptyOrBlankFile) {
  std::string token;
  EXPECT_FALSE(ReadToken(File(""), &token));
  EXPECT_FALSE(ReadToken(File(" \t\n\r\n"), &token));
  EXPECT_EQ(token, "");
}

TEST_F(ReadTokenTest, RefusesWhatAHeaderCannotCarry) {
  std::string token;
  EXPECT_FALSE(ReadToken(File("two words"), &token));
  EXPECT_FALSE(ReadToken(File("line\nbreak"), &token));
  EXPECT_FALSE(ReadToken(File("caf\xc3\xa9"), &token));
  EXPECT_FALSE(ReadToken(::testing::TempDir() + "no_such_token_file", &token));
}

TEST_F(ReadTokenTest, RefusesTheRetiredTokenVariable) {
  ::setenv("CARAVELA_TOKEN", "s3cret", 1);
  std::string token;
  EXPECT_FALSE(ReadToken("", &token));
  EXPECT_FALSE(ReadToken(File("s3cret"), &token));
}

}  // namespace
}  // namespace caravela
