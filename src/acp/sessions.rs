//! Session lifecycle over ACP: `session/new`, `session/load` (with replay),
//! `session/resume`, `session/list`, `session/close` and `session/delete`,
//! plus what every session gets once set up (its slash commands). Every
//! handler here that touches the disk does so in a task of its own, with the
//! file work in `spawn_blocking` (the `acp` module doc says what ordering a
//! client can still rely on).
//!
//! Replay sends what the user saw, from the session's log, as
//! `session/update` notifications before the `session/load` response:
//! consecutive chunks of one message are merged into one chunk, and state
//! updates that are not conversation (commands, modes, options, titles) are
//! not replayed: fresh ones follow the response.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    AvailableCommand, AvailableCommandInput, AvailableCommandsUpdate, CloseSessionRequest, CloseSessionResponse,
    DeleteSessionRequest, DeleteSessionResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, NewSessionRequest, NewSessionResponse, SessionId, SessionInfo, SessionUpdate,
    UnstructuredCommandInput,
};
use serde_json::{Value, json};

use super::updates::{self, Lines, SessionEvents};
use super::{INVALID_PARAMS, RESOURCE_NOT_FOUND, RequestId, RpcError, Server, lock, options, parse_params};
use crate::commands::SlashCommand;
use crate::permission::Mode;
use crate::prompt::Instructions;
use crate::session::{Journal, Session};
use crate::setup::{self, Placement, Start, WorkspaceFiles, recover_transcript, workspace_files};
use crate::store::{Record, SessionMeta, Store, StoreError, now_rfc3339};

/// Whether `session/load`-style setup replays the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// `session/load`: replay, then answer.
    Yes,
    /// `session/resume`: answer only.
    No,
}

/// Sessions listed per page.
const PAGE_SIZE: usize = 50;

/// How long a load or close waits for a session's cancelled turn to wind
/// down (so its last records are queued) before going on without it.
const WIND_DOWN: Duration = Duration::from_secs(2);

/// Tells the reader, when dropped, that a load is over (answered, failed or
/// panicked), so what waited for it runs.
struct LoadOver {
    loaded: tokio::sync::mpsc::UnboundedSender<Arc<str>>,
    session_id: Arc<str>,
}

impl Drop for LoadOver {
    fn drop(&mut self) {
        let _ = self.loaded.send(Arc::clone(&self.session_id));
    }
}

impl Server {
    pub(super) fn events(&self, session: &Session) -> SessionEvents {
        SessionEvents {
            outbox: self.outbox.clone(),
            session_id: SessionId::new(Arc::clone(session.id())),
            journal: session.journal().cloned(),
        }
    }

    pub(super) fn session(&self, id: &SessionId) -> Result<Arc<Session>, RpcError> {
        lock(&self.sessions).get(&id.0).cloned().ok_or_else(|| session_not_found(id))
    }

    /// `session/new`. The session's directory is queued for creation at once;
    /// the rest (waiting for it, reading the workspace) runs in a task.
    pub(super) fn new_session(self: &Arc<Self>, id: RequestId, params: Value) {
        let parsed = parse_params::<NewSessionRequest>(with_default_mcp_servers(params))
            .and_then(|request| placement(&request.cwd, &request.additional_directories, &request.mcp_servers));
        let placement = match parsed {
            Ok(placement) => placement,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let session_id = setup::new_session_id();
        let choices = setup::choices_for(&self.config, &self.config.default_model);
        let meta = setup::new_meta(&session_id, &placement, &choices, Mode::Ask);
        let created = self.store.as_ref().map(|store| (Arc::clone(store), store.create(&meta)));
        let server = Arc::clone(self);
        self.tasks.spawn(async move {
            let journal = async {
                match created {
                    Some((store, created)) => match created.await {
                        Ok(()) => Ok(Journal::new(store, Arc::clone(&session_id))),
                        Err(err) => Err(err.to_string()),
                    },
                    None => Err(server.unsaved_reason.clone()),
                }
            };
            let (journal, files) = tokio::join!(journal, server.read_workspace(&placement));
            let start =
                Start { messages: Vec::new(), choices, mode: Mode::Ask, journal: journal.as_ref().ok().cloned() };
            let session = server.open_session(Arc::clone(&session_id), placement, start, &files.instructions);
            let response = NewSessionResponse::new(SessionId::new(Arc::clone(session.id())))
                .modes(options::mode_state(&session))
                .config_options(options::config_options(&server.config, &session));
            server.outbox.respond_ok(&id, &response);
            server.send_commands(&session, files.commands);
            server.tell_sandbox(&session);
            if let Err(why) = journal {
                tracing::warn!(session = %session_id, "lathe {why}; this session will not be saved");
                server.warnings.not_saved(&session_id, &why);
            }
            tracing::info!(session = %session_id, "session created");
        });
    }

    /// `session/load` and `session/resume`: the stored session, with the
    /// cwd and roots the client sends now (never the stored ones). The
    /// session is marked as loading at once (what names it waits, see the
    /// module doc); the reading runs in a task.
    pub(super) fn load_session(self: &Arc<Self>, id: RequestId, params: Value, replay: Replay) {
        let parsed = (|| {
            let request: LoadSessionRequest = parse_params(with_default_mcp_servers(params))?;
            let store = self.store.clone().ok_or_else(|| {
                RpcError::new(RESOURCE_NOT_FOUND, format!("Sessions are not saved: lathe {}", self.unsaved_reason))
            })?;
            let placement = placement(&request.cwd, &request.additional_directories, &request.mcp_servers)?;
            Ok::<_, RpcError>((request.session_id, store, placement))
        })();
        let (session_id, store, placement) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let key = Arc::clone(&session_id.0);
        lock(&self.loading).insert(Arc::clone(&key), Vec::new());
        // A session open in this process is reopened from disk: whatever it was doing stops.
        let replaced = lock(&self.sessions).remove(&key);
        if let Some(open) = &replaced {
            open.cancel_turns();
            open.close();
        }
        let over = LoadOver { loaded: self.loaded.clone(), session_id: key };
        let server = Arc::clone(self);
        self.tasks.spawn(async move {
            let _over = over;
            match server.restore(&session_id, &store, placement, replaced, replay).await {
                Ok((session, commands)) => {
                    let response = LoadSessionResponse::new()
                        .modes(options::mode_state(&session))
                        .config_options(options::config_options(&server.config, &session));
                    server.outbox.respond_ok(&id, &response);
                    server.send_commands(&session, commands);
                    server.tell_sandbox(&session);
                }
                Err(error) => server.outbox.respond_err(&id, &error),
            }
        });
    }

    /// Reads a stored session back, opens it and sends its replay.
    async fn restore(
        &self,
        session_id: &SessionId,
        store: &Arc<Store>,
        placement: Placement,
        replaced: Option<Arc<Session>>,
        replay: Replay,
    ) -> Result<(Arc<Session>, Vec<SlashCommand>), RpcError> {
        if let Some(old) = replaced
            && tokio::time::timeout(WIND_DOWN, old.idle()).await.is_err()
        {
            tracing::warn!(session = %session_id, "the session's last turn did not wind down in time");
        }
        // Every record queued so far must be on disk before it is read back.
        store.written().wait().await;
        // The parse, the transcript and the replay are all work in proportion
        // to the log: none of it on the async threads.
        let reading = {
            let (store, id) = (Arc::clone(store), Arc::clone(&session_id.0));
            let (cwd, user_dir) = (placement.cwd.clone(), self.config.user_dir.clone());
            tokio::task::spawn_blocking(move || {
                let stored = store.load(&id).map(|stored| {
                    let transcript = recover_transcript(&stored.records);
                    let lines = if replay == Replay::Yes { replay_lines(&stored.records) } else { Vec::new() };
                    (stored.meta, transcript, lines)
                });
                (stored, workspace_files(&cwd, user_dir.as_deref()))
            })
        };
        let (stored, files) = reading
            .await
            .map_err(|err| RpcError::new(super::INTERNAL_ERROR, format!("Cannot load session {session_id}: {err}")))?;
        let (mut meta, transcript, replayed) = stored.map_err(|err| match err {
            StoreError::NotFound(_) => session_not_found(session_id),
            other => RpcError::new(super::INTERNAL_ERROR, format!("Cannot load session {session_id}: {other}")),
        })?;
        let mut placement = placement;
        placement.created_at.clone_from(&meta.created_at);
        let (choices, mode) = setup::restored_choices(&self.config, &meta);
        meta.cwd = placement.cwd.clone();
        meta.additional_directories = placement.additional_directories.clone();
        store.save_meta_later(meta.clone());
        let journal = Journal::new(Arc::clone(store), Arc::clone(&session_id.0));
        let start = Start { messages: transcript, choices, mode, journal: Some(journal) };
        let session = self.open_session(Arc::clone(&session_id.0), placement, start, &files.instructions);
        session.set_title(meta.title);
        for line in replayed {
            self.outbox.send_encoded(line);
        }
        Ok((session, files.commands))
    }

    /// Reads the workspace files of a session being set up, off the async threads.
    async fn read_workspace(&self, placement: &Placement) -> WorkspaceFiles {
        let (cwd, user_dir) = (placement.cwd.clone(), self.config.user_dir.clone());
        tokio::task::spawn_blocking(move || workspace_files(&cwd, user_dir.as_deref())).await.unwrap_or_else(|err| {
            tracing::warn!(%err, "reading the project's instructions and commands failed");
            WorkspaceFiles::default()
        })
    }

    fn open_session(
        &self,
        id: Arc<str>,
        placement: Placement,
        start: Start,
        instructions: &[Instructions],
    ) -> Arc<Session> {
        let session = setup::open_session(&self.config, Arc::clone(&id), placement, start, instructions, &self.root);
        lock(&self.sessions).insert(id, Arc::clone(&session));
        session
    }

    /// How the session's processes are started: its environment rule and sandbox.
    fn launcher(&self, session: &Session) -> crate::child::Launcher {
        setup::launcher(&self.config, session)
    }

    /// Tells the user, once for the session (when it is created or loaded),
    /// that its command sandbox is weaker than configured, if it is.
    fn tell_sandbox(&self, session: &Session) {
        let launcher = self.launcher(session);
        if let Some(sandbox) = launcher.sandbox()
            && let Some((title, text)) = sandbox.notice()
        {
            tracing::warn!(session = %session.id(), "{title}: {text}");
            self.warnings.warn(session.id(), &title, &text);
        }
    }

    /// `available_commands_update`: the built-in and the user's slash commands.
    fn send_commands(&self, session: &Session, commands: Vec<SlashCommand>) {
        let available = commands
            .into_iter()
            .map(|command| {
                // A project's command files are workspace content: what they
                // say is shown escaped, like every title built from hostile text.
                let description = updates::shown(&command.description, Lines::One).into_owned();
                let mut available = AvailableCommand::new(command.name, description);
                if let Some(hint) = command.hint {
                    let hint = updates::shown(&hint, Lines::One).into_owned();
                    available =
                        available.input(AvailableCommandInput::Unstructured(UnstructuredCommandInput::new(hint)));
                }
                available
            })
            .collect();
        self.events(session)
            .send_unrecorded(SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(available)));
    }

    /// Writes the session's current state to its metadata.
    pub(super) fn save_meta(&self, session: &Session) {
        let Some(store) = &self.store else { return };
        if session.journal().is_none() {
            return;
        }
        let meta = setup::meta_of(session);
        store.save_meta_later(meta);
    }

    /// `session/list`: every saved session's metadata is read in a task,
    /// after what was queued before the request has been written.
    pub(super) fn list_sessions(self: &Arc<Self>, id: RequestId, params: Value) {
        let request: ListSessionsRequest = match parse_params(params) {
            Ok(request) => request,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let Some(store) = self.store.clone() else {
            return self.outbox.respond_ok(&id, &ListSessionsResponse::new(Vec::new()));
        };
        let written = store.written();
        let outbox = self.outbox.clone();
        self.tasks.spawn(async move {
            written.wait().await;
            let sessions = tokio::task::spawn_blocking(move || store.list()).await.unwrap_or_else(|err| {
                tracing::warn!(%err, "listing the saved sessions failed");
                Vec::new()
            });
            outbox.respond(&id, list_page(&request, sessions));
        });
    }

    /// `session/close`: the session leaves the table at once (so what
    /// follows sees it closed); the answer comes once its log is written and
    /// closed.
    pub(super) fn close_session(self: &Arc<Self>, id: RequestId, params: Value) {
        let request: CloseSessionRequest = match parse_params(params) {
            Ok(request) => request,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let removed = lock(&self.sessions).remove(&request.session_id.0);
        let outbox = self.outbox.clone();
        match (removed, self.store.clone()) {
            (Some(session), store) => {
                // As if session/cancel had been called, then everything is freed.
                session.cancel_turns();
                session.close();
                let Some(store) = store.filter(|_| session.journal().is_some()) else {
                    return outbox.respond_ok(&id, &CloseSessionResponse::new());
                };
                let closed = store.close(&request.session_id.0);
                self.tasks.spawn(async move {
                    closed.wait().await;
                    outbox.respond_ok(&id, &CloseSessionResponse::new());
                    // A cancelled turn may still queue its last records, which
                    // open the log again: close it once more when it is over.
                    if tokio::time::timeout(WIND_DOWN, session.idle()).await.is_ok() {
                        store.close(session.id()).wait().await;
                    }
                });
            }
            // Closing a saved session that is not open succeeds.
            (None, Some(store)) => {
                let written = store.written();
                self.tasks.spawn(async move {
                    written.wait().await;
                    let session_id = Arc::clone(&request.session_id.0);
                    let saved = tokio::task::spawn_blocking(move || store.load_meta(&session_id).is_ok())
                        .await
                        .unwrap_or(false);
                    match saved {
                        true => outbox.respond_ok(&id, &CloseSessionResponse::new()),
                        false => outbox.respond_err(&id, &session_not_found(&request.session_id)),
                    }
                });
            }
            (None, None) => outbox.respond_err(&id, &session_not_found(&request.session_id)),
        }
    }

    /// `session/delete`: the session leaves the table at once and its
    /// directory is deleted by the store's writer, after everything queued
    /// before.
    pub(super) fn delete_session(self: &Arc<Self>, id: RequestId, params: Value) {
        let request: DeleteSessionRequest = match parse_params(params) {
            Ok(request) => request,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        if let Some(session) = lock(&self.sessions).remove(&request.session_id.0) {
            session.cancel_turns();
            session.close();
        }
        let Some(store) = &self.store else { return self.outbox.respond_ok(&id, &DeleteSessionResponse::new()) };
        let deleted = store.delete(&request.session_id.0);
        let outbox = self.outbox.clone();
        self.tasks.spawn(async move {
            let response = deleted.await.map(|()| DeleteSessionResponse::new()).map_err(|err| {
                RpcError::new(super::INTERNAL_ERROR, format!("Cannot delete session {}: {err}", request.session_id))
            });
            outbox.respond(&id, response);
        });
    }
}

/// One page of `session/list`, most recent first.
fn list_page(request: &ListSessionsRequest, mut sessions: Vec<SessionMeta>) -> Result<ListSessionsResponse, RpcError> {
    if let Some(cwd) = &request.cwd {
        sessions.retain(|meta| meta.cwd == *cwd);
    }
    // Most recent first; the id breaks ties so pages are stable.
    sessions.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.session_id.cmp(&b.session_id)));
    let start = match &request.cursor {
        None => 0,
        Some(cursor) => cursor
            .strip_prefix("offset:")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= sessions.len())
            .ok_or_else(|| {
                RpcError::new(
                    INVALID_PARAMS,
                    format!("Invalid params: cursor: \"{cursor}\" is not a cursor lathe gave"),
                )
            })?,
    };
    let page: Vec<SessionInfo> = sessions
        .iter()
        .skip(start)
        .take(PAGE_SIZE)
        .map(|meta| {
            SessionInfo::new(SessionId::new(meta.session_id.as_str()), meta.cwd.clone())
                .additional_directories(meta.additional_directories.clone())
                .title(meta.title.clone())
                .updated_at(Some(meta.updated_at.clone()))
        })
        .collect();
    let next = start + page.len();
    let mut response = ListSessionsResponse::new(page);
    if next < sessions.len() {
        response = response.next_cursor(format!("offset:{next}"));
    }
    Ok(response)
}

pub(super) fn session_not_found(id: &SessionId) -> RpcError {
    RpcError::new(RESOURCE_NOT_FOUND, format!("Session not found: {id}")).with_data(json!({ "sessionId": id }))
}

/// `mcpServers` is required by the schema; some clients omit it when empty.
fn with_default_mcp_servers(mut params: Value) -> Value {
    if let Some(object) = params.as_object_mut() {
        object.entry("mcpServers").or_insert_with(|| Value::Array(Vec::new()));
    }
    params
}

fn placement(
    cwd: &std::path::Path,
    additional: &[PathBuf],
    mcp_servers: &[agent_client_protocol_schema::v1::McpServer],
) -> Result<Placement, RpcError> {
    let cwd = absolute_dir(cwd, "cwd")?;
    let additional_directories = additional
        .iter()
        .enumerate()
        .map(|(i, dir)| absolute_dir(dir, &format!("additionalDirectories[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let mcp = mcp_servers.iter().filter_map(mcp_server).collect();
    let mcp_servers = mcp_servers.iter().map(|server| serde_json::to_value(server).unwrap_or(Value::Null)).collect();
    Ok(Placement { cwd, additional_directories, mcp_servers, mcp, created_at: now_rfc3339() })
}

/// An ACP MCP server description in the shape the `mcp` module connects to.
fn mcp_server(server: &agent_client_protocol_schema::v1::McpServer) -> Option<crate::config::McpServer> {
    use crate::config::McpTransport;
    use agent_client_protocol_schema::v1::McpServer;
    let (name, transport) = match server {
        McpServer::Stdio(stdio) => (
            stdio.name.clone(),
            McpTransport::Stdio {
                command: stdio.command.to_string_lossy().into_owned(),
                args: stdio.args.clone(),
                env: stdio.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect(),
            },
        ),
        McpServer::Http(http) => (
            http.name.clone(),
            McpTransport::Http {
                url: http.url.clone(),
                headers: http.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
            },
        ),
        McpServer::Sse(sse) => (
            sse.name.clone(),
            McpTransport::Sse {
                url: sse.url.clone(),
                headers: sse.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
            },
        ),
        // A transport lathe does not advertise (the schema's enum is non-exhaustive).
        _ => {
            tracing::warn!("ignoring an MCP server with a transport lathe does not support");
            return None;
        }
    };
    Some(crate::config::McpServer { name, transport, sandbox: false })
}

fn absolute_dir(path: &std::path::Path, field: &str) -> Result<PathBuf, RpcError> {
    if !path.is_absolute() {
        return Err(RpcError::new(
            INVALID_PARAMS,
            format!("Invalid params: {field} must be an absolute path, got \"{}\"", path.display()),
        ));
    }
    Ok(crate::tools::paths::normalize(path))
}

/// Update kinds that are state rather than conversation: not replayed.
const NOT_REPLAYED: [&str; 5] =
    ["available_commands_update", "current_mode_update", "config_option_update", "session_info_update", "usage_update"];

/// The lines to replay: the logged updates, with consecutive chunks of one
/// message merged, state updates left out, and the last usage figure last.
fn replay_lines(records: &[Record]) -> Vec<Vec<u8>> {
    let mut merged: Vec<Value> = Vec::new();
    let mut last_usage: Option<Value> = None;
    for record in records {
        let Record::Update(notification) = record else { continue };
        let kind = notification["params"]["update"]["sessionUpdate"].as_str().unwrap_or_default();
        if kind == "usage_update" {
            last_usage = Some(notification.clone());
            continue;
        }
        if NOT_REPLAYED.contains(&kind) {
            continue;
        }
        if let Some(previous) = merged.last_mut()
            && mergeable(previous, notification)
            && let Some(text) = notification["params"]["update"]["content"]["text"].as_str()
            && let Some(so_far) = previous["params"]["update"]["content"]["text"].as_str()
        {
            let joined = format!("{so_far}{text}");
            previous["params"]["update"]["content"]["text"] = Value::String(joined);
            continue;
        }
        merged.push(notification.clone());
    }
    merged.extend(last_usage);
    merged.iter().filter_map(|value| serde_json::to_vec(value).ok()).collect()
}

/// Two chunks of the same message, both plain text.
fn mergeable(previous: &Value, next: &Value) -> bool {
    let (a, b) = (&previous["params"]["update"], &next["params"]["update"]);
    let kind = a["sessionUpdate"].as_str().unwrap_or_default();
    matches!(kind, "agent_message_chunk" | "agent_thought_chunk" | "user_message_chunk")
        && a["sessionUpdate"] == b["sessionUpdate"]
        && a["messageId"] == b["messageId"]
        && a["content"]["type"] == "text"
        && b["content"]["type"] == "text"
        && a["content"].get("annotations").is_none()
        && b["content"].get("annotations").is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;

    fn chunk(kind: &str, id: &str, text: &str) -> Record {
        Record::Update(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{
            "sessionUpdate": kind, "messageId": id, "content": {"type":"text","text": text}}}}))
    }

    #[test]
    fn replay_merges_chunks_and_drops_state_updates() {
        let records = vec![
            chunk("user_message_chunk", "u1", "hello"),
            chunk("agent_thought_chunk", "t1", "hm"),
            chunk("agent_message_chunk", "m1", "Hel"),
            chunk("agent_message_chunk", "m1", "lo"),
            Record::Update(
                json!({"method":"session/update","params":{"update":{"sessionUpdate":"usage_update","used":1,"size":9}}}),
            ),
            Record::Update(
                json!({"method":"session/update","params":{"update":{"sessionUpdate":"current_mode_update","currentModeId":"ask"}}}),
            ),
            chunk("agent_message_chunk", "m2", "Next"),
            Record::Message(Message::Tool { tool_call_id: "x".into(), content: "y".into() }),
        ];
        let lines: Vec<Value> = replay_lines(&records).iter().map(|l| serde_json::from_slice(l).unwrap()).collect();
        let texts: Vec<(&str, &str)> = lines
            .iter()
            .map(|l| {
                let u = &l["params"]["update"];
                (u["sessionUpdate"].as_str().unwrap(), u["content"]["text"].as_str().unwrap_or(""))
            })
            .collect();
        assert_eq!(
            texts,
            [
                ("user_message_chunk", "hello"),
                ("agent_thought_chunk", "hm"),
                ("agent_message_chunk", "Hello"),
                ("agent_message_chunk", "Next"),
                ("usage_update", "")
            ]
        );
    }
}
