//! The protocol trace (`--trace FILE`, `LATHE_TRACE`): every JSON-RPC
//! message both ways and every model request, response and stream event,
//! one JSON line each with a timestamp (`ts`) and a direction (`dir`:
//! `client->lathe`, `lathe->client`, `lathe->model`, `model->lathe`).
//!
//! Redacted before it reaches the file, by [`crate::redact`] (the one
//! redaction lathe has): the known secrets (API keys, every MCP server's
//! `env` and `headers` values, URL passwords, ...), URL userinfo, every
//! `Authorization`-like header, every JSON field named like a credential,
//! and `Bearer <token>` anywhere; and, across records, a secret streamed in
//! pieces ([`crate::redact::Window`]).
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
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::redact::{Redactor, Window};

/// Most records waiting to be written.
pub const MAX_QUEUED: usize = 4096;
/// Most bytes waiting to be written.
pub const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;
/// Longest [`finish`] waits for the file to take what is queued.
const FINISH_WAIT: Duration = Duration::from_secs(2);
pub use crate::redact::REDACTED;

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

/// Starts tracing to `path` (created 0600, appended to), with the secrets
/// lathe knows of ([`crate::redact::global`], as they are when each record
/// is written) redacted. Once per process; a second call fails.
pub fn install(path: &Path) -> std::io::Result<()> {
    let file = crate::platform::private::open_append(path)?;
    let tracer = Tracer::start(Box::new(file), None, MAX_QUEUED, MAX_QUEUED_BYTES)?;
    TRACE.set(tracer).map_err(|_| std::io::Error::other("a trace is already being written"))
}

impl Tracer {
    /// A tracer writing to `out` on a thread of its own, holding at most
    /// `capacity` records and `max_bytes` bytes in its queue, redacting
    /// `secrets` (the process's, [`crate::redact::global`], when `None`).
    fn start(
        out: Box<dyn std::io::Write + Send>,
        secrets: Option<Vec<String>>,
        capacity: usize,
        max_bytes: usize,
    ) -> std::io::Result<Tracer> {
        let (queue, items) = mpsc::sync_channel(capacity);
        let queued_bytes = std::sync::Arc::new(AtomicUsize::new(0));
        let dropped = std::sync::Arc::new(AtomicU64::new(0));
        let writer = Writer {
            file: std::io::BufWriter::with_capacity(64 * 1024, out),
            secrets: secrets.map(|secrets| std::sync::Arc::new(Redactor::new(secrets))),
            window: Window::default(),
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

struct Writer {
    file: std::io::BufWriter<Box<dyn std::io::Write + Send>>,
    /// Fixed secrets (tests); `None`: the process's.
    secrets: Option<std::sync::Arc<Redactor>>,
    /// The ends of streamed fields, for secrets cut across records.
    window: Window,
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

    fn redactor(&self) -> std::sync::Arc<Redactor> {
        self.secrets.clone().unwrap_or_else(crate::redact::global)
    }

    fn write(&mut self, value: &Value) {
        let mut line = match serde_json::to_string(value) {
            Ok(line) => line,
            Err(err) => format!("{{\"type\":\"unencodable\",\"error\":{:?}}}", err.to_string()),
        };
        // Belt and braces: nothing known to be secret leaves, whatever its place.
        line = self.redactor().text(&line);
        line.push('\n');
        let _ = self.file.write_all(line.as_bytes());
    }

    fn encode(&mut self, entry: Entry) -> Value {
        let mut out = json!({"ts": timestamp(entry.at), "dir": entry.direction.as_str()});
        let redactor = self.redactor();
        let redactor = &*redactor;
        let stream = entry.direction.as_str();
        let fields = match entry.payload {
            Payload::JsonRpc(line) => {
                let mut message = redactor.json_or_text(&line);
                self.window.stitch(redactor, stream, &mut message);
                json!({"type": "jsonrpc", "message": message})
            }
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
            Payload::Event(data) => {
                let mut data = redactor.json_or_text(data.as_bytes());
                self.window.stitch(redactor, stream, &mut data);
                json!({"type": "sse_event", "data": data})
            }
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
        let tracer = Tracer::start(Box::new(sink), Some(vec!["sk-secret-key".into()]), 4, 1 << 20).unwrap();
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
}
