//! The Agent Client Protocol side of lathe: the only module that knows ACP
//! types. It reads JSON-RPC messages (through [`crate::rpc`]), dispatches
//! ACP methods, maps the agent's events to `session/update` notifications and
//! its stop reasons and errors to `session/prompt` responses.
//!
//! Dispatch order: requests are handled in the order they arrive. Quick ones
//! (`initialize`, `session/new`, ...) are answered inline; `session/prompt`
//! registers its turn inline (so an immediately following `session/cancel`
//! finds it) and runs the turn in its own task, so the reader keeps reading.

mod client;
mod options;
mod prompt;
mod updates;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AgentCapabilities, CancelNotification, ClientCapabilities, ConfigOptionUpdate, CurrentModeUpdate, Implementation,
    InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest,
    PromptResponse, SessionAdditionalDirectoriesCapabilities, SessionCapabilities, SessionId, SessionUpdate,
    SetSessionConfigOptionRequest, SetSessionConfigOptionResponse, SetSessionModeRequest, SetSessionModeResponse,
    StopReason as AcpStopReason,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::{StopReason, Turn, TurnError, Workspace};
use crate::config::{Config, ConfigSource};
use crate::model::{ModelClient, ModelError};
use crate::permission::Mode;
use crate::rpc::{
    self, CANCEL_REQUEST_METHOD, Classified, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Incoming, Line,
    LineReader, METHOD_NOT_FOUND, Outbox, RequestId, RpcError,
};
use crate::session::{Session, SessionSetup};
use crate::tools::ToolLimits;
use client::{ClientApprover, ClientHost};
use updates::SessionEvents;

/// ACP's "resource not found" code, used for unknown sessions.
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
    let max_message_bytes = config.protocol.max_message_bytes;
    let (outbox, writer) = Outbox::new();
    let mut writer_task = tokio::spawn(writer.run(output));
    let server = Arc::new(Server::new(config, outbox.clone()));
    let mut lines = LineReader::new(tokio::io::BufReader::with_capacity(64 * 1024, input), max_message_bytes);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut writer_result = None;
    loop {
        let line = tokio::select! {
            biased;
            () = &mut shutdown => {
                tracing::info!("shutting down on request");
                break;
            }
            result = &mut writer_task => {
                writer_result = Some(result);
                tracing::info!("the client stopped reading our output; shutting down");
                break;
            }
            line = lines.next_line() => line,
        };
        match line {
            Ok(Some(Line::Complete(bytes))) => server.handle_line(&bytes),
            Ok(Some(Line::TooLong(size))) => {
                tracing::warn!(size, "refusing an oversized message");
                outbox.respond_err(
                    &Value::Null,
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
    if writer_result.is_none() {
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, outbox.flush()).await;
    }
    Ok(())
}

/// The state of one ACP connection.
struct Server {
    config: Arc<Config>,
    outbox: Outbox,
    initialized: AtomicBool,
    client_capabilities: OnceLock<ClientCapabilities>,
    sessions: Mutex<HashMap<Arc<str>, Arc<Session>>>,
    models: Mutex<HashMap<String, Arc<ModelClient>>>,
    /// Incoming requests that `$/cancel_request` can cancel, by their id's JSON text.
    cancellable: Mutex<HashMap<String, CancellationToken>>,
    /// Parent of every session's token: cancelled at shutdown.
    root: CancellationToken,
    tasks: TaskTracker,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Server {
    fn new(config: Config, outbox: Outbox) -> Self {
        Self {
            config: Arc::new(config),
            outbox,
            initialized: AtomicBool::new(false),
            client_capabilities: OnceLock::new(),
            sessions: Mutex::new(HashMap::new()),
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
    }

    fn handle_line(self: &Arc<Self>, line: &[u8]) {
        match rpc::classify(line, &self.outbox) {
            Classified::Incoming(Incoming::Request { id, method, params }) => self.handle_request(id, &method, params),
            Classified::Incoming(Incoming::Notification { method, params }) => {
                self.handle_notification(&method, params)
            }
            Classified::Consumed => {}
            Classified::Malformed(id, error) => {
                tracing::warn!(code = error.code, message = %error.message, "answering a malformed message");
                self.outbox.respond_err(&id, &error);
            }
            Classified::Ignored(why) => tracing::warn!(%why, "ignoring a malformed message"),
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
            "authenticate" => self.outbox.respond_err(
                &id,
                &RpcError::new(
                    INVALID_PARAMS,
                    "lathe offers no authentication methods: model API keys come from its config (api_key_env)",
                ),
            ),
            "session/new" => self.outbox.respond(&id, self.new_session(params)),
            "session/prompt" => self.prompt(id, params),
            "session/set_mode" => self.outbox.respond(&id, self.set_mode(params)),
            "session/set_config_option" => self.outbox.respond(&id, self.set_config_option(params)),
            _ => self.outbox.respond_err(&id, &RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))),
        }
    }

    fn handle_notification(&self, method: &str, params: Value) {
        tracing::debug!(%method, "notification");
        match method {
            "session/cancel" => match parse_params::<CancelNotification>(params) {
                Ok(cancel) => match self.session(&cancel.session_id) {
                    Ok(session) => session.cancel_turn(),
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
        let _ = self.client_capabilities.set(request.client_capabilities);
        self.initialized.store(true, Ordering::Release);
        let vision = self.config.default_model().is_some_and(|m| m.vision);
        let capabilities = AgentCapabilities::new()
            .prompt_capabilities(PromptCapabilities::new().embedded_context(true).image(vision))
            .session_capabilities(
                SessionCapabilities::new().additional_directories(SessionAdditionalDirectoriesCapabilities::new()),
            );
        Ok(InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(capabilities)
            .agent_info(Implementation::new("lathe", env!("CARGO_PKG_VERSION")).title("lathe")))
    }

    fn new_session(&self, params: Value) -> Result<NewSessionResponse, RpcError> {
        let params = with_default_mcp_servers(params);
        let request: NewSessionRequest = parse_params(params)?;
        let cwd = absolute_dir(&request.cwd, "cwd")?;
        let additional_directories = request
            .additional_directories
            .iter()
            .enumerate()
            .map(|(i, dir)| absolute_dir(dir, &format!("additionalDirectories[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let mcp_servers =
            request.mcp_servers.iter().map(|server| serde_json::to_value(server).unwrap_or(Value::Null)).collect();
        let id: Arc<str> = Arc::from(format!("sess_{}", uuid::Uuid::new_v4().simple()));
        let environment = crate::prompt::Environment {
            cwd: &cwd,
            os: std::env::consts::OS,
            date: &crate::prompt::Environment::today(),
        };
        let system_prompt = crate::prompt::system_prompt(&environment);
        let setup =
            SessionSetup { cwd, additional_directories, mcp_servers, model_key: self.config.default_model.clone() };
        let session = Arc::new(Session::new(Arc::clone(&id), setup, system_prompt, &self.root));
        let response = NewSessionResponse::new(SessionId::new(Arc::clone(&id)))
            .modes(options::mode_state(&session))
            .config_options(options::config_options(&session));
        lock(&self.sessions).insert(Arc::clone(&id), session);
        tracing::info!(session = %id, "session created");
        Ok(response)
    }

    fn set_mode(&self, params: Value) -> Result<SetSessionModeResponse, RpcError> {
        let request: SetSessionModeRequest = parse_params(params)?;
        let session = self.session(&request.session_id)?;
        let mode = parse_mode(&request.mode_id.0)?;
        session.set_mode(mode);
        // The mode is also a config option: keep the editor's copy of it in sync.
        self.events(&session)
            .send(SessionUpdate::ConfigOptionUpdate(ConfigOptionUpdate::new(options::config_options(&session))));
        Ok(SetSessionModeResponse::new())
    }

    fn set_config_option(&self, params: Value) -> Result<SetSessionConfigOptionResponse, RpcError> {
        let request: SetSessionConfigOptionRequest = parse_params(params)?;
        let session = self.session(&request.session_id)?;
        let value = request.value.as_value_id().map(|v| v.0.to_string()).ok_or_else(|| {
            RpcError::new(
                INVALID_PARAMS,
                format!("Invalid params: value: option \"{}\" takes a value id", request.config_id.0),
            )
        })?;
        match &*request.config_id.0 {
            options::MODE_OPTION => {
                session.set_mode(parse_mode(&value)?);
                self.events(&session)
                    .send(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(session.mode().id())));
            }
            other => {
                return Err(RpcError::new(
                    INVALID_PARAMS,
                    format!("Invalid params: configId: unknown option \"{other}\""),
                ));
            }
        }
        Ok(SetSessionConfigOptionResponse::new(options::config_options(&session)))
    }

    fn events(&self, session: &Session) -> SessionEvents {
        SessionEvents { outbox: self.outbox.clone(), session_id: SessionId::new(Arc::clone(session.id())) }
    }

    fn session(&self, id: &SessionId) -> Result<Arc<Session>, RpcError> {
        lock(&self.sessions).get(&id.0).cloned().ok_or_else(|| {
            RpcError::new(RESOURCE_NOT_FOUND, format!("Session not found: {id}")).with_data(json!({ "sessionId": id }))
        })
    }

    fn model_client(&self, key: &str) -> Result<Arc<ModelClient>, ModelError> {
        if self.config.source == ConfigSource::Unconfigured {
            return Err(ModelError::NotConfigured(
                "no model is configured: create ~/.config/lathe/config.toml (see config.example.toml) or set OPENAI_API_KEY / OPENAI_BASE_URL"
                    .to_owned(),
            ));
        }
        if let Some(client) = lock(&self.models).get(key) {
            return Ok(Arc::clone(client));
        }
        let model = self
            .config
            .models
            .get(key)
            .ok_or_else(|| ModelError::NotConfigured(format!("the model \"{key}\" is not configured")))?;
        let client = Arc::new(ModelClient::new(Arc::new(model.clone()), &self.config.network)?);
        lock(&self.models).insert(key.to_owned(), Arc::clone(&client));
        Ok(client)
    }

    fn prompt(self: &Arc<Self>, id: RequestId, params: Value) {
        let started = (|| {
            let request: PromptRequest = parse_params(params)?;
            let session = self.session(&request.session_id)?;
            let model_key = session.setup().model_key.clone();
            let model = self.config.models.get(&model_key);
            let vision = model.is_some_and(|m| m.vision);
            let model_name = model.map(|m| m.model.as_str()).unwrap_or(&model_key);
            let parts = prompt::to_user_parts(request.prompt, vision, model_name)
                .map_err(|err| RpcError::new(INVALID_PARAMS, format!("Invalid params: {err}")))?;
            let turn = session.begin_turn().ok_or_else(|| {
                RpcError::new(
                    INVALID_REQUEST,
                    format!(
                        "Invalid request: session {} is still answering an earlier prompt; cancel it or wait for its response",
                        session.id()
                    ),
                )
                .with_data(json!({ "sessionId": session.id() }))
            })?;
            Ok::<_, RpcError>((session, parts, turn, model_key))
        })();
        let (session, parts, mut turn, model_key) = match started {
            Ok(started) => started,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let request_key = id.to_string();
        lock(&self.cancellable).insert(request_key.clone(), turn.token().clone());
        let server = Arc::clone(self);
        self.tasks.spawn(async move {
            let token = turn.token().clone();
            let session_id = SessionId::new(Arc::clone(session.id()));
            let sink = server.events(&session);
            let capabilities = server.client_capabilities.get().cloned().unwrap_or_default();
            let host = ClientHost::new(server.outbox.clone(), session_id.clone(), &capabilities);
            let approver = ClientApprover { outbox: server.outbox.clone(), session_id };
            let roots = session.roots();
            let limits = ToolLimits::default();
            let result = match server.model_client(&model_key) {
                Ok(client) => {
                    let turn_runner = Turn {
                        client: &client,
                        settings: &server.config.agent,
                        events: &sink,
                        cancel: &token,
                        workspace: Workspace {
                            cwd: &session.setup().cwd,
                            roots: &roots,
                            host: &host,
                            approver: &approver,
                            policy: session.policy(),
                            limits: &limits,
                        },
                        tools: crate::tools::definitions(),
                    };
                    turn_runner.run(turn.conversation(), parts).await
                }
                Err(err) => Err(TurnError::Model(err)),
            };
            // ACP: once the user cancelled, the answer is `cancelled`, whatever
            // the aborted operations returned.
            let response = match result {
                _ if token.is_cancelled() => Ok(PromptResponse::new(AcpStopReason::Cancelled)),
                Ok(stop) => Ok(PromptResponse::new(to_acp_stop_reason(stop))),
                Err(err) => Err(turn_error_to_rpc(&err)),
            };
            drop(turn);
            lock(&server.cancellable).remove(&request_key);
            server.outbox.respond(&id, response);
        });
    }
}

/// `mcpServers` is required by the schema; some clients omit it when empty.
fn with_default_mcp_servers(mut params: Value) -> Value {
    if let Some(object) = params.as_object_mut() {
        object.entry("mcpServers").or_insert_with(|| Value::Array(Vec::new()));
    }
    params
}

fn absolute_dir(path: &std::path::Path, field: &str) -> Result<PathBuf, RpcError> {
    if !path.is_absolute() {
        return Err(RpcError::new(
            INVALID_PARAMS,
            format!("Invalid params: {field} must be an absolute path, got \"{}\"", path.display()),
        ));
    }
    if !path.is_dir() {
        tracing::warn!(path = %path.display(), "{field} is not an existing directory");
    }
    Ok(path.to_path_buf())
}

fn parse_mode(id: &str) -> Result<Mode, RpcError> {
    Mode::from_id(id).ok_or_else(|| {
        let known: Vec<&str> = Mode::ALL.iter().map(|m| m.id()).collect();
        RpcError::new(
            INVALID_PARAMS,
            format!("Invalid params: unknown mode \"{id}\" (available: {})", known.join(", ")),
        )
    })
}

fn to_acp_stop_reason(stop: StopReason) -> AcpStopReason {
    match stop {
        StopReason::EndTurn => AcpStopReason::EndTurn,
        StopReason::MaxTokens => AcpStopReason::MaxTokens,
        StopReason::MaxTurnRequests => AcpStopReason::MaxTurnRequests,
        StopReason::Refusal => AcpStopReason::Refusal,
        StopReason::Cancelled => AcpStopReason::Cancelled,
    }
}

fn turn_error_to_rpc(err: &TurnError) -> RpcError {
    match err {
        TurnError::Model(model) => {
            let mut data = json!({ "kind": model.kind() });
            if let Some(status) = model.status() {
                data["status"] = json!(status);
            }
            if let Some(wait) = model.retry_after() {
                data["retryAfterMs"] = json!(wait.as_millis());
            }
            if let ModelError::Http { message, .. } | ModelError::Provider(message) = model {
                data["providerMessage"] = json!(message);
            }
            let mut message = model.to_string();
            if let Some(first) = message.get(..1) {
                message = format!("{}{}", first.to_uppercase(), &message[1..]);
            }
            RpcError::new(INTERNAL_ERROR, message).with_data(data)
        }
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
