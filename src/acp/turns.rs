//! `session/prompt`: queueing, slash commands, titles, and running the turn.
//!
//! A prompt that arrives while the session is busy is queued behind the
//! running turn and runs next; it answers `cancelled` if it is cancelled
//! (by `session/cancel` or `$/cancel_request`) while it waits. The turn is
//! registered before its task starts, so a cancel that follows the prompt
//! immediately always reaches it.

use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, PromptRequest, PromptResponse, SessionId, SessionInfoUpdate, SessionUpdate,
    StopReason as AcpStopReason, Usage,
};
use serde_json::Value;

use super::client::{ClientApprover, ClientHost};
use super::updates::SessionEvents;
use super::{INVALID_PARAMS, RequestId, RpcError, Server, lock, options, parse_params, prompt};
use crate::agent::{AgentEvent, EventSink, StopReason, Turn, TurnError, Workspace};
use crate::commands::CommandKind;
use crate::model::UserPart;
use crate::session::{QueuedTurn, Session, TurnGuard};
use crate::setup::{self, Request, derive_title};
use crate::store::now_rfc3339;
use crate::undo::TurnRecording;

/// Who asked for a turn.
pub(super) enum Origin {
    /// A `session/prompt`, answered when the turn ends.
    Prompt(RequestId),
    /// Steering messages that found no turn to join (`_session/steering`
    /// while idle, or messages a turn ended before reading): no request
    /// waits for its end.
    Steer,
}

impl Server {
    pub(super) fn prompt(self: &Arc<Self>, id: RequestId, params: Value) {
        let started = (|| {
            let request: PromptRequest = parse_params(params)?;
            let session = self.session(&request.session_id)?;
            let parts = self.user_parts(&session, request.prompt)?;
            Ok::<_, RpcError>((session, parts))
        })();
        let (session, parts) = match started {
            Ok(started) => started,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let queued = session.enqueue_turn();
        self.spawn_turn(session, queued, parts, Origin::Prompt(id), None);
    }

    /// A prompt's content as the user message, for the session's model.
    pub(super) fn user_parts(&self, session: &Session, blocks: Vec<ContentBlock>) -> Result<Vec<UserPart>, RpcError> {
        let model_key = session.choices().model_key;
        let config = self.config();
        let model = config.models.get(&model_key);
        let vision = model.is_some_and(|m| m.vision);
        let model_name = model.map_or(model_key.as_str(), |m| m.model.as_str());
        prompt::to_user_parts(blocks, vision, model_name)
            .map_err(|err| RpcError::new(INVALID_PARAMS, format!("Invalid params: {err}")))
    }

    /// Runs a queued turn in a task of its own: answers the prompt that
    /// asked for it (if one did), and tells `started` whether it started.
    /// Steering messages the turn ended before reading start a turn of
    /// their own, unless it was cancelled (then they join the next prompt).
    pub(super) fn spawn_turn(
        self: &Arc<Self>,
        session: Arc<Session>,
        queued: QueuedTurn,
        parts: Vec<UserPart>,
        origin: Origin,
        started: Option<tokio::sync::oneshot::Sender<bool>>,
    ) {
        let request_key = match &origin {
            Origin::Prompt(id) => {
                let key = id.to_string();
                lock(&self.cancellable).insert(key.clone(), queued.token().clone());
                Some(key)
            }
            Origin::Steer => None,
        };
        let server = Arc::clone(self);
        self.tasks.spawn(async move {
            let token = queued.token().clone();
            let echo = matches!(origin, Origin::Steer);
            let (response, usage, next) = match queued.start().await {
                Some(mut turn) => {
                    if let Some(started) = started {
                        let _ = started.send(true);
                    }
                    let response = server.run_prompt(&mut turn, parts, echo).await;
                    let usage = turn.conversation().turn_usage.take();
                    (response, usage, turn.end())
                }
                None => {
                    if let Some(started) = started {
                        let _ = started.send(false);
                    }
                    (Ok(StopReason::Cancelled), None, None)
                }
            };
            let usage = usage.map(|u| Usage::new(u.input_tokens + u.output_tokens, u.input_tokens, u.output_tokens));
            // ACP: once the user cancelled, the answer is `cancelled`, whatever
            // the aborted operations returned.
            let response = match response {
                _ if token.is_cancelled() => Ok(PromptResponse::new(AcpStopReason::Cancelled).usage(usage)),
                Ok(stop) => Ok(PromptResponse::new(super::to_acp_stop_reason(stop)).usage(usage)),
                Err(err) => Err(super::turn_error_to_rpc(&err)),
            };
            if let Some(key) = &request_key {
                lock(&server.cancellable).remove(key);
            }
            // Queued before the answer: whatever the client sends next (a
            // close, a list) reaches the store's writer after it.
            server.save_meta(&session);
            match origin {
                Origin::Prompt(id) => server.outbox.respond(&id, response),
                Origin::Steer => {
                    if let Err(error) = response {
                        tracing::warn!(session = %session.id(), message = %error.message, "a turn started by steering failed");
                    }
                }
            }
            // Steering messages the turn ended before reading: the next
            // turn reads them first thing (see `TurnGuard::end`).
            if let Some(next) = next {
                server.spawn_turn(Arc::clone(&session), next, Vec::new(), Origin::Steer, None);
            }
            // After the answer: the disk must not hold up a cancel's
            // `cancelled`. Still inside the task, so shutdown waits for it.
            crate::undo::persist(&session).await;
        });
    }

    /// Runs one prompt on a session whose conversation this turn holds.
    /// `echo` sends what the user wrote as `user_message_chunk`s too (a
    /// prompt the client did not send as a prompt, so has not shown).
    async fn run_prompt(
        &self,
        turn: &mut TurnGuard,
        parts: Vec<UserPart>,
        echo: bool,
    ) -> Result<StopReason, TurnError> {
        let session = Arc::clone(turn.session());
        let events = self.events(&session);
        // What the user typed is part of what they saw: record it for replay.
        for part in &parts {
            if let UserPart::Text { text } = part {
                let update = SessionUpdate::UserMessageChunk(ContentChunk::new(ContentBlock::from(text.as_str())));
                if echo { events.send(update) } else { events.record_only(update) }
            }
        }
        if session.title().is_none()
            && let Some(title) = derive_title(&parts)
        {
            session.set_title(Some(title.clone()));
            self.save_meta(&session);
            let shown = super::updates::shown(&title, super::updates::Lines::One).into_owned();
            let info = SessionInfoUpdate::new().title(shown).updated_at(now_rfc3339());
            events.send_unrecorded(SessionUpdate::SessionInfoUpdate(info));
        }
        match setup::classify(&session.setup().cwd, self.config().user_dir.as_deref(), session.skills(), parts).await {
            Request::Turn(parts) => self.run_turn(turn, &events, parts).await,
            Request::Builtin(kind, arguments) => self.run_builtin(turn, &events, kind, &arguments).await,
            Request::Reply(text) => {
                let message_id: Arc<str> = Arc::from(format!("cmd_{}", uuid::Uuid::new_v4().simple()));
                events.emit(AgentEvent::AgentText { message_id, text });
                Ok(StopReason::EndTurn)
            }
        }
    }

    async fn run_turn(
        &self,
        turn: &mut TurnGuard,
        events: &SessionEvents,
        parts: Vec<UserPart>,
    ) -> Result<StopReason, TurnError> {
        let session = Arc::clone(turn.session());
        let token = turn.token().clone();
        let config = self.config();
        let choices = session.choices();
        let client = self.model_client(&choices.model_key, choices.thought_level.as_deref())?;
        let session_id = SessionId::new(Arc::clone(session.id()));
        let capabilities = self.client_capabilities.get().cloned().unwrap_or_default();
        let roots = session.roots();
        let launcher = crate::platform::process::Launcher::for_session(&config.children, &config.sandbox, &roots);
        lock(session.policy()).follow_sandbox_of(&launcher);
        let host = ClientHost::new(self.outbox.clone(), session_id.clone(), &capabilities, launcher);
        let form = capabilities.elicitation.as_ref().is_some_and(|e| e.form.is_some());
        let subagents = capabilities.subagents.is_some();
        let approver = ClientApprover { outbox: self.outbox.clone(), session_id, form, subagents };
        // A mode the turn switches to (a plan approved) reaches the editor
        // as it would from `/mode`, with the config options.
        let events = &TurnEvents { events, server: self, session: &session };
        let limits = setup::tool_limits(&config);
        let external = session.external_tools();
        // The turn's changes to files are checkpointed (`/undo`) when the session keeps checkpoints.
        let recording = TurnRecording::begin(&session, turn.conversation(), &parts).await;
        if let Some(notice) = crate::undo::notice(&session).await {
            self.warnings.warn(session.id(), "Checkpoints are off for this session", &notice);
        }
        let resumed = !turn.conversation().messages().is_empty();
        let standing = setup::standing(&config, &session, resumed).await;
        for (title, text) in &standing.notices {
            self.warnings.warn(session.id(), title, text);
        }
        let recorder = recording.as_ref().map(|recording| recording.host(&host));
        let host: &dyn crate::tools::Host = match &recorder {
            Some(recorder) => recorder,
            None => &host,
        };
        let runner = Turn {
            client: &client,
            settings: &config.agent,
            events,
            cancel: &token,
            workspace: Workspace {
                cwd: &session.setup().cwd,
                roots: &roots,
                host,
                approver: &approver,
                policy: session.policy(),
                limits: &limits,
                seen: session.file_versions(),
            },
            tools: crate::tools::definitions_with(config.tools.fetch),
            external: external.as_deref(),
            context: &config.context,
            steers: Some(session.steers()),
            agents: session.agents(),
            rules: Some(&standing.rules),
            hooks: Some(&standing.hooks),
        };
        let result = runner.run(turn.conversation(), parts).await;
        if let Some(recording) = recording
            && recording.finish(&session, turn.conversation()).await
        {
            self.send_checkpoints(&session, events.events, false).await;
        }
        result
    }

    /// `/compact`, `/clear`, `/model`, `/mode`: answered by lathe itself.
    async fn run_builtin(
        &self,
        turn: &mut TurnGuard,
        events: &SessionEvents,
        kind: CommandKind,
        arguments: &str,
    ) -> Result<StopReason, TurnError> {
        let session = Arc::clone(turn.session());
        let reply = match kind {
            CommandKind::Clear => setup::clear(turn),
            CommandKind::Compact => {
                let choices = session.choices();
                let client = self.model_client(&choices.model_key, choices.thought_level.as_deref())?;
                match setup::compact(turn, &client, events, &self.config()).await? {
                    Some(reply) => reply,
                    None => return Ok(StopReason::Cancelled),
                }
            }
            CommandKind::Model => self.model_command(&session, arguments),
            CommandKind::Mode => self.mode_command(&session, arguments),
            CommandKind::Undo => self.undo_command(turn, events, arguments).await,
            CommandKind::Redo => self.redo_command(turn, events).await,
            CommandKind::Checkpoints => crate::undo::list(&session).await,
            CommandKind::Permissions => setup::permissions_list(&self.config(), &session).await,
            CommandKind::Skills => session.skills().summary(),
            CommandKind::Init | CommandKind::Custom { .. } | CommandKind::Skill => {
                // These are turned into ordinary turns by `classify`.
                return Ok(StopReason::EndTurn);
            }
        };
        let message_id: Arc<str> = Arc::from(format!("cmd_{}", uuid::Uuid::new_v4().simple()));
        events.emit(AgentEvent::AgentText { message_id, text: reply });
        Ok(StopReason::EndTurn)
    }

    fn model_command(&self, session: &crate::session::Session, arguments: &str) -> String {
        if arguments.is_empty() {
            return setup::model_list(&self.config(), &session.choices().model_key);
        }
        match self.switch_model(session, arguments) {
            Ok(name) => {
                // The agent changed an option: tell the editor the complete state.
                self.events(session).send_unrecorded(SessionUpdate::ConfigOptionUpdate(
                    agent_client_protocol_schema::v1::ConfigOptionUpdate::new(options::config_options(
                        &self.config(),
                        session,
                    )),
                ));
                format!("Switched to {name}.")
            }
            Err(error) => error.message.trim_start_matches("Invalid params: ").to_owned(),
        }
    }

    fn mode_command(&self, session: &crate::session::Session, arguments: &str) -> String {
        if arguments.is_empty() {
            return setup::mode_list(session.mode());
        }
        match setup::parse_mode(arguments) {
            Ok(mode) => {
                self.switch_mode(session, mode, true);
                setup::mode_switched(mode)
            }
            Err(message) => format!("{message}."),
        }
    }
}

/// A turn's events on their way to the editor: a mode the turn switched to
/// also updates the config options and the session's metadata.
struct TurnEvents<'a> {
    events: &'a SessionEvents,
    server: &'a Server,
    session: &'a Session,
}

impl EventSink for TurnEvents<'_> {
    fn emit(&self, event: AgentEvent) {
        match event {
            AgentEvent::ModeChanged(mode) => self.server.switch_mode(self.session, mode, true),
            other => self.events.emit(other),
        }
    }
}
