// HttpServer against clients that connect and then send nothing, or half a
// request: each holds only a thread of its own, so /healthz keeps answering
// at once; the token guards every route but the public ones.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"

namespace caravela {
namespace {

using Clock = std::chrono::steady_clock;

// A TCP connection to `address` (HOST:PORT) that sent `prefix` and then
// stays silent until destroyed; -1 if it could not connect.
class SlowClient {
 public:
  SlowClient(const std::string& address, const std::string& prefix) {
    const size_t colon = address.rfind(':');
    int port = 0;
    if (!absl::SimpleAtoi(address.substr(colon + 1), &port)) return;
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
        (!prefix.empty() && ::send(fd_, prefix.data(), prefix.size(), 0) < 0)) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~SlowClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  SlowClient(const SlowClient&) = delete;
  SlowClient& operator=(const SlowClient&) = delete;
  bool connected() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

HttpRoute Route(const std::string& pattern, bool is_public) {
  return {pattern, is_public, [](const std::vector<std::string>&) {
            HttpResponse r;
            r.body = "{}";
            return r;
          }};
}

TEST(HttpServerTest, SlowClientsDoNotDelayHealth) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1:0", "s3cret", {HealthRoute(), Route("/api/v1/jobs", false)});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  // 32 that send nothing, 32 that stop in the middle of their headers.
  std::vector<std::unique_ptr<SlowClient>> slow;
  for (int i = 0; i < 64; ++i) {
    slow.push_back(std::make_unique<SlowClient>(
        address, i % 2 == 0 ? "" : "GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n"));
    ASSERT_TRUE(slow.back()->connected()) << i;
  }
  // Over more than the read timeout, so that the slow ones also time out
  // meanwhile (and the threads they held serve again).
  httplib::Client client("http://" + address);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  const auto end = Clock::now() + std::chrono::seconds(kReadTimeoutSeconds + 2);
  int probes = 0;
  while (Clock::now() < end) {
    const auto start = Clock::now();
    auto health = client.Get("/healthz");
    const auto took =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    ASSERT_TRUE(health) << httplib::to_string(health.error());
    EXPECT_EQ(health->status, 200);
    EXPECT_LT(took, 1000) << "probe " << probes;
    ++probes;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_GE(probes, 20);
  // The other routes answer too, behind the token.
  auto anonymous = client.Get("/api/v1/jobs");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  auto jobs = client.Get("/api/v1/jobs", {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200);
  slow.clear();
  const auto stop = Clock::now();
  (*server)->Stop();
  EXPECT_LT(Clock::now() - stop, std::chrono::seconds(kReadTimeoutSeconds + 1));
}

}  // namespace
}  // namespace caravela
