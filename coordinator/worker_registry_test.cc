#include "coordinator/worker_registry.h"

#include "gtest/gtest.h"

namespace caravela {
namespace {

TEST(WorkerRegistryTest, SilentWorkersDieAndMustRegisterAgain) {
  ManualClock clock(1000);
  WorkerRegistry registry(&clock, /*worker_timeout_ms=*/500);
  v1::RegisterRequest r;
  r.set_slots(2);
  r.set_address("127.0.0.1:1");
  const std::string a = registry.Register(r);
  const std::string b = registry.Register(r);
  EXPECT_EQ(a, "worker-1");
  EXPECT_EQ(b, "worker-2");
  v1::HeartbeatRequest hb;
  hb.set_worker_id(a);
  hb.set_running_tasks(3);
  clock.Advance(400);
  EXPECT_TRUE(registry.Heartbeat(hb));  // a: last heartbeat at 1400
  clock.Advance(200);                   // 1600: b silent for 600 ms
  EXPECT_EQ(registry.ExpireSilent(), std::vector<std::string>{b});
  EXPECT_TRUE(registry.ExpireSilent().empty());  // once
  hb.set_worker_id(b);
  EXPECT_FALSE(registry.Heartbeat(hb));  // dead for good
  // A heartbeat that comes late, before the sweep noticed, is refused too.
  clock.Advance(501);
  hb.set_worker_id(a);
  EXPECT_FALSE(registry.Heartbeat(hb));
  std::vector<v1::WorkerInfo> all = registry.List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].state(), v1::DEAD);
  EXPECT_EQ(all[0].running_tasks(), 3);
  EXPECT_EQ(all[0].last_heartbeat_ms(), 1400);
  EXPECT_EQ(all[1].state(), v1::DEAD);
  EXPECT_EQ(registry.Register(r), "worker-3");  // a new id, never a revived one
  EXPECT_EQ(registry.lease_ms(), 500);
}

}  // namespace
}  // namespace caravela
