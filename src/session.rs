//! Session state: identity, roots, the conversation with the model, what the
//! editor can switch (model, reasoning effort, mode), and the turns that are
//! running or waiting.
//!
//! A session runs one turn at a time. The conversation sits behind an async
//! mutex that the running turn holds for its whole life, so "is a turn
//! running" and "who may touch the history" are the same fact. One worker
//! task per session hands the conversation out: each prompt sends it a ticket
//! down a channel when it is enqueued, and the worker serves the tickets one
//! after the other, so prompts run in arrival order by construction. Every
//! turn's token, running or queued, is registered when it is enqueued, so a
//! `session/cancel` that arrives right after `session/prompt` always finds
//! it, and cancels the queued ones too; a ticket cancelled while it waits is
//! skipped and its turn never starts. Closing the session stops the worker.
//!
//! Every change to the conversation goes through [`Conversation`]'s methods,
//! which also write it to the session's [`Journal`] (if it has one), so the
//! transcript on disk follows the one in memory as the turn runs. This module
//! knows nothing of ACP or the model API beyond the message type.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::{OwnedMutexGuard, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::cancel::OrCancel as _;
use crate::model::{Message, UserPart};
use crate::permission::{Mode, Policy};
use crate::store::{Record, SessionMeta, Store};
use crate::sync::lock;

/// Where a session's records go on disk.
///
/// A new session is not on disk until the model has answered in it (its
/// first message other than a prompt): a session created and closed, or
/// left when the process ends, without a prompt that reached the model
/// leaves nothing behind. Until then the journal keeps the session's
/// metadata, the updates sent so far and the prompts in memory
/// ([`Journal::lazy`]); the first answer queues the session's creation,
/// those records, then the answer, in that order on the store's writer.
#[derive(Debug, Clone)]
pub struct Journal {
    store: Arc<Store>,
    session_id: Arc<str>,
    /// `Some` while the session exists only in memory.
    pending: Arc<Mutex<Option<Pending>>>,
}

/// A session not on disk yet.
#[derive(Debug)]
struct Pending {
    meta: SessionMeta,
    /// Updates sent before the first message, to be written first.
    updates: Vec<Early>,
}

/// A record of a session not on disk yet.
#[derive(Debug)]
enum Early {
    /// An update line as sent.
    Line(Vec<u8>),
    /// Streamed text (the prompt's own chunks come before its message).
    Chunk(crate::store::Chunk),
    /// A prompt, or the empty interrupted answer that closes a turn the
    /// model never answered, kept until the model answers.
    Held(Record),
}

/// Most updates kept for a session not on disk yet (the slash commands, a
/// mode or model switch, a notice: a handful in practice); later ones are
/// not saved, and replay leaves such state updates out anyway.
const MAX_PENDING_UPDATES: usize = 256;

impl Journal {
    /// The journal of session `session_id`, which is in `store`.
    pub fn new(store: Arc<Store>, session_id: Arc<str>) -> Self {
        Self { store, session_id, pending: Arc::new(Mutex::new(None)) }
    }

    /// The journal of a new session, created in `store` with `meta` when
    /// its first message is recorded.
    pub fn lazy(store: Arc<Store>, meta: SessionMeta) -> Self {
        let session_id = Arc::from(meta.session_id.as_str());
        Self { store, session_id, pending: Arc::new(Mutex::new(Some(Pending { meta, updates: Vec::new() }))) }
    }

    fn pending(&self) -> MutexGuard<'_, Option<Pending>> {
        lock(&self.pending)
    }

    /// The session's metadata while it is not on disk yet.
    pub fn pending_meta(&self) -> Option<SessionMeta> {
        self.pending().as_ref().map(|pending| pending.meta.clone())
    }

    /// Appends one record. A message from the model or a tool (or a reset
    /// to some messages) puts a new session on disk first; a prompt the
    /// model has not answered yet is held with the other early records, so
    /// a session whose prompt never reached the model (a dead endpoint, a
    /// cancel before the first request) leaves nothing behind.
    pub fn record(&self, record: &Record) {
        match record {
            Record::Message(message) if !answered(message) => {
                if let Some(pending) = self.pending().as_mut() {
                    // Never dropped, unlike updates: this is conversation.
                    pending.updates.push(Early::Held(record.clone()));
                    return;
                }
            }
            Record::Message(_) => self.materialize(),
            Record::Reset(messages) => {
                let mut pending = self.pending();
                if let Some(pending) = pending.as_mut() {
                    // The held prompts are what the reset replaces.
                    pending.updates.retain(|early| !matches!(early, Early::Held(_)));
                    // `/clear` (or a failed first turn taken back) before
                    // anything was kept: there is nothing to save.
                    if messages.is_empty() {
                        return;
                    }
                }
                drop(pending);
                self.materialize();
            }
            Record::Rewind(_) => self.materialize(),
            Record::Steers(_) => {
                if let Some(pending) = self.pending().as_mut() {
                    // Conversation to come: kept like a prompt, never dropped.
                    pending.updates.push(Early::Held(record.clone()));
                    return;
                }
            }
            Record::Update(line) => {
                let mut pending = self.pending();
                if let Some(pending) = pending.as_mut() {
                    if pending.updates.len() < MAX_PENDING_UPDATES {
                        pending.updates.push(Early::Line(line.clone().into_bytes()));
                    }
                    return;
                }
            }
            Record::Chunk(chunk) => return self.record_chunk(chunk.clone()),
        }
        self.store.append(&self.session_id, record);
    }

    /// Appends one `session/update` line exactly as it was sent.
    pub fn record_update_line(&self, line: Vec<u8>) {
        let mut pending = self.pending();
        if let Some(pending) = pending.as_mut() {
            if pending.updates.len() < MAX_PENDING_UPDATES {
                pending.updates.push(Early::Line(line));
            }
            return;
        }
        drop(pending);
        self.store.append_raw_update(&self.session_id, line);
    }

    /// Appends streamed text, merged with the chunks of its message.
    pub fn record_chunk(&self, chunk: crate::store::Chunk) {
        let mut pending = self.pending();
        if let Some(pending) = pending.as_mut() {
            if pending.updates.len() < MAX_PENDING_UPDATES {
                pending.updates.push(Early::Chunk(chunk));
            }
            return;
        }
        drop(pending);
        self.store.append_chunk(&self.session_id, chunk);
    }

    /// Saves the session's metadata (in memory while it is not on disk yet).
    pub fn save_meta(&self, meta: SessionMeta) {
        let mut pending = self.pending();
        match pending.as_mut() {
            Some(pending) => pending.meta = meta,
            None => {
                drop(pending);
                self.store.save_meta_later(meta);
            }
        }
    }

    /// Puts a session that exists only in memory on disk: its creation and
    /// the updates kept so far are queued, under the lock, so nothing
    /// recorded meanwhile can be queued before them.
    fn materialize(&self) {
        let mut pending = self.pending();
        let Some(Pending { meta, updates }) = pending.take() else { return };
        let created = self.store.create(&meta);
        for early in updates {
            match early {
                Early::Line(line) => self.store.append_raw_update(&self.session_id, line),
                Early::Chunk(chunk) => self.store.append_chunk(&self.session_id, chunk),
                Early::Held(record) => self.store.append(&self.session_id, &record),
            }
        }
        drop(pending);
        // The store was proven writable when it opened; should this still
        // fail, the log says so (the records that follow are dropped).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let session_id = Arc::clone(&self.session_id);
            runtime.spawn(async move {
                if let Err(err) = created.await {
                    tracing::warn!(session = %session_id, %err, "the session cannot be saved");
                }
            });
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

/// Whether `message` shows the model answered: anything but a prompt and
/// the empty interrupted answer a failed or cancelled turn ends with.
fn answered(message: &Message) -> bool {
    match message {
        Message::User { .. } => false,
        Message::Assistant { text, reasoning, tool_calls, interrupted, .. } => {
            !(*interrupted && text.is_empty() && reasoning.is_empty() && tool_calls.is_empty())
        }
        Message::Tool { .. } => true,
    }
}

/// The conversation sent to the model.
#[derive(Debug, Default)]
pub struct Conversation {
    /// Built once when the session starts, so every request shares its bytes.
    pub system_prompt: crate::prompt::SystemPrompt,
    messages: Vec<Message>,
    /// Every tool-call id used so far: ACP wants them unique within the session.
    pub tool_call_ids: HashSet<String>,
    /// The last exact token count, to estimate the next request's size from.
    pub usage_mark: Option<UsageMark>,
    /// Tokens the current turn's model requests used, summed over the
    /// requests whose server reported usage; `None` when none did.
    pub turn_usage: Option<crate::model::Usage>,
    /// The user was told that the model takes no tools (told once per session).
    pub told_chat_only: bool,
    /// The models (by config key) whose server has returned native
    /// `tool_calls` in this session: with `text_tool_calls = "auto"`, calls
    /// written as text are no longer read from their answers.
    pub native_tool_calls: HashSet<String>,
    /// `exit_plan_mode` is offered: from the first request the session made
    /// in plan mode on, so leaving plan mode keeps the request's prefix (see
    /// [`crate::tools::plan_definition`]).
    pub plan_tools: bool,
    /// What the session's model requests cost so far, when known (the
    /// server's figure, or the configured prices).
    pub cost: Option<f64>,
    journal: Option<Journal>,
}

/// Where the last exact usage figure stood: tokens, and how many messages
/// the conversation had then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageMark {
    /// Tokens the server counted for the last request and its answer.
    pub tokens: u64,
    /// The number of messages at that point.
    pub messages: usize,
}

impl Conversation {
    /// A conversation with these messages, journaled to `journal`.
    pub fn new(system_prompt: crate::prompt::SystemPrompt, messages: Vec<Message>, journal: Option<Journal>) -> Self {
        let mut tool_call_ids = HashSet::new();
        for message in &messages {
            match message {
                Message::Assistant { tool_calls, .. } => tool_call_ids.extend(tool_calls.iter().map(|c| c.id.clone())),
                Message::User { .. } | Message::Tool { .. } => {}
            }
        }
        Self {
            system_prompt,
            messages,
            tool_call_ids,
            usage_mark: None,
            turn_usage: None,
            told_chat_only: false,
            native_tool_calls: HashSet::new(),
            plan_tools: false,
            cost: None,
            journal,
        }
    }

    /// Everything after the system prompt.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Appends a message.
    pub fn push(&mut self, message: Message) {
        if let Some(journal) = &self.journal {
            journal.record(&Record::Message(message.clone()));
        }
        self.messages.push(message);
    }

    /// Replaces every message (compaction, `/clear`).
    pub fn reset(&mut self, messages: Vec<Message>) {
        if let Some(journal) = &self.journal {
            journal.record(&Record::Reset(messages.clone()));
        }
        self.messages = messages;
        // The old count described other messages.
        self.usage_mark = None;
    }

    /// Cuts the conversation back to its first `len` messages (`/undo`),
    /// journaled as a rewind (no copy of the messages kept); returns the
    /// messages dropped.
    pub fn rewind(&mut self, len: usize) -> Vec<Message> {
        if len >= self.messages.len() {
            return Vec::new();
        }
        if let Some(journal) = &self.journal {
            journal.record(&Record::Rewind(len));
        }
        self.usage_mark = None;
        self.messages.split_off(len)
    }

    /// Drops every message from `len` on.
    pub fn truncate(&mut self, len: usize) {
        if len < self.messages.len() {
            let kept = self.messages[..len].to_vec();
            self.reset(kept);
        }
    }
}

/// Steering messages: what the user sent while a turn ran, waiting for
/// that turn's next model request (see [`Session::steer`]). Every change
/// is journaled as the whole list, so a message not yet read by the model
/// survives the process ending; a session loaded again goes on with them.
#[derive(Debug, Default)]
pub struct Steers {
    pending: Mutex<Vec<Vec<UserPart>>>,
    journal: Option<Journal>,
}

impl Steers {
    fn new(journal: Option<Journal>) -> Self {
        Self { pending: Mutex::new(Vec::new()), journal }
    }

    fn push(&self, parts: Vec<UserPart>) {
        let mut pending = lock(&self.pending);
        pending.push(parts);
        self.journal(&pending);
    }

    /// Takes every waiting message, oldest first.
    pub fn take(&self) -> Vec<Vec<UserPart>> {
        let mut pending = lock(&self.pending);
        if pending.is_empty() {
            return Vec::new();
        }
        let taken = std::mem::take(&mut *pending);
        self.journal(&pending);
        taken
    }

    /// Whether a message waits.
    pub fn is_waiting(&self) -> bool {
        !lock(&self.pending).is_empty()
    }

    /// The messages a stored session had waiting (not journaled again).
    pub fn restore(&self, waiting: Vec<Vec<UserPart>>) {
        *lock(&self.pending) = waiting;
    }

    fn journal(&self, pending: &[Vec<UserPart>]) {
        if let Some(journal) = &self.journal {
            journal.record(&Record::Steers(pending.to_vec()));
        }
    }
}

/// What [`Session::steer`] did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Steered {
    /// It waits for the running (or queued) turn's next model request.
    Queued,
    /// No turn runs or waits: the message is given back, to start one.
    Idle(Vec<UserPart>),
}

/// Where a session works and what it was given.
#[derive(Debug, Clone)]
pub struct SessionSetup {
    /// The working directory, absolute.
    pub cwd: PathBuf,
    /// Further roots the session may work in, absolute.
    pub additional_directories: Vec<PathBuf>,
    /// The MCP servers the client passed, as sent.
    pub mcp_servers: Vec<serde_json::Value>,
    /// When the session was first created (RFC 3339).
    pub created_at: String,
}

/// What the editor can switch besides the mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choices {
    /// Key of the configured model the session uses.
    pub model_key: String,
    /// Reasoning effort sent with requests, when the model takes one.
    pub thought_level: Option<String>,
}

/// One session.
#[derive(Debug)]
pub struct Session {
    id: Arc<str>,
    setup: SessionSetup,
    /// Cancelled when the session (or the whole process) goes away.
    token: CancellationToken,
    conversation: Arc<tokio::sync::Mutex<Conversation>>,
    /// Tokens of the running turn and of queued ones, by turn number.
    turns: Mutex<Vec<(u64, CancellationToken)>>,
    next_turn: AtomicU64,
    /// The worker's queue, once a first prompt started it.
    worker: OnceLock<mpsc::UnboundedSender<Ticket>>,
    policy: Mutex<Policy>,
    choices: Mutex<Choices>,
    title: Mutex<Option<String>>,
    journal: Option<Journal>,
    seen: crate::tools::versions::FileVersions,
    /// The session's MCP tools, once its servers are being connected.
    external: std::sync::OnceLock<Arc<dyn crate::tools::ExternalTools>>,
    /// The turns' file checkpoints (`/undo`), once the session has them.
    checkpoints: std::sync::OnceLock<Arc<crate::checkpoint::Checkpoints>>,
    /// Steering messages waiting for the running turn.
    steers: Steers,
    /// The agents its `task` calls can run, once set (else the built-ins).
    agents: OnceLock<crate::agents::Agents>,
    /// Where its "always" answers that outlast it are kept (set at its first prompt).
    rules: OnceLock<Arc<crate::rules::SessionRules>>,
    /// Its hooks (set at its first prompt).
    hooks: OnceLock<Arc<crate::hooks::SessionHooks>>,
    /// What the user was told once already.
    told: Mutex<Vec<String>>,
    /// Its skills, as its system prompt lists them, once set (else none).
    skills: OnceLock<crate::skills::Skills>,
}

/// A prompt's turn, registered (so it can be cancelled) but not yet running.
pub struct QueuedTurn {
    session: Arc<Session>,
    number: u64,
    token: CancellationToken,
    /// Where the worker hands over the conversation when this turn's time comes.
    grant: oneshot::Receiver<Grant>,
    /// Set once [`QueuedTurn::start`] has handed the registration on.
    handed_over: bool,
}

/// A running turn's hold on its session: the conversation, exclusively, and
/// the token that cancels the turn. Dropping it unregisters the turn and
/// lets the worker serve the next one.
pub struct TurnGuard {
    session: Arc<Session>,
    number: u64,
    token: CancellationToken,
    conversation: OwnedMutexGuard<Conversation>,
    /// Dropped with the guard: tells the worker this turn is over.
    _over: oneshot::Sender<()>,
}

/// A queued turn's place in the worker's line.
struct Ticket {
    token: CancellationToken,
    grant: oneshot::Sender<Grant>,
}

/// What the worker hands a turn: the conversation, and the signal the turn
/// drops when it is over.
struct Grant {
    conversation: OwnedMutexGuard<Conversation>,
    over: oneshot::Sender<()>,
}

/// Serves tickets in the order they came, one turn at a time, until the
/// session closes or goes away. Holds the conversation, not the session (no
/// cycle: the session owns the queue's sending end).
async fn serve_turns(
    conversation: Arc<tokio::sync::Mutex<Conversation>>,
    mut tickets: mpsc::UnboundedReceiver<Ticket>,
    closed: CancellationToken,
) {
    while let Ok(Some(ticket)) = tickets.recv().or_cancel(&closed).await {
        if ticket.token.is_cancelled() {
            continue;
        }
        // The turn before may still hold the conversation a moment after it
        // said it was over; a cancel meanwhile means this one never starts.
        let Ok(held) = Arc::clone(&conversation).lock_owned().or_cancel(&ticket.token).await else { continue };
        let (over, finished) = oneshot::channel();
        // A turn that gave up (cancelled) drops its receiver, and with it
        // the grant: the conversation is free again at once.
        if ticket.grant.send(Grant { conversation: held, over }).is_ok() {
            // Err when the turn's guard (or the unclaimed grant) drops.
            let _ = finished.await;
        }
    }
}

impl Session {
    /// A session whose token is a child of `parent`.
    pub fn new(
        id: Arc<str>,
        setup: SessionSetup,
        conversation: Conversation,
        choices: Choices,
        mode: Mode,
        parent: &CancellationToken,
    ) -> Self {
        let journal = conversation.journal.clone();
        Self {
            id,
            setup,
            token: parent.child_token(),
            conversation: Arc::new(tokio::sync::Mutex::new(conversation)),
            turns: Mutex::new(Vec::new()),
            next_turn: AtomicU64::new(0),
            worker: OnceLock::new(),
            policy: Mutex::new(Policy::new(mode)),
            choices: Mutex::new(choices),
            title: Mutex::new(None),
            seen: crate::tools::versions::FileVersions::default(),
            external: std::sync::OnceLock::new(),
            checkpoints: std::sync::OnceLock::new(),
            rules: OnceLock::new(),
            hooks: OnceLock::new(),
            told: Mutex::new(Vec::new()),
            steers: Steers::new(journal.clone()),
            agents: OnceLock::new(),
            skills: OnceLock::new(),
            journal,
        }
    }

    /// Steers the running turn: `parts` waits for its next model request
    /// (never the middle of a tool call), and is read there as a message
    /// from the user. With no turn running or queued, it is given back
    /// ([`Steered::Idle`]). Decided under the lock that turns end under, so
    /// a message queued here is seen by the end of the turn it was queued
    /// for ([`Session::steers`]), never lost between the two.
    pub fn steer(&self, parts: Vec<UserPart>) -> Steered {
        let turns = lock(&self.turns);
        if turns.is_empty() {
            return Steered::Idle(parts);
        }
        self.steers.push(parts);
        drop(turns);
        Steered::Queued
    }

    /// The steering messages waiting for a turn.
    pub fn steers(&self) -> &Steers {
        &self.steers
    }

    /// The agents the session's `task` calls can run.
    pub fn agents(&self) -> &crate::agents::Agents {
        self.agents.get_or_init(crate::agents::Agents::builtin)
    }

    /// Gives the session its agents; only the first call counts.
    pub fn set_agents(&self, agents: crate::agents::Agents) {
        let _ = self.agents.set(agents);
    }

    /// Gives the session its rule files; only the first call counts. Returns the session's.
    pub fn set_rules(&self, rules: Arc<crate::rules::SessionRules>) -> Arc<crate::rules::SessionRules> {
        Arc::clone(self.rules.get_or_init(|| rules))
    }

    /// The session's rule files, once known (at its first prompt).
    pub fn rules(&self) -> Option<Arc<crate::rules::SessionRules>> {
        self.rules.get().cloned()
    }

    /// Gives the session its hooks; only the first call counts. Returns the session's.
    pub fn set_hooks(&self, hooks: Arc<crate::hooks::SessionHooks>) -> Arc<crate::hooks::SessionHooks> {
        Arc::clone(self.hooks.get_or_init(|| hooks))
    }

    /// The session's hooks, once set up (at its first prompt).
    pub fn hooks(&self) -> Option<Arc<crate::hooks::SessionHooks>> {
        self.hooks.get().cloned()
    }

    /// Whether `said` is new to this session (and from now on it is not):
    /// for what the user is told once per session.
    pub fn first_time(&self, said: &str) -> bool {
        let mut told = lock(&self.told);
        if told.iter().any(|old| old == said) {
            return false;
        }
        told.push(said.to_owned());
        true
    }

    /// The session's skills (those its system prompt lists).
    pub fn skills(&self) -> &crate::skills::Skills {
        self.skills.get_or_init(crate::skills::Skills::default)
    }

    /// Gives the session its skills; only the first call counts. The user's
    /// own skill folders read without asking (see
    /// [`Policy::set_skill_folders`]).
    pub fn set_skills(&self, skills: crate::skills::Skills) {
        lock(&self.policy).set_skill_folders(skills.user_folders());
        let _ = self.skills.set(skills);
    }

    /// Gives the session its checkpoints; only the first call counts.
    pub fn set_checkpoints(&self, checkpoints: Arc<crate::checkpoint::Checkpoints>) {
        let _ = self.checkpoints.set(checkpoints);
    }

    /// The session's checkpoints, if it keeps them.
    pub fn checkpoints(&self) -> Option<&Arc<crate::checkpoint::Checkpoints>> {
        self.checkpoints.get()
    }

    /// A token cancelled when the session goes away (closed, deleted,
    /// replaced, or lathe exits): for what lives as long as the session.
    pub fn lifetime(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// Gives the session its external (MCP) tools; only the first call counts.
    pub fn set_external_tools(&self, tools: Arc<dyn crate::tools::ExternalTools>) {
        if self.external.set(tools).is_err() {
            tracing::warn!(session = %self.id, "the session already has its external tools");
        }
    }

    /// The session's external (MCP) tools, if it has MCP servers.
    pub fn external_tools(&self) -> Option<Arc<dyn crate::tools::ExternalTools>> {
        self.external.get().cloned()
    }

    /// The session id.
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// Where the session works.
    pub fn setup(&self) -> &SessionSetup {
        &self.setup
    }

    /// Where its records go, if it is persisted.
    pub fn journal(&self) -> Option<&Journal> {
        self.journal.as_ref()
    }

    /// The session roots: the cwd, then the additional directories.
    pub fn roots(&self) -> Vec<PathBuf> {
        std::iter::once(self.setup.cwd.clone()).chain(self.setup.additional_directories.iter().cloned()).collect()
    }

    /// The file versions the model has seen, so edits notice changes made behind its back.
    pub fn file_versions(&self) -> &crate::tools::versions::FileVersions {
        &self.seen
    }

    /// The permission policy (mode and remembered answers).
    pub fn policy(&self) -> &Mutex<Policy> {
        &self.policy
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        lock(&self.policy).mode()
    }

    /// Switches the mode; the next tool call is judged by it.
    pub fn set_mode(&self, mode: Mode) {
        lock(&self.policy).set_mode(mode);
    }

    /// The current model and reasoning effort.
    pub fn choices(&self) -> Choices {
        lock(&self.choices).clone()
    }

    /// Switches model and reasoning effort; the next model request uses them.
    pub fn set_choices(&self, choices: Choices) {
        *lock(&self.choices) = choices;
    }

    /// The title, once there is one.
    pub fn title(&self) -> Option<String> {
        lock(&self.title).clone()
    }

    /// Sets the title; returns whether it changed.
    pub fn set_title(&self, title: Option<String>) -> bool {
        let mut current = lock(&self.title);
        let changed = *current != title;
        *current = title;
        changed
    }

    /// Registers a turn for a prompt and puts it in line: from now on a
    /// cancel reaches it, and it runs after every turn enqueued before it.
    /// Starts the session's worker on first use (needs a Tokio runtime).
    pub fn enqueue_turn(self: &Arc<Self>) -> QueuedTurn {
        self.enqueue_locked(&mut lock(&self.turns))
    }

    /// [`Session::enqueue_turn`], with the turns already locked.
    fn enqueue_locked(self: &Arc<Self>, turns: &mut Vec<(u64, CancellationToken)>) -> QueuedTurn {
        let token = self.token.child_token();
        let number = self.next_turn.fetch_add(1, Ordering::Relaxed);
        turns.push((number, token.clone()));
        let (grant_tx, grant) = oneshot::channel();
        let worker = self.worker.get_or_init(|| {
            let (tickets, line) = mpsc::unbounded_channel();
            tokio::spawn(serve_turns(Arc::clone(&self.conversation), line, self.token.clone()));
            tickets
        });
        // Fails only once the session is closed; then the token is cancelled
        // too and the turn answers `cancelled` without starting.
        let _ = worker.send(Ticket { token: token.clone(), grant: grant_tx });
        QueuedTurn { session: Arc::clone(self), number, token, grant, handed_over: false }
    }

    /// Whether a turn is running or waiting.
    pub fn is_busy(&self) -> bool {
        !lock(&self.turns).is_empty()
    }

    /// Cancels the running turn and every queued one. A no-op when idle: it
    /// never affects a later turn.
    pub fn cancel_turns(&self) {
        for (_, token) in lock(&self.turns).iter() {
            token.cancel();
        }
    }

    /// Cancels everything the session is doing, now and for good.
    pub fn close(&self) {
        self.token.cancel();
    }

    /// Waits until no turn holds the conversation: after a cancel, until
    /// the running turn has wound down (and queued its last records).
    pub async fn idle(&self) {
        drop(self.conversation.lock().await);
    }

    /// Takes the conversation while no turn runs (for replay and commands
    /// outside a turn). `None` while a turn holds it.
    pub fn try_conversation(&self) -> Option<tokio::sync::MutexGuard<'_, Conversation>> {
        self.conversation.try_lock().ok()
    }

    fn unregister(&self, number: u64) {
        lock(&self.turns).retain(|(n, _)| *n != number);
    }
}

impl QueuedTurn {
    /// The turn's cancellation token.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Waits for the earlier turns to finish, then takes the conversation.
    /// `None` if the turn was cancelled while it waited (a cancel that comes
    /// with the conversation still wins: the turn never starts).
    pub async fn start(mut self) -> Option<TurnGuard> {
        let Ok(Ok(grant)) = (&mut self.grant).or_cancel(&self.token).await else { return None };
        self.handed_over = true;
        Some(TurnGuard {
            session: Arc::clone(&self.session),
            number: self.number,
            token: self.token.clone(),
            conversation: grant.conversation,
            _over: grant.over,
        })
    }
}

impl Drop for QueuedTurn {
    fn drop(&mut self) {
        if !self.handed_over {
            self.session.unregister(self.number);
        }
    }
}

impl TurnGuard {
    /// The turn's cancellation token.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The conversation, exclusively.
    pub fn conversation(&mut self) -> &mut Conversation {
        &mut self.conversation
    }

    /// The session.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Ends the turn. Steering messages it ended before reading (sent as it
    /// finished) are for a turn of their own, which is returned registered
    /// (a message sent from now on joins it): only when this turn was not
    /// cancelled (then they wait for the next prompt) and no other turn is
    /// in line (it reads them). Decided under the lock [`Session::steer`]
    /// decides under, so no message falls between the two turns, and an
    /// earlier turn's end never takes a later turn's messages.
    pub fn end(self) -> Option<QueuedTurn> {
        let session = Arc::clone(&self.session);
        let next = {
            let mut turns = lock(&session.turns);
            turns.retain(|(n, _)| *n != self.number);
            let next = !self.token.is_cancelled() && turns.is_empty() && session.steers.is_waiting();
            next.then(|| session.enqueue_locked(&mut turns))
        };
        drop(self);
        next
    }
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        // Then the fields drop: the conversation, and the worker's signal.
        self.session.unregister(self.number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Arc<Session> {
        let setup = SessionSetup {
            cwd: PathBuf::from("/p"),
            additional_directories: vec![],
            mcp_servers: vec![],
            created_at: String::new(),
        };
        let choices = Choices { model_key: "m".into(), thought_level: None };
        let conversation = Conversation::new("system".into(), Vec::new(), None);
        Arc::new(Session::new(Arc::from("s1"), setup, conversation, choices, Mode::Ask, &CancellationToken::new()))
    }

    #[tokio::test]
    async fn turns_run_one_at_a_time_in_order() {
        let session = session();
        let first = session.enqueue_turn().start().await.unwrap();
        let second = session.enqueue_turn();
        let waiting = tokio::spawn(second.start());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the second turn waits for the first");
        drop(first);
        let second = waiting.await.unwrap().unwrap();
        assert!(!second.token().is_cancelled());
        drop(second);
        assert!(!session.is_busy());
    }

    fn text(text: &str) -> Vec<UserPart> {
        vec![UserPart::Text { text: text.to_owned() }]
    }

    /// A steer the turn ended before reading starts the next turn, unless
    /// the turn was cancelled or a later turn (which reads it) is in line;
    /// an earlier turn's end never takes a later turn's steers (the race
    /// that lost a steer after a cancel under load).
    #[tokio::test]
    async fn steers_a_turn_ended_before_reading_go_to_a_turn_of_their_own() {
        let session = session();
        assert_eq!(session.steer(text("idle")), Steered::Idle(text("idle")));

        let turn = session.enqueue_turn().start().await.unwrap();
        assert_eq!(session.steer(text("late")), Steered::Queued);
        let next = turn.end().expect("a turn for the steer");
        assert!(session.is_busy(), "registered at once: a steer from now on joins it");
        assert_eq!(session.steer(text("later")), Steered::Queued);
        let next = next.start().await.unwrap();
        assert_eq!(session.steers().take(), vec![text("late"), text("later")]);
        assert!(next.end().is_none(), "nothing waits");
        assert!(!session.is_busy());

        // Cancelled: the steer waits for the next prompt.
        let turn = session.enqueue_turn().start().await.unwrap();
        session.steer(text("after the cancel"));
        session.cancel_turns();
        assert!(turn.end().is_none());
        assert!(session.steers().is_waiting());
        assert!(!session.is_busy());
        session.steers().take();

        // A later turn in line reads it; the earlier one's end leaves it.
        let first = session.enqueue_turn().start().await.unwrap();
        let second = session.enqueue_turn();
        session.steer(text("for the second"));
        assert!(first.end().is_none());
        assert!(session.steers().is_waiting());
        drop(second);
    }

    #[tokio::test]
    async fn queued_turns_start_in_arrival_order_whatever_the_polling_order() {
        let session = session();
        let first = session.enqueue_turn();
        let second = session.enqueue_turn();
        let third = session.enqueue_turn();
        // Poll the later ones first.
        let third = tokio::spawn(third.start());
        let second = tokio::spawn(second.start());
        tokio::task::yield_now().await;
        let first = first.start().await.unwrap();
        assert!(!second.is_finished() && !third.is_finished());
        drop(first);
        let second = second.await.unwrap().unwrap();
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "the third waits for the second");
        drop(second);
        assert!(third.await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_cancelled_queued_turn_is_skipped() {
        let session = session();
        let running = session.enqueue_turn().start().await.unwrap();
        let doomed = session.enqueue_turn();
        let doomed_token = doomed.token().clone();
        let next = tokio::spawn(session.enqueue_turn().start());
        doomed_token.cancel();
        assert!(doomed.start().await.is_none());
        drop(running);
        assert!(next.await.unwrap().is_some(), "the turn after a cancelled one still runs");
    }

    #[tokio::test]
    async fn cancel_reaches_running_and_queued_turns_only() {
        let session = session();
        session.cancel_turns(); // idle: a no-op
        let running = session.enqueue_turn().start().await.unwrap();
        assert!(!running.token().is_cancelled(), "an earlier cancel must not poison the next turn");
        let queued = session.enqueue_turn();
        let queued_token = queued.token().clone();
        let waiting = tokio::spawn(queued.start());
        session.cancel_turns();
        assert!(running.token().is_cancelled());
        assert!(queued_token.is_cancelled());
        assert!(waiting.await.unwrap().is_none(), "a cancelled queued turn never starts");
        drop(running);
        assert!(!session.is_busy());
        let next = session.enqueue_turn().start().await.unwrap();
        assert!(!next.token().is_cancelled());
    }

    /// A turn whose number has come but whose conversation is still held
    /// (by the turn before, winding down) is cancelled, not started.
    #[tokio::test]
    async fn a_turn_cancelled_while_the_conversation_is_held_never_starts() {
        let session = session();
        let held = Arc::clone(&session.conversation).lock_owned().await;
        let queued = session.enqueue_turn();
        let token = queued.token().clone();
        let waiting = tokio::spawn(queued.start());
        tokio::task::yield_now().await;
        session.cancel_turns();
        assert!(token.is_cancelled());
        let started = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await;
        assert!(started.expect("the cancelled turn gives up at once").unwrap().is_none());
        drop(held);
        assert!(!session.is_busy());
        tokio::time::timeout(std::time::Duration::from_secs(5), session.idle()).await.unwrap();
    }

    #[tokio::test]
    async fn closing_cancels_the_turn() {
        let session = session();
        let turn = session.enqueue_turn().start().await.unwrap();
        session.close();
        assert!(turn.token().is_cancelled());
    }

    /// `session/close` frees everything: queued turns answer at once without
    /// starting, the worker ends (its queue closes), and a prompt after the
    /// close never starts.
    #[tokio::test(start_paused = true)]
    async fn closing_stops_the_worker_and_every_queued_turn() {
        let session = session();
        let running = session.enqueue_turn().start().await.unwrap();
        let queued = tokio::spawn(session.enqueue_turn().start());
        session.close();
        assert!(queued.await.unwrap().is_none(), "a queued turn never starts once the session closed");
        drop(running);
        let worker = session.worker.get().unwrap().clone();
        tokio::time::timeout(std::time::Duration::from_secs(5), worker.closed()).await.expect("the worker ended");
        assert!(session.enqueue_turn().start().await.is_none());
        assert!(!session.is_busy());
        assert_eq!(Arc::strong_count(&session.conversation), 1, "only the session holds the conversation");
    }
}
