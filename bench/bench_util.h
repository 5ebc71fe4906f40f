// Small helpers shared by the bench binaries: flags, timing, peak RSS and the
// one-line result format that bench/run_all.sh collects into its table.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace caravela::bench {

// The operators of the hourly-revenue benchmark job, shared by benches (a)
// and (b) so both measure the same job: dedup, then revenue per country and
// hour. Sources are named `purchases`.
inline constexpr const char* kHourlyRevenueOperators = R"(  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 24h}
    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: revenue, sum: amount}, {as: orders, count: "*"}]
        allowed_lateness: 2h
)";

// Its side-output sinks and dead letter, into `out_dir`.
inline std::string HourlyRevenueSideSinks(const std::string& out_dir) {
  return "    - {from: unique.conflicts, file: {path: " + out_dir + "/conflicts.jsonl}}\n" +
         "    - {from: revenue.too_late, file: {path: " + out_dir + "/too_late.jsonl}}\n" +
         "  dead_letter: {path: " + out_dir + "/dead-letter.jsonl}\n";
}

// A job of two stages (a Kafka source keyed by user_id, dedup by event_id)
// of `parallelism` tasks each, for benches that only need tasks to place
// (the coordinator's): its broker is never reached.
inline std::string TwoStageJobYaml(const std::string& name, int parallelism) {
  return "apiVersion: caravela/v1\nkind: Job\nmetadata: {name: " + name +
         "}\nspec:\n  parallelism: " + std::to_string(parallelism) + R"(
  checkpoint: {interval: 10s}
  sources:
    - name: purchases
      kafka: {topic: purchases, bootstrap: "127.0.0.1:1"}
      key: [user_id]
      event_time: {field: ts}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
  sinks:
    - {from: unique, file: {path: out/unique.jsonl}}
)";
}

// "--name=value" and "--name value" flags; bare "--name" is "true".
// Positional arguments are stored under "" (the last one wins).
class Flags {
 public:
  Flags(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0) {
        values_[""] = a;
        continue;
      }
      a = a.substr(2);
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        values_[a.substr(0, eq)] = a.substr(eq + 1);
      } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
        values_[a] = argv[++i];
      } else {
        values_[a] = "true";
      }
    }
  }
  std::string Str(const std::string& name, const std::string& def = "") const {
    auto it = values_.find(name);
    return it == values_.end() ? def : it->second;
  }
  long long Int(const std::string& name, long long def) const {
    auto it = values_.find(name);
    return it == values_.end() ? def : std::strtoll(it->second.c_str(), nullptr, 10);
  }
  double Double(const std::string& name, double def) const {
    auto it = values_.find(name);
    return it == values_.end() ? def : std::strtod(it->second.c_str(), nullptr);
  }
  bool Bool(const std::string& name) const {
    auto it = values_.find(name);
    return it != values_.end() && it->second != "false" && it->second != "0";
  }

 private:
  std::map<std::string, std::string> values_;
};

inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Peak resident set size of this process so far, in MiB (getrusage ru_maxrss).
inline double PeakRssMiB() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
}

// CPU seconds (user + system) used by this process so far.
inline double CpuSeconds() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

// CPU seconds used by the calling thread so far (robust to other processes
// competing for the cores, unlike wall time).
// CPU seconds of the whole process (every thread), user + system.
inline double ProcessCpuSeconds() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

inline double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// Prints the machine-readable result line run_all.sh greps for:
//   RESULT <name> events=<n> seconds=<s> events_per_s=<r> peak_rss_mib=<m>
//          cpu_s=<process CPU> thread_cpu_s=<t> events_per_thread_cpu_s=<r2> [extra]
// `thread_cpu_s` is the CPU time of the thread that ran the measured loop
// (pass it in; < 0 omits it).
inline void PrintResult(const std::string& name, long long events, double seconds,
                        const std::string& extra = "", double thread_cpu_s = -1) {
  char thread[96] = "";
  if (thread_cpu_s > 0) {
    std::snprintf(thread, sizeof thread, " thread_cpu_s=%.2f events_per_thread_cpu_s=%.0f",
                  thread_cpu_s, events / thread_cpu_s);
  }
  std::printf(
      "RESULT %s events=%lld seconds=%.3f events_per_s=%.0f peak_rss_mib=%.1f cpu_s=%.2f%s%s%s\n",
      name.c_str(), events, seconds, seconds > 0 ? events / seconds : 0.0, PeakRssMiB(),
      CpuSeconds(), thread, extra.empty() ? "" : " ", extra.c_str());
  std::fflush(stdout);
}

}  // namespace caravela::bench
