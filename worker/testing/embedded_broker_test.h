// A GoogleTest fixture base with one embedded Kafka broker for the whole
// suite (stopping a broker can take up to 1 s, so tests share it; every test
// uses its own topics).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "worker/connectors/embedded_broker.h"

namespace caravela {

class EmbeddedBrokerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto broker = EmbeddedBroker::Start(0, 4);
    ASSERT_TRUE(broker.ok()) << broker.status();
    broker_ = std::move(*broker);
  }
  static void TearDownTestSuite() { broker_.reset(); }

  static const std::string& bootstrap() { return broker_->bootstrap(); }

  static inline std::unique_ptr<EmbeddedBroker> broker_;
};

}  // namespace caravela
