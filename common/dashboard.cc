#include "common/dashboard.h"

namespace caravela {

std::vector<HttpRoute> DashboardRoutes() {
  std::vector<HttpRoute> routes;
  for (const DashboardAsset& a : DashboardAssets()) {
    HttpResponse r;
    r.content_type = std::string(a.content_type) + "; charset=utf-8";  // all text
    r.body.assign(a.data, a.size);
    auto handler = [r](const std::vector<std::string>&) { return r; };
    routes.push_back({a.path, /*is_public=*/true, handler});
    if (std::string(a.path) == "/index.html") routes.push_back({"/", true, handler});
  }
  return routes;
}

}  // namespace caravela
