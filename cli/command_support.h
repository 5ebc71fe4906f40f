// What the cluster commands (cli/commands.h) share: the client options, the
// bearer token, the coordinator's address, settings taken from the worker's
// or coordinator's options, exit codes of failed calls, a job's row, and the
// stop signals of the long-running commands.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "CLI/CLI.hpp"
#include "caravela/v1/job.pb.h"
#include "common/status.h"
#include "coordinator/job_client.h"

namespace caravela {

// Set by `caravela local` in its workers' environment to its pid: a worker
// that finds it leaves when that process dies (PR_SET_PDEATHSIG), so that a
// `caravela local` killed with SIGKILL leaves no worker behind.
inline constexpr char kLocalPidVariable[] = "CARAVELA_LOCAL_PID";

// The options of the commands that call the coordinator (`workers`,
// `submit`, `jobs`, `job`, `cancel`, `rescale`, `savepoint`).
struct ClientFlags {
  std::string coordinator;  // HOST:PORT; empty: CoordinatorAddress's default
  std::string token_file;
  bool json = false;
  std::string tls_ca;
};

// Adds --coordinator, --token-file, --json and --tls-ca to `cmd`, bound to
// `flags` (which must outlive the parse).
void AddClientOptions(CLI::App* cmd, ClientFlags* flags);

// CLI11 also parses the options of the subcommands that are not run, from
// their environment variables (CARAVELA_<FLAG>) and --config sections. A
// setting the command `cmd` was not given (on the command line, in its
// --config section or, for its own options with one, in its environment
// variable) takes the value of the option `name` of the first of the sibling
// subcommands `from` that has one: `caravela jobs` uses the worker's
// CARAVELA_TOKEN_FILE, `caravela local` the listen = ... of a [coordinator]
// section. (The commands once shared their flags; the calls of InheritOption
// keep what that did, checked against the binary of before.)
template <typename T>
void InheritOption(const CLI::App& cmd, const std::string& name,
                   std::initializer_list<const char*> from, T* value);

// The client flags not given: --coordinator and --tls-ca from the worker's,
// --token-file from the worker's, else the coordinator's (InheritOption).
void InheritClientFlags(const CLI::App& cmd, ClientFlags* flags);

// HOST:PORT of the coordinator: `flag`, else $CARAVELA_COORDINATOR, else
// 127.0.0.1:7400.
std::string CoordinatorAddress(const std::string& flag);

// The token in `token_file` (surrounding whitespace stripped); left empty
// when `token_file` is empty (no auth). False, with the error printed, when
// the file cannot be read, holds nothing but whitespace (that must not turn
// auth off), holds more than one word of visible ASCII, or when the retired
// $CARAVELA_TOKEN is set. One scheme for every command: --token-file, whose
// default is $CARAVELA_TOKEN_FILE.
bool ReadToken(const std::string& token_file, std::string* token);

// Prints "error: <message>" on stderr; returns the exit code: 3 when
// unauthenticated, else 1.
int Fail(const absl::Status& status);

// Reads the token (exit code 2 when it cannot be), then returns what `call`
// returns with a client of the coordinator per `flags` whose calls have
// `timeout_ms` each.
int WithJobClient(const ClientFlags& flags, int timeout_ms,
                  const std::function<int(JobClient&)>& call);

// `job` as one line under the header of `caravela jobs`.
void PrintJobRow(const v1::Job& job);

// What `job`, `cancel` and `rescale` print of the job a call returned: the
// error (exit code per Fail), else the job as JSON with `json`, else its
// row (exit code 0).
int PrintJobResult(const absl::StatusOr<v1::Job>& job, bool json);

// SIGINT stops the long-running commands (coordinator, worker, local);
// SIGTERM stops them too, or asks for a drain. CatchStopSignals installs the
// handlers; the others read what arrived since.
enum class OnSigterm { kStop, kDrain };
void CatchStopSignals(OnSigterm on_sigterm);
bool StopRequested();   // SIGINT, or SIGTERM with kStop
bool DrainRequested();  // SIGTERM with kDrain

// Implementation.

template <typename T>
void InheritOption(const CLI::App& cmd, const std::string& name,
                   std::initializer_list<const char*> from, T* value) {
  if (cmd.get_option(name)->count() > 0) return;
  const CLI::App* parent = cmd.get_parent();
  for (const char* sibling : from) {
    for (const CLI::App* other : parent->get_subcommands(
             [sibling](const CLI::App* sub) { return sub->get_name() == sibling; })) {
      const CLI::Option* option = other->get_option_no_throw(name);
      if (option != nullptr && option->count() > 0) {
        *value = option->as<T>();
        return;
      }
    }
  }
}

}  // namespace caravela
