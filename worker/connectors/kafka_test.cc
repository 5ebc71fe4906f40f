// Kafka connectors against the suite's Kafka (TestKafka: Apache Kafka when
// installed, or CARAVELA_TEST_KAFKA=apache|embedded) on loopback, and kcat
// when installed; the embedded broker's own tests and the TEST()s without a
// fixture start an EmbeddedBroker of their own. Every wait is a bounded polling loop with a
// deadline.
#include <librdkafka/rdkafka.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/connectors/awaiting_topic_source.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/connectors/kafka_source.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/testing/status_testing.h"
#include "worker/testing/test_kafka.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

struct Read {
  std::string payload;
  std::string key;
  int32_t partition;
  int64_t offset;
  int64_t timestamp_ms;
};

// Polls `source` until `n` messages arrived or `timeout_ms` passed.
std::vector<Read> ReadN(KafkaSource& source, size_t n, int timeout_ms = 5000) {
  std::vector<Read> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    auto polled = source.Poll(100, 50, [&](const RawMessage& m) {
      out.push_back(
          {std::string(m.payload), std::string(m.key), m.partition, m.offset, m.timestamp_ms});
    });
    EXPECT_TRUE(polled.ok()) << polled.status();
    if (!polled.ok()) break;
  }
  return out;
}

// A loopback port nobody listens on (free at the time of the call).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ADD_FAILURE() << "no free port: " << strerror(errno);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// Runs `cmd` with sh; returns its stdout and exit status.
std::pair<std::string, int> Shell(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return {"", -1};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return {out, pclose(f)};
}

bool HaveKcat() {
  return access("/usr/bin/kcat", X_OK) == 0 || Shell("command -v kcat").second == 0;
}

class KafkaTest : public KafkaSuiteTest {
 protected:
  KafkaSourceOptions Options(const std::string& topic) {
    KafkaSourceOptions o;
    o.bootstrap = bootstrap();
    o.topic = topic;
    return o;
  }
};

TEST_F(KafkaTest, BrokerCreatesTopicsOnce) {
  CARAVELA_SKIP_UNLESS_EMBEDDED_KAFKA(kafka_, "EmbeddedBroker's own CreateTopic and address");
  EmbeddedBroker* broker = kafka_->embedded();
  EXPECT_THAT(broker->bootstrap(), ::testing::StartsWith("127.0.0.1:"));
  EXPECT_EQ(broker->bootstrap(), broker->advertised());
  ASSERT_OK(broker->CreateTopic("t", 3));
  EXPECT_TRUE(absl::IsAlreadyExists(broker->CreateTopic("t", 3)));
  EXPECT_TRUE(absl::IsInvalidArgument(broker->CreateTopic("u", 0)));
  ASSERT_OK(broker->CreateTopic("v"));  // default partitions

  KafkaSource source(Options("t"));
  ASSERT_OK(source.Open());
  EXPECT_EQ(source.PartitionCount(), 3);
  KafkaSource v(Options("v"));
  ASSERT_OK(v.Open());
  EXPECT_EQ(v.PartitionCount(), 4);
}

// The watch on the embedded broker finds the mock cluster's thread and
// reads its CPU time, which grows with the requests it serves
// (docs/benchmarks.md "The embedded broker's ceiling").
TEST_F(KafkaTest, TheMockClustersCpuTimeIsMeasured) {
  CARAVELA_SKIP_UNLESS_EMBEDDED_KAFKA(kafka_, "it measures the mock cluster's thread");
  EmbeddedBroker* broker = kafka_->embedded();
  const double before = MockThreadCpuSeconds();
  ASSERT_GE(before, 0) << "no rdk:mock thread in /proc/self/task";
  ASSERT_OK(broker->CreateTopic("load", 1));
  for (int round = 0; round < 20; ++round) {
    std::vector<KafkaTestRecord> batch;
    for (int i = 0; i < 1000; ++i)
      batch.push_back({-1, "k", absl::StrCat("value ", round, " ", i)});
    ASSERT_OK(ProduceRecords(bootstrap(), "load", batch));
  }
  for (int i = 0; i < 5; ++i) {
    KafkaSource source(Options("load"));
    ASSERT_OK(source.Open());
    EXPECT_EQ(ReadN(source, 20000).size(), 20000u);
  }
  EXPECT_GE(MockThreadCpuSeconds(), before);
  EXPECT_LE(broker->busy_fraction(), 1.5);  // -1 until the first 5 s sample
}

TEST_F(KafkaTest, SourceReadsEveryPartitionWithOffsetsAndBacklog) {
  ASSERT_OK(kafka_->CreateTopic("in", 4));
  ASSERT_TRUE(ProduceLines(bootstrap(), "in",
                           {{0, "a0"}, {1, "b0"}, {0, "a1"}, {2, "c0"}, {0, "a2"}, {2, "c1"}})
                  .ok());
  KafkaSource source(Options("in"));
  ASSERT_OK(source.Open());
  ASSERT_EQ(source.PartitionCount(), 4);
  EXPECT_FALSE(source.Bounded());
  EXPECT_THAT(source.Positions(), ElementsAre(0, 0, 0, 0));
  EXPECT_EQ(source.Backlog(0), 3);
  EXPECT_EQ(source.Backlog(1), 1);
  EXPECT_EQ(source.Backlog(2), 2);
  EXPECT_EQ(source.Backlog(3), 0);

  std::vector<Read> got = ReadN(source, 6);
  ASSERT_EQ(got.size(), 6u);
  std::map<int32_t, std::vector<std::pair<int64_t, std::string>>> by_partition;
  for (const Read& r : got) {
    by_partition[r.partition].push_back({r.offset, r.payload});
    EXPECT_TRUE(r.key.empty());
    EXPECT_GT(r.timestamp_ms, 1'600'000'000'000);  // producer CreateTime
  }
  using P = std::pair<int64_t, std::string>;
  EXPECT_THAT(by_partition[0], ElementsAre(P{0, "a0"}, P{1, "a1"}, P{2, "a2"}));
  EXPECT_THAT(by_partition[1], ElementsAre(P{0, "b0"}));
  EXPECT_THAT(by_partition[2], ElementsAre(P{0, "c0"}, P{1, "c1"}));
  EXPECT_EQ(by_partition.count(3), 0u);
  EXPECT_THAT(source.Positions(), ElementsAre(3, 1, 2, 0));
  for (int p = 0; p < 4; ++p) EXPECT_EQ(source.Backlog(p), 0) << p;

  // Nothing more: Poll returns 0 after its timeout.
  auto none = source.Poll(10, 20, [](const RawMessage&) {});
  ASSERT_OK(none);
  EXPECT_EQ(*none, 0);

  // New records keep flowing to the open source.
  ASSERT_OK(ProduceLines(bootstrap(), "in", {{3, "d0"}, {0, "a3"}}));
  got = ReadN(source, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_THAT(source.Positions(), ElementsAre(4, 1, 2, 1));
}

TEST_F(KafkaTest, PollRespectsMaxMessages) {
  ASSERT_OK(kafka_->CreateTopic("many", 1));
  std::vector<std::pair<int32_t, std::string>> msgs;
  msgs.reserve(50);
  for (int i = 0; i < 50; ++i) msgs.push_back({0, absl::StrCat("m", i)});
  ASSERT_OK(ProduceLines(bootstrap(), "many", msgs));
  KafkaSource source(Options("many"));
  ASSERT_OK(source.Open());
  int total = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int64_t next = 0;
  while (total < 50 && std::chrono::steady_clock::now() < deadline) {
    auto n = source.Poll(7, 50, [&](const RawMessage& m) {
      EXPECT_EQ(m.offset, next);
      EXPECT_EQ(m.payload, absl::StrCat("m", next));
      ++next;
    });
    ASSERT_OK(n);
    EXPECT_LE(*n, 7);
    total += *n;
  }
  EXPECT_EQ(total, 50);
  EXPECT_EQ(source.Backlog(0), 0);
}

TEST_F(KafkaTest, SourceStartsFromExplicitOffsetsAndLatest) {
  ASSERT_OK(kafka_->CreateTopic("resume", 4));
  ASSERT_TRUE(ProduceLines(bootstrap(), "resume",
                           {{0, "a0"}, {0, "a1"}, {0, "a2"}, {1, "b0"}, {2, "c0"}, {2, "c1"}})
                  .ok());
  KafkaSourceOptions o = Options("resume");
  o.start = "latest";
  o.start_offsets = {{0, 2}, {2, 1}};
  KafkaSource source(o);
  ASSERT_OK(source.Open());
  EXPECT_THAT(source.Positions(), ElementsAre(2, 1, 1, 0));  // p1, p3 at the log end
  EXPECT_EQ(source.Backlog(0), 1);
  EXPECT_EQ(source.Backlog(1), 0);
  std::vector<Read> got = ReadN(source, 2);
  ASSERT_EQ(got.size(), 2u);
  std::set<std::pair<int32_t, int64_t>> seen;
  for (const Read& r : got) seen.insert({r.partition, r.offset});
  EXPECT_THAT(seen, UnorderedElementsAre(std::pair<int32_t, int64_t>{0, 2},
                                         std::pair<int32_t, int64_t>{2, 1}));
  ASSERT_OK(ProduceLines(bootstrap(), "resume", {{1, "b1"}}));
  got = ReadN(source, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].partition, 1);
  EXPECT_EQ(got[0].offset, 1);
  EXPECT_EQ(got[0].payload, "b1");
  EXPECT_THAT(source.Positions(), ElementsAre(3, 2, 2, 0));
}

// A topic that does not exist yet: the source opens, reads nothing and says
// what it waits for; once the topic is created (with 4 partitions) it reads
// its share of them (p % 2 == 1) from the start.
TEST_F(KafkaTest, AwaitingTopicSourceReadsItsShareOnceTheTopicExists) {
  AwaitingTopicSource source(Options("later"), /*bounded=*/false, /*share_tasks=*/2,
                             /*share_index=*/1);
  ASSERT_OK(source.Open());
  EXPECT_EQ(source.PartitionCount(), 0);
  EXPECT_EQ(source.Waiting(), "waiting for topic later on " + bootstrap());
  EXPECT_TRUE(source.Positions().empty());
  EXPECT_FALSE(source.Exhausted());
  auto nothing = source.Poll(10, 20, [](const RawMessage& m) { ADD_FAILURE() << m.payload; });
  ASSERT_OK(nothing);
  EXPECT_EQ(*nothing, 0);

  ASSERT_OK(kafka_->CreateTopic("later", 4));
  ASSERT_OK(ProduceLines(bootstrap(), "later", {{0, "a0"}, {1, "b0"}, {3, "d0"}}));
  std::set<std::string> payloads;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (payloads.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    auto n =
        source.Poll(10, 50, [&](const RawMessage& m) { payloads.insert(std::string(m.payload)); });
    ASSERT_OK(n);
  }
  EXPECT_THAT(payloads, UnorderedElementsAre("b0", "d0"));
  EXPECT_EQ(source.PartitionCount(), 4);
  EXPECT_EQ(source.Waiting(), "");
  EXPECT_THAT(source.Positions(), ElementsAre(-1, 1, -1, 1));
}

TEST_F(KafkaTest, SourceReadsOnlyItsPartitions) {
  ASSERT_OK(kafka_->CreateTopic("subset", 4));
  ASSERT_TRUE(ProduceLines(bootstrap(), "subset",
                           {{0, "a0"}, {1, "b0"}, {1, "b1"}, {2, "c0"}, {3, "d0"}, {3, "d1"}})
                  .ok());
  KafkaSourceOptions o = Options("subset");
  o.partitions = {3, 1};
  o.start_offsets = {{0, 5}, {3, 1}};  // p0 is not read: its entry is ignored
  KafkaSource source(o);
  ASSERT_OK(source.Open());
  EXPECT_EQ(source.PartitionCount(), 4);
  EXPECT_THAT(source.Positions(), ElementsAre(-1, 0, -1, 1));
  EXPECT_EQ(source.Backlog(0), 0);
  EXPECT_EQ(source.Backlog(1), 2);
  EXPECT_EQ(source.Backlog(2), 0);
  EXPECT_EQ(source.Backlog(3), 1);
  std::vector<Read> got = ReadN(source, 3);
  ASSERT_EQ(got.size(), 3u);
  std::set<std::string> payloads;
  for (const Read& r : got) payloads.insert(r.payload);
  EXPECT_THAT(payloads, UnorderedElementsAre("b0", "b1", "d1"));
  EXPECT_THAT(source.Positions(), ElementsAre(-1, 2, -1, 2));

  // "latest" starts each owned partition at its end when Open() runs.
  KafkaSourceOptions latest = Options("subset");
  latest.partitions = {0, 3};
  latest.start = "latest";
  KafkaSource tail(latest);
  ASSERT_OK(tail.Open());
  EXPECT_THAT(tail.Positions(), ElementsAre(1, -1, -1, 2));
  EXPECT_EQ(tail.Backlog(0), 0);
  ASSERT_OK(ProduceLines(bootstrap(), "subset", {{2, "c1"}, {3, "d2"}, {0, "a1"}}));
  got = ReadN(tail, 2);
  ASSERT_EQ(got.size(), 2u);
  payloads.clear();
  for (const Read& r : got) payloads.insert(r.payload);
  EXPECT_THAT(payloads, UnorderedElementsAre("a1", "d2"));
  EXPECT_THAT(tail.Positions(), ElementsAre(2, -1, -1, 3));
  // Nothing from p1/p2 ever shows up.
  auto none = tail.Poll(10, 50, [](const RawMessage& m) { ADD_FAILURE() << m.payload; });
  ASSERT_OK(none);

  // Bounded reading ends once the owned partitions are drained.
  ASSERT_OK(tail.StopAtCurrentEnd());
  EXPECT_TRUE(tail.Exhausted());

  KafkaSourceOptions bad = Options("subset");
  bad.partitions = {4};
  EXPECT_TRUE(absl::IsInvalidArgument(KafkaSource(bad).Open()));
}

TEST_F(KafkaTest, StopAtCurrentEndDeliversWhatExistsThenEnds) {
  ASSERT_OK(kafka_->CreateTopic("bounded", 3));
  ASSERT_TRUE(ProduceLines(bootstrap(), "bounded", {{0, "a0"}, {0, "a1"}, {2, "c0"}}).ok());
  KafkaSource source(Options("bounded"));
  ASSERT_OK(source.Open());
  EXPECT_FALSE(source.Bounded());
  EXPECT_FALSE(source.Exhausted());
  int first = 0;  // read one record before stopping
  const auto first_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (first == 0 && std::chrono::steady_clock::now() < first_deadline) {
    auto n = source.Poll(1, 50, [](const RawMessage&) {});
    ASSERT_TRUE(n.ok()) << n.status();
    first += *n;
  }
  ASSERT_EQ(first, 1);

  ASSERT_OK(source.StopAtCurrentEnd());
  EXPECT_TRUE(source.Bounded());
  EXPECT_FALSE(source.Exhausted());
  // Records produced after the stop are not delivered.
  ASSERT_OK(ProduceLines(bootstrap(), "bounded", {{0, "a2"}, {1, "b0"}}));
  std::vector<Read> rest;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!source.Exhausted() && std::chrono::steady_clock::now() < deadline) {
    auto polled = source.Poll(100, 50, [&](const RawMessage& m) {
      rest.push_back({std::string(m.payload), "", m.partition, m.offset, 0});
    });
    ASSERT_TRUE(polled.ok()) << polled.status();
  }
  EXPECT_TRUE(source.Exhausted());
  EXPECT_EQ(rest.size(), 2u);
  for (const Read& r : rest) EXPECT_NE(r.payload, "a2");
  EXPECT_THAT(source.Positions(), ElementsAre(2, 0, 1));
  for (int p = 0; p < 3; ++p) EXPECT_EQ(source.Backlog(p), 0) << p;
  auto after = source.Poll(100, 50, [](const RawMessage&) { ADD_FAILURE() << "after the end"; });
  ASSERT_OK(after);
  EXPECT_EQ(*after, 0);
}

TEST_F(KafkaTest, SourceRejectsBadStarts) {
  ASSERT_OK(kafka_->CreateTopic("small", 2));
  ASSERT_OK(ProduceLines(bootstrap(), "small", {{0, "x"}}));

  KafkaSourceOptions beyond = Options("small");
  beyond.start_offsets = {{0, 5}};
  EXPECT_TRUE(absl::IsDataLoss(KafkaSource(beyond).Open()));

  KafkaSourceOptions no_partition = Options("small");
  no_partition.start_offsets = {{7, 0}};
  EXPECT_TRUE(absl::IsInvalidArgument(KafkaSource(no_partition).Open()));

  KafkaSourceOptions bad_start = Options("small");
  bad_start.start = "middle";
  EXPECT_TRUE(absl::IsInvalidArgument(KafkaSource(bad_start).Open()));

  KafkaSourceOptions missing = Options("no-such-topic");
  missing.open_timeout_ms = 300;
  absl::Status opened = KafkaSource(missing).Open();
  EXPECT_TRUE(absl::IsNotFound(opened)) << opened;
}

TEST_F(KafkaTest, SinkWritesKeyedRecords) {
  ASSERT_OK(kafka_->CreateTopic("out", 4));
  KafkaSinkOptions o;
  o.bootstrap = bootstrap();
  o.topic = "out";
  KafkaSink sink(o);
  ASSERT_OK(sink.Open());
  ASSERT_OK(sink.Write("k1", R"({"v":1})"));
  ASSERT_OK(sink.Write("k2", R"({"v":2})"));
  ASSERT_OK(sink.Write("k1", R"({"v":3})"));
  ASSERT_OK(sink.Write("", R"({"v":4})"));
  ASSERT_OK(sink.Flush());
  EXPECT_EQ(sink.delivered(), 4);
  ASSERT_OK(sink.Close());

  auto records = ConsumeAll(bootstrap(), "out");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 4u);
  std::map<std::string, std::vector<std::string>> by_key;
  std::map<std::string, std::set<int32_t>> partitions;
  for (const KafkaConsumedRecord& r : *records) {
    std::string key = r.has_key ? r.key : "<null>";
    by_key[key].push_back(r.value);
    partitions[key].insert(r.partition);
  }
  EXPECT_THAT(by_key["k1"], ElementsAre(R"({"v":1})", R"({"v":3})"));  // same partition, in order
  EXPECT_THAT(by_key["k2"], ElementsAre(R"({"v":2})"));
  EXPECT_THAT(by_key["<null>"], ElementsAre(R"({"v":4})"));
  EXPECT_EQ(partitions["k1"].size(), 1u);

  auto values = ConsumeAllValues(bootstrap(), "out");
  ASSERT_OK(values);
  EXPECT_EQ(values->size(), 4u);
}

TEST(KafkaSinkTest, OpenFailsWithoutBroker) {
  KafkaSinkOptions o;
  o.bootstrap = absl::StrCat("127.0.0.1:", FreePort());  // nobody listens
  o.topic = "nowhere";
  o.open_timeout_ms = 200;
  absl::Status opened = KafkaSink(o).Open();
  EXPECT_TRUE(absl::IsUnavailable(opened)) << opened;
}

TEST(KafkaSinkTest, FlushReportsFailedDeliveryAndStaysFailed) {
  auto broker = EmbeddedBroker::Start(0, 4);
  ASSERT_TRUE(broker.ok()) << broker.status();
  KafkaSinkOptions o;
  o.bootstrap = (*broker)->bootstrap();
  o.topic = "doomed";
  o.config = {{"message.timeout.ms", "300"}};
  KafkaSink sink(o);
  ASSERT_OK(sink.Open());
  broker->reset();  // the broker goes away before the record is delivered
  ASSERT_OK(sink.Write("k", "{}"));
  absl::Status flushed = sink.Flush();
  EXPECT_TRUE(absl::IsUnavailable(flushed)) << flushed;
  EXPECT_FALSE(sink.Write("k", "{}").ok());
  EXPECT_FALSE(sink.Close().ok());
}

TEST(EmbeddedBrokerTest, ServesAChosenPort) {
  const int port = FreePort();
  auto broker = EmbeddedBroker::Start(port, 4);
  ASSERT_TRUE(broker.ok()) << broker.status();
  const std::string bootstrap = absl::StrCat("127.0.0.1:", port);
  EXPECT_EQ((*broker)->bootstrap(), bootstrap);
  EXPECT_NE((*broker)->advertised(), bootstrap);

  // A second broker cannot take the same port.
  EXPECT_TRUE(absl::IsUnavailable(EmbeddedBroker::Start(port, 4).status()));

  // Clients bootstrapping on the chosen port work end to end; the topic is
  // auto-created by the producer with the mock's fixed partition count.
  ASSERT_OK(ProduceRecords(bootstrap, "fixed", {{-1, "k", "v1"}, {-1, "k", "v2"}}));
  auto records = ConsumeAll(bootstrap, "fixed");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].value, "v1");
  EXPECT_EQ((*records)[1].value, "v2");
  KafkaSourceOptions o;
  o.bootstrap = bootstrap;
  o.topic = "fixed";
  KafkaSource source(o);
  ASSERT_OK(source.Open());
  EXPECT_EQ(source.PartitionCount(), EmbeddedBroker::kAutoCreatePartitions);
}

TEST(EmbeddedBrokerTest, RejectsBadArguments) {
  EXPECT_TRUE(absl::IsInvalidArgument(EmbeddedBroker::Start(-1, 4).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(EmbeddedBroker::Start(0, 0).status()));
  // A partition count the mock cannot apply to auto-created topics.
  EXPECT_TRUE(absl::IsInvalidArgument(RunBrokerCommand(0, 8)));
}

// `caravela broker` in a child process: prints its address, serves clients,
// stops cleanly on SIGTERM.
TEST(EmbeddedBrokerTest, BrokerCommandServesUntilSigterm) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();  // no other threads run here: earlier clients are gone
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    absl::Status status = RunBrokerCommand(0, 4, {"cmd"});
    _exit(status.ok() ? 0 : 1);
  }
  close(out[1]);
  // Read stdout until the address line (log lines may come first).
  const std::string prefix = "caravela broker listening on ";
  std::string text;
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (line.empty() && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{out[0], POLLIN, 0};
    if (poll(&pfd, 1, 50) <= 0) continue;
    char buf[512];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    for (absl::string_view l : absl::StrSplit(text, '\n')) {
      if (absl::StartsWith(l, prefix) && absl::EndsWith(l, " (4 partitions per new topic)")) {
        line = std::string(l);
      }
    }
  }
  ASSERT_FALSE(line.empty()) << text;
  const std::string bootstrap(
      absl::StripSuffix(absl::StripPrefix(line, prefix), " (4 partitions per new topic)"));
  EXPECT_THAT(bootstrap, ::testing::StartsWith("127.0.0.1:"));

  EXPECT_OK(ProduceLines(bootstrap, "cmd", {{3, "hello"}}));
  auto records = ConsumeAll(bootstrap, "cmd");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].partition, 3);
  EXPECT_EQ((*records)[0].value, "hello");

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int wstatus = 0;
  pid_t waited = 0;
  const auto exit_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((waited = waitpid(pid, &wstatus, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < exit_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (waited == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &wstatus, 0);
  }
  close(out[0]);  // only now: the child still logs while stopping
  ASSERT_NE(waited, 0) << "broker did not stop on SIGTERM";
  ASSERT_TRUE(WIFEXITED(wstatus)) << wstatus;
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
}

TEST_F(KafkaTest, InteroperatesWithKcat) {
  if (!HaveKcat()) GTEST_SKIP() << "kcat not installed";
  const std::string b = bootstrap();
  ASSERT_OK(kafka_->CreateTopic("kin", 4));
  auto [out, rc] =
      Shell(absl::StrCat("printf 'x0\\nx1\\nx2\\n' | kcat -b ", b, " -t kin -P -p 2 2>&1"));
  ASSERT_EQ(rc, 0) << out;
  KafkaSource source(Options("kin"));
  ASSERT_OK(source.Open());
  std::vector<Read> got = ReadN(source, 3);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].partition, 2);
    EXPECT_EQ(got[i].offset, i);
    EXPECT_EQ(got[i].payload, absl::StrCat("x", i));
  }
  EXPECT_THAT(source.Positions(), ElementsAre(0, 0, 3, 0));

  ASSERT_OK(kafka_->CreateTopic("kout", 4));
  KafkaSinkOptions o;
  o.bootstrap = b;
  o.topic = "kout";
  KafkaSink sink(o);
  ASSERT_OK(sink.Open());
  ASSERT_OK(sink.Write("w1", R"({"n":1})"));
  ASSERT_OK(sink.Write("w2", R"({"n":2})"));
  ASSERT_OK(sink.Write("", R"({"n":3})"));
  ASSERT_OK(sink.Close());
  std::tie(out, rc) =
      Shell(absl::StrCat("kcat -b ", b, " -t kout -C -e -q -f '%k|%s\\n' 2>/dev/null"));
  ASSERT_EQ(rc, 0);
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  EXPECT_THAT(lines, UnorderedElementsAre(R"(w1|{"n":1})", R"(w2|{"n":2})", R"(|{"n":3})"));
}

// A configuration librdkafka refuses only when the client is made (each
// property alone is valid) is permanent; the campaign found that a client
// whose threads did not start in time was called permanent as well and
// failed the job (NewKafkaClient now says Unavailable for anything but a
// refused configuration).
TEST(NewKafkaClientTest, ARefusedConfigurationIsInvalidArgument) {
  auto conf = NewKafkaConf(
      {{"bootstrap.servers", "127.0.0.1:1"}, {"enable.idempotence", "true"}, {"acks", "1"}});
  ASSERT_OK(conf.status());
  auto rk = NewKafkaClient(KafkaClientType::kProducer, std::move(*conf), "kafka producer");
  ASSERT_FALSE(rk.ok());
  EXPECT_EQ(rk.status().code(), absl::StatusCode::kInvalidArgument) << rk.status();
  EXPECT_THAT(std::string(rk.status().message()), ::testing::HasSubstr("kafka producer: "));
}

TEST(NewKafkaClientTest, AClientOwnsItsConfiguration) {
  auto conf = NewKafkaConf({{"bootstrap.servers", "127.0.0.1:1"}});
  ASSERT_OK(conf.status());
  auto rk = NewKafkaClient(KafkaClientType::kProducer, std::move(*conf), "kafka producer");
  ASSERT_OK(rk.status());
  rd_kafka_destroy(*rk);
}

}  // namespace
}  // namespace caravela
