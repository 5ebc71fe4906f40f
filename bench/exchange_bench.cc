// Microbenchmarks of the exchange (worker/exchange, SPEC §8): what a record
// costs to cross from one task to another, per record, on one thread (the
// writer's and the reader's work added up; no waiting). Google Benchmark:
//
//   ninja -C build exchange_bench && build/bench/exchange_bench
//
//  * BM_Memory: ExchangeWriter::Write (partition hash, frame encode into the
//    partition's batch) + MemoryExchange queue + ExchangeReader::Poll (frame
//    decode, Record unpack) for purchase-like records, 2 partitions.
//  * BM_Kafka: the same through a topic on the in-process embedded broker
//    (librdkafka producer and consumer, the mock broker's copy), the writer
//    on a thread of its own: throughput in wall time (items/s), with every
//    thread's CPU (librdkafka's and the broker's) on the same 2 cores.
//  * BM_Network/0: the same over gRPC streams on loopback (NetworkExchange
//    served by a gRPC server in this process; one stream per partition,
//    credit-based flow control), the writer on a thread of its own.
//    BM_Network/1: the writer's consuming tasks are in its process (fed
//    directly, with the same credit).
//  * BM_EncodeDecode: only the codec (AppendRecordFrame + NextFrame +
//    UnpackRecordFrame).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/json.h"
#include "common/record.h"
#include "proto/grpc_support.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/exchange/exchange.h"
#include "worker/exchange/network_exchange.h"

namespace {

constexpr const char* kPurchase =
    R"({"event_id":"e-000123456","user_id":"u-4711","country":"PT","amount":19.99,"currency":"EUR","event_time":"2026-10-01T10:00:00.123Z"})";

std::vector<caravela::Record> Records(int n) {
  caravela::JsonDecoder dec;
  std::vector<caravela::Record> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    std::string line = kPurchase;
    line.replace(line.find("123456"), 6, std::to_string(100000 + i));
    (void)dec.Decode(line, &out[i]);
    out[i].event_time = 1'790'000'000'000 + i;
  }
  return out;
}

// Writes `records` through `writer`, then polls `readers` until all arrived.
void Cross(benchmark::State& state, caravela::ExchangeWriter& writer,
           std::vector<std::unique_ptr<caravela::ExchangeReader>>& readers,
           const std::vector<caravela::Record>& records) {
  std::vector<caravela::RecordBatch> by_input;
  int64_t total = 0;
  for (auto _ : state) {
    for (const caravela::Record& r : records) {
      if (!writer.Write(0, r).ok()) state.SkipWithError("write");
    }
    if (!writer.Flush(10000).ok()) state.SkipWithError("flush");
    size_t got = 0;
    while (got < records.size()) {
      for (auto& reader : readers) {
        for (auto& b : by_input) b.clear();
        auto n = reader->Poll(4096, 1, &by_input);
        if (!n.ok()) {
          state.SkipWithError("poll");
          return;
        }
        got += static_cast<size_t>(*n);
      }
    }
    total += static_cast<int64_t>(records.size());
  }
  state.SetItemsProcessed(total);
  state.counters["bytes_per_record"] = benchmark::Counter(
      static_cast<double>(writer.bytes_written()) / static_cast<double>(writer.records_written()));
}

// The writer on its own thread, as a producing task: throughput, not the
// round trip of one batch.
void CrossThreaded(benchmark::State& state, caravela::ExchangeWriter& writer,
                   std::vector<std::unique_ptr<caravela::ExchangeReader>>& readers) {
  const std::vector<caravela::Record> records = Records(100000);
  std::vector<caravela::RecordBatch> by_input;
  int64_t total = 0;
  for (auto _ : state) {
    std::thread producer([&] {
      for (const caravela::Record& r : records) {
        if (!writer.Write(0, r).ok()) return;
      }
      (void)writer.Flush(30000);
    });
    size_t got = 0;
    while (got < records.size()) {
      for (auto& reader : readers) {
        for (auto& b : by_input) b.clear();
        auto n = reader->Poll(4096, 1, &by_input);
        if (!n.ok()) break;
        got += static_cast<size_t>(*n);
      }
    }
    producer.join();
    total += static_cast<int64_t>(records.size());
  }
  state.SetItemsProcessed(total);
}

// One reader per partition of `topic`, each configured by `configure`;
// empty (and the benchmark skipped) if one does not open.
template <typename Configure>
std::vector<std::unique_ptr<caravela::ExchangeReader>> OpenReaders(benchmark::State& state,
                                                                   const std::string& topic,
                                                                   int partitions,
                                                                   Configure configure) {
  std::vector<std::unique_ptr<caravela::ExchangeReader>> readers;
  for (int p = 0; p < partitions; ++p) {
    caravela::ExchangeReaderOptions ro;
    ro.topic = topic;
    ro.partitions = {p};
    configure(&ro);
    auto reader = caravela::ExchangeReader::Open(ro);
    if (!reader.ok()) {
      state.SkipWithError("open");
      return {};
    }
    readers.push_back(std::move(*reader));
  }
  return readers;
}

caravela::ExchangeWriterOptions WriterOptions(int partitions) {
  caravela::ExchangeWriterOptions o;
  o.topic = "caravela.bench.exchange";
  o.partitions = partitions;
  o.keys = {{caravela::FieldPath::Parse("event_id")}};
  return o;
}

void BM_Memory(benchmark::State& state) {
  constexpr int kPartitions = 2;
  caravela::MemoryExchange exchange("caravela.bench.exchange", kPartitions, int64_t{1} << 30);
  caravela::ExchangeWriterOptions wo = WriterOptions(kPartitions);
  wo.memory = &exchange;
  auto writer = caravela::ExchangeWriter::Open(wo);
  auto readers = OpenReaders(state, wo.topic, kPartitions,
                             [&](caravela::ExchangeReaderOptions* ro) { ro->memory = &exchange; });
  if (!writer.ok() || readers.empty()) {
    state.SkipWithError("open");
    return;
  }
  Cross(state, **writer, readers, Records(10000));
}
BENCHMARK(BM_Memory)->Unit(benchmark::kMillisecond);

void BM_Kafka(benchmark::State& state) {
  constexpr int kPartitions = 2;
  auto broker = caravela::EmbeddedBroker::Start(0, kPartitions);
  if (!broker.ok() || !(*broker)->CreateTopic("caravela.bench.exchange", kPartitions).ok()) {
    state.SkipWithError("broker");
    return;
  }
  // Flow control keeps the writer within what the mock broker keeps.
  caravela::ExchangeFlowControl flow(kPartitions, 2 << 20);
  caravela::ExchangeWriterOptions wo = WriterOptions(kPartitions);
  wo.bootstrap = (*broker)->bootstrap();
  wo.flow = &flow;
  auto readers =
      OpenReaders(state, wo.topic, kPartitions, [&](caravela::ExchangeReaderOptions* ro) {
        ro->bootstrap = wo.bootstrap;
        ro->flow = &flow;
      });
  auto writer = caravela::ExchangeWriter::Open(wo);
  if (readers.empty() || !writer.ok()) {
    state.SkipWithError("open");
    return;
  }
  CrossThreaded(state, **writer, readers);
}
BENCHMARK(BM_Kafka)->Unit(benchmark::kMillisecond)->UseRealTime();

// state.range(0) == 1: the writer uses the readers' NetworkExchange (a
// consuming task in the same process: fed without gRPC); 0: its own, as
// another worker would (every message crosses a gRPC stream).
void BM_Network(benchmark::State& state) {
  constexpr int kPartitions = 2;
  auto net = caravela::NetworkExchange::Create({});
  auto producer_net = caravela::NetworkExchange::Create({});
  if (!net.ok() || !producer_net.ok()) {
    state.SkipWithError("network exchange");
    return;
  }
  auto server = caravela::StartGrpcServer("127.0.0.1:0", grpc::InsecureServerCredentials(),
                                          {(*net)->service()}, 64 << 20);
  if (!server.ok()) {
    state.SkipWithError("server");
    return;
  }
  caravela::ExchangeWriterOptions wo = WriterOptions(kPartitions);
  wo.network = state.range(0) == 1 ? net->get() : producer_net->get();
  wo.peers.assign(kPartitions, server->address);
  wo.job_id = "bench";
  auto readers =
      OpenReaders(state, wo.topic, kPartitions, [&](caravela::ExchangeReaderOptions* ro) {
        ro->network = net->get();
        ro->job_id = "bench";
      });
  auto writer = caravela::ExchangeWriter::Open(wo);
  if (readers.empty() || !writer.ok()) {
    state.SkipWithError("open");
    return;
  }
  CrossThreaded(state, **writer, readers);
  writer->reset();
  readers.clear();
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}
BENCHMARK(BM_Network)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EncodeDecode(benchmark::State& state) {
  const std::vector<caravela::Record> records = Records(1000);
  std::string message;
  caravela::Record out;
  for (auto _ : state) {
    message.clear();
    for (const caravela::Record& r : records) caravela::AppendRecordFrame(1, 0, 0, r, &message);
    size_t pos = 0;
    while (pos < message.size()) {
      auto f = caravela::NextFrame(message, &pos);
      if (!f.ok()) state.SkipWithError("decode");
      caravela::UnpackRecordFrame(*f, &out);
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(records.size()));
}
BENCHMARK(BM_EncodeDecode);

}  // namespace

BENCHMARK_MAIN();
