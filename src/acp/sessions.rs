//! Session lifecycle over ACP: `session/new`, `session/load` (with replay),
//! `session/resume`, `session/list`, `session/close` and `session/delete`,
//! plus what every session gets once set up (its slash commands).
//!
//! Replay sends what the user saw, from the session's log, as
//! `session/update` notifications before the `session/load` response:
//! consecutive chunks of one message are merged into one chunk, and state
//! updates that are not conversation (commands, modes, options, titles) are
//! not replayed: fresh ones follow the response.

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    AvailableCommand, AvailableCommandInput, AvailableCommandsUpdate, CloseSessionRequest, CloseSessionResponse,
    DeleteSessionRequest, DeleteSessionResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, NewSessionRequest, NewSessionResponse, SessionId, SessionInfo, SessionUpdate,
    UnstructuredCommandInput,
};
use serde_json::{Value, json};

use super::updates::SessionEvents;
use super::{INVALID_PARAMS, RESOURCE_NOT_FOUND, RequestId, RpcError, Server, lock, options, parse_params};
use crate::commands;
use crate::model::Message;
use crate::permission::Mode;
use crate::prompt::{Environment, project_instructions, system_prompt};
use crate::session::{Choices, Conversation, Journal, Session, SessionSetup};
use crate::store::{Record, SessionMeta, StoreError, now_rfc3339};

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

/// The parts of new/load/resume params that set a session up.
struct Placement {
    cwd: PathBuf,
    additional_directories: Vec<PathBuf>,
    mcp_servers: Vec<Value>,
    /// The same servers, in the shape the `mcp` module connects to.
    mcp: Vec<crate::config::McpServer>,
    /// When the session was first created: now for a new one.
    created_at: String,
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

    pub(super) fn new_session(&self, id: &RequestId, params: Value) {
        let result = (|| {
            let request: NewSessionRequest = parse_params(with_default_mcp_servers(params))?;
            let placement = placement(&request.cwd, &request.additional_directories, &request.mcp_servers)?;
            let session_id: Arc<str> = Arc::from(format!("sess_{}", uuid::Uuid::new_v4().simple()));
            let choices = options::choices_for(&self.config, &self.config.default_model);
            let meta = SessionMeta {
                session_id: session_id.to_string(),
                cwd: placement.cwd.clone(),
                additional_directories: placement.additional_directories.clone(),
                title: None,
                created_at: placement.created_at.clone(),
                updated_at: now_rfc3339(),
                model: Some(choices.model_key.clone()),
                mode: Some(Mode::Ask.id().to_owned()),
                thought_level: choices.thought_level.clone(),
            };
            let journal = self.store.as_ref().and_then(|store| match store.create(&meta) {
                Ok(()) => Some(Journal::new(Arc::clone(store), Arc::clone(&session_id))),
                Err(err) => {
                    tracing::warn!(%err, "this session will not be saved");
                    None
                }
            });
            let session = self.open_session(session_id, placement, Vec::new(), choices, Mode::Ask, journal);
            Ok::<_, RpcError>(session)
        })();
        match result {
            Ok(session) => {
                let response = NewSessionResponse::new(SessionId::new(Arc::clone(session.id())))
                    .modes(options::mode_state(&session))
                    .config_options(options::config_options(&self.config, &session));
                self.outbox.respond_ok(id, &response);
                self.send_commands(&session);
                tracing::info!(session = %session.id(), "session created");
            }
            Err(error) => self.outbox.respond_err(id, &error),
        }
    }

    /// `session/load` and `session/resume`: the stored session, with the
    /// cwd and roots the client sends now (never the stored ones).
    pub(super) fn load_session(&self, id: &RequestId, params: Value, replay: Replay) {
        let result = (|| {
            let request: LoadSessionRequest = parse_params(with_default_mcp_servers(params))?;
            let store = self.store.as_ref().ok_or_else(|| {
                RpcError::new(RESOURCE_NOT_FOUND, "Sessions are not saved: lathe has no usable data directory")
            })?;
            let placement = placement(&request.cwd, &request.additional_directories, &request.mcp_servers)?;
            let session_id = request.session_id.0.clone();
            // A session open in this process is reopened from disk: whatever it was doing stops.
            if let Some(open) = lock(&self.sessions).remove(&session_id) {
                open.cancel_turns();
                open.close();
                store.flush(std::time::Duration::from_secs(2));
            }
            let stored = store.load(&session_id).map_err(|err| match err {
                StoreError::NotFound(_) => session_not_found(&request.session_id),
                other => RpcError::new(super::INTERNAL_ERROR, format!("Cannot load session {session_id}: {other}")),
            })?;
            let mut meta = stored.meta.clone();
            let mut placement = placement;
            placement.created_at.clone_from(&meta.created_at);
            let model_key = meta
                .model
                .clone()
                .filter(|key| self.config.models.contains_key(key))
                .unwrap_or_else(|| self.config.default_model.clone());
            let mut choices = options::choices_for(&self.config, &model_key);
            if choices.thought_level.is_some() && meta.thought_level.is_some() {
                choices.thought_level = meta.thought_level.clone();
            }
            let mode = meta.mode.as_deref().and_then(Mode::from_id).unwrap_or(Mode::Ask);
            meta.cwd = placement.cwd.clone();
            meta.additional_directories = placement.additional_directories.clone();
            if let Err(err) = store.save_meta(&meta) {
                tracing::warn!(%err, "cannot update the stored session");
            }
            let journal = Journal::new(Arc::clone(store), Arc::clone(&session_id));
            let session = self.open_session(
                Arc::clone(&session_id),
                placement,
                recover_transcript(&stored.records),
                choices,
                mode,
                Some(journal),
            );
            session.set_title(meta.title.clone());
            if replay == Replay::Yes {
                for line in replay_lines(&stored.records) {
                    self.outbox.send_encoded(line);
                }
            }
            Ok::<_, RpcError>(session)
        })();
        match result {
            Ok(session) => {
                let response = LoadSessionResponse::new()
                    .modes(options::mode_state(&session))
                    .config_options(options::config_options(&self.config, &session));
                self.outbox.respond_ok(id, &response);
                self.send_commands(&session);
            }
            Err(error) => self.outbox.respond_err(id, &error),
        }
    }

    fn open_session(
        &self,
        id: Arc<str>,
        placement: Placement,
        messages: Vec<Message>,
        choices: Choices,
        mode: Mode,
        journal: Option<Journal>,
    ) -> Arc<Session> {
        let instructions = project_instructions(&placement.cwd, self.config.user_dir.as_deref());
        let environment = Environment { cwd: &placement.cwd, os: std::env::consts::OS, date: &Environment::today() };
        let conversation = Conversation::new(system_prompt(&environment, &instructions), messages, journal);
        let setup = SessionSetup {
            cwd: placement.cwd,
            additional_directories: placement.additional_directories,
            mcp_servers: placement.mcp_servers,
            created_at: placement.created_at,
        };
        let session = Arc::new(Session::new(Arc::clone(&id), setup, conversation, choices, mode, &self.root));
        // Connected in the background: the response does not wait for them.
        let servers = crate::mcp::merge(placement.mcp, &self.config.mcp_servers);
        if !servers.is_empty() {
            let hub = crate::mcp::McpHub::start(
                servers,
                self.config.mcp,
                (session.setup().cwd.clone(), crate::child::Launcher::new(&self.config.children)),
                crate::tools::definitions(),
                session.lifetime(),
            );
            session.set_external_tools(hub);
        }
        lock(&self.sessions).insert(id, Arc::clone(&session));
        session
    }

    /// `available_commands_update`: the built-in and the user's slash commands.
    pub(super) fn send_commands(&self, session: &Session) {
        let available = commands::available(&session.setup().cwd, self.config.user_dir.as_deref())
            .into_iter()
            .map(|command| {
                let mut available = AvailableCommand::new(command.name, command.description);
                if let Some(hint) = command.hint {
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
        let choices = session.choices();
        let created_at = session.setup().created_at.clone();
        let meta = SessionMeta {
            session_id: session.id().to_string(),
            cwd: session.setup().cwd.clone(),
            additional_directories: session.setup().additional_directories.clone(),
            title: session.title(),
            created_at,
            updated_at: now_rfc3339(),
            model: Some(choices.model_key),
            mode: Some(session.mode().id().to_owned()),
            thought_level: choices.thought_level,
        };
        store.save_meta_later(meta);
    }

    pub(super) fn list_sessions(&self, params: Value) -> Result<ListSessionsResponse, RpcError> {
        let request: ListSessionsRequest = parse_params(params)?;
        let Some(store) = &self.store else { return Ok(ListSessionsResponse::new(Vec::new())) };
        let mut sessions = store.list();
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

    pub(super) fn close_session(&self, params: Value) -> Result<CloseSessionResponse, RpcError> {
        let request: CloseSessionRequest = parse_params(params)?;
        match lock(&self.sessions).remove(&request.session_id.0) {
            Some(session) => {
                // As if session/cancel had been called, then everything is freed.
                session.cancel_turns();
                session.close();
                Ok(CloseSessionResponse::new())
            }
            None if self.store.as_ref().is_some_and(|s| s.load_meta(&request.session_id.0).is_ok()) => {
                Ok(CloseSessionResponse::new())
            }
            None => Err(session_not_found(&request.session_id)),
        }
    }

    pub(super) fn delete_session(&self, params: Value) -> Result<DeleteSessionResponse, RpcError> {
        let request: DeleteSessionRequest = parse_params(params)?;
        if let Some(session) = lock(&self.sessions).remove(&request.session_id.0) {
            session.cancel_turns();
            session.close();
        }
        if let Some(store) = &self.store {
            store.delete(&request.session_id.0).map_err(|err| {
                RpcError::new(super::INTERNAL_ERROR, format!("Cannot delete session {}: {err}", request.session_id))
            })?;
        }
        Ok(DeleteSessionResponse::new())
    }
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
    Some(crate::config::McpServer { name, transport })
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
    Ok(crate::tools::paths::normalize(path))
}

/// The model transcript a log describes, repaired if the process died mid-turn.
fn recover_transcript(records: &[Record]) -> Vec<Message> {
    let mut messages = Vec::new();
    // Answer text the user saw after the last transcript change.
    let mut streamed = String::new();
    for record in records {
        match record {
            Record::Message(message) => {
                messages.push(message.clone());
                streamed.clear();
            }
            Record::Reset(replacement) => {
                messages.clone_from(replacement);
                streamed.clear();
            }
            Record::Update(notification) => {
                let update = &notification["params"]["update"];
                if update["sessionUpdate"] == "agent_message_chunk"
                    && let Some(text) = update["content"]["text"].as_str()
                {
                    streamed.push_str(text);
                }
            }
        }
    }
    crate::agent::repair_transcript(&mut messages, streamed);
    messages
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
