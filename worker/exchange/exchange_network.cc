// The network transport (network_exchange.h, exchange_transport.h): one
// gRPC stream per producer -> consumer channel (ExchangeService.Channel),
// credit-based flow control, an inbox per consuming (job, exchange,
// partition) on the consumer's worker.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "caravela/v1/exchange.grpc.pb.h"
#include "common/http_server.h"  // BearerMatches
#include "proto/grpc_support.h"
#include "spdlog/spdlog.h"
#include "worker/exchange/exchange.h"
#include "worker/exchange/exchange_transport.h"
#include "worker/exchange/network_exchange.h"

namespace caravela {

class ChannelReactor;

// What a stream and the inbox it feeds share: the credit the reader owes
// its producer. The reactor is gone (null) once its stream is done.
struct ChannelLink {
  // Held while anything calls into the reactor: OnDone takes it before the
  // reactor goes, so no thread calls into a deleted one. Recursive, should
  // gRPC run a reaction inline.
  std::recursive_mutex mu;
  ChannelReactor* reactor = nullptr;
  // A producer in this process (no stream): credit is handed over here.
  bool local = false;
  int64_t credit = 0;
  bool ended = false;
  std::condition_variable_any granted;
  int64_t owed = 0;       // consumed bytes not granted back yet
  int64_t threshold = 0;  // grant once this much is owed
  bool writing = false;   // a grant is in flight
  bool finished = false;  // Finish was called
  v1::ExchangeDown down;  // the grant in flight

  // The reader consumed `bytes` of this channel's messages.
  void Consumed(int64_t bytes);
  // Ends the stream with `st` (the reader closed).
  void End(const grpc::Status& st);
};

// The consuming end of (job, exchange, partition) at one epoch: messages of
// every producer's stream, in arrival order per stream.
class NetworkInbox {
 public:
  NetworkInbox(std::string name, int32_t partition, int64_t epoch, int producers)
      : name_(std::move(name)), partition_(partition), epoch_(epoch), producers_(producers) {}

  const std::string& name() const { return name_; }
  int32_t partition() const { return partition_; }
  int64_t epoch() const { return epoch_; }
  // InvalidArgument naming `what` unless `producer` is one of this inbox's
  // producers (a stream's open, or a writer in this process).
  absl::Status CheckProducer(int32_t producer, const std::string& what) const {
    if (producer >= 0 && producer < producers_) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": producer ", producer, " of ", producers_));
  }

  struct Message {
    std::string bytes;
    int frames = 0;
    int64_t offset = 0;
    std::shared_ptr<ChannelLink> link;
  };

  // False once closed.
  bool Attach(const std::shared_ptr<ChannelLink>& link) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    links_.push_back(link);
    return true;
  }
  bool Push(std::string bytes, int frames, const std::shared_ptr<ChannelLink>& link) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return false;
      frames_ += frames;
      messages_.push_back(Message{std::move(bytes), frames, next_offset_++, link});
    }
    data_.notify_one();
    return true;
  }
  int Pop(int max, int timeout_ms, std::vector<Message>* out) {
    std::unique_lock<std::mutex> lock(mu_);
    if (messages_.empty() && timeout_ms > 0) {
      data_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                     [&] { return !messages_.empty() || closed_; });
    }
    int n = 0;
    while (n < max && !messages_.empty()) {
      frames_ -= messages_.front().frames;
      out->push_back(std::move(messages_.front()));
      messages_.pop_front();
      ++n;
    }
    return n;
  }
  int64_t Backlog() const {
    std::lock_guard<std::mutex> lock(mu_);
    return frames_;
  }
  // The reader is gone (or replaced by a newer epoch's): every stream ends.
  void Close(const std::string& why) {
    std::vector<std::weak_ptr<ChannelLink>> links;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      links.swap(links_);
      messages_.clear();
      frames_ = 0;
    }
    data_.notify_all();
    for (auto& w : links) {
      if (auto l = w.lock()) l->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
    }
  }

 private:
  const std::string name_;
  const int32_t partition_;
  const int64_t epoch_;
  const int producers_;
  mutable std::mutex mu_;
  std::condition_variable data_;
  std::deque<Message> messages_;
  int64_t frames_ = 0;
  int64_t next_offset_ = 0;
  bool closed_ = false;
  std::vector<std::weak_ptr<ChannelLink>> links_;
};

// The consumer end of one stream (gRPC callback API: every reaction runs on
// gRPC's threads and never blocks).
class ChannelReactor final : public grpc::ServerBidiReactor<v1::ExchangeUp, v1::ExchangeDown> {
 public:
  ChannelReactor(NetworkExchange::Impl* exchange, grpc::CallbackServerContext* context);
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override { FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "canceled")); }
  void OnDone() override {
    {
      std::lock_guard<std::recursive_mutex> lock(link_->mu);
      link_->reactor = nullptr;
    }
    delete this;
  }
  void FinishOnce(const grpc::Status& st) {
    std::lock_guard<std::recursive_mutex> lock(link_->mu);
    if (link_->finished) return;
    link_->finished = true;
    Finish(st);
  }
  // Ends the stream with `st`, logged unless it only asks the producer to
  // retry (UNAVAILABLE: its reader is not open yet or was replaced).
  void Refuse(const grpc::Status& st) {
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE) {
      ExchangeLogger()->warn("refused the exchange stream from {}{}: {}", peer_, what_,
                             st.error_message());
    }
    FinishOnce(st);
  }
  // Starts a grant of what is owed if none is in flight (link_->mu held).
  bool TakeGrantLocked() {
    ChannelLink& l = *link_;
    if (l.finished || l.writing || l.owed < l.threshold || l.owed <= 0) return false;
    l.down.set_credit_bytes(l.owed);
    l.owed = 0;
    l.writing = true;
    return true;
  }
  void SendGrant() { StartWrite(&link_->down); }

 private:
  grpc::Status Open(const v1::ExchangeOpen& open);

  NetworkExchange::Impl* exchange_;
  std::shared_ptr<ChannelLink> link_ = std::make_shared<ChannelLink>();
  std::shared_ptr<NetworkInbox> inbox_;
  v1::ExchangeUp up_;
  const std::string peer_;
  std::string what_;  // " (exchange E partition P of job J, producer N epoch M)" once opened
  int32_t producer_ = 0;
  int64_t epoch_ = 0;
};

void ChannelLink::Consumed(int64_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (local) {
    credit += bytes;
    granted.notify_all();
    return;
  }
  owed += bytes;
  if (reactor != nullptr && reactor->TakeGrantLocked()) reactor->SendGrant();
}

void ChannelLink::End(const grpc::Status& st) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (local) {
    ended = true;
    granted.notify_all();
  }
  if (reactor != nullptr) reactor->FinishOnce(st);
}

struct NetworkExchange::Impl {
  NetworkExchangeOptions options;
  std::shared_ptr<grpc::ChannelCredentials> credentials;

  class Service final : public v1::ExchangeService::CallbackService {
   public:
    explicit Service(Impl* impl) : impl_(impl) {}
    grpc::ServerBidiReactor<v1::ExchangeUp, v1::ExchangeDown>* Channel(
        grpc::CallbackServerContext* context) override {
      return new ChannelReactor(impl_, context);
    }

   private:
    Impl* impl_;
  };
  Service service{this};

  std::mutex mu;
  std::map<std::string, std::weak_ptr<NetworkInbox>> inboxes;
  std::map<std::string, std::shared_ptr<grpc::Channel>> peers;

  static std::string Key(const std::string& job, const std::string& exchange, int32_t partition) {
    return absl::StrCat(job, "\x1f", exchange, "\x1f", partition);
  }

  std::shared_ptr<NetworkInbox> Find(const v1::ExchangeOpen& open) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = inboxes.find(Key(open.job_id(), open.exchange(), open.partition()));
    return it == inboxes.end() ? nullptr : it->second.lock();
  }
};

ChannelReactor::ChannelReactor(NetworkExchange::Impl* exchange,
                               grpc::CallbackServerContext* context)
    : exchange_(exchange), peer_(context->peer()) {
  link_->reactor = this;
  link_->threshold = std::max<int64_t>(exchange->options.window_bytes / 4, 1);
  const std::string& token = exchange->options.token;
  if (!token.empty()) {
    const auto& md = context->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end() ||
        !BearerMatches(std::string_view(it->second.data(), it->second.size()), token)) {
      Refuse(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "missing or wrong bearer token (the metadata \"authorization: "
                          "Bearer <token>\" with the cluster's token)"));
      return;
    }
  }
  StartRead(&up_);
}

grpc::Status ChannelReactor::Open(const v1::ExchangeOpen& open) {
  const std::string what = absl::StrCat("exchange ", open.exchange(), " partition ",
                                        open.partition(), " of job ", open.job_id());
  what_ = absl::StrCat(" (", what, ", producer ", open.producer(), " epoch ", open.epoch(), ")");
  producer_ = open.producer();
  epoch_ = open.epoch();
  std::shared_ptr<NetworkInbox> inbox = exchange_->Find(open);
  if (inbox == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat(what, ": no reader is open on this worker"));
  }
  if (inbox->epoch() > open.epoch()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat(what, ": epoch ", open.epoch(),
                                     " is fenced, the reader is at ", inbox->epoch()));
  }
  if (inbox->epoch() < open.epoch()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat(what, ": the reader of epoch ", open.epoch(),
                                     " is not open yet (", inbox->epoch(), " is)"));
  }
  if (absl::Status st = inbox->CheckProducer(open.producer(), what); !st.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(st.message()));
  }
  if (!inbox->Attach(link_)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat(what, ": the reader closed"));
  }
  inbox_ = std::move(inbox);
  return grpc::Status::OK;
}

void ChannelReactor::OnReadDone(bool ok) {
  if (!ok) {  // the producer closed its end (or the call broke)
    FinishOnce(grpc::Status::OK);
    return;
  }
  if (inbox_ == nullptr) {
    grpc::Status st = up_.has_open() ? Open(up_.open())
                                     : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                                    "the first message of a channel must open it");
    if (!st.ok()) {
      Refuse(st);
      return;
    }
    // The first grant: the whole window.
    link_->Consumed(exchange_->options.window_bytes);
  } else if (!up_.frames().empty()) {
    // Checked here, on gRPC's threads, so that the reader never sees a
    // broken frame (nor one of another epoch) from a stream: the stream
    // ends and the job goes on.
    if (absl::Status st = ValidateMessage(up_.frames(), producer_, epoch_, up_.frame_count());
        !st.ok()) {
      Refuse(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(st.message())));
      return;
    }
    if (!inbox_->Push(std::move(*up_.mutable_frames()), up_.frame_count(), link_)) {
      FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              absl::StrCat("exchange ", inbox_->name(), " partition ",
                                           inbox_->partition(), ": the reader closed")));
      return;
    }
  }
  up_.Clear();
  std::lock_guard<std::recursive_mutex> lock(link_->mu);
  if (!link_->finished) StartRead(&up_);
}

void ChannelReactor::OnWriteDone(bool ok) {
  std::lock_guard<std::recursive_mutex> lock(link_->mu);
  link_->writing = false;
  if (ok && TakeGrantLocked()) SendGrant();
}

// ---- NetworkExchange -----------------------------------------------------------

absl::StatusOr<std::unique_ptr<NetworkExchange>> NetworkExchange::Create(
    NetworkExchangeOptions options) {
  if (options.window_bytes < 1) {
    return absl::InvalidArgumentError("network exchange: window_bytes must be >= 1");
  }
  std::unique_ptr<NetworkExchange> ex(new NetworkExchange());
  ex->impl_ = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(ex->impl_->credentials, ChannelCredentials(options.tls_ca));
  ex->impl_->options = std::move(options);
  return ex;
}

NetworkExchange::~NetworkExchange() = default;

grpc::Service* NetworkExchange::service() { return &impl_->service; }

const NetworkExchangeOptions& NetworkExchange::options() const { return impl_->options; }

absl::StatusOr<std::shared_ptr<NetworkInbox>> NetworkExchange::OpenInbox(
    const std::string& job_id, const std::string& exchange, int32_t partition, int64_t epoch,
    int producers) {
  std::shared_ptr<NetworkInbox> old;
  auto inbox = std::make_shared<NetworkInbox>(exchange, partition, epoch, producers);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    std::weak_ptr<NetworkInbox>& slot = impl_->inboxes[Impl::Key(job_id, exchange, partition)];
    old = slot.lock();
    if (old != nullptr && old->epoch() >= epoch) {
      return absl::FailedPreconditionError(absl::StrCat(
          "exchange ", exchange, " partition ", partition, " of job ", job_id,
          ": a reader of epoch ", old->epoch(), " is open here (this one is ", epoch, ")"));
    }
    slot = inbox;
    // Entries of readers gone stay until their key is reused; drop them.
    for (auto it = impl_->inboxes.begin(); it != impl_->inboxes.end();) {
      it = it->second.expired() ? impl_->inboxes.erase(it) : std::next(it);
    }
  }
  if (old != nullptr) old->Close(absl::StrCat("a reader of epoch ", epoch, " replaced it"));
  return inbox;
}

std::shared_ptr<NetworkInbox> NetworkExchange::FindInbox(const std::string& job_id,
                                                         const std::string& exchange,
                                                         int32_t partition) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->inboxes.find(Impl::Key(job_id, exchange, partition));
  return it == impl_->inboxes.end() ? nullptr : it->second.lock();
}

std::shared_ptr<grpc::Channel> NetworkExchange::Peer(const std::string& address) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::shared_ptr<grpc::Channel>& c = impl_->peers[address];
  if (c == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    c = grpc::CreateCustomChannel(address, impl_->credentials, args);
  }
  return c;
}

// ---- The transport ---------------------------------------------------------------

namespace exchange_internal {
namespace {

using Stub = v1::ExchangeService::Stub;
using Stream = grpc::ClientReaderWriter<v1::ExchangeUp, v1::ExchangeDown>;

// The producing end of one channel.
class OutChannel {
 public:
  virtual ~OutChannel() = default;
  // Waits for credit (or `cancel`), then hands the message on. *message is
  // left empty (its capacity kept when it can be).
  virtual absl::Status Send(std::string* message, int frames, const std::atomic<bool>* cancel) = 0;
};

// A consuming task in this process: its inbox is fed directly.
class LocalChannel final : public OutChannel {
 public:
  LocalChannel(std::shared_ptr<NetworkInbox> inbox, int64_t window, std::string what)
      : inbox_(std::move(inbox)), what_(std::move(what)) {
    link_->local = true;
    link_->credit = window;
  }
  // Fails if the inbox closed in between (its reader is gone).
  bool Attach() { return inbox_->Attach(link_); }

  absl::Status Send(std::string* message, int frames, const std::atomic<bool>* cancel) override {
    {
      std::unique_lock<std::recursive_mutex> lock(link_->mu);
      while (link_->credit <= 0 && !link_->ended) {
        if (cancel != nullptr && cancel->load()) {
          return absl::AbortedError(absl::StrCat(what_, ": the job stopped"));
        }
        link_->granted.wait_for(lock, std::chrono::milliseconds(50));
      }
      if (link_->ended) return Ended();
      link_->credit -= static_cast<int64_t>(message->size());
    }
    if (!inbox_->Push(std::move(*message), frames, link_)) return Ended();
    message->clear();
    return absl::OkStatus();
  }

 private:
  absl::Status Ended() const {
    return absl::UnavailableError(
        absl::StrCat(what_, ": the consuming task's reader closed (the stream ended)"));
  }
  std::shared_ptr<NetworkInbox> inbox_;
  std::shared_ptr<ChannelLink> link_ = std::make_shared<ChannelLink>();
  std::string what_;
};

// A consuming task on another worker: a gRPC stream.
class StreamChannel final : public OutChannel {
 public:
  ~StreamChannel() override { Close(); }

  // Opens the stream; retries while the reader is not open (UNAVAILABLE)
  // until `deadline` or `cancel`.
  absl::Status Connect(NetworkExchange* exchange, const ExchangeWriterOptions& o,
                       int32_t partition) {
    what_ =
        absl::StrCat("exchange ", o.topic, " partition ", partition, " at ", o.peers[partition]);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(exchange->options().connect_timeout_ms);
    auto stub = v1::ExchangeService::NewStub(exchange->Peer(o.peers[partition]));
    v1::ExchangeUp open;
    v1::ExchangeOpen* oo = open.mutable_open();
    oo->set_job_id(o.job_id);
    oo->set_epoch(o.epoch);
    oo->set_exchange(o.topic);
    oo->set_partition(partition);
    oo->set_producer(o.producer);
    int backoff_ms = 5;
    while (true) {
      context_ = std::make_unique<grpc::ClientContext>();
      if (!exchange->options().token.empty()) {
        context_->AddMetadata("authorization", "Bearer " + exchange->options().token);
      }
      stream_ = stub->Channel(context_.get());
      v1::ExchangeDown first;
      if (stream_->Write(open) && stream_->Read(&first)) {
        credit_ = first.credit_bytes();
        reader_ = std::thread([this] { ReadGrants(); });
        return absl::OkStatus();
      }
      const grpc::Status st = stream_->Finish();
      stream_.reset();
      const bool retry = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                         st.error_code() == grpc::StatusCode::OK;
      if (!retry) {
        return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                            absl::StrCat(what_, ": ", st.error_message()));
      }
      if (o.cancel != nullptr && o.cancel->load()) {
        return absl::AbortedError(absl::StrCat(what_, ": the job stopped"));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::UnavailableError(absl::StrCat(what_, ": no reader after ",
                                                   exchange->options().connect_timeout_ms,
                                                   " ms: ", st.error_message()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, 200);
    }
  }

  absl::Status Send(std::string* message, int frames, const std::atomic<bool>* cancel) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (credit_ <= 0 && !ended_) {
        if (cancel != nullptr && cancel->load()) {
          return absl::AbortedError(absl::StrCat(what_, ": the job stopped"));
        }
        granted_.wait_for(lock, std::chrono::milliseconds(50));
      }
      if (ended_) return Ended();
      credit_ -= static_cast<int64_t>(message->size());
    }
    up_.set_frames(std::move(*message));
    up_.set_frame_count(frames);
    const bool ok = stream_->Write(up_);
    *message = std::move(*up_.mutable_frames());
    message->clear();
    if (!ok) {
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
      return Ended();
    }
    return absl::OkStatus();
  }

  void Close() {
    if (stream_ == nullptr) return;
    stream_->WritesDone();
    // Everything written before a job ends was read (its last checkpoint's
    // barriers came after it); a job that stops drops what is in flight.
    context_->TryCancel();
    if (reader_.joinable()) reader_.join();
    stream_->Finish();
    stream_.reset();
  }

 private:
  void ReadGrants() {
    v1::ExchangeDown down;
    while (stream_->Read(&down)) {
      std::lock_guard<std::mutex> lock(mu_);
      credit_ += down.credit_bytes();
      granted_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    granted_.notify_all();
  }
  // The stream broke (mu_ held): the reader's worker is gone, or it closed
  // (another epoch). Frames were lost: the job restores its last checkpoint.
  absl::Status Ended() const {
    return absl::UnavailableError(absl::StrCat(what_, ": the stream ended (the consuming task ",
                                               "stopped or its worker is unreachable)"));
  }

  std::string what_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<Stream> stream_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable granted_;
  int64_t credit_ = 0;
  bool ended_ = false;
  v1::ExchangeUp up_;
};

class NetworkOut final : public MessageOut {
 public:
  explicit NetworkOut(const ExchangeWriterOptions& options)
      : options_(options), channels_(static_cast<size_t>(options.partitions)) {}

  absl::Status Send(int32_t partition, std::string* message, int frames) override {
    RETURN_IF_ERROR(failure_);
    std::unique_ptr<OutChannel>& c = channels_[partition];
    if (c == nullptr) {
      absl::StatusOr<std::unique_ptr<OutChannel>> fresh = Connect(partition);
      if (!fresh.ok()) return failure_ = fresh.status();
      c = std::move(*fresh);
    }
    absl::Status st = c->Send(message, frames, options_.cancel);
    if (!st.ok()) failure_ = st;
    return st;
  }
  // Write hands each message to gRPC before it returns: nothing to wait for.
  absl::Status Flush(int /*timeout_ms*/) override { return failure_; }

 private:
  absl::StatusOr<std::unique_ptr<OutChannel>> Connect(int32_t partition) {
    NetworkExchange* ex = options_.network;
    std::shared_ptr<NetworkInbox> inbox = ex->FindInbox(options_.job_id, options_.topic, partition);
    if (inbox != nullptr && inbox->epoch() == options_.epoch) {
      RETURN_IF_ERROR(inbox->CheckProducer(
          options_.producer, absl::StrCat("exchange ", options_.topic, " partition ", partition)));
      auto local =
          std::make_unique<LocalChannel>(inbox, ex->options().window_bytes,
                                         absl::StrCat("exchange ", options_.topic, " partition ",
                                                      partition, " (in this process)"));
      if (local->Attach()) return local;
    }
    auto stream = std::make_unique<StreamChannel>();
    RETURN_IF_ERROR(stream->Connect(ex, options_, partition));
    return stream;
  }

  const ExchangeWriterOptions options_;
  std::vector<std::unique_ptr<OutChannel>> channels_;
  absl::Status failure_;
};

class NetworkIn final : public MessageIn {
 public:
  NetworkIn(std::vector<std::shared_ptr<NetworkInbox>> inboxes, int partitions)
      : inboxes_(std::move(inboxes)), partitions_(partitions) {}
  ~NetworkIn() override {
    for (auto& in : inboxes_) in->Close("the reader closed");
  }
  // Streams' messages are validated on arrival (ChannelReactor); local
  // channels' are written by this process.
  bool validated() const override { return true; }

  absl::StatusOr<int> Poll(int max_messages, int timeout_ms,
                           const std::function<void(const RawMessage&)>& f) override {
    return PollQueues(
        inboxes_.size(), &next_, max_messages, timeout_ms,
        [&](size_t q, int max, int wait, std::vector<NetworkInbox::Message>* out) {
          inboxes_[q]->Pop(max, wait, out);
        },
        [&](size_t q) { return inboxes_[q]->partition(); }, f,
        [](NetworkInbox::Message& m) { m.link->Consumed(static_cast<int64_t>(m.bytes.size())); },
        &popped_, &partition_of_);
  }

  int64_t Backlog() const override {
    int64_t total = 0;
    for (const auto& in : inboxes_) total += in->Backlog();
    return total;
  }
  int PartitionCount() const override { return partitions_; }

 private:
  std::vector<std::shared_ptr<NetworkInbox>> inboxes_;
  int partitions_;
  size_t next_ = 0;
  std::vector<NetworkInbox::Message> popped_;
  std::vector<int32_t> partition_of_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MessageOut>> OpenNetworkOut(const ExchangeWriterOptions& options) {
  if (static_cast<int>(options.peers.size()) != options.partitions) {
    return absl::InvalidArgumentError(absl::StrCat("exchange ", options.topic, ": ",
                                                   options.peers.size(), " peer addresses for ",
                                                   options.partitions, " partitions"));
  }
  return std::make_unique<NetworkOut>(options);
}

absl::StatusOr<std::unique_ptr<MessageIn>> OpenNetworkIn(const ExchangeReaderOptions& options,
                                                         const std::vector<int32_t>& owned) {
  std::vector<std::shared_ptr<NetworkInbox>> inboxes;
  for (int32_t p : owned) {
    absl::StatusOr<std::shared_ptr<NetworkInbox>> in = options.network->OpenInbox(
        options.job_id, options.topic, p, options.epoch, options.producers);
    if (!in.ok()) {
      for (auto& opened : inboxes) opened->Close("the reader failed to open");
      return in.status();
    }
    inboxes.push_back(std::move(*in));
  }
  return std::make_unique<NetworkIn>(std::move(inboxes), owned.back() + 1);
}

}  // namespace exchange_internal
}  // namespace caravela
