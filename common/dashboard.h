// The web dashboard (web/dashboard/, issue 11): static files embedded in the
// binary at build time (cmake/EmbedAssets.cmake), served read-only by
// every HTTP server that shows it (the coordinator today). The pages read
// the JSON API under /api/v1/ (with the bearer token when auth is on); the
// files themselves hold no data and are public.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/http_server.h"

namespace caravela {

struct DashboardAsset {
  const char* path;  // "/index.html", "/dashboard.js", ...
  const char* content_type;
  const char* data;
  size_t size;
};

// Every embedded file (generated source).
const std::vector<DashboardAsset>& DashboardAssets();

// GET / (index.html) and GET /<file> for every embedded file.
std::vector<HttpRoute> DashboardRoutes();

}  // namespace caravela
