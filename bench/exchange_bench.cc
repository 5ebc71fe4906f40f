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
//    BM_Kafka/1: with spec.exchange_compression: lz4.
//  * BM_Lz4Message: bytes per record of a 64 KiB exchange message before
//    and after lz4, and the compression's cost per record.
//  * BM_Network/0: the same over gRPC streams on loopback (NetworkExchange
//    served by a gRPC server in this process; one stream per partition,
//    credit-based flow control), the writer on a thread of its own.
//    BM_Network/1: the writer's consuming tasks are in its process (fed
//    directly, with the same credit).
//  * BM_EncodeDecode: only the codec: /0 a frame per record
//    (AppendRecordFrame + NextFrame + UnpackRecordFrame), /1 record runs
//    (AppendToRecordRun + NextFrame + RecordRunReader); /2 and /3 the same
//    read as trusted (written in-process or validated on arrival).
#include <grpcpp/grpcpp.h>
#include <lz4.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/purchase_generator.h"
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
  if (state.range(0) == 1) wo.compression = "lz4";
  auto writer = caravela::ExchangeWriter::Open(wo);
  if (readers.empty() || !writer.ok()) {
    state.SkipWithError("open");
    return;
  }
  CrossThreaded(state, **writer, readers);
}
BENCHMARK(BM_Kafka)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// What lz4 makes of a writer's 64 KiB message of generated purchases
// (bench/purchase_generator.h: varied ids, users, amounts; record runs):
// bytes per record before and after (LZ4_compress_default, the codec
// librdkafka's lz4 uses), and the compression's cost.
void BM_Lz4Message(benchmark::State& state) {
  caravela::bench::PurchaseStreamOptions options;
  options.purchases = 1000;
  caravela::bench::PurchaseGenerator gen(options);
  caravela::JsonDecoder dec;
  std::vector<caravela::Record> records;
  for (std::string line; gen.Next(&line);) {
    records.emplace_back();
    if (!dec.Decode(line, &records.back()).ok()) state.SkipWithError("decode");
  }
  std::string message;
  caravela::RecordRun run;
  size_t n = 0;
  for (; message.size() < 64 * 1024; ++n) {
    caravela::AppendToRecordRun(1, 0, 0, records[n % records.size()], &run, &message);
  }
  caravela::CloseRecordRun(&run, &message);
  std::string out(static_cast<size_t>(LZ4_compressBound(static_cast<int>(message.size()))), '\0');
  int compressed = 0;
  for (auto _ : state) {
    compressed = LZ4_compress_default(message.data(), out.data(), static_cast<int>(message.size()),
                                      static_cast<int>(out.size()));
    benchmark::DoNotOptimize(compressed);
  }
  state.counters["bytes_per_record"] = static_cast<double>(message.size()) / static_cast<double>(n);
  state.counters["lz4_bytes_per_record"] = static_cast<double>(compressed) / static_cast<double>(n);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_Lz4Message);

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

// Arg 0: a frame per record ('R', AppendRecordFrame); 1: record runs ('S',
// what writers send); 2 and 3: the same decoded as trusted bytes (memory, or
// the network exchange, which validated them on arrival).
void BM_EncodeDecode(benchmark::State& state) {
  const std::vector<caravela::Record> records = Records(1000);
  const bool runs = state.range(0) % 2 == 1;
  const bool trusted = state.range(0) >= 2;
  std::string message;
  caravela::Record out;
  int32_t partition = 0;
  int64_t offset = 0;
  for (auto _ : state) {
    message.clear();
    caravela::RecordRun run;
    for (const caravela::Record& r : records) {
      if (runs) {
        caravela::AppendToRecordRun(1, 0, 0, r, &run, &message);
      } else {
        caravela::AppendRecordFrame(1, 0, 0, r, &message);
      }
    }
    caravela::CloseRecordRun(&run, &message);
    size_t pos = 0;
    while (pos < message.size()) {
      auto f = caravela::NextFrame(message, &pos, trusted);
      if (!f.ok()) state.SkipWithError("decode");
      if (f->type == caravela::ExchangeFrame::Type::kRecordRun) {
        caravela::RecordRunReader reader(*f);
        while (reader.Next(&out, &partition, &offset)) benchmark::DoNotOptimize(out);
      } else {
        caravela::UnpackRecordFrame(*f, &out);
      }
    }
    benchmark::DoNotOptimize(out);
  }
  state.counters["bytes_per_record"] =
      static_cast<double>(message.size()) / static_cast<double>(records.size());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(records.size()));
}
BENCHMARK(BM_EncodeDecode)->DenseRange(0, 3);

}  // namespace

BENCHMARK_MAIN();
