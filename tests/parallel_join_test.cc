// An interval join behind exchanges (SPEC §5, §8): orders keyed by customer
// and payments keyed by payment_id are deduplicated by their ids and LEFT
// interval-joined on order_id, so every input crosses an exchange. A
// generated stream with retried copies, disorder and too-late records runs
// with parallelism 1 and 3; the joined rows equal the offline answer for both,
// and the too-late records are exactly the ones produced too late.
//
// What is compared does not depend on timing: the copies of a record share
// its key, so they sit in one partition ("the first copy" is the same in
// every run); disorder plus retry delay stay under max_out_of_orderness, so
// nothing of the main stream is too late whatever the interleaving of
// partitions; the too-late records are produced only after the job showed
// (by padding the `marker` order, whose bound is past all of them) that its
// watermark passed them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/time_util.h"
#include "tests/test_util.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

constexpr int kPartitions = 4;
constexpr int64_t kMinute = 60'000;
constexpr int64_t kStart = 1'790'000'000'000;  // 2026-09-21
constexpr int kOrders = 3000;
constexpr int64_t kSpan = 6 * 60 * kMinute;
// Bounds of the join: payments from 5 minutes before to 30 minutes after.
constexpr int64_t kLower = -5 * kMinute, kUpper = 30 * kMinute;
const int64_t kMarkerTs = kStart + kSpan + 10 * kMinute;

struct Event {
  int64_t arrival;  // produce order within its topic
  KafkaTestRecord record;
};

struct Order {
  std::string id, customer;
  int64_t ts;
};
struct Payment {
  std::string id, order;
  int64_t ts;
};

std::string OrderJson(const Order& o) {
  return absl::StrCat(R"({"order_id":")", o.id, R"(","customer":")", o.customer, R"(","ts":")",
                      FormatIso8601(o.ts), R"("})");
}
std::string PaymentJson(const Payment& p) {
  return absl::StrCat(R"({"payment_id":")", p.id, R"(","order_id":")", p.order, R"(","ts":")",
                      FormatIso8601(p.ts), R"("})");
}

// The generated input: the main stream (in produce order per topic) and the
// too-late records.
struct Input {
  std::vector<Order> orders;
  std::vector<Payment> payments;
  std::vector<KafkaTestRecord> order_records, payment_records;
  std::vector<KafkaTestRecord> late_orders, late_payments;
  std::set<std::string> late_ids;
  int retries = 0;
};

Input Generate() {
  Input in;
  std::mt19937_64 rng(11);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  std::vector<Event> orders, payments;
  auto add = [&](std::vector<Event>* to, int64_t ts, const std::string& key,
                 const std::string& json) {
    // Disorder up to 40 s, a retried copy up to 60 s later: 100 s < 2 m.
    const int64_t arrival = ts + uniform(0, 40'000);
    to->push_back({arrival, {-1, key, json}});
    if (rng() % 20 == 0) {
      to->push_back({arrival + uniform(1, 60'000), {-1, key, json}});
      ++in.retries;
    }
  };
  for (int i = 0; i < kOrders; ++i) {
    Order o{absl::StrCat("o", i), absl::StrCat("c", rng() % 500), kStart + uniform(0, kSpan)};
    in.orders.push_back(o);
    add(&orders, o.ts, o.customer, OrderJson(o));
    // 0, 1 or 2 payments, some outside the bounds.
    const int n = static_cast<int>(rng() % 10);
    for (int k = 0; k < (n == 0 ? 0 : n < 9 ? 1 : 2); ++k) {
      Payment p{absl::StrCat("p", i, "-", k), o.id, o.ts + uniform(-7 * kMinute, 33 * kMinute)};
      in.payments.push_back(p);
      add(&payments, p.ts, p.id, PaymentJson(p));
    }
  }
  // A payment for no order.
  Payment stray{"p-stray", "o-none", kStart + kMinute};
  in.payments.push_back(stray);
  add(&payments, stray.ts, stray.id, PaymentJson(stray));
  auto by_arrival = [](const Event& a, const Event& b) { return a.arrival < b.arrival; };
  std::stable_sort(orders.begin(), orders.end(), by_arrival);
  std::stable_sort(payments.begin(), payments.end(), by_arrival);
  for (Event& e : orders) in.order_records.push_back(e.record);
  for (Event& e : payments) in.payment_records.push_back(e.record);
  // The marker order (no payment: padded once the join's watermark passes
  // its bound), then sentinels far ahead in every partition of both topics
  // so that every partition's watermark gets there.
  Order marker{"marker", "c-marker", kMarkerTs};
  in.orders.push_back(marker);
  in.order_records.push_back({-1, marker.customer, OrderJson(marker)});
  for (int p = 0; p < kPartitions; ++p) {
    Order so{absl::StrCat("sentinel-", p), "c-sentinel", kMarkerTs + 2 * 60 * kMinute};
    in.orders.push_back(so);
    in.order_records.push_back({p, so.customer, OrderJson(so)});
    Payment sp{absl::StrCat("ps-", p), "o-none", kMarkerTs + 2 * 60 * kMinute};
    in.payments.push_back(sp);
    in.payment_records.push_back({p, sp.id, PaymentJson(sp)});
  }
  // Too late: new orders and payments in the first hours (some would match).
  for (int i = 0; i < 20; ++i) {
    Order o{absl::StrCat("late-o", i), absl::StrCat("c", i), kStart + uniform(0, kSpan / 2)};
    in.late_orders.push_back({-1, o.customer, OrderJson(o)});
    in.late_ids.insert(o.id);
    const Order& target = in.orders[static_cast<size_t>(i) * 7];
    Payment p{absl::StrCat("late-p", i), target.id, target.ts + kMinute};
    in.late_payments.push_back({-1, p.id, PaymentJson(p)});
    in.late_ids.insert(p.id);
  }
  return in;
}

// "order_id payment_id" per joined row (payment "-" when padded), sorted.
std::multiset<std::string> Offline(const Input& in) {
  std::multiset<std::string> rows;
  for (const Order& o : in.orders) {
    int matches = 0;
    for (const Payment& p : in.payments) {
      if (p.order == o.id && p.ts >= o.ts + kLower && p.ts <= o.ts + kUpper) {
        rows.insert(o.id + " " + p.id);
        ++matches;
      }
    }
    if (matches == 0) rows.insert(o.id + " -");
  }
  return rows;
}

std::multiset<std::string> JoinedRows(const std::string& dir) {
  std::multiset<std::string> rows;
  JsonDecoder decoder;
  const FieldPath order = FieldPath::Parse("left.order_id");
  const FieldPath payment = FieldPath::Parse("right.payment_id");
  for (const std::string& line : ReadParts(dir, "paid")) {
    Record r;
    SCOPED_TRACE(line);
    EXPECT_OK(decoder.Decode(line, &r));
    const Value p = r.GetPath(payment);
    rows.insert(std::string(r.GetPath(order).s) + " " +
                (p.type == ValueType::kString ? std::string(p.s) : std::string("-")));
  }
  return rows;
}

std::set<std::string> TooLateIds(const std::string& dir) {
  std::set<std::string> ids;
  JsonDecoder decoder;
  for (const std::string& line : ReadParts(dir, "too_late")) {
    Record r;
    SCOPED_TRACE(line);
    EXPECT_OK(decoder.Decode(line, &r));
    // A payment names its own id; an order only its order_id.
    const Value payment = r.GetPath(FieldPath::Parse("record.payment_id"));
    const Value order = r.GetPath(FieldPath::Parse("record.order_id"));
    ids.insert(std::string(payment.type == ValueType::kString ? payment.s : order.s));
  }
  return ids;
}

std::string JobYaml(const std::string& name, const std::string& suffix, const std::string& dir) {
  return absl::StrCat(R"(
apiVersion: caravela/v1
kind: Job
metadata: {name: )",
                      name, R"(}
spec:
  sources:
    - name: orders
      kafka: {topic: orders-)",
                      suffix, R"(}
      key: [customer]
      event_time: {field: ts, format: iso8601}
      watermark: {max_out_of_orderness: 2m}
    - name: payments
      kafka: {topic: payments-)",
                      suffix, R"(}
      key: [payment_id]
      event_time: {field: ts, format: iso8601}
      watermark: {max_out_of_orderness: 2m}
  operators:
    - name: unique_orders
      dedup: {from: orders, id: order_id, retention: 24h}
    - name: unique_payments
      dedup: {from: payments, id: payment_id, retention: 24h}
    - name: paid
      interval_join:
        left: unique_orders
        right: unique_payments
        on: [order_id]
        between: {lower: -5m, upper: 30m}
        type: left
  sinks:
    - {from: paid, file: {path: )",
                      dir, R"(/out/paid.jsonl}}
    - {from: paid.too_late, file: {path: )",
                      dir, R"(/out/too_late.jsonl}}
  dead_letter: {path: )",
                      dir, R"(/out/dead-letter.jsonl}
)");
}

class ParallelJoinTest : public ::testing::Test {
 protected:
  // Removed at the end (CARAVELA_KEEP_TEST_DIRS=1 keeps it).
  TempDir tmp_{"parallel-join", "CARAVELA_KEEP_TEST_DIRS", "parallel join test"};
  std::string TestDir() const { return tmp_.path().string(); }
  void SetUp() override {
    auto b = EmbeddedBroker::Start(0, kPartitions);
    ASSERT_OK(b.status());
    broker_ = std::move(*b);
    input_ = Generate();
  }

  // Runs the job with `parallelism` on topics of its own; returns the output dir.
  std::string Run(int parallelism) {
    const std::string suffix = absl::StrCat(parallelism);
    const std::string bootstrap = broker_->bootstrap();
    for (const char* t : {"orders-", "payments-"}) {
      EXPECT_OK(broker_->CreateTopic(t + suffix, kPartitions));
    }
    EXPECT_OK(ProduceRecords(bootstrap, "orders-" + suffix, input_.order_records, 60000));
    EXPECT_OK(ProduceRecords(bootstrap, "payments-" + suffix, input_.payment_records, 60000));
    std::string dir = absl::StrCat(TestDir(), "/parallel_join_", ::getpid(), "_", parallelism);
    std::filesystem::remove_all(dir);
    ParseResult parsed = ParseJobSpec(JobYaml("paid-" + suffix, suffix, dir));
    EXPECT_TRUE(parsed.ok()) << parsed.errors[0].ToString();
    if (!parsed.ok()) return dir;
    std::atomic<bool> end_of_input{false};
    RunOptions options;
    options.data_dir = dir + "/data";
    options.embedded_bootstrap = bootstrap;
    options.parallelism = parallelism;
    options.end_of_input = &end_of_input;
    auto pipeline = Pipeline::Create(parsed.spec, options);
    EXPECT_OK(pipeline.status());
    if (!pipeline.ok()) return dir;
    absl::Status status;
    std::thread runner([&] { status = (*pipeline)->Run(); });
    // The marker's padded row: the join's watermark passed every too-late record.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool marker = false;
    while (!marker && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (const std::string& l : ReadParts(dir + "/out", "paid")) {
        marker = marker || l.find("\"marker\"") != std::string::npos;
      }
    }
    EXPECT_TRUE(marker) << "the join's watermark never passed the marker";
    EXPECT_OK(ProduceRecords(bootstrap, "orders-" + suffix, input_.late_orders, 60000));
    EXPECT_OK(ProduceRecords(bootstrap, "payments-" + suffix, input_.late_payments, 60000));
    end_of_input = true;
    runner.join();
    EXPECT_OK(status);
    const int64_t total =
        static_cast<int64_t>(input_.order_records.size() + input_.payment_records.size() +
                             input_.late_orders.size() + input_.late_payments.size());
    MetricsRegistry& m = (*pipeline)->metrics();
    EXPECT_EQ(m.Value("records_in_total", "source=\"orders\"") +
                  m.Value("records_in_total", "source=\"payments\""),
              total);
    EXPECT_EQ(m.Value("dedup_duplicates_total", "op=\"unique_orders\"") +
                  m.Value("dedup_duplicates_total", "op=\"unique_payments\""),
              input_.retries);
    return dir;
  }

  std::unique_ptr<EmbeddedBroker> broker_;
  Input input_;
};

TEST_F(ParallelJoinTest, ExchangedIntervalJoinEqualsTheOfflineAnswerForParallelism1And3) {
  const std::multiset<std::string> want = Offline(input_);
  ASSERT_GT(want.size(), static_cast<size_t>(kOrders));
  ASSERT_GT(input_.retries, 100);
  for (int n : {1, 3}) {
    SCOPED_TRACE(absl::StrCat("parallelism ", n));
    const std::string dir = Run(n);
    const std::multiset<std::string> got = JoinedRows(dir + "/out");
    EXPECT_EQ(got.size(), want.size());
    std::vector<std::string> missing, extra;
    std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                        std::back_inserter(missing));
    std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                        std::back_inserter(extra));
    EXPECT_THAT(missing, ::testing::IsEmpty());
    EXPECT_THAT(extra, ::testing::IsEmpty());
    EXPECT_EQ(TooLateIds(dir + "/out"), input_.late_ids);
    if (n > 1) {
      // One part file per task of the join's stage.
      EXPECT_TRUE(std::filesystem::exists(dir + "/out/paid.part-2.jsonl"));
    }
  }
}

}  // namespace
}  // namespace caravela
