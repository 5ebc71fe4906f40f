// The `caravela` binary: wires subcommands to the modules; no logic lives here.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "caravela/v1/worker.pb.h"
#include "cli/commands.h"
#include "cli/demo.h"
#include "common/dashboard.h"
#include "common/http_server.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/time_util.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_series.h"
#include "proto/grpc_support.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_properties.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

// Prints every spec error; returns true if the spec is valid.
bool ReportSpec(const caravela::ParseResult& result, const std::string& file) {
  if (result.ok()) return true;
  std::fprintf(stderr, "%s: %zu error%s\n", file.c_str(), result.errors.size(),
               result.errors.size() == 1 ? "" : "s");
  for (const auto& e : result.errors) std::fprintf(stderr, "  %s\n", e.ToString().c_str());
  return false;
}

struct RunFlags {
  std::string data_dir;
  std::string from_savepoint;
  std::string savepoint_on_stop;
  bool quiet = false;
  bool print_metrics = false;
  int parallelism = 0;                        // 0: spec.parallelism
  std::string exchange;                       // empty: memory, or kafka when the job says so
  std::string http;                           // HOST:PORT for /metrics and /healthz; empty: none
  std::vector<std::string> kafka_properties;  // KEY=VALUE, every Kafka client
};

// `caravela run --http`: /healthz, /metrics, and the dashboard with the API
// it reads (the coordinator's shape: one job, its tasks on worker "local").
std::vector<caravela::HttpRoute> RunHttpRoutes(std::atomic<caravela::Pipeline*>* running,
                                               caravela::JobSeries* series) {
  std::vector<caravela::HttpRoute> routes = caravela::DashboardRoutes();
  routes.push_back(caravela::HealthRoute());
  routes.push_back(caravela::MetricsRoute([running] {
    caravela::Pipeline* p = running->load();
    if (p == nullptr) return std::string();
    p->RefreshMetrics();
    return p->metrics().ToPrometheusText("caravela_");
  }));
  routes.push_back({"/api/v1/jobs", false, [running](const std::vector<std::string>&) {
                      caravela::v1::ListJobsResponse out;
                      if (caravela::Pipeline* p = running->load()) *out.add_jobs() = p->Status();
                      return caravela::ProtoJsonResponse(out);
                    }});
  routes.push_back({"/api/v1/jobs/([^/]+)", false, [running](const std::vector<std::string>& c) {
                      caravela::Pipeline* p = running->load();
                      if (p == nullptr) return caravela::HttpError(404, "no job runs");
                      caravela::v1::Job job = p->Status();
                      if (job.id() != c[0]) return caravela::HttpError(404, "no job " + c[0]);
                      return caravela::ProtoJsonResponse(job);
                    }});
  routes.push_back(series->Route());
  routes.push_back({"/api/v1/workers", false, [](const std::vector<std::string>&) {
                      caravela::v1::ListWorkersResponse out;
                      caravela::v1::WorkerInfo* w = out.add_workers();
                      w->set_id("local");
                      w->set_state(caravela::v1::ALIVE);
                      return caravela::ProtoJsonResponse(out);
                    }});
  return routes;
}

int RunJob(const std::string& file, const RunFlags& flags) {
  const std::string& data_dir_flag = flags.data_dir;
  const bool quiet = flags.quiet;
  const bool print_metrics = flags.print_metrics;
  caravela::ParseResult parsed = caravela::LoadJobSpec(file);
  if (!ReportSpec(parsed, file)) return 2;
  const caravela::JobSpec& spec = parsed.spec;
  if (absl::Status st = caravela::SetProcessKafkaProperties(flags.kafka_properties); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 2;
  }

  caravela::RunOptions options;
  options.data_dir = data_dir_flag.empty() ? "caravela-data/" + spec.name : data_dir_flag;
  options.stop = &g_stop;
  options.progress_interval_ms = quiet ? 0 : 1000;
  options.from_savepoint = flags.from_savepoint;
  options.savepoint_on_stop = flags.savepoint_on_stop;
  options.parallelism = flags.parallelism;
  // Default: in memory, unless the job asks for Kafka topics.
  const std::string exchange = !flags.exchange.empty()    ? flags.exchange
                               : spec.exchange == "kafka" ? "kafka"
                                                          : "memory";
  options.exchange = exchange == "kafka"     ? caravela::RunOptions::Exchange::kKafka
                     : exchange == "network" ? caravela::RunOptions::Exchange::kNetwork
                                             : caravela::RunOptions::Exchange::kMemory;

  std::unique_ptr<caravela::EmbeddedBroker> broker;
  if (spec.NeedsEmbeddedBroker()) {
    auto b = caravela::EmbeddedBroker::Start(0, 4);
    if (!b.ok()) {
      std::fprintf(stderr, "error: cannot start the embedded Kafka broker: %s\n",
                   std::string(b.status().message()).c_str());
      return 1;
    }
    broker = std::move(*b);
    options.embedded_bootstrap = broker->bootstrap();
    if (!quiet) {
      std::fprintf(stderr, "[caravela] embedded Kafka broker at %s\n", broker->bootstrap().c_str());
    }
  }

  // Up before the pipeline, which may wait for its topics: /metrics is
  // empty until the job's registry exists.
  std::unique_ptr<caravela::HttpServer> http;
  static std::atomic<caravela::Pipeline*> running{nullptr};
  static caravela::JobSeries series;
  if (!flags.http.empty()) {
    auto server = caravela::HttpServer::Start(flags.http, "", RunHttpRoutes(&running, &series));
    if (!server.ok()) {
      std::fprintf(stderr, "error: --http: %s\n", std::string(server.status().message()).c_str());
      return 2;
    }
    http = std::move(*server);
    std::fprintf(stderr, "[caravela] http=%s (the dashboard at /, /api/v1/, /metrics, /healthz)\n",
                 http->address().c_str());
  }

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto pipeline = caravela::Pipeline::Create(spec, options);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(pipeline.status().message()).c_str());
    return 1;
  }
  running.store(pipeline->get());
  // The dashboard's samples, every second while it runs.
  std::atomic<bool> ran{false};
  std::thread sampler;
  if (http != nullptr) {
    sampler = std::thread([&] {
      caravela::SystemClock clock;
      while (!ran.load()) {
        series.Sample((*pipeline)->Status(), clock.NowMs());
        for (int i = 0; i < 20 && !ran.load(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    });
  }
  absl::Status st = (*pipeline)->Run();
  ran.store(true);
  if (sampler.joinable()) sampler.join();
  running.store(nullptr);
  if (http != nullptr) http->Stop();  // no handler outlives the pipeline
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  if (!quiet) std::fprintf(stderr, "[caravela] done. %s\n", (*pipeline)->Summary().c_str());
  if (print_metrics) std::fputs((*pipeline)->metrics().ToPrometheusText().c_str(), stdout);
  return 0;
}

// `caravela plan`: prints the stages and exchanges of a job (offline: Kafka
// partition counts are unknown, so that check is skipped).
int PlanCommand(const std::string& file, int parallelism_flag, bool json) {
  caravela::ParseResult parsed = caravela::LoadJobSpec(file);
  if (!ReportSpec(parsed, file)) return 2;
  int parallelism = parallelism_flag > 0 ? parallelism_flag : parsed.spec.parallelism;
  absl::StatusOr<caravela::JobPlan> plan = caravela::PlanJob(parsed.spec, parallelism);
  if (!plan.ok()) {
    // One error per line, printed like spec errors.
    std::vector<std::string> errors = absl::StrSplit(plan.status().message(), '\n');
    std::fprintf(stderr, "%s: %zu error%s\n", file.c_str(), errors.size(),
                 errors.size() == 1 ? "" : "s");
    for (const std::string& e : errors) std::fprintf(stderr, "  %s\n", e.c_str());
    return 2;
  }
  if (json) {
    std::printf("%s\n", plan->ToJson().c_str());
  } else {
    std::fputs(plan->ToText().c_str(), stdout);
  }
  return 0;
}

// argv, plus `--flag=value` for every environment variable CARAVELA_<FLAG>
// of the invoked subcommand's options that the command line does not set,
// when a --config file is given (see main).
std::vector<std::string> EnvironmentOverConfig(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  const bool config = std::any_of(out.begin() + 1, out.end(), [](const std::string& a) {
    return a == "--config" || a.rfind("--config=", 0) == 0;
  });
  if (!config) return out;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (std::find(out.begin() + 1, out.end(), sub->get_name()) == out.end()) continue;
    for (const CLI::Option* opt : sub->get_options()) {
      const std::string& env = opt->get_envname();
      const char* value = env.empty() ? nullptr : std::getenv(env.c_str());
      if (value == nullptr || opt->get_lnames().empty()) continue;
      const std::string flag = "--" + opt->get_lnames()[0];
      const bool given = std::any_of(out.begin() + 1, out.end(), [&](const std::string& a) {
        return a == flag || a.rfind(flag + "=", 0) == 0;
      });
      if (!given) out.push_back(flag + "=" + value);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_pattern("[%H:%M:%S.%e] [%n] [%l] %v");
  CLI::App app{
      "Caravela: event-time stream processing with exact, revisioned results.\n"
      "Joins, deduplicates and aggregates Kafka streams by event time; see SPEC.md."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  // Logging options, before or after the subcommand.
  app.fallthrough();
  // Options from a TOML file ([coordinator] or [worker] section, keys as the
  // long flags; config/*.toml), under the environment (CARAVELA_<FLAG>),
  // under the command line. Unknown keys are errors.
  app.set_config("--config", "",
                 "Read options from this TOML file ([coordinator] or [worker] section; see "
                 "config/coordinator.toml)");
  app.allow_config_extras(false);
  std::string log_format = "text", log_level;
  app.add_option("--log-format", log_format, "Log lines as text or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", log_level,
                 "Log levels: LEVEL and/or SUBSYSTEM=LEVEL, comma-separated, e.g.\n"
                 "warn,checkpoint=debug (trace, debug, info, warn, error, critical, off)");

  std::string job_file;
  RunFlags run_flags;
  bool& quiet = run_flags.quiet;
  auto* run = app.add_subcommand(
      "run",
      "Validate and run a job in-process. Bounded (file) inputs: exits when drained,\n"
      "after every window fired ON_TIME and FINAL. Kafka inputs: runs until Ctrl-C.\n"
      "With spec.checkpoint.interval set, the run checkpoints state, source offsets and\n"
      "watermarks, and a re-run with the same job and --data-dir resumes from the\n"
      "latest complete checkpoint (after a crash or a stop).");
  run->add_option("job", job_file, "Job YAML (relative paths in it resolve against its directory)")
      ->required()
      ->check(CLI::ExistingFile);
  run->add_option("--data-dir", run_flags.data_dir,
                  "State, checkpoint (unless spec.checkpoint.storage is set) and dead-letter\n"
                  "directory (default: ./caravela-data/<job name>)");
  run->add_option("--from-savepoint", run_flags.from_savepoint,
                  "Start from this savepoint directory instead of the latest checkpoint\n"
                  "(with --parallelism > 1: a job savepoint, of any parallelism, e.g.\n"
                  "one `caravela savepoint` wrote)");
  run->add_option("--savepoint-on-stop", run_flags.savepoint_on_stop,
                  "When the run ends (input drained, Ctrl-C or SIGTERM), write a\n"
                  "self-contained savepoint into this new directory (with --parallelism > 1:\n"
                  "a copy of the job's last checkpoint; needs spec.checkpoint)");
  run->add_option("--parallelism", run_flags.parallelism,
                  "Tasks per stage (SPEC §8; default: spec.parallelism)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  run->add_option("--exchange", run_flags.exchange,
                  "How the tasks of a parallel job exchange records: memory (bounded queues\n"
                  "in this process; the default unless spec.exchange is kafka), kafka (topics\n"
                  "caravela.<job>.<operator> on the job's Kafka cluster, or the embedded\n"
                  "broker) or network (gRPC streams on loopback, as between workers)")
      ->check(CLI::IsMember({"memory", "kafka", "network"}));
  run->add_flag("-q,--quiet", quiet, "No progress lines on stderr");
  run->add_option("--http", run_flags.http,
                  "Serve /metrics (Prometheus text) and /healthz on HOST:PORT while it runs\n"
                  "(port 0: any; the address is printed on stderr)");
  run->add_flag("--print-metrics", run_flags.print_metrics,
                "Print the metrics registry (Prometheus text) to stdout at the end");
  run->add_option("--kafka-property", run_flags.kafka_properties,
                  "KEY=VALUE: a librdkafka property for every Kafka client of the run\n"
                  "(repeatable; e.g. security.protocol=SASL_SSL); a job's kafka.properties win")
      ->envname("CARAVELA_KAFKA_PROPERTY")
      ->delimiter('\n');

  auto* validate = app.add_subcommand(
      "validate", "Check a job YAML; prints every error with its YAML path; exit 2 if invalid");
  validate->add_option("job", job_file, "Job YAML")->required()->check(CLI::ExistingFile);

  int plan_parallelism = 0;
  bool plan_json = false;
  auto* plan = app.add_subcommand(
      "plan",
      "Print how a job is cut into stages and exchange topics (SPEC §8) for a\n"
      "parallelism; exit 2 with every error if the spec or the plan is invalid.\n"
      "Works offline: Kafka partition counts are not looked up, so tasks vs partitions\n"
      "is not checked.");
  plan->add_option("job", job_file, "Job YAML")->required()->check(CLI::ExistingFile);
  plan->add_option("--parallelism", plan_parallelism, "Tasks per stage (default: spec.parallelism)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  plan->add_flag("--json", plan_json, "Print the plan as JSON");

  int port = 0, partitions = 4;
  auto* broker = app.add_subcommand(
      "broker",
      "Run the embedded Kafka-protocol broker (librdkafka mock cluster) on loopback\n"
      "until killed; prints its bootstrap address. Real clients (kcat) can use it.");
  broker->add_option("--port", port, "TCP port on 127.0.0.1 (0 = any free port)");
  std::vector<std::string> topics;
  broker
      ->add_option("--partitions", partitions,
                   "Partitions of the --topic topics (auto-created topics always get 4)")
      ->check(CLI::PositiveNumber);
  broker->add_option("--topic", topics,
                     "Create this topic at start (repeatable); NAME:N gives it N partitions");

  int demo_seconds = 20, demo_events = 6000;
  auto* demo = app.add_subcommand(
      "demo",
      "Live demo on the embedded broker (or an existing Kafka: --bootstrap): produces\n"
      "mobile purchase events (retries, late uploads, disorder, conflicts, malformed\n"
      "records) while the job runs, prints every revision as it is published, then\n"
      "drains and exits.");
  std::string demo_job = "config/examples/hourly-revenue.yaml";
  demo->add_option("job", demo_job, "Job YAML")->capture_default_str();
  demo->add_option("--seconds", demo_seconds, "How long to produce events")
      ->check(CLI::PositiveNumber);
  demo->add_option("--events", demo_events, "Purchases to produce")->check(CLI::PositiveNumber);
  demo->add_flag("-q,--quiet", quiet, "No progress lines on stderr");
  std::string demo_bootstrap;
  demo->add_option("--bootstrap", demo_bootstrap,
                   "An existing Kafka (HOST:PORT) instead of the embedded broker; the demo\n"
                   "creates topics purchases (4 partitions) and hourly-revenue (1) there and\n"
                   "refuses to run if they exist");

  // The subcommands in files of their own (cli/commands.h).
  const caravela::Command commands[] = {
      caravela::AddCoordinatorCommand(app), caravela::AddWorkerCommand(app),
      caravela::AddLocalCommand(app),       caravela::AddHealthCommand(app),
      caravela::AddWorkersCommand(app),     caravela::AddSubmitCommand(app),
      caravela::AddJobsCommand(app),        caravela::AddJobCommand(app),
      caravela::AddCancelCommand(app),      caravela::AddRescaleCommand(app),
      caravela::AddRestartCommand(app),     caravela::AddSavepointCommand(app),
      caravela::AddNexmarkCommand(app),     caravela::AddReconcileCommand(app)};

  // The environment beats a --config file (CLI11 itself reads the file
  // first): with --config, each CARAVELA_<FLAG> of the subcommand being run
  // becomes a flag unless the command line has it.
  std::vector<std::string> args = EnvironmentOverConfig(app, argc, argv);
  std::vector<char*> arg_ptrs;
  arg_ptrs.reserve(args.size());
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  int arg_count = static_cast<int>(arg_ptrs.size());
  char** arg_values = arg_ptrs.data();
  try {
    app.parse(arg_count, arg_values);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2 (CLI11's own
    // codes, 101-115, would say nothing to a script).
    return app.exit(e) == 0 ? 0 : 2;
  }
  caravela::LogToStderr();
  if (absl::Status st = caravela::ConfigureLogging(log_format, log_level); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 2;
  }

  for (const caravela::Command& command : commands) {
    if (*command.cli) return command.run();
  }

  if (*demo) {
    return caravela::RunDemo(demo_job, demo_seconds, demo_events, quiet, demo_bootstrap);
  }

  if (*run) return RunJob(job_file, run_flags);
  if (*plan) return PlanCommand(job_file, plan_parallelism, plan_json);
  if (*validate) {
    caravela::ParseResult parsed = caravela::LoadJobSpec(job_file);
    if (!ReportSpec(parsed, job_file)) return 2;
    std::printf("%s: OK (job \"%s\": %zu sources, %zu operators, %zu sinks)\n", job_file.c_str(),
                parsed.spec.name.c_str(), parsed.spec.sources.size(), parsed.spec.operators.size(),
                parsed.spec.sinks.size());
    return 0;
  }
  if (*broker) {
    absl::Status st = caravela::RunBrokerCommand(port, partitions, topics);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    return 0;
  }
  return 0;
}
