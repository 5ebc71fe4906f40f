#pragma once

#include <string>

namespace caravela {

// Runs the live demo of `job_file` (a job reading Kafka topic `purchases` and
// writing `hourly-revenue` on the embedded broker): produces `events`
// purchases over about `seconds` seconds while the job runs, prints each
// published revision, then drains and exits. Returns the process exit code.
int RunDemo(const std::string& job_file, int seconds, int events, bool quiet);

}  // namespace caravela
