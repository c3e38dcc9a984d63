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
use crate::present::replay::{Replayer, Restored};
use crate::prompt::ClientPrompt;
use crate::session::{Journal, Session};
use crate::setup::{self, Placement, Start, WorkspaceFiles, workspace_files};
use crate::store::{ListKey, ListPage, SessionMeta, SessionSummary, Store, StoreError, now_rfc3339};

/// Where a session being opened from the store works, and how.
struct Opening {
    placement: Placement,
    system: Option<ClientPrompt>,
    replay: Replay,
}

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
            offers: self.offers(),
        }
    }

    pub(super) fn session(&self, id: &SessionId) -> Result<Arc<Session>, RpcError> {
        lock(&self.sessions).get(&id.0).cloned().ok_or_else(|| session_not_found(id))
    }

    /// `session/new`. The session is saved once its first prompt reaches the
    /// turn loop (a session never prompted leaves nothing on disk); reading
    /// the workspace runs in a task.
    pub(super) fn new_session(self: &Arc<Self>, id: RequestId, params: Value) {
        let parsed = parse_params::<NewSessionRequest>(with_default_mcp_servers(params)).and_then(|request| {
            let system = client_prompt(request.system_prompt.as_ref())?;
            Ok((placement(&request.cwd, &request.additional_directories, &request.mcp_servers)?, system))
        });
        let (placement, system) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let session_id = setup::new_session_id();
        let config = self.config();
        let choices = setup::choices_for(&config, &config.default_model);
        let meta = setup::new_meta(&session_id, &placement, &choices, Mode::Ask);
        // Not on disk until its first prompt reaches the turn loop (see Journal).
        let journal = match &self.store {
            Some(store) => Ok(Journal::lazy(Arc::clone(store), meta)),
            None => Err(self.unsaved_reason.clone()),
        };
        let server = Arc::clone(self);
        self.tasks.spawn(async move {
            let files = server.read_workspace(&placement).await;
            let start = Start { system, ..Start::new(Vec::new(), choices, Mode::Ask, journal.as_ref().ok().cloned()) };
            let session = server.open_session(Arc::clone(&session_id), placement, start, &files);
            let response = NewSessionResponse::new(SessionId::new(Arc::clone(session.id())))
                .modes(options::mode_state(&session))
                .config_options(options::config_options(&server.config(), &session));
            server.outbox.respond_ok(&id, &response);
            server.send_commands(&session, files.commands);
            server.tell_sandbox(&session);
            server.tell_discovered(&session_id);
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
            let system = client_prompt(request.system_prompt.as_ref())?;
            Ok::<_, RpcError>((request.session_id, store, placement, system))
        })();
        let (session_id, store, placement, system) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let key = Arc::clone(&session_id.0);
        lock(&self.loading).insert(Arc::clone(&key), Vec::new());
        // A session open in this process is reopened from disk: whatever it
        // was doing stops. One closed a moment ago may still be winding down:
        // it is waited for the same way.
        let replaced = lock(&self.sessions).remove(&key);
        if let Some(open) = &replaced {
            open.cancel_turns();
            open.close();
        }
        let replaced = replaced.or_else(|| lock(&self.closing).get(&key).cloned());
        let over = LoadOver { loaded: self.loaded.clone(), session_id: key };
        let server = Arc::clone(self);
        self.tasks.spawn(async move {
            let _over = over;
            let opening = Opening { placement, system, replay };
            match server.restore(&session_id, &store, opening, replaced).await {
                Ok((session, commands)) => {
                    let response = LoadSessionResponse::new()
                        .modes(options::mode_state(&session))
                        .config_options(options::config_options(&server.config(), &session));
                    server.outbox.respond_ok(&id, &response);
                    server.send_commands(&session, commands);
                    server.tell_sandbox(&session);
                    server.tell_discovered(session.id());
                    server.send_checkpoints(&session, &server.events(&session), true).await;
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
        opening: Opening,
        replaced: Option<Arc<Session>>,
    ) -> Result<(Arc<Session>, Vec<SlashCommand>), RpcError> {
        let Opening { placement, system, replay } = opening;
        // A session created in this process and not prompted yet is not on
        // disk: it is reopened from what its journal holds.
        let unsaved = replaced.as_ref().and_then(|old| old.journal()).filter(|j| j.pending_meta().is_some()).cloned();
        if let Some(old) = replaced {
            match tokio::time::timeout(WIND_DOWN, old.idle()).await {
                // Its last turn's checkpoint is written after the turn's
                // answer: on disk before the new session reads it.
                Ok(()) => crate::undo::persist(&old).await,
                Err(_) => tracing::warn!(session = %session_id, "the session's last turn did not wind down in time"),
            }
        }
        // Every record queued so far must be on disk before it is read back.
        store.written().wait().await;
        // The parse, the transcript and the replay are all work in proportion
        // to the log: none of it on the async threads. The replay is sent as
        // the log is read, a bounded amount ahead of what the editor has
        // taken, so other sessions' messages never queue behind all of it.
        let reading = {
            let (store, id) = (Arc::clone(store), Arc::clone(&session_id.0));
            let (cwd, user_dir) = (placement.cwd.clone(), self.config().user_dir.clone());
            let outbox = self.outbox.clone();
            let runtime = tokio::runtime::Handle::current();
            let notification_id = session_id.clone();
            let offers = self.offers();
            let extra_agent_dirs = self.config().agent.extra_agent_dirs.clone();
            tokio::task::spawn_blocking(move || {
                let mut unflushed = 0usize;
                let mut send = |line: Vec<u8>| {
                    unflushed += line.len();
                    outbox.send_encoded(line);
                    if unflushed >= REPLAY_AHEAD {
                        unflushed = 0;
                        runtime.block_on(outbox.flush());
                    }
                };
                let mut replayer =
                    Replayer::new(notification_id, (replay == Replay::Yes).then_some(&mut send)).offering(offers);
                let stored = store.read(&id, &mut |record| replayer.record(record));
                let transcript = replayer.finish();
                (stored.map(|meta| (meta, transcript)), workspace_files(&cwd, user_dir.as_deref(), &extra_agent_dirs))
            })
        };
        let (stored, files) = reading
            .await
            .map_err(|err| RpcError::new(super::INTERNAL_ERROR, format!("Cannot load session {session_id}: {err}")))?;
        let unsaved_meta = unsaved.as_ref().and_then(Journal::pending_meta);
        let (mut meta, restored) = match (stored, unsaved_meta) {
            (Err(StoreError::NotFound(_)), Some(meta)) => (meta, Restored::default()),
            (stored, _) => stored.map_err(|err| match err {
                StoreError::NotFound(_) => session_not_found(session_id),
                other => RpcError::new(super::INTERNAL_ERROR, format!("Cannot load session {session_id}: {other}")),
            })?,
        };
        let mut placement = placement;
        placement.created_at.clone_from(&meta.created_at);
        let (choices, mode) = setup::restored_choices(&self.config(), &meta);
        meta.cwd = placement.cwd.clone();
        meta.additional_directories = placement.additional_directories.clone();
        let journal = match unsaved.filter(|journal| journal.pending_meta().is_some()) {
            Some(journal) => journal,
            None => Journal::new(Arc::clone(store), Arc::clone(&session_id.0)),
        };
        journal.save_meta(meta.clone());
        let Restored { messages, waiting, cost } = restored;
        let start = Start { system, waiting, cost, ..Start::new(messages, choices, mode, Some(journal)) };
        let session = self.open_session(Arc::clone(&session_id.0), placement, start, &files);
        session.set_title(meta.title);
        Ok((session, files.commands))
    }

    /// Reads the workspace files of a session being set up, off the async threads.
    async fn read_workspace(&self, placement: &Placement) -> WorkspaceFiles {
        let (cwd, user_dir) = (placement.cwd.clone(), self.config().user_dir.clone());
        let extra_agent_dirs = self.config().agent.extra_agent_dirs.clone();
        tokio::task::spawn_blocking(move || workspace_files(&cwd, user_dir.as_deref(), &extra_agent_dirs))
            .await
            .unwrap_or_else(|err| {
                tracing::warn!(%err, "reading the project's instructions and commands failed");
                WorkspaceFiles::default()
            })
    }

    fn open_session(&self, id: Arc<str>, placement: Placement, start: Start, files: &WorkspaceFiles) -> Arc<Session> {
        let store = self.store.as_ref();
        let session = setup::open_session(&self.config(), store, Arc::clone(&id), placement, start, files, &self.root);
        lock(&self.sessions).insert(id, Arc::clone(&session));
        session
    }

    /// How the session's processes are started: its environment rule and sandbox.
    fn launcher(&self, session: &Session) -> crate::platform::process::Launcher {
        setup::launcher(&self.config(), session)
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
        let Some(journal) = session.journal() else { return };
        journal.save_meta(setup::meta_of(session));
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
        let after = match request.cursor.as_deref().map(parse_cursor) {
            None => None,
            Some(Ok(key)) => Some(key),
            Some(Err(error)) => return self.outbox.respond_err(&id, &error),
        };
        let written = store.written();
        let after_key = after.clone();
        // Sessions open here and not prompted yet are listed too (they are
        // not on disk, and leave nothing there if they never are prompted).
        let unsaved: Vec<SessionMeta> =
            lock(&self.sessions).values().filter_map(|session| session.journal()?.pending_meta()).collect();
        let outbox = self.outbox.clone();
        self.tasks.spawn(async move {
            written.wait().await;
            let cwd = request.cwd.clone();
            let page =
                tokio::task::spawn_blocking(move || store.list(request.cwd.as_deref(), after.as_ref(), PAGE_SIZE))
                    .await
                    .unwrap_or_else(|err| {
                        tracing::warn!(%err, "listing the saved sessions failed");
                        ListPage::default()
                    });
            let page = with_unsaved(page, unsaved, cwd.as_deref(), after_key.as_ref(), PAGE_SIZE);
            outbox.respond_ok(&id, &list_response(page));
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
                let saved = session.journal().is_some_and(|journal| journal.pending_meta().is_none());
                if saved {
                    lock(&self.closing).insert(Arc::clone(session.id()), Arc::clone(&session));
                }
                let server = Arc::clone(self);
                self.tasks.spawn(async move {
                    closed.wait().await;
                    // The last turn's checkpoint is written after its answer:
                    // on disk before the editor can load the session again.
                    // (A turn still winding down writes its own when it ends.)
                    if session.try_conversation().is_some() {
                        crate::undo::persist(&session).await;
                    }
                    outbox.respond_ok(&id, &CloseSessionResponse::new());
                    // A cancelled turn may still queue its last records, which
                    // open the log again: close it once more when it is over,
                    // unless the editor has opened the session again meanwhile
                    // (a close would cut into the new session's journal: its
                    // held text written early and its merging started anew).
                    if tokio::time::timeout(WIND_DOWN, session.idle()).await.is_ok() {
                        crate::undo::persist(&session).await;
                        if !server.is_open(session.id()) {
                            store.close(session.id()).wait().await;
                        }
                    }
                    let mut closing = lock(&server.closing);
                    if closing.get(session.id()).is_some_and(|entry| Arc::ptr_eq(entry, &session)) {
                        closing.remove(session.id());
                    }
                });
            }
            // Closing a saved session that is not open succeeds.
            (None, Some(store)) => {
                let written = store.written();
                self.tasks.spawn(async move {
                    written.wait().await;
                    let session_id = Arc::clone(&request.session_id.0);
                    let saved = tokio::task::spawn_blocking(move || store.contains(&session_id)).await.unwrap_or(false);
                    match saved {
                        true => outbox.respond_ok(&id, &CloseSessionResponse::new()),
                        false => outbox.respond_err(&id, &session_not_found(&request.session_id)),
                    }
                });
            }
            (None, None) => outbox.respond_err(&id, &session_not_found(&request.session_id)),
        }
    }

    /// `session/fork` (unstable): a new session with a copy of the source's
    /// conversation, all of it or up to the message `_meta.lathe.messageId`
    /// names (see [`crate::fork`]), set up in the cwd and roots sent now,
    /// with no replay (the client has the history). The source is only read,
    /// even while a turn runs in it (what it wrote so far is copied).
    pub(super) fn fork_session(self: &Arc<Self>, id: RequestId, params: Value) {
        use agent_client_protocol_schema::v1::{ForkSessionRequest, ForkSessionResponse};
        let parsed = (|| {
            let request: ForkSessionRequest = parse_params(params)?;
            let store = self.store.clone().ok_or_else(|| {
                RpcError::new(RESOURCE_NOT_FOUND, format!("Sessions are not saved: lathe {}", self.unsaved_reason))
            })?;
            let placement = placement(&request.cwd, &request.additional_directories, &request.mcp_servers)?;
            let system = client_prompt(request.system_prompt.as_ref())?;
            let upto = request
                .meta
                .as_ref()
                .and_then(|meta| meta.get("lathe"))
                .and_then(|lathe| lathe.get("messageId"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            Ok::<_, RpcError>((request.session_id, store, Opening { placement, system, replay: Replay::No }, upto))
        })();
        let (source, store, opening, upto) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let server = Arc::clone(self);
        self.tasks.spawn(async move {
            let new_id = setup::new_session_id();
            let forked =
                crate::fork::fork(&store, &source.0, &new_id, upto.as_deref()).await.map_err(|err| match err {
                    crate::fork::ForkError::Store(StoreError::NotFound(_)) => session_not_found(&source),
                    crate::fork::ForkError::NoSuchMessage(_) => {
                        RpcError::new(INVALID_PARAMS, format!("Invalid params: _meta.lathe.messageId: {err}"))
                    }
                    other => RpcError::new(super::INTERNAL_ERROR, format!("Cannot fork session {source}: {other}")),
                });
            if let Err(error) = forked {
                return server.outbox.respond_err(&id, &error);
            }
            let new_session_id = SessionId::new(Arc::clone(&new_id));
            match server.restore(&new_session_id, &store, opening, None).await {
                Ok((session, commands)) => {
                    let response = ForkSessionResponse::new(new_session_id)
                        .modes(options::mode_state(&session))
                        .config_options(options::config_options(&server.config(), &session));
                    server.outbox.respond_ok(&id, &response);
                    server.send_commands(&session, commands);
                    server.tell_sandbox(&session);
                    tracing::info!(session = %new_id, from = %source, "session forked");
                }
                Err(error) => server.outbox.respond_err(&id, &error),
            }
        });
    }

    /// Whether a session is open in this process, or being loaded.
    fn is_open(&self, id: &str) -> bool {
        lock(&self.sessions).contains_key(id) || lock(&self.loading).contains_key(id)
    }

    /// `session/delete`: the session leaves the table at once and its
    /// directory is deleted by the store's writer, after everything queued
    /// before and after its checkpoints stopped writing (a turn still
    /// ending, or the write that follows a turn's answer, would otherwise
    /// bring the folder back).
    pub(super) fn delete_session(self: &Arc<Self>, id: RequestId, params: Value) {
        let request: DeleteSessionRequest = match parse_params(params) {
            Ok(request) => request,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let removed = lock(&self.sessions).remove(&request.session_id.0);
        let removed = removed.or_else(|| lock(&self.closing).remove(&request.session_id.0));
        let checkpoints = removed.and_then(|session| {
            session.cancel_turns();
            session.close();
            session.checkpoints().cloned()
        });
        let Some(store) = self.store.clone() else {
            return self.outbox.respond_ok(&id, &DeleteSessionResponse::new());
        };
        let outbox = self.outbox.clone();
        self.tasks.spawn(async move {
            if let Some(checkpoints) = checkpoints {
                crate::undo::blocking(&checkpoints, crate::checkpoint::Checkpoints::discard).await;
            }
            let deleted = store.delete(&request.session_id.0);
            let response = deleted.await.map(|()| DeleteSessionResponse::new()).map_err(|err| {
                RpcError::new(super::INTERNAL_ERROR, format!("Cannot delete session {}: {err}", request.session_id))
            });
            outbox.respond(&id, response);
        });
    }
}

/// A `session/list` page in ACP's shape; `nextCursor` names the last
/// session shown, so a page starts where the last one ended even when
/// sessions change in between.
fn list_response(page: ListPage) -> ListSessionsResponse {
    let sessions: Vec<SessionInfo> = page
        .sessions
        .into_iter()
        .map(|summary| {
            SessionInfo::new(SessionId::new(summary.session_id), summary.cwd)
                .additional_directories(summary.additional_directories)
                .title(summary.title)
                .updated_at(Some(summary.updated_at))
        })
        .collect();
    let mut response = ListSessionsResponse::new(sessions);
    if let Some(next) = page.next {
        response = response.next_cursor(format!("{}/{}", next.updated_at, next.session_id));
    }
    response
}

/// `page` with the sessions open in this process and not saved yet
/// (`unsaved`) that fall in its place of the list order: so a session just
/// created is listed like a saved one, and paging stays whole.
fn with_unsaved(
    page: ListPage,
    unsaved: Vec<SessionMeta>,
    cwd: Option<&std::path::Path>,
    after: Option<&ListKey>,
    limit: usize,
) -> ListPage {
    fn key(summary: &SessionSummary) -> (std::cmp::Reverse<&str>, &str) {
        (std::cmp::Reverse(summary.updated_at.as_str()), summary.session_id.as_str())
    }
    let after = after.map(|k| (std::cmp::Reverse(k.updated_at.as_str()), k.session_id.as_str()));
    let next = page.next.as_ref().map(|k| (std::cmp::Reverse(k.updated_at.as_str()), k.session_id.as_str()));
    let mut extra: Vec<SessionSummary> = unsaved
        .into_iter()
        .filter(|meta| cwd.is_none_or(|cwd| meta.cwd == cwd))
        .map(|meta| SessionSummary {
            session_id: meta.session_id,
            cwd: meta.cwd,
            additional_directories: meta.additional_directories,
            title: meta.title,
            updated_at: meta.updated_at,
        })
        .filter(|summary| {
            after.is_none_or(|after| key(summary) > after) && next.is_none_or(|next| key(summary) <= next)
        })
        .collect();
    if extra.is_empty() {
        return page;
    }
    let more_saved = page.next.is_some();
    let mut sessions = page.sessions;
    sessions.append(&mut extra);
    sessions.sort_by(|a, b| key(a).cmp(&key(b)));
    let truncated = sessions.len() > limit;
    sessions.truncate(limit);
    let next = (truncated || more_saved)
        .then(|| sessions.last())
        .flatten()
        .map(|last| ListKey { updated_at: last.updated_at.clone(), session_id: last.session_id.clone() });
    ListPage { sessions, next }
}

/// The place a `nextCursor` names.
fn parse_cursor(cursor: &str) -> Result<ListKey, RpcError> {
    cursor
        .rsplit_once('/')
        .filter(|(updated_at, id)| !updated_at.is_empty() && !id.is_empty())
        .map(|(updated_at, id)| ListKey { updated_at: updated_at.to_owned(), session_id: id.to_owned() })
        .ok_or_else(|| {
            RpcError::new(INVALID_PARAMS, format!("Invalid params: cursor: \"{cursor}\" is not a cursor lathe gave"))
        })
}

pub(super) fn session_not_found(id: &SessionId) -> RpcError {
    RpcError::new(RESOURCE_NOT_FOUND, format!("Session not found: {id}")).with_data(json!({ "sessionId": id }))
}

/// The client's `systemPrompt`, checked: lathe advertises `append` and
/// `override` and takes text blocks; anything else fails the request, as
/// the spec requires (`-32602`), rather than setting the session up without it.
pub(super) fn client_prompt(
    prompt: Option<&agent_client_protocol_schema::v1::SystemPrompt>,
) -> Result<Option<ClientPrompt>, RpcError> {
    use agent_client_protocol_schema::v1::SystemPromptMode;
    let Some(prompt) = prompt else { return Ok(None) };
    let invalid = |why: String| RpcError::new(INVALID_PARAMS, format!("Invalid params: systemPrompt: {why}"));
    let replace = match &prompt.mode {
        SystemPromptMode::Append => false,
        SystemPromptMode::Override => true,
        other => return Err(invalid(format!("mode {other:?} is not one lathe supports (append, override)"))),
    };
    let mut texts = Vec::new();
    for (n, block) in prompt.content.iter().enumerate() {
        match block {
            agent_client_protocol_schema::v1::ContentBlock::Text(text) => texts.push(text.text.as_str()),
            _ => return Err(invalid(format!("content[{n}] is not a text block, the only kind lathe takes"))),
        }
    }
    let text = texts.join("\n\n");
    if text.trim().is_empty() {
        return Err(invalid("the content is empty".to_owned()));
    }
    Ok(Some(ClientPrompt { replace, text }))
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
    let server = crate::config::McpServer { name, transport, sandbox: false };
    // Its env and headers are secrets from now on, whatever their names.
    crate::redact::learn(crate::redact::server_secrets(&server));
    Some(server)
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

/// How far the replay may run ahead of what the editor has read, in bytes.
const REPLAY_AHEAD: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str, updated_at: &str, cwd: &str) -> SessionSummary {
        SessionSummary {
            session_id: id.to_owned(),
            cwd: PathBuf::from(cwd),
            additional_directories: Vec::new(),
            title: None,
            updated_at: updated_at.to_owned(),
        }
    }

    fn meta(id: &str, updated_at: &str, cwd: &str) -> SessionMeta {
        SessionMeta {
            session_id: id.to_owned(),
            cwd: PathBuf::from(cwd),
            additional_directories: Vec::new(),
            title: None,
            created_at: updated_at.to_owned(),
            updated_at: updated_at.to_owned(),
            model: None,
            mode: None,
            thought_level: None,
        }
    }

    /// Saved sessions in the index's order and paging (most recent first, then id).
    fn saved_page(saved: &[SessionSummary], after: Option<&ListKey>, limit: usize) -> ListPage {
        let key = |s: &SessionSummary| (std::cmp::Reverse(s.updated_at.clone()), s.session_id.clone());
        let mut rest: Vec<SessionSummary> = saved
            .iter()
            .filter(|s| after.is_none_or(|a| key(s) > (std::cmp::Reverse(a.updated_at.clone()), a.session_id.clone())))
            .cloned()
            .collect();
        rest.sort_by_key(key);
        let more = rest.len() > limit;
        rest.truncate(limit);
        let next = more
            .then(|| rest.last())
            .flatten()
            .map(|last| ListKey { updated_at: last.updated_at.clone(), session_id: last.session_id.clone() });
        ListPage { sessions: rest, next }
    }

    /// Sessions open and not saved yet join the pages in list order: paging
    /// through everything shows each session once, in order, pages bounded.
    #[test]
    fn unsaved_sessions_join_the_pages_in_order() {
        let saved: Vec<SessionSummary> = (0..7)
            .map(|i| summary(&format!("sess_s{i}"), &format!("2026-01-01T00:{:02}:00Z", 50 - i * 7), "/p"))
            .collect();
        let unsaved: Vec<SessionMeta> = (0..6)
            .map(|i| meta(&format!("sess_u{i}"), &format!("2026-01-01T00:{:02}:00Z", 53 - i * 9), "/p"))
            .chain([meta("sess_elsewhere", "2026-01-01T00:59:00Z", "/q")])
            .collect();
        for limit in [1, 2, 3, 5, 50] {
            let mut shown = Vec::new();
            let mut after: Option<ListKey> = None;
            loop {
                let page = saved_page(&saved, after.as_ref(), limit);
                let page = with_unsaved(page, unsaved.clone(), Some(std::path::Path::new("/p")), after.as_ref(), limit);
                assert!(page.sessions.len() <= limit);
                shown.extend(page.sessions.iter().map(|s| (s.updated_at.clone(), s.session_id.clone())));
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            let mut expected: Vec<(String, String)> = saved
                .iter()
                .map(|s| (s.updated_at.clone(), s.session_id.clone()))
                .chain(
                    unsaved
                        .iter()
                        .filter(|m| m.cwd == std::path::Path::new("/p"))
                        .map(|m| (m.updated_at.clone(), m.session_id.clone())),
                )
                .collect();
            expected.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            assert_eq!(shown, expected, "pages of {limit}");
        }
    }
}
