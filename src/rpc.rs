//! JSON-RPC 2.0 over newline-delimited byte streams: framing, classification
//! of incoming messages, the single outgoing queue, and correlation of the
//! requests we send with the responses we get.
//!
//! This module owns the wire mechanics and the standard error codes. It knows
//! nothing of ACP: method names, params and results are opaque JSON here.
//!
//! Ordering guarantee: every outgoing message goes through one unbounded queue
//! drained by one writer (a thread of its own on stdio), so messages reach the
//! peer in the order they were enqueued. A turn's `session/update`s are
//! therefore always written before that turn's response, whatever the timing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1::CancelRequestNotification;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::sync::lock;

/// Parse error: the line is not JSON (or not UTF-8).
pub const PARSE_ERROR: i32 = -32700;
/// Invalid request: JSON, but not a JSON-RPC 2.0 request.
pub const INVALID_REQUEST: i32 = -32600;
/// Method not found.
pub const METHOD_NOT_FOUND: i32 = -32601;
/// Invalid params.
pub const INVALID_PARAMS: i32 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i32 = -32603;
/// The request was cancelled (`$/cancel_request`, shutdown).
pub const REQUEST_CANCELLED: i32 = -32800;

/// The protocol-level cancellation notification, in both directions.
pub const CANCEL_REQUEST_METHOD: &str = "$/cancel_request";

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RpcError {
    /// The error code.
    pub code: i32,
    /// One concise sentence.
    pub message: String,
    /// Structured detail.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and a message.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    /// Adds structured data.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// A request id as the peer sent it (a number or a string, or `null` for a
/// message whose id is unknown), echoed back exactly: JSON-RPC wants the
/// response's id equal to the request's. A number that does not fit an `i64`
/// or `u64` (`1000000000000000000000000000001`, `1.5`) keeps its original
/// text for the echo, since parsing it into a `Value` would round it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestId {
    value: Value,
    exact: Option<String>,
}

impl RequestId {
    /// The `null` id, for answering a message whose id could not be read.
    pub fn null() -> RequestId {
        RequestId { value: Value::Null, exact: None }
    }

    /// The id as parsed: a large or fractional number is rounded here (never on the wire).
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The id `value`; `line` is the message it came from, whose text is
    /// kept when the number would not survive a round trip.
    fn parsed(value: Value, line: &[u8]) -> RequestId {
        let exact = match &value {
            Value::Number(number) if number.is_f64() => raw_id(line),
            _ => None,
        };
        RequestId { value, exact }
    }
}

/// The text of a message's top-level `id`, as sent.
fn raw_id(line: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
    }
    let id: Id<'_> = serde_json::from_slice(line).ok()?;
    id.id.map(|raw| raw.get().to_owned())
}

impl Serialize for RequestId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.exact.as_deref().and_then(|text| RawValue::from_string(text.to_owned()).ok()) {
            Some(raw) => raw.serialize(serializer),
            None => self.value.serialize(serializer),
        }
    }
}

impl std::fmt::Display for RequestId {
    /// The parsed id's JSON text (the key `$/cancel_request` finds it by).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.value)
    }
}

/// One classified incoming message.
#[derive(Debug)]
pub enum Incoming {
    /// A request: it must get exactly one response.
    Request {
        /// The id to answer with.
        id: RequestId,
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A notification: it never gets a response.
    Notification {
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
}

/// What one incoming line turned out to be.
#[derive(Debug)]
pub enum Classified {
    /// A request or notification to handle.
    Incoming(Incoming),
    /// Nothing left to do: a blank line, or a response routed to its waiting call.
    Consumed,
    /// Not a valid message: answer with this error to this id (`null` when unknown), then skip it.
    Malformed(RequestId, RpcError),
    /// Not valid, and nothing to answer (a broken response to us, say); logged only.
    Ignored(String),
}

type Answer = Result<Box<RawValue>, RpcError>;
type PendingCalls = HashMap<i64, oneshot::Sender<Answer>>;

/// The sending half of the connection: enqueue notifications, responses and
/// requests. Cheap to clone; every clone feeds the same writer.
#[derive(Clone)]
pub struct Outbox {
    inner: Arc<OutboxInner>,
}

struct OutboxInner {
    queue: mpsc::UnboundedSender<Frame>,
    pending: Mutex<PendingCalls>,
    next_id: AtomicI64,
}

enum Frame {
    Line(Vec<u8>),
    /// Flush, then signal that everything before this point was written.
    Flush(oneshot::Sender<()>),
}

#[derive(Serialize)]
struct NotificationOut<'a, P> {
    jsonrpc: &'static str,
    method: &'a str,
    params: &'a P,
}

#[derive(Serialize)]
struct RequestOut<'a, P> {
    jsonrpc: &'static str,
    id: i64,
    method: &'a str,
    params: &'a P,
}

#[derive(Serialize)]
struct ResultOut<'a, R> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    result: &'a R,
}

#[derive(Serialize)]
struct ErrorOut<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    error: &'a RpcError,
}

/// Why a request we sent got no result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The peer answered with an error.
    #[error("{0}")]
    Rpc(RpcError),
    /// The connection closed before the answer came.
    #[error("the client closed the connection before answering")]
    Closed,
    /// The answer did not have the expected shape.
    #[error("the client's answer could not be understood: {0}")]
    BadResult(String),
    /// The request could not be encoded (a path that is not UTF-8, say), so it was not sent.
    #[error("the request could not be sent: {0}")]
    Unsendable(String),
}

impl Outbox {
    /// Creates the queue; the returned [`Writer`] must be run to drain it.
    pub fn new() -> (Outbox, Writer) {
        let (queue, rx) = mpsc::unbounded_channel();
        let outbox = Outbox {
            inner: Arc::new(OutboxInner { queue, pending: Mutex::new(HashMap::new()), next_id: AtomicI64::new(0) }),
        };
        (outbox, Writer { rx })
    }

    fn enqueue<T: Serialize>(&self, message: &T) {
        match serde_json::to_vec(message) {
            Ok(bytes) => {
                // A closed queue means the writer is gone (the client hung up):
                // there is no one left to tell.
                let _ = self.inner.queue.send(Frame::Line(bytes));
            }
            Err(err) => tracing::error!(%err, "could not serialize an outgoing message"),
        }
    }

    /// Sends a message already encoded with [`encode_notification`].
    pub fn send_encoded(&self, line: Vec<u8>) {
        let _ = self.inner.queue.send(Frame::Line(line));
    }

    /// Sends a notification.
    pub fn notify<P: Serialize>(&self, method: &str, params: &P) {
        self.enqueue(&NotificationOut { jsonrpc: "2.0", method, params });
    }

    /// Answers a request with a result.
    pub fn respond_ok<R: Serialize>(&self, id: &RequestId, result: &R) {
        self.enqueue(&ResultOut { jsonrpc: "2.0", id, result });
    }

    /// Answers a request with an error.
    pub fn respond_err(&self, id: &RequestId, error: &RpcError) {
        self.enqueue(&ErrorOut { jsonrpc: "2.0", id, error });
    }

    /// Answers a request.
    pub fn respond<R: Serialize>(&self, id: &RequestId, result: Result<R, RpcError>) {
        match result {
            Ok(result) => self.respond_ok(id, &result),
            Err(error) => self.respond_err(id, &error),
        }
    }

    /// Sends a request now; the returned [`PendingCall`] resolves to its
    /// answer. Dropping the call before the answer arrives withdraws the
    /// request with `$/cancel_request`, so racing it against a cancellation
    /// token cascades the cancellation to the peer.
    pub fn request<P: Serialize>(&self, method: &str, params: &P) -> PendingCall {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let line = match serde_json::to_vec(&RequestOut { jsonrpc: "2.0", id, method, params }) {
            Ok(line) => line,
            Err(err) => {
                return PendingCall { outbox: self.clone(), id, answer: None, unsendable: Some(err.to_string()) };
            }
        };
        let (tx, rx) = oneshot::channel();
        self.pending().insert(id, tx);
        let _ = self.inner.queue.send(Frame::Line(line));
        PendingCall { outbox: self.clone(), id, answer: Some(rx), unsendable: None }
    }

    /// Sends a request and waits for its answer (see [`Outbox::request`]).
    pub async fn call<P: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, CallError> {
        self.request(method, params).result().await
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, PendingCalls> {
        lock(&self.inner.pending)
    }

    /// Routes a response from the peer to the call waiting for it.
    fn complete(&self, id: &Value, answer: Answer) {
        let waiter = id.as_i64().and_then(|id| self.pending().remove(&id));
        match waiter {
            Some(waiter) => {
                let _ = waiter.send(answer);
            }
            None => tracing::warn!(%id, "ignoring a response to a request we did not send (or no longer wait for)"),
        }
    }

    fn is_waiting_for(&self, id: &Value) -> bool {
        id.as_i64().is_some_and(|id| self.pending().contains_key(&id))
    }

    /// Fails every call still waiting (the connection is closing).
    pub fn fail_pending(&self) {
        self.pending().clear();
    }

    /// Resolves once everything enqueued so far has been written and flushed
    /// (or the writer is gone).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.inner.queue.send(Frame::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// Encodes a notification as the one line it is sent as (without the newline),
/// so the same bytes can be sent and recorded.
pub fn encode_notification<P: Serialize>(method: &str, params: &P) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&NotificationOut { jsonrpc: "2.0", method, params })
}

/// A request we sent, waiting for its answer.
pub struct PendingCall {
    outbox: Outbox,
    id: i64,
    answer: Option<oneshot::Receiver<Answer>>,
    unsendable: Option<String>,
}

impl PendingCall {
    /// Waits for the answer and decodes it.
    pub async fn result<R: serde::de::DeserializeOwned>(mut self) -> Result<R, CallError> {
        if let Some(why) = self.unsendable.take() {
            return Err(CallError::Unsendable(why));
        }
        let Some(answer) = self.answer.as_mut() else {
            return Err(CallError::Closed);
        };
        let answer = answer.await;
        self.answer = None;
        match answer {
            Ok(Ok(raw)) => serde_json::from_str(raw.get()).map_err(|err| CallError::BadResult(err.to_string())),
            Ok(Err(err)) => Err(CallError::Rpc(err)),
            Err(_) => Err(CallError::Closed),
        }
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        if self.answer.is_some() && self.outbox.pending().remove(&self.id).is_some() {
            self.outbox.notify(CANCEL_REQUEST_METHOD, &CancelRequestNotification::new(self.id));
        }
    }
}

/// Drains the outgoing queue into the byte stream, one message per line.
pub struct Writer {
    rx: mpsc::UnboundedReceiver<Frame>,
}

impl Writer {
    /// Writes until every [`Outbox`] clone is dropped or the stream fails.
    /// Writes are batched: whatever is queued is written, then flushed once.
    pub async fn run<W: AsyncWrite + Unpin>(mut self, writer: W) -> std::io::Result<()> {
        let mut writer = tokio::io::BufWriter::with_capacity(64 * 1024, writer);
        let mut batch = Vec::with_capacity(64);
        loop {
            if self.rx.recv_many(&mut batch, 256).await == 0 {
                writer.flush().await?;
                return Ok(());
            }
            let mut flushed = Vec::new();
            for frame in batch.drain(..) {
                match frame {
                    Frame::Line(bytes) => {
                        crate::trace::agent_message(&bytes);
                        writer.write_all(&bytes).await?;
                        writer.write_all(b"\n").await?;
                    }
                    Frame::Flush(done) => flushed.push(done),
                }
            }
            writer.flush().await?;
            for done in flushed {
                let _ = done.send(());
            }
        }
    }

    /// [`Writer::run`] for a blocking sink, on a thread of its own. For the
    /// process's stdout this is one wake-up per batch, where tokio's `Stdout`
    /// hands every write to its blocking pool and back (two, plus a task).
    pub fn run_blocking<W: std::io::Write>(mut self, writer: W) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut writer = std::io::BufWriter::with_capacity(64 * 1024, writer);
        let mut batch = Vec::with_capacity(64);
        let mut flushed = Vec::new();
        while let Some(first) = self.rx.blocking_recv() {
            batch.push(first);
            // Bounded like `run`'s batches so a firehose still gets flushed.
            while batch.len() < 256
                && let Ok(frame) = self.rx.try_recv()
            {
                batch.push(frame);
            }
            for frame in batch.drain(..) {
                match frame {
                    Frame::Line(bytes) => {
                        crate::trace::agent_message(&bytes);
                        writer.write_all(&bytes)?;
                        writer.write_all(b"\n")?;
                    }
                    Frame::Flush(done) => flushed.push(done),
                }
            }
            writer.flush()?;
            for done in flushed.drain(..) {
                let _ = done.send(());
            }
        }
        writer.flush()
    }
}

/// Reads newline-delimited messages, refusing lines longer than a limit
/// without ever holding more than the limit in memory.
pub struct LineReader<R> {
    reader: R,
    max_bytes: usize,
    /// The line read so far: kept here, not in the future, so a
    /// [`LineReader::next_line`] dropped half-way loses nothing.
    line: Vec<u8>,
    /// Bytes of an oversized line thrown away so far.
    discarded: usize,
}

/// One line read from the peer.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line, without its terminator.
    Complete(Vec<u8>),
    /// A line longer than the limit; its bytes were discarded.
    TooLong(usize),
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// Wraps a buffered reader.
    pub fn new(reader: R, max_bytes: usize) -> Self {
        Self { reader, max_bytes, line: Vec::new(), discarded: 0 }
    }

    /// The next line, `None` at end of stream. A final line without a
    /// terminator still counts.
    ///
    /// Cancel-safe: its only wait is `fill_buf`, which reads nothing when it
    /// is dropped, and what was taken from the buffer before is kept in
    /// `self`, so the next call goes on where this one stopped.
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                let discarded = std::mem::take(&mut self.discarded);
                return Ok(match (discarded, self.line.is_empty()) {
                    (0, true) => None,
                    (0, false) => Some(Line::Complete(std::mem::take(&mut self.line))),
                    (n, _) => {
                        self.line.clear();
                        Some(Line::TooLong(n))
                    }
                });
            }
            let (chunk, found_newline) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (&available[..at], true),
                None => (available, false),
            };
            let consumed = chunk.len() + usize::from(found_newline);
            if self.discarded > 0 || self.line.len() + chunk.len() > self.max_bytes {
                self.discarded += self.line.len() + chunk.len();
                self.line = Vec::new();
            } else {
                self.line.extend_from_slice(chunk);
            }
            self.reader.consume(consumed);
            if found_newline {
                if self.discarded > 0 {
                    return Ok(Some(Line::TooLong(std::mem::take(&mut self.discarded))));
                }
                if self.line.last() == Some(&b'\r') {
                    self.line.pop();
                }
                return Ok(Some(Line::Complete(std::mem::take(&mut self.line))));
            }
        }
    }
}

/// Classifies one line from the peer. Responses to our own requests are
/// routed to their waiting calls here and yield [`Classified::Consumed`]; blank lines too.
pub fn classify(line: &[u8], outbox: &Outbox) -> Classified {
    match classify_inner(line, outbox) {
        Ok(Some(incoming)) => Classified::Incoming(incoming),
        Ok(None) => Classified::Consumed,
        Err(classified) => *classified,
    }
}

fn classify_inner(line: &[u8], outbox: &Outbox) -> Result<Option<Incoming>, Box<Classified>> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(line).map_err(|err| {
        let message = if std::str::from_utf8(line).is_err() {
            "Parse error: the message is not valid UTF-8".to_owned()
        } else {
            format!("Parse error: {err}")
        };
        Box::new(Classified::Malformed(RequestId::null(), RpcError::new(PARSE_ERROR, message)))
    })?;
    let Value::Object(mut object) = value else {
        let message = if value.is_array() {
            "Invalid request: JSON-RPC batches are not supported by ACP; send one message per line"
        } else {
            "Invalid request: a JSON-RPC message must be a JSON object"
        };
        return Err(Box::new(Classified::Malformed(RequestId::null(), RpcError::new(INVALID_REQUEST, message))));
    };
    let id = object.remove("id");
    let invalid = |id: Option<&Value>, message: &str| {
        let id = match id.filter(|id| id.is_string() || id.is_number()) {
            Some(id) => RequestId::parsed(id.clone(), line),
            None => RequestId::null(),
        };
        Box::new(Classified::Malformed(id, RpcError::new(INVALID_REQUEST, format!("Invalid request: {message}"))))
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(id.as_ref(), "\"jsonrpc\" must be \"2.0\""));
    }
    let params = object.remove("params").unwrap_or(Value::Null);
    match object.remove("method") {
        Some(Value::String(method)) => {
            if !(params.is_null() || params.is_object() || params.is_array()) {
                return Err(invalid(id.as_ref(), "\"params\" must be an object or an array"));
            }
            match id {
                None => Ok(Some(Incoming::Notification { method, params })),
                Some(id @ (Value::Number(_) | Value::String(_))) => {
                    Ok(Some(Incoming::Request { id: RequestId::parsed(id, line), method, params }))
                }
                Some(Value::Null) => Err(invalid(None, "a request id must not be null")),
                Some(other) => Err(invalid(Some(&other), "a request id must be a string or a number")),
            }
        }
        Some(_) => Err(invalid(id.as_ref(), "\"method\" must be a string")),
        None => {
            let Some(id) = id else {
                return Err(invalid(
                    None,
                    "a message needs a \"method\" (request or notification) or an \"id\" (response)",
                ));
            };
            let answer = match (object.remove("result"), object.remove("error")) {
                (Some(result), None) => serde_json::value::to_raw_value(&result)
                    .map_err(|err| RpcError::new(INTERNAL_ERROR, err.to_string())),
                (None, Some(error)) => Err(serde_json::from_value::<RpcError>(error)
                    .unwrap_or_else(|err| RpcError::new(INTERNAL_ERROR, format!("malformed error object: {err}")))),
                _ if outbox.is_waiting_for(&id) => {
                    // A broken answer to our own request: fail that call rather than wait forever.
                    Err(RpcError::new(INVALID_REQUEST, "the response has neither or both of result and error"))
                }
                // Neither a request nor an answer to us: refused, and the id
                // echoed only if it is a valid one (never `{"a":1}`, say).
                _ => return Err(invalid(Some(&id), "a request needs a \"method\"")),
            };
            outbox.complete(&id, answer);
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut reader = LineReader::new(input, max);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().await.unwrap() {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_and_refuses_long_ones() {
        let got = lines(b"{\"a\":1}\n0123456789abc\r\n{}\nlast", 10).await;
        assert_eq!(
            got,
            vec![
                Line::Complete(b"{\"a\":1}".to_vec()),
                Line::TooLong(14),
                Line::Complete(b"{}".to_vec()),
                Line::Complete(b"last".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn a_long_line_across_buffer_refills_is_discarded() {
        let mut input = vec![b'x'; 100_000];
        input.push(b'\n');
        input.extend_from_slice(b"ok\n");
        let reader = tokio::io::BufReader::with_capacity(1024, input.as_slice());
        let mut reader = LineReader::new(reader, 4096);
        assert_eq!(reader.next_line().await.unwrap(), Some(Line::TooLong(100_000)));
        assert_eq!(reader.next_line().await.unwrap(), Some(Line::Complete(b"ok".to_vec())));
        assert_eq!(reader.next_line().await.unwrap(), None);
    }

    /// A `next_line` dropped half-way through a line (the reader's select
    /// picked another branch) loses none of it.
    #[tokio::test]
    async fn next_line_is_cancel_safe() {
        use tokio::io::AsyncWriteExt as _;
        let (mut client, agent) = tokio::io::duplex(64);
        let mut reader = LineReader::new(tokio::io::BufReader::new(agent), 4096);
        client.write_all(b"{\"half\":").await.unwrap();
        for _ in 0..3 {
            tokio::select! {
                biased;
                line = reader.next_line() => panic!("no line is complete yet: {line:?}"),
                () = tokio::task::yield_now() => {}
            }
        }
        client.write_all(b"1}\n").await.unwrap();
        assert_eq!(reader.next_line().await.unwrap(), Some(Line::Complete(b"{\"half\":1}".to_vec())));
    }

    fn classify_str(line: &str) -> Classified {
        let (outbox, _writer) = Outbox::new();
        classify(line.as_bytes(), &outbox)
    }

    fn answer(result: Classified) -> (Value, i32) {
        match result {
            Classified::Malformed(id, err) => (id.value().clone(), err.code),
            other => panic!("expected an error answer, got {other:?}"),
        }
    }

    #[test]
    fn classification() {
        assert!(matches!(
            classify_str(r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{}}"#),
            Classified::Incoming(Incoming::Request { .. })
        ));
        assert!(matches!(
            classify_str(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#),
            Classified::Incoming(Incoming::Notification { .. })
        ));
        assert!(matches!(classify_str("   "), Classified::Consumed));
        assert_eq!(answer(classify_str("{nope")), (Value::Null, PARSE_ERROR));
        assert_eq!(answer(classify_str("[]")), (Value::Null, INVALID_REQUEST));
        assert_eq!(answer(classify_str("42")), (Value::Null, INVALID_REQUEST));
        assert_eq!(answer(classify_str(r#"{"id":3,"method":"x"}"#)), (Value::from(3), INVALID_REQUEST));
        assert_eq!(
            answer(classify_str(r#"{"jsonrpc":"2.0","id":"a","method":5}"#)),
            (Value::from("a"), INVALID_REQUEST)
        );
        assert_eq!(answer(classify_str(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#)), (Value::Null, INVALID_REQUEST));
        assert_eq!(
            answer(classify_str(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#)),
            (Value::from(1), INVALID_REQUEST)
        );
    }

    #[tokio::test]
    async fn a_request_that_cannot_be_encoded_fails_at_once() {
        let (outbox, _writer) = Outbox::new();
        let path = crate::platform::testing::non_unicode_path();
        #[derive(Serialize)]
        struct Params {
            path: std::path::PathBuf,
        }
        let result = outbox.call::<_, Value>("fs/read_text_file", &Params { path }).await;
        assert!(matches!(result, Err(CallError::Unsendable(_))), "{result:?}");
        assert!(outbox.pending().is_empty());
    }

    /// Regression (found by the `jsonrpc_framing` fuzz target): a message
    /// with an id but no method, result or error was answered with that id
    /// echoed even when it was an object or an array, which is not JSON-RPC.
    #[test]
    fn an_invalid_id_is_never_echoed() {
        assert_eq!(answer(classify_str(r#"{"jsonrpc":"2.0","id":{"a":1}}"#)), (Value::Null, INVALID_REQUEST));
        assert_eq!(answer(classify_str(r#"{"jsonrpc":"2.0","id":[1],"x":2}"#)), (Value::Null, INVALID_REQUEST));
        assert_eq!(answer(classify_str(r#"{"jsonrpc":"2.0","id":true}"#)), (Value::Null, INVALID_REQUEST));
        assert_eq!(answer(classify_str(r#"{"jsonrpc":"2.0","id":5}"#)), (Value::from(5), INVALID_REQUEST));
        assert_eq!(answer(classify_str(r#"{"jsonrpc":"2.0","id":"x"}"#)), (Value::from("x"), INVALID_REQUEST));
    }

    /// A message nested 100,000 deep (issue 29) is a parse error answered
    /// like any other, not a stack overflow: serde_json stops at 128 levels,
    /// and nothing here walks JSON it did not parse.
    #[test]
    fn a_deeply_nested_message_is_a_parse_error() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{}0{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(answer(classify_str(&deep)), (Value::Null, PARSE_ERROR));
    }

    /// Issue 11, defect 17: the response's id is the request's, byte for
    /// byte, however large or fractional the number.
    #[tokio::test]
    async fn ids_are_echoed_exactly() {
        let (outbox, writer) = Outbox::new();
        let ids = ["1000000000000000000000000000001", "18446744073709551616", "1.5", "-7", "7", "\"seven\""];
        for id in ids {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{}}}}"#);
            match classify(line.as_bytes(), &outbox) {
                Classified::Incoming(Incoming::Request { id, .. }) => outbox.respond_ok(&id, &serde_json::json!({})),
                other => panic!("{other:?}"),
            }
            // A malformed message's id comes back just as exactly.
            let line = format!(r#"{{"jsonrpc":"1.0","id":{id},"method":"x"}}"#);
            let Classified::Malformed(id, error) = classify(line.as_bytes(), &outbox) else { panic!("{line}") };
            outbox.respond_err(&id, &error);
        }
        drop(outbox);
        let mut written = Vec::new();
        writer.run(&mut written).await.unwrap();
        let written = String::from_utf8(written).unwrap();
        let lines: Vec<&str> = written.lines().collect();
        for (pair, id) in lines.chunks(2).zip(ids) {
            assert!(pair[0].starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result""#)), "{}", pair[0]);
            assert!(pair[1].starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"error""#)), "{}", pair[1]);
        }
        assert_eq!(lines.len(), 2 * ids.len());
    }

    #[test]
    fn invalid_utf8_is_a_parse_error() {
        let (outbox, _writer) = Outbox::new();
        let result = classify(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}", &outbox);
        assert_eq!(answer(result), (Value::Null, PARSE_ERROR));
    }

    #[tokio::test]
    async fn calls_are_answered_and_dropped_calls_are_withdrawn() {
        let (outbox, writer) = Outbox::new();
        let (client_end, agent_end) = tokio::io::duplex(1 << 16);
        let writer_task = tokio::spawn(writer.run(agent_end));

        let call = {
            let outbox = outbox.clone();
            tokio::spawn(async move { outbox.call::<_, Value>("fs/read_text_file", &serde_json::json!({})).await })
        };
        let mut client = tokio::io::BufReader::new(client_end);
        let mut line = String::new();
        client.read_line(&mut line).await.unwrap();
        let sent: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(sent["method"], "fs/read_text_file");
        let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":"hi"}}}}"#, sent["id"]);
        assert!(matches!(classify(reply.as_bytes(), &outbox), Classified::Consumed));
        assert_eq!(call.await.unwrap().unwrap()["content"], "hi");

        // A call dropped before its answer sends $/cancel_request for its id.
        let params = serde_json::json!({});
        let dropped = outbox.call::<_, Value>("session/request_permission", &params);
        let timed_out = tokio::time::timeout(std::time::Duration::from_millis(10), dropped).await;
        assert!(timed_out.is_err());
        line.clear();
        client.read_line(&mut line).await.unwrap();
        let asked: Value = serde_json::from_str(&line).unwrap();
        line.clear();
        client.read_line(&mut line).await.unwrap();
        let withdrawn: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(withdrawn["method"], CANCEL_REQUEST_METHOD);
        assert_eq!(withdrawn["params"]["requestId"], asked["id"]);

        drop(outbox);
        writer_task.await.unwrap().unwrap();
    }
}
