// HTTP GETs for the tests of the services' HTTP side (/metrics, the JSON
// API), on cpp-httplib. Header-only.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

#include "tests/child_process.h"  // Eventually

namespace caravela {

// The body of GET http://ADDRESS/PATH, or "" unless it answered 200.
inline std::string HttpGet(const std::string& address, const std::string& path) {
  httplib::Client client("http://" + address);
  auto r = client.Get(path.c_str());
  if (!r || r->status != 200) return "";
  return r->body;
}

// GETs PATH until its body contains `needle` (or `timeout` passes); the last
// body read.
inline std::string HttpGetUntil(const std::string& address, const std::string& path,
                                const std::string& needle, std::chrono::milliseconds timeout) {
  std::string body;
  Eventually(
      [&] {
        body = HttpGet(address, path);
        return body.find(needle) != std::string::npos;
      },
      timeout);
  return body;
}

}  // namespace caravela
