//! One live connection to one MCP server: starting it over its transport
//! (stdio, Streamable HTTP, or the older HTTP+SSE), the MCP handshake, the
//! first tool list, and what the connection tells the hub as it runs (the
//! server's tool list changed; the server went away).
//!
//! Each connection is an rmcp client over a transport wrapped in [`Watched`],
//! which looks at every incoming message before rmcp does: a
//! `notifications/tools/list_changed` or the end of the stream is known here
//! the moment it arrives, before any response that follows it. So a tool
//! call that made a server change its tools returns only after the hub has
//! been told, and the next request can offer the new list. Dropping a
//! [`Connection`] closes it and kills a local server's process group.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::{
    ClientConfig, ClientJsonRpcMessage, Implementation, JsonRpcMessage, ProtocolVersion, ServerJsonRpcMessage,
    ServerNotification, Tool,
};
use rmcp::service::{ClientInitializeError, Peer, RoleClient, RunningService, ServiceExt};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig, StreamableHttpError,
};
use tokio::sync::oneshot;

use super::sse;
use super::stdio::ChildProcess;
use crate::config::{McpServer, McpTransport};
use crate::errors::chain;
use crate::platform::process::Launcher;

/// How long a failed local server gets to report how it ended.
const EXIT_REPORT_WAIT: Duration = Duration::from_millis(300);

/// Headers rmcp's Streamable HTTP transport sets itself and refuses from callers.
const RESERVED_HEADERS: [&str; 4] = ["accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"];

/// What a connection reports to the hub while it runs.
pub(super) struct Signals {
    closed: AtomicBool,
    on_tools_changed: Box<dyn Fn() + Send + Sync>,
    on_closed: Box<dyn Fn() + Send + Sync>,
}

impl Signals {
    /// Signals that call `on_tools_changed` when the server says its tools
    /// changed and `on_closed` when its stream ends.
    pub(super) fn new(
        on_tools_changed: impl Fn() + Send + Sync + 'static,
        on_closed: impl Fn() + Send + Sync + 'static,
    ) -> Arc<Signals> {
        Arc::new(Signals {
            closed: AtomicBool::new(false),
            on_tools_changed: Box::new(on_tools_changed),
            on_closed: Box::new(on_closed),
        })
    }
}

/// A transport that tells [`Signals`] what it sees before rmcp sees it,
/// and, when `ordered`, writes messages in the order rmcp sends them.
///
/// rmcp runs each send as its own task, so over a byte pipe a
/// `notifications/cancelled` sent right behind its request can overtake it
/// (the server then ignores the cancel and runs the request). An ordered
/// transport chains every send to the one before. Not for Streamable HTTP,
/// whose sends last as long as their POST and which orders cancellations
/// itself.
struct Watched<T> {
    inner: T,
    signals: Arc<Signals>,
    ordered: bool,
    /// Resolves when the previous send is done (ordered transports only).
    previous: Option<oneshot::Receiver<()>>,
}

impl<T> Watched<T> {
    fn new(inner: T, signals: &Arc<Signals>, ordered: bool) -> Watched<T> {
        Watched { inner, signals: Arc::clone(signals), ordered, previous: None }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Watched<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let sending = self.inner.send(item);
        let (previous, done) = if self.ordered {
            let (done, next) = oneshot::channel();
            (self.previous.replace(next), Some(done))
        } else {
            (None, None)
        };
        async move {
            if let Some(previous) = previous {
                // An error means the previous send was dropped: nothing to wait for.
                let _ = previous.await;
            }
            let result = sending.await;
            if let Some(done) = done {
                let _ = done.send(());
            }
            result
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        let message = self.inner.receive().await;
        match &message {
            Some(JsonRpcMessage::Notification(notification))
                if matches!(notification.notification, ServerNotification::ToolListChangedNotification(_)) =>
            {
                (self.signals.on_tools_changed)();
            }
            Some(_) => {}
            None => {
                if !self.signals.closed.swap(true, Ordering::SeqCst) {
                    (self.signals.on_closed)();
                }
            }
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// lathe as an MCP client: no sampling, no roots, no elicitation; the
/// handshake asks for the newest protocol version that still has
/// `initialize` (every server answers that with one it speaks).
#[derive(Debug, Clone, Copy)]
struct Client;

impl rmcp::ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        info.client_info = Implementation::new("lathe", env!("CARGO_PKG_VERSION"));
        info
    }
}

/// A live connection. Dropping it ends the connection (and a local server's
/// process group).
pub(super) struct Connection {
    service: RunningService<RoleClient, Client>,
    signals: Arc<Signals>,
    process: Option<ChildProcess>,
    _bridge: Option<sse::Bridge>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Stop rmcp's loop now rather than whenever its drop guard runs.
        self.service.cancellation_token().cancel();
    }
}

impl Connection {
    /// The handle requests go through.
    pub(super) fn peer(&self) -> Peer<RoleClient> {
        self.service.peer().clone()
    }

    /// Whether the server went away (its stream ended, its process exited).
    pub(super) fn is_closed(&self) -> bool {
        self.signals.closed.load(Ordering::SeqCst) || self.service.is_closed() || self.peer().is_transport_closed()
    }

    /// Why the server went away, as far as is known: how a local server
    /// ended and its last stderr lines.
    pub(super) async fn why_closed(&self) -> Option<String> {
        match &self.process {
            Some(process) => process.describe_exit(EXIT_REPORT_WAIT).await,
            None => None,
        }
    }
}

/// Starts and connects to `server`, and lists its tools, within `timeout`.
/// `cwd` is where a local server runs, `launcher` starts it; `http` is the client for remote ones
/// (or why there is none). The error says, for the user, what went wrong.
pub(super) async fn connect(
    server: &McpServer,
    (cwd, launcher): (&Path, &Launcher),
    http: Result<&reqwest::Client, String>,
    timeout: Duration,
    signals: Arc<Signals>,
) -> Result<(Connection, Vec<Tool>), String> {
    match &server.transport {
        McpTransport::Stdio { command, args, env } => {
            let (process, stdout, stdin) =
                ChildProcess::spawn(&server.name, (command, args, env), cwd, (launcher, server.sandbox))
                    .map_err(|err| format!("cannot start `{command}`: {err}"))?;
            let transport = Watched::new(AsyncRwTransport::new_client(stdout, stdin), &signals, true);
            let started = tokio::time::timeout(timeout, handshake(transport)).await;
            let failure = match started {
                Ok(Ok((service, tools))) => {
                    return Ok((Connection { service, signals, process: Some(process), _bridge: None }, tools));
                }
                Ok(Err(error)) => error,
                Err(_) => format!("it did not finish starting within {}", seconds(timeout)),
            };
            // Dropping `process` after this kills whatever is left of it.
            match process.describe_exit(EXIT_REPORT_WAIT).await {
                Some(exit) => Err(format!("{failure} ({exit})")),
                None => Err(failure),
            }
        }
        McpTransport::Http { url, headers } => {
            let http = http?;
            let mut custom = HashMap::new();
            for (name, value) in headers {
                if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                    tracing::warn!(server = %server.name, header = %name, "ignoring a header the MCP transport sets itself");
                    continue;
                }
                let name = http::HeaderName::try_from(name.as_str())
                    .map_err(|err| format!("the header name \"{name}\" is not valid ({err})"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|err| format!("the value of the header \"{name}\" is not valid ({err})"))?;
                custom.insert(name, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            let transport =
                Watched::new(StreamableHttpClientTransport::with_client(http.clone(), config), &signals, false);
            match tokio::time::timeout(timeout, handshake(transport)).await {
                Ok(Ok((service, tools))) => Ok((Connection { service, signals, process: None, _bridge: None }, tools)),
                Ok(Err(error)) => Err(error),
                Err(_) => Err(format!("{url} did not finish the MCP handshake within {}", seconds(timeout))),
            }
        }
        McpTransport::Sse { url, headers } => {
            let http = http?;
            let started = tokio::time::timeout(timeout, async {
                let (bridge, pipe) = sse::open(http, url, headers).await?;
                let (read, write) = tokio::io::split(pipe);
                let transport = Watched::new(AsyncRwTransport::new_client(read, write), &signals, true);
                let (service, tools) = handshake(transport).await?;
                Ok::<_, String>((bridge, service, tools))
            })
            .await;
            match started {
                Ok(Ok((bridge, service, tools))) => {
                    Ok((Connection { service, signals, process: None, _bridge: Some(bridge) }, tools))
                }
                Ok(Err(error)) => Err(error),
                Err(_) => Err(format!("{url} did not finish the MCP handshake within {}", seconds(timeout))),
            }
        }
    }
}

/// `initialize`, then every page of `tools/list`.
async fn handshake<T>(transport: T) -> Result<(RunningService<RoleClient, Client>, Vec<Tool>), String>
where
    T: Transport<RoleClient> + 'static,
{
    let service = Client.serve(transport).await.map_err(|err| describe_start_error(&err))?;
    let tools = service.peer().list_all_tools().await.map_err(|err| format!("listing its tools failed: {err}"))?;
    Ok((service, tools))
}

/// A failed handshake, for people (rmcp's own messages name its types).
fn describe_start_error(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::ConnectionClosed(_) => "it closed the connection during the MCP handshake".to_owned(),
        ClientInitializeError::TransportError { error, .. } => {
            // rmcp's HTTP error does not expose its cause (connection refused, DNS, TLS); reqwest's does.
            match error.error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
                Some(StreamableHttpError::Client(http)) => format!("the MCP handshake failed: {}", chain(http)),
                _ => format!("the MCP handshake failed: {}", chain(error.error.as_ref())),
            }
        }
        ClientInitializeError::JsonRpcError(error) => format!("it refused the MCP handshake: {}", error.message),
        other => format!("the MCP handshake failed: {other}"),
    }
}

/// A duration in seconds, for people.
pub(super) fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs.fract() == 0.0 { format!("{secs:.0} s") } else { format!("{secs:.1} s") }
}
