// A child process for the integration tests that run the caravela binary as
// its own process and kill it (the kill loops; header-only): ChildProcess
// (fork + execv, no shell, stdout and stderr in a log file; wait with a
// deadline, exit code, stop with a signal, wait for a log line), MsSince and
// Eventually.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace caravela {

// Milliseconds since `t` on the steady clock.
inline int64_t MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

// Polls `pred` every 20 ms until it holds (true) or `timeout` passed.
inline bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// What a CLI run gave: its exit code and output.
struct CliResult {
  int code = -1;
  std::string out;  // stdout and stderr
};

#ifdef CARAVELA_BINARY
// Runs the caravela CLI with `args` (a shell command line) to the end; its
// output goes through `dir`/cli.log.
inline CliResult Cli(const std::string& args, const std::filesystem::path& dir) {
  const std::filesystem::path log = dir / "cli.log";
  const std::string cmd =
      std::string(CARAVELA_BINARY) + " " + args + " > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc), ReadFile(log)};
}

// Polls `caravela job ID <args>` (args name the coordinator, TLS, ...)
// until the job is FINISHED, FAILED or CANCELED or `timeout` passed;
// returns the last table printed.
inline std::string WaitForJobEnd(const std::string& id, const std::string& args,
                                 const std::filesystem::path& dir,
                                 std::chrono::seconds timeout = std::chrono::seconds(120)) {
  std::string table;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    table = Cli("job " + id + " " + args, dir).out;
    for (const char* end : {"FINISHED", "FAILED", "CANCELED"}) {
      if (table.find(end) != std::string::npos) return table;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return table;
}

// A self-signed certificate for 127.0.0.1 and localhost (openssl), valid a
// day: PEM files <dir>/cert.pem and <dir>/key.pem. False (with openssl's
// output in <dir>/openssl.log) if it could not be made.
inline bool MakeSelfSignedCertificate(const std::filesystem::path& dir) {
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
      "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
      (dir / "key.pem").string() + " -out " + (dir / "cert.pem").string() + " > " +
      (dir / "openssl.log").string() + " 2>&1";
  return std::system(cmd.c_str()) == 0;
}
#endif

// A child process (execv, no shell) with stdout and stderr in a file. The
// destructor kills and reaps it if it is still running.
class ChildProcess {
 public:
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;

  // `gid`: when not 0, the child runs with that group id (setgid before
  // exec; tests match its packets with iptables' owner match). `env`:
  // NAME=value entries the child gets besides this process's environment.
  ChildProcess(const std::vector<std::string>& argv, const std::filesystem::path& log,
               gid_t gid = 0, const std::vector<std::string>& env = {})
      : log_(log) {
    // Everything the child needs is prepared before fork(): the parent has
    // threads (librdkafka), so the child only calls async-signal-safe functions.
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view name(*e, std::strcspn(*e, "=") + 1);  // NAME=
      if (std::none_of(env.begin(), env.end(),
                       [&](const std::string& v) { return v.starts_with(name); })) {
        envp.push_back(*e);  // not overridden by `env`
      }
    }
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    started_at_ = Clock::now();
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      // Dies with the test, also when the test is killed (a timeout): no
      // broker or worker left running into the next tests.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(125);
      dup2(fd, 1);  // the duplicates do not inherit O_CLOEXEC
      dup2(fd, 2);
      if (gid != 0 && setgid(gid) != 0) _exit(126);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    close(fd);
  }
  ~ChildProcess() {
    if (running()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  bool running() const { return pid_ > 0 && !exited_; }
  pid_t pid() const { return pid_; }
  Clock::time_point started_at() const { return started_at_; }
  std::string Log() const { return ReadFile(log_); }

  // Waits until the child exits or `deadline` passes; returns true if it exited.
  bool WaitUntil(Clock::time_point deadline) {
    while (running()) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        status_ = status;
        break;
      }
      const auto now = Clock::now();
      if (now >= deadline) return false;
      std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(2), deadline - now));
    }
    return true;
  }
  // Exit code, or 128 + signal; -1 while running.
  int ExitCode() const {
    if (!exited_) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  // Sends `sig` and waits (up to `timeout`) for the exit; returns ExitCode().
  int Stop(int sig, milliseconds timeout = milliseconds(15000)) {
    if (running()) {
      kill(pid_, sig);
      WaitUntil(Clock::now() + timeout);
    }
    return ExitCode();
  }
  // Waits until the log matches `re`; returns the match's groups (the whole
  // match first; empty if the child exits or `timeout` passes first).
  std::vector<std::string> WaitForMatch(const std::string& re, milliseconds timeout) {
    const std::regex pattern(re);
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      std::smatch m;
      const std::string log = Log();
      if (std::regex_search(log, m, pattern)) {
        std::vector<std::string> groups;
        for (const auto& g : m) groups.push_back(g.str());
        return groups;
      }
      if (Clock::now() >= deadline || WaitUntil(Clock::now())) return {};
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  // WaitForMatch's first capture group (or the match if `re` has none); ""
  // if the child exits or `timeout` passes first.
  std::string WaitFor(const std::string& re, milliseconds timeout) {
    const std::vector<std::string> groups = WaitForMatch(re, timeout);
    if (groups.empty()) return "";
    return groups.size() > 1 ? groups[1] : groups[0];
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  Clock::time_point started_at_;
  std::filesystem::path log_;
};

}  // namespace caravela
