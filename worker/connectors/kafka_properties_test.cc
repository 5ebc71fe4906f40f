// librdkafka properties passed through (kafka_properties.h): the worker's
// --kafka-property items and a job's kafka.properties reach the clients, in
// that order, and what is refused is refused with a reason.
#include "worker/connectors/kafka_properties.h"

#include <librdkafka/rdkafka.h>

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/connectors/kafka_source.h"
#include "worker/connectors/sink_factory.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/testing/embedded_broker_test.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// Resets the process's properties when a test ends.
class KafkaPropertiesTest : public EmbeddedBrokerTest {
 protected:
  void TearDown() override { ASSERT_OK(SetProcessKafkaProperties({})); }
};

// A property's value in `conf`, or "<unset>".
std::string Get(const KafkaConfPtr& conf, const char* name) {
  char value[512];
  size_t size = sizeof(value);
  if (rd_kafka_conf_get(conf.get(), name, value, &size) != RD_KAFKA_CONF_OK) return "<unset>";
  return value;
}

// A job with one Kafka source and one Kafka sink, both with `properties`.
JobSpec Job(const std::string& bootstrap, const std::string& properties) {
  (void)BuiltinKinds();
  ParseResult r = ParseJobSpec(absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: props}
spec:
  sources:
    - name: in
      kafka: {topic: props-in, bootstrap: ")",
                                            bootstrap, R"(", properties: )", properties, R"(}
      event_time: {field: ts}
  sinks:
    - {from: in, kafka: {topic: props-out, bootstrap: ")",
                                            bootstrap, R"(", properties: )", properties, R"(}}
)"));
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].ToString());
  return r.spec;
}

TEST_F(KafkaPropertiesTest, ProcessPropertiesComeAfterCaravelasOwn) {
  ASSERT_OK(SetProcessKafkaProperties(
      {"client.rack=rack-7", "client.id=from-the-worker", "socket.keepalive.enable=true"}));
  EXPECT_THAT(ProcessKafkaProperties(),
              ElementsAre(Pair("client.rack", "rack-7"), Pair("client.id", "from-the-worker"),
                          Pair("socket.keepalive.enable", "true")));
  absl::StatusOr<KafkaConfPtr> conf =
      NewKafkaConf({{"client.id", "caravela-source"}, {"fetch.wait.max.ms", "100"}});
  ASSERT_OK(conf.status());
  EXPECT_EQ(Get(*conf, "client.rack"), "rack-7");
  EXPECT_EQ(Get(*conf, "client.id"), "from-the-worker");  // over Caravela's default
  EXPECT_EQ(Get(*conf, "fetch.wait.max.ms"), "100");      // untouched
  EXPECT_EQ(Get(*conf, "socket.keepalive.enable"), "true");

  // Cleared: none any more.
  ASSERT_OK(SetProcessKafkaProperties({}));
  conf = NewKafkaConf({{"client.id", "caravela-source"}});
  ASSERT_OK(conf.status());
  EXPECT_EQ(Get(*conf, "client.id"), "caravela-source");
  EXPECT_NE(Get(*conf, "client.rack"), "rack-7");
}

TEST_F(KafkaPropertiesTest, BadProcessPropertiesAreRefusedAndChangeNothing) {
  ASSERT_OK(SetProcessKafkaProperties({"client.rack=r1"}));
  auto refused = [](const std::vector<std::string>& items) {
    absl::Status st = SetProcessKafkaProperties(items);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    return std::string(st.message());
  };
  EXPECT_EQ(refused({"client.rack=r2", "no.such.property=1"}),
            "--kafka-property: kafka property no.such.property: No such configuration property: "
            "\"no.such.property\"");
  EXPECT_EQ(refused({"security.protocol"}),
            "--kafka-property security.protocol: expected KEY=VALUE, e.g. "
            "security.protocol=SASL_SSL");
  EXPECT_THAT(refused({"=x"}), HasSubstr("expected KEY=VALUE"));
  EXPECT_EQ(refused({"security.protocol=carrier-pigeon"}),
            "--kafka-property: kafka property security.protocol: Invalid value "
            "\"carrier-pigeon\" for configuration property \"security.protocol\"");
  EXPECT_THAT(refused({"enable.auto.commit=true"}),
              HasSubstr("enable.auto.commit is set by Caravela: the checkpoints own the source "
                        "offsets"));
  EXPECT_THAT(refused({"bootstrap.servers=b:9092"}), HasSubstr("the worker's --bootstrap"));
  EXPECT_THAT(refused({"isolation.level=read_committed"}),
              HasSubstr("set it on a source"));  // a sink's commit markers need read_committed
  // Nothing changed.
  EXPECT_THAT(ProcessKafkaProperties(), ElementsAre(Pair("client.rack", "r1")));
  // Values may hold '=' and blanks; blank items (a trailing newline of
  // CARAVELA_KAFKA_PROPERTY) are skipped.
  ASSERT_OK(SetProcessKafkaProperties({" sasl.username = a=b ", ""}));
  EXPECT_THAT(ProcessKafkaProperties(), ElementsAre(Pair("sasl.username", " a=b ")));
}

TEST(KafkaPropertiesSecretsTest, SecretsAreNeverPrinted) {
  EXPECT_TRUE(IsSecretKafkaProperty("sasl.password"));
  EXPECT_TRUE(IsSecretKafkaProperty("ssl.key.password"));
  EXPECT_TRUE(IsSecretKafkaProperty("ssl.keystore.password"));
  EXPECT_TRUE(IsSecretKafkaProperty("sasl.oauthbearer.client.secret"));
  EXPECT_TRUE(IsSecretKafkaProperty("ssl.key.pem"));
  EXPECT_FALSE(IsSecretKafkaProperty("sasl.username"));
  EXPECT_FALSE(IsSecretKafkaProperty("ssl.ca.location"));
}

// The properties reach the clients: TLS with a CA file that does not exist
// makes librdkafka refuse to create the client, naming the property.
TEST_F(KafkaPropertiesTest, JobPropertiesReachTheSourceAndSinkClients) {
  const JobSpec spec = Job(bootstrap(), R"({security.protocol: SSL,
                                            ssl.ca.location: /nonexistent/ca.pem})");
  SourceContext sc;
  sc.job_name = "props";
  absl::StatusOr<std::unique_ptr<RawSource>> source =
      spec.sources[0].kind->Create(spec.sources[0], sc);
  ASSERT_FALSE(source.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(source.status())) << source.status();
  EXPECT_THAT(source.status().message(), HasSubstr("ssl.ca.location"));

  SinkContext kc;
  kc.job_name = "props";
  absl::StatusOr<std::unique_ptr<Sink>> sink = MakeSink(spec.sinks[0], kc);
  ASSERT_OK(sink.status());
  absl::Status opened = (*sink)->Open();
  EXPECT_TRUE(absl::IsInvalidArgument(opened)) << opened;
  EXPECT_THAT(opened.message(), HasSubstr("ssl.ca.location"));
}

// The same through the worker's properties; a job's own properties win.
TEST_F(KafkaPropertiesTest, ProcessPropertiesReachEveryClientAndTheJobsWin) {
  ASSERT_OK(SetProcessKafkaProperties(
      {"security.protocol=SSL", "ssl.ca.location=/nonexistent/worker-ca.pem"}));
  const JobSpec plain = Job(bootstrap(), "{}");
  SourceContext sc;
  sc.job_name = "props";
  absl::StatusOr<std::unique_ptr<RawSource>> source =
      plain.sources[0].kind->Create(plain.sources[0], sc);
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(source.status().message(), HasSubstr("ssl.ca.location"));
  KafkaSinkOptions so;
  so.bootstrap = bootstrap();
  so.topic = "props-out";
  KafkaSink direct(so);
  EXPECT_THAT(direct.Open().message(), HasSubstr("ssl.ca.location"));

  // The job says plaintext: its clients connect to the (plaintext) broker.
  ASSERT_OK(broker_->CreateTopic("props-in", 1));
  ASSERT_OK(broker_->CreateTopic("props-out", 1));
  const JobSpec plaintext = Job(bootstrap(), "{security.protocol: PLAINTEXT}");
  source = plaintext.sources[0].kind->Create(plaintext.sources[0], sc);
  ASSERT_OK(source.status());
  SinkContext kc;
  kc.job_name = "props";
  absl::StatusOr<std::unique_ptr<Sink>> sink = MakeSink(plaintext.sinks[0], kc);
  ASSERT_OK(sink.status());
  ASSERT_OK((*sink)->Open());
  ASSERT_OK((*sink)->Close());
}

}  // namespace
}  // namespace caravela
