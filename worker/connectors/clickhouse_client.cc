#include "worker/connectors/clickhouse_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Logger() { return SubsystemLogger("clickhouse"); }

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// Errors of the connection, not of the statement: worth another try.
bool Transient(CURLcode c) {
  return c == CURLE_COULDNT_CONNECT || c == CURLE_OPERATION_TIMEDOUT || c == CURLE_SEND_ERROR ||
         c == CURLE_RECV_ERROR || c == CURLE_GOT_NOTHING || c == CURLE_COULDNT_RESOLVE_HOST ||
         c == CURLE_PARTIAL_FILE;
}

// The first line of a server exception, e.g. "Code: 60, e.displayText() =
// DB::Exception: Table x.y doesn't exist".
std::string FirstLine(std::string_view body) {
  std::string_view line = body.substr(0, body.find('\n'));
  return std::string(line.substr(0, 500));
}

}  // namespace

struct ClickHouseClient::Curl {
  CURL* handle = nullptr;
  char error[CURL_ERROR_SIZE] = {};
  ~Curl() {
    if (handle != nullptr) curl_easy_cleanup(handle);
  }
};

ClickHouseClient::ClickHouseClient(ClickHouseClientOptions options)
    : options_(std::move(options)), curl_(std::make_unique<Curl>()) {
  static const bool global_init = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  (void)global_init;
  while (!options_.url.empty() && options_.url.back() == '/') options_.url.pop_back();
}

ClickHouseClient::~ClickHouseClient() = default;

absl::StatusOr<std::string> ClickHouseClient::Execute(std::string_view query,
                                                      std::string_view data) {
  if (curl_->handle == nullptr) {
    curl_->handle = curl_easy_init();
    if (curl_->handle == nullptr) return absl::InternalError("curl_easy_init failed");
  }
  CURL* h = curl_->handle;
  char* escaped = curl_easy_escape(h, query.data(), static_cast<int>(query.size()));
  const std::string url = absl::StrCat(options_.url, "/?query=", escaped);
  curl_free(escaped);
  std::string body;
  int64_t backoff = options_.backoff_ms;
  for (int attempt = 0;; ++attempt) {
    body.clear();
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, data.empty() ? "" : data.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(data.size()));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &Append);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_->error);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout_ms));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(h, CURLOPT_USERNAME, options_.user.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, options_.password.c_str());
    curl_->error[0] = '\0';
    const CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK && status == 200) return body;
    const bool retry = rc != CURLE_OK ? Transient(rc) : status == 503;
    if (retry && attempt < options_.retries) {
      ++retried_;
      Logger()->warn("clickhouse {}: {}; retrying in {} ms ({} of {})", options_.url,
                     rc != CURLE_OK ? std::string(curl_easy_strerror(rc)) : FirstLine(body),
                     backoff, attempt + 1, options_.retries);
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
      backoff = std::min<int64_t>(backoff * 2, 5000);
      continue;
    }
    if (rc != CURLE_OK) {
      return absl::UnavailableError(
          absl::StrCat("clickhouse ", options_.url, ": ",
                       curl_->error[0] != '\0' ? std::string(curl_->error) : curl_easy_strerror(rc),
                       attempt > 0 ? absl::StrCat(" (after ", attempt + 1, " attempts)") : "",
                       "; is the server running and is the url right?"));
    }
    const std::string message = FirstLine(body);
    // Code 192: unknown user, 193: wrong password, 516: authentication failed.
    if (status == 401 || status == 403 || message.find("Code: 192") != std::string::npos ||
        message.find("Code: 193") != std::string::npos ||
        message.find("Code: 516") != std::string::npos) {
      return absl::UnauthenticatedError(
          absl::StrCat("clickhouse ", options_.url, " as user ", options_.user, ": ", message));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("clickhouse ", options_.url, ": HTTP ", status, ": ", message));
  }
}

std::string ClickHouseQuote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

}  // namespace caravela
