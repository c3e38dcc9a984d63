//! The Agent Client Protocol side of lathe: the only module that knows ACP
//! types. It reads JSON-RPC messages (through [`crate::rpc`]), dispatches
//! ACP methods, maps the agent's events to `session/update` notifications and
//! its stop reasons and errors to `session/prompt` responses.
//!
//! # The reader never waits
//!
//! One loop reads the client's messages and dispatches them, in the order
//! they arrive, and it never waits on the disk, the model or the client:
//! `session/cancel` must be read at once, whatever else is going on. What is
//! quick and in memory (`initialize`, `session/set_mode`, `session/cancel`,
//! taking a session out of the table on close) is done inline; whatever
//! touches the disk (new, load, resume, list, close, delete) or the network
//! (a prompt's turn) runs in a task of its own, with file work in
//! `spawn_blocking`, and answers when it is done. Responses may therefore
//! come in another order than their requests; what a client can rely on:
//!
//! - A request sees the effect of every request before it on the session it
//!   names. `session/prompt` registers its turn inline, so a `session/cancel`
//!   (or `$/cancel_request`) that follows it finds it, running or queued.
//! - A session being loaded (`session/load`, `session/resume`) is marked so
//!   inline. Until its load has answered, every request and notification
//!   naming it (prompt, cancel, set_mode, set_config_option, close, delete,
//!   another load), and any `$/cancel_request` for one of those, waits; then
//!   they are dispatched in the order they came, as if they had arrived just
//!   after the load's response. So a pipelined prompt runs on the loaded
//!   history, a mode set after the load is not undone by it, a cancel after a
//!   waiting prompt cancels that prompt (which answers `cancelled`), and a
//!   close during a load closes the loaded session once the load has
//!   answered.
//! - Changes on disk happen in arrival order, because they are all queued on
//!   the store's one writer thread as their request is dispatched (creating a
//!   session, its metadata, closing its log, deleting it), and a read (load,
//!   list) first waits for what was queued before it. A `session/list` sent
//!   after a `session/delete` does not show the deleted session, even
//!   pipelined.
//! - A session is in the table before `session/new` answers, and a loaded one
//!   before `session/load` answers, with its replay sent before the answer.
//! - `session/close` answers once the session's log is written and closed.
//! - A new session goes on disk with its first prompt (see
//!   [`crate::session::Journal`]): until then it is listed and loadable in
//!   this process only, and one closed or left at exit unprompted leaves nothing.

mod auth;
mod client;
mod options;
mod prompt;
mod sessions;
mod steering;
mod turns;
mod undo;
pub mod updates;
mod warnings;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AgentCapabilities, CancelNotification, ClientCapabilities, Implementation, InitializeRequest, InitializeResponse,
    McpCapabilities, PromptCapabilities, SessionAdditionalDirectoriesCapabilities, SessionCapabilities,
    SessionCloseCapabilities, SessionDeleteCapabilities, SessionForkCapabilities, SessionListCapabilities,
    SessionResumeCapabilities, SessionSystemPromptCapabilities, SessionSystemPromptModeCapabilities,
    SessionSystemPromptOverrideCapabilities,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::model::{ModelClient, ModelError};
pub use crate::present::record::{to_acp_stop_reason, turn_error_to_rpc};
pub use crate::present::replay::{Restored, stored_transcript};
use crate::rpc::{
    self, CANCEL_REQUEST_METHOD, Classified, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Incoming, Line,
    LineReader, METHOD_NOT_FOUND, Outbox, RequestId, RpcError,
};
use crate::session::Session;
use crate::store::{FailureSink, Store};
use crate::sync::lock;
use warnings::Warnings;

/// ACP's "resource not found" code (`ErrorCode::ResourceNotFound`): an
/// unknown session from the editor, a missing file from the editor's `fs/*`.
const RESOURCE_NOT_FOUND: i32 = -32002;

/// How long shutdown waits for running turns to answer before giving up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// Serves ACP over a byte stream pair until the input ends, the output
/// breaks, or `shutdown` resolves. On the way out every turn is cancelled and
/// answered, and the output is flushed.
pub async fn serve<R, W>(config: Config, input: R, output: W, shutdown: impl Future<Output = ()>) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (outbox, writer) = Outbox::new();
    let writer_task = tokio::spawn(writer.run(output));
    let writer_done = async move {
        if let Ok(Err(err)) = writer_task.await {
            tracing::debug!(%err, "writing to the client failed");
        }
    };
    serve_with(config, input, outbox, writer_done, shutdown).await
}

/// [`serve`] on this process's stdin and stdout. Output is written by a
/// thread of its own with blocking writes: tokio's `Stdout` would send every
/// write through its blocking pool, a thread hand-off each way per message.
pub async fn serve_stdio(config: Config, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    // A handle on stdout of our own, so writes skip std's line buffering (the
    // writer batches and flushes itself).
    let stdout = crate::platform::console::raw_stdout()?;
    let (outbox, writer) = Outbox::new();
    let (finished, writer_finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("lathe-stdout".to_owned()).spawn(move || {
        if let Err(err) = writer.run_blocking(stdout) {
            tracing::debug!(%err, "writing to the client failed");
        }
        let _ = finished.send(());
    })?;
    let writer_done = async move {
        let _ = writer_finished.await;
    };
    serve_with(config, tokio::io::stdin(), outbox, writer_done, shutdown).await
}

/// The serving loop, with the writer already running: `writer_done`
/// resolves when it has stopped (the client no longer reads our output).
async fn serve_with<R>(
    config: Config,
    input: R,
    outbox: Outbox,
    writer_done: impl Future<Output = ()>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
{
    let max_message_bytes = config.protocol.max_message_bytes;
    let capabilities = Arc::new(OnceLock::new());
    let warnings = Warnings::new(outbox.clone(), Arc::clone(&capabilities));
    let retention = crate::store::Retention { keep_days: config.sessions.keep_days };
    let store = open_store(config.data_dir.clone(), retention, warnings.clone()).await;
    let (loaded, mut loads_finished) = tokio::sync::mpsc::unbounded_channel();
    let server = Arc::new(Server::new(config, outbox.clone(), store, capabilities, warnings, loaded));
    let mut lines = LineReader::new(tokio::io::BufReader::with_capacity(64 * 1024, input), max_message_bytes);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut writer_done = std::pin::pin!(writer_done);
    let mut writer_stopped = false;
    loop {
        // Not a cancel race: the reader serves several sources, in this
        // order (shutdown first, then a stopped writer, finished loads, and
        // the next line).
        let line = tokio::select! {
            biased;
            () = &mut shutdown => {
                tracing::info!("shutting down on request");
                break;
            }
            () = &mut writer_done => {
                writer_stopped = true;
                tracing::info!("the client stopped reading our output; shutting down");
                break;
            }
            Some(session_id) = loads_finished.recv() => {
                server.load_finished(&session_id);
                continue;
            }
            // Cancel-safe: a line half read when a load finishes is kept for the next call.
            line = lines.next_line() => line,
        };
        match line {
            Ok(Some(Line::Complete(bytes))) => {
                crate::trace::client_message(&bytes);
                server.handle_line(&bytes)
            }
            Ok(Some(Line::TooLong(size))) => {
                tracing::warn!(size, "refusing an oversized message");
                outbox.respond_err(
                    &RequestId::null(),
                    &RpcError::new(
                        INVALID_REQUEST,
                        format!(
                            "Invalid request: the message is {size} bytes, over the limit of {max_message_bytes} bytes"
                        ),
                    ),
                );
            }
            Ok(None) => {
                tracing::info!("the client closed our input; shutting down");
                break;
            }
            Err(err) => {
                tracing::warn!(%err, "reading the client's messages failed; shutting down");
                break;
            }
        }
    }
    server.shutdown().await;
    drop(server);
    if !writer_stopped {
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, outbox.flush()).await;
    }
    Ok(())
}

/// The session store under the data directory, opened off the async threads
/// (it probes the disk); or why sessions will not be saved, as words that
/// complete "lathe ...".
async fn open_store(
    data_dir: Option<std::path::PathBuf>,
    retention: crate::store::Retention,
    warnings: Warnings,
) -> Result<Arc<Store>, String> {
    let Some(data_dir) = data_dir else {
        return Err("has no data directory (no HOME, and neither --data-dir nor LATHE_DATA_DIR)".to_owned());
    };
    let failures: FailureSink = Box::new(move |failure| warnings.save_failed(&failure));
    let opened = tokio::task::spawn_blocking(move || Store::open(&data_dir, retention, failures)).await;
    let store = match opened {
        Ok(Ok(store)) => Ok(Arc::new(store)),
        Ok(Err(err)) => Err(err.to_string()),
        Err(err) => Err(format!("could not open its session store ({err})")),
    };
    if let Err(why) = &store {
        tracing::warn!("lathe {why}; sessions will not be saved");
    }
    store
}

/// A configured model's key and the reasoning effort its requests carry.
type ModelKey = (String, Option<String>);

/// The state of one ACP connection.
struct Server {
    /// The configuration in use; `authenticate` and `logout` replace it
    /// (see [`Server::config`]).
    config: Mutex<Arc<Config>>,
    outbox: Outbox,
    initialized: AtomicBool,
    client_capabilities: Arc<OnceLock<ClientCapabilities>>,
    sessions: Mutex<HashMap<Arc<str>, Arc<Session>>>,
    /// Saved sessions closed while their last turn may still be winding
    /// down: a load of one waits for it as for an open one, so the turn's
    /// last records and checkpoint are on disk before it is read back.
    closing: Mutex<HashMap<Arc<str>, Arc<Session>>>,
    /// Sessions being loaded, each with the messages naming it that arrived
    /// meanwhile, in order: dispatched when its load has answered.
    loading: Mutex<HashMap<Arc<str>, Vec<Incoming>>>,
    /// Tells the reader that a session's load has answered.
    loaded: tokio::sync::mpsc::UnboundedSender<Arc<str>>,
    /// Model clients by model key and reasoning effort.
    models: Mutex<HashMap<ModelKey, Arc<ModelClient>>>,
    /// Where sessions are persisted; `None` when there is no usable data directory.
    store: Option<Arc<Store>>,
    /// Why sessions are not saved, when `store` is `None` (words that complete "lathe ...").
    unsaved_reason: String,
    warnings: Warnings,
    /// Incoming requests that `$/cancel_request` can cancel, by their id's JSON text.
    cancellable: Mutex<HashMap<String, CancellationToken>>,
    /// Parent of every session's token: cancelled at shutdown.
    root: CancellationToken,
    tasks: TaskTracker,
}

impl Server {
    fn new(
        config: Config,
        outbox: Outbox,
        store: Result<Arc<Store>, String>,
        client_capabilities: Arc<OnceLock<ClientCapabilities>>,
        warnings: Warnings,
        loaded: tokio::sync::mpsc::UnboundedSender<Arc<str>>,
    ) -> Self {
        let (store, unsaved_reason) = match store {
            Ok(store) => (Some(store), String::new()),
            Err(why) => (None, why),
        };
        Self {
            store,
            unsaved_reason,
            warnings,
            config: Mutex::new(Arc::new(config)),
            outbox,
            initialized: AtomicBool::new(false),
            client_capabilities,
            sessions: Mutex::new(HashMap::new()),
            closing: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashMap::new()),
            loaded,
            models: Mutex::new(HashMap::new()),
            cancellable: Mutex::new(HashMap::new()),
            root: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }

    async fn shutdown(&self) {
        self.root.cancel();
        self.tasks.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.tasks.wait()).await.is_err() {
            tracing::warn!("some turns did not finish within the shutdown grace period");
        }
        self.outbox.fail_pending();
        if let Some(store) = &self.store
            && tokio::time::timeout(SHUTDOWN_GRACE, store.written().wait()).await.is_err()
        {
            tracing::warn!("the session store did not finish writing in time");
        }
    }

    fn handle_line(self: &Arc<Self>, line: &[u8]) {
        match rpc::classify(line, &self.outbox) {
            Classified::Incoming(incoming) => self.dispatch(incoming),
            Classified::Consumed => {}
            Classified::Malformed(id, error) => {
                tracing::warn!(code = error.code, message = %error.message, "answering a malformed message");
                self.outbox.respond_err(&id, &error);
            }
            Classified::Ignored(why) => tracing::warn!(%why, "ignoring a malformed message"),
        }
    }

    fn dispatch(self: &Arc<Self>, incoming: Incoming) {
        let Some(incoming) = self.wait_for_load(incoming) else { return };
        match incoming {
            Incoming::Request { id, method, params } => self.handle_request(id, &method, params),
            Incoming::Notification { method, params } => self.handle_notification(&method, params),
        }
    }

    /// Keeps a message that names a session being loaded (or cancels a
    /// request that waits for one) until the load has answered; gives back
    /// every other message.
    fn wait_for_load(&self, incoming: Incoming) -> Option<Incoming> {
        let mut loading = lock(&self.loading);
        if loading.is_empty() {
            return Some(incoming);
        }
        let waits_for = match &incoming {
            Incoming::Notification { method, params } if method == CANCEL_REQUEST_METHOD => {
                let target = params.get("requestId").map(Value::to_string);
                loading
                    .iter()
                    .find(|(_, waiting)| {
                        waiting.iter().any(
                            |message| matches!(message, Incoming::Request { id, .. } if Some(id.to_string()) == target),
                        )
                    })
                    .map(|(session_id, _)| Arc::clone(session_id))
            }
            Incoming::Request { params, .. } | Incoming::Notification { params, .. } => params
                .get("sessionId")
                .and_then(Value::as_str)
                .and_then(|id| loading.get_key_value(id))
                .map(|(session_id, _)| Arc::clone(session_id)),
        };
        match waits_for.and_then(|session_id| loading.get_mut(&session_id)) {
            Some(waiting) => {
                waiting.push(incoming);
                None
            }
            None => Some(incoming),
        }
    }

    /// A load has answered: what waited for it is dispatched, in order (a
    /// load among it marks the session loading again, and what follows waits
    /// for that one).
    fn load_finished(self: &Arc<Self>, session_id: &str) {
        let waiting = lock(&self.loading).remove(session_id).unwrap_or_default();
        for incoming in waiting {
            self.dispatch(incoming);
        }
    }

    fn handle_request(self: &Arc<Self>, id: RequestId, method: &str, params: Value) {
        tracing::debug!(%method, %id, "request");
        if method != "initialize" && !self.initialized.load(Ordering::Acquire) {
            self.outbox.respond_err(
                &id,
                &RpcError::new(INVALID_REQUEST, format!("Invalid request: call initialize before {method}")),
            );
            return;
        }
        match method {
            "initialize" => self.outbox.respond(&id, self.initialize(params)),
            "authenticate" => self.authenticate(id, params),
            "logout" => self.logout(id, params),
            "session/new" => self.gated(id, |id| self.new_session(id, params)),
            "session/load" => self.gated(id, |id| self.load_session(id, params, sessions::Replay::Yes)),
            "session/resume" => self.gated(id, |id| self.load_session(id, params, sessions::Replay::No)),
            "session/list" => self.list_sessions(id, params),
            "session/close" => self.close_session(id, params),
            "session/delete" => self.delete_session(id, params),
            "session/prompt" => self.prompt(id, params),
            "session/set_mode" => self.outbox.respond(&id, self.set_mode(params)),
            "session/set_config_option" => self.outbox.respond(&id, self.set_config_option(params)),
            "session/fork" => self.gated(id, |id| self.fork_session(id, params)),
            steering::METHOD => self.steer(id, params),
            _ => self.outbox.respond_err(&id, &RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))),
        }
    }

    fn handle_notification(&self, method: &str, params: Value) {
        tracing::debug!(%method, "notification");
        match method {
            "session/cancel" => match parse_params::<CancelNotification>(params) {
                Ok(cancel) => match self.session(&cancel.session_id) {
                    Ok(session) => session.cancel_turns(),
                    Err(_) => tracing::debug!(session = %cancel.session_id, "cancel for an unknown session ignored"),
                },
                Err(err) => tracing::warn!(%err, "ignoring a malformed session/cancel"),
            },
            CANCEL_REQUEST_METHOD => {
                if let Some(request_id) = params.get("requestId")
                    && let Some(token) = lock(&self.cancellable).get(&request_id.to_string())
                {
                    token.cancel();
                }
            }
            // Unknown notifications, `_`-prefixed extensions included, are ignored (ACP extensibility).
            _ => tracing::debug!(%method, "ignoring an unknown notification"),
        }
    }

    fn initialize(&self, params: Value) -> Result<InitializeResponse, RpcError> {
        let request: InitializeRequest = parse_params(params)?;
        // A v1-only agent answers 1 whatever was asked: the same version when
        // the client asked for 1, else the latest it supports, which is 1.
        if request.protocol_version != ProtocolVersion::V1 {
            tracing::info!(requested = %request.protocol_version, "client asked for another protocol version; answering 1");
        }
        let auth_methods = self.auth_methods(&request.client_capabilities);
        let _ = self.client_capabilities.set(request.client_capabilities);
        self.initialized.store(true, Ordering::Release);
        let vision = self.config().default_model().is_some_and(|m| m.vision);
        let mut sessions =
            SessionCapabilities::new().additional_directories(SessionAdditionalDirectoriesCapabilities::new());
        // Listing, resuming, deleting and forking need the store; closing does not.
        sessions = sessions.close(SessionCloseCapabilities::new());
        if self.store.is_some() {
            sessions = sessions
                .list(SessionListCapabilities::new())
                .resume(SessionResumeCapabilities::new())
                .delete(SessionDeleteCapabilities::new())
                .fork(SessionForkCapabilities::new());
        }
        // The client's system prompt, appended to lathe's or replacing lathe's
        // own instructions (the environment and the project's instruction
        // files stay): see `crate::prompt::ClientPrompt`.
        let override_ =
            SessionSystemPromptModeCapabilities::new().override_(SessionSystemPromptOverrideCapabilities::new());
        sessions = sessions.system_prompt(SessionSystemPromptCapabilities::new().mode(override_));
        // stdio is a given; lathe also speaks Streamable HTTP and the older
        // HTTP+SSE transport (the `mcp` module).
        let capabilities = AgentCapabilities::new()
            .mcp_capabilities(McpCapabilities::new().http(true).sse(true))
            .load_session(self.store.is_some())
            .prompt_capabilities(PromptCapabilities::new().embedded_context(true).image(vision))
            .session_capabilities(sessions)
            .auth(self.auth_capabilities());
        // Steering (`_session/steering`) is an extension: advertised in
        // `_meta` as codex-acp and claude-agent-acp do.
        let mut meta = serde_json::Map::new();
        meta.insert("steering".to_owned(), json!({ "supported": true }));
        Ok(InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(capabilities)
            .auth_methods(auth_methods)
            .agent_info(Implementation::new("lathe", env!("CARGO_PKG_VERSION")).title("lathe"))
            .meta(meta))
    }

    /// Which of the newer session updates the client shows.
    fn offers(&self) -> updates::Offers {
        self.client_capabilities.get().map(updates::Offers::of).unwrap_or_default()
    }

    /// Runs `set_up` (a session's set-up) only when a model is usable;
    /// else answers the auth-required error, and the editor offers the
    /// auth methods.
    fn gated(&self, id: RequestId, set_up: impl FnOnce(RequestId)) {
        match self.auth_gate() {
            Ok(()) => set_up(id),
            Err(error) => self.outbox.respond_err(&id, &error),
        }
    }

    /// The configuration in use now.
    fn config(&self) -> Arc<Config> {
        Arc::clone(&lock(&self.config))
    }

    fn model_client(&self, key: &str, thought_level: Option<&str>) -> Result<Arc<ModelClient>, ModelError> {
        let cache_key = (key.to_owned(), thought_level.map(str::to_owned));
        if let Some(client) = lock(&self.models).get(&cache_key) {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(crate::setup::model_client(&self.config(), key, thought_level)?);
        lock(&self.models).insert(cache_key, Arc::clone(&client));
        Ok(client)
    }
}

/// Parses request params, naming the offending field on failure. Absent
/// params read as an empty object.
fn parse_params<T: DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    let params = if params.is_null() { Value::Object(serde_json::Map::new()) } else { params };
    serde_path_to_error::deserialize(params).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let message = if path.is_empty() || path == "." {
            format!("Invalid params: {inner}")
        } else {
            format!("Invalid params: {path}: {inner}")
        };
        RpcError::new(INVALID_PARAMS, message)
    })
}
