//! The model: the conversation types, and one streaming request to an
//! OpenAI-compatible `chat/completions` endpoint.
//!
//! [`ModelClient`] owns the HTTP side: async-openai's config builds the URL,
//! the auth and the extra headers; our reqwest client sends the request (so
//! nothing retries behind our back and the status, `Retry-After` and provider
//! message of a failure are kept); `eventsource-stream` cuts the body into
//! events, which [`ResponseStream`] parses one at a time as the turn asks for
//! them. async-openai's own streaming call is not used: it parses on a task of
//! its own into an unbounded queue, which costs a task hand-off per token and,
//! when the model outpaces the editor, holds every parsed chunk in memory
//! (4.9 MB at the peak of the benchmark's 10,000-delta turn). [`decode`] turns
//! chunks into events, purely; [`retry`] decides, purely, whether and when a
//! failed request is tried again (the turn loop does the waiting); [`probe`]
//! asks the server for the model's context window when the config does not
//! give it. The client also remembers what a server refused: `stream_options`
//! (usage is then not asked for) and tools (the model is then chat-only).
//! This module knows nothing of ACP or tools: it sends the messages and tool
//! definitions it is given and reports what came back.

pub mod decode;
pub mod probe;
pub mod retry;
pub mod sse;
pub mod text_calls;
pub mod think;
pub mod wire;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_openai::config::{Config as _, OpenAIConfig};
use eventsource_stream::{Event, EventStreamError, Eventsource as _};
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use crate::config::{DEFAULT_CONTEXT_WINDOW, ModelConfig, NetworkSettings, PromptProfile};
/// The definitions the model is offered (sent in the wire's shape, see [`wire`]).
pub use crate::tool_definition::ToolDefinition;
pub use decode::{FinishReason, ModelEvent, ModelOutput, OversizedCall, StreamDecoder, Usage};
pub use probe::{ModelInfo, WindowSource};
use wire::{ChatChunk, ChatRequest};

/// One message of the conversation, as lathe keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// What the user sent.
    User {
        /// Text and images.
        parts: Vec<UserPart>,
    },
    /// What the model answered.
    Assistant {
        /// The answer text.
        text: String,
        /// The reasoning (sent back as the model's `reasoning_history` says).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reasoning: String,
        /// The field the server put the reasoning in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_field: Option<ReasoningField>,
        /// OpenRouter's `reasoning_details`, kept verbatim to be sent back.
        /// Boxed: a `Value` is 72 bytes and almost every message has none,
        /// and a long session keeps thousands of messages.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_details: Option<Box<serde_json::Value>>,
        /// Tool calls the model made.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCallRequest>,
        /// The user cancelled this answer part-way.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
    /// The result of one tool call.
    Tool {
        /// The call this answers.
        tool_call_id: String,
        /// What the tool returned (or why it failed).
        content: String,
    },
}

/// Where a server put an answer's reasoning, so that it goes back the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningField {
    /// `reasoning_content` (DeepSeek, Kimi, vLLM, llama.cpp, LM Studio), or
    /// `<think>` tags in the text, which servers read back from this field.
    ReasoningContent,
    /// `reasoning` (OpenRouter, Ollama).
    Reasoning,
}

/// A part of a user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum UserPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// Its MIME type.
        mime_type: String,
        /// Base64 data.
        data: String,
    },
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The call id, echoed in the tool result.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The JSON arguments, as text (possibly invalid JSON: models make mistakes).
    pub arguments: String,
}

/// What kind of failure, for the client and for retry decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelErrorKind {
    /// HTTP 429.
    RateLimited,
    /// HTTP 401/403.
    Auth,
    /// Another 4xx.
    BadRequest,
    /// The request did not fit the model's context.
    ContextOverflow,
    /// HTTP 5xx, or an error reported inside the stream.
    Server,
    /// No answer or a silent stream.
    Timeout,
    /// The connection failed or broke.
    Network,
    /// No usable model configuration.
    Config,
    /// lathe itself could not make the request (encoding it, building the
    /// HTTP client): a defect or an environment problem, not the endpoint's.
    Internal,
}

/// Why a model request failed. `Display` is one sentence for the user.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    /// The endpoint answered with an HTTP error status.
    #[error("the model endpoint answered HTTP {status}: {message}")]
    Http {
        /// The status code.
        status: u16,
        /// The provider's own message.
        message: String,
        /// How long the provider asked us to wait.
        retry_after: Option<Duration>,
    },
    /// The endpoint could not be reached.
    #[error("could not reach the model endpoint {url}: {detail}")]
    Connect {
        /// The base URL.
        url: String,
        /// Why.
        detail: String,
    },
    /// The endpoint accepted the connection but sent no response headers in time.
    #[error("the model endpoint did not answer within {} s", .0.as_secs())]
    ResponseTimeout(Duration),
    /// The stream broke off before the model finished.
    #[error("the model's response stream broke off: {0}")]
    StreamDropped(String),
    /// The stream went silent for too long.
    #[error("the model's response stream stalled: nothing arrived for {} s", .0.as_secs())]
    StreamStalled(Duration),
    /// The provider reported an error inside the stream.
    #[error("the model endpoint reported an error: {0}")]
    Provider(String),
    /// The response could not be understood.
    #[error("the model endpoint sent a response lathe cannot read: {0}")]
    InvalidResponse(String),
    /// There is no usable model.
    #[error("{0}")]
    NotConfigured(String),
    /// lathe could not make the request: encoding it or building the HTTP
    /// client or request failed. Not a configuration problem.
    #[error("lathe could not make the model request: {0}")]
    Request(String),
}

impl ModelError {
    /// The category of this failure.
    pub fn kind(&self) -> ModelErrorKind {
        match self {
            ModelError::Http { status: 429, .. } => ModelErrorKind::RateLimited,
            ModelError::Http { status: 401 | 403, .. } => ModelErrorKind::Auth,
            ModelError::Http { status: 413, .. } => ModelErrorKind::ContextOverflow,
            ModelError::Http { status, message, .. } if (400..500).contains(status) => {
                if looks_like_context_overflow(message) {
                    ModelErrorKind::ContextOverflow
                } else {
                    ModelErrorKind::BadRequest
                }
            }
            ModelError::Http { .. } | ModelError::Provider(_) | ModelError::InvalidResponse(_) => {
                ModelErrorKind::Server
            }
            ModelError::Connect { .. } | ModelError::StreamDropped(_) => ModelErrorKind::Network,
            ModelError::ResponseTimeout(_) | ModelError::StreamStalled(_) => ModelErrorKind::Timeout,
            ModelError::NotConfigured(_) => ModelErrorKind::Config,
            ModelError::Request(_) => ModelErrorKind::Internal,
        }
    }

    /// The HTTP status, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ModelError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The wait the provider asked for.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Whether a 400's message says the server takes no tools for this model
/// (Ollama: "… does not support tools"; llama.cpp: "tools param requires
/// --jinja flag"; vLLM: "\"auto\" tool choice requires
/// --enable-auto-tool-choice …"). Not: OpenAI's refusal of tools *with
/// reasoning* (the fix is `reasoning_effort = "none"`, not losing the
/// tools), nor a message about one tool's schema.
fn refuses_tools(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    let about_tools = ["tools", "tool_choice", "tool choice", "tool calling", "tool use", "function calling"]
        .iter()
        .any(|word| message.contains(word));
    let refusal = ["not support", "unsupported", "requires", "not enabled", "not available", "not allowed"]
        .iter()
        .any(|word| message.contains(word));
    about_tools
        && refusal
        && !message.contains("reasoning_effort")
        && !message.contains("schema")
        && !looks_like_context_overflow(&message)
}

fn looks_like_context_overflow(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["context length", "context_length", "context window", "maximum context", "too many tokens", "prompt is too long"]
        .iter()
        .any(|needle| message.contains(needle))
}

/// What a model's server says of it, asked the way a session asks (see
/// [`ModelClient::info`]): the context window and which answer gave it,
/// and whether the model takes tools and images. For `lathe doctor`.
pub async fn describe(model: &ModelConfig, network: &NetworkSettings) -> Result<ModelInfo, ModelError> {
    let client = ModelClient::new(Arc::new(model.clone()), network)?;
    Ok(client.info().await.clone())
}

/// A client for one configured model.
pub struct ModelClient {
    upstream: UpstreamService,
    /// The endpoint's URL and headers (auth included), as async-openai builds them.
    openai: OpenAIConfig,
    model: Arc<ModelConfig>,
    stream_idle_timeout: Duration,
    /// Cleared when the server rejects `stream_options`, so later requests omit it.
    include_usage: AtomicBool,
    /// Why the model takes no tools, once the server said so: later
    /// requests offer none.
    tools_refused: std::sync::OnceLock<String>,
    /// The model's limits: configured, or asked of the server once.
    info: tokio::sync::OnceCell<ModelInfo>,
    /// How the turn loop retries a request that failed before its answer started.
    retry: retry::RetryPolicy,
}

impl std::fmt::Debug for ModelClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClient").field("model", &self.model).finish_non_exhaustive()
    }
}

impl ModelClient {
    /// Builds the client. Cheap: no connection is made until the first request.
    pub fn new(model: Arc<ModelConfig>, network: &NetworkSettings) -> Result<Self, ModelError> {
        let http = crate::http::client_builder()
            .connect_timeout(network.connect_timeout)
            .tcp_nodelay(true)
            .build()
            .map_err(|err| ModelError::Request(format!("cannot build the HTTP client: {err}")))?;
        let mut openai_config = OpenAIConfig::new()
            .with_api_base(model.base_url.clone())
            .with_api_key(model.api_key.as_ref().map(|k| k.expose().to_owned()).unwrap_or_default())
            .with_org_id("")
            .with_project_id("");
        for (name, value) in &model.headers {
            let bad_header = |err: &dyn std::fmt::Display| {
                ModelError::NotConfigured(format!("model \"{}\": header \"{name}\": {err}", model.key))
            };
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad_header(&e))?;
            openai_config = openai_config.with_header(header, value.as_str()).map_err(|e| bad_header(&e))?;
        }
        let upstream =
            UpstreamService { http, response_timeout: network.response_timeout, base_url: model.base_url.clone() };
        Ok(Self {
            upstream,
            openai: openai_config,
            include_usage: AtomicBool::new(model.stream_usage),
            tools_refused: std::sync::OnceLock::new(),
            info: tokio::sync::OnceCell::new(),
            model,
            stream_idle_timeout: network.stream_idle_timeout,
            retry: retry::RetryPolicy::from_settings(network),
        })
    }

    /// The model this client talks to.
    pub fn model(&self) -> &ModelConfig {
        &self.model
    }

    /// How a request that failed before its answer started is retried. The
    /// retrying itself is the caller's: its waits must be cancellable and shown.
    pub fn retry_policy(&self) -> &retry::RetryPolicy {
        &self.retry
    }

    /// The model's context window and, where the server says, whether it
    /// takes tools and images: the config's window, else the server's
    /// answer (asked once, the first time; see [`probe`]), else the default.
    /// Dropping the future before it is done leaves the question open for
    /// the next caller (a cancelled turn does not cache a half answer).
    pub async fn info(&self) -> &ModelInfo {
        self.info
            .get_or_init(|| async {
                let info = match self.model.context_window {
                    Some(window) => ModelInfo::configured(window),
                    None => probe::probe(&self.model.base_url, &self.model.model, |request| self.fetch(request)).await,
                };
                tracing::info!(
                    model = %self.model.key,
                    context_window = info.context_window,
                    source = %info.window_source,
                    tools = ?info.tools,
                    vision = ?info.vision,
                    "model limits"
                );
                if info.tools == Some(false) {
                    self.refuse_tools("the server lists no tool support for this model".to_owned());
                }
                if info.vision == Some(false) && self.model.vision {
                    tracing::warn!(model = %self.model.key, "vision = true, but the server says this model takes no images");
                }
                info
            })
            .await
    }

    /// The context window: what [`ModelClient::info`] found, or, before it
    /// was asked, the configured window or the default.
    pub fn context_window(&self) -> u64 {
        match self.info.get() {
            Some(info) => info.context_window,
            None => self.model.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW),
        }
    }

    /// The prompt profile: the configured one, else the one the context
    /// window calls for.
    pub fn profile(&self) -> PromptProfile {
        self.model.prompt.unwrap_or_else(|| PromptProfile::for_window(self.context_window()))
    }

    /// Why this model takes no tools, once a server said so. Requests then
    /// offer none.
    pub fn chat_only(&self) -> Option<&str> {
        self.tools_refused.get().map(String::as_str)
    }

    fn refuse_tools(&self, reason: String) {
        if self.tools_refused.set(reason).is_ok() {
            tracing::warn!(model = %self.model.key, reason = ?self.chat_only(), "the model takes no tools; going on chat-only");
        }
    }

    /// One probe request with the endpoint's headers (auth included): the
    /// JSON body of a successful answer, capped in size.
    async fn fetch(&self, request: probe::ProbeRequest) -> Option<serde_json::Value> {
        let builder = match &request.body {
            Some(body) => self.upstream.http.post(&request.url).json(body),
            None => self.upstream.http.get(&request.url),
        };
        let request = builder.headers(self.openai.headers()).build().ok()?;
        let response = self.upstream.send_probe(request).await?;
        let body = read_capped(response).await.ok()?;
        serde_json::from_slice(&body).ok()
    }

    /// `GET {base_url}/models` with the endpoint's headers (auth included):
    /// the model ids the server lists. For `lathe doctor`, which reads the
    /// error to tell an unreachable endpoint from a refused key.
    pub async fn list_models(&self) -> Result<Vec<String>, ModelError> {
        let request = self
            .upstream
            .http
            .get(self.openai.url("/models"))
            .query(&self.openai.query())
            .headers(self.openai.headers())
            .build()
            .map_err(|err| ModelError::Request(format!("cannot build the request: {err}")))?;
        let body = self.upstream.send_for_json(request).await?;
        let ids = body
            .get("data")
            .or_else(|| body.get("models"))
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| ModelError::InvalidResponse("the answer has no `data` list".to_owned()))?
            .iter()
            .filter_map(|entry| entry.get("id").or_else(|| entry.get("name")).and_then(serde_json::Value::as_str))
            .map(str::to_owned)
            .collect();
        Ok(ids)
    }

    /// Sends one streaming request and waits for the response to start.
    /// Dropping the future or the stream closes the connection.
    ///
    /// A server that refuses `stream_options` is asked again without it, and
    /// one that refuses tools is asked again without them; both are
    /// remembered for later requests (see [`ModelClient::chat_only`]).
    pub async fn stream(
        &self,
        system_prompt: &str,
        messages: &[Message],
        tools: &[ToolDefinition],
    ) -> Result<ResponseStream, ModelError> {
        loop {
            let include_usage = self.include_usage.load(Ordering::Relaxed);
            let tools = if self.chat_only().is_some() { &[] } else { tools };
            let request = ChatRequest::new(&self.model, system_prompt, messages, tools, include_usage);
            match self.open(&request).await {
                Err(ModelError::Http { status: 400 | 422, message, .. })
                    if include_usage && message.contains("stream_options") =>
                {
                    tracing::info!(model = %self.model.key, "the endpoint rejects stream_options; retrying without it");
                    self.include_usage.store(false, Ordering::Relaxed);
                }
                Err(ModelError::Http { status: 400 | 422, message, .. })
                    if !tools.is_empty() && refuses_tools(&message) =>
                {
                    self.refuse_tools(format!("the endpoint answered: {message}"));
                }
                other => return other,
            }
        }
    }

    async fn open(&self, request: &ChatRequest<'_>) -> Result<ResponseStream, ModelError> {
        let mut body = BodyPieces::default();
        serde_json::to_writer(&mut body, request)
            .map_err(|err| ModelError::Request(format!("cannot encode it: {err}")))?;
        let traced_body = crate::trace::enabled().then(|| body.joined());
        let http_request = self
            .upstream
            .http
            .post(self.openai.url("/chat/completions"))
            .query(&self.openai.query())
            .headers(self.openai.headers())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            // Its exact length, so the request is sent as one body of that
            // length (as every server expects), not chunked.
            .header(reqwest::header::CONTENT_LENGTH, body.len)
            .body(body.into_body())
            .build()
            .map_err(|err| ModelError::Request(format!("cannot build it: {err}")))?;
        let response = self.upstream.send(http_request, traced_body.as_deref()).await?;
        Ok(ResponseStream::new(response, self.stream_idle_timeout))
    }
}

/// The size of the pieces a request body is encoded into.
const BODY_PIECE_BYTES: usize = 16 * 1024;

/// A request body encoded into pieces of [`BODY_PIECE_BYTES`], not one
/// buffer. A chat request carries the whole conversation, so one buffer
/// would grow with every turn (130 KB at 1,000 short turns), and glibc's
/// arenas kept each turn's new high-water mark resident; pieces of one size
/// are reused turn after turn.
#[derive(Default)]
struct BodyPieces {
    /// The full pieces, in order.
    full: Vec<Vec<u8>>,
    /// The piece being written.
    current: Vec<u8>,
    /// All bytes written.
    len: usize,
}

impl BodyPieces {
    fn into_pieces(mut self) -> Vec<Vec<u8>> {
        if !self.current.is_empty() {
            self.full.push(self.current);
        }
        self.full
    }

    /// The whole body in one buffer (for the trace).
    fn joined(&self) -> Vec<u8> {
        let mut joined = self.full.concat();
        joined.extend_from_slice(&self.current);
        joined
    }

    fn into_body(self) -> reqwest::Body {
        let pieces = self.into_pieces().into_iter().map(Ok::<_, std::convert::Infallible>);
        reqwest::Body::wrap_stream(futures_util::stream::iter(pieces))
    }
}

impl std::io::Write for BodyPieces {
    fn write(&mut self, mut bytes: &[u8]) -> std::io::Result<usize> {
        let written = bytes.len();
        while !bytes.is_empty() {
            if self.current.len() == BODY_PIECE_BYTES {
                self.full.push(std::mem::take(&mut self.current));
            }
            if self.current.capacity() == 0 {
                self.current.reserve_exact(BODY_PIECE_BYTES);
            }
            let (now, rest) = bytes.split_at((BODY_PIECE_BYTES - self.current.len()).min(bytes.len()));
            self.current.extend_from_slice(now);
            bytes = rest;
        }
        self.len += written;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<reqwest::Error>>> + Send>>;

/// The chunks of one streamed response, parsed one event at a time as they
/// are asked for: nothing queues up ahead of the consumer.
pub struct ResponseStream {
    events: EventStream,
    idle_timeout: Duration,
    idle: Pin<Box<tokio::time::Sleep>>,
    unreadable_events: usize,
    readable_events: usize,
    /// `[DONE]` arrived: whatever follows is ignored.
    done: bool,
}

impl ResponseStream {
    /// The chunks of `response`, an answer already known to be a success
    /// whose body is an event stream (see [`sse::without_leading_bom`]).
    pub fn new(response: reqwest::Response, idle_timeout: Duration) -> Self {
        Self {
            events: Box::pin(response.bytes_stream().eventsource()),
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            unreadable_events: 0,
            readable_events: 0,
            done: false,
        }
    }

    /// How many events so far were not chat completion chunks (and were skipped).
    pub fn unreadable_events(&self) -> usize {
        self.unreadable_events
    }

    /// The next chunk; `None` at the end of the stream (`[DONE]` or the end
    /// of the body). `keepalive` events and events that are not chunks are
    /// skipped (the latter logged); silence longer than the idle timeout is an error.
    pub async fn next(&mut self) -> Option<Result<ChatChunk, ModelError>> {
        loop {
            if self.done {
                return None;
            }
            // Not a cancel race (the turn races this whole call with
            // `or_cancel`): the idle deadline, reset by every event.
            let item = tokio::select! {
                item = self.events.next() => item,
                () = &mut self.idle => return Some(Err(ModelError::StreamStalled(self.idle_timeout))),
            };
            let deadline = tokio::time::Instant::now() + self.idle_timeout;
            self.idle.as_mut().reset(deadline);
            if let Some(Ok(event)) = &item {
                crate::trace::model_event(&event.data);
            }
            match item {
                Some(Ok(event)) if event.data == "[DONE]" => {
                    self.done = true;
                    return self.ended();
                }
                Some(Ok(event)) if event.event == "keepalive" => {}
                Some(Ok(event)) => match serde_json::from_str::<ChatChunk>(&event.data) {
                    Ok(chunk) => {
                        self.readable_events += 1;
                        return Some(Ok(chunk));
                    }
                    Err(err) => {
                        self.unreadable_events += 1;
                        tracing::warn!(%err, data = %truncate(&event.data, 200), "skipping an SSE event that is not a chat completion chunk");
                    }
                },
                Some(Err(err)) => {
                    // The stream cannot be resumed after an error.
                    self.done = true;
                    return Some(Err(ModelError::StreamDropped(describe_event_stream_error(&err))));
                }
                None => {
                    self.done = true;
                    return self.ended();
                }
            }
        }
    }

    /// What the end of the stream means: the end of the answer, unless
    /// events came and none of them was a chunk.
    fn ended(&self) -> Option<Result<ChatChunk, ModelError>> {
        if self.readable_events == 0 && self.unreadable_events > 0 {
            return Some(Err(ModelError::InvalidResponse(format!(
                "none of its {} events was a chat completion chunk",
                self.unreadable_events
            ))));
        }
        None
    }
}

/// The HTTP layer: sends the request, turns error statuses into
/// [`ModelError::Http`] with the provider's message and `Retry-After`, and
/// presents a plain JSON answer (a server that ignored `stream: true`) as a
/// one-event stream.
struct UpstreamService {
    http: reqwest::Client,
    response_timeout: Duration,
    base_url: String,
}

/// Largest error or non-streamed body read from an endpoint.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

impl UpstreamService {
    /// A metadata request: the answer when it is a success, else nothing.
    async fn send_probe(&self, mut request: reqwest::Request) -> Option<reqwest::Response> {
        drop_empty_bearer(&mut request);
        crate::trace::model_request(&request);
        let url = request.url().to_string();
        let response = match self.http.execute(request).await {
            Ok(response) => response,
            Err(err) => {
                crate::trace::model_error(&url, &describe_reqwest(&err));
                return None;
            }
        };
        crate::trace::model_response(&response);
        response.status().is_success().then_some(response)
    }

    /// A plain (not streamed) request whose answer is JSON: the parsed
    /// body, or the same errors as [`UpstreamService::send`].
    async fn send_for_json(&self, mut request: reqwest::Request) -> Result<serde_json::Value, ModelError> {
        drop_empty_bearer(&mut request);
        crate::trace::model_request(&request);
        let response = match tokio::time::timeout(self.response_timeout, self.http.execute(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => {
                return Err(ModelError::Connect {
                    url: crate::redact::url(&self.base_url),
                    detail: describe_reqwest(&err),
                });
            }
            Err(_) => return Err(ModelError::ResponseTimeout(self.response_timeout)),
        };
        crate::trace::model_response(&response);
        let status = response.status();
        let body = read_capped(response).await.map_err(ModelError::StreamDropped)?;
        if !status.is_success() {
            let message = provider_message(&body, status);
            crate::trace::model_error(&self.base_url, &message);
            return Err(ModelError::Http { status: status.as_u16(), message, retry_after: None });
        }
        serde_json::from_slice(&body)
            .map_err(|err| ModelError::InvalidResponse(format!("a JSON body that does not parse: {err}")))
    }

    /// Sends a streamed chat request; `traced_body` is its body for the
    /// trace, when one is written (the request's own body is a stream).
    async fn send(
        &self,
        mut request: reqwest::Request,
        traced_body: Option<&[u8]>,
    ) -> Result<reqwest::Response, ModelError> {
        drop_empty_bearer(&mut request);
        crate::trace::model_request_with_body(&request, traced_body);
        let url = crate::trace::enabled().then(|| request.url().to_string());
        let failed = |error: ModelError| {
            if let Some(url) = &url {
                crate::trace::model_error(url, &error.to_string());
            }
            Err(error)
        };
        let response = match tokio::time::timeout(self.response_timeout, self.http.execute(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => {
                return failed(ModelError::Connect {
                    url: crate::redact::url(&self.base_url),
                    detail: describe_reqwest(&err),
                });
            }
            Err(_) => return failed(ModelError::ResponseTimeout(self.response_timeout)),
        };
        crate::trace::model_response(&response);
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let body = read_capped(response).await.unwrap_or_default();
            return failed(ModelError::Http {
                status: status.as_u16(),
                message: provider_message(&body, status),
                retry_after,
            });
        }
        let is_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if !is_json {
            return Ok(sse::without_leading_bom(response));
        }
        let body = read_capped(response).await.map_err(ModelError::StreamDropped)?;
        let value: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|err| ModelError::InvalidResponse(format!("a JSON body that does not parse: {err}")))?;
        if value.get("choices").is_none()
            && let Some(error) = value.get("error")
        {
            let message =
                error.get("message").and_then(|m| m.as_str()).map(str::to_owned).unwrap_or_else(|| error.to_string());
            return Err(ModelError::Provider(message));
        }
        let mut sse = Vec::with_capacity(body.len() + 32);
        sse.extend_from_slice(b"data: ");
        serde_json::to_writer(&mut sse, &value).map_err(|err| ModelError::InvalidResponse(err.to_string()))?;
        sse.extend_from_slice(b"\n\ndata: [DONE]\n\n");
        let rebuilt = http::Response::builder()
            .status(200)
            .header(reqwest::header::CONTENT_TYPE, "text/event-stream")
            .body(sse)
            .map_err(|err| ModelError::InvalidResponse(err.to_string()))?;
        Ok(reqwest::Response::from(rebuilt))
    }
}

/// async-openai's config always makes a bearer token; with no key
/// configured, send no header at all.
fn drop_empty_bearer(request: &mut reqwest::Request) {
    let empty_bearer = request
        .headers()
        .get(reqwest::header::AUTHORIZATION)
        .is_some_and(|value| value.as_bytes().trim_ascii() == b"Bearer");
    if empty_bearer {
        request.headers_mut().remove(reqwest::header::AUTHORIZATION);
    }
}

async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(format!("the response body is larger than {MAX_BODY_BYTES} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(err) => return Err(describe_reqwest(&err)),
        }
    }
}

/// The provider's own message from an error body: `error.message`, `message`,
/// `detail` or `error` as a string, else the body text; one line, bounded.
fn provider_message(body: &[u8], status: reqwest::StatusCode) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        let candidates = [v.pointer("/error/message"), v.get("message"), v.get("detail"), v.get("error")];
        candidates.into_iter().flatten().find_map(|c| c.as_str().map(str::to_owned))
    });
    let text = from_json.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() { status.canonical_reason().unwrap_or("no message").to_owned() } else { truncate(&text, 500) }
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// `Retry-After` as seconds or as an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(std::time::SystemTime::now()).unwrap_or(Duration::ZERO))
}

fn describe_reqwest(err: &reqwest::Error) -> String {
    use std::error::Error as _;
    // reqwest's own message is generic ("error sending request"); the root cause says what happened.
    let mut detail = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        detail = cause.to_string();
        source = cause.source();
    }
    if err.is_timeout() { format!("timed out ({detail})") } else { detail }
}

fn describe_event_stream_error(err: &EventStreamError<reqwest::Error>) -> String {
    match err {
        EventStreamError::Transport(err) => describe_reqwest(err),
        EventStreamError::Utf8(err) => format!("the stream is not UTF-8: {err}"),
        EventStreamError::Parser(err) => format!("the stream is not a valid event stream: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 1.5 "), Some(Duration::from_millis(1500)));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
        let in_a_minute = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(60));
        let wait = parse_retry_after(&in_a_minute).unwrap();
        assert!(wait > Duration::from_secs(55) && wait <= Duration::from_secs(60), "{wait:?}");
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn a_body_in_pieces_holds_the_same_bytes_in_pieces_of_one_size() {
        let value = serde_json::json!({"messages": [{"content": "é".repeat(20_000)}, {"content": "x".repeat(9_000)}]});
        let whole = serde_json::to_vec(&value).unwrap();
        let mut body = BodyPieces::default();
        serde_json::to_writer(&mut body, &value).unwrap();
        assert_eq!(body.len, whole.len());
        assert_eq!(body.joined(), whole);
        let pieces = body.into_pieces();
        assert_eq!(pieces.len(), whole.len().div_ceil(BODY_PIECE_BYTES));
        assert!(pieces.iter().rev().skip(1).all(|piece| piece.len() == BODY_PIECE_BYTES));
        assert!(pieces.iter().all(|piece| piece.capacity() == BODY_PIECE_BYTES), "no piece grew past its size");
        assert_eq!(pieces.concat(), whole);
        assert!(BodyPieces::default().into_pieces().is_empty());
    }

    #[test]
    fn provider_messages() {
        let status = reqwest::StatusCode::BAD_REQUEST;
        assert_eq!(provider_message(br#"{"error":{"message":"bad model"}}"#, status), "bad model");
        assert_eq!(provider_message(br#"{"detail":"nope"}"#, status), "nope");
        assert_eq!(provider_message(br#"{"error":"plain"}"#, status), "plain");
        assert_eq!(provider_message(b"<html>\n oops \n</html>", status), "<html> oops </html>");
        assert_eq!(provider_message(b"", status), "Bad Request");
    }

    #[test]
    fn what_counts_as_refusing_tools() {
        for refusal in [
            "registry.ollama.ai/library/gemma:2b does not support tools",
            "tools param requires --jinja flag",
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
            "This model does not support function calling",
        ] {
            assert!(refuses_tools(refusal), "{refusal}");
        }
        for other in [
            "Function tools with reasoning_effort are not supported for gpt-5.6 in /v1/chat/completions. \
             To use function tools, use /v1/responses or set reasoning_effort to 'none'.",
            "Invalid schema for function 'edit_file': tools[2].function.parameters is not supported",
            "unknown parameter: stream_options",
            "This model's maximum context length is 8192 tokens; the request requires 9000 with its tools",
        ] {
            assert!(!refuses_tools(other), "{other}");
        }
    }

    #[test]
    fn error_kinds() {
        let http = |status: u16, message: &str| ModelError::Http { status, message: message.into(), retry_after: None };
        assert_eq!(http(429, "").kind(), ModelErrorKind::RateLimited);
        assert_eq!(http(401, "").kind(), ModelErrorKind::Auth);
        assert_eq!(
            http(400, "This model's maximum context length is 8192 tokens").kind(),
            ModelErrorKind::ContextOverflow
        );
        assert_eq!(http(404, "no such model").kind(), ModelErrorKind::BadRequest);
        assert_eq!(http(503, "").kind(), ModelErrorKind::Server);
        assert_eq!(ModelError::StreamStalled(Duration::from_secs(1)).kind(), ModelErrorKind::Timeout);
        assert_eq!(ModelError::NotConfigured("no model".into()).kind(), ModelErrorKind::Config);
        assert_eq!(ModelError::Request("cannot encode it".into()).kind(), ModelErrorKind::Internal);
    }
}
