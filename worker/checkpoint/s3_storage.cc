#include "worker/checkpoint/s3_storage.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/failpoint.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/storage_scheme.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Logger() { return SubsystemLogger("s3"); }

// This abseil build does not alias absl::string_view to std::string_view.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::atomic<int64_t> g_objects{0};
std::atomic<int64_t> g_bytes{0};
std::atomic<int64_t> g_multipart{0};

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// `key = value` of `profile` in an AWS shared credentials file.
std::string CredentialsFileValue(const std::string& path, const std::string& profile,
                                 const std::string& key) {
  std::ifstream in(path);
  std::string line;
  bool in_profile = false;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      in_profile = absl::StripAsciiWhitespace(l.substr(1, l.size() - 2)) == profile;
      continue;
    }
    const size_t eq = l.find('=');
    if (!in_profile || eq == absl::string_view::npos) continue;
    if (absl::StripAsciiWhitespace(l.substr(0, eq)) == key) {
      return std::string(absl::StripAsciiWhitespace(l.substr(eq + 1)));
    }
  }
  return "";
}

// Percent-encodes `s` for a URL path or query (unreserved characters kept;
// '/' kept when `keep_slash`), as Signature V4's canonical form wants.
std::string UriEncode(std::string_view s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// Text of the first element named `name` under `node` (depth first).
const xmlNode* FindElement(const xmlNode* node, const char* name) {
  for (const xmlNode* n = node; n != nullptr; n = n->next) {
    if (n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, BAD_CAST name) == 0) return n;
    if (const xmlNode* c = FindElement(n->children, name)) return c;
  }
  return nullptr;
}

std::string ElementText(const xmlNode* parent, const char* name) {
  const xmlNode* e = parent == nullptr ? nullptr : FindElement(parent->children, name);
  if (e == nullptr) return "";
  xmlChar* text = xmlNodeGetContent(e);
  std::string out = text == nullptr ? "" : reinterpret_cast<const char*>(text);
  xmlFree(text);
  return out;
}

struct XmlDoc {
  xmlDoc* doc = nullptr;
  explicit XmlDoc(std::string_view text)
      : doc(xmlReadMemory(text.data(), static_cast<int>(text.size()), "s3.xml", nullptr,
                          XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING)) {}
  ~XmlDoc() {
    if (doc != nullptr) xmlFreeDoc(doc);
  }
  const xmlNode* root() const { return doc == nullptr ? nullptr : xmlDocGetRootElement(doc); }
};

// S3's error document: "Code: Message", or the status line if none.
std::string S3Error(long status, std::string_view body) {
  XmlDoc doc(body);
  const xmlNode* root = doc.root();
  if (root != nullptr && xmlStrcmp(root->name, BAD_CAST "Error") == 0) {
    return absl::StrCat("HTTP ", status, " ", ElementText(root, "Code"), ": ",
                        ElementText(root, "Message"));
  }
  return absl::StrCat("HTTP ", status);
}

// A request body: memory, or a range of a file.
struct Body {
  std::string_view memory;
  int fd = -1;
  off_t offset = 0;
  size_t size = 0;
  size_t sent = 0;
  static size_t Read(char* out, size_t size, size_t n, void* self) {
    Body* b = static_cast<Body*>(self);
    const size_t want = std::min(size * n, b->size - b->sent);
    if (want == 0) return 0;
    if (b->fd >= 0) {
      const ssize_t got = pread(b->fd, out, want, b->offset + static_cast<off_t>(b->sent));
      if (got <= 0) return CURL_READFUNC_ABORT;
      b->sent += static_cast<size_t>(got);
      return static_cast<size_t>(got);
    }
    std::memcpy(out, b->memory.data() + b->sent, want);
    b->sent += want;
    return want;
  }
  // Rewinds the body when curl sends the request again: a pooled connection
  // the server had closed is found dead only once the request goes out, and
  // curl then sends it on a new one (without this: "necessary data rewind
  // wasn't possible").
  static int Seek(void* self, curl_off_t offset, int origin) {
    Body* b = static_cast<Body*>(self);
    if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > b->size) {
      return CURL_SEEKFUNC_CANTSEEK;
    }
    b->sent = static_cast<size_t>(offset);
    return CURL_SEEKFUNC_OK;
  }
};

struct Response {
  long status = 0;
  std::string body;
  std::string etag;
  int64_t content_length = -1;
};

class S3Storage : public CheckpointStorage {
 public:
  S3Storage(S3Config config, std::string url) : config_(std::move(config)), url_(std::move(url)) {
    while (!config_.endpoint.empty() && config_.endpoint.back() == '/') config_.endpoint.pop_back();
    const size_t scheme = config_.endpoint.find("://");
    const std::string host =
        scheme == std::string::npos ? config_.endpoint : config_.endpoint.substr(scheme + 3);
    const std::string proto =
        scheme == std::string::npos ? "https://" : config_.endpoint.substr(0, scheme + 3);
    base_ = config_.path_style ? absl::StrCat(config_.endpoint, "/", config_.bucket)
                               : absl::StrCat(proto, config_.bucket, ".", host);
    sigv4_ = absl::StrCat("aws:amz:", config_.region, ":s3");
    userpwd_ = absl::StrCat(config_.access_key_id, ":", config_.secret_access_key);
  }
  ~S3Storage() override {
    for (CURL* h : pool_) curl_easy_cleanup(h);
  }

  const std::string& url() const override { return url_; }

  // Checks the bucket answers (a listing of at most one key).
  absl::Status Check() {
    ASSIGN_OR_RETURN(Response r, Send("GET", "", "list-type=2&max-keys=1", nullptr));
    if (r.status == 200) return absl::OkStatus();
    return Error(r, "GET", "(the bucket)");
  }

  absl::Status Write(std::string_view key, std::string_view data) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    Body body;
    body.memory = data;
    body.size = data.size();
    return Put(key, body);
  }

  absl::Status Upload(std::string_view key, const std::string& local_path) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    const int fd = ::open(local_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::NotFoundError(absl::StrCat("checkpoint storage ", url_, ": cannot open ",
                                              local_path, " to upload it as ", Sv(key)));
    }
    struct stat st {};
    fstat(fd, &st);
    Body body;
    body.fd = fd;
    body.size = static_cast<size_t>(st.st_size);
    absl::Status s = Put(key, body);
    ::close(fd);
    return s;
  }

  absl::StatusOr<std::string> Read(std::string_view key) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    ASSIGN_OR_RETURN(Response r, Send("GET", ObjectKey(key), "", nullptr));
    if (r.status == 200) return std::move(r.body);
    return Error(r, "GET", key);
  }

  absl::Status ReadChunks(std::string_view key,
                          const std::function<absl::Status(std::string_view)>& f) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    // Streamed: the body goes to `f` in chunks of up to 4 MiB as it arrives.
    struct Sink {
      const std::function<absl::Status(std::string_view)>* f;
      std::string buf;
      absl::Status status;
      bool delivered = false;
      absl::Status Drain() {
        if (buf.empty() || !status.ok()) return status;
        status = (*f)(buf);
        delivered = true;
        buf.clear();
        return status;
      }
    } sink{&f, {}, absl::OkStatus(), false};
    auto write = [](char* data, size_t size, size_t n, void* self) -> size_t {
      Sink* s = static_cast<Sink*>(self);
      s->buf.append(data, size * n);
      if (s->buf.size() >= (size_t{4} << 20) && !s->Drain().ok()) return 0;
      return size * n;
    };
    ASSIGN_OR_RETURN(Response r, Send("GET", ObjectKey(key), "", nullptr, [&](CURL* h) {
                       if (sink.delivered) return false;
                       curl_easy_setopt(
                           h, CURLOPT_WRITEFUNCTION,
                           +static_cast<size_t (*)(char*, size_t, size_t, void*)>(write));
                       curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
                       sink.buf.clear();
                       return true;
                     }));
    if (r.status != 200) {
      r.body = sink.buf;
      return Error(r, "GET", key);
    }
    RETURN_IF_ERROR(sink.status);
    return sink.Drain();
  }

  absl::StatusOr<bool> Exists(std::string_view key) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    ASSIGN_OR_RETURN(Response r, Head(key));
    if (r.status == 200) return true;
    if (r.status == 404) return false;
    return Error(r, "HEAD", key);
  }

  absl::StatusOr<uint64_t> Size(std::string_view key) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    ASSIGN_OR_RETURN(Response r, Head(key));
    if (r.status == 200 && r.content_length >= 0) return static_cast<uint64_t>(r.content_length);
    return Error(r, "HEAD", key);
  }

  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    std::vector<ObjectInfo> out;
    std::string token;
    const std::string full = ObjectKey(prefix);
    const size_t strip = config_.prefix.empty() ? 0 : config_.prefix.size() + 1;
    while (true) {
      // Parameters in sorted order (Signature V4's canonical query).
      std::string query;
      if (!token.empty())
        absl::StrAppend(&query, "continuation-token=", UriEncode(token, false), "&");
      absl::StrAppend(&query, "list-type=2&max-keys=", config_.list_page_size,
                      "&prefix=", UriEncode(full, false));
      ASSIGN_OR_RETURN(Response r, Send("GET", "", query, nullptr));
      if (r.status != 200) return Error(r, "GET", absl::StrCat("(listing ", Sv(prefix), ")"));
      XmlDoc doc(r.body);
      const xmlNode* root = doc.root();
      if (root == nullptr) {
        return absl::DataLossError(absl::StrCat("checkpoint storage ", url_, ": listing ",
                                                Sv(prefix), ": the answer is not XML"));
      }
      for (const xmlNode* n = root->children; n != nullptr; n = n->next) {
        if (n->type != XML_ELEMENT_NODE || xmlStrcmp(n->name, BAD_CAST "Contents") != 0) continue;
        std::string k = ElementText(n, "Key");
        uint64_t size = 0;
        (void)absl::SimpleAtoi(ElementText(n, "Size"), &size);
        if (k.size() < strip) continue;
        out.push_back(ObjectInfo{k.substr(strip), size});
      }
      if (ElementText(root, "IsTruncated") != "true") break;
      token = ElementText(root, "NextContinuationToken");
      if (token.empty()) break;
    }
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  absl::Status Delete(std::string_view key) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    ASSIGN_OR_RETURN(Response r, Send("DELETE", ObjectKey(key), "", nullptr));
    if (r.status == 200 || r.status == 204 || r.status == 404) return absl::OkStatus();
    return Error(r, "DELETE", key);
  }

  // Aborts the incomplete multipart uploads under `prefix` started before
  // `older_than_unix_ms` (stores that cannot list them: nothing to do).
  absl::Status DeleteStaleTemporaries(std::string_view prefix,
                                      int64_t older_than_unix_ms) override {
    std::string key_marker;
    std::string id_marker;
    while (true) {
      // Parameters in sorted order (Signature V4's canonical query).
      std::string query;
      if (!key_marker.empty()) {
        absl::StrAppend(&query, "key-marker=", UriEncode(key_marker, false), "&");
      }
      absl::StrAppend(&query, "prefix=", UriEncode(ObjectKey(prefix), false));
      if (!id_marker.empty()) {
        absl::StrAppend(&query, "&upload-id-marker=", UriEncode(id_marker, false));
      }
      query += "&uploads=";
      ASSIGN_OR_RETURN(Response r, Send("GET", "", query, nullptr));
      if (r.status != 200) {
        Logger()->debug("{}: cannot list incomplete uploads: {}", url_, S3Error(r.status, r.body));
        return absl::OkStatus();
      }
      XmlDoc doc(r.body);
      const xmlNode* root = doc.root();
      if (root == nullptr) return absl::OkStatus();
      for (const xmlNode* n = root->children; n != nullptr; n = n->next) {
        if (n->type != XML_ELEMENT_NODE || xmlStrcmp(n->name, BAD_CAST "Upload") != 0) continue;
        const std::string initiated = ElementText(n, "Initiated");
        absl::Time t;
        std::string err;
        if (!absl::ParseTime(absl::RFC3339_full, initiated, &t, &err) ||
            absl::ToUnixMillis(t) >= older_than_unix_ms) {
          continue;
        }
        (void)Send("DELETE", ElementText(n, "Key"),
                   absl::StrCat("uploadId=", UriEncode(ElementText(n, "UploadId"), false)),
                   nullptr);
      }
      if (ElementText(root, "IsTruncated") != "true") break;
      key_marker = ElementText(root, "NextKeyMarker");
      id_marker = ElementText(root, "NextUploadIdMarker");
      if (key_marker.empty()) break;
    }
    return absl::OkStatus();
  }

 private:
  std::string ObjectKey(std::string_view key) const {
    return config_.prefix.empty() ? std::string(key) : absl::StrCat(config_.prefix, "/", Sv(key));
  }

  absl::Status Error(const Response& r, std::string_view method, std::string_view key) const {
    const std::string what = absl::StrCat("checkpoint storage ", url_, ": ", Sv(method), " ",
                                          Sv(key), ": ", S3Error(r.status, r.body));
    if (r.status == 404) return absl::NotFoundError(what);
    if (r.status == 403 || r.status == 401) {
      return absl::PermissionDeniedError(absl::StrCat(
          what, " (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the credentials file)"));
    }
    return absl::UnavailableError(what);
  }

  absl::StatusOr<Response> Head(std::string_view key) {
    return Send("HEAD", ObjectKey(key), "", nullptr);
  }

  absl::Status Put(std::string_view key, Body body) {
    if (body.size > config_.multipart_threshold) return PutMultipart(key, body);
    ASSIGN_OR_RETURN(Response r, Send("PUT", ObjectKey(key), "", &body));
    if (r.status != 200) return Error(r, "PUT", key);
    g_objects.fetch_add(1);
    g_bytes.fetch_add(static_cast<int64_t>(body.size));
    return absl::OkStatus();
  }

  absl::Status PutMultipart(std::string_view key, const Body& whole) {
    const std::string object = ObjectKey(key);
    ASSIGN_OR_RETURN(Response init, Send("POST", object, "uploads=", nullptr));
    if (init.status != 200) return Error(init, "POST (start multipart upload)", key);
    const std::string upload_id = ElementText(XmlDoc(init.body).root(), "UploadId");
    if (upload_id.empty()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint storage ", url_, ": ", Sv(key), ": no UploadId in ", init.body));
    }
    const std::string id_query = absl::StrCat("uploadId=", UriEncode(upload_id, false));
    const size_t parts = (whole.size + config_.part_size - 1) / config_.part_size;
    std::vector<std::string> etags(parts);
    std::atomic<size_t> next{0};
    std::mutex mu;
    absl::Status failed;
    auto worker = [&] {
      for (size_t i = next.fetch_add(1); i < parts; i = next.fetch_add(1)) {
        {
          std::lock_guard<std::mutex> l(mu);
          if (!failed.ok()) return;
        }
        Body part = whole;
        part.offset = whole.offset + static_cast<off_t>(i * config_.part_size);
        part.size = std::min(config_.part_size, whole.size - i * config_.part_size);
        part.sent = 0;
        if (whole.fd < 0) {
          part.memory = whole.memory.substr(i * config_.part_size, part.size);
          part.offset = 0;
        }
        absl::StatusOr<Response> r =
            Send("PUT", object, absl::StrCat("partNumber=", i + 1, "&", id_query), &part);
        std::lock_guard<std::mutex> l(mu);
        if (!r.ok()) {
          failed = r.status();
        } else if (r->status != 200 || r->etag.empty()) {
          failed = Error(*r, absl::StrCat("PUT (part ", i + 1, ")"), key);
        } else {
          etags[i] = r->etag;
          g_bytes.fetch_add(static_cast<int64_t>(part.size));
        }
      }
    };
    std::vector<std::thread> threads;
    const int n = std::max(1, std::min<int>(config_.parallel_parts, static_cast<int>(parts)));
    for (int t = 1; t < n; ++t) threads.emplace_back(worker);
    worker();
    for (std::thread& t : threads) t.join();
    Failpoint("s3.before_complete_multipart");
    if (failed.ok()) {
      std::string xml = "<CompleteMultipartUpload>";
      for (size_t i = 0; i < parts; ++i) {
        absl::StrAppend(&xml, "<Part><PartNumber>", i + 1, "</PartNumber><ETag>", etags[i],
                        "</ETag></Part>");
      }
      xml += "</CompleteMultipartUpload>";
      Body body;
      body.memory = xml;
      body.size = xml.size();
      absl::StatusOr<Response> r = Send("POST", object, id_query, &body);
      if (!r.ok()) {
        failed = r.status();
      } else if (r->status != 200 || absl::StrContains(r->body, "<Error>")) {
        failed = Error(*r, "POST (complete multipart upload)", key);
      }
    }
    if (!failed.ok()) {
      (void)Send("DELETE", object, id_query, nullptr);  // abort, best effort
      return failed;
    }
    g_objects.fetch_add(1);
    g_multipart.fetch_add(1);
    return absl::OkStatus();
  }

  CURL* Acquire() {
    {
      std::lock_guard<std::mutex> l(pool_mu_);
      if (!pool_.empty()) {
        CURL* h = pool_.back();
        pool_.pop_back();
        return h;
      }
    }
    return curl_easy_init();
  }
  void Release(CURL* h) {
    std::lock_guard<std::mutex> l(pool_mu_);
    pool_.push_back(h);
  }

  // One request, retried with backoff on connection errors and 5xx.
  // `object`: the object key ("" for the bucket); `query`: encoded, its
  // parameters sorted; `body` for PUT/POST. `setup` may replace the write
  // callback (streaming reads); before a retry, it returns false to give up
  // (a stream that already delivered data).
  absl::StatusOr<Response> Send(std::string_view method, std::string_view object,
                                std::string_view query, Body* body,
                                const std::function<bool(CURL*)>& setup = nullptr) {
    std::string url = base_;
    if (!object.empty()) absl::StrAppend(&url, "/", UriEncode(object, true));
    if (object.empty()) url.push_back('/');
    if (!query.empty()) absl::StrAppend(&url, "?", Sv(query));
    CURL* h = Acquire();
    if (h == nullptr) return absl::InternalError("curl_easy_init failed");
    Response r;
    int64_t backoff = config_.backoff_ms;
    char error[CURL_ERROR_SIZE];
    for (int attempt = 0;; ++attempt) {
      r = Response();
      curl_easy_reset(h);
      curl_slist* headers = nullptr;
      headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
      headers = curl_slist_append(headers, "Expect:");
      if (!config_.session_token.empty()) {
        headers = curl_slist_append(
            headers, absl::StrCat("x-amz-security-token: ", config_.session_token).c_str());
      }
      curl_easy_setopt(h, CURLOPT_URL, url.c_str());
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4_.c_str());
      curl_easy_setopt(h, CURLOPT_USERPWD, userpwd_.c_str());
      curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
      curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
      curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
      curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
      error[0] = '\0';
      curl_easy_setopt(
          h, CURLOPT_WRITEFUNCTION, +[](char* d, size_t s, size_t n, void* out) -> size_t {
            static_cast<std::string*>(out)->append(d, s * n);
            return s * n;
          });
      curl_easy_setopt(h, CURLOPT_WRITEDATA, &r.body);
      curl_easy_setopt(
          h, CURLOPT_HEADERFUNCTION, +[](char* d, size_t s, size_t n, void* out) -> size_t {
            std::string_view line(d, s * n);
            if (line.size() > 5 && absl::EqualsIgnoreCase(Sv(line.substr(0, 5)), "etag:")) {
              std::string v(
                  absl::StripAsciiWhitespace(absl::string_view(line.data() + 5, line.size() - 5)));
              static_cast<Response*>(out)->etag = v;
            }
            return s * n;
          });
      curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
      if (method == "HEAD") {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
      } else if (method == "PUT") {
        body->sent = 0;
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, &Body::Read);
        curl_easy_setopt(h, CURLOPT_READDATA, body);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, &Body::Seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, body);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body->size));
      } else if (method == "POST") {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        const std::string_view data = body == nullptr ? std::string_view() : body->memory;
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, data.empty() ? "" : data.data());
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(data.size()));
      } else if (method != "GET") {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, std::string(method).c_str());
      }
      if (setup && !setup(h)) {
        curl_slist_free_all(headers);
        Release(h);
        return absl::UnavailableError(absl::StrCat("checkpoint storage ", url_, ": ", Sv(method),
                                                   " ", Sv(object),
                                                   ": the transfer broke off midway"));
      }
      const CURLcode rc = curl_easy_perform(h);
      curl_slist_free_all(headers);
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
      curl_off_t length = -1;
      curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
      r.content_length = length;
      const bool transient =
          rc != CURLE_OK
              ? (rc != CURLE_WRITE_ERROR && rc != CURLE_ABORTED_BY_CALLBACK)
              : (r.status == 500 || r.status == 502 || r.status == 503 || r.status == 504);
      if (!transient || attempt >= config_.retries) {
        Release(h);
        if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR) {
          return absl::UnavailableError(absl::StrCat(
              "checkpoint storage ", url_, ": ", Sv(method), " ",
              object.empty() ? absl::string_view("(the bucket)") : Sv(object), " at ",
              config_.endpoint, ": ", error[0] != '\0' ? error : curl_easy_strerror(rc),
              attempt > 0 ? absl::StrCat(" (after ", attempt + 1, " attempts)") : "",
              "; is the endpoint right (AWS_ENDPOINT_URL_S3) and reachable?"));
        }
        return r;
      }
      Logger()->warn(
          "{}: {} {}: {}; retrying in {} ms ({} of {})", url_, method, object,
          rc != CURLE_OK ? std::string(curl_easy_strerror(rc)) : S3Error(r.status, r.body), backoff,
          attempt + 1, config_.retries);
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
      backoff = std::min<int64_t>(backoff * 2, 5000);
    }
  }

  S3Config config_;
  std::string url_;
  std::string base_;   // endpoint + bucket (path or virtual-hosted style)
  std::string sigv4_;  // "aws:amz:<region>:s3"
  std::string userpwd_;
  std::mutex pool_mu_;
  std::vector<CURL*> pool_;
};

}  // namespace

absl::StatusOr<S3Config> S3ConfigFromEnvironment(const std::string& url) {
  absl::StatusOr<S3Url> parsed = ParseS3Url(url);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint storage URL: ", parsed.status().message()));
  }
  S3Config c;
  c.bucket = std::move(parsed->bucket);
  c.prefix = std::move(parsed->prefix);
  c.region = Env("AWS_REGION");
  if (c.region.empty()) c.region = Env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = Env("AWS_ENDPOINT_URL");
  const bool custom = !c.endpoint.empty();
  if (!custom) c.endpoint = absl::StrCat("https://s3.", c.region, ".amazonaws.com");
  const std::string path_style = Env("CARAVELA_S3_PATH_STYLE");
  c.path_style = path_style.empty() ? custom : (path_style == "true" || path_style == "1");
  c.access_key_id = Env("AWS_ACCESS_KEY_ID");
  c.secret_access_key = Env("AWS_SECRET_ACCESS_KEY");
  c.session_token = Env("AWS_SESSION_TOKEN");
  if (c.access_key_id.empty() != c.secret_access_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint storage ", url, ": set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (only ",
        c.access_key_id.empty() ? "the secret" : "the key id", " is set)"));
  }
  if (c.access_key_id.empty()) {
    std::string file = Env("AWS_SHARED_CREDENTIALS_FILE");
    if (file.empty() && !Env("HOME").empty()) file = Env("HOME") + "/.aws/credentials";
    std::string profile = Env("AWS_PROFILE");
    if (profile.empty()) profile = "default";
    c.access_key_id = CredentialsFileValue(file, profile, "aws_access_key_id");
    c.secret_access_key = CredentialsFileValue(file, profile, "aws_secret_access_key");
    c.session_token = CredentialsFileValue(file, profile, "aws_session_token");
    if (c.access_key_id.empty() || c.secret_access_key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint storage ", url,
          ": no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put them in "
          "profile [",
          profile, "] of ", file.empty() ? "~/.aws/credentials" : file,
          " (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE)"));
    }
  }
  return c;
}

absl::StatusOr<std::unique_ptr<CheckpointStorage>> OpenS3Storage(const S3Config& config) {
  static const bool init = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  (void)init;
  std::string url =
      absl::StrCat("s3://", config.bucket, config.prefix.empty() ? "" : "/", config.prefix);
  auto s = std::make_unique<S3Storage>(config, url);
  RETURN_IF_ERROR(s->Check());
  return s;
}

S3Traffic S3TrafficSoFar() {
  S3Traffic t;
  t.objects_written = g_objects.load();
  t.bytes_written = g_bytes.load();
  t.multipart_uploads = g_multipart.load();
  return t;
}

namespace {

// s3://bucket/prefix: an S3Storage, its endpoint, region and credentials from
// the environment (S3ConfigFromEnvironment).
class S3Scheme final : public StorageScheme {
 public:
  std::string_view name() const override { return "s3"; }
  std::string_view example() const override { return "s3://bucket/prefix"; }
  absl::Status Validate(std::string_view url) const override { return ParseS3Url(url).status(); }
  absl::StatusOr<std::unique_ptr<CheckpointStorage>> Open(const std::string& url) const override {
    ASSIGN_OR_RETURN(S3Config config, S3ConfigFromEnvironment(url));
    return OpenS3Storage(config);
  }
};

}  // namespace

const StorageScheme& S3StorageScheme() {
  static const S3Scheme scheme;
  return scheme;
}

}  // namespace caravela
