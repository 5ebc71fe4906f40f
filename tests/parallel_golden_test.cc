// Every golden job and example job, replayed from Kafka (SPEC §8): each file
// source becomes a bounded topic of 4 to 6 partitions on the embedded broker
// (lines dealt round robin, so a partition holds every k-th line in order)
// that keeps the file's `arrival_field`, and the job runs with parallelism 1,
// 2, 3 and 4. With arrival fields processing time is simulated (the tasks
// run in lockstep in arrival order, SPEC §8), so every sink's output, early
// and late revisions included, is the same multiset of lines for every
// parallelism: the keys are spread over different tasks and part files, but
// what each key gets is byte-identical.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "tests/test_util.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"
#include "worker/testing/embedded_broker_test.h"
#include "worker/testing/status_testing.h"

namespace fs = std::filesystem;

namespace caravela {
namespace {

std::vector<std::string> ReadLines(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// Per output stem (the sink's file name without a `.part-<i>` suffix, or a
// dead letter's `.part-s<stage>-<i>`): the sorted lines of every file under
// `dir` (recursively).
std::map<std::string, std::vector<std::string>> Outputs(const fs::path& dir) {
  static const std::regex part(R"(\.part-(?:s[0-9]+-)?[0-9]+(\.[a-z]+)$)");
  std::map<std::string, std::vector<std::string>> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).string();
    if (rel.find("pending") != std::string::npos) continue;
    const std::string stem = std::regex_replace(rel, part, "$1");
    std::vector<std::string>& lines = out[stem];
    for (std::string& l : ReadLines(e.path())) lines.push_back(std::move(l));
  }
  for (auto& [stem, lines] : out) std::sort(lines.begin(), lines.end());
  return out;
}

struct Case {
  std::string name;
  fs::path job;  // job.yaml (or another .yaml) of a golden or example job
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.job.string(); }

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* root : {"tests/golden", "config/examples"}) {
    const fs::path dir = fs::path(CARAVELA_SOURCE_DIR) / root;
    for (const auto& e : fs::directory_iterator(dir)) {
      std::vector<fs::path> jobs;
      if (e.is_directory() && fs::exists(e.path() / "job.yaml"))
        jobs.push_back(e.path() / "job.yaml");
      if (e.is_regular_file() && e.path().extension() == ".yaml") jobs.push_back(e.path());
      for (const fs::path& job : jobs) {
        ParseResult parsed = LoadJobSpec(job.string());
        if (!parsed.ok()) continue;  // the spec-error goldens
        std::string name = (e.is_directory() ? e.path().filename() : e.path().stem()).string();
        std::replace_if(
            name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
        cases.push_back({name, job});
      }
    }
  }
  std::sort(cases.begin(), cases.end(),
            [](const Case& a, const Case& b) { return a.name < b.name; });
  return cases;
}

class ParallelGoldenTest : public EmbeddedBrokerTest, public ::testing::WithParamInterface<Case> {
 protected:
  // Removed at the end (CARAVELA_KEEP_TEST_DIRS=1 keeps it).
  TempDir tmp_{"parallel-golden", "CARAVELA_KEEP_TEST_DIRS", "parallel golden test"};
  // The job with every file source turned into a bounded Kafka topic (made
  // and filled here); returns the YAML.
  std::string KafkaJob(const Case& c, int* max_partitions) {
    YAML::Node root = YAML::LoadFile(c.job.string());
    YAML::Node sources = root["spec"]["sources"];
    int i = 0;
    *max_partitions = 0;
    for (YAML::Node src : sources) {
      YAML::Node file = src["file"];
      if (!file) continue;
      const fs::path input = c.job.parent_path() / file["path"].as<std::string>();
      const std::string topic = absl::StrCat("golden-", c.name, "-", src["name"].as<std::string>());
      const int partitions = 4 + (i++ % 3);
      *max_partitions = std::max(*max_partitions, partitions);
      SCOPED_TRACE(topic);
      EXPECT_OK(broker_->CreateTopic(topic, partitions));
      std::vector<KafkaTestRecord> records;
      const std::vector<std::string> lines = ReadLines(input);
      for (size_t k = 0; k < lines.size(); ++k) {
        KafkaTestRecord r;
        r.partition = static_cast<int32_t>(k % static_cast<size_t>(partitions));
        r.value = lines[k];
        records.push_back(r);
      }
      EXPECT_OK(ProduceRecords(broker_->bootstrap(), topic, records, 30000));
      YAML::Node kafka;
      kafka["topic"] = topic;
      kafka["bounded"] = true;
      if (file["arrival_field"]) kafka["arrival_field"] = file["arrival_field"];
      src.remove("file");
      src["kafka"] = kafka;
    }
    // Sinks to stdout become files, to be compared.
    int k = 0;
    for (YAML::Node sink : root["spec"]["sinks"]) {
      if (!sink["stdout"]) continue;
      sink.remove("stdout");
      YAML::Node file;
      file["path"] = absl::StrCat("out/stdout-", k++, ".jsonl");
      sink["file"] = file;
    }
    YAML::Emitter out;
    out << root;
    return out.c_str();
  }

  // Runs `yaml` (written into `dir`) with `parallelism`; the outputs.
  std::map<std::string, std::vector<std::string>> Run(const std::string& yaml, const fs::path& dir,
                                                      int parallelism) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "job.yaml") << yaml;
    ParseResult parsed = LoadJobSpec((dir / "job.yaml").string());
    EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.errors[0].ToString()) << "\n" << yaml;
    if (!parsed.ok()) return {};
    RunOptions options;
    options.data_dir = (dir / "data").string();
    options.embedded_bootstrap = broker_->bootstrap();
    options.parallelism = parallelism;
    auto pipeline = Pipeline::Create(parsed.spec, options);
    EXPECT_OK(pipeline.status());
    if (!pipeline.ok()) return {};
    // Every source reads Kafka now: its stage runs `parallelism` tasks.
    if (parallelism > 1) {
      EXPECT_GT((*pipeline)->task_count(), parallelism);
    }
    absl::Status st = (*pipeline)->Run();
    EXPECT_OK(st);
    fs::remove_all(dir / "data");
    fs::remove(dir / "job.yaml");
    return Outputs(dir);
  }
};

TEST_P(ParallelGoldenTest, SameOutputForEveryParallelism) {
  const Case& c = GetParam();
  int partitions = 0;
  const std::string yaml = KafkaJob(c, &partitions);
  if (partitions == 0) GTEST_SKIP() << c.job << " reads no file (it is not a replay)";
  const fs::path base = tmp_.path() / c.name;
  const auto want = Run(yaml, base / "p1", 1);
  ASSERT_FALSE(want.empty());
  size_t lines = 0;
  for (const auto& [stem, l] : want) lines += l.size();
  EXPECT_GT(lines, 0u) << "the job wrote nothing";
  for (int n = 2; n <= 4; ++n) {
    SCOPED_TRACE(absl::StrCat("parallelism ", n));
    const auto got = Run(yaml, base / absl::StrCat("p", n), n);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [stem, w] : want) {
      auto it = got.find(stem);
      ASSERT_NE(it, got.end()) << stem;
      EXPECT_EQ(it->second, w) << stem;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Jobs, ParallelGoldenTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace caravela
