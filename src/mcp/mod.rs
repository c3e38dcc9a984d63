//! MCP servers as tools: the servers a session's editor passes in
//! `mcpServers` and those in lathe's config, connected for the life of the
//! session, their tools offered to the model next to the built-in ones.
//!
//! One [`McpHub`] per session owns it all:
//!
//! - **Start-up.** Every server is connected concurrently in the
//!   background as the session is set up (stdio: a child process in its own
//!   process group, supervised and with the secrets removed from its
//!   environment, see `crate::platform::process`; Streamable HTTP; the older HTTP+SSE), each within
//!   `[mcp] startup_timeout_secs`, so `session/new` never waits for them.
//!   The first prompt waits for those still starting (bounded by the same
//!   timeout) so its first request offers their tools. A server that fails
//!   to start, or times out, fails alone: the user is told which and why at
//!   the start of the next prompt (see [`ExternalTools::settle`]), the other
//!   servers' tools stay available.
//! - **Tools.** Offered as `server__tool` (see `catalog`), built-ins first,
//!   then sorted by name, the same `Arc` (and so the same request bytes)
//!   until a server's list changes. `notifications/tools/list_changed` makes
//!   the hub list that server's tools again; a call that caused it returns
//!   only once the new list is in, so the next request offers it.
//! - **Calls.** Behind the usual permission (the turn asks; see
//!   `permission::Access::External`), with `[mcp] call_timeout_secs` as a
//!   limit. Cancelling the turn drops the request, and rmcp sends the server
//!   `notifications/cancelled`.
//! - **Crashes.** A server that goes away keeps its tools offered; the next
//!   call to one of them starts it again, once per session. If that fails,
//!   or it goes away again, its tools are withdrawn.
//! - **Shut-down.** When the session closes (or is deleted, or lathe exits on
//!   EOF or a signal) its token is cancelled and every connection is
//!   dropped: local servers' process groups are killed.
//!
//! This module knows MCP (through rmcp) and the config's server shape; it
//! knows nothing of ACP, the model API, or how the turn asks permission.

mod catalog;
mod connection;
mod present;
mod sse;
mod stdio;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::ServiceError;
use serde_json::{Map, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::cancel::{Cancelled, OrCancel as _};
use crate::config::{McpServer, McpSettings, McpTransport};
use crate::platform::process::Launcher;
use crate::sync::lock;
use crate::tool_definition::ToolDefinition;
use crate::tools::{Access, Description, ExternalCall, ExternalTools, ToolContext, ToolKind, ToolOutcome};
use catalog::Catalog;
use connection::{Connection, Signals, seconds};

/// The servers a session connects to: the editor's, then the configured
/// ones whose names the editor did not use (the editor's are specific to
/// this session, so they win).
pub fn merge(editor: Vec<McpServer>, configured: &[McpServer]) -> Vec<McpServer> {
    let mut servers = editor;
    for server in configured {
        if servers.iter().any(|s| s.name == server.name) {
            tracing::info!(server = %server.name, "the editor passed an MCP server of the same name as a configured one; using the editor's");
        } else {
            servers.push(server.clone());
        }
    }
    servers
}

/// Starts and connects to one server, lists its tools and disconnects
/// (stopping a local server): `lathe doctor`'s check. The tools' names, or
/// why the server cannot be used, for the user.
pub async fn check_server(
    server: &McpServer,
    settings: &McpSettings,
    (cwd, launcher): (&std::path::Path, &Launcher),
) -> Result<Vec<String>, String> {
    let http = reqwest::Client::builder()
        .connect_timeout(settings.startup_timeout)
        .build()
        .map_err(|err| format!("lathe cannot make an HTTP client ({err})"));
    let signals = connection::Signals::new(|| {}, || {});
    let (connection, tools) = connection::connect(
        server,
        (cwd, launcher),
        http.as_ref().map_err(String::clone),
        settings.startup_timeout,
        signals,
    )
    .await?;
    drop(connection);
    Ok(tools.iter().map(|tool| tool.name.to_string()).collect())
}

/// A session's MCP servers and their tools. See the module docs.
pub struct McpHub {
    /// This hub, for the tasks and callbacks it starts.
    me: Weak<McpHub>,
    settings: McpSettings,
    cwd: PathBuf,
    /// Starts local servers.
    launcher: Launcher,
    builtins: Vec<ToolDefinition>,
    /// For remote servers; `Err` says why there is none.
    http: Result<reqwest::Client, String>,
    servers: Vec<Slot>,
    catalog: Mutex<Catalog>,
    /// Start-up failures the user has not been told of yet.
    notices: Mutex<Vec<String>>,
    /// Woken whenever a server's state or tool list changes.
    changed: Notify,
    /// Cancelled when the session goes away.
    token: CancellationToken,
}

/// One server and what is known of it.
struct Slot {
    spec: McpServer,
    state: Mutex<State>,
    /// Its tools as last listed; offered while it is starting or ready.
    tools: Mutex<Vec<Tool>>,
    /// Whether its one restart was used.
    restarted: AtomicBool,
    /// Tool-list refreshes asked for and done.
    lists: Lists,
    /// Held while a restart runs, so two calls do not restart it twice.
    restarting: tokio::sync::Mutex<()>,
}

enum State {
    /// Connecting (at start-up or for its restart).
    Starting,
    /// Connected; the connection may have closed since (see [`Connection::is_closed`]).
    Ready(Arc<Connection>),
    /// Not usable for the rest of the session, and why.
    Failed(String),
    /// The session went away.
    Stopped,
}

/// Counters of tool-list refreshes: `requested` grows when the server says
/// its list changed, `done` catches up when the refresh is in.
#[derive(Default)]
struct Lists {
    requested: AtomicU64,
    done: AtomicU64,
    wake: Notify,
}

impl Lists {
    fn request(&self) {
        self.requested.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_one();
    }

    fn pending(&self) -> bool {
        self.done.load(Ordering::SeqCst) < self.requested.load(Ordering::SeqCst)
    }
}

/// Why a server cannot take a call.
enum Unusable {
    /// The turn was cancelled while waiting for it.
    Cancelled,
    /// A message for the model (and the user).
    Failed(String),
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub").field("servers", &self.servers.iter().map(|s| &s.spec).collect::<Vec<_>>()).finish()
    }
}

impl McpHub {
    /// Starts connecting to `servers` in the background and returns at once.
    /// Local servers run in `cwd`, started by `launcher`. `builtins` are
    /// offered first. Everything stops when `token` is cancelled. Must be
    /// called inside the runtime.
    pub fn start(
        servers: Vec<McpServer>,
        settings: McpSettings,
        (cwd, launcher): (PathBuf, Launcher),
        builtins: &[ToolDefinition],
        token: CancellationToken,
    ) -> Arc<McpHub> {
        let remote =
            servers.iter().any(|s| matches!(s.transport, McpTransport::Http { .. } | McpTransport::Sse { .. }));
        let http = if remote {
            crate::http::client_builder()
                .connect_timeout(settings.startup_timeout)
                .build()
                .map_err(|err| format!("lathe cannot make an HTTP client ({err})"))
        } else {
            Err("no HTTP client was needed".to_owned())
        };
        let hub = Arc::new_cyclic(|me| McpHub {
            me: me.clone(),
            settings,
            cwd,
            launcher,
            builtins: builtins.to_vec(),
            http,
            servers: servers
                .into_iter()
                .map(|spec| Slot {
                    spec,
                    state: Mutex::new(State::Starting),
                    tools: Mutex::new(Vec::new()),
                    restarted: AtomicBool::new(false),
                    lists: Lists::default(),
                    restarting: tokio::sync::Mutex::new(()),
                })
                .collect(),
            catalog: Mutex::new(Catalog::builtins_only(builtins)),
            notices: Mutex::new(Vec::new()),
            changed: Notify::new(),
            token,
        });
        for index in 0..hub.servers.len() {
            tokio::spawn(Arc::clone(&hub).start_server(index));
            tokio::spawn(Arc::clone(&hub).refresh_lists(index));
        }
        let watcher = Arc::clone(&hub);
        tokio::spawn(async move {
            watcher.token.cancelled().await;
            watcher.stop_all();
        });
        hub
    }

    /// Drops every connection (killing local servers) and refuses further calls.
    fn stop_all(&self) {
        for slot in &self.servers {
            let old = std::mem::replace(&mut *lock(&slot.state), State::Stopped);
            drop(old);
        }
        self.changed.notify_waiters();
        tracing::debug!("MCP servers stopped");
    }

    /// The first connection to server `index`.
    async fn start_server(self: Arc<Self>, index: usize) {
        let slot = &self.servers[index];
        let Ok(connected) = self.connect(index).or_cancel(&self.token).await else { return };
        match connected {
            Ok((connection, tools)) => {
                tracing::info!(server = %slot.spec.name, tools = tools.len(), "MCP server connected");
                self.install(index, connection, tools);
            }
            Err(why) => {
                tracing::warn!(server = %slot.spec.name, %why, "MCP server unavailable");
                {
                    let mut state = lock(&slot.state);
                    if matches!(*state, State::Stopped) {
                        return;
                    }
                    *state = State::Failed(why.clone());
                }
                lock(&self.notices).push(format!(
                    "MCP server `{}` is unavailable: {why}. Its tools are not offered in this session.\n\n",
                    slot.spec.name
                ));
            }
        }
        self.changed.notify_waiters();
    }

    /// Connects to server `index`, with signals that report to this hub.
    async fn connect(&self, index: usize) -> Result<(Connection, Vec<Tool>), String> {
        let slot = &self.servers[index];
        let (on_change, on_close) = (self.me.clone(), self.me.clone());
        let signals = Signals::new(
            move || {
                if let Some(hub) = Weak::upgrade(&on_change) {
                    hub.servers[index].lists.request();
                }
            },
            move || {
                if let Some(hub) = Weak::upgrade(&on_close) {
                    tracing::info!(server = %hub.servers[index].spec.name, "MCP server connection closed");
                    hub.changed.notify_waiters();
                }
            },
        );
        let http = self.http.as_ref().map_err(String::clone);
        connection::connect(&slot.spec, (&self.cwd, &self.launcher), http, self.settings.startup_timeout, signals).await
    }

    /// Makes a fresh connection server `index`'s, with its tools.
    fn install(&self, index: usize, connection: Connection, tools: Vec<Tool>) -> Option<Arc<Connection>> {
        let slot = &self.servers[index];
        let connection = Arc::new(connection);
        {
            let mut state = lock(&slot.state);
            if matches!(*state, State::Stopped) || self.token.is_cancelled() {
                return None;
            }
            *lock(&slot.tools) = tools;
            *state = State::Ready(Arc::clone(&connection));
        }
        self.rebuild();
        Some(connection)
    }

    /// Lists server `index`'s tools again whenever it says they changed.
    async fn refresh_lists(self: Arc<Self>, index: usize) {
        let slot = &self.servers[index];
        loop {
            if slot.lists.wake.notified().or_cancel(&self.token).await.is_err() {
                return;
            }
            let target = slot.lists.requested.load(Ordering::SeqCst);
            let peer = match &*lock(&slot.state) {
                State::Ready(connection) if !connection.is_closed() => Some(connection.peer()),
                State::Starting | State::Ready(_) | State::Failed(_) | State::Stopped => None,
            };
            if let Some(peer) = peer {
                match tokio::time::timeout(self.settings.startup_timeout, peer.list_all_tools()).await {
                    Ok(Ok(tools)) => {
                        tracing::info!(server = %slot.spec.name, tools = tools.len(), "MCP server's tools changed");
                        *lock(&slot.tools) = tools;
                        self.rebuild();
                    }
                    Ok(Err(err)) => {
                        tracing::warn!(server = %slot.spec.name, %err, "listing the MCP server's tools again failed")
                    }
                    Err(_) => {
                        tracing::warn!(server = %slot.spec.name, "listing the MCP server's tools again timed out")
                    }
                }
            }
            slot.lists.done.fetch_max(target, Ordering::SeqCst);
            self.changed.notify_waiters();
        }
    }

    /// Rebuilds the catalog from the servers that are starting or ready.
    /// The definitions keep their `Arc` when nothing a request carries changed.
    fn rebuild(&self) {
        let lists: Vec<(usize, String, Vec<Tool>)> = self
            .servers
            .iter()
            .enumerate()
            .filter(|(_, slot)| matches!(*lock(&slot.state), State::Starting | State::Ready(_)))
            .map(|(index, slot)| (index, slot.spec.name.clone(), lock(&slot.tools).clone()))
            .collect();
        let borrowed: Vec<(usize, &str, &[Tool])> =
            lists.iter().map(|(index, name, tools)| (*index, name.as_str(), tools.as_slice())).collect();
        let fresh = Catalog::build(&self.builtins, &borrowed);
        let mut catalog = lock(&self.catalog);
        if catalog.definitions[..] == fresh.definitions[..] {
            catalog.entries = fresh.entries;
        } else {
            *catalog = fresh;
        }
    }

    /// Waits, bounded, until no server is starting and no tool list is being
    /// refreshed; `None` when cancelled.
    async fn wait_until(&self, cancel: &CancellationToken, done: impl Fn() -> bool) -> Option<()> {
        let deadline = tokio::time::Instant::now() + self.settings.startup_timeout + Duration::from_secs(1);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done() {
                return Some(());
            }
            match tokio::time::timeout_at(deadline, changed).or_cancel(cancel).await {
                Err(Cancelled) => return None,
                Ok(Err(_elapsed)) => return Some(()),
                Ok(Ok(())) => {}
            }
        }
    }

    fn settled(&self) -> bool {
        self.servers.iter().all(|slot| !matches!(*lock(&slot.state), State::Starting) && !slot.lists.pending())
    }

    /// A connection to server `index` that is up, restarting the server
    /// (once per session) if it went away.
    async fn usable(&self, index: usize, cancel: &CancellationToken) -> Result<Arc<Connection>, Unusable> {
        let slot = &self.servers[index];
        loop {
            let closed = match &*lock(&slot.state) {
                State::Ready(connection) if !connection.is_closed() => return Ok(Arc::clone(connection)),
                State::Ready(connection) => Some(Arc::clone(connection)),
                State::Starting => None,
                State::Failed(why) => {
                    return Err(Unusable::Failed(format!(
                        "The MCP server `{}` is unavailable: {why}.",
                        slot.spec.name
                    )));
                }
                State::Stopped => {
                    return Err(Unusable::Failed(format!("The MCP server `{}` was shut down.", slot.spec.name)));
                }
            };
            match closed {
                Some(old) => return self.restart(index, old, cancel).await,
                // Its first start, or another call's restart: wait for it (each is bounded).
                None => {
                    let started = || !matches!(*lock(&slot.state), State::Starting);
                    if self.wait_until(cancel, started).await.is_none() {
                        return Err(Unusable::Cancelled);
                    }
                }
            }
        }
    }

    /// Starts server `index` again after its connection `old` closed, unless
    /// it was restarted once already.
    async fn restart(
        &self,
        index: usize,
        old: Arc<Connection>,
        cancel: &CancellationToken,
    ) -> Result<Arc<Connection>, Unusable> {
        let slot = &self.servers[index];
        let name = &slot.spec.name;
        let Ok(_one_at_a_time) = slot.restarting.lock().or_cancel(cancel).await else {
            return Err(Unusable::Cancelled);
        };
        {
            let mut state = lock(&slot.state);
            match &*state {
                State::Ready(connection) if Arc::ptr_eq(connection, &old) => {}
                // Another call restarted it (or it failed, or the session ended) meanwhile.
                State::Ready(connection) if !connection.is_closed() => return Ok(Arc::clone(connection)),
                State::Ready(_) | State::Starting | State::Failed(_) | State::Stopped => {
                    drop(state);
                    return Err(Unusable::Failed(format!("The MCP server `{name}` is unavailable.")));
                }
            }
            if !slot.restarted.load(Ordering::SeqCst) {
                *state = State::Starting;
            }
        }
        let why = old.why_closed().await.map(|why| format!(" ({why})")).unwrap_or_default();
        if slot.restarted.load(Ordering::SeqCst) {
            let reason = format!("it stopped again after being restarted once{why}");
            self.fail(index, reason.clone());
            return Err(Unusable::Failed(format!(
                "The MCP server `{name}` is unavailable: {reason}. lathe restarts a server only once per session, so its tools are withdrawn."
            )));
        }
        tracing::warn!(server = %name, why = %why, "MCP server stopped; starting it again");
        let Ok(connected) = self.connect(index).or_cancel(cancel).await else {
            // Not tried: the next call may try.
            let mut state = lock(&slot.state);
            if matches!(*state, State::Starting) {
                *state = State::Ready(old);
            }
            drop(state);
            self.changed.notify_waiters();
            return Err(Unusable::Cancelled);
        };
        slot.restarted.store(true, Ordering::SeqCst);
        drop(old);
        let result = match connected {
            Ok((connection, tools)) => {
                tracing::info!(server = %name, tools = tools.len(), "MCP server started again");
                self.install(index, connection, tools)
                    .ok_or_else(|| Unusable::Failed(format!("The MCP server `{name}` was shut down.")))
            }
            Err(failure) => {
                let reason = format!("it stopped{why}, and starting it again failed: {failure}");
                self.fail(index, reason.clone());
                Err(Unusable::Failed(format!(
                    "The MCP server `{name}` is unavailable: {reason}. Its tools are withdrawn."
                )))
            }
        };
        self.changed.notify_waiters();
        result
    }

    /// Marks server `index` unusable for the rest of the session and
    /// withdraws its tools.
    fn fail(&self, index: usize, reason: String) {
        let slot = &self.servers[index];
        tracing::warn!(server = %slot.spec.name, %reason, "MCP server unavailable");
        {
            let mut state = lock(&slot.state);
            if matches!(*state, State::Stopped) {
                return;
            }
            *state = State::Failed(reason);
        }
        self.rebuild();
        self.changed.notify_waiters();
    }

    /// Runs one call. See the module docs.
    async fn call(&self, call: ExternalCall, cancel: &CancellationToken) -> ToolOutcome {
        let Some(entry) = lock(&self.catalog).entries.get(&call.name).cloned() else {
            return ToolOutcome::failed(format!(
                "The tool `{}` is no longer offered: its MCP server withdrew it or stopped.",
                call.name
            ));
        };
        let slot = &self.servers[entry.server];
        let server = &slot.spec.name;
        let tool = entry.tool.name.to_string();
        let connection = match self.usable(entry.server, cancel).await {
            Ok(connection) => connection,
            Err(Unusable::Cancelled) => return ToolOutcome::cancelled(),
            Err(Unusable::Failed(message)) => return ToolOutcome::failed(message),
        };
        let peer = connection.peer();
        // Only the hub keeps the connection alive, so a shutdown mid-call kills the server at once.
        let weak = Arc::downgrade(&connection);
        drop(connection);
        let params = CallToolRequestParams::new(tool.clone()).with_arguments(call.arguments);
        // Dropping the request (cancelled, or timed out) makes rmcp send the
        // server `notifications/cancelled`.
        let answered = tokio::time::timeout(self.settings.call_timeout, peer.call_tool(params)).or_cancel(cancel).await;
        let outcome = match answered {
            Err(Cancelled) => return ToolOutcome::cancelled(),
            Ok(Err(_elapsed)) => ToolOutcome::failed(format!(
                "The MCP server `{server}` did not answer this `{tool}` call within {}, so lathe cancelled it. \
                 The server may be stuck: try again later, or do without this tool.",
                seconds(self.settings.call_timeout)
            )),
            Ok(Ok(Ok(result))) => present::outcome(result),
            Ok(Ok(Err(ServiceError::McpError(error)))) => {
                ToolOutcome::failed(format!("The MCP server `{server}` refused this `{tool}` call: {}", error.message))
            }
            Ok(Ok(Err(error))) => self.lost(entry.server, &weak, &tool, &error).await,
        };
        // A call that changed the server's tools returns once the new list is in.
        let lists = &slot.lists;
        if lists.pending() {
            let _ = self.wait_until(cancel, || !lists.pending()).await;
        }
        outcome
    }

    /// The outcome of a call whose request failed without an MCP error:
    /// usually the server went away.
    async fn lost(&self, index: usize, connection: &Weak<Connection>, tool: &str, error: &ServiceError) -> ToolOutcome {
        let slot = &self.servers[index];
        let name = &slot.spec.name;
        let connection = connection.upgrade();
        if connection.as_ref().is_some_and(|connection| !connection.is_closed()) {
            return ToolOutcome::failed(format!("The call to `{tool}` on the MCP server `{name}` failed: {error}."));
        }
        let why = match &connection {
            Some(connection) => connection.why_closed().await.map(|why| format!(" ({why})")).unwrap_or_default(),
            None => String::new(),
        };
        let next = if slot.restarted.load(Ordering::SeqCst) {
            self.fail(index, format!("it stopped again after being restarted once{why}"));
            "It was already started again once in this session, so its tools are withdrawn."
        } else {
            "lathe will start it again on the next call to one of its tools."
        };
        ToolOutcome::failed(format!("The MCP server `{name}` stopped while running `{tool}`{why}. {next}"))
    }
}

/// A call's arguments as a JSON object (empty or `null` arguments are `{}`).
fn parse_arguments(name: &str, text: &str) -> Result<Map<String, Value>, String> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(arguments)) => Ok(arguments),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(format!(
            "The arguments of this {name} call must be a JSON object matching the tool's schema. Call it again with an object."
        )),
        Err(err) => Err(format!(
            "The arguments of this {name} call are not valid JSON ({err}). Send a JSON object matching the tool's schema."
        )),
    }
}

impl ExternalTools for McpHub {
    fn settle<'a>(&'a self, cancel: &'a CancellationToken) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async move {
            if self.wait_until(cancel, || self.settled()).await.is_none() {
                return Vec::new();
            }
            std::mem::take(&mut *lock(&self.notices))
        })
    }

    fn definitions(&self) -> Arc<[ToolDefinition]> {
        Arc::clone(&lock(&self.catalog).definitions)
    }

    fn pending(&self, name: &str) -> Option<(String, ToolKind)> {
        let catalog = lock(&self.catalog);
        let entry = catalog.entries.get(name)?;
        Some((format!("{} ({})", present::display_name(&entry.tool), entry.server_name), present::kind(&entry.tool)))
    }

    fn prepare(&self, name: &str, arguments: &str) -> Option<Result<ExternalCall, String>> {
        let entry = lock(&self.catalog).entries.get(name).cloned()?;
        Some(parse_arguments(name, arguments).map(|arguments| ExternalCall {
            name: name.to_owned(),
            kind: present::kind(&entry.tool),
            description: Description {
                title: present::title(&entry.server_name, &entry.tool, &arguments),
                locations: Vec::new(),
                access: Access::External {
                    server: entry.server_name.clone(),
                    tool: entry.tool.name.to_string(),
                    read_only: present::read_only(&entry.tool),
                },
                preview: present::preview(&entry.server_name, &entry.tool, &arguments),
            },
            arguments,
        }))
    }

    fn run<'a>(&'a self, call: ExternalCall, ctx: &'a ToolContext<'a>) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(self.call(call, ctx.cancel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(name: &str) -> McpServer {
        McpServer {
            name: name.to_owned(),
            transport: McpTransport::Stdio { command: "true".to_owned(), args: Vec::new(), env: Vec::new() },
            sandbox: false,
        }
    }

    #[test]
    fn the_editors_servers_win_over_configured_ones_of_the_same_name() {
        let mut configured = stdio("docs");
        configured.transport = McpTransport::Http { url: "http://127.0.0.1:1/mcp".to_owned(), headers: Vec::new() };
        let merged = merge(vec![stdio("docs"), stdio("git")], &[configured, stdio("web")]);
        let names: Vec<&str> = merged.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["docs", "git", "web"]);
        assert!(matches!(merged[0].transport, McpTransport::Stdio { .. }));
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert_eq!(parse_arguments("t", "").unwrap(), Map::new());
        assert_eq!(parse_arguments("t", "null").unwrap(), Map::new());
        assert_eq!(parse_arguments("t", r#"{"a":1}"#).unwrap()["a"], 1);
        assert!(parse_arguments("t", "[1]").unwrap_err().contains("must be a JSON object"));
        assert!(parse_arguments("t", "{").unwrap_err().contains("not valid JSON"));
    }
}
