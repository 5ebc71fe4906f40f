#include "coordinator/placement_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace caravela {

int ClusterSlots::TotalFree() const {
  int total = 0;
  for (const auto& [w, n] : free) total += n;
  return total;
}

void ClusterSlots::Take(const std::vector<std::string>& placement) {
  for (const std::string& w : placement) {
    auto it = free.find(w);
    if (it != free.end()) --it->second;
  }
}

void ClusterSlots::Release(const std::vector<std::string>& placement) {
  for (const std::string& w : placement) {
    auto it = free.find(w);
    if (it != free.end()) ++it->second;
  }
}

std::vector<std::string> SpreadPolicy::Place(int tasks, const std::vector<std::string>& previous,
                                             const ClusterSlots& slots) const {
  std::map<std::string, int> free = slots.free;
  // Sticky first: a task keeps a worker with room, up to an even share
  // (rounded down) per worker; the rest goes to the workers with the most
  // room.
  int with_room = 0;
  for (const auto& [w, n] : free) with_room += n > 0 ? 1 : 0;
  const int cap = std::max(1, tasks / std::max(with_room, 1));
  std::vector<std::string> placed(static_cast<size_t>(tasks));
  std::map<std::string, int> kept;
  for (int g = 0; g < tasks && g < static_cast<int>(previous.size()); ++g) {
    const std::string& w = previous[g];
    auto it = free.find(w);
    if (it != free.end() && it->second > 0 && kept[w] < cap) {
      placed[g] = w;
      --it->second;
      ++kept[w];
    }
  }
  for (int g = 0; g < tasks; ++g) {
    if (!placed[g].empty()) continue;
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second > 0 && (best == free.end() || it->second > best->second)) best = it;
    }
    if (best == free.end()) return {};  // fewer free slots than tasks
    placed[g] = best->first;
    --best->second;
  }
  return placed;
}

ImbalanceScore SpreadPolicy::Imbalance(const std::vector<std::string>& placement,
                                       const ClusterSlots& slots) const {
  std::map<std::string, int> mine;
  for (const std::string& w : placement) ++mine[w];
  std::string most, fewest;
  int high = -1, low = 0;
  for (const std::string& w : slots.alive) {
    const int n = mine.count(w) > 0 ? mine.at(w) : 0;
    auto f = slots.free.find(w);
    const bool room = f != slots.free.end() && f->second > 0;
    if (n > high) {
      high = n;
      most = w;
    }
    if (room && (fewest.empty() || n < low)) {
      low = n;
      fewest = w;
    }
  }
  if (fewest.empty() || high - low < 2) return {};
  return {high - low - 1,
          absl::StrCat("rebalancing: ", most, " runs ", high, " tasks, ", fewest, " ", low)};
}

absl::Status CheckPlacement(const std::vector<std::string>& placement, int tasks,
                            const ClusterSlots& slots) {
  if (static_cast<int>(placement.size()) != tasks) {
    return absl::InternalError(absl::StrCat("it placed ", placement.size(), " tasks of ", tasks));
  }
  std::map<std::string, int> given;
  for (const std::string& w : placement) ++given[w];
  for (const auto& [w, n] : given) {
    auto f = slots.free.find(w);
    if (f == slots.free.end()) {
      return absl::InternalError(absl::StrCat("it placed tasks on ", w.empty() ? "no worker" : w,
                                              ", which takes no new tasks"));
    }
    if (n > f->second) {
      return absl::InternalError(
          absl::StrCat("it placed ", n, " tasks on ", w, ", which has room for ", f->second));
    }
  }
  return absl::OkStatus();
}

}  // namespace caravela
