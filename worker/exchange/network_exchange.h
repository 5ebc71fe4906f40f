// The network exchange (SPEC §8 `exchange: network`, the cluster's default):
// frames stream from each producing task to the consuming task's worker over
// gRPC (proto/caravela/v1/exchange.proto: one bidirectional stream per
// producer -> consumer channel), with credit-based flow control.
//
// One NetworkExchange per worker process. It is both ends:
//  * the consumer end: service() is served on the worker's gRPC server;
//    ExchangeReaders with `network` set register an inbox for their
//    (job, exchange, partition) at Open, which the streams of that epoch
//    feed. A reader grants credit as it consumes, so a producer holds at
//    most `window_bytes` (plus one message) unread per channel;
//  * the producer end: ExchangeWriters with `network` set open one stream
//    per partition they write to (lazily, at the first message), on a
//    channel to the peer's address shared by the whole process, and wait
//    while they hold no credit (back-pressure reaches the task loop, so its
//    sources stop polling). A consuming task in the same process (its inbox
//    of the writer's epoch is open here) is fed directly, with the same
//    credit, without crossing gRPC.
// A stream of an older epoch than the reader's is refused (fenced); one that
// finds no reader yet is retried by the producer until the job stops
// (`cancel`) or `connect_timeout_ms` passed. Streams carry the cluster's
// bearer token; a stream without it is UNAUTHENTICATED.
//
// Thread-safe. The NetworkExchange must outlive every reader and writer
// using it and the server serving service().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace grpc {
class Channel;
class Service;
}  // namespace grpc

namespace caravela {

class MetricsRegistry;
class NetworkInbox;

struct NetworkExchangeOptions {
  // Bearer token streams must carry (and producers send); empty: none.
  std::string token;
  // PEM roots to reach peers over TLS; empty: plaintext.
  std::string tls_ca;
  // Credit per channel: bytes a producer may send that its consumer has not
  // read yet.
  int64_t window_bytes = 1 << 20;
  // How long a producer retries a channel whose reader is not open (or whose
  // worker cannot be reached) before its writer fails.
  int connect_timeout_ms = 30000;
  // Client RPC metrics (grpc_client_*); may be null.
  MetricsRegistry* metrics = nullptr;
};

class NetworkExchange {
 public:
  static absl::StatusOr<std::unique_ptr<NetworkExchange>> Create(NetworkExchangeOptions options);
  ~NetworkExchange();
  NetworkExchange(const NetworkExchange&) = delete;
  NetworkExchange& operator=(const NetworkExchange&) = delete;

  // caravela.v1.ExchangeService: serve it on the worker's gRPC server.
  grpc::Service* service();
  const NetworkExchangeOptions& options() const;

  // Internal to worker/exchange (exchange_network.cc): a reader's inbox for
  // `partition` of (job, exchange) at `epoch`, fed by `producers` producers;
  // replaces an inbox of an older epoch (whose streams end).
  // FailedPrecondition if one of a newer epoch is open.
  absl::StatusOr<std::shared_ptr<NetworkInbox>> OpenInbox(const std::string& job_id,
                                                          const std::string& exchange,
                                                          int32_t partition, int64_t epoch,
                                                          int producers);
  // The inbox of (job, exchange, partition) open in this process, if any:
  // a producer here delivers to it without crossing gRPC.
  std::shared_ptr<NetworkInbox> FindInbox(const std::string& job_id, const std::string& exchange,
                                          int32_t partition);
  // A channel to `address` (HOST:PORT), shared by the process.
  std::shared_ptr<grpc::Channel> Peer(const std::string& address);

  struct Impl;

 private:
  NetworkExchange() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace caravela
