#include "worker/testing/local_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/strings/str_cat.h"

namespace caravela {

absl::StatusOr<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::string err = std::strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", err));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

absl::StatusOr<std::string> MakeServerDir(const std::string& name) {
  std::string tmpl = absl::StrCat("/tmp/caravela-", name, "-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
  }
  return tmpl;
}

absl::StatusOr<pid_t> SpawnServer(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "a", stdout);
    (void)f;
    dup2(1, 2);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

absl::Status WaitUntilServing(pid_t* pid, const std::string& what, const std::string& dir,
                              const std::string& log, const std::function<absl::Status()>& probe,
                              std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    absl::Status st = probe();
    if (st.ok()) return st;
    int status = 0;
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
      *pid = -1;
      std::ifstream in(log);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      return absl::InternalError(
          absl::StrCat(what, " exited at start (files in ", dir, "): ", text.substr(0, 2000)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, " did not answer within ",
                                                      timeout.count(), " s (files in ", dir,
                                                      "): ", st.message()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void StopServer(pid_t* pid, std::chrono::milliseconds grace) {
  if (*pid <= 0) return;
  kill(*pid, grace.count() > 0 ? SIGTERM : SIGKILL);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (waitpid(*pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(*pid, SIGKILL);
      waitpid(*pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *pid = -1;
}

void RemoveServerDir(const std::string& dir) {
  if (dir.empty() || std::getenv("CARAVELA_KEEP_TEST_DIRS") != nullptr) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace caravela
