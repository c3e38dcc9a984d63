//! The tools the model can call: their definitions (names, JSON schemas,
//! descriptions from `prompts/tools/<name>.md`, or in the lean profile
//! `prompts/tools/lean/<name>.md` and schemas without per-field
//! descriptions: the same tools, for small context windows), how a call is described
//! before it runs (title, kind, locations, what it touches), and running it.
//!
//! A tool is `(arguments, context, token) -> outcome`. Tools know nothing of
//! ACP or the model API: file and terminal access goes through the [`Host`]
//! seam (local disk and processes, or the editor's `fs/*` and `terminal/*`
//! methods, chosen by `acp`), and anything the user should see while a tool
//! runs goes out through [`ToolContext::progress`]. Every wait inside a tool
//! honours [`ToolContext::cancel`]; a cancelled tool returns promptly with
//! [`OutcomeStatus::Cancelled`] after cleaning up (killing its processes,
//! releasing terminals).
//!
//! Errors a model can act on (a missing file, a bad argument, a non-unique
//! edit) are outcomes with [`OutcomeStatus::Failed`] and a message for the
//! model, never a failed turn.
//!
//! Tools that live outside lathe (MCP servers) come in through the
//! [`ExternalTools`] seam: the turn offers their definitions next to the
//! built-ins and hands them the calls no built-in answers. This module does
//! not know where they come from.

pub mod edit_match;
pub mod endings;
pub mod fetch;
pub mod fs;
pub mod html;
pub mod lenient;
pub mod local;
pub mod paths;
pub mod search;
pub mod shell;
pub mod versions;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::PromptProfile;
use crate::platform::authority::Target;
pub use crate::platform::process::Launcher;
use crate::tool_definition::ToolDefinition;

/// Every built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    /// Read a text file.
    ReadFile,
    /// Create or overwrite a file.
    WriteFile,
    /// Replace exact strings in a file.
    EditFile,
    /// List a directory.
    ListDirectory,
    /// Find files by glob pattern.
    Glob,
    /// Search file contents by regex.
    Grep,
    /// Run a shell command.
    Shell,
    /// Record the task plan.
    UpdatePlan,
    /// Read a web page.
    Fetch,
    /// Ask the user a question (answered by the turn, see [`Interaction`]).
    AskUser,
    /// Ask the user to run the plan and leave plan mode (answered by the
    /// turn; offered only once the session has been in plan mode, see
    /// [`plan_definition`]).
    ExitPlanMode,
    /// Hand a job to a sub-agent (run by the turn, see
    /// [`PreparedCall::task`]; never offered to a sub-agent).
    Task,
}

impl Tool {
    /// All tools, in the order they are offered to the model
    /// (`exit_plan_mode` only in plan mode, after everything else).
    pub const ALL: [Tool; 12] = [
        Tool::ReadFile,
        Tool::WriteFile,
        Tool::EditFile,
        Tool::ListDirectory,
        Tool::Glob,
        Tool::Grep,
        Tool::Shell,
        Tool::UpdatePlan,
        Tool::Fetch,
        Tool::AskUser,
        Tool::Task,
        Tool::ExitPlanMode,
    ];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            Tool::ReadFile => "read_file",
            Tool::WriteFile => "write_file",
            Tool::EditFile => "edit_file",
            Tool::ListDirectory => "list_directory",
            Tool::Glob => "glob",
            Tool::Grep => "grep",
            Tool::Shell => "shell",
            Tool::UpdatePlan => "update_plan",
            Tool::Fetch => "fetch",
            Tool::AskUser => "ask_user",
            Tool::ExitPlanMode => "exit_plan_mode",
            Tool::Task => "task",
        }
    }

    /// The tool with this name.
    pub fn from_name(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// What kind of work it does, for the editor.
    pub fn kind(self) -> ToolKind {
        match self {
            Tool::ReadFile => ToolKind::Read,
            Tool::WriteFile | Tool::EditFile => ToolKind::Edit,
            Tool::ListDirectory | Tool::Glob | Tool::Grep => ToolKind::Search,
            Tool::Shell => ToolKind::Execute,
            Tool::UpdatePlan | Tool::ExitPlanMode => ToolKind::Think,
            Tool::Fetch => ToolKind::Fetch,
            Tool::AskUser | Tool::Task => ToolKind::Other,
        }
    }

    fn description(self) -> &'static str {
        match self {
            Tool::ReadFile => include_str!("../../prompts/tools/read_file.md"),
            Tool::WriteFile => include_str!("../../prompts/tools/write_file.md"),
            Tool::EditFile => include_str!("../../prompts/tools/edit_file.md"),
            Tool::ListDirectory => include_str!("../../prompts/tools/list_directory.md"),
            Tool::Glob => include_str!("../../prompts/tools/glob.md"),
            Tool::Grep => include_str!("../../prompts/tools/grep.md"),
            Tool::Shell => include_str!("../../prompts/tools/shell.md"),
            Tool::UpdatePlan => include_str!("../../prompts/tools/update_plan.md"),
            Tool::Fetch => include_str!("../../prompts/tools/fetch.md"),
            Tool::AskUser => include_str!("../../prompts/tools/ask_user.md"),
            Tool::ExitPlanMode => include_str!("../../prompts/tools/exit_plan_mode.md"),
            Tool::Task => include_str!("../../prompts/tools/task.md"),
        }
    }

    fn lean_description(self) -> &'static str {
        match self {
            Tool::ReadFile => include_str!("../../prompts/tools/lean/read_file.md"),
            Tool::WriteFile => include_str!("../../prompts/tools/lean/write_file.md"),
            Tool::EditFile => include_str!("../../prompts/tools/lean/edit_file.md"),
            Tool::ListDirectory => include_str!("../../prompts/tools/lean/list_directory.md"),
            Tool::Glob => include_str!("../../prompts/tools/lean/glob.md"),
            Tool::Grep => include_str!("../../prompts/tools/lean/grep.md"),
            Tool::Shell => include_str!("../../prompts/tools/lean/shell.md"),
            Tool::UpdatePlan => include_str!("../../prompts/tools/lean/update_plan.md"),
            Tool::Fetch => include_str!("../../prompts/tools/lean/fetch.md"),
            Tool::AskUser => include_str!("../../prompts/tools/lean/ask_user.md"),
            Tool::ExitPlanMode => include_str!("../../prompts/tools/lean/exit_plan_mode.md"),
            Tool::Task => include_str!("../../prompts/tools/lean/task.md"),
        }
    }

    fn parameters(self) -> Value {
        match self {
            Tool::ReadFile => fs::read_file_schema(),
            Tool::WriteFile => fs::write_file_schema(),
            Tool::EditFile => fs::edit_file_schema(),
            Tool::ListDirectory => search::list_directory_schema(),
            Tool::Glob => search::glob_schema(),
            Tool::Grep => search::grep_schema(),
            Tool::Shell => shell::shell_schema(),
            Tool::UpdatePlan => plan_schema(),
            Tool::Fetch => fetch::fetch_schema(),
            Tool::AskUser => ask_user_schema(),
            Tool::ExitPlanMode => exit_plan_schema(),
            Tool::Task => task_schema(),
        }
    }

    /// The definition of this tool in `profile` (`task`'s lists the built-in agents).
    fn definition(self, profile: PromptProfile) -> ToolDefinition {
        if self == Tool::Task {
            return task_definition(profile, &crate::agents::Agents::builtin());
        }
        match profile {
            PromptProfile::Standard => {
                ToolDefinition::function(self.name(), self.description().trim(), self.parameters())
            }
            PromptProfile::Lean => {
                let mut parameters = self.parameters();
                strip_descriptions(&mut parameters);
                ToolDefinition::function(self.name(), self.lean_description().trim(), parameters)
            }
        }
    }
}

/// The definition of `task` in `profile`, its description listing `agents`
/// (sorted, so byte-stable).
pub fn task_definition(profile: PromptProfile, agents: &crate::agents::Agents) -> ToolDefinition {
    let (text, mut parameters) = match profile {
        PromptProfile::Standard => (Tool::Task.description(), Tool::Task.parameters()),
        PromptProfile::Lean => (Tool::Task.lean_description(), Tool::Task.parameters()),
    };
    if profile == PromptProfile::Lean {
        strip_descriptions(&mut parameters);
    }
    let description = format!("{}\n\nAgents:\n{}", text.trim(), agents.listing());
    ToolDefinition::function(Tool::Task.name(), &description, parameters)
}

/// The definitions of every built-in tool, built once so that every request
/// carries byte-identical tool definitions.
pub fn definitions() -> &'static [ToolDefinition] {
    definitions_for(PromptProfile::Standard, true)
}

/// The standard definitions of the built-in tools offered when `fetch` is on
/// or off (`[tools] fetch`).
pub fn definitions_with(fetch: bool) -> &'static [ToolDefinition] {
    definitions_for(PromptProfile::Standard, fetch)
}

/// The definitions of the built-in tools in `profile`, with or without
/// `fetch`, built once each.
pub fn definitions_for(profile: PromptProfile, fetch: bool) -> &'static [ToolDefinition] {
    static BUILT: [OnceLock<Vec<ToolDefinition>>; 4] = [const { OnceLock::new() }; 4];
    let slot = match (profile, fetch) {
        (PromptProfile::Standard, true) => 0,
        (PromptProfile::Standard, false) => 1,
        (PromptProfile::Lean, true) => 2,
        (PromptProfile::Lean, false) => 3,
    };
    BUILT[slot].get_or_init(|| {
        Tool::ALL
            .into_iter()
            .filter(|tool| (fetch || *tool != Tool::Fetch) && *tool != Tool::ExitPlanMode)
            .map(|tool| tool.definition(profile))
            .collect()
    })
}

/// The definition of `exit_plan_mode` in `profile`. It is offered after
/// every other tool, from the first request a session makes in plan mode
/// until the session ends (so leaving plan mode changes nothing in the
/// request's prefix: the request that goes on after the plan was approved
/// hits the provider's prompt cache), and never before.
pub fn plan_definition(profile: PromptProfile) -> &'static ToolDefinition {
    static BUILT: [OnceLock<ToolDefinition>; 2] = [const { OnceLock::new() }; 2];
    let slot = match profile {
        PromptProfile::Standard => 0,
        PromptProfile::Lean => 1,
    };
    BUILT[slot].get_or_init(|| Tool::ExitPlanMode.definition(profile))
}

/// `offered` (built-in definitions, possibly with others after them) in
/// `profile`: the built-ins are swapped for that profile's, the rest kept.
pub fn for_profile(offered: &[ToolDefinition], profile: PromptProfile) -> std::borrow::Cow<'_, [ToolDefinition]> {
    use std::borrow::Cow;
    match profile {
        PromptProfile::Standard => Cow::Borrowed(offered),
        PromptProfile::Lean => {
            for fetch in [true, false] {
                if std::ptr::eq(offered, definitions_for(PromptProfile::Standard, fetch)) {
                    return Cow::Borrowed(definitions_for(profile, fetch));
                }
            }
            let lean = definitions_for(profile, true);
            let plan = plan_definition(profile);
            Cow::Owned(
                offered
                    .iter()
                    .map(|definition| {
                        let built_in =
                            lean.iter().chain(std::iter::once(plan)).find(|lean| lean.name() == definition.name());
                        built_in.unwrap_or(definition).clone()
                    })
                    .collect(),
            )
        }
    }
}

/// Removes the `description` of a JSON schema and of every schema nested in
/// it (`properties`, `items`); a property *named* `description` stays.
fn strip_descriptions(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else { return };
    object.remove("description");
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        properties.values_mut().for_each(strip_descriptions);
    }
    if let Some(items) = object.get_mut("items") {
        strip_descriptions(items);
    }
}

/// What kind of work a call does; editors pick icons and grouping from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Reading files or data.
    Read,
    /// Changing files.
    Edit,
    /// Removing files.
    Delete,
    /// Moving or renaming files.
    Move,
    /// Searching.
    Search,
    /// Running commands.
    Execute,
    /// Internal reasoning or planning.
    Think,
    /// Fetching external data.
    Fetch,
    /// Anything else.
    Other,
}

/// A file (and line) a call touches, so editors can follow along.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Absolute path.
    pub path: PathBuf,
    /// 1-based line.
    pub line: Option<u32>,
}

/// What a call touches, for the permission policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Touches nothing on the machine.
    Nothing,
    /// Reads these targets, judged on where they really lead (see [`crate::platform::authority`]).
    Read(Vec<Target>),
    /// Creates or changes these targets, judged on where they really lead.
    Write(Vec<Target>),
    /// Runs this shell command in this directory.
    Execute {
        /// The command line.
        command: String,
        /// Its working directory.
        cwd: PathBuf,
        /// Whether the model asked to run it outside the sandbox.
        outside: bool,
    },
    /// Calls a tool of an external (MCP) server. Such a tool has no paths to
    /// judge; the server's `readOnlyHint` says whether it only reads.
    External {
        /// The server's name.
        server: String,
        /// The tool's name on that server.
        tool: String,
        /// Whether the server says the tool changes nothing.
        read_only: bool,
    },
    /// Fetches this URL (and whatever it redirects to).
    Fetch {
        /// The URL, as it will be fetched.
        url: String,
        /// Its host as permission rules name it (`docs.rs`, `localhost:8080`).
        host: String,
        /// Whether the host is visibly local (an IP literal of a local or
        /// private block, or `localhost`).
        local: bool,
    },
}

/// How a call is shown before it runs, and what it touches.
#[derive(Debug, Clone, PartialEq)]
pub struct Description {
    /// A human title, e.g. "Read src/main.rs (lines 10-40)".
    pub title: String,
    /// Files it touches.
    pub locations: Vec<Location>,
    /// What the permission policy must judge.
    pub access: Access,
    /// What the user is shown when asked for permission (e.g. the diff of an edit).
    pub preview: Vec<DisplayContent>,
}

/// A call whose arguments parsed, ready to describe and run.
#[derive(Debug, Clone)]
pub struct PreparedCall {
    /// Which tool.
    pub tool: Tool,
    /// How it is shown and what it touches.
    pub description: Description,
    args: Args,
}

#[derive(Debug, Clone)]
enum Args {
    ReadFile(fs::ReadFileArgs),
    WriteFile(fs::WriteFileArgs),
    EditFile(fs::EditFileArgs),
    ListDirectory(search::ListDirectoryArgs),
    Glob(search::GlobArgs),
    Grep(search::GrepArgs),
    Shell(shell::ShellArgs),
    UpdatePlan(PlanArgs),
    Fetch(fetch::FetchArgs),
    AskUser(AskUserArgs),
    ExitPlanMode(ExitPlanArgs),
    Task(TaskArgs),
}

/// A call the turn answers itself by asking the user, instead of running it
/// ([`PreparedCall::interaction`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interaction {
    /// `ask_user`: the model's question.
    Ask(AskUserArgs),
    /// `exit_plan_mode`: the plan, in Markdown, to ask the user to run.
    ExitPlan(String),
}

/// The arguments of `ask_user`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AskUserArgs {
    /// The question.
    pub question: String,
    /// The answers to pick from.
    #[serde(default, alias = "options")]
    pub choices: Vec<String>,
    /// Whether the user may answer in their own words.
    #[serde(default)]
    pub free_text: bool,
}

/// The arguments of `task`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TaskArgs {
    /// A few words the user sees.
    #[serde(default)]
    pub description: String,
    /// The whole job.
    #[serde(alias = "task", alias = "instructions")]
    pub prompt: String,
    /// The agent to run it (the built-in `explore` when absent).
    #[serde(default, alias = "subagent_type", alias = "agent_type")]
    pub agent: Option<String>,
}

fn task_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "description": { "type": "string", "description": "3-6 words for the user." },
            "prompt": { "type": "string", "description": "The whole job, self-contained." },
            "agent": { "type": "string" }
        },
        "required": ["description", "prompt"]
    })
}

#[derive(Debug, Clone, Deserialize)]
struct ExitPlanArgs {
    #[serde(alias = "markdown", alias = "content")]
    plan: String,
}

fn ask_user_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "question": { "type": "string" },
            "choices": { "type": "array", "items": { "type": "string" }, "description": "Short answers to pick from." },
            "free_text": { "type": "boolean", "description": "The user may also write their own answer." }
        },
        "required": ["question"]
    })
}

fn exit_plan_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "plan": { "type": "string", "description": "The whole plan, in Markdown." }
        },
        "required": ["plan"]
    })
}

/// How long a cancelled turn waits for a tool to wind down (kill its
/// processes, withdraw its requests) before it stops waiting for it.
pub const CANCEL_GRACE: Duration = Duration::from_millis(100);

/// How long a cancelled turn waits for a local file write that has started:
/// it runs to its end whatever happens (see [`Host::write_finishes_once_started`]),
/// in milliseconds unless the disk is in trouble, and waiting for it is what
/// lets the model hear what happened to the file. Bounded, so a hung disk
/// cannot keep the turn from answering.
pub const STARTED_WRITE_GRACE: Duration = Duration::from_secs(5);

impl PreparedCall {
    /// Tells a `shell` call whether it runs in the session's sandbox (see
    /// [`crate::permission::Policy::runs_sandboxed`]). Other calls start no
    /// process and ignore it.
    pub fn set_sandboxed(&mut self, sandboxed: bool) {
        if let Args::Shell(args) = &mut self.args {
            args.sandboxed = sandboxed;
        }
    }

    /// How long a cancelled turn waits for this call to finish once the
    /// token is cancelled: [`STARTED_WRITE_GRACE`] for a write or an edit
    /// that `host` does locally (it may be mid-write, and a call that had
    /// not started writing returns at once anyway), else [`CANCEL_GRACE`].
    pub fn cancel_grace(&self, host: &dyn Host) -> Duration {
        match self.tool {
            Tool::WriteFile | Tool::EditFile if host.write_finishes_once_started() => STARTED_WRITE_GRACE,
            Tool::ReadFile
            | Tool::WriteFile
            | Tool::EditFile
            | Tool::ListDirectory
            | Tool::Glob
            | Tool::Grep
            | Tool::Shell
            | Tool::UpdatePlan
            | Tool::Fetch
            | Tool::AskUser
            | Tool::ExitPlanMode
            | Tool::Task => CANCEL_GRACE,
        }
    }

    /// Tells a `fetch` call which hosts the user allowed, so that it may
    /// reach their local addresses (see [`fetch::HostTrust`]). Other calls
    /// reach no host and ignore it.
    pub fn set_host_trust(&mut self, trust: fetch::HostTrust) {
        match &mut self.args {
            Args::Fetch(args) => args.set_trust(trust),
            Args::ReadFile(_)
            | Args::WriteFile(_)
            | Args::EditFile(_)
            | Args::ListDirectory(_)
            | Args::Glob(_)
            | Args::Grep(_)
            | Args::Shell(_)
            | Args::UpdatePlan(_)
            | Args::AskUser(_)
            | Args::ExitPlanMode(_)
            | Args::Task(_) => {}
        }
    }

    /// The question this call puts to the user, for the tools the turn
    /// answers itself (`ask_user`, `exit_plan_mode`); `None` for the others.
    pub fn interaction(&self) -> Option<Interaction> {
        match &self.args {
            Args::AskUser(args) => Some(Interaction::Ask(args.clone())),
            Args::ExitPlanMode(args) => Some(Interaction::ExitPlan(args.plan.clone())),
            Args::ReadFile(_)
            | Args::WriteFile(_)
            | Args::EditFile(_)
            | Args::ListDirectory(_)
            | Args::Glob(_)
            | Args::Grep(_)
            | Args::Shell(_)
            | Args::UpdatePlan(_)
            | Args::Fetch(_)
            | Args::Task(_) => None,
        }
    }

    /// The job of a `task` call, which the turn runs as a sub-agent;
    /// `None` for the other tools.
    pub fn task(&self) -> Option<&TaskArgs> {
        match &self.args {
            Args::Task(args) => Some(args),
            Args::ReadFile(_)
            | Args::WriteFile(_)
            | Args::EditFile(_)
            | Args::ListDirectory(_)
            | Args::Glob(_)
            | Args::Grep(_)
            | Args::Shell(_)
            | Args::UpdatePlan(_)
            | Args::Fetch(_)
            | Args::AskUser(_)
            | Args::ExitPlanMode(_) => None,
        }
    }
}

/// What the editor shows for a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisplayContent {
    /// Text (Markdown).
    Text(String),
    /// A file change.
    Diff {
        /// Absolute path.
        path: PathBuf,
        /// The old text; `None` for a new file.
        old_text: Option<String>,
        /// The new text.
        new_text: String,
    },
    /// A live terminal created through the editor.
    Terminal(String),
    /// An image (an MCP tool's result).
    Image {
        /// Base64-encoded image data.
        data: String,
        /// Its MIME type, e.g. `image/png`.
        mime_type: String,
    },
    /// A link to a resource the editor may open.
    ResourceLink {
        /// Where it is.
        uri: String,
        /// Its name.
        name: String,
    },
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeStatus {
    /// It did what was asked.
    Completed,
    /// It could not; the model is told why.
    Failed,
    /// The turn was cancelled while it ran.
    Cancelled,
}

/// The result of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// How it ended.
    pub status: OutcomeStatus,
    /// What goes back to the model as the tool result.
    pub for_model: String,
    /// What the editor shows.
    pub content: Vec<DisplayContent>,
    /// Files touched, when known only after running (replaces the description's).
    pub locations: Option<Vec<Location>>,
    /// Structured output for the editor's raw view.
    pub raw_output: Option<Value>,
}

impl ToolOutcome {
    /// A success whose model text is also shown to the user.
    pub fn completed(text: impl Into<String>) -> Self {
        let text = text.into();
        Self {
            status: OutcomeStatus::Completed,
            content: vec![DisplayContent::Text(text.clone())],
            for_model: text,
            locations: None,
            raw_output: None,
        }
    }

    /// A failure the model can read (and the user sees).
    pub fn failed(message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            status: OutcomeStatus::Failed,
            content: vec![DisplayContent::Text(message.clone())],
            for_model: message,
            locations: None,
            raw_output: None,
        }
    }

    /// The turn was cancelled while this call ran.
    pub fn cancelled() -> Self {
        Self {
            status: OutcomeStatus::Cancelled,
            for_model: CANCELLED_RESULT.to_owned(),
            content: vec![DisplayContent::Text("Cancelled.".to_owned())],
            locations: None,
            raw_output: None,
        }
    }
}

/// The tool result recorded for a call the user cancelled.
pub const CANCELLED_RESULT: &str = "Cancelled by the user before this tool call finished.";

/// Something a running tool wants the user to see now.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A terminal was created for this call; show it live.
    Terminal(String),
    /// The model's plan, complete.
    Plan(Vec<PlanItem>),
}

/// One entry of the model's plan.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PlanItem {
    /// What to do.
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: PlanStatus,
    /// `high`, `medium` or `low`.
    #[serde(default)]
    pub priority: PlanPriority,
}

/// Progress of a plan entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
}

/// Importance of a plan entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PlanPriority {
    /// Important.
    High,
    /// Normal.
    #[default]
    Medium,
    /// Nice to have.
    Low,
}

#[derive(Debug, Clone, Deserialize)]
struct PlanArgs {
    #[serde(alias = "entries", alias = "todos", alias = "items")]
    plan: Vec<PlanItem>,
}

fn plan_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "plan": {
                "type": "array",
                "description": "The complete plan: every step, in order, each time.",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": { "type": "string", "description": "The step, in a few words." },
                        "status": { "type": "string", "enum": ["pending", "in_progress", "completed"] },
                        "priority": { "type": "string", "enum": ["high", "medium", "low"] }
                    },
                    "required": ["content", "status"]
                }
            }
        },
        "required": ["plan"]
    })
}

/// Limits that keep tool output and run time bounded.
#[derive(Debug, Clone)]
pub struct ToolLimits {
    /// Lines `read_file` returns when no limit is given.
    pub read_default_lines: usize,
    /// Characters of one line `read_file` shows before cutting it.
    pub read_max_line_chars: usize,
    /// Bytes of file text a read returns at most.
    pub read_max_bytes: usize,
    /// Entries `list_directory` and `glob` return at most.
    pub max_listed_entries: usize,
    /// Matching lines `grep` returns at most.
    pub max_grep_matches: usize,
    /// Time a shell command may run when the model gives no timeout.
    pub shell_default_timeout: Duration,
    /// Longest timeout the model may ask for.
    pub shell_max_timeout: Duration,
    /// Bytes of shell output kept (head and tail).
    pub shell_output_bytes: usize,
    /// Bytes of page text `fetch` returns when the model gives no `max_bytes`.
    pub fetch_default_bytes: usize,
    /// Most bytes of page text `fetch` returns.
    pub fetch_max_bytes: usize,
    /// Most bytes of HTML `fetch` reads before converting it; the rest of
    /// the page is never downloaded.
    pub fetch_max_html_bytes: usize,
    /// Time `fetch` gets to connect (`[network] connect_timeout_secs`).
    pub fetch_connect_timeout: Duration,
    /// Time a whole fetch may take, redirects and body included
    /// (`[network] response_timeout_secs`).
    pub fetch_timeout: Duration,
    /// Longest silence tolerated while a page arrives
    /// (`[network] stream_idle_timeout_secs`).
    pub fetch_idle_timeout: Duration,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            read_default_lines: 2000,
            read_max_line_chars: 2000,
            read_max_bytes: 256 * 1024,
            max_listed_entries: 1000,
            max_grep_matches: 500,
            shell_default_timeout: Duration::from_secs(120),
            shell_max_timeout: Duration::from_secs(1800),
            shell_output_bytes: 32 * 1024,
            fetch_default_bytes: 32 * 1024,
            fetch_max_bytes: 40 * 1024,
            fetch_max_html_bytes: 2 * 1024 * 1024,
            fetch_connect_timeout: Duration::from_secs(30),
            fetch_timeout: Duration::from_secs(300),
            fetch_idle_timeout: Duration::from_secs(300),
        }
    }
}

/// What a running tool may use.
pub struct ToolContext<'a> {
    /// The session's working directory (relative paths resolve against it).
    pub cwd: &'a Path,
    /// The session roots: cwd and the additional directories.
    pub roots: &'a [PathBuf],
    /// Files and terminals.
    pub host: &'a dyn Host,
    /// Cancelled when the user cancels the turn.
    pub cancel: &'a CancellationToken,
    /// Output and time limits.
    pub limits: &'a ToolLimits,
    /// Things the user should see while the tool runs.
    pub progress: &'a (dyn Fn(Progress) + Send + Sync),
    /// The file versions the model has seen this session.
    pub seen: &'a versions::FileVersions,
}

/// Why the host could not do something; the message is for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The file does not exist.
    #[error("{0}: no such file")]
    NotFound(String),
    /// Anything else, said in one sentence.
    #[error("{0}")]
    Other(String),
}

/// File and terminal access: the local machine, or the editor when it
/// offers `fs/*` and `terminal/*`. Files are named by the [`Target`] the
/// permission policy judged, and touched there (see [`crate::platform::authority`]).
pub trait Host: Send + Sync {
    /// Reads a whole text file (the editor's unsaved buffer when the editor
    /// serves reads).
    fn read_text_file<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<String, HostError>>;
    /// Writes a whole text file, creating it and its parent directories.
    /// Local writes are atomic (temporary file, then rename), keeping permissions.
    fn write_text_file<'a>(&'a self, target: &'a Target, content: &'a str) -> BoxFuture<'a, Result<(), HostError>>;
    /// Whether reads go to the editor rather than the disk.
    fn reads_via_client(&self) -> bool;
    /// Whether writes change the file in place (the editor writes it) rather
    /// than replacing it by rename; such a write to a file with other hard
    /// links changes all of them, so it is judged outside the roots.
    fn writes_in_place(&self) -> bool;
    /// Whether a write, once started, runs to its end even if its future is
    /// dropped (a local write: milliseconds of disk work, no request to
    /// withdraw). Such a write is not raced against cancellation: the tool
    /// waits for it and reports what happened to the file. An editor's write
    /// is a request that cancellation withdraws, so the default is `false`.
    fn write_finishes_once_started(&self) -> bool {
        false
    }
    /// The editor's terminals, when it offers them.
    fn terminals(&self) -> Option<&dyn Terminals>;
    /// How local processes are started (environment, supervision). The
    /// default starts them unsupervised, removing only `OPENAI_API_KEY`.
    fn launcher(&self) -> &Launcher {
        Launcher::unsupervised()
    }
    /// What watches the roots around a shell command (checkpoints: the
    /// files a command changes); `None` when nothing does.
    fn command_watch(&self) -> Option<&dyn CommandWatch> {
        None
    }
}

/// Told before and after each shell command a turn runs, to notice the files
/// the command changed (see [`crate::checkpoint`]).
pub trait CommandWatch: Send + Sync {
    /// The command is about to start.
    fn before_command(&self) -> BoxFuture<'_, ()>;
    /// The command ended (or was killed).
    fn after_command(&self) -> BoxFuture<'_, ()>;
}

/// A command to run in an editor terminal.
#[derive(Debug, Clone)]
pub struct TerminalCommand<'a> {
    /// The program (for a shell command line: the shell).
    pub command: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Absolute working directory.
    pub cwd: &'a Path,
    /// Bytes of output the editor keeps.
    pub output_byte_limit: Option<u64>,
}

/// How a terminal command exited.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TerminalExit {
    /// The exit code, if it exited normally.
    pub exit_code: Option<u32>,
    /// The signal that ended it, if any.
    pub signal: Option<String>,
}

/// A terminal's output so far.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TerminalOutput {
    /// The output text.
    pub output: String,
    /// Whether the editor cut it to its byte limit.
    pub truncated: bool,
    /// Set once the command exited.
    pub exit: Option<TerminalExit>,
}

/// The editor's terminal methods. A created terminal must always be released.
pub trait Terminals: Send + Sync {
    /// Starts a command; returns the terminal id at once.
    fn create<'a>(&'a self, command: TerminalCommand<'a>) -> BoxFuture<'a, Result<String, HostError>>;
    /// Waits for the command to exit.
    fn wait_for_exit<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<TerminalExit, HostError>>;
    /// The output so far.
    fn output<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<TerminalOutput, HostError>>;
    /// Kills the command; the terminal stays valid.
    fn kill<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<(), HostError>>;
    /// Kills the command if still running and frees the terminal.
    fn release<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<(), HostError>>;
    /// Kills and releases without waiting for the editor's answers (for
    /// cancellation, where the turn must answer at once).
    fn abandon(&self, terminal_id: &str);
}

/// A call to an external tool whose arguments parsed, described and ready to run.
#[derive(Debug, Clone)]
pub struct ExternalCall {
    /// The name the model called it by.
    pub name: String,
    /// The arguments, a JSON object.
    pub arguments: serde_json::Map<String, Value>,
    /// What kind of work it does, for the editor.
    pub kind: ToolKind,
    /// How it is shown and what it touches.
    pub description: Description,
}

/// Tools that live outside lathe (MCP servers), offered to the model next to
/// the built-in ones. Implemented by the `mcp` module; the turn knows only
/// this.
pub trait ExternalTools: Send + Sync + std::fmt::Debug {
    /// Waits, bounded and until `cancel`, for the tools that are still being
    /// set up (servers starting, tool lists being refreshed). Returns what the
    /// user should be told about it (a server that could not start), once.
    fn settle<'a>(&'a self, cancel: &'a CancellationToken) -> BoxFuture<'a, Vec<String>>;
    /// Every tool offered to the model: the built-ins first, in their order,
    /// then the external ones sorted by name. The same value (and bytes) until
    /// an external tool list changes, so requests keep a stable prefix.
    fn definitions(&self) -> Arc<[ToolDefinition]>;
    /// The title and kind to show while the model is still writing a call to
    /// `name`; `None` when `name` is not an external tool.
    fn pending(&self, name: &str) -> Option<(String, ToolKind)>;
    /// Parses and describes a call. `None` when `name` is not an external
    /// tool; `Some(Err)` with a message for the model when its arguments are
    /// not a JSON object.
    fn prepare(&self, name: &str, arguments: &str) -> Option<Result<ExternalCall, String>>;
    /// Runs a prepared call. Honours `ctx.cancel`; failures are outcomes.
    fn run<'a>(&'a self, call: ExternalCall, ctx: &'a ToolContext<'a>) -> BoxFuture<'a, ToolOutcome>;
}

/// Parses a call's arguments and describes it, for a host that writes by
/// rename (the local disk). An unknown tool or bad arguments give a message
/// for the model.
pub fn prepare(name: &str, arguments: &str, cwd: &Path) -> Result<PreparedCall, String> {
    prepare_in(name, arguments, cwd, false)
}

/// [`prepare`], for a host whose writes are `in_place` or not (see
/// [`Host::writes_in_place`]): what a write touches is judged accordingly.
pub fn prepare_in(name: &str, arguments: &str, cwd: &Path, in_place: bool) -> Result<PreparedCall, String> {
    let tool = Tool::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
        format!("There is no tool named \"{name}\". Available tools: {}.", known.join(", "))
    })?;
    let value: Value = if arguments.trim().is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_str(arguments).map_err(|err| {
            format!("The arguments of this {name} call are not valid JSON ({err}). Send a JSON object matching the tool's schema.")
        })?
    };
    let (args, description) = match tool {
        Tool::ReadFile => parse(name, value).map(|a: fs::ReadFileArgs| {
            let d = fs::describe_read_file(&a, cwd);
            (Args::ReadFile(a), d)
        })?,
        Tool::WriteFile => parse(name, value).map(|a: fs::WriteFileArgs| {
            let d = fs::describe_write_file(&a, cwd, in_place);
            (Args::WriteFile(a), d)
        })?,
        Tool::EditFile => parse(name, value).map(|a: fs::EditFileArgs| {
            let d = fs::describe_edit_file(&a, cwd, in_place);
            (Args::EditFile(a), d)
        })?,
        Tool::ListDirectory => parse(name, value).map(|a: search::ListDirectoryArgs| {
            let d = search::describe_list_directory(&a, cwd);
            (Args::ListDirectory(a), d)
        })?,
        Tool::Glob => parse(name, value).map(|a: search::GlobArgs| {
            let d = search::describe_glob(&a, cwd);
            (Args::Glob(a), d)
        })?,
        Tool::Grep => parse(name, value).map(|a: search::GrepArgs| {
            let d = search::describe_grep(&a, cwd);
            (Args::Grep(a), d)
        })?,
        Tool::Shell => parse(name, value).map(|a: shell::ShellArgs| {
            let d = shell::describe_shell(&a, cwd);
            (Args::Shell(a), d)
        })?,
        Tool::Fetch => {
            let a: fetch::FetchArgs = parse(name, value)?;
            let d = fetch::describe_fetch(&a)?;
            (Args::Fetch(a), d)
        }
        Tool::AskUser => parse(name, value).map(|a: AskUserArgs| {
            let title = format!("Ask: {}", a.question.lines().next().unwrap_or_default());
            (
                Args::AskUser(a),
                Description { title, locations: Vec::new(), access: Access::Nothing, preview: Vec::new() },
            )
        })?,
        Tool::ExitPlanMode => parse(name, value).map(|a: ExitPlanArgs| {
            let preview = vec![DisplayContent::Text(a.plan.clone())];
            let title = "Run this plan?".to_owned();
            (Args::ExitPlanMode(a), Description { title, locations: Vec::new(), access: Access::Nothing, preview })
        })?,
        Tool::Task => parse(name, value).map(|a: TaskArgs| {
            let agent = a.agent.as_deref().unwrap_or(crate::agents::EXPLORE);
            let about = if a.description.trim().is_empty() { a.prompt.as_str() } else { a.description.as_str() };
            let title = format!("{agent}: {}", about.lines().next().unwrap_or_default());
            (Args::Task(a), Description { title, locations: Vec::new(), access: Access::Nothing, preview: Vec::new() })
        })?,
        Tool::UpdatePlan => parse(name, value).map(|a: PlanArgs| {
            let done = a.plan.iter().filter(|i| i.status == PlanStatus::Completed).count();
            let title = format!("Update plan ({done}/{} done)", a.plan.len());
            (
                Args::UpdatePlan(a),
                Description { title, locations: Vec::new(), access: Access::Nothing, preview: Vec::new() },
            )
        })?,
    };
    Ok(PreparedCall { tool, description, args })
}

fn parse<T: DeserializeOwned>(tool: &str, value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let at = if path.is_empty() || path == "." { String::new() } else { format!(" at `{path}`") };
        format!(
            "Invalid arguments for {tool}{at}: {}. Check the tool's parameter schema and call it again.",
            err.into_inner()
        )
    })
}

/// A refusal decided before a call runs (see [`precheck`]), boxed: it is
/// the rare path of a function that otherwise returns what the call needs.
pub(crate) type Refusal = Box<ToolOutcome>;

/// A refusal with this message for the model.
fn refused(message: impl Into<String>) -> Refusal {
    Box::new(ToolOutcome::failed(message))
}

/// The refusal of a call that cannot do what it asks whatever the user
/// answers: a path with a NUL, a target of the wrong kind or size, a write
/// over a file the model has not read (or that changed since), edits that do
/// not apply, a bad pattern, an empty command or a missing directory. The
/// turn asks this before it asks the user, so that no approval is spent on
/// a call that will be refused; `run` makes the very same checks first
/// (they are the same functions), so what passes here is refused later only
/// if something changed meanwhile. `None` when the call may run; a check
/// that was cancelled (it reads the file) is a cancelled outcome.
pub async fn precheck(call: &PreparedCall, ctx: &ToolContext<'_>) -> Option<ToolOutcome> {
    let judged = match &call.description.access {
        Access::Read(targets) | Access::Write(targets) => targets.first(),
        Access::Nothing | Access::Execute { .. } | Access::External { .. } | Access::Fetch { .. } => None,
    };
    let refusal = match (&call.args, judged) {
        (Args::ReadFile(args), Some(target)) => fs::check_read(args, target, ctx).err(),
        (Args::WriteFile(args), Some(target)) => fs::check_write(args, target, ctx).await.err(),
        (Args::EditFile(args), Some(target)) => fs::check_edit(args, target, ctx).await.err(),
        (Args::ListDirectory(_), Some(target)) => search::check_list(target, ctx).err(),
        (Args::Glob(args), Some(target)) => search::check_glob(args, target, ctx).err(),
        (Args::Grep(args), Some(target)) => search::check_grep(args, target, ctx).err(),
        (
            Args::ReadFile(_)
            | Args::WriteFile(_)
            | Args::EditFile(_)
            | Args::ListDirectory(_)
            | Args::Glob(_)
            | Args::Grep(_),
            None,
        ) => Some(refused("This call's path was not judged; nothing was done.")),
        (Args::Shell(args), _) => shell::check_shell(args, ctx).await.err(),
        // Questions are answered by the turn, never run (see `PreparedCall::interaction`).
        (Args::Fetch(_) | Args::UpdatePlan(_) | Args::AskUser(_) | Args::ExitPlanMode(_) | Args::Task(_), _) => None,
    };
    refusal.map(|refusal| *refusal)
}

/// Runs a prepared call. Never panics on bad input: failures are outcomes.
pub async fn run(call: PreparedCall, ctx: &ToolContext<'_>) -> ToolOutcome {
    if ctx.cancel.is_cancelled() {
        return ToolOutcome::cancelled();
    }
    // File and search tools work on the target that was judged, never on the
    // name again: the description holds exactly one.
    let judged = match &call.description.access {
        Access::Read(targets) | Access::Write(targets) => targets.first(),
        Access::Nothing | Access::Execute { .. } | Access::External { .. } | Access::Fetch { .. } => None,
    };
    match (call.args, judged) {
        (Args::ReadFile(args), Some(target)) => fs::read_file(args, target, ctx).await,
        (Args::WriteFile(args), Some(target)) => fs::write_file(args, target, ctx).await,
        (Args::EditFile(args), Some(target)) => fs::edit_file(args, target, ctx).await,
        (Args::ListDirectory(args), Some(target)) => search::list_directory(args, target, ctx).await,
        (Args::Glob(args), Some(target)) => search::glob(args, target, ctx).await,
        (Args::Grep(args), Some(target)) => search::grep(args, target, ctx).await,
        (
            Args::ReadFile(_)
            | Args::WriteFile(_)
            | Args::EditFile(_)
            | Args::ListDirectory(_)
            | Args::Glob(_)
            | Args::Grep(_),
            None,
        ) => ToolOutcome::failed("This call's path was not judged; nothing was done."),
        (Args::Shell(args), _) => shell::shell(args, ctx).await,
        (Args::Fetch(args), _) => fetch::fetch(args, ctx).await,
        // The turn answers these itself (`PreparedCall::interaction`).
        (Args::AskUser(_) | Args::ExitPlanMode(_), _) => {
            ToolOutcome::failed("This tool is answered by asking the user; nothing was done.")
        }
        // The turn runs it as a sub-agent (`PreparedCall::task`).
        (Args::Task(_), _) => ToolOutcome::failed("This tool is run by the turn; nothing was done."),
        (Args::UpdatePlan(args), _) => {
            let summary = args
                .plan
                .iter()
                .map(|item| {
                    let mark = match item.status {
                        PlanStatus::Pending => "[ ]",
                        PlanStatus::InProgress => "[~]",
                        PlanStatus::Completed => "[x]",
                    };
                    format!("{mark} {}", item.content)
                })
                .collect::<Vec<_>>()
                .join("\n");
            (ctx.progress)(Progress::Plan(args.plan));
            let mut outcome = ToolOutcome::completed("Plan updated.");
            outcome.content = vec![DisplayContent::Text(summary)];
            outcome
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lean_profile_offers_the_same_tools_and_parameters() {
        let (standard, lean) = (definitions(), definitions_for(PromptProfile::Lean, true));
        assert_eq!(standard.len(), lean.len());
        for (full, short) in standard.iter().zip(lean) {
            let (full, short) = (serde_json::to_value(full).unwrap(), serde_json::to_value(short).unwrap());
            assert_eq!(full["function"]["name"], short["function"]["name"]);
            let mut stripped = full["function"]["parameters"].clone();
            strip_descriptions(&mut stripped);
            assert_eq!(stripped, short["function"]["parameters"], "only the per-field descriptions go");
            let description = short["function"]["description"].as_str().unwrap();
            assert!(
                !description.is_empty() && description.len() < full["function"]["description"].as_str().unwrap().len()
            );
        }
        let shell = serde_json::to_value(&lean[Tool::ALL.iter().position(|t| *t == Tool::Shell).unwrap()]).unwrap();
        assert!(
            shell["function"]["parameters"]["properties"]["description"].is_object(),
            "a property named description stays"
        );
        let mixed: Vec<ToolDefinition> =
            definitions().iter().cloned().chain([ToolDefinition::function("srv__x", "d", json!({}))]).collect();
        let swapped = for_profile(&mixed, PromptProfile::Lean);
        assert_eq!(&swapped[..lean.len()], lean);
        assert_eq!(swapped[lean.len()].name(), "srv__x");
        assert!(
            std::ptr::eq(&*for_profile(definitions(), PromptProfile::Lean), lean),
            "no copy for the built-ins alone"
        );
    }

    #[test]
    fn every_tool_has_a_schema_and_a_description() {
        let defs = definitions();
        assert_eq!(defs.len() + 1, Tool::ALL.len(), "every tool but exit_plan_mode, offered in plan mode only");
        assert!(!defs.iter().any(|d| d.name() == "exit_plan_mode"));
        assert_eq!(plan_definition(PromptProfile::Standard).name(), "exit_plan_mode");
        for tool in Tool::ALL {
            assert!(!tool.description().trim().is_empty(), "{} has a description", tool.name());
            let schema = tool.parameters();
            assert_eq!(schema["type"], "object", "{}", tool.name());
            assert_eq!(Tool::from_name(tool.name()), Some(tool));
        }
    }

    #[test]
    fn unknown_tools_and_bad_json_are_explained() {
        let err = prepare("teleport", "{}", Path::new("/p")).unwrap_err();
        assert!(err.contains("no tool named \"teleport\"") && err.contains("read_file"), "{err}");
        let err = prepare("read_file", "{\"path\": ", Path::new("/p")).unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        let err = prepare("read_file", "{}", Path::new("/p")).unwrap_err();
        assert!(err.contains("path"), "{err}");
    }

    /// Arguments nested 100,000 deep (issue 29) are refused as invalid
    /// JSON, for every tool: serde_json stops at 128 levels, so nothing that
    /// walks the parsed value can meet more.
    #[test]
    fn deeply_nested_arguments_are_refused_not_fatal() {
        let deep = |open: &str, close: &str| format!("{}1{}", open.repeat(100_000), close.repeat(100_000));
        for arguments in
            [deep("[", "]"), deep("{\"a\":", "}"), format!("{{\"path\":\"x\",\"content\":{}}}", deep("[", "]"))]
        {
            for tool in Tool::ALL {
                let err = prepare(tool.name(), &arguments, Path::new("/p")).unwrap_err();
                assert!(err.contains("not valid JSON"), "{}: {err}", tool.name());
            }
        }
        // Edits sent as a string of JSON are parsed again, with the same limit.
        let nested = format!("{{\"path\":\"x\",\"edits\":\"{}\"}}", deep("[", "]"));
        let err = prepare("edit_file", &nested, Path::new("/p")).unwrap_err();
        assert!(err.contains("Invalid arguments") && err.contains("recursion limit"), "{err}");
    }

    #[test]
    fn plans_accept_common_spellings() {
        let call = prepare(
            "update_plan",
            r#"{"todos":[{"content":"a","status":"completed"},{"content":"b","status":"pending"}]}"#,
            Path::new("/p"),
        )
        .unwrap();
        assert_eq!(call.description.title, "Update plan (1/2 done)");
        assert_eq!(call.description.access, Access::Nothing);
    }
}
