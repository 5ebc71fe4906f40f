// What the test servers that run as child processes share (ClickHouse, s3rver;
// PostgreSQL for the port): a free loopback port, a started child, waiting
// until it answers, stopping it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace caravela {

// A free TCP port on 127.0.0.1 (bound to port 0, then released; the server
// binds it right after).
absl::StatusOr<int> FreeLoopbackPort();

// A new directory /tmp/caravela-<name>-XXXXXX.
absl::StatusOr<std::string> MakeServerDir(const std::string& name);

// Starts `argv` (argv[0] a path, or a name looked up in PATH) with stdout and
// stderr appended to `log`. The child dies with the test (PR_SET_PDEATHSIG)
// and holds none of its descriptors (a death test's pipe held open would keep
// its parent waiting).
absl::StatusOr<pid_t> SpawnServer(const std::vector<std::string>& argv, const std::string& log);

// Calls `probe` every 100 ms until it is OK. If the child exits first:
// Internal with the start of `log`; after `timeout`: DeadlineExceeded with the
// last probe error. `what` names the server, `dir` where its files are. Sets
// *pid to -1 when the child exited.
absl::Status WaitUntilServing(pid_t* pid, const std::string& what, const std::string& dir,
                              const std::string& log, const std::function<absl::Status()>& probe,
                              std::chrono::seconds timeout = std::chrono::seconds(30));

// SIGTERM, then SIGKILL after `grace` (at once for a zero grace); reaps the
// child and sets *pid to -1. Nothing for *pid <= 0.
void StopServer(pid_t* pid, std::chrono::milliseconds grace);

// Removes `dir` unless CARAVELA_KEEP_TEST_DIRS is set.
void RemoveServerDir(const std::string& dir);

}  // namespace caravela
