//! Session set-up that every front end shares (the editor's, [`crate::acp`],
//! and the terminal's, [`crate::term`]): a session opened with its system
//! prompt, history, journal, MCP servers and checkpoints; its metadata; what a prompt asks for (a turn or a built-in
//! command); the title it gives a session; the limits its tools run under.
//! (The transcript a stored session continues from is read with its replay,
//! in [`crate::acp::stored_transcript`].)
//!
//! It knows the engine (sessions, the store, prompts, commands) and nothing
//! of any front end: no ACP types, no terminal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{Compaction, Compactor, EventSink, TurnError};
use crate::checkpoint::Checkpoints;
use crate::commands::{self, CommandKind, SlashCommand};
use crate::config::{Config, ConfigSource};
use crate::model::{Message, ModelClient, ModelError, UserPart};
use crate::permission::Mode;
use crate::prompt::{ClientPrompt, Environment, Instructions, project_instructions, system_prompt_with};
use crate::session::{Choices, Conversation, Journal, Session, SessionSetup, TurnGuard};
use crate::store::{SessionMeta, Store, now_rfc3339};
use crate::tools::ToolLimits;

const INIT_PROMPT: &str = include_str!("../prompts/init.md");

/// Longest title derived from a prompt, in characters.
pub const TITLE_CHARS: usize = 60;

/// Where a session works and what it was given.
pub struct Placement {
    /// The working directory, absolute and normalized.
    pub cwd: PathBuf,
    /// Further roots, absolute and normalized.
    pub additional_directories: Vec<PathBuf>,
    /// The MCP servers the client passed, as sent (kept in the metadata).
    pub mcp_servers: Vec<Value>,
    /// The same servers, in the shape the `mcp` module connects to.
    pub mcp: Vec<crate::config::McpServer>,
    /// When the session was first created: now for a new one.
    pub created_at: String,
}

/// What a session starts from: nothing for a new one, its log for a loaded one.
pub struct Start {
    /// The model transcript.
    pub messages: Vec<Message>,
    /// Model and reasoning effort.
    pub choices: Choices,
    /// The permission mode.
    pub mode: Mode,
    /// Where its records go, if it is saved.
    pub journal: Option<Journal>,
    /// The client's own system prompt, if it gave one.
    pub system: Option<ClientPrompt>,
    /// Steering messages a stored session had waiting (see [`crate::session::Steers`]).
    pub waiting: Vec<Vec<UserPart>>,
    /// What a stored session's requests had cost, when known.
    pub cost: Option<f64>,
}

impl Start {
    /// A session starting from `messages`, with nothing else carried over.
    pub fn new(messages: Vec<Message>, choices: Choices, mode: Mode, journal: Option<Journal>) -> Start {
        Start { messages, choices, mode, journal, system: None, waiting: Vec::new(), cost: None }
    }
}

/// What a session reads from its workspace when it is set up: the project
/// instructions and the slash commands. Blocking to read: callers use
/// `spawn_blocking` (a slow or hostile file system must not stall anything else).
#[derive(Default)]
pub struct WorkspaceFiles {
    /// AGENTS.md and the like.
    pub instructions: Vec<Instructions>,
    /// Built-in, project and user slash commands.
    pub commands: Vec<SlashCommand>,
    /// The agents defined in Markdown (see [`crate::agents`]).
    pub agents: Vec<crate::agents::AgentSpec>,
    /// The skills (see [`crate::skills`]).
    pub skills: Vec<crate::skills::Skill>,
}

/// The project instructions, slash commands, agents and skills for a session in
/// `cwd` (`extra_agent_dirs`: `[agent] extra_agent_dirs`). Blocking: it
/// reads files.
pub fn workspace_files(cwd: &Path, user_dir: Option<&Path>, extra_agent_dirs: &[String]) -> WorkspaceFiles {
    if !cwd.is_dir() {
        tracing::warn!(path = %cwd.display(), "the session's cwd is not an existing directory");
    }
    let mut skills = crate::skills::discover(cwd, user_dir, crate::platform::folders::home().as_deref());
    let mut commands = commands::available(cwd, user_dir);
    let mut hidden_names = Vec::new();
    for hidden in commands::add_skills(&mut commands, &skills) {
        tracing::warn!(skill = %hidden.name, path = %hidden.path.display(), "a skill has the name of a slash command: /{} runs the command, and the skill is left out", hidden.name);
        hidden_names.push(hidden.name.clone());
    }
    // Listed, the model would be told `/<name>` runs the skill, and the user
    // would find it runs the command.
    skills.retain(|skill| !hidden_names.contains(&skill.name));
    WorkspaceFiles {
        instructions: project_instructions(cwd, user_dir),
        commands,
        agents: crate::agents::defined(cwd, user_dir, extra_agent_dirs),
        skills,
    }
}

/// A session's agents: the built-ins and `defined`, each that names a
/// configured model with its client (one that names another is run on the
/// session's model, with a warning in the log).
pub fn session_agents(config: &Config, defined: Vec<crate::agents::AgentSpec>) -> crate::agents::Agents {
    let mut agents = crate::agents::Agents::with(defined);
    let named: Vec<(String, String)> =
        agents.all().iter().filter_map(|agent| agent.model.clone().map(|model| (agent.name.clone(), model))).collect();
    for (name, model) in named {
        match model_client(config, &model, None) {
            Ok(client) => agents.set_client(&name, Arc::new(client)),
            Err(error) => {
                tracing::warn!(agent = %name, %model, %error, "the agent's model is not usable; it runs on the session's")
            }
        }
    }
    agents
}

/// A fresh session id.
pub fn new_session_id() -> Arc<str> {
    Arc::from(format!("sess_{}", uuid::Uuid::new_v4().simple()))
}

/// The model and reasoning effort a session on model `key` starts with.
pub fn choices_for(config: &Config, key: &str) -> Choices {
    let thought_level = config.models.get(key).and_then(|m| m.reasoning_effort.clone());
    Choices { model_key: key.to_owned(), thought_level }
}

/// The metadata of a session about to be created.
pub fn new_meta(session_id: &str, placement: &Placement, choices: &Choices, mode: Mode) -> SessionMeta {
    SessionMeta {
        session_id: session_id.to_owned(),
        cwd: placement.cwd.clone(),
        additional_directories: placement.additional_directories.clone(),
        title: None,
        created_at: placement.created_at.clone(),
        updated_at: now_rfc3339(),
        model: Some(choices.model_key.clone()),
        mode: Some(mode.id().to_owned()),
        thought_level: choices.thought_level.clone(),
    }
}

/// A session's metadata as it stands now.
pub fn meta_of(session: &Session) -> SessionMeta {
    let choices = session.choices();
    SessionMeta {
        session_id: session.id().to_string(),
        cwd: session.setup().cwd.clone(),
        additional_directories: session.setup().additional_directories.clone(),
        title: session.title(),
        created_at: session.setup().created_at.clone(),
        updated_at: now_rfc3339(),
        model: Some(choices.model_key),
        mode: Some(session.mode().id().to_owned()),
        thought_level: choices.thought_level,
    }
}

/// The model, reasoning effort and mode a stored session goes on with: its
/// own where they are still configured, the defaults otherwise.
pub fn restored_choices(config: &Config, meta: &SessionMeta) -> (Choices, Mode) {
    let model_key = meta
        .model
        .clone()
        .filter(|key| config.models.contains_key(key))
        .unwrap_or_else(|| config.default_model.clone());
    let mut choices = choices_for(config, &model_key);
    if choices.thought_level.is_some() && meta.thought_level.is_some() {
        choices.thought_level = meta.thought_level.clone();
    }
    let mode = meta.mode.as_deref().and_then(Mode::from_id).unwrap_or(Mode::Ask);
    (choices, mode)
}

/// Builds a session: its system prompt from the workspace `instructions`, its
/// history, its MCP servers (connected in the background), and its
/// checkpoints when it is saved in `store`. Its token is a child of `root`.
pub fn open_session(
    config: &Config,
    store: Option<&Arc<Store>>,
    id: Arc<str>,
    placement: Placement,
    start: Start,
    files: &WorkspaceFiles,
    root: &CancellationToken,
) -> Arc<Session> {
    let instructions = &files.instructions;
    let Start { messages, choices, mode, journal, system, waiting, cost } = start;
    let roots: Vec<PathBuf> =
        std::iter::once(placement.cwd.clone()).chain(placement.additional_directories.iter().cloned()).collect();
    let sandbox =
        crate::platform::sandbox::SessionSandbox::new(&config.sandbox, &roots, config.children.supervisor.as_deref())
            .describe_for_model();
    let date = Environment::today();
    // Once per process (on Windows the first call runs the candidates).
    let shell = crate::platform::shell::Shell::for_config(config.children.shell.as_deref()).for_prompt();
    let environment = Environment {
        cwd: &placement.cwd,
        os: std::env::consts::OS,
        date: &date,
        sandbox: sandbox.as_deref(),
        shell: shell.as_deref(),
    };
    let skills = crate::skills::Skills::new(files.skills.clone());
    let prompt = system_prompt_with(&environment, instructions, &skills, system.as_ref());
    let mut conversation = Conversation::new(prompt, messages, journal);
    conversation.cost = cost;
    let setup = SessionSetup {
        cwd: placement.cwd,
        additional_directories: placement.additional_directories,
        mcp_servers: placement.mcp_servers,
        created_at: placement.created_at,
    };
    let session = Arc::new(Session::new(Arc::clone(&id), setup, conversation, choices, mode, root));
    session.steers().restore(waiting);
    let mut agents = session_agents(config, files.agents.clone());
    agents.set_instructions(instructions);
    session.set_agents(agents);
    session.set_skills(skills);
    // Checkpoints live in the session's folder, so they go with it; a
    // session that is not saved keeps none.
    if let Some(store) = store.filter(|_| session.journal().is_some())
        && let Some(dir) = store.session_dir(&id)
    {
        let max_bytes = config.sessions.checkpoint_max_bytes;
        session.set_checkpoints(Arc::new(Checkpoints::new(dir.join("checkpoints"), store.own_paths(), max_bytes)));
    }
    let servers = crate::mcp::merge(placement.mcp, &config.mcp_servers);
    if !servers.is_empty() {
        let hub = crate::mcp::McpHub::start(
            servers,
            config.mcp,
            (session.setup().cwd.clone(), launcher(config, &session)),
            crate::tools::definitions_with(config.tools.fetch),
            session.lifetime(),
        );
        session.set_external_tools(hub);
    }
    session
}

/// How the session's processes are started: its environment rule and sandbox.
pub fn launcher(config: &Config, session: &Session) -> crate::platform::process::Launcher {
    crate::platform::process::Launcher::for_session(&config.children, &config.sandbox, &session.roots())
}

/// A client for configured model `key` with reasoning effort `thought_level`.
pub fn model_client(config: &Config, key: &str, thought_level: Option<&str>) -> Result<ModelClient, ModelError> {
    if config.source == ConfigSource::Unconfigured {
        return Err(ModelError::NotConfigured(format!(
            "no model is configured: create {} (see config.example.toml) or set OPENAI_API_KEY / OPENAI_BASE_URL",
            crate::platform::folders::CONFIG_FILE
        )));
    }
    let model = config
        .models
        .get(key)
        .ok_or_else(|| ModelError::NotConfigured(format!("the model \"{key}\" is not configured")))?;
    if model.api_key_stored && model.api_key.is_none() {
        return Err(ModelError::NotConfigured(format!(
            "model \"{key}\" has no key: the one `lathe setup` stored was forgotten (a logout); run `lathe setup` again"
        )));
    }
    let mut model = model.clone();
    if thought_level.is_some() {
        model.reasoning_effort = thought_level.map(str::to_owned);
    }
    ModelClient::new(Arc::new(model), &config.network)
}

/// The limits a turn's tools run under.
pub fn tool_limits(config: &Config) -> ToolLimits {
    let network = &config.network;
    let defaults = ToolLimits::default();
    // A page's text fits in what the history keeps of a tool result (with
    // room for fetch's header lines), so its head is kept whole.
    let page_room = config.context.max_tool_output_bytes.saturating_sub(1024).max(512);
    ToolLimits {
        fetch_default_bytes: defaults.fetch_default_bytes.min(page_room),
        fetch_max_bytes: defaults.fetch_max_bytes.min(page_room),
        fetch_connect_timeout: network.connect_timeout,
        fetch_timeout: network.response_timeout,
        fetch_idle_timeout: network.stream_idle_timeout,
        ..defaults
    }
}

/// What a turn needs of what outlasts the session: its rule files (their
/// rules read afresh into the policy, so an edit or another session's
/// answer holds from the next prompt) and its hooks; and what the user
/// should be told about them, each said once per session: rule lines that
/// were skipped, a repository's own rule file that lathe ignores.
pub struct Standing {
    /// The session's rule files.
    pub rules: Arc<crate::rules::SessionRules>,
    /// The session's hooks.
    pub hooks: Arc<crate::hooks::SessionHooks>,
    /// Warnings to show: a title and a text each.
    pub notices: Vec<(String, String)>,
}

/// The session's rule files, found at its first use. Blocking work runs on a blocking thread.
pub async fn session_rules(config: &Config, session: &Session) -> Arc<crate::rules::SessionRules> {
    if let Some(rules) = session.rules() {
        return rules;
    }
    let cwd = session.setup().cwd.clone();
    let (data_dir, user_dir) = (config.data_dir.clone(), config.user_dir.clone());
    let found = tokio::task::spawn_blocking(move || {
        crate::rules::SessionRules::for_cwd(&cwd, data_dir.as_deref(), user_dir.as_deref())
    })
    .await
    .unwrap_or_else(|_| crate::rules::SessionRules::nowhere(&session.setup().cwd));
    session.set_rules(Arc::new(found))
}

/// Before a turn: see [`Standing`]. `resumed`: the session has a history
/// (it was loaded or resumed), for `SessionStart`'s `source`.
pub async fn standing(config: &Config, session: &Session, resumed: bool) -> Standing {
    let rules = session_rules(config, session).await;
    let loaded = {
        let rules = Arc::clone(&rules);
        tokio::task::spawn_blocking(move || rules.load()).await.unwrap_or_default()
    };
    crate::sync::lock(session.policy()).set_standing(loaded.project, loaded.user);
    let mut notices = Vec::new();
    if !loaded.warnings.is_empty() {
        let text = format!(
            "lathe skipped what it could not read as a rule; the other rules hold.\n{}",
            loaded.warnings.iter().map(|warning| format!("- {warning}")).collect::<Vec<_>>().join("\n")
        );
        if session.first_time(&text) {
            notices.push(("Some permission rules were skipped".to_owned(), text));
        }
    }
    if let Some(text) = loaded.repository_notice {
        notices.push(("This repository's permission rules are ignored".to_owned(), text));
    }
    let hooks = match session.hooks() {
        Some(hooks) => hooks,
        None => {
            let transcript = session
                .journal()
                .and(config.data_dir.as_ref())
                .map(|dir| dir.join("sessions").join(session.id().as_ref()).join("log.jsonl"));
            let common = crate::hooks::Common {
                session_id: session.id().to_string(),
                transcript_path: transcript,
                cwd: session.setup().cwd.clone(),
                root: rules.root.clone(),
            };
            let hooks = crate::hooks::SessionHooks::new(&config.hooks, common, rules.project_dir.clone(), resumed);
            session.set_hooks(Arc::new(hooks))
        }
    };
    Standing { rules, hooks, notices }
}

/// `/permissions`: the "always" answers of the session, then the project's
/// and the user's rules, as the user reads them.
pub async fn permissions_list(config: &Config, session: &Session) -> String {
    let rules = session_rules(config, session).await;
    let here = crate::sync::lock(session.policy()).session_rules();
    let listed = tokio::task::spawn_blocking(move || crate::rules::listing(Some((&here.0, &here.1)), &rules)).await;
    let listed = listed.unwrap_or_else(|err| format!("The rules could not be read: {err}"));
    format!(
        "{listed}\nRemove a kept rule with `lathe permissions rm <id>` in a terminal, or edit its file; an \
         answer for this session lasts until the session ends."
    )
}

/// What a prompt asks for.
pub enum Request {
    /// A turn with the model.
    Turn(Vec<UserPart>),
    /// A built-in command lathe answers itself (`/compact`, `/clear`,
    /// `/model`, `/mode`), with its arguments.
    Builtin(CommandKind, String),
    /// What lathe answers at once, without a turn (a skill that cannot be
    /// read now, and why).
    Reply(String),
}

/// A prompt that is a slash command becomes what the command does: a
/// built-in, a command file's prompt, or one of the session's `skills` with
/// its instructions loaded. The files are read on a blocking thread: a
/// workspace's files may be slow (a network mount), and the turn's task
/// must stay responsive.
pub async fn classify(
    cwd: &Path,
    user_dir: Option<&Path>,
    skills: &crate::skills::Skills,
    parts: Vec<UserPart>,
) -> Request {
    let [UserPart::Text { text }] = parts.as_slice() else { return Request::Turn(parts) };
    let Some((name, arguments)) = commands::parse_invocation(text) else { return Request::Turn(parts) };
    let (cwd, user_dir) = (cwd.to_path_buf(), user_dir.map(Path::to_path_buf));
    let available = match tokio::task::spawn_blocking(move || commands::available(&cwd, user_dir.as_deref())).await {
        Ok(available) => available,
        Err(err) => {
            tracing::warn!(%err, "reading the slash commands failed; sending the prompt as it is");
            return Request::Turn(parts);
        }
    };
    match available.into_iter().find(|command| command.name == name).map(|command| command.kind) {
        Some(CommandKind::Custom { template }) => {
            Request::Turn(vec![UserPart::Text { text: commands::expand(&template, arguments) }])
        }
        Some(CommandKind::Init) => {
            let mut text = INIT_PROMPT.trim().to_owned();
            if !arguments.is_empty() {
                text.push_str(&format!("\n\nThe user added: {arguments}"));
            }
            Request::Turn(vec![UserPart::Text { text }])
        }
        Some(CommandKind::Skill) | None => match skills.get(name).cloned() {
            Some(skill) => {
                let arguments = arguments.to_owned();
                match tokio::task::spawn_blocking(move || crate::skills::load(&skill, &arguments)).await {
                    Ok(Ok(text)) => Request::Turn(vec![UserPart::Text { text }]),
                    Ok(Err(why)) => Request::Reply(why),
                    Err(err) => Request::Reply(format!("The skill could not be read: {err}.")),
                }
            }
            // Not a command lathe knows (a path, say): an ordinary prompt.
            None => Request::Turn(parts),
        },
        Some(kind) => Request::Builtin(kind, arguments.to_owned()),
    }
}

/// A title from the first prompt: its first non-empty line, cut at a word
/// boundary.
pub fn derive_title(parts: &[UserPart]) -> Option<String> {
    let text = parts.iter().find_map(|part| match part {
        UserPart::Text { text } => text.lines().map(str::trim).find(|line| !line.is_empty()),
        UserPart::Image { .. } => None,
    })?;
    if text.chars().count() <= TITLE_CHARS {
        return Some(text.to_owned());
    }
    let cut: String = text.chars().take(TITLE_CHARS).collect();
    let cut = match cut.rfind(' ') {
        Some(at) if at > TITLE_CHARS / 2 => &cut[..at],
        _ => &cut,
    };
    Some(format!("{}…", cut.trim_end()))
}

/// A mode named by its id (`/mode`, `--mode`, `session/set_mode`), or why
/// not, naming the modes there are.
pub fn parse_mode(id: &str) -> Result<Mode, String> {
    Mode::from_id(id).ok_or_else(|| {
        let known: Vec<&str> = Mode::ALL.iter().map(|m| m.id()).collect();
        format!("unknown mode \"{id}\" (available: {})", known.join(", "))
    })
}

/// `/model` without a name: the configured models, `current` marked.
pub fn model_list(config: &Config, current: &str) -> String {
    let list: Vec<String> = config
        .models
        .values()
        .map(|m| {
            let marker = if m.key == current { " (current)" } else { "" };
            format!("- `{}`: {} at {}{marker}", m.key, m.model, crate::redact::url(&m.base_url))
        })
        .collect();
    format!("Configured models:\n{}\n\nSwitch with `/model <name>`.", list.join("\n"))
}

/// `/mode` without a name: the modes, `current` marked.
pub fn mode_list(current: Mode) -> String {
    let list: Vec<String> = Mode::ALL
        .iter()
        .map(|m| {
            let marker = if *m == current { " (current)" } else { "" };
            format!("- `{}`: {}{marker}", m.id(), m.description())
        })
        .collect();
    format!("Modes:\n{}\n\nSwitch with `/mode <name>`.", list.join("\n"))
}

/// What `/mode` answers once it switched to `mode`.
pub fn mode_switched(mode: Mode) -> String {
    format!("Switched to {} mode: {}.", mode.name(), mode.description().to_lowercase())
}

/// `/clear`: the model sees nothing of the earlier messages any more (the
/// journal keeps them); the reply.
pub fn clear(turn: &mut TurnGuard) -> String {
    turn.conversation().reset(Vec::new());
    "Started a fresh conversation: the model no longer sees the earlier messages. \
     They stay in this session's history."
        .to_owned()
}

/// `/compact` with `client`: the reply, or `None` when the turn was
/// cancelled. The summary request offers the session's own tools, so it
/// shares the prefix (and the cache) of the session's requests.
pub async fn compact(
    turn: &mut TurnGuard,
    client: &ModelClient,
    events: &dyn EventSink,
    config: &Config,
) -> Result<Option<String>, TurnError> {
    let before = turn.conversation().messages().len();
    let token = turn.token().clone();
    let offered = turn.session().external_tools().map(|external| external.definitions());
    let tools = offered.as_deref().unwrap_or(crate::tools::definitions_with(config.tools.fetch));
    let session = Arc::clone(turn.session());
    let compactor = Compactor { client, events, cancel: &token, tools, agents: session.agents() };
    match compactor.compact(turn.conversation(), None).await {
        Compaction::Done { .. } => Ok(Some(format!("Compacted {before} messages into a summary."))),
        Compaction::NothingToDo => Ok(Some("There is nothing to compact yet.".to_owned())),
        Compaction::Cancelled => Ok(None),
        Compaction::Failed(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Vec<UserPart> {
        vec![UserPart::Text { text: t.into() }]
    }

    /// A skill named like a slash command is left out of the session's
    /// skills (the system prompt would tell the model `/<name>` runs it; it
    /// runs the command), and the others stay.
    #[test]
    fn a_skill_a_command_hides_is_not_listed() {
        let project = tempfile::tempdir().unwrap();
        let write = |path: &str, text: &str| {
            let path = project.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(".lathe/commands/review.md", "Review the diff.");
        write(".lathe/skills/review/SKILL.md", "---\nname: review\ndescription: Reviews\n---\nR.");
        write(".lathe/skills/pdf/SKILL.md", "---\nname: pdf\ndescription: Fills PDFs\n---\nP.");
        write(".lathe/skills/compact/SKILL.md", "---\nname: compact\ndescription: Compacts\n---\nC.");
        let files = workspace_files(project.path(), None, &[]);
        let names: Vec<&str> = files.skills.iter().map(|skill| skill.name.as_str()).collect();
        assert!(names.contains(&"pdf"), "{names:?}");
        assert!(!names.contains(&"review") && !names.contains(&"compact"), "{names:?}");
        let review = files.commands.iter().filter(|command| command.name == "review").count();
        assert_eq!(review, 1);
    }

    #[test]
    fn titles() {
        assert_eq!(derive_title(&text("\n  Fix the parser bug  \nmore")), Some("Fix the parser bug".into()));
        let long = "Please refactor the configuration loader so that it reports every error with its line number";
        let title = derive_title(&text(long)).unwrap();
        assert!(title.ends_with('…') && title.chars().count() <= TITLE_CHARS + 1, "{title}");
        assert_eq!(derive_title(&[]), None);
    }
}
