#include "common/http_server.h"

#include <httplib.h>

#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/record.h"  // AppendJsonString

namespace caravela {

bool BearerMatches(std::string_view header, std::string_view token) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (token.empty() || header.size() != kPrefix.size() + token.size() ||
      header.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  unsigned char diff = 0;  // no early exit: the time does not depend on where it differs
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(header[kPrefix.size() + i] ^ token[i]);
  }
  return diff == 0;
}

HttpResponse HttpError(int status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.body = "{\"error\":";
  AppendJsonString(message, &r.body);
  r.body += "}\n";
  return r;
}

HttpRoute MetricsRoute(std::function<std::string()> text) {
  return {"/metrics", false, [text = std::move(text)](const std::vector<std::string>&) {
            HttpResponse r;
            r.content_type = "text/plain; version=0.0.4; charset=utf-8";
            r.body = text();
            return r;
          }};
}

HttpRoute HealthRoute() {
  return {"/healthz", true, [](const std::vector<std::string>&) {
            HttpResponse r;
            r.body = "{\"status\":\"SERVING\"}\n";
            return r;
          }};
}

struct HttpServer::Thread {
  std::thread t;
};

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_ != nullptr && thread_->t.joinable()) thread_->t.join();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, const std::string& token, const std::vector<HttpRoute>& routes) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address \"", listen, "\": expected HOST:PORT (port 0: any free one)"));
  }
  const std::string host = listen.substr(0, colon);
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  for (const HttpRoute& route : routes) {
    s->server_->Get(
        route.pattern, [route, token](const httplib::Request& req, httplib::Response& res) {
          HttpResponse out;
          if (!route.is_public && !token.empty() &&
              !BearerMatches(req.get_header_value("Authorization"), token)) {
            out = HttpError(401, "missing or wrong bearer token (Authorization: Bearer <token>)");
            res.set_header("WWW-Authenticate", "Bearer");
          } else {
            std::vector<std::string> captures;
            for (size_t i = 1; i < req.matches.size(); ++i)
              captures.push_back(req.matches[i].str());
            out = route.handler(captures);
          }
          res.status = out.status;
          res.set_content(out.body, out.content_type.c_str());
        });
  }
  s->server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const HttpResponse e = HttpError(res.status, absl::StrCat("no route ", req.path));
    res.set_content(e.body, e.content_type.c_str());
  });
  if (port == 0) {
    port = s->server_->bind_to_any_port(host);
    if (port < 0) {
      return absl::UnavailableError(absl::StrCat("HTTP: cannot bind ", listen));
    }
  } else if (!s->server_->bind_to_port(host, port)) {
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot bind ", listen, " (in use, or not an address of this host)"));
  }
  s->address_ = absl::StrCat(host, ":", port);
  s->thread_ = std::make_unique<Thread>();
  httplib::Server* server = s->server_.get();
  s->thread_->t = std::thread([server] { server->listen_after_bind(); });
  return s;
}

}  // namespace caravela
