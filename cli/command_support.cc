#include "cli/command_support.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/strip.h"
#include "coordinator/job_state.h"
#include "proto/grpc_support.h"

namespace caravela {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_drain{false};
void OnStop(int) { g_stop = true; }
void OnDrain(int) { g_drain = true; }

}  // namespace

void AddClientOptions(CLI::App* cmd, ClientFlags* flags) {
  cmd->add_option("--coordinator", flags->coordinator,
                  "Coordinator HOST:PORT (default $CARAVELA_COORDINATOR, else 127.0.0.1:7400)");
  cmd->add_option("--token-file", flags->token_file,
                  "File holding the bearer token (default $CARAVELA_TOKEN_FILE)");
  cmd->add_flag(
      "--json", flags->json,
      "Print JSON for scripts (docs/api.md: snake_case, every field, numbers as numbers)");
  cmd->add_option("--tls-ca", flags->tls_ca,
                  "PEM file of the roots to trust: talk TLS to the coordinator");
}

void InheritClientFlags(const CLI::App& cmd, ClientFlags* flags) {
  InheritOption(cmd, "--coordinator", {"worker"}, &flags->coordinator);
  InheritOption(cmd, "--token-file", {"worker", "coordinator"}, &flags->token_file);
  InheritOption(cmd, "--tls-ca", {"worker"}, &flags->tls_ca);
}

std::string CoordinatorAddress(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* a = std::getenv("CARAVELA_COORDINATOR"); a != nullptr && *a != '\0') return a;
  return "127.0.0.1:7400";
}

bool ReadToken(const std::string& token_file, std::string* token) {
  if (const char* t = std::getenv("CARAVELA_TOKEN"); t != nullptr && *t != '\0') {
    // Once read as the token itself; silently ignoring it would run a
    // server without auth that its operator meant to protect.
    std::fprintf(stderr,
                 "error: $CARAVELA_TOKEN is not read: put the token in a file and name it with "
                 "--token-file or $CARAVELA_TOKEN_FILE, then unset CARAVELA_TOKEN\n");
    return false;
  }
  token->clear();
  if (token_file.empty()) return true;
  std::ifstream in(token_file);
  if (!in) {
    std::fprintf(stderr, "error: cannot read --token-file %s\n", token_file.c_str());
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const absl::string_view stripped = absl::StripAsciiWhitespace(text);
  if (stripped.empty()) {
    std::fprintf(stderr,
                 "error: --token-file %s is empty: put the token in it (e.g. openssl rand -hex 32 "
                 "> %s), or give no --token-file to run without auth\n",
                 token_file.c_str(), token_file.c_str());
    return false;
  }
  // It travels in an "authorization: Bearer <token>" header (gRPC metadata
  // and HTTP), which takes visible ASCII only.
  for (const char c : stripped) {
    if (c < 0x21 || c > 0x7e) {
      std::fprintf(stderr,
                   "error: --token-file %s: the token must be one word of visible ASCII "
                   "characters (no spaces, no control or non-ASCII bytes)\n",
                   token_file.c_str());
      return false;
    }
  }
  *token = std::string(stripped);
  return true;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  if (absl::IsUnauthenticated(status)) return 3;
  return 1;
}

int WithJobClient(const ClientFlags& flags, int timeout_ms,
                  const std::function<int(JobClient&)>& call) {
  std::string token;
  if (!ReadToken(flags.token_file, &token)) return 2;
  JobClient client(CoordinatorAddress(flags.coordinator), token, timeout_ms, flags.tls_ca);
  return call(client);
}

void PrintJobRow(const v1::Job& j) {
  std::printf("%-28s %-11s %11d %6d %5lld  %s\n", j.id().c_str(), JobStateName(j.state()).c_str(),
              j.parallelism(), j.stages(), static_cast<long long>(j.epoch()), j.message().c_str());
}

int PrintJobResult(const absl::StatusOr<v1::Job>& job, bool json) {
  if (!job.ok()) return Fail(job.status());
  if (json) {
    std::printf("%s\n", ProtoJson(*job).c_str());
  } else {
    PrintJobRow(*job);
  }
  return 0;
}

void CatchStopSignals(OnSigterm on_sigterm) {
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, on_sigterm == OnSigterm::kDrain ? OnDrain : OnStop);
}

bool StopRequested() { return g_stop.load(); }
bool DrainRequested() { return g_drain.load(); }

}  // namespace caravela
