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
  // (rounded down) per worker. Every other task goes to the worker with
  // room that holds the fewest of the job's tasks (then the most free
  // slots, then the lowest id), so the job ends within one task over the
  // workers left with room: what Imbalance accepts. (Most free slots alone
  // piled a job onto the biggest worker when workers differ in size or
  // other jobs' tasks, and Imbalance then moved it again after every
  // start.)
  int with_room = 0;
  for (const auto& [w, n] : free) with_room += n > 0 ? 1 : 0;
  const int cap = std::max(1, tasks / std::max(with_room, 1));
  std::vector<std::string> placed(static_cast<size_t>(tasks));
  std::map<std::string, int> mine;  // the job's tasks per worker so far
  for (int g = 0; g < tasks && g < static_cast<int>(previous.size()); ++g) {
    const std::string& w = previous[g];
    auto it = free.find(w);
    if (it != free.end() && it->second > 0 && mine[w] < cap) {
      placed[g] = w;
      --it->second;
      ++mine[w];
    }
  }
  for (int g = 0; g < tasks; ++g) {
    if (!placed[g].empty()) continue;
    auto best = free.end();
    int best_mine = 0;
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second <= 0) continue;
      const int n = mine[it->first];
      if (best == free.end() || n < best_mine || (n == best_mine && it->second > best->second)) {
        best = it;
        best_mine = n;
      }
    }
    if (best == free.end()) return {};  // fewer free slots than tasks
    placed[g] = best->first;
    --best->second;
    ++mine[best->first];
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

std::string DescribePlacement(const std::vector<std::string>& placement) {
  std::map<std::string, int> per_worker;
  for (const std::string& w : placement) ++per_worker[w];
  std::string where;
  int listed = 0;
  for (const auto& [w, n] : per_worker) {
    if (++listed > 8) {
      absl::StrAppend(&where, ", ...");
      break;
    }
    absl::StrAppend(&where, where.empty() ? "" : ", ", w, ":", n);
  }
  return absl::StrCat(
      per_worker.size() == 1 ? "1 worker" : absl::StrCat(per_worker.size(), " workers"), " (",
      where, ")");
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
