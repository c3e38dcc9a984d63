//! lathe from a terminal: `lathe exec` (one turn, for scripts and CI) and
//! `lathe chat` (an interactive session). A second implementation of the
//! engine's seams beside the editor's (`acp`): [`EventSink`] (the screen, or JSON
//! lines), [`crate::permission::Approver`] (a one-key question on the
//! terminal) and [`crate::tools::Host`] (the local disk and local
//! processes). It never goes through JSON-RPC.
//!
//! Sessions live in the same store as the editor's, written the same way:
//! every update is recorded as the `session/update` line an editor would have
//! been sent (built by [`crate::present::record`]), and the transcript through
//! the session's journal, so a session started here loads in an editor and
//! the reverse. What the two front ends share to set a session up is in
//! [`crate::setup`]; turns are checkpointed, and `/undo`, `/redo` and
//! `/checkpoints` run, through [`crate::undo`], as for an editor (the
//! terminal shows the files an undo or redo touched as lines on stderr).
//!
//! This module writes to stdout and stderr itself (through `io::Write`, not
//! the print macros): in `exec`, stdout carries only the answer (or the JSON
//! events); everything else goes to stderr.

mod approve;
mod chat;
mod events;
mod exec;
mod style;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentEvent, StopReason, Turn, TurnError, Workspace};
use crate::commands::CommandKind;
use crate::config::Config;
use crate::model::{ModelClient, ModelError, UserPart};
use crate::permission::{Approver, Mode};
use crate::platform::authority::Target;
use crate::session::{Journal, Session, TurnGuard};
use crate::setup::{self, Placement, Request, Start};
use crate::store::{FailureSink, Store, StoreError};
use crate::sync::lock;
use crate::tools::local::LocalHost;
use crate::tools::{Host, HostError, Launcher, Terminals};
use crate::undo::TurnRecording;

pub use chat::{ChatArgs, chat};
pub use events::TermEvents;
pub use exec::{ExecArgs, exec};

/// Exit codes of `lathe exec` and `lathe chat`.
pub mod exit {
    /// The turn ended normally.
    pub const OK: u8 = 0;
    /// The turn failed (the message is on stderr).
    pub const ERROR: u8 = 1;
    /// A bad command line or configuration.
    pub const USAGE: u8 = 2;
    /// The turn stopped short: the model's output limit, the turn's request
    /// limit, or a refusal.
    pub const STOPPED_SHORT: u8 = 3;
    /// The user cancelled (Ctrl-C).
    pub const CANCELLED: u8 = 130;
}

/// Which session to work in, from the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct SessionArgs {
    /// Go on with the most recent session started in this directory.
    #[arg(long = "continue", short = 'c', conflicts_with = "resume")]
    pub continue_last: bool,
    /// Go on with the session with this id (from an editor, or `lathe exec`).
    #[arg(long, value_name = "ID")]
    pub resume: Option<String>,
    /// The configured model to use (a key of [models] in the config).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// What lathe may do without asking: read-only, ask, accept-edits, auto
    /// or full-auto. Default: ask on a terminal, read-only otherwise.
    #[arg(long, value_name = "MODE", value_parser = setup::parse_mode)]
    pub mode: Option<Mode>,
}

/// Why a session could not be opened; each is a usage error (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `--continue` found nothing.
    #[error("no session was started in {0} yet; drop --continue to start one")]
    NothingToContinue(String),
    /// `--resume` or `--continue` without a store.
    #[error("sessions are not saved ({0}), so none can be resumed")]
    NoStore(String),
    /// The store said no.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// `--model` names no configured model.
    #[error("no model named \"{0}\" is configured (configured: {1})")]
    UnknownModel(String, String),
    /// The working directory is unusable.
    #[error("cannot use the current directory: {0}")]
    Cwd(std::io::Error),
}

/// A configured model's key and the reasoning effort its requests carry.
type ModelKey = (String, Option<String>);

/// The engine as the terminal uses it: the config, the store, model clients.
pub struct Engine {
    config: Arc<Config>,
    store: Result<Arc<Store>, String>,
    root: CancellationToken,
    models: Mutex<HashMap<ModelKey, Arc<ModelClient>>>,
}

impl Engine {
    /// Opens the store (warning on stderr when sessions cannot be saved).
    pub async fn start(config: Config) -> Engine {
        let retention = crate::store::Retention { keep_days: config.sessions.keep_days };
        let store = match config.data_dir.clone() {
            None => Err("no data directory: set --data-dir or LATHE_DATA_DIR".to_owned()),
            Some(dir) => {
                let failures: FailureSink = Box::new(|failure| {
                    style::warn_line(&format!("could not save session {}: {}", failure.session_id, failure.error));
                });
                match tokio::task::spawn_blocking(move || Store::open(&dir, retention, failures)).await {
                    Ok(Ok(store)) => Ok(Arc::new(store)),
                    Ok(Err(err)) => Err(err.to_string()),
                    Err(err) => Err(err.to_string()),
                }
            }
        };
        if let Err(why) = &store {
            style::warn_line(&format!("sessions will not be saved: {why}"));
        }
        Engine { config: Arc::new(config), store, root: CancellationToken::new(), models: Mutex::new(HashMap::new()) }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Opens the session the arguments name (or a new one in the current
    /// directory), in `mode`.
    pub async fn open(&self, args: &SessionArgs, mode: Mode) -> Result<Arc<Session>, OpenError> {
        let cwd = std::env::current_dir().map_err(OpenError::Cwd)?;
        let cwd = crate::tools::paths::normalize(&cwd);
        let model = match &args.model {
            Some(key) if !self.config.models.contains_key(key) => {
                let known: Vec<&str> = self.config.models.keys().map(String::as_str).collect();
                return Err(OpenError::UnknownModel(key.clone(), known.join(", ")));
            }
            other => other.clone(),
        };
        let resume = match (&args.resume, args.continue_last) {
            (Some(id), _) => Some(id.clone()),
            (None, true) => Some(self.last_session_in(&cwd).await?),
            (None, false) => None,
        };
        let placement = Placement {
            cwd: cwd.clone(),
            additional_directories: Vec::new(),
            mcp_servers: Vec::new(),
            mcp: Vec::new(),
            created_at: crate::store::now_rfc3339(),
        };
        let session = match resume {
            Some(id) => self.restore(&id, placement, mode).await?,
            None => self.create(placement, mode).await,
        };
        if let Some(key) = model {
            session.set_choices(setup::choices_for(&self.config, &key));
        }
        session.set_mode(mode);
        self.save_meta(&session);
        Ok(session)
    }

    async fn last_session_in(&self, cwd: &std::path::Path) -> Result<String, OpenError> {
        let store = self.store.clone().map_err(OpenError::NoStore)?;
        let cwd_owned: PathBuf = cwd.to_path_buf();
        let page = tokio::task::spawn_blocking(move || store.list(Some(&cwd_owned), None, 1)).await.ok();
        page.and_then(|page| page.sessions.into_iter().next())
            .map(|summary| summary.session_id)
            .ok_or_else(|| OpenError::NothingToContinue(cwd.display().to_string()))
    }

    async fn create(&self, placement: Placement, mode: Mode) -> Arc<Session> {
        let id = setup::new_session_id();
        let choices = setup::choices_for(&self.config, &self.config.default_model);
        let journal = match &self.store {
            Ok(store) => match store.create(&setup::new_meta(&id, &placement, &choices, mode)).await {
                Ok(()) => Some(Journal::new(Arc::clone(store), Arc::clone(&id))),
                Err(err) => {
                    style::warn_line(&format!("this session will not be saved: {err}"));
                    None
                }
            },
            Err(_) => None,
        };
        let files = self.read_workspace(&placement.cwd).await;
        let start = Start::new(Vec::new(), choices, mode, journal);
        let store = self.store.as_ref().ok();
        setup::open_session(&self.config, store, id, placement, start, &files, &self.root)
    }

    async fn restore(&self, id: &str, mut placement: Placement, mode: Mode) -> Result<Arc<Session>, OpenError> {
        let store = self.store.clone().map_err(OpenError::NoStore)?;
        store.written().wait().await;
        let reading = {
            let (store, id) = (Arc::clone(&store), id.to_owned());
            tokio::task::spawn_blocking(move || crate::present::replay::stored_transcript(&store, &id))
        };
        let (mut meta, restored) = reading.await.map_err(|err| {
            OpenError::Store(StoreError::Corrupt { path: PathBuf::from(id), message: err.to_string() })
        })??;
        placement.created_at.clone_from(&meta.created_at);
        let (choices, _) = setup::restored_choices(&self.config, &meta);
        meta.cwd = placement.cwd.clone();
        meta.additional_directories = Vec::new();
        store.save_meta_later(meta.clone());
        let files = self.read_workspace(&placement.cwd).await;
        let journal = Journal::new(Arc::clone(&store), Arc::from(id));
        let crate::present::replay::Restored { messages, waiting, cost } = restored;
        let start = Start { waiting, cost, ..Start::new(messages, choices, mode, Some(journal)) };
        let session =
            setup::open_session(&self.config, Some(&store), Arc::from(id), placement, start, &files, &self.root);
        session.set_title(meta.title);
        Ok(session)
    }

    async fn read_workspace(&self, cwd: &std::path::Path) -> setup::WorkspaceFiles {
        let (cwd, user_dir) = (cwd.to_path_buf(), self.config.user_dir.clone());
        let extra_agent_dirs = self.config.agent.extra_agent_dirs.clone();
        tokio::task::spawn_blocking(move || setup::workspace_files(&cwd, user_dir.as_deref(), &extra_agent_dirs))
            .await
            .unwrap_or_default()
    }

    /// The slash commands `session` offers: the built-ins, the command
    /// files, its skills. Blocking.
    pub fn commands(&self, session: &Session) -> Vec<crate::commands::SlashCommand> {
        let mut commands = crate::commands::available(&session.setup().cwd, self.config.user_dir.as_deref());
        crate::commands::add_skills(&mut commands, session.skills().all());
        commands
    }

    /// Writes the session's current state to its metadata.
    pub fn save_meta(&self, session: &Session) {
        if let (Ok(store), Some(_)) = (&self.store, session.journal()) {
            store.save_meta_later(setup::meta_of(session));
        }
    }

    /// Waits until everything the session queued is on disk, and closes its log.
    pub async fn finish(&self, session: &Session) {
        self.save_meta(session);
        if let (Ok(store), Some(_)) = (&self.store, session.journal()) {
            store.close(session.id()).wait().await;
        }
    }

    /// A sandbox notice for the session, if its commands are less confined
    /// than configured.
    pub fn sandbox_notice(&self, session: &Session) -> Option<(String, String)> {
        setup::launcher(&self.config, session).sandbox().and_then(|sandbox| sandbox.notice())
    }

    fn model_client(&self, key: &str, thought_level: Option<&str>) -> Result<Arc<ModelClient>, ModelError> {
        let cache_key = (key.to_owned(), thought_level.map(str::to_owned));
        if let Some(client) = lock(&self.models).get(&cache_key) {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(setup::model_client(&self.config, key, thought_level)?);
        lock(&self.models).insert(cache_key, Arc::clone(&client));
        Ok(client)
    }

    /// Runs one prompt on the session: a turn with the model, or a built-in
    /// slash command. `Ok(Cancelled)` if the session's turns are cancelled
    /// before it starts.
    pub async fn prompt(
        &self,
        session: &Arc<Session>,
        text: String,
        events: &TermEvents,
        approver: &dyn Approver,
    ) -> Prompted {
        let Some(mut turn) = session.enqueue_turn().start().await else {
            return Prompted { result: Ok(StopReason::Cancelled), usage: None };
        };
        let parts = vec![UserPart::Text { text }];
        events.record_user(&parts);
        if session.title().is_none()
            && let Some(title) = setup::derive_title(&parts)
        {
            session.set_title(Some(title.clone()));
            self.save_meta(session);
            events.title(&title);
        }
        let cwd = &session.setup().cwd;
        let result = match setup::classify(cwd, self.config.user_dir.as_deref(), session.skills(), parts).await {
            Request::Turn(parts) => self.run_turn(&mut turn, events, approver, parts).await,
            Request::Builtin(kind, arguments) => self.run_builtin(&mut turn, events, kind, &arguments).await,
            Request::Reply(text) => {
                let message_id: Arc<str> = Arc::from(format!("cmd_{}", uuid::Uuid::new_v4().simple()));
                crate::agent::EventSink::emit(events, AgentEvent::AgentText { message_id, text: format!("{text}\n") });
                Ok(StopReason::EndTurn)
            }
        };
        let cancelled = turn.token().is_cancelled();
        let usage = turn.conversation().turn_usage.take();
        drop(turn);
        self.save_meta(session);
        crate::undo::persist(session).await;
        let result = match result {
            _ if cancelled => Ok(StopReason::Cancelled),
            other => other,
        };
        Prompted { result, usage }
    }

    async fn run_turn(
        &self,
        turn: &mut TurnGuard,
        events: &TermEvents,
        approver: &dyn Approver,
        parts: Vec<UserPart>,
    ) -> Result<StopReason, TurnError> {
        let session = Arc::clone(turn.session());
        let token = turn.token().clone();
        let choices = session.choices();
        let client = self.model_client(&choices.model_key, choices.thought_level.as_deref())?;
        let roots = session.roots();
        let launcher = Launcher::for_session(&self.config.children, &self.config.sandbox, &roots);
        lock(session.policy()).follow_sandbox_of(&launcher);
        let host = LocalProcesses { local: LocalHost, launcher };
        let limits = setup::tool_limits(&self.config);
        let external = session.external_tools();
        // The turn's changes to files are checkpointed (`/undo`) when the session keeps checkpoints.
        let recording = TurnRecording::begin(&session, turn.conversation(), &parts).await;
        if let Some(notice) = crate::undo::notice(&session).await {
            events.warn(&notice);
        }
        let resumed = !turn.conversation().messages().is_empty();
        let standing = setup::standing(&self.config, &session, resumed).await;
        for (title, text) in &standing.notices {
            events.warn(&format!("{title}: {text}"));
        }
        let recorder = recording.as_ref().map(|recording| recording.host(&host));
        let host: &dyn Host = match &recorder {
            Some(recorder) => recorder,
            None => &host,
        };
        let runner = Turn {
            client: &client,
            settings: &self.config.agent,
            events,
            cancel: &token,
            workspace: Workspace {
                cwd: &session.setup().cwd,
                roots: &roots,
                host,
                approver,
                policy: session.policy(),
                limits: &limits,
                seen: session.file_versions(),
            },
            tools: crate::tools::definitions_with(self.config.tools.fetch),
            external: external.as_deref(),
            context: &self.config.context,
            steers: Some(session.steers()),
            agents: session.agents(),
            rules: Some(&standing.rules),
            hooks: Some(&standing.hooks),
        };
        let result = runner.run(turn.conversation(), parts).await;
        if let Some(recording) = recording {
            recording.finish(&session, turn.conversation()).await;
        }
        result
    }

    /// `/compact`, `/clear`, `/model`, `/mode`, `/undo`, `/redo`,
    /// `/checkpoints`, answered by lathe itself.
    async fn run_builtin(
        &self,
        turn: &mut TurnGuard,
        events: &TermEvents,
        kind: CommandKind,
        arguments: &str,
    ) -> Result<StopReason, TurnError> {
        let session = Arc::clone(turn.session());
        let reply = match kind {
            CommandKind::Clear => setup::clear(turn),
            CommandKind::Compact => {
                let choices = session.choices();
                let client = self.model_client(&choices.model_key, choices.thought_level.as_deref())?;
                match setup::compact(turn, &client, events, &self.config).await? {
                    Some(reply) => reply,
                    None => return Ok(StopReason::Cancelled),
                }
            }
            CommandKind::Model => self.model_command(&session, arguments),
            CommandKind::Mode => self.mode_command(&session, arguments),
            CommandKind::Undo => {
                let done = crate::undo::undo(turn, arguments).await;
                show_done(events, &session, "Undo", done)
            }
            CommandKind::Redo => {
                let done = crate::undo::redo(turn).await;
                show_done(events, &session, "Redo", done)
            }
            CommandKind::Checkpoints => crate::undo::list(&session).await,
            CommandKind::Permissions => setup::permissions_list(&self.config, &session).await,
            CommandKind::Skills => session.skills().summary(),
            // These are turned into ordinary turns by `classify`.
            CommandKind::Init | CommandKind::Custom { .. } | CommandKind::Skill => return Ok(StopReason::EndTurn),
        };
        let message_id: Arc<str> = Arc::from(format!("cmd_{}", uuid::Uuid::new_v4().simple()));
        crate::agent::EventSink::emit(events, AgentEvent::AgentText { message_id, text: format!("{reply}\n") });
        Ok(StopReason::EndTurn)
    }

    fn model_command(&self, session: &Session, arguments: &str) -> String {
        if arguments.is_empty() {
            return setup::model_list(&self.config, &session.choices().model_key);
        }
        match self.config.models.get(arguments) {
            Some(model) => {
                session.set_choices(setup::choices_for(&self.config, arguments));
                self.save_meta(session);
                format!("Switched to {}.", model.display_name)
            }
            None => {
                let known: Vec<&str> = self.config.models.keys().map(String::as_str).collect();
                format!("Unknown model \"{arguments}\" (configured: {}).", known.join(", "))
            }
        }
    }

    fn mode_command(&self, session: &Session, arguments: &str) -> String {
        if arguments.is_empty() {
            return setup::mode_list(session.mode());
        }
        match setup::parse_mode(arguments) {
            Ok(mode) => {
                session.set_mode(mode);
                self.save_meta(session);
                setup::mode_switched(mode)
            }
            Err(message) => format!("{message}."),
        }
    }
}

/// Shows what an undo or redo changed; the reply.
fn show_done(events: &TermEvents, session: &Session, verb: &str, done: crate::undo::Done) -> String {
    if let Some(outcome) = &done.outcome {
        events.checkpoint_outcome(verb, outcome, &session.setup().cwd);
    }
    done.reply
}

/// How a prompt ended, and the tokens its model requests used (when the
/// server reported them).
pub struct Prompted {
    /// The stop reason, or why the turn failed.
    pub result: Result<StopReason, TurnError>,
    /// Tokens used by the turn's requests.
    pub usage: Option<crate::model::Usage>,
}

/// The terminal's [`Host`]: files on the local disk, commands as local
/// processes started by the session's launcher (supervised, sandboxed as
/// configured). There are no editor terminals.
struct LocalProcesses {
    local: LocalHost,
    launcher: Launcher,
}

impl Host for LocalProcesses {
    fn read_text_file<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<String, HostError>> {
        self.local.read_text_file(target)
    }

    fn write_text_file<'a>(&'a self, target: &'a Target, content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        self.local.write_text_file(target, content)
    }

    fn reads_via_client(&self) -> bool {
        false
    }

    fn writes_in_place(&self) -> bool {
        false
    }

    fn terminals(&self) -> Option<&dyn Terminals> {
        None
    }

    fn launcher(&self) -> &Launcher {
        &self.launcher
    }
}

/// The exit code for how a turn ended.
pub fn exit_code(result: &Result<StopReason, TurnError>) -> u8 {
    match result {
        Ok(StopReason::EndTurn) => exit::OK,
        Ok(StopReason::MaxTokens | StopReason::MaxTurnRequests | StopReason::Refusal) => exit::STOPPED_SHORT,
        Ok(StopReason::Cancelled) => exit::CANCELLED,
        Err(_) => exit::ERROR,
    }
}
