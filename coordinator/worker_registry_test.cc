#include "coordinator/worker_registry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace caravela {
namespace {

TEST(WorkerRegistryTest, SilentWorkersDieAndMustRegisterAgain) {
  ManualClock clock(1000);
  WorkerRegistry registry(&clock, /*worker_timeout_ms=*/500);
  v1::RegisterRequest r;
  r.set_slots(2);
  r.set_address("127.0.0.1:1");
  const absl::StatusOr<v1::RegisterResponse> ra = registry.Register(r);
  const absl::StatusOr<v1::RegisterResponse> rb = registry.Register(r);
  ASSERT_TRUE(ra.ok() && rb.ok());
  const std::string a = ra->worker_id();
  const std::string b = rb->worker_id();
  EXPECT_EQ(a, "worker-1");
  EXPECT_EQ(b, "worker-2");
  EXPECT_NE(ra->session(), rb->session());
  v1::HeartbeatRequest hb;
  hb.set_worker_id(a);
  hb.set_session(ra->session());
  hb.set_running_tasks(3);
  clock.Advance(400);
  EXPECT_TRUE(registry.Heartbeat(hb));  // a: last heartbeat at 1400
  clock.Advance(200);                   // 1600: b silent for 600 ms
  EXPECT_EQ(registry.ExpireSilent(), std::vector<std::string>{b});
  EXPECT_TRUE(registry.ExpireSilent().empty());  // once
  hb.set_worker_id(b);
  hb.set_session(rb->session());
  EXPECT_FALSE(registry.Heartbeat(hb));  // dead for good
  // A heartbeat that comes late, before the sweep noticed, is refused too.
  clock.Advance(501);
  hb.set_worker_id(a);
  hb.set_session(ra->session());
  EXPECT_FALSE(registry.Heartbeat(hb));
  std::vector<v1::WorkerInfo> all = registry.List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].state(), v1::DEAD);
  EXPECT_EQ(all[0].running_tasks(), 0);  // its 3 tasks went with it
  EXPECT_EQ(all[0].last_heartbeat_ms(), 1400);
  EXPECT_EQ(all[1].state(), v1::DEAD);
  EXPECT_EQ(registry.Register(r)->worker_id(), "worker-3");  // a new id, never a revived one
  EXPECT_EQ(registry.lease_ms(), 500);
}

// Two processes with one id: after a coordinator restart the new registry
// hands out "worker-1" again while a paused worker of the old registry still
// holds "worker-1". Its heartbeats carry the old session and are refused, so
// it is never taken for the new worker-1 (and is not given its tasks).
TEST(WorkerRegistryTest, AHeartbeatOfAnotherSessionIsUnknown) {
  ManualClock clock(1000);
  WorkerRegistry old_registry(&clock, 500, "cluster-a");
  WorkerRegistry registry(&clock, 500, "cluster-a");
  v1::RegisterRequest r;
  r.set_slots(2);
  const absl::StatusOr<v1::RegisterResponse> paused = old_registry.Register(r);
  const absl::StatusOr<v1::RegisterResponse> fresh = registry.Register(r);
  ASSERT_TRUE(paused.ok() && fresh.ok());
  ASSERT_EQ(paused->worker_id(), fresh->worker_id());
  EXPECT_EQ(fresh->cluster_id(), "cluster-a");
  v1::HeartbeatRequest hb;
  hb.set_worker_id(fresh->worker_id());
  hb.set_session(paused->session());
  EXPECT_FALSE(registry.Heartbeat(hb));
  hb.set_session(0);
  EXPECT_FALSE(registry.Heartbeat(hb));
  hb.set_session(fresh->session());
  EXPECT_TRUE(registry.Heartbeat(hb));
  // The paused one registers again under its previous id: taken, so it gets
  // a new one of its own.
  r.set_previous_id(paused->worker_id());
  r.set_cluster_id(paused->cluster_id());
  const absl::StatusOr<v1::RegisterResponse> again = registry.Register(r);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->worker_id(), "worker-2");
}

// A worker that was in another cluster (a coordinator with another data
// directory took its coordinator's address) is refused, naming both.
TEST(WorkerRegistryTest, AWorkerOfAnotherClusterIsRefused) {
  ManualClock clock(1000);
  WorkerRegistry registry(&clock, 500, "cluster-b");
  v1::RegisterRequest r;
  r.set_slots(2);
  r.set_previous_id("worker-1");
  r.set_cluster_id("cluster-a");
  const absl::StatusOr<v1::RegisterResponse> refused = registry.Register(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::AllOf(::testing::HasSubstr("cluster-a"), ::testing::HasSubstr("cluster-b"),
                               ::testing::HasSubstr("restart the worker")));
  EXPECT_TRUE(registry.List().empty());
  r.clear_cluster_id();  // a worker process that never joined a cluster
  EXPECT_TRUE(registry.Register(r).ok());
}

}  // namespace
}  // namespace caravela
