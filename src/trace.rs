//! The protocol trace (`--trace FILE`, `LATHE_TRACE`): every JSON-RPC
//! message both ways and every model request, response and stream event,
//! one JSON line each with a timestamp (`ts`) and a direction (`dir`:
//! `client->lathe`, `lathe->client`, `lathe->model`, `model->lathe`).
//!
//! Redacted before it reaches the file: the configured API keys and
//! secret-looking header values, MCP servers' environment values and
//! tokens, the values of the variables lathe treats as secrets, every
//! `Authorization`-like header, every JSON field named like a credential
//! (`apiKey`, `token`, `password`, ...), `{"name": "GITHUB_TOKEN", "value":
//! ...}` pairs (ACP's MCP `env` and `headers`), and `Bearer <token>`
//! anywhere in a string.
//!
//! Off the hot path: a hook only copies the bytes it is given into a
//! bounded queue (at most [`MAX_QUEUED`] records and [`MAX_QUEUED_BYTES`]);
//! parsing, redacting, encoding and writing happen on a thread of its own.
//! When the file cannot keep up, records are dropped (and the number
//! dropped is written when it can), so a slow disk never slows a turn nor
//! grows memory. Nothing is ever written to stdout.
//!
//! The trace is one per process, like the `tracing` subscriber: installed
//! once by the binary, reached by the hooks in `acp`, `rpc` and `model`
//! through [`client_message`] and friends, which cost one atomic load when
//! no trace is on. This module knows JSON and HTTP shapes, nothing of ACP
//! semantics.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value, json};

use crate::config::{Config, McpTransport};

/// Most records waiting to be written.
pub const MAX_QUEUED: usize = 4096;
/// Most bytes waiting to be written.
pub const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;
/// Longest [`finish`] waits for the file to take what is queued.
const FINISH_WAIT: Duration = Duration::from_secs(2);
/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";
/// Shorter configured values are not searched for in text (too many false hits).
const MIN_SECRET_CHARS: usize = 6;

static TRACE: OnceLock<Tracer> = OnceLock::new();

struct Tracer {
    queue: mpsc::SyncSender<Item>,
    queued_bytes: std::sync::Arc<AtomicUsize>,
    dropped: std::sync::Arc<AtomicU64>,
    max_bytes: usize,
}

enum Item {
    Record(Box<Entry>),
    Flush(mpsc::Sender<()>),
}

struct Entry {
    at: SystemTime,
    direction: Direction,
    payload: Payload,
}

/// Which way a traced message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    FromClient,
    ToClient,
    ToModel,
    FromModel,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Direction::FromClient => "client->lathe",
            Direction::ToClient => "lathe->client",
            Direction::ToModel => "lathe->model",
            Direction::FromModel => "model->lathe",
        }
    }
}

enum Payload {
    JsonRpc(Vec<u8>),
    HttpRequest { method: String, url: String, headers: Vec<(String, Vec<u8>)>, body: Option<Vec<u8>> },
    HttpResponse { url: String, status: u16, headers: Vec<(String, Vec<u8>)> },
    HttpError { url: String, error: String },
    Event(String),
}

impl Payload {
    fn size(&self) -> usize {
        match self {
            Payload::JsonRpc(bytes) => bytes.len(),
            Payload::HttpRequest { url, headers, body, .. } => {
                url.len()
                    + headers.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>()
                    + body.as_ref().map_or(0, Vec::len)
            }
            Payload::HttpResponse { url, headers, .. } => {
                url.len() + headers.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>()
            }
            Payload::HttpError { url, error } => url.len() + error.len(),
            Payload::Event(data) => data.len(),
        }
    }
}

/// Starts tracing to `path` (created 0600, appended to), with `secrets`
/// (see [`secrets_of`]) redacted. Once per process; a second call fails.
pub fn install(path: &Path, secrets: Vec<String>) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    let tracer = Tracer::start(Box::new(file), secrets, MAX_QUEUED, MAX_QUEUED_BYTES)?;
    TRACE.set(tracer).map_err(|_| std::io::Error::other("a trace is already being written"))
}

impl Tracer {
    /// A tracer writing to `out` on a thread of its own, holding at most
    /// `capacity` records and `max_bytes` bytes in its queue.
    fn start(
        out: Box<dyn std::io::Write + Send>,
        secrets: Vec<String>,
        capacity: usize,
        max_bytes: usize,
    ) -> std::io::Result<Tracer> {
        let (queue, items) = mpsc::sync_channel(capacity);
        let queued_bytes = std::sync::Arc::new(AtomicUsize::new(0));
        let dropped = std::sync::Arc::new(AtomicU64::new(0));
        let writer = Writer {
            file: std::io::BufWriter::with_capacity(64 * 1024, out),
            redactor: Redactor::new(secrets),
            queued_bytes: std::sync::Arc::clone(&queued_bytes),
            dropped: std::sync::Arc::clone(&dropped),
        };
        std::thread::Builder::new().name("lathe-trace".to_owned()).spawn(move || writer.run(&items))?;
        Ok(Tracer { queue, queued_bytes, dropped, max_bytes })
    }

    /// Queues one record, or drops it (counted) when the queue is full:
    /// never waits for the file.
    fn record(&self, direction: Direction, payload: impl FnOnce() -> Payload) {
        let payload = payload();
        let size = payload.size();
        if self.queued_bytes.fetch_add(size, Ordering::Relaxed) + size > self.max_bytes {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let entry = Entry { at: SystemTime::now(), direction, payload };
        if self.queue.try_send(Item::Record(Box::new(entry))).is_err() {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits (at most [`FINISH_WAIT`]) until what was queued is written.
    fn finish(&self) {
        let deadline = Instant::now() + FINISH_WAIT;
        let (done, written) = mpsc::channel();
        let mut item = Item::Flush(done);
        loop {
            match self.queue.try_send(item) {
                Ok(()) => break,
                Err(mpsc::TrySendError::Full(back)) if Instant::now() < deadline => {
                    item = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let _ = written.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

/// Whether a trace is being written.
pub fn enabled() -> bool {
    TRACE.get().is_some()
}

/// Waits (at most [`FINISH_WAIT`]) until what was traced so far is in the file.
pub fn finish() {
    if let Some(tracer) = TRACE.get() {
        tracer.finish();
    }
}

fn record(direction: Direction, payload: impl FnOnce() -> Payload) {
    if let Some(tracer) = TRACE.get() {
        tracer.record(direction, payload);
    }
}

/// A JSON-RPC line the client sent.
pub fn client_message(line: &[u8]) {
    record(Direction::FromClient, || Payload::JsonRpc(line.to_vec()));
}

/// A JSON-RPC line lathe sent the client.
pub fn agent_message(line: &[u8]) {
    record(Direction::ToClient, || Payload::JsonRpc(line.to_vec()));
}

/// A request to a model server, as it goes out.
pub fn model_request(request: &reqwest::Request) {
    model_request_with_body(request, request.body().and_then(reqwest::Body::as_bytes));
}

/// A request to a model server whose body is a stream: `body` is what the
/// stream holds.
pub fn model_request_with_body(request: &reqwest::Request, body: Option<&[u8]>) {
    record(Direction::ToModel, || Payload::HttpRequest {
        method: request.method().to_string(),
        url: request.url().to_string(),
        headers: request.headers().iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
        body: body.map(<[u8]>::to_vec),
    });
}

/// A model server's response headers.
pub fn model_response(response: &reqwest::Response) {
    record(Direction::FromModel, || Payload::HttpResponse {
        url: response.url().to_string(),
        status: response.status().as_u16(),
        headers: response.headers().iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
    });
}

/// A request to `url` that failed (no answer, an error status's message, a broken stream).
pub fn model_error(url: &str, error: &str) {
    record(Direction::FromModel, || Payload::HttpError { url: url.to_owned(), error: error.to_owned() });
}

/// One server-sent event's data from a model stream.
pub fn model_event(data: &str) {
    record(Direction::FromModel, || Payload::Event(data.to_owned()));
}

/// The values in `config` that must never be written out: API keys,
/// secret-looking model headers, MCP servers' environment values, tokens
/// and secret-looking headers, and the values of the variables children
/// are denied as secrets.
pub fn secrets_of(config: &Config) -> Vec<String> {
    let mut secrets = Vec::new();
    for model in config.models.values() {
        secrets.extend(model.api_key.as_ref().map(|key| key.expose().to_owned()));
        for (name, value) in &model.headers {
            if secret_name(name) {
                secrets.push(value.clone());
            }
        }
    }
    for server in &config.mcp_servers {
        match &server.transport {
            McpTransport::Stdio { env, .. } => secrets.extend(env.iter().map(|(_, value)| value.clone())),
            McpTransport::Http { headers, .. } | McpTransport::Sse { headers, .. } => {
                for (name, value) in headers {
                    if secret_name(name) {
                        secrets.push(value.clone());
                        secrets.extend(bearer_token(value).map(str::to_owned));
                    }
                }
            }
        }
    }
    for name in &config.children.secret_vars {
        secrets.extend(std::env::var(name).ok());
    }
    secrets
}

fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

/// Whether a header, field or variable of this name holds a credential.
pub fn secret_name(name: &str) -> bool {
    let name: String = name.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
    ["auth", "key", "token", "secret", "password", "passwd", "cookie", "credential", "session"]
        .iter()
        .any(|word| name.contains(word))
}

/// Takes secrets out of text and JSON.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for these values (short and empty ones are ignored).
    pub fn new(secrets: Vec<String>) -> Redactor {
        let mut secrets: Vec<String> =
            secrets.into_iter().filter(|s| s.trim().chars().count() >= MIN_SECRET_CHARS).collect();
        // Longest first, so a key containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `text` with every known secret and every bearer token replaced.
    pub fn text(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        redact_bearer(&text)
    }

    /// Redacts `value` in place: credential-named fields, name/value pairs
    /// naming a credential, and every string as [`Redactor::text`] does.
    pub fn value(&self, value: &mut Value) {
        match value {
            Value::String(text) => *text = self.text(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.value(item)),
            Value::Object(fields) => {
                let pair_names_secret =
                    fields.get("name").and_then(Value::as_str).is_some_and(secret_name) && fields.contains_key("value");
                for (name, field) in fields.iter_mut() {
                    let hide = (field.is_string() || field.is_number())
                        && (secret_field(name) || (pair_names_secret && name == "value"));
                    if hide {
                        *field = Value::String(REDACTED.to_owned());
                    } else {
                        self.value(field);
                    }
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Bytes that may be JSON: redacted JSON if they parse, else redacted text.
    fn json_or_text(&self, bytes: &[u8]) -> Value {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(mut value) => {
                self.value(&mut value);
                value
            }
            Err(_) => Value::String(self.text(&String::from_utf8_lossy(bytes))),
        }
    }

    fn headers(&self, headers: &[(String, Vec<u8>)]) -> Value {
        let mut out = Map::new();
        for (name, value) in headers {
            let shown =
                if secret_name(name) { REDACTED.to_owned() } else { self.text(&String::from_utf8_lossy(value)) };
            out.insert(name.clone(), Value::String(shown));
        }
        Value::Object(out)
    }
}

/// A JSON field that holds a credential by its very name. Narrower than
/// [`secret_name`]: `sessionId` or `max_tokens` are not secrets.
fn secret_field(name: &str) -> bool {
    let name: String = name.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
    matches!(
        name.as_str(),
        "authorization"
            | "proxyauthorization"
            | "apikey"
            | "xapikey"
            | "token"
            | "accesstoken"
            | "refreshtoken"
            | "idtoken"
            | "bearertoken"
            | "password"
            | "secret"
            | "clientsecret"
            | "cookie"
    )
}

/// `Bearer <token>` (any case) with the token replaced.
fn redact_bearer(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    if !lower.contains("bearer ") {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find("bearer ") {
        let start = search + found + "bearer ".len();
        let token_end = text[start..]
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == ',')
            .map_or(text.len(), |end| start + end);
        if token_end > start {
            out.push_str(&text[rest..start]);
            out.push_str(REDACTED);
            rest = token_end;
        }
        search = token_end.max(start);
    }
    out.push_str(&text[rest..]);
    out
}

struct Writer {
    file: std::io::BufWriter<Box<dyn std::io::Write + Send>>,
    redactor: Redactor,
    queued_bytes: std::sync::Arc<AtomicUsize>,
    dropped: std::sync::Arc<AtomicU64>,
}

impl Writer {
    fn run(mut self, items: &mpsc::Receiver<Item>) {
        while let Ok(item) = items.recv() {
            self.handle(item);
            while let Ok(item) = items.try_recv() {
                self.handle(item);
            }
            if self.file.flush().is_err() {
                return;
            }
        }
    }

    fn handle(&mut self, item: Item) {
        match item {
            Item::Flush(done) => {
                let _ = self.file.flush();
                let _ = done.send(());
            }
            Item::Record(entry) => {
                self.queued_bytes.fetch_sub(entry.payload.size(), Ordering::Relaxed);
                let dropped = self.dropped.swap(0, Ordering::Relaxed);
                if dropped > 0 {
                    let note = json!({"ts": timestamp(SystemTime::now()), "type": "dropped", "count": dropped,
                        "note": "the trace file could not keep up; these records were dropped"});
                    self.write(&note);
                }
                let line = self.encode(*entry);
                self.write(&line);
            }
        }
    }

    fn write(&mut self, value: &Value) {
        let mut line = match serde_json::to_string(value) {
            Ok(line) => line,
            Err(err) => format!("{{\"type\":\"unencodable\",\"error\":{:?}}}", err.to_string()),
        };
        // Belt and braces: nothing known to be secret leaves, whatever its place.
        line = self.redactor.text(&line);
        line.push('\n');
        let _ = self.file.write_all(line.as_bytes());
    }

    fn encode(&self, entry: Entry) -> Value {
        let mut out = json!({"ts": timestamp(entry.at), "dir": entry.direction.as_str()});
        let redactor = &self.redactor;
        let fields = match entry.payload {
            Payload::JsonRpc(line) => json!({"type": "jsonrpc", "message": redactor.json_or_text(&line)}),
            Payload::HttpRequest { method, url, headers, body } => json!({
                "type": "http_request",
                "method": method,
                "url": redactor.text(&url),
                "headers": redactor.headers(&headers),
                "body": body.map(|body| redactor.json_or_text(&body)),
            }),
            Payload::HttpResponse { url, status, headers } => json!({
                "type": "http_response",
                "url": redactor.text(&url),
                "status": status,
                "headers": redactor.headers(&headers),
            }),
            Payload::HttpError { url, error } => {
                json!({"type": "http_error", "url": redactor.text(&url), "error": redactor.text(&error)})
            }
            Payload::Event(data) => json!({"type": "sse_event", "data": redactor.json_or_text(data.as_bytes())}),
        };
        if let (Value::Object(out), Value::Object(fields)) = (&mut out, fields) {
            out.extend(fields);
        }
        out
    }
}

fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_known_values_fields_pairs_and_bearer_tokens() {
        let redactor = Redactor::new(vec!["sk-live-123456".into(), "abc".into()]);
        assert_eq!(redactor.text("key sk-live-123456 here"), "key [redacted] here");
        assert_eq!(redactor.text("abc stays (too short to search for)"), "abc stays (too short to search for)");
        assert_eq!(redactor.text("Authorization: Bearer zzz9, next"), "Authorization: Bearer [redacted], next");
        let mut value = json!({
            "params": {"sessionId": "sess_1", "apiKey": "x", "mcpServers": [{
                "env": [{"name": "GITHUB_TOKEN", "value": "ghp_x"}, {"name": "PAGER", "value": "cat"}],
                "headers": [{"name": "Authorization", "value": "Basic x"}]}],
            "text": "my key is sk-live-123456"},
            "max_tokens": 100,
        });
        redactor.value(&mut value);
        assert_eq!(value["params"]["sessionId"], "sess_1");
        assert_eq!(value["params"]["apiKey"], REDACTED);
        assert_eq!(value["params"]["mcpServers"][0]["env"][0]["value"], REDACTED);
        assert_eq!(value["params"]["mcpServers"][0]["env"][1]["value"], "cat");
        assert_eq!(value["params"]["mcpServers"][0]["headers"][0]["value"], REDACTED);
        assert_eq!(value["params"]["text"], "my key is [redacted]");
        assert_eq!(value["max_tokens"], 100);
        let headers = redactor.headers(&[
            ("authorization".into(), b"Bearer sk".to_vec()),
            ("x-api-key".into(), b"k".to_vec()),
            ("content-type".into(), b"application/json".to_vec()),
        ]);
        assert_eq!(
            headers,
            json!({"authorization": REDACTED, "x-api-key": REDACTED, "content-type": "application/json"})
        );
    }

    /// A sink that takes nothing until its gate opens, then keeps what it is given.
    struct Gated {
        gate: mpsc::Receiver<()>,
        open: bool,
        kept: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl std::io::Write for Gated {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if !self.open {
                let _ = self.gate.recv();
                self.open = true;
            }
            self.kept.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A file that does not keep up never makes a hook wait and never
    /// holds more than the queue's bound: the rest is dropped, counted, and
    /// the count written once the file takes writes again.
    #[test]
    fn a_stuck_file_drops_records_instead_of_waiting() {
        let (open, gate) = mpsc::channel();
        let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = Gated { gate, open: false, kept: std::sync::Arc::clone(&kept) };
        let tracer = Tracer::start(Box::new(sink), vec!["sk-secret-key".into()], 4, 1 << 20).unwrap();
        let line = br#"{"jsonrpc":"2.0","method":"x","params":{"key":"sk-secret-key"}}"#;
        for _ in 0..1000 {
            // Returns at once: the writer is stuck in its first write.
            tracer.record(Direction::FromClient, || Payload::JsonRpc(line.to_vec()));
        }
        // The writer's buffer (64 KiB) and the queue (4) hold what was not dropped.
        assert!(tracer.dropped.load(Ordering::Relaxed) > 0, "the queue is bounded");
        assert!(tracer.queued_bytes.load(Ordering::Relaxed) <= 4 * line.len());
        open.send(()).unwrap();
        tracer.finish();
        // Room again: the next record is kept, after the count of those dropped.
        tracer.record(Direction::ToClient, || Payload::JsonRpc(line.to_vec()));
        tracer.finish();
        let written = String::from_utf8(kept.lock().unwrap().clone()).unwrap();
        let records: Vec<Value> = written.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(records.iter().any(|r| r["type"] == "dropped" && r["count"].as_u64() > Some(0)), "{written}");
        assert_eq!(records.last().unwrap()["dir"], "lathe->client");
        let kept = records.iter().filter(|r| r["type"] == "jsonrpc").count() as u64;
        let dropped: u64 = records.iter().filter_map(|r| r["count"].as_u64()).sum();
        assert_eq!(kept + dropped, 1001, "every record is written or counted");
        assert!(!written.contains("sk-secret-key"));
    }

    #[test]
    fn bearer_at_the_end_and_twice() {
        assert_eq!(redact_bearer("bearer a bearer b"), "bearer [redacted] bearer [redacted]");
        assert_eq!(redact_bearer("Bearer "), "Bearer ");
        assert_eq!(redact_bearer("no token"), "no token");
    }
}
