#pragma once

#include <string>

namespace caravela {

// Runs the live demo of `job_file` (a job reading Kafka topic `purchases` and
// writing `hourly-revenue` on the embedded broker, or on the Kafka at
// `bootstrap` when one is given: it creates the two topics there and
// refuses to run if they exist): produces `events` purchases over about
// `seconds` seconds while the job runs, prints each published revision, then
// drains and exits. Returns the process exit code.
int RunDemo(const std::string& job_file, int seconds, int events, bool quiet,
            const std::string& bootstrap = "");

}  // namespace caravela
