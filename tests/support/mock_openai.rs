//! An in-process mock of an OpenAI-compatible chat-completions server.
//!
//! It speaks real HTTP/1.1 over loopback (a hyper server on `127.0.0.1:0`, one
//! tokio task per connection) and real server-sent events, so the agent under
//! test exercises its whole HTTP stack against it.
//!
//! Every `POST …/chat/completions` request is recorded and answered with the
//! next queued [`Reply`] (FIFO). When the queue is empty the mock answers
//! `417` with an OpenAI-style error whose message names the unexpected request,
//! so the failure surfaces through the agent's own error path. Any other path
//! is recorded and answered with its [`MockOpenAi::route`] reply, or `404`.
//!
//! Per-provider behaviours: a [`MockOpenAi::rule`] looks at each
//! chat-completions request before the queue does and may answer it instead
//! (a DeepSeek-like server that rejects a history without `reasoning_content`:
//! [`deepseek_thinking_rule`]; a server that rejects `tools`:
//! [`refuses_tools_rule`]); routes serve server metadata (llama.cpp `/props`,
//! Ollama `/api/show`, vLLM `/v1/models`, ...); [`content_reply`] streams any
//! text as content deltas (`<think>` blocks, tool calls written as text).
//!
//! An SSE reply is a script of [`Step`]s played in order. Each step is handed
//! to hyper as soon as it is reached and hyper flushes whenever the script
//! waits (a [`Step::Delay`], [`Step::Stall`], or the end), so what the client
//! sees is timed by the script. Steps with no delay between them may reach the
//! client in one TCP segment; put a `Delay` between them to force separate
//! reads.
//!
//! The mock counts *disconnects*: responses whose connection closed before the
//! reply was fully handed over (or, for [`Reply::NoAnswer`], began) (the client dropped the stream mid-reply,
//! including during a [`Step::Stall`]). Tests use this to prove that
//! cancelling a turn really closes the HTTP stream.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

/// A running mock server. Dropping it stops accepting and aborts every open
/// connection.
pub struct MockOpenAi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_loop: JoinHandle<()>,
}

/// One HTTP request as the mock received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The HTTP method, e.g. `"POST"`.
    pub method: String,
    /// The request target's path and query, e.g. `"/v1/chat/completions"`.
    pub path: String,
    /// Every header in arrival order; names are lower-case.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, or `Value::Null` if it is not JSON.
    pub body: Value,
    /// The body as text (lossily decoded).
    pub raw_body: String,
}

impl RecordedRequest {
    /// The first value of the header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// How the mock answers one chat-completions request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `200 text/event-stream`; the steps are played in order. The stream ends
    /// cleanly after the last step (unless a step stalls or drops it).
    Sse(Vec<Step>),
    /// Any status with a body (served as `application/json` if it parses as
    /// JSON, else `text/plain`) and extra headers (e.g. `Retry-After`). An extra
    /// `content-type` header replaces the default one.
    Status {
        /// The HTTP status code.
        status: u16,
        /// The body, verbatim.
        body: String,
        /// Extra response headers.
        headers: Vec<(String, String)>,
    },
    /// `200 application/json` with this body: a server that ignores
    /// `stream: true`.
    Json(Value),
    /// No answer at all, not even the status line: a server that took the
    /// request and went silent. The connection stays open until the client
    /// goes away (which counts as a disconnect).
    NoAnswer,
}

impl Reply {
    /// A `status` reply with an OpenAI-style error body
    /// `{"error":{"message":…,"type":"mock_error"}}` and no extra headers.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply::Status { status, body: error_body(message).to_string(), headers: Vec::new() }
    }
}

/// One step of an SSE reply script.
#[derive(Debug, Clone)]
pub enum Step {
    /// Written as `data: <compact json>\n\n`.
    Event(Value),
    /// Written verbatim (garbage lines, comments, half an event, …).
    Raw(String),
    /// `data: [DONE]\n\n`.
    Done,
    /// Sleep before the next step (what was written so far is flushed first).
    Delay(Duration),
    /// Never send anything more; keep the connection open until the client
    /// goes away (which counts as a disconnect).
    Stall,
    /// Wait until the test opens this gate (what was written so far is
    /// flushed first): a stream that is slow exactly as long as a test needs.
    Gate(Gate),
    /// Abruptly close the connection: no terminating chunk, no `[DONE]`. The
    /// chunked body is left incomplete, so the client sees an error rather
    /// than a clean end of stream. Earlier steps are flushed first.
    Drop,
}

/// A gate a [`Step::Gate`] waits at until [`Gate::open`].
#[derive(Debug, Clone)]
pub struct Gate(Arc<tokio::sync::Semaphore>);

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate(Arc::new(tokio::sync::Semaphore::new(0)))
    }

    /// Lets one waiting (or the next) stream through.
    pub fn open(&self) {
        self.0.add_permits(1);
    }
}

/// State shared between the handle and the server tasks.
struct Shared {
    state: Mutex<State>,
    /// Woken whenever a request is recorded or a disconnect is counted.
    changed: Notify,
}

/// A chat-completions request body -> the reply that replaces the queued one.
type Rule = Arc<dyn Fn(&Value) -> Option<Reply> + Send + Sync>;

#[derive(Default)]
struct State {
    queue: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    disconnects: usize,
    /// `(method, path)` -> the reply to every such request.
    routes: Vec<(String, String, Reply)>,
    rules: Vec<Rule>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not hide the mock's state from others.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn count_disconnect(&self) {
        self.lock().disconnects += 1;
        self.changed.notify_waiters();
    }
}

impl MockOpenAi {
    /// Binds `127.0.0.1:0` and spawns the accept loop on the current runtime.
    pub async fn start() -> MockOpenAi {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("mock: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("mock: local_addr");
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), changed: Notify::new() });
        let accept_loop = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        MockOpenAi { addr, shared, accept_loop }
    }

    /// The socket address the mock listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL to configure as the model endpoint, e.g.
    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues `reply` for the next chat-completions request (FIFO).
    pub fn push(&self, reply: Reply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Answers every `method path` request (a path other than chat
    /// completions, without the query) with `reply`, until routed again.
    pub fn route(&self, method: &str, path: &str, reply: Reply) {
        let mut state = self.shared.lock();
        state.routes.retain(|(m, p, _)| !(m == method && p == path));
        state.routes.push((method.to_owned(), path.to_owned(), reply));
    }

    /// Looks at every chat-completions request body before the queue does:
    /// when `rule` returns a reply, that is the answer and the queue is left
    /// as it is. Rules are tried in the order they were added.
    pub fn rule(&self, rule: impl Fn(&Value) -> Option<Reply> + Send + Sync + 'static) {
        self.shared.lock().rules.push(Arc::new(rule));
    }

    /// The recorded chat-completions requests (metadata probes left out).
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(|r| r.method == "POST" && r.path.ends_with("/chat/completions")).collect()
    }

    /// How many queued replies have not been served yet.
    pub fn pending_replies(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Waits until at least `n` requests have arrived and returns all of them.
    /// Panics after `timeout`, naming what did arrive.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.wait_until(timeout, |state| (state.requests.len() >= n).then(|| state.requests.clone()))
            .await
            .unwrap_or_else(|state| {
                panic!(
                    "mock: waited {timeout:?} for {n} request(s), got {}: {:?}",
                    state.requests.len(),
                    state.requests.iter().map(|r| format!("{} {}", r.method, r.path)).collect::<Vec<_>>()
                )
            })
    }

    /// How many replies ended because the client went away before the reply
    /// was fully handed over.
    pub fn disconnects(&self) -> usize {
        self.shared.lock().disconnects
    }

    /// Waits until at least `n` disconnects have been counted. Panics after
    /// `timeout`.
    pub async fn wait_for_disconnects(&self, n: usize, timeout: Duration) {
        self.wait_until(timeout, |state| (state.disconnects >= n).then_some(())).await.unwrap_or_else(|state| {
            panic!("mock: waited {timeout:?} for {n} disconnect(s), got {}", state.disconnects)
        });
    }

    /// Polls `check` each time the state changes until it yields a value or
    /// `timeout` (real time) passes. On timeout returns a snapshot for the panic message.
    async fn wait_until<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&State) -> Option<T>,
    ) -> Result<T, Snapshot> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            // Register interest before checking, so no change is missed.
            let notified = self.shared.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.shared.lock();
                if let Some(value) = check(&state) {
                    return Ok(value);
                }
            }
            // A real-time bound: a paused clock must not end the wait early.
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if super::clock::within(left, notified).await.is_none() {
                let state = self.shared.lock();
                return Err(Snapshot { requests: state.requests.clone(), disconnects: state.disconnects });
            }
        }
    }
}

impl Drop for MockOpenAi {
    fn drop(&mut self) {
        // The accept loop owns the connection tasks; aborting it aborts them.
        self.accept_loop.abort();
    }
}

/// The mock's state at the moment a wait timed out.
struct Snapshot {
    requests: Vec<RecordedRequest>,
    disconnects: usize,
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                connections.spawn(serve_connection(stream, Arc::clone(&shared)));
            }
            // Reap finished connection tasks so the set does not grow forever.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    // Small SSE writes must not wait for Nagle: latency is measured against us.
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request| handle(request, Arc::clone(&shared)));
    // Errors here are the client going away or a `Step::Drop`; both expected.
    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
}

async fn handle(request: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<MockBody>, Infallible> {
    let (parts, body) = request.into_parts();
    let raw = body.collect().await.map(|collected| collected.to_bytes()).unwrap_or_default();
    let raw_body = String::from_utf8_lossy(&raw).into_owned();
    let recorded = RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned()),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect(),
        body: serde_json::from_str(&raw_body).unwrap_or(Value::Null),
        raw_body,
    };
    let is_chat = parts.method == hyper::Method::POST && parts.uri.path().ends_with("/chat/completions");

    let reply = {
        let mut state = shared.lock();
        let number = state.requests.len() + 1;
        let ruled = if is_chat { state.rules.iter().find_map(|rule| rule(&recorded.body)) } else { None };
        let routed = state
            .routes
            .iter()
            .find(|(method, path, _)| *method == recorded.method && path == parts.uri.path())
            .map(|(_, _, reply)| reply.clone());
        let reply = if let Some(reply) = ruled {
            reply
        } else if is_chat {
            state.queue.pop_front().unwrap_or_else(|| {
                let excerpt: String = recorded.raw_body.chars().take(500).collect();
                Reply::Status {
                    status: 417,
                    body: error_body(&format!("mock: unexpected request #{number}: {excerpt}")).to_string(),
                    headers: Vec::new(),
                }
            })
        } else if let Some(reply) = routed {
            reply
        } else {
            Reply::error(404, &format!("mock: no route for request #{number}: {} {}", recorded.method, recorded.path))
        };
        state.requests.push(recorded);
        reply
    };
    shared.changed.notify_waiters();
    if matches!(reply, Reply::NoAnswer) {
        let _counted = CountsDisconnect(shared);
        return std::future::pending().await;
    }
    Ok(build_response(reply, shared))
}

/// Counts a disconnect when a request that was never answered is dropped
/// (hyper drops it when the client closes the connection).
struct CountsDisconnect(Arc<Shared>);

impl Drop for CountsDisconnect {
    fn drop(&mut self) {
        self.0.count_disconnect();
    }
}

fn build_response(reply: Reply, shared: Arc<Shared>) -> Response<MockBody> {
    match reply {
        Reply::Sse(steps) => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(MockBody::Stream(SseScript {
                steps: steps.into(),
                sleep: None,
                abort_armed: false,
                finished: false,
                shared,
            }))
            .expect("mock: build SSE response"),
        Reply::Json(value) => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(MockBody::Full(Some(Bytes::from(value.to_string()))))
            .expect("mock: build JSON response"),
        Reply::NoAnswer => unreachable!("handle() never answers Reply::NoAnswer"),
        Reply::Status { status, body, headers } => {
            let default_type =
                if serde_json::from_str::<Value>(&body).is_ok() { "application/json" } else { "text/plain" };
            let overrides_type = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
            let mut builder = Response::builder().status(status);
            if !overrides_type {
                builder = builder.header("content-type", default_type);
            }
            for (name, value) in headers {
                builder = builder.header(name, value);
            }
            builder
                .body(MockBody::Full(Some(Bytes::from(body))))
                .expect("mock: build status response (bad status or header?)")
        }
    }
}

fn error_body(message: &str) -> Value {
    json!({"error": {"message": message, "type": "mock_error"}})
}

/// A response body: either all at once (sent with `content-length`) or an SSE
/// script played step by step (sent chunked).
enum MockBody {
    Full(Option<Bytes>),
    Stream(SseScript),
}

struct SseScript {
    steps: VecDeque<Step>,
    sleep: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// A `Step::Drop` was reached and hyper has been given one chance to flush.
    abort_armed: bool,
    /// The script ran to its end (or aborted on purpose).
    finished: bool,
    shared: Arc<Shared>,
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            MockBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Stream(script) => script.poll_step(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, MockBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            MockBody::Stream(_) => SizeHint::default(),
        }
    }
}

impl SseScript {
    fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        loop {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            if self.abort_armed {
                self.finished = true;
                // hyper answers a body error by closing the connection without
                // the terminating chunk.
                return Poll::Ready(Some(Err(io::Error::other("mock: Step::Drop"))));
            }
            let data = match self.steps.pop_front() {
                None => {
                    self.finished = true;
                    return Poll::Ready(None);
                }
                Some(Step::Event(value)) => format!("data: {value}\n\n"),
                Some(Step::Raw(text)) => text,
                Some(Step::Done) => "data: [DONE]\n\n".to_owned(),
                Some(Step::Delay(duration)) => {
                    self.sleep = Some(Box::pin(tokio::time::sleep(duration)));
                    continue;
                }
                Some(Step::Gate(gate)) => {
                    let semaphore = Arc::clone(&gate.0);
                    self.sleep = Some(Box::pin(async move {
                        if let Ok(permit) = semaphore.acquire_owned().await {
                            permit.forget();
                        }
                    }));
                    continue;
                }
                Some(Step::Stall) => {
                    // Stay pending forever; hyper drops us when the client
                    // closes the connection, and `Drop` counts it.
                    self.steps.push_front(Step::Stall);
                    return Poll::Pending;
                }
                Some(Step::Drop) => {
                    // Yield once so hyper flushes what was written so far,
                    // then fail the body on the next poll.
                    self.abort_armed = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            };
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(data)))));
        }
    }
}

impl Drop for SseScript {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.count_disconnect();
        }
    }
}

/// The content of the tool message answering `call_id` in a recorded request
/// body (what the model was told the tool returned).
pub fn tool_result(body: &Value, call_id: &str) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool result for {call_id} in {body}"))
        .to_owned()
}

// ---------------------------------------------------------------------------
// Event builders: OpenAI `chat.completion.chunk` values.
// ---------------------------------------------------------------------------

/// A `chat.completion.chunk` with one choice carrying `delta` and
/// `finish_reason`.
pub fn chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "mock",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    })
}

/// The usual first chunk: `delta: {"role":"assistant","content":""}`.
pub fn ev_role() -> Step {
    Step::Event(chunk(json!({"role": "assistant", "content": ""}), None))
}

/// A text delta: `delta: {"content": text}`.
pub fn ev_text(text: &str) -> Step {
    Step::Event(chunk(json!({"content": text}), None))
}

/// A reasoning delta, DeepSeek/vLLM style: `delta: {"reasoning_content": text}`.
pub fn ev_reasoning(text: &str) -> Step {
    Step::Event(chunk(json!({"reasoning_content": text}), None))
}

/// A reasoning delta, OpenRouter/Ollama style: `delta: {"reasoning": text}`.
pub fn ev_reasoning_field(text: &str) -> Step {
    Step::Event(chunk(json!({"reasoning": text}), None))
}

/// The first fragment of a tool call: its index, id, and function name, with
/// empty arguments.
pub fn ev_tool_call_start(index: u32, id: &str, name: &str) -> Step {
    Step::Event(chunk(
        json!({"tool_calls": [{
            "index": index,
            "id": id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }]}),
        None,
    ))
}

/// A further fragment of tool call `index`'s JSON arguments.
pub fn ev_tool_call_args(index: u32, args_fragment: &str) -> Step {
    Step::Event(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": args_fragment}}]}), None))
}

/// The closing chunk: empty delta and `finish_reason: reason`.
pub fn ev_finish(reason: &str) -> Step {
    Step::Event(chunk(json!({}), Some(reason)))
}

/// The trailing usage chunk sent with `stream_options.include_usage`:
/// `choices: []` plus token counts.
pub fn ev_usage(prompt: u64, completion: u64) -> Step {
    Step::Event(json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "mock",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }))
}

/// A complete streamed text answer: role chunk, `text` split over a few
/// chunks, `finish_reason: "stop"`, usage, `[DONE]`.
pub fn text_reply(text: &str) -> Reply {
    let mut steps = vec![ev_role()];
    steps.extend(split_in_pieces(text, 3).iter().map(|piece| ev_text(piece)));
    steps.push(ev_finish("stop"));
    steps.push(ev_usage(10, text.chars().count() as u64));
    steps.push(Step::Done);
    Reply::Sse(steps)
}

/// A complete streamed tool-call answer: role chunk, then for each
/// `(id, name, args)` its start chunk and its compact JSON arguments split over
/// several chunks, `finish_reason: "tool_calls"`, usage, `[DONE]`.
pub fn tool_call_reply(calls: &[(&str, &str, Value)]) -> Reply {
    let mut steps = vec![ev_role()];
    for (index, (id, name, args)) in calls.iter().enumerate() {
        let index = u32::try_from(index).expect("mock: too many tool calls");
        steps.push(ev_tool_call_start(index, id, name));
        let args = args.to_string();
        steps.extend(split_in_pieces(&args, 3).iter().map(|piece| ev_tool_call_args(index, piece)));
    }
    steps.push(ev_finish("tool_calls"));
    steps.push(ev_usage(10, 10));
    steps.push(Step::Done);
    Reply::Sse(steps)
}

/// Splits `text` into at most `pieces` non-empty parts on char boundaries
/// (none for an empty text).
fn split_in_pieces(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(pieces.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// A complete streamed answer whose content arrives as exactly these
/// pieces (one delta each, e.g. a `<think>` tag cut in two): role chunk,
/// the pieces, `finish_reason: "stop"`, usage, `[DONE]`.
pub fn content_reply(pieces: &[&str]) -> Reply {
    let mut steps = vec![ev_role()];
    steps.extend(pieces.iter().map(|piece| ev_text(piece)));
    steps.push(ev_finish("stop"));
    steps.push(ev_usage(10, 10));
    steps.push(Step::Done);
    Reply::Sse(steps)
}

/// A reasoning delta, OpenRouter style: `delta: {"reasoning": …,
/// "reasoning_details": details}` (the text of the `reasoning.text` items).
pub fn ev_reasoning_details(details: Value) -> Step {
    let text: String = details.as_array().into_iter().flatten().filter_map(|detail| detail["text"].as_str()).collect();
    Step::Event(chunk(json!({"reasoning": text, "reasoning_details": details}), None))
}

// ---------------------------------------------------------------------------
// Per-provider behaviours.
// ---------------------------------------------------------------------------

/// DeepSeek's thinking mode: between two user messages where the model
/// called tools, every assistant message must carry its `reasoning_content`
/// back, or the request is refused with DeepSeek's 400.
pub fn deepseek_thinking_rule(body: &Value) -> Option<Reply> {
    let messages = body["messages"].as_array()?;
    let exchanges = messages.split(|m| m["role"] == "user");
    let mut index = 0;
    for exchange in exchanges {
        index += 1;
        let called_tools = exchange.iter().any(|m| m["tool_calls"].as_array().is_some_and(|c| !c.is_empty()));
        for (offset, message) in exchange.iter().enumerate() {
            if called_tools && message["role"] == "assistant" && !message["reasoning_content"].is_string() {
                let at = index + offset - 1;
                return Some(Reply::Status {
                    status: 400,
                    body: json!({"error": {
                        "message": format!("Missing `reasoning_content` field in the assistant message at message index {at}. The reasoning_content in the thinking mode must be passed back to the API."),
                        "type": "invalid_request_error", "param": null, "code": "invalid_request_error"
                    }})
                    .to_string(),
                    headers: Vec::new(),
                });
            }
        }
        index += exchange.len();
    }
    None
}

/// A server whose model takes no tools: every request that offers `tools`
/// gets a 400 with `message` (e.g. Ollama's "… does not support tools").
pub fn refuses_tools_rule(message: &'static str) -> impl Fn(&Value) -> Option<Reply> + Send + Sync + 'static {
    move |body| body.get("tools").is_some().then(|| Reply::error(400, message))
}

/// llama.cpp's `GET /props`: the context of the loaded model and its modalities.
pub fn llamacpp_props(n_ctx: u64, vision: bool) -> Reply {
    Reply::Json(json!({
        "default_generation_settings": {"n_ctx": n_ctx, "params": {"n_predict": -1}},
        "total_slots": 1,
        "model_path": "/models/model.gguf",
        "modalities": {"vision": vision, "audio": false},
        "chat_template_caps": {"supports_tools": true, "supports_tool_calls": true},
        "build_info": "b9000-mock",
    }))
}

/// Ollama's `POST /api/show`: the model's maximum context, its capabilities
/// and, when the Modelfile sets one, its `num_ctx`.
pub fn ollama_show(context_length: u64, num_ctx: Option<u64>, capabilities: &[&str]) -> Reply {
    let mut parameters = String::from("stop                           \"<|im_end|>\"");
    if let Some(num_ctx) = num_ctx {
        parameters = format!("num_ctx                        {num_ctx}\n{parameters}");
    }
    Reply::Json(json!({
        "modelfile": "# Modelfile generated by \"ollama show\"",
        "parameters": parameters,
        "details": {"format": "gguf", "family": "qwen2", "parameter_size": "14.8B"},
        "model_info": {"general.architecture": "qwen2", "qwen2.context_length": context_length},
        "capabilities": capabilities,
    }))
}

/// An OpenAI-style `GET /v1/models` list (vLLM's entries carry `max_model_len`).
pub fn vllm_models(id: &str, max_model_len: u64) -> Reply {
    Reply::Json(json!({"object": "list", "data": [
        {"id": "some-other-model", "object": "model", "owned_by": "vllm", "max_model_len": 4096},
        {"id": id, "object": "model", "owned_by": "vllm", "root": id, "max_model_len": max_model_len},
    ]}))
}

/// OpenRouter's `GET /api/v1/models`: context length, supported parameters
/// and input modalities per model.
pub fn openrouter_models(id: &str, context_length: u64, supported_parameters: &[&str], inputs: &[&str]) -> Reply {
    Reply::Json(json!({"data": [
        {"id": "vendor/other", "context_length": 8192, "supported_parameters": ["tools"],
         "architecture": {"input_modalities": ["text"]}},
        {"id": id, "name": "Mock", "context_length": context_length,
         "top_provider": {"context_length": context_length, "max_completion_tokens": 16384},
         "supported_parameters": supported_parameters,
         "architecture": {"input_modalities": inputs, "output_modalities": ["text"]}},
    ]}))
}

/// LM Studio's `GET /api/v0/models`: each model's maximum context and, for
/// a loaded one, the context it was loaded with.
pub fn lmstudio_models(id: &str, max_context_length: u64, loaded_context_length: Option<u64>, vlm: bool) -> Reply {
    let mut model = json!({"id": id, "object": "model", "type": if vlm { "vlm" } else { "llm" },
        "arch": "qwen3", "state": "not-loaded", "max_context_length": max_context_length});
    if let Some(loaded) = loaded_context_length {
        model["state"] = json!("loaded");
        model["loaded_context_length"] = json!(loaded);
    }
    Reply::Json(json!({"object": "list", "data": [model]}))
}
