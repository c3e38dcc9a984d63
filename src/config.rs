//! Configuration: the TOML file (or the `OPENAI_*` environment variables) turned
//! into one validated [`Config`] value that is handed down to everything else.
//!
//! This module owns where the file is looked for, what every key means, and the
//! one-line error a bad file produces. It knows nothing of ACP, the model API or
//! tools: other modules receive typed values and never read the environment or
//! the file themselves. The only environment it reads is at load time: the
//! lookup variables and the variables named by `api_key_env`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

/// Environment variable that names the config file when `--config` is absent.
pub const CONFIG_ENV: &str = "LATHE_CONFIG";

/// Everything lathe needs to know, validated.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where this configuration came from, for messages.
    pub source: ConfigSource,
    /// Key of the model a new session starts with; always present in `models`.
    pub default_model: String,
    /// Configured models by key, in key order.
    pub models: BTreeMap<String, ModelConfig>,
    /// Turn-level limits.
    pub agent: AgentSettings,
    /// Timeouts and retries for talking to model endpoints.
    pub network: NetworkSettings,
    /// Limits on what the editor may send.
    pub protocol: ProtocolSettings,
    /// How the conversation is kept within the model's window.
    pub context: ContextSettings,
    /// Time limits for MCP servers.
    pub mcp: McpSettings,
    /// MCP servers every session connects to (`[mcp_servers.<name>]`), by
    /// name; an editor's server of the same name replaces one of these.
    pub mcp_servers: Vec<McpServer>,
    /// Which optional built-in tools are offered (`[tools]`).
    pub tools: ToolSettings,
    /// How long saved sessions are kept (`[sessions]`).
    pub sessions: SessionSettings,
    /// lathe's own config directory (`$XDG_CONFIG_HOME/lathe`): user-level
    /// `AGENTS.md` and slash commands live there. `None` when unknown.
    pub user_dir: Option<PathBuf>,
    /// Where sessions are stored; `None` keeps them in memory only. Set by
    /// the binary from `--data-dir`, `LATHE_DATA_DIR` or `$XDG_DATA_HOME/lathe`.
    pub data_dir: Option<PathBuf>,
    /// How lathe starts processes (`[child_env]`, and lathe's own executable).
    pub children: ChildSettings,
    /// The sandbox commands run in (`[sandbox]`, see `crate::platform::sandbox`).
    pub sandbox: SandboxSettings,
    /// The model servers found running on this machine when there was no
    /// configuration at all (see `crate::discover`), described for messages;
    /// empty when none was looked for or found.
    pub local_servers: Vec<String>,
    /// How this configuration was loaded, so that it can be loaded again
    /// the same way (ACP `authenticate` re-reads it: the user may just have
    /// written it in a terminal). Set by whoever loaded it; `None` re-reads
    /// the file it came from, if any.
    pub origin: Option<ConfigOrigin>,
    /// The user's hooks (`[[hooks.<Event>]]`, see `crate::hooks`): trusted,
    /// as the rest of this file is.
    pub hooks: Vec<HookSpec>,
}

/// How a variable of the environment is read: its value, or `None`.
pub type EnvReader = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where a configuration is looked for: `--config` and the environment
/// (see [`locate`] and [`Config::load`]).
#[derive(Clone)]
pub struct ConfigOrigin {
    /// `--config`, when given.
    pub cli_path: Option<PathBuf>,
    /// How the environment is read.
    pub env: EnvReader,
}

impl ConfigOrigin {
    /// The process's own command line and environment.
    pub fn process(cli_path: Option<PathBuf>) -> Self {
        Self { cli_path, env: Arc::new(|name: &str| std::env::var(name).ok()) }
    }
}

impl fmt::Debug for ConfigOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigOrigin").field("cli_path", &self.cli_path).finish_non_exhaustive()
    }
}

/// When a hook runs: Claude Code's event names (see `crate::hooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookEvent {
    /// Before a tool call runs (after the policy's verdict, before its question).
    PreToolUse,
    /// After a tool call completed.
    PostToolUse,
    /// When a prompt is submitted, before the model sees it.
    UserPromptSubmit,
    /// When the model is done with a turn.
    Stop,
    /// At the first prompt of a session (new, loaded or resumed).
    SessionStart,
}

impl HookEvent {
    /// Every event, in the order of a turn.
    pub const ALL: [HookEvent; 5] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::Stop,
    ];

    /// Its name, in files and on a hook's stdin (`hook_event_name`).
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::Stop => "Stop",
            HookEvent::SessionStart => "SessionStart",
        }
    }

    /// The event with this name.
    pub fn from_name(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|event| event.name() == name)
    }
}

/// One hook: `command` run by `sh -c` at `event`, for what `matcher`
/// matches (a tool name, or for `SessionStart` how the session started;
/// `None`, `""` or `"*"`: everything), killed after `timeout`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HookSpec {
    /// When it runs.
    pub event: HookEvent,
    /// What it runs for (a regular expression matched against the whole name).
    pub matcher: Option<String>,
    /// The shell command.
    pub command: String,
    /// How long it may take.
    pub timeout: Duration,
}

// The settings the platform layer is given live beside it (it imports
// nothing of lathe); the config builds them and names them here.
pub use crate::platform::settings::{ChildSettings, SANDBOX_UNAVAILABLE_ENV, SandboxMode, SandboxSettings};

/// How long a hook may run unless it says otherwise.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A TOML file.
    File(PathBuf),
    /// No file: the `OPENAI_*` environment variables.
    Environment,
    /// No file and no `OPENAI_*` variables, and exactly one model server
    /// running on this machine (see `crate::discover`).
    Discovered {
        /// What it is ("Ollama", "LM Studio", "llama.cpp", "vLLM").
        server: String,
        /// Where: the base URL its model is used at.
        base_url: String,
    },
    /// No file and no `OPENAI_*` variables: there is no usable model.
    Unconfigured,
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::File(path) => write!(f, "{}", path.display()),
            ConfigSource::Environment => f.write_str("environment (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL)"),
            ConfigSource::Discovered { server, base_url } => {
                write!(f, "no config file; the {server} server found running at {base_url}")
            }
            ConfigSource::Unconfigured => f.write_str("nothing (no config file, no OPENAI_API_KEY/OPENAI_BASE_URL)"),
        }
    }
}

/// One OpenAI-compatible model endpoint.
#[derive(Clone)]
pub struct ModelConfig {
    /// The key under `[models.<key>]`.
    pub key: String,
    /// Base URL up to and including the version segment, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// The model name sent in each request.
    pub model: String,
    /// Human name shown in editor pickers.
    pub display_name: String,
    /// Name of the environment variable that held the key, for messages.
    pub api_key_env: Option<String>,
    /// Whether the key is one `lathe setup` stored (`api_key_stored = true`,
    /// see `crate::credentials`), rather than the user's own variable.
    pub api_key_stored: bool,
    /// The key itself, read from `api_key_env` (or lathe's credentials
    /// file) at load time. Never logged.
    pub api_key: Option<ApiKey>,
    /// Context window in tokens, the `size` of `usage_update`, when the
    /// config says; `None` asks the server (see `model::probe`), falling back
    /// to [`DEFAULT_CONTEXT_WINDOW`].
    pub context_window: Option<u64>,
    /// Cap on tokens generated per request.
    pub max_output_tokens: Option<u32>,
    /// Which request field carries `max_output_tokens`.
    pub max_tokens_field: MaxTokensField,
    /// Sampling temperature; the server's default when absent.
    pub temperature: Option<f32>,
    /// `reasoning_effort` sent with each request when set.
    pub reasoning_effort: Option<String>,
    /// Whether the model accepts images.
    pub vision: bool,
    /// Whether to ask for `stream_options.include_usage`.
    pub stream_usage: bool,
    /// The prompt profile; `None` picks one from the context window.
    pub prompt: Option<PromptProfile>,
    /// Which earlier answers carry their reasoning back to the model.
    pub reasoning_history: ReasoningHistory,
    /// When tool calls the model wrote as answer text are run as calls.
    pub text_tool_calls: TextToolCalls,
    /// Extra HTTP headers sent with each request.
    pub headers: BTreeMap<String, String>,
    /// Extra top-level JSON fields merged into each request body.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// What a million prompt tokens cost, for `usage_update.cost` when the
    /// server reports no cost of its own.
    pub price_input_per_mtok: Option<f64>,
    /// What a million generated tokens cost.
    pub price_output_per_mtok: Option<f64>,
}

impl ModelConfig {
    /// What a request that used these tokens cost at the configured prices;
    /// `None` unless both prices are configured.
    pub fn priced(&self, input_tokens: u64, output_tokens: u64) -> Option<f64> {
        let (input, output) = (self.price_input_per_mtok?, self.price_output_per_mtok?);
        Some((input_tokens as f64 * input + output_tokens as f64 * output) / 1_000_000.0)
    }
}

impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelConfig")
            .field("key", &self.key)
            .field("base_url", &crate::redact::url(&self.base_url))
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("api_key_stored", &self.api_key_stored)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("context_window", &self.context_window)
            .finish_non_exhaustive()
    }
}

impl ModelConfig {
    /// A model at `base_url` with every optional setting at its default
    /// (no key, the server's limits).
    pub fn plain(key: &str, base_url: &str, model: &str) -> ModelConfig {
        ModelConfig {
            key: key.to_owned(),
            display_name: model.to_owned(),
            base_url: trim_base_url(base_url),
            model: model.to_owned(),
            api_key_env: None,
            api_key_stored: false,
            api_key: None,
            context_window: None,
            max_output_tokens: None,
            max_tokens_field: default_max_tokens_field(base_url),
            temperature: None,
            reasoning_effort: None,
            vision: false,
            stream_usage: true,
            prompt: None,
            reasoning_history: ReasoningHistory::Auto,
            text_tool_calls: TextToolCalls::Auto,
            headers: BTreeMap::new(),
            extra_body: serde_json::Map::new(),
            price_input_per_mtok: None,
            price_output_per_mtok: None,
        }
    }
}

/// An API key. Its `Debug` and `Display` never show the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key, for the one place that puts it in a header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Which system prompt and tool descriptions a model is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptProfile {
    /// The full prompt and tool descriptions.
    Standard,
    /// A short prompt and one-paragraph tool descriptions, the same tools:
    /// for models with a small context window.
    Lean,
}

/// Largest context window for which `prompt = "auto"` picks the lean profile.
pub const LEAN_PROMPT_MAX_WINDOW: u64 = 16_384;

impl PromptProfile {
    /// The profile `prompt = "auto"` picks for a model with this window.
    pub fn for_window(context_window: u64) -> PromptProfile {
        if context_window <= LEAN_PROMPT_MAX_WINDOW { PromptProfile::Lean } else { PromptProfile::Standard }
    }
}

/// `prompt` as written: a profile, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum PromptToml {
    Auto,
    Standard,
    Lean,
}

/// Which earlier answers send their reasoning back to the model, in the
/// field the server used for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningHistory {
    /// The answers of every exchange (user message to user message) in
    /// which the model called tools: what DeepSeek's and Kimi's thinking
    /// modes require and OpenRouter recommends. Reasoning of plain answers
    /// is left out (those servers ignore it).
    #[default]
    Auto,
    /// Never.
    #[serde(rename = "none")]
    Off,
    /// Every answer's.
    All,
}

/// When lathe reads tool calls out of the model's answer text (see
/// `model::text_calls`): for servers with no tool-call parser for the model,
/// which return the model's calls as plain text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextToolCalls {
    /// While the server has returned no native `tool_calls` in the session:
    /// a server that parses calls itself never has text read as calls once
    /// it has shown that it does.
    #[default]
    Auto,
    /// Whatever the server has returned (a server that parses some calls
    /// and returns others as text).
    On,
    /// Never.
    Off,
}

/// Which JSON field carries the output-token cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_tokens`: what most OpenAI-compatible servers accept.
    MaxTokens,
    /// `max_completion_tokens`: what OpenAI's own API wants (required by its reasoning models).
    MaxCompletionTokens,
}

/// Limits of one prompt turn.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Model requests one `session/prompt` may make before it stops with `max_turn_requests`.
    pub max_model_requests_per_turn: u32,
    /// Bytes of arguments one tool call may carry; a call over it is not
    /// kept, shown or run, and the model is told to split its work.
    pub max_tool_call_bytes: usize,
    /// `task` calls of one model response that run at once (sub-agents).
    pub max_parallel_tasks: usize,
    /// More directories of agent files (relative: to the project), after
    /// `.lathe/agents` (see [`crate::agents`]).
    pub extra_agent_dirs: Vec<String>,
}

/// Timeouts and retries for model endpoints.
#[derive(Debug, Clone)]
pub struct NetworkSettings {
    /// Time allowed to open the connection and receive response headers.
    pub connect_timeout: Duration,
    /// Time allowed for the response to start, headers received, before giving up.
    pub response_timeout: Duration,
    /// Longest silence tolerated inside a streaming response.
    pub stream_idle_timeout: Duration,
    /// Retries of a request that failed with 429, 5xx, or no connection or answer; 0 disables retrying.
    pub max_retries: u32,
    /// Back-off ceiling before the first retry; it doubles with each retry.
    pub retry_initial_delay: Duration,
    /// Largest back-off ceiling.
    pub retry_max_delay: Duration,
    /// Most time spent waiting between the attempts of one request, `Retry-After` waits included.
    pub retry_max_total: Duration,
}

/// Limits on the editor's side of the wire.
#[derive(Debug, Clone)]
pub struct ProtocolSettings {
    /// Longest accepted JSON-RPC line, in bytes; longer lines are answered with an error and skipped.
    pub max_message_bytes: usize,
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            max_model_requests_per_turn: 100,
            max_tool_call_bytes: 1024 * 1024,
            max_parallel_tasks: 4,
            extra_agent_dirs: Vec::new(),
        }
    }
}

impl Default for NetworkSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            response_timeout: Duration::from_secs(300),
            stream_idle_timeout: Duration::from_secs(300),
            max_retries: 4,
            retry_initial_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(30),
            retry_max_total: Duration::from_secs(120),
        }
    }
}

/// How the conversation is kept within the model's window.
#[derive(Debug, Clone)]
pub struct ContextSettings {
    /// Fraction of the context window at which older history is summarised.
    pub compact_threshold: f64,
    /// Bytes of one tool result kept in the history (head and tail).
    pub max_tool_output_bytes: usize,
}

impl Default for ContextSettings {
    fn default() -> Self {
        Self { compact_threshold: 0.8, max_tool_output_bytes: 48 * 1024 }
    }
}

impl Default for ProtocolSettings {
    fn default() -> Self {
        Self { max_message_bytes: 64 * 1024 * 1024 }
    }
}

/// Which optional built-in tools are offered to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSettings {
    /// The `fetch` tool (reading web pages); on by default.
    pub fetch: bool,
}

impl Default for ToolSettings {
    fn default() -> Self {
        Self { fetch: true }
    }
}

/// How long saved sessions are kept, and what their checkpoints may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSettings {
    /// Sessions not updated for this many days are deleted at start-up;
    /// `None` (the default) keeps every session.
    pub keep_days: Option<u32>,
    /// Bytes of file checkpoints one session keeps (`/undo`); the oldest
    /// turns' checkpoints are dropped first.
    pub checkpoint_max_bytes: u64,
}

/// Default of `[sessions] checkpoint_max_bytes`: 256 MiB per session.
pub const DEFAULT_CHECKPOINT_MAX_BYTES: u64 = 256 * 1024 * 1024;

impl Default for SessionSettings {
    fn default() -> Self {
        Self { keep_days: None, checkpoint_max_bytes: DEFAULT_CHECKPOINT_MAX_BYTES }
    }
}

/// Time limits for MCP servers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct McpSettings {
    /// Time one server gets to start, answer `initialize` and list its tools.
    pub startup_timeout: Duration,
    /// Time one tool call may take before it is cancelled as failed.
    pub call_timeout: Duration,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self { startup_timeout: Duration::from_secs(10), call_timeout: Duration::from_secs(300) }
    }
}

/// One MCP server: from `[mcp_servers.<name>]`, or passed by the editor in
/// `mcpServers` (the two have the same shape).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    /// The server's name; its tools are offered as `<name>__<tool>`.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Whether a local server runs in the sandbox (`sandbox = true`).
    pub sandbox: bool,
}

/// How an MCP server is reached.
#[derive(Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A local process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to lathe's environment for it.
        env: Vec<(String, String)>,
    },
    /// MCP's Streamable HTTP transport.
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request.
        headers: Vec<(String, String)>,
    },
    /// MCP's older HTTP+SSE transport (protocol version 2024-11-05).
    Sse {
        /// The SSE endpoint.
        url: String,
        /// Headers sent with every request.
        headers: Vec<(String, String)>,
    },
}

impl fmt::Debug for McpTransport {
    /// Names and places only: header and environment values may be secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |pairs: &[(String, String)]| pairs.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>();
        match self {
            McpTransport::Stdio { command, args, env } => {
                f.debug_struct("Stdio").field("command", command).field("args", args).field("env", &names(env)).finish()
            }
            McpTransport::Http { url, headers } => {
                f.debug_struct("Http").field("url", &crate::redact::url(url)).field("headers", &names(headers)).finish()
            }
            McpTransport::Sse { url, headers } => {
                f.debug_struct("Sse").field("url", &crate::redact::url(url)).field("headers", &names(headers)).finish()
            }
        }
    }
}

/// Why a configuration could not be loaded. `Display` is one line naming the
/// file, and where known the line and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read config file: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a key has the wrong type or is unknown.
    #[error("{path}:{line}: {key}{message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the problem (0 when unknown).
        line: usize,
        /// `key: ` prefix naming the offending key, or empty.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The values parse but do not make sense together.
    #[error("{path}: {key}: {message}")]
    Invalid {
        /// The file, or the environment.
        path: String,
        /// The offending key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// lathe's credentials file (keys `lathe setup` stored) cannot be read.
    #[error("{0}")]
    Credentials(#[from] crate::credentials::CredentialsError),
    /// Reading stopped before it finished (the thread that read the files
    /// panicked, or the runtime was shutting down).
    #[error("reading the config did not finish: {0}")]
    Unfinished(String),
}

/// The raw file, every field optional, unknown keys rejected.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ConfigToml {
    default_model: Option<String>,
    #[serde(default)]
    models: BTreeMap<String, ModelToml>,
    #[serde(default)]
    agent: AgentToml,
    #[serde(default)]
    network: NetworkToml,
    #[serde(default)]
    protocol: ProtocolToml,
    #[serde(default)]
    context: ContextToml,
    #[serde(default)]
    mcp: McpToml,
    #[serde(default)]
    mcp_servers: BTreeMap<String, McpServerToml>,
    #[serde(default)]
    tools: ToolsToml,
    #[serde(default)]
    child_env: ChildEnvToml,
    #[serde(default)]
    shell: ShellToml,
    #[serde(default)]
    sandbox: SandboxToml,
    #[serde(default)]
    sessions: SessionsToml,
    #[serde(default)]
    hooks: HooksToml,
}

/// `[hooks]` of the config, and the whole of a project's `.lathe/hooks.toml`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HooksToml {
    #[serde(rename = "PreToolUse", default)]
    pre_tool_use: Vec<HookToml>,
    #[serde(rename = "PostToolUse", default)]
    post_tool_use: Vec<HookToml>,
    #[serde(rename = "UserPromptSubmit", default)]
    user_prompt_submit: Vec<HookToml>,
    #[serde(rename = "Stop", default)]
    stop: Vec<HookToml>,
    #[serde(rename = "SessionStart", default)]
    session_start: Vec<HookToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HookToml {
    matcher: Option<String>,
    command: String,
    timeout_secs: Option<f64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SandboxToml {
    mode: Option<SandboxMode>,
    network: Option<bool>,
    #[serde(default)]
    writable: Vec<String>,
    #[serde(default)]
    deny_read: Vec<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SessionsToml {
    keep_days: Option<u32>,
    checkpoint_max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ToolsToml {
    fetch: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ChildEnvToml {
    #[serde(default)]
    remove: Vec<String>,
    #[serde(default)]
    keep: Vec<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ShellToml {
    program: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct McpToml {
    startup_timeout_secs: Option<f64>,
    call_timeout_secs: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpServerToml {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    url: Option<String>,
    transport: Option<McpTransportToml>,
    headers: Option<BTreeMap<String, String>>,
    bearer_token_env: Option<String>,
    sandbox: Option<bool>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum McpTransportToml {
    Stdio,
    Http,
    Sse,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ContextToml {
    compact_threshold: Option<f64>,
    max_tool_output_bytes: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelToml {
    base_url: String,
    model: String,
    display_name: Option<String>,
    api_key_env: Option<String>,
    #[serde(default)]
    api_key_stored: bool,
    context_window: Option<u64>,
    max_output_tokens: Option<u32>,
    max_tokens_field: Option<MaxTokensField>,
    temperature: Option<f32>,
    reasoning_effort: Option<String>,
    #[serde(default)]
    vision: bool,
    stream_usage: Option<bool>,
    prompt: Option<PromptToml>,
    reasoning_history: Option<ReasoningHistory>,
    text_tool_calls: Option<TextToolCalls>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    extra_body: toml::Table,
    price_input_per_mtok: Option<f64>,
    price_output_per_mtok: Option<f64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AgentToml {
    max_model_requests_per_turn: Option<u32>,
    max_tool_call_bytes: Option<usize>,
    max_parallel_tasks: Option<usize>,
    #[serde(default)]
    extra_agent_dirs: Vec<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct NetworkToml {
    connect_timeout_secs: Option<f64>,
    response_timeout_secs: Option<f64>,
    stream_idle_timeout_secs: Option<f64>,
    max_retries: Option<u32>,
    retry_initial_delay_secs: Option<f64>,
    retry_max_delay_secs: Option<f64>,
    retry_max_total_secs: Option<f64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ProtocolToml {
    max_message_bytes: Option<usize>,
}

/// Smallest `agent.max_tool_call_bytes`: every built-in tool's ordinary calls fit.
const MIN_TOOL_CALL_BYTES: usize = 4096;

/// Context window assumed when neither the config nor the server says.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// The model of the `OPENAI_*` fallback when `OPENAI_MODEL` is unset.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-5.6";

/// Upper bound of `network.max_retries`: more retries than this only hide a broken endpoint.
const MAX_RETRIES: u32 = 100;

/// Where to look for the config file: `--config`, then `LATHE_CONFIG`, then
/// `config.toml` in [`user_dir`] (`~/.config/lathe/config.toml` on Linux).
/// Returns the path and whether it was named explicitly (an explicit path must exist).
pub fn locate(cli_path: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> Option<(PathBuf, bool)> {
    if let Some(path) = cli_path {
        return Some((path.to_path_buf(), true));
    }
    if let Some(path) = env(CONFIG_ENV).filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(path), true));
    }
    Some((user_dir(env)?.join("config.toml"), false))
}

/// Whether `name` can be sent as an HTTP header name (RFC 9110's token).
fn valid_header_name(name: &str) -> bool {
    http::HeaderName::from_bytes(name.as_bytes()).is_ok()
}

impl Config {
    /// Loads the configuration the way the binary does: the located file if it
    /// exists (an explicitly named one must), else the `OPENAI_*` variables.
    pub fn load(cli_path: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        match locate(cli_path, env) {
            Some((path, explicit)) => match std::fs::read_to_string(&path) {
                Ok(text) => Config::from_toml_str(&text, &path, env),
                Err(err) if !explicit && err.kind() == std::io::ErrorKind::NotFound => Ok(Config::from_env(env)),
                Err(source) => Err(ConfigError::Read { path, source }),
            },
            None => Ok(Config::from_env(env)),
        }
    }

    /// The configuration when there is no file: one model `default` from
    /// `OPENAI_BASE_URL` (default `https://api.openai.com/v1`), `OPENAI_API_KEY`
    /// and `OPENAI_MODEL` (default [`DEFAULT_OPENAI_MODEL`], with
    /// `reasoning_effort = "none"` on OpenAI's own endpoint: its Chat
    /// Completions refuses function tools with reasoning on). With neither a
    /// key nor a base URL the source is [`ConfigSource::Unconfigured`] and
    /// prompts explain how to configure.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Config {
        let key = env("OPENAI_API_KEY").filter(|k| !k.is_empty());
        let base_url = env("OPENAI_BASE_URL").filter(|u| !u.is_empty());
        let source =
            if key.is_some() || base_url.is_some() { ConfigSource::Environment } else { ConfigSource::Unconfigured };
        let base_url = base_url.unwrap_or_else(|| "https://api.openai.com/v1".to_owned());
        let named = env("OPENAI_MODEL").filter(|m| !m.is_empty());
        let reasoning_effort = (named.is_none() && base_url.contains("api.openai.com")).then(|| "none".to_owned());
        let model = named.unwrap_or_else(|| DEFAULT_OPENAI_MODEL.to_owned());
        let mut model_config = ModelConfig::plain("default", &base_url, &model);
        model_config.api_key_env = Some(OPENAI_KEY_ENV.to_owned());
        model_config.api_key = key.map(ApiKey::new);
        model_config.reasoning_effort = reasoning_effort;
        Config::single(source, model_config, env)
    }

    /// The configuration when there is no file and no `OPENAI_*` variable,
    /// but one model server runs on this machine (see `crate::discover`):
    /// its model `model` at `base_url` (no key: local servers take none),
    /// under the key `key`; `server` names what it is.
    pub fn discovered(
        server: &str,
        key: &str,
        base_url: &str,
        model: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Config {
        let source = ConfigSource::Discovered { server: server.to_owned(), base_url: trim_base_url(base_url) };
        Config::single(source, ModelConfig::plain(key, base_url, model), env)
    }

    /// One model and every setting at its default.
    fn single(source: ConfigSource, model: ModelConfig, env: &dyn Fn(&str) -> Option<String>) -> Config {
        let key = model.key.clone();
        Config {
            source,
            default_model: key.clone(),
            models: BTreeMap::from([(key, model)]),
            agent: AgentSettings::default(),
            network: NetworkSettings::default(),
            protocol: ProtocolSettings::default(),
            context: ContextSettings::default(),
            mcp: McpSettings::default(),
            mcp_servers: Vec::new(),
            tools: ToolSettings::default(),
            sessions: SessionSettings::default(),
            user_dir: user_dir(env),
            data_dir: None,
            children: ChildSettings { secret_vars: vec![OPENAI_KEY_ENV.to_owned()], ..ChildSettings::default() },
            sandbox: default_sandbox(env),
            local_servers: Vec::new(),
            origin: None,
            hooks: Vec::new(),
        }
    }

    /// Parses and validates TOML text; `path` is used in messages only.
    /// Each section is checked on its own (`TryFrom<...Toml>` and the
    /// functions below); the first problem found is the error.
    pub fn from_toml_str(text: &str, path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let raw = parse_toml(text, path)?;
        let invalid = |(key, message): Invalid| ConfigError::Invalid { path: path.display().to_string(), key, message };
        let default_model = default_model_name(raw.default_model, &raw.models).map_err(invalid)?;
        // Keys lathe stored are read only when a model says it has one.
        let stored = match raw.models.values().any(|model| model.api_key_stored) {
            true => match user_dir(env) {
                Some(dir) => crate::credentials::read(&dir)?,
                None => BTreeMap::new(),
            },
            false => BTreeMap::new(),
        };
        let models = raw
            .models
            .into_iter()
            .map(|(key, model)| {
                let stored = stored.get(&key).cloned();
                Ok((key.clone(), model_config(key, model, env, stored)?))
            })
            .collect::<Result<BTreeMap<_, _>, Invalid>>()
            .map_err(invalid)?;
        let mut children = child_settings(&raw.child_env, &models, &raw.mcp_servers).map_err(invalid)?;
        children.shell = match raw.shell.program {
            Some(program) if program.trim().is_empty() => {
                return Err(invalid(("shell.program".to_owned(), "the program must not be empty".to_owned())));
            }
            program => program,
        };
        let mcp_servers = raw
            .mcp_servers
            .into_iter()
            .map(|(name, server)| mcp_server(name, server, env))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        Ok(Config {
            source: ConfigSource::File(path.to_path_buf()),
            default_model,
            models,
            agent: raw.agent.try_into().map_err(invalid)?,
            network: raw.network.try_into().map_err(invalid)?,
            protocol: raw.protocol.try_into().map_err(invalid)?,
            context: raw.context.try_into().map_err(invalid)?,
            mcp: raw.mcp.try_into().map_err(invalid)?,
            mcp_servers,
            tools: ToolSettings { fetch: raw.tools.fetch.unwrap_or(ToolSettings::default().fetch) },
            sessions: raw.sessions.try_into().map_err(invalid)?,
            user_dir: user_dir(env),
            data_dir: None,
            children,
            sandbox: sandbox_settings(&raw.sandbox, path, env).map_err(invalid)?,
            local_servers: Vec::new(),
            origin: None,
            hooks: hook_specs(raw.hooks, "hooks.").map_err(invalid)?,
        })
    }

    /// The model a new session starts with.
    pub fn default_model(&self) -> Option<&ModelConfig> {
        self.models.get(&self.default_model)
    }

    /// Why no session can use this configuration, or `None` when it names
    /// a model to talk to: no model at all (no file, no `OPENAI_*`
    /// variable, no model server found running here), a default model
    /// whose key `lathe setup` stored and a logout forgot, or one whose
    /// file names an `api_key_env` that is not set. Known without
    /// asking any server; whether the server answers is `lathe doctor`'s
    /// business.
    pub fn unusable(&self) -> Option<String> {
        match &self.source {
            ConfigSource::Unconfigured => {
                let found = match self.local_servers.as_slice() {
                    [] => "no model server was found running on this machine".to_owned(),
                    servers => format!(
                        "of the model servers running here ({}), lathe picks none: it uses one only when it is \
                         the only one with a model that takes tools",
                        servers.join("; ")
                    ),
                };
                return Some(format!(
                    "no model is configured: there is no config file, OPENAI_API_KEY and OPENAI_BASE_URL are \
                     unset, and {found}. Run `lathe setup` in a terminal to write {}",
                    crate::platform::folders::CONFIG_FILE
                ));
            }
            ConfigSource::File(_) | ConfigSource::Environment | ConfigSource::Discovered { .. } => {}
        }
        match self.default_model() {
            None => Some(format!("the default model \"{}\" is not configured", self.default_model)),
            Some(model) if model.api_key_stored && model.api_key.is_none() => Some(format!(
                "model \"{}\" has no key: the one `lathe setup` stored was forgotten (a logout). Run `lathe setup` \
                 in a terminal to give it one again",
                model.key
            )),
            // A file that names a variable asks for a key (OPENAI_BASE_URL
            // alone, for a local server, does not).
            Some(ModelConfig { api_key: None, api_key_env: Some(variable), key, .. })
                if matches!(self.source, ConfigSource::File(_)) =>
            {
                Some(format!(
                    "model \"{key}\" reads its key from {variable}, which is not set in lathe's environment (an editor \
                 started from the desktop may not have your shell's variables: set it in the editor's settings for \
                 this agent, or run `lathe setup` in a terminal to store a key; for a server that needs no key, \
                 remove api_key_env)"
                ))
            }
            Some(_) => None,
        }
    }
}

/// A problem in the file: the key (dotted path) and what is wrong with it.
type Invalid = (String, String);

fn invalid(key: &str, message: impl Into<String>) -> Invalid {
    (key.to_owned(), message.into())
}

/// `default_model`, or the only model when there is one.
fn default_model_name(named: Option<String>, models: &BTreeMap<String, ModelToml>) -> Result<String, Invalid> {
    if models.is_empty() {
        return Err(invalid("models", "no [models.<name>] table: configure at least one model"));
    }
    match named {
        Some(name) if models.contains_key(&name) => Ok(name),
        Some(name) => {
            let known: Vec<&str> = models.keys().map(String::as_str).collect();
            Err(invalid(
                "default_model",
                format!("\"{name}\" is not one of the configured models ({})", known.join(", ")),
            ))
        }
        None if models.len() == 1 => Ok(models.keys().next().cloned().unwrap_or_default()),
        None => Err(invalid("default_model", "several models are configured: say which one is the default")),
    }
}

/// An `http://` or `https://` URL with a host: what a server can be reached at.
fn check_server_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!("\"{url}\" must start with http:// or https://"));
    }
    match url::Url::parse(url) {
        Ok(parsed) if parsed.host_str().is_some_and(|host| !host.is_empty()) => Ok(()),
        Ok(_) => Err(format!("\"{url}\" names no host")),
        Err(err) => Err(format!("\"{url}\" is not a valid URL ({err})")),
    }
}

/// One `[models.<key>]` table, checked.
fn model_config(
    key: String,
    m: ModelToml,
    env: &dyn Fn(&str) -> Option<String>,
    stored: Option<ApiKey>,
) -> Result<ModelConfig, Invalid> {
    let at = |field: &str| format!("models.{key}.{field}");
    if m.api_key_stored && m.api_key_env.is_some() {
        return Err((
            at("api_key_stored"),
            "the key is either in an environment variable (api_key_env) or stored by lathe, not both".to_owned(),
        ));
    }
    check_server_url(&m.base_url).map_err(|message| (at("base_url"), message))?;
    if m.model.trim().is_empty() {
        return Err((at("model"), "must not be empty".to_owned()));
    }
    if m.context_window == Some(0) {
        return Err((at("context_window"), "must be greater than 0".to_owned()));
    }
    if let Some(t) = m.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err((at("temperature"), format!("{t} is outside 0.0..=2.0")));
    }
    if let Some(name) = m.headers.keys().find(|name| !valid_header_name(name)) {
        return Err((at("headers"), format!("\"{name}\" is not a valid header name")));
    }
    let extra_body = match serde_json::to_value(&m.extra_body) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(_) | Err(_) => return Err((at("extra_body"), "must be a table".to_owned())),
    };
    let api_key = match &m.api_key_env {
        None if m.api_key_stored => {
            if stored.is_none() {
                tracing::warn!(model = %key, "api_key_stored = true, but lathe holds no key for this model (run `lathe setup`)");
            }
            stored
        }
        Some(var) => {
            let value = env(var).filter(|v| !v.is_empty());
            if value.is_none() {
                tracing::warn!(model = %key, variable = %var, "api_key_env names a variable that is not set; requests go out without an API key");
            }
            value.map(ApiKey::new)
        }
        None => None,
    };
    for (field, price) in
        [("price_input_per_mtok", m.price_input_per_mtok), ("price_output_per_mtok", m.price_output_per_mtok)]
    {
        if let Some(price) = price
            && !(price.is_finite() && price >= 0.0)
        {
            return Err((at(field), format!("{price} is not a price (a number, 0 or more)")));
        }
    }
    if m.price_input_per_mtok.is_some() != m.price_output_per_mtok.is_some() {
        let missing = if m.price_input_per_mtok.is_none() { "price_input_per_mtok" } else { "price_output_per_mtok" };
        return Err((at(missing), "is needed too: give both prices or neither".to_owned()));
    }
    let max_tokens_field = m.max_tokens_field.unwrap_or_else(|| default_max_tokens_field(&m.base_url));
    Ok(ModelConfig {
        display_name: m.display_name.unwrap_or_else(|| m.model.clone()),
        key,
        base_url: trim_base_url(&m.base_url),
        model: m.model,
        api_key_env: m.api_key_env,
        api_key_stored: m.api_key_stored,
        api_key,
        context_window: m.context_window,
        max_output_tokens: m.max_output_tokens,
        max_tokens_field,
        temperature: m.temperature,
        reasoning_effort: m.reasoning_effort,
        vision: m.vision,
        stream_usage: m.stream_usage.unwrap_or(true),
        prompt: match m.prompt {
            None | Some(PromptToml::Auto) => None,
            Some(PromptToml::Standard) => Some(PromptProfile::Standard),
            Some(PromptToml::Lean) => Some(PromptProfile::Lean),
        },
        reasoning_history: m.reasoning_history.unwrap_or_default(),
        text_tool_calls: m.text_tool_calls.unwrap_or_default(),
        headers: m.headers,
        extra_body,
        price_input_per_mtok: m.price_input_per_mtok,
        price_output_per_mtok: m.price_output_per_mtok,
    })
}

/// The hooks of a `[hooks]` table (keys named with `prefix`), checked: a
/// command that is not blank, a matcher that is a regular expression, a
/// positive timeout.
fn hook_specs(raw: HooksToml, prefix: &str) -> Result<Vec<HookSpec>, Invalid> {
    let events = [
        (HookEvent::SessionStart, raw.session_start),
        (HookEvent::UserPromptSubmit, raw.user_prompt_submit),
        (HookEvent::PreToolUse, raw.pre_tool_use),
        (HookEvent::PostToolUse, raw.post_tool_use),
        (HookEvent::Stop, raw.stop),
    ];
    let mut specs = Vec::new();
    for (event, hooks) in events {
        for (index, hook) in hooks.into_iter().enumerate() {
            let key = |name: &str| format!("{prefix}{}[{index}].{name}", event.name());
            if hook.command.trim().is_empty() {
                return Err(invalid(&key("command"), "is empty"));
            }
            if let Some(matcher) = &hook.matcher
                && let Err(err) = hook_matcher(matcher)
            {
                return Err(invalid(&key("matcher"), format!("not a regular expression: {}", one_line(&err))));
            }
            let timeout = seconds(hook.timeout_secs, &key("timeout_secs"), DEFAULT_HOOK_TIMEOUT)?;
            specs.push(HookSpec { event, matcher: hook.matcher, command: hook.command, timeout });
        }
    }
    Ok(specs)
}

/// A hook's matcher as a regular expression matching a whole name; `None`
/// for one that matches everything (`""`, `"*"`).
pub fn hook_matcher(matcher: &str) -> Result<Option<regex_automata::meta::Regex>, String> {
    let matcher = matcher.trim();
    if matcher.is_empty() || matcher == "*" {
        return Ok(None);
    }
    regex_automata::meta::Regex::new(&format!("^(?:{matcher})$")).map(Some).map_err(|err| err.to_string())
}

/// A project's `.lathe/hooks.toml` (`[[PreToolUse]]` tables and so on, the
/// keys of the config's `[[hooks.PreToolUse]]`), checked the same way;
/// `path` names it in the error.
pub fn project_hooks(text: &str, path: &Path) -> Result<Vec<HookSpec>, ConfigError> {
    let parse_error =
        |line: usize, key: String, message: String| ConfigError::Parse { path: path.to_path_buf(), line, key, message };
    let deserializer = toml::Deserializer::parse(text).map_err(|err| {
        let line = err.span().map(|span| line_of(text, span.start)).unwrap_or(0);
        parse_error(line, String::new(), one_line(err.message()))
    })?;
    let raw = serde_path_to_error::deserialize::<_, HooksToml>(deserializer).map_err(|err| {
        let key = err.path().to_string();
        let inner = err.into_inner();
        let line = inner.span().map(|span| line_of(text, span.start)).unwrap_or(0);
        let key = if key.is_empty() || key == "." { String::new() } else { format!("{key}: ") };
        parse_error(line, key, one_line(inner.message()))
    })?;
    hook_specs(raw, "").map_err(|(key, message)| ConfigError::Invalid {
        path: path.display().to_string(),
        key,
        message,
    })
}

/// A duration given in seconds: positive and finite, `default` when absent.
fn seconds(value: Option<f64>, key: &str, default: Duration) -> Result<Duration, Invalid> {
    match value {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(invalid(key, format!("{s} is not a positive number of seconds"))),
    }
}

impl TryFrom<AgentToml> for AgentSettings {
    type Error = Invalid;

    fn try_from(raw: AgentToml) -> Result<Self, Invalid> {
        let defaults = AgentSettings::default();
        Ok(AgentSettings {
            max_model_requests_per_turn: match raw.max_model_requests_per_turn {
                Some(0) => return Err(invalid("agent.max_model_requests_per_turn", "must be at least 1")),
                Some(n) => n,
                None => defaults.max_model_requests_per_turn,
            },
            max_tool_call_bytes: match raw.max_tool_call_bytes {
                Some(n) if n < MIN_TOOL_CALL_BYTES => {
                    return Err(invalid(
                        "agent.max_tool_call_bytes",
                        format!("{n} is too small (minimum {MIN_TOOL_CALL_BYTES})"),
                    ));
                }
                Some(n) => n,
                None => defaults.max_tool_call_bytes,
            },
            max_parallel_tasks: match raw.max_parallel_tasks {
                Some(n) if !(1..=64).contains(&n) => {
                    return Err(invalid("agent.max_parallel_tasks", format!("{n} is not between 1 and 64")));
                }
                Some(n) => n,
                None => defaults.max_parallel_tasks,
            },
            extra_agent_dirs: raw.extra_agent_dirs,
        })
    }
}

impl TryFrom<NetworkToml> for NetworkSettings {
    type Error = Invalid;

    fn try_from(raw: NetworkToml) -> Result<Self, Invalid> {
        let defaults = NetworkSettings::default();
        let network = NetworkSettings {
            connect_timeout: seconds(
                raw.connect_timeout_secs,
                "network.connect_timeout_secs",
                defaults.connect_timeout,
            )?,
            response_timeout: seconds(
                raw.response_timeout_secs,
                "network.response_timeout_secs",
                defaults.response_timeout,
            )?,
            stream_idle_timeout: seconds(
                raw.stream_idle_timeout_secs,
                "network.stream_idle_timeout_secs",
                defaults.stream_idle_timeout,
            )?,
            max_retries: match raw.max_retries {
                Some(n) if n > MAX_RETRIES => {
                    return Err(invalid("network.max_retries", format!("{n} is too many (maximum {MAX_RETRIES})")));
                }
                Some(n) => n,
                None => defaults.max_retries,
            },
            retry_initial_delay: seconds(
                raw.retry_initial_delay_secs,
                "network.retry_initial_delay_secs",
                defaults.retry_initial_delay,
            )?,
            retry_max_delay: seconds(
                raw.retry_max_delay_secs,
                "network.retry_max_delay_secs",
                defaults.retry_max_delay,
            )?,
            retry_max_total: seconds(
                raw.retry_max_total_secs,
                "network.retry_max_total_secs",
                defaults.retry_max_total,
            )?,
        };
        if network.retry_max_delay < network.retry_initial_delay {
            return Err(invalid(
                "network.retry_max_delay_secs",
                format!(
                    "{} is less than network.retry_initial_delay_secs ({})",
                    network.retry_max_delay.as_secs_f64(),
                    network.retry_initial_delay.as_secs_f64()
                ),
            ));
        }
        Ok(network)
    }
}

impl TryFrom<ProtocolToml> for ProtocolSettings {
    type Error = Invalid;

    fn try_from(raw: ProtocolToml) -> Result<Self, Invalid> {
        Ok(ProtocolSettings {
            max_message_bytes: match raw.max_message_bytes {
                Some(n) if n < 1024 => {
                    return Err(invalid("protocol.max_message_bytes", format!("{n} is too small (minimum 1024)")));
                }
                Some(n) => n,
                None => ProtocolSettings::default().max_message_bytes,
            },
        })
    }
}

impl TryFrom<ContextToml> for ContextSettings {
    type Error = Invalid;

    fn try_from(raw: ContextToml) -> Result<Self, Invalid> {
        let defaults = ContextSettings::default();
        Ok(ContextSettings {
            compact_threshold: match raw.compact_threshold {
                Some(t) if t > 0.0 && t <= 1.0 => t,
                Some(t) => {
                    return Err(invalid("context.compact_threshold", format!("{t} is not a fraction in (0, 1]")));
                }
                None => defaults.compact_threshold,
            },
            max_tool_output_bytes: match raw.max_tool_output_bytes {
                Some(n) if n < 1024 => {
                    return Err(invalid("context.max_tool_output_bytes", format!("{n} is too small (minimum 1024)")));
                }
                Some(n) => n,
                None => defaults.max_tool_output_bytes,
            },
        })
    }
}

impl TryFrom<McpToml> for McpSettings {
    type Error = Invalid;

    fn try_from(raw: McpToml) -> Result<Self, Invalid> {
        let defaults = McpSettings::default();
        Ok(McpSettings {
            startup_timeout: seconds(raw.startup_timeout_secs, "mcp.startup_timeout_secs", defaults.startup_timeout)?,
            call_timeout: seconds(raw.call_timeout_secs, "mcp.call_timeout_secs", defaults.call_timeout)?,
        })
    }
}

impl TryFrom<SessionsToml> for SessionSettings {
    type Error = Invalid;

    fn try_from(raw: SessionsToml) -> Result<Self, Invalid> {
        match raw.keep_days {
            Some(0) => Err(invalid(
                "sessions.keep_days",
                "0 would delete every session at start-up (minimum 1; leave it out to keep all)",
            )),
            keep_days => Ok(SessionSettings {
                keep_days,
                checkpoint_max_bytes: raw.checkpoint_max_bytes.unwrap_or(DEFAULT_CHECKPOINT_MAX_BYTES),
            }),
        }
    }
}

/// The variable `OPENAI_*` configuration reads its key from; a secret whatever the file says.
const OPENAI_KEY_ENV: &str = "OPENAI_API_KEY";

/// `[child_env]` checked, with the secrets the rest of the file names.
fn child_settings(
    raw: &ChildEnvToml,
    models: &BTreeMap<String, ModelConfig>,
    servers: &BTreeMap<String, McpServerToml>,
) -> Result<ChildSettings, (String, String)> {
    for (key, patterns) in [("child_env.remove", &raw.remove), ("child_env.keep", &raw.keep)] {
        for pattern in patterns {
            if pattern.is_empty() {
                return Err((key.to_owned(), "a pattern must not be empty".to_owned()));
            }
            globset::Glob::new(pattern)
                .map_err(|err| (key.to_owned(), format!("\"{pattern}\" is not a valid pattern: {}", err.kind())))?;
        }
    }
    let mut secret_vars = vec![OPENAI_KEY_ENV.to_owned()];
    secret_vars.extend(models.values().filter_map(|model| model.api_key_env.clone()));
    for server in servers.values() {
        secret_vars.extend(server.bearer_token_env.clone());
        secret_vars.extend(server.env.iter().flat_map(|env| env.keys().cloned()));
    }
    secret_vars.sort();
    secret_vars.dedup();
    Ok(ChildSettings {
        supervisor: None,
        secret_vars,
        remove_env: raw.remove.clone(),
        keep_env: raw.keep.clone(),
        shell: None,
    })
}

/// The sandbox settings without a config file: the defaults, with the
/// environment's temp and home directories, lathe's own folders unreadable.
fn default_sandbox(env: &dyn Fn(&str) -> Option<String>) -> SandboxSettings {
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    SandboxSettings {
        temp_dir: set("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from),
        home: set("HOME").map(PathBuf::from).filter(|home| home.is_absolute()),
        deny_read: user_dir(env).into_iter().chain(crate::store::default_data_dir(None, env)).collect(),
        force_unavailable: env(SANDBOX_UNAVAILABLE_ENV),
        ..SandboxSettings::default()
    }
}

/// `[sandbox]` checked: each writable and denied path absolute or under
/// `~/`. The config file at `path` is unreadable to sandboxed commands too.
fn sandbox_settings(
    raw: &SandboxToml,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SandboxSettings, (String, String)> {
    let home = env("HOME").filter(|home| !home.is_empty()).map(PathBuf::from);
    let expand = |key: &str, paths: &[String]| -> Result<Vec<PathBuf>, (String, String)> {
        let mut expanded = Vec::new();
        for path in paths {
            let full = match (path.strip_prefix("~/").or_else(|| (path == "~").then_some("")), &home) {
                (Some(rest), Some(home)) => home.join(rest),
                (Some(_), None) => {
                    return Err((key.to_owned(), format!("\"{path}\" starts with ~ but HOME is not set")));
                }
                (None, _) => PathBuf::from(path),
            };
            if !full.is_absolute() {
                return Err((key.to_owned(), format!("\"{path}\" is not an absolute path (start it with / or ~/)")));
            }
            expanded.push(full);
        }
        Ok(expanded)
    };
    let defaults = default_sandbox(env);
    let mut deny_read = expand("sandbox.deny_read", &raw.deny_read)?;
    deny_read.extend(defaults.deny_read.iter().cloned());
    if path.is_absolute() {
        deny_read.push(path.to_path_buf());
    }
    Ok(SandboxSettings {
        mode: raw.mode.unwrap_or(defaults.mode),
        network: raw.network.unwrap_or(defaults.network),
        writable: expand("sandbox.writable", &raw.writable)?,
        deny_read,
        ..defaults
    })
}

/// One `[mcp_servers.<name>]` table, checked: a `command` (stdio) or a `url`
/// (Streamable HTTP, or SSE with `transport = "sse"`), never both, and no key
/// that belongs to the other kind. `bearer_token_env` names a variable read
/// now, so that tokens stay out of the file, like model API keys. The error
/// is the offending key and what is wrong with it.
fn mcp_server(
    name: String,
    raw: McpServerToml,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<McpServer, (String, String)> {
    let at = |field: &str| format!("mcp_servers.{name}.{field}");
    if name.trim().is_empty() {
        return Err(("mcp_servers".to_owned(), "a server name must not be empty".to_owned()));
    }
    let transport = match (raw.command, raw.url) {
        (Some(_), Some(_)) => {
            return Err((at("url"), "give either command (a local server) or url (a remote one), not both".to_owned()));
        }
        (None, None) => {
            return Err((
                format!("mcp_servers.{name}"),
                "needs command (a local server) or url (a remote one)".to_owned(),
            ));
        }
        (Some(command), None) => {
            for (present, key) in [
                (raw.headers.is_some(), "headers"),
                (raw.bearer_token_env.is_some(), "bearer_token_env"),
                (matches!(raw.transport, Some(McpTransportToml::Http | McpTransportToml::Sse)), "transport"),
            ] {
                if present {
                    return Err((at(key), "only applies to servers with a url".to_owned()));
                }
            }
            if command.trim().is_empty() {
                return Err((at("command"), "must not be empty".to_owned()));
            }
            McpTransport::Stdio {
                command,
                args: raw.args.unwrap_or_default(),
                env: raw.env.unwrap_or_default().into_iter().collect(),
            }
        }
        (None, Some(url)) => {
            for (present, key) in [
                (raw.args.is_some(), "args"),
                (raw.env.is_some(), "env"),
                (raw.sandbox.is_some(), "sandbox"),
                (matches!(raw.transport, Some(McpTransportToml::Stdio)), "transport"),
            ] {
                if present {
                    return Err((at(key), "only applies to servers with a command".to_owned()));
                }
            }
            check_server_url(&url).map_err(|message| (at("url"), message))?;
            let mut headers: Vec<(String, String)> = raw.headers.unwrap_or_default().into_iter().collect();
            for (header, _) in &headers {
                if !valid_header_name(header) {
                    return Err((at("headers"), format!("\"{header}\" is not a valid header name")));
                }
            }
            if let Some(variable) = raw.bearer_token_env {
                match env(&variable).filter(|token| !token.is_empty()) {
                    Some(token) => headers.push(("Authorization".to_owned(), format!("Bearer {token}"))),
                    None => {
                        tracing::warn!(server = %name, %variable, "bearer_token_env names a variable that is not set; connecting without a token");
                    }
                }
            }
            match raw.transport {
                Some(McpTransportToml::Sse) => McpTransport::Sse { url, headers },
                Some(McpTransportToml::Http | McpTransportToml::Stdio) | None => McpTransport::Http { url, headers },
            }
        }
    };
    Ok(McpServer { name, transport, sandbox: raw.sandbox.unwrap_or(false) })
}

/// lathe's own config directory, by the platform's convention
/// ([`crate::platform::folders`]): `$XDG_CONFIG_HOME/lathe`, else
/// `~/.config/lathe` on Linux and macOS; `%APPDATA%\lathe` on Windows.
///
/// The one import of config from the platform layer, which otherwise sits
/// on config: `folders` imports nothing of lathe, so there is no circle;
/// issue 26's next phase settles whether the folder is handed down instead.
pub fn user_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    crate::platform::folders::config_dir(env)
}

fn parse_toml(text: &str, path: &Path) -> Result<ConfigToml, ConfigError> {
    let parse_error =
        |line: usize, key: String, message: String| ConfigError::Parse { path: path.to_path_buf(), line, key, message };
    let deserializer = toml::Deserializer::parse(text).map_err(|err| {
        let line = err.span().map(|span| line_of(text, span.start)).unwrap_or(0);
        parse_error(line, String::new(), one_line(err.message()))
    })?;
    serde_path_to_error::deserialize::<_, ConfigToml>(deserializer).map_err(|err| {
        let key = err.path().to_string();
        let inner = err.into_inner();
        let line = inner.span().map(|span| line_of(text, span.start)).unwrap_or(0);
        let key = if key.is_empty() || key == "." { String::new() } else { format!("{key}: ") };
        parse_error(line, key, one_line(inner.message()))
    })
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes().iter().take(offset).filter(|&&b| b == b'\n').count() + 1
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn trim_base_url(url: &str) -> String {
    url.trim_end_matches('/').to_owned()
}

fn default_max_tokens_field(base_url: &str) -> MaxTokensField {
    if base_url.contains("api.openai.com") { MaxTokensField::MaxCompletionTokens } else { MaxTokensField::MaxTokens }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(text, Path::new("/cfg/config.toml"), &no_env)
    }

    /// A config nested 100,000 deep (arrays, inline tables, dotted keys,
    /// table headers; issue 29) is an error naming the file, not a stack
    /// overflow.
    #[test]
    fn a_deeply_nested_config_is_an_error() {
        let deep = 100_000;
        for text in [
            format!("x = {}1{}", "[".repeat(deep), "]".repeat(deep)),
            format!("x = {}1{}", "{a=".repeat(deep), "}".repeat(deep)),
            format!("{} = 1", vec!["a"; deep].join(".")),
            format!("[{}]", vec!["a"; deep].join(".")),
            format!(
                "[models.m]\nbase_url = \"http://h/v1\"\nmodel = \"m\"\nextra_body = {}1{}",
                "{a=".repeat(deep),
                "}".repeat(deep)
            ),
        ] {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains("/cfg/config.toml"), "{err}");
        }
    }

    /// `[sandbox] writable`: `~/` is the user's home, a relative path is
    /// refused, and so is `~` without a HOME; mode and network as written.
    #[test]
    fn sandbox_writable_paths_are_absolute_and_expand_the_home() {
        if !crate::platform::testing::unix_paths() {
            return;
        }
        let env = |name: &str| (name == "HOME").then(|| "/home/u".to_owned());
        let model = "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n";
        let text = model.to_owned()
            + "[sandbox]\nmode = \"required\"\nnetwork = false\nwritable = [\"~/.cache/cargo\", \"/srv/out\", \"~\"]\n";
        let config = Config::from_toml_str(&text, Path::new("/cfg/config.toml"), &env).unwrap();
        assert_eq!(config.sandbox.mode, SandboxMode::Required);
        assert!(!config.sandbox.network);
        let expected = [PathBuf::from("/home/u/.cache/cargo"), PathBuf::from("/srv/out"), PathBuf::from("/home/u/")];
        assert_eq!(config.sandbox.writable, expected);
        let relative =
            Config::from_toml_str(&format!("{model}[sandbox]\nwritable = [\"out\"]\n"), Path::new("/c.toml"), &env);
        assert!(relative.unwrap_err().to_string().contains("is not an absolute path"));
        let homeless = parse(&format!("{model}[sandbox]\nwritable = [\"~/x\"]\n")).unwrap_err().to_string();
        assert!(homeless.contains("HOME is not set"), "{homeless}");
        let defaults = parse(model).unwrap().sandbox;
        assert_eq!((defaults.mode, defaults.network), (SandboxMode::Auto, false), "the network is off by default");
    }

    /// Issue 25: what sandboxed commands may not read beyond the home's
    /// credentials: `deny_read` (`~/` expanded), lathe's own config and data
    /// folders (where the environment puts them) and the config file itself;
    /// the temp directory and the test switch come from the environment.
    #[test]
    fn sandbox_reads_denied_and_the_environment() {
        if !crate::platform::testing::unix_paths() {
            return;
        }
        let env = |name: &str| match name {
            "HOME" => Some("/home/u".to_owned()),
            "XDG_CONFIG_HOME" => Some("/xdg/config".to_owned()),
            "LATHE_DATA_DIR" => Some("/data/lathe".to_owned()),
            "TMPDIR" => Some("/scratch".to_owned()),
            "LATHE_SANDBOX_UNAVAILABLE" => Some("seccomp".to_owned()),
            _ => None,
        };
        let text = "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n\
                    [sandbox]\nnetwork = true\ndeny_read = [\"~/work/keys\", \"/srv/secret\"]\n";
        let config = Config::from_toml_str(text, Path::new("/etc/lathe.toml"), &env).unwrap();
        let sandbox = &config.sandbox;
        assert!(sandbox.network);
        let expected = ["/home/u/work/keys", "/srv/secret", "/xdg/config/lathe", "/data/lathe", "/etc/lathe.toml"];
        assert_eq!(sandbox.deny_read, expected.map(PathBuf::from));
        assert_eq!(sandbox.home.as_deref(), Some(Path::new("/home/u")));
        assert_eq!(sandbox.temp_dir, PathBuf::from("/scratch"));
        assert_eq!(sandbox.force_unavailable.as_deref(), Some("seccomp"));
        let relative = Config::from_toml_str(
            "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n[sandbox]\ndeny_read = [\"keys\"]\n",
            Path::new("/c.toml"),
            &env,
        );
        assert!(relative.unwrap_err().to_string().contains("sandbox.deny_read"));
        let unconfigured = Config::from_env(&env).sandbox;
        assert_eq!(unconfigured.deny_read, ["/xdg/config/lathe", "/data/lathe"].map(PathBuf::from));
    }

    #[test]
    fn the_documented_shape_parses() {
        let env = |name: &str| (name == "OLLAMA_API_KEY").then(|| "secret-key".to_owned());
        let config = Config::from_toml_str(
            r#"
default_model = "local"

[models.local]
base_url = "http://127.0.0.1:11434/v1/"
model = "qwen2.5-coder:14b"
api_key_env = "OLLAMA_API_KEY"
context_window = 32768
max_output_tokens = 8192
"#,
            Path::new("/cfg/config.toml"),
            &env,
        )
        .unwrap();
        let model = config.default_model().unwrap();
        assert_eq!(model.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(model.model, "qwen2.5-coder:14b");
        assert_eq!(model.context_window, Some(32768));
        assert_eq!(model.prompt, None, "auto by default");
        assert_eq!(model.reasoning_history, ReasoningHistory::Auto);
        assert_eq!(model.max_output_tokens, Some(8192));
        assert_eq!(model.api_key.as_ref().unwrap().expose(), "secret-key");
        assert_eq!(model.max_tokens_field, MaxTokensField::MaxTokens);
        assert!(!format!("{model:?}").contains("secret-key"));
    }

    #[test]
    fn prompt_and_reasoning_history_keys() {
        let model = |extra: &str| {
            parse(&format!("[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n{extra}"))
                .map(|config| config.default_model().cloned().unwrap())
        };
        assert_eq!(model("prompt = \"lean\"").unwrap().prompt, Some(PromptProfile::Lean));
        assert_eq!(model("prompt = \"standard\"").unwrap().prompt, Some(PromptProfile::Standard));
        assert_eq!(model("prompt = \"auto\"").unwrap().prompt, None);
        assert_eq!(model("reasoning_history = \"none\"").unwrap().reasoning_history, ReasoningHistory::Off);
        assert_eq!(model("reasoning_history = \"all\"").unwrap().reasoning_history, ReasoningHistory::All);
        assert_eq!(model("").unwrap().context_window, None);
        assert_eq!(model("").unwrap().text_tool_calls, TextToolCalls::Auto);
        assert_eq!(model("text_tool_calls = \"on\"").unwrap().text_tool_calls, TextToolCalls::On);
        assert_eq!(model("text_tool_calls = \"off\"").unwrap().text_tool_calls, TextToolCalls::Off);
        for (bad, key) in [
            ("prompt = \"tiny\"", "models.m.prompt"),
            ("reasoning_history = \"some\"", "models.m.reasoning_history"),
            ("text_tool_calls = \"always\"", "models.m.text_tool_calls"),
            ("context_window = 0", "models.m.context_window"),
        ] {
            let err = model(bad).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
        assert_eq!(PromptProfile::for_window(16_384), PromptProfile::Lean);
        assert_eq!(PromptProfile::for_window(16_385), PromptProfile::Standard);
    }

    /// Prices per million tokens: both or neither, numbers of 0 or more;
    /// a request's cost follows from them.
    #[test]
    fn model_prices() {
        let model = |extra: &str| {
            parse(&format!("[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n{extra}"))
                .map(|config| config.default_model().cloned().unwrap())
        };
        let priced = model("price_input_per_mtok = 3.0\nprice_output_per_mtok = 15").unwrap();
        let cost = priced.priced(1_000_000, 200_000).unwrap();
        assert!((cost - 6.0).abs() < 1e-9, "{cost}");
        assert_eq!(model("").unwrap().priced(10, 10), None);
        for (bad, key) in [
            ("price_input_per_mtok = 3.0", "models.m.price_output_per_mtok"),
            ("price_output_per_mtok = 3.0", "models.m.price_input_per_mtok"),
            ("price_input_per_mtok = -1.0\nprice_output_per_mtok = 1.0", "models.m.price_input_per_mtok"),
            ("price_input_per_mtok = \"cheap\"\nprice_output_per_mtok = 1.0", "models.m.price_input_per_mtok"),
        ] {
            let err = model(bad).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }

    /// A server URL needs a scheme and a host: `"http://"` alone is refused,
    /// for a model's base_url and an MCP server's url alike.
    #[test]
    fn server_urls_need_a_host() {
        let model = |url: &str| parse(&format!("[models.m]\nbase_url = \"{url}\"\nmodel = \"a\"\n"));
        let mcp = |url: &str| {
            parse(&format!("[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n[mcp_servers.s]\nurl = \"{url}\"\n"))
        };
        for good in ["http://x/v1", "https://api.example.com/v1", "http://127.0.0.1:8080"] {
            assert!(model(good).is_ok(), "{good}");
            assert!(mcp(good).is_ok(), "{good}");
        }
        for bad in ["http://", "https://", "http://:8080/v1", "ftp://x/v1", "x/v1"] {
            let err = model(bad).unwrap_err().to_string();
            assert!(err.contains("models.m.base_url"), "{bad}: {err}");
            let err = mcp(bad).unwrap_err().to_string();
            assert!(err.contains("mcp_servers.s.url"), "{bad}: {err}");
        }
    }

    /// One header-name rule (an HTTP token, checked by `http`) for model
    /// and MCP headers alike.
    #[test]
    fn header_names_are_http_tokens() {
        let model = |name: &str| {
            parse(&format!(
                "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\nheaders = {{ \"{name}\" = \"v\" }}\n"
            ))
        };
        let mcp = |name: &str| {
            parse(&format!(
                "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n[mcp_servers.s]\nurl = \"http://x/mcp\"\nheaders = {{ \"{name}\" = \"v\" }}\n"
            ))
        };
        for good in ["X-Team", "x_team", "X.Trace!"] {
            assert!(model(good).is_ok(), "{good}");
            assert!(mcp(good).is_ok(), "{good}");
        }
        for bad in ["", "X Team", "X:Team", "Tëam"] {
            assert!(model(bad).unwrap_err().to_string().contains("is not a valid header name"), "{bad:?}");
            assert!(mcp(bad).unwrap_err().to_string().contains("is not a valid header name"), "{bad:?}");
        }
    }

    #[test]
    fn a_wrong_type_names_file_line_and_key() {
        let err = parse(
            "default_model = \"m\"\n[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\ncontext_window = \"big\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("/cfg/config.toml:5: models.m.context_window: "), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn an_unknown_key_is_named() {
        let err = parse("[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\ncontext_windw = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("/cfg/config.toml:4"), "{err}");
        assert!(err.contains("context_windw"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn broken_toml_is_one_line_with_a_line_number() {
        let err = parse("[models.m\nbase_url = 1\n").unwrap_err().to_string();
        assert!(err.starts_with("/cfg/config.toml:1: "), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn default_model_must_exist() {
        let err = parse("default_model = \"nope\"\n[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("default_model"), "{err}");
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn a_single_model_is_the_default() {
        let config = parse("[models.only]\nbase_url = \"https://api.openai.com/v1\"\nmodel = \"gpt-5.6\"\n").unwrap();
        assert_eq!(config.default_model, "only");
        assert_eq!(config.default_model().unwrap().max_tokens_field, MaxTokensField::MaxCompletionTokens);
    }

    #[test]
    fn environment_fallback() {
        let env = |name: &str| match name {
            "OPENAI_API_KEY" => Some("k".to_owned()),
            "OPENAI_MODEL" => Some("gpt-x".to_owned()),
            _ => None,
        };
        let config = Config::from_env(&env);
        assert_eq!(config.source, ConfigSource::Environment);
        let model = config.default_model().unwrap();
        assert_eq!(model.base_url, "https://api.openai.com/v1");
        assert_eq!(model.model, "gpt-x");
        assert_eq!(model.reasoning_effort, None, "a named model is taken as it is");
        assert_eq!(model.context_window, None, "asked of the server");
        assert_eq!(Config::from_env(&no_env).source, ConfigSource::Unconfigured);
        let key_only = |name: &str| (name == "OPENAI_API_KEY").then(|| "k".to_owned());
        let config = Config::from_env(&key_only);
        let model = config.default_model().unwrap();
        assert_eq!(model.model, DEFAULT_OPENAI_MODEL);
        assert_eq!(model.reasoning_effort.as_deref(), Some("none"), "tools need it on OpenAI's Chat Completions");
        let elsewhere = |name: &str| (name == "OPENAI_BASE_URL").then(|| "http://127.0.0.1:8080/v1".to_owned());
        assert_eq!(Config::from_env(&elsewhere).default_model().unwrap().reasoning_effort, None);
    }

    #[test]
    fn a_stored_key_is_lathes_and_only_there() {
        let dir = tempfile::tempdir().unwrap();
        let xdg = dir.path().to_string_lossy().into_owned();
        let env = move |name: &str| (name == "XDG_CONFIG_HOME").then(|| xdg.clone());
        let user_dir = user_dir(&env).unwrap();
        crate::credentials::store(&user_dir, "m", &ApiKey::new("sk-stored")).unwrap();
        let text = "[models.m]\nbase_url = \"https://api.example.com/v1\"\nmodel = \"x\"\napi_key_stored = true\n";
        let config = Config::from_toml_str(text, Path::new("c.toml"), &env).unwrap();
        let model = config.default_model().unwrap();
        assert_eq!((model.api_key.as_ref().map(ApiKey::expose), model.api_key_stored), (Some("sk-stored"), true));
        assert_eq!(config.unusable(), None);

        let both = text.replace("api_key_stored = true\n", "api_key_stored = true\napi_key_env = \"K\"\n");
        let err = Config::from_toml_str(&both, Path::new("c.toml"), &env).unwrap_err().to_string();
        assert!(err.contains("models.m.api_key_stored") && err.contains("not both"), "{err}");

        crate::credentials::forget(&user_dir).unwrap();
        let config = Config::from_toml_str(text, Path::new("c.toml"), &env).unwrap();
        assert!(config.default_model().unwrap().api_key.is_none());
        assert!(config.unusable().unwrap().contains("forgotten"), "{:?}", config.unusable());
        assert!(Config::from_env(&no_env).unusable().unwrap().contains("lathe setup"));
    }

    /// A file that names `api_key_env` asks for a key: with the variable
    /// unset (an editor started from the desktop often lacks the shell's
    /// variables), sessions are refused naming it, instead of requests
    /// going out without a key; `OPENAI_BASE_URL` alone still works.
    #[test]
    fn a_key_variable_that_is_not_set_makes_the_default_model_unusable() {
        let text = "[models.m]\nbase_url = \"https://api.example.com/v1\"\nmodel = \"x\"\napi_key_env = \"MY_KEY\"\n";
        let config = Config::from_toml_str(text, Path::new("c.toml"), &no_env).unwrap();
        let why = config.unusable().unwrap();
        assert!(why.contains("MY_KEY") && why.contains("lathe setup") && why.contains("\"m\""), "{why}");
        let set = |name: &str| (name == "MY_KEY").then(|| "sk-1".to_owned());
        assert_eq!(Config::from_toml_str(text, Path::new("c.toml"), &set).unwrap().unusable(), None);
        let empty = |name: &str| (name == "MY_KEY").then(String::new);
        assert!(Config::from_toml_str(text, Path::new("c.toml"), &empty).unwrap().unusable().is_some());
        let local = |name: &str| (name == "OPENAI_BASE_URL").then(|| "http://127.0.0.1:8080/v1".to_owned());
        assert_eq!(Config::from_env(&local).unusable(), None);
    }

    #[test]
    fn lookup_order() {
        if !crate::platform::testing::xdg_folders() {
            return;
        }
        let env = |name: &str| match name {
            "LATHE_CONFIG" => Some("/from/env.toml".to_owned()),
            "HOME" => Some("/home/u".to_owned()),
            _ => None,
        };
        assert_eq!(locate(Some(Path::new("/cli.toml")), &env), Some((PathBuf::from("/cli.toml"), true)));
        assert_eq!(locate(None, &env), Some((PathBuf::from("/from/env.toml"), true)));
        let home_only = |name: &str| (name == "HOME").then(|| "/home/u".to_owned());
        assert_eq!(locate(None, &home_only), Some((PathBuf::from("/home/u/.config/lathe/config.toml"), false)));
        let xdg = |name: &str| (name == "XDG_CONFIG_HOME").then(|| "/xdg".to_owned());
        assert_eq!(locate(None, &xdg), Some((PathBuf::from("/xdg/lathe/config.toml"), false)));
    }

    #[test]
    fn hooks_parse_and_are_checked() {
        let model = "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n";
        let hooks = parse(&format!(
            "{model}[[hooks.PostToolUse]]\nmatcher = \"Write|Edit\"\ncommand = \"fmt\"\n\
             [[hooks.Stop]]\ncommand = \"check\"\ntimeout_secs = 0.5\n"
        ))
        .unwrap()
        .hooks;
        let got: Vec<(HookEvent, Option<&str>, &str, Duration)> =
            hooks.iter().map(|h| (h.event, h.matcher.as_deref(), h.command.as_str(), h.timeout)).collect();
        assert_eq!(
            got,
            [
                (HookEvent::PostToolUse, Some("Write|Edit"), "fmt", DEFAULT_HOOK_TIMEOUT),
                (HookEvent::Stop, None, "check", Duration::from_millis(500)),
            ]
        );
        for (bad, key) in [
            ("[[hooks.PreToolUse]]\ncommand = \" \"\n", "hooks.PreToolUse[0].command"),
            ("[[hooks.PreToolUse]]\nmatcher = \"(\"\ncommand = \"x\"\n", "hooks.PreToolUse[0].matcher"),
            ("[[hooks.Stop]]\ncommand = \"x\"\ntimeout_secs = 0\n", "hooks.Stop[0].timeout_secs"),
            ("[[hooks.Notification]]\ncommand = \"x\"\n", "Notification"),
            ("[[hooks.Stop]]\ncommand = \"x\"\ntype = \"prompt\"\n", "type"),
        ] {
            let err = parse(&format!("{model}{bad}")).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
        let project =
            project_hooks("[[PreToolUse]]\nmatcher = \"Bash\"\ncommand = \"x\"\n", Path::new("h.toml")).unwrap();
        assert_eq!(project.len(), 1);
        let err = project_hooks("[[PreToolUse]]\ncommand = \"x\"\n[[Nope]]\n", Path::new("h.toml")).unwrap_err();
        assert!(err.to_string().contains("h.toml:3"), "{err}");
    }

    #[test]
    fn retry_keys_parse_and_are_checked() {
        let model = "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n";
        let defaults = parse(model).unwrap().network;
        assert_eq!(defaults.max_retries, 4);
        assert_eq!(defaults.retry_initial_delay, Duration::from_secs(1));
        assert_eq!(defaults.retry_max_delay, Duration::from_secs(30));
        assert_eq!(defaults.retry_max_total, Duration::from_secs(120));
        let network = parse(&format!(
            "{model}[network]\nmax_retries = 0\nretry_initial_delay_secs = 0.25\nretry_max_delay_secs = 2\nretry_max_total_secs = 10\n"
        ))
        .unwrap()
        .network;
        assert_eq!(network.max_retries, 0);
        assert_eq!(network.retry_initial_delay, Duration::from_millis(250));
        assert_eq!(network.retry_max_delay, Duration::from_secs(2));
        assert_eq!(network.retry_max_total, Duration::from_secs(10));
        for (bad, key) in [
            ("max_retries = -1", "network.max_retries"),
            ("max_retries = 1000", "network.max_retries"),
            ("retry_initial_delay_secs = 0", "network.retry_initial_delay_secs"),
            ("retry_max_total_secs = -3", "network.retry_max_total_secs"),
            ("retry_initial_delay_secs = 5\nretry_max_delay_secs = 1", "network.retry_max_delay_secs"),
        ] {
            let err = parse(&format!("{model}[network]\n{bad}\n")).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn the_example_config_parses() {
        let text = include_str!("../config.example.toml");
        let config = Config::from_toml_str(text, Path::new("config.example.toml"), &no_env).unwrap();
        assert!(config.models.len() >= 6, "presets for OpenAI, OpenRouter, Ollama, vLLM, llama.cpp, LM Studio");
        assert_eq!(config.mcp, McpSettings::default());
        assert_eq!(config.tools, ToolSettings { fetch: true });
        assert!(!config.sandbox.network, "the example keeps the default: sandboxed commands have no network");
        assert_eq!(config.sessions, SessionSettings::default(), "sessions are kept unless keep_days is set");
        let pruning = text.replace("\n# keep_days = 90\n", "\nkeep_days = 90\n");
        let pruning = Config::from_toml_str(&pruning, Path::new("config.example.toml"), &no_env).unwrap();
        assert_eq!(pruning.sessions, SessionSettings { keep_days: Some(90), ..SessionSettings::default() });
        let capped = text.replace("\n# checkpoint_max_bytes = 268435456\n", "\ncheckpoint_max_bytes = 1000\n");
        let capped = Config::from_toml_str(&capped, Path::new("config.example.toml"), &no_env).unwrap();
        assert_eq!(capped.sessions.checkpoint_max_bytes, 1000);
        let zero = text.replace("\n# keep_days = 90\n", "\nkeep_days = 0\n");
        let err = Config::from_toml_str(&zero, Path::new("config.example.toml"), &no_env).unwrap_err().to_string();
        assert!(err.contains("sessions.keep_days"), "{err}");
        let priced = text.replace(
            "\n# price_input_per_mtok = 1.25\n# price_output_per_mtok = 10.0\n",
            "\nprice_input_per_mtok = 1.25\nprice_output_per_mtok = 10.0\n",
        );
        let priced = Config::from_toml_str(&priced, Path::new("config.example.toml"), &no_env).unwrap();
        let cost = priced.models["openai"].priced(1_000_000, 100_000).unwrap();
        assert!((cost - 2.25).abs() < 1e-9, "the example prices parse and price: {cost}");
        assert!(config.hooks.is_empty(), "the hooks are examples");
        let hooked = text.replace(
            "\n# [[hooks.PreToolUse]]\n# matcher = \"Bash\"\n# command = \"~/bin/check-command\"\n# timeout_secs = 10\n",
            "\n[[hooks.PreToolUse]]\nmatcher = \"Bash\"\ncommand = \"~/bin/check-command\"\ntimeout_secs = 10\n",
        );
        let hooked = Config::from_toml_str(&hooked, Path::new("config.example.toml"), &no_env).unwrap();
        let expected = HookSpec {
            event: HookEvent::PreToolUse,
            matcher: Some("Bash".to_owned()),
            command: "~/bin/check-command".to_owned(),
            timeout: Duration::from_secs(10),
        };
        assert_eq!(hooked.hooks, [expected]);
        let off = text.replace("\nfetch = true\n", "\nfetch = false\n");
        let off = Config::from_toml_str(&off, Path::new("config.example.toml"), &no_env).unwrap();
        assert_eq!(off.tools, ToolSettings { fetch: false }, "[tools] fetch = false turns the tool off");
        // The presets say when they were checked against the servers' docs, and
        // name no model its provider has retired or scheduled for shutdown.
        assert!(text.contains("checked against each server's documentation on 20"), "the check is dated");
        for model in config.models.values() {
            for retired in ["gpt-4.1", "deepseek-chat", "deepseek-reasoner"] {
                assert_ne!(model.model, retired, "{}", model.key);
            }
            for (name, value) in &model.headers {
                if name.eq_ignore_ascii_case("HTTP-Referer") {
                    assert!(value.starts_with("https://") && !value.contains("example"), "a real URL or none");
                }
            }
        }
        let local = ["ollama", "vllm", "llamacpp", "lmstudio", "openrouter"];
        assert!(local.iter().all(|key| config.models[*key].context_window.is_none()), "their servers say");
        // The MCP server examples are commented out; they parse once uncommented.
        let (head, examples) = text.split_once("# Examples (remove the leading").unwrap();
        let uncommented: String =
            examples.lines().skip(2).map(|line| format!("{}\n", line.strip_prefix("# ").unwrap_or(line))).collect();
        let uncommented = format!("{head}{uncommented}");
        let config = Config::from_toml_str(&uncommented, Path::new("config.example.toml"), &no_env).unwrap();
        let names: Vec<&str> = config.mcp_servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["docs", "filesystem", "git", "legacy"]);
    }

    #[test]
    fn mcp_servers_parse_in_both_shapes() {
        let env = |name: &str| (name == "DOCS_TOKEN").then(|| "t0k".to_owned());
        let config = Config::from_toml_str(
            r#"
[models.m]
base_url = "http://x/v1"
model = "a"

[mcp]
startup_timeout_secs = 2.5
call_timeout_secs = 60

[mcp_servers.fs]
command = "mcp-fs"
args = ["--root", "/p"]
env = { LEVEL = "debug" }

[mcp_servers.docs]
url = "https://docs.example/mcp"
headers = { "X-Team" = "core" }
bearer_token_env = "DOCS_TOKEN"

[mcp_servers.old]
url = "http://127.0.0.1:9/sse"
transport = "sse"
"#,
            Path::new("/cfg/config.toml"),
            &env,
        )
        .unwrap();
        assert_eq!(config.mcp.startup_timeout, Duration::from_millis(2500));
        assert_eq!(config.mcp.call_timeout, Duration::from_secs(60));
        let by_name = |name: &str| config.mcp_servers.iter().find(|s| s.name == name).unwrap().transport.clone();
        assert_eq!(
            by_name("fs"),
            McpTransport::Stdio {
                command: "mcp-fs".into(),
                args: vec!["--root".into(), "/p".into()],
                env: vec![("LEVEL".into(), "debug".into())],
            }
        );
        assert_eq!(
            by_name("docs"),
            McpTransport::Http {
                url: "https://docs.example/mcp".into(),
                headers: vec![("X-Team".into(), "core".into()), ("Authorization".into(), "Bearer t0k".into())],
            }
        );
        assert_eq!(by_name("old"), McpTransport::Sse { url: "http://127.0.0.1:9/sse".into(), headers: vec![] });
        assert!(!format!("{:?}", config.mcp_servers).contains("t0k"), "secrets stay out of Debug");
    }

    #[test]
    fn bad_mcp_servers_are_named() {
        let model = "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n";
        for (bad, key) in [
            ("[mcp_servers.s]\ncommand = \"a\"\nurl = \"http://x\"\n", "mcp_servers.s.url"),
            ("[mcp_servers.s]\nargs = [\"a\"]\n", "mcp_servers.s"),
            ("[mcp_servers.s]\ncommand = \"a\"\nheaders = { A = \"b\" }\n", "mcp_servers.s.headers"),
            ("[mcp_servers.s]\ncommand = \"a\"\ntransport = \"sse\"\n", "mcp_servers.s.transport"),
            ("[mcp_servers.s]\nurl = \"http://x\"\nenv = { A = \"b\" }\n", "mcp_servers.s.env"),
            ("[mcp_servers.s]\nurl = \"ftp://x\"\n", "mcp_servers.s.url"),
            ("[mcp_servers.s]\nurl = \"http://x\"\ntransport = \"ws\"\n", "mcp_servers.s.transport"),
            ("[mcp_servers.s]\ncommand = \" \"\n", "mcp_servers.s.command"),
            ("[mcp_servers.s]\ncommand = \"a\"\ncwd = \"/\"\n", "cwd"),
            ("[mcp]\nstartup_timeout_secs = 0\n", "mcp.startup_timeout_secs"),
            ("[mcp]\ncall_timeout_secs = -1\n", "mcp.call_timeout_secs"),
        ] {
            let err = parse(&format!("{model}{bad}")).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn tools_keys_parse_and_are_checked() {
        let model = "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n";
        assert!(parse(model).unwrap().tools.fetch, "fetch is on by default");
        assert!(!parse(&format!("{model}[tools]\nfetch = false\n")).unwrap().tools.fetch);
        for (bad, key) in [("fetch = \"yes\"", "tools.fetch"), ("fetsh = false", "fetsh")] {
            let err = parse(&format!("{model}[tools]\n{bad}\n")).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }

    /// The secrets the file names are collected for the environment rule,
    /// and `[child_env]` patterns are checked.
    #[test]
    fn the_tool_call_cap_is_checked() {
        let model = "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n";
        assert_eq!(parse(model).unwrap().agent.max_tool_call_bytes, 1024 * 1024);
        let config = parse(&format!("{model}[agent]\nmax_tool_call_bytes = 65536\n")).unwrap();
        assert_eq!(config.agent.max_tool_call_bytes, 65536);
        let err = parse(&format!("{model}[agent]\nmax_tool_call_bytes = 100\n")).unwrap_err().to_string();
        assert!(err.contains("agent.max_tool_call_bytes") && err.contains("4096"), "{err}");
    }

    #[test]
    fn child_env_collects_the_known_secrets() {
        let config = parse(
            r#"
default_model = "a"
[models.a]
base_url = "http://x/v1"
model = "a"
api_key_env = "A_KEY"
[models.b]
base_url = "http://x/v1"
model = "b"
api_key_env = "B_KEY"

[mcp_servers.fs]
command = "mcp-fs"
env = { FS_TOKEN = "x", LEVEL = "debug" }

[mcp_servers.docs]
url = "https://docs.example/mcp"
bearer_token_env = "DOCS_TOKEN"

[child_env]
remove = ["AWS_*", "*_TOKEN"]
keep = ["GH_TOKEN"]
"#,
        )
        .unwrap();
        let children = &config.children;
        assert_eq!(children.secret_vars, ["A_KEY", "B_KEY", "DOCS_TOKEN", "FS_TOKEN", "LEVEL", "OPENAI_API_KEY"]);
        assert_eq!(children.remove_env, ["AWS_*", "*_TOKEN"]);
        assert_eq!(children.keep_env, ["GH_TOKEN"]);
        assert_eq!(children.supervisor, None, "set by the binary only");
        assert_eq!(Config::from_env(&no_env).children.secret_vars, ["OPENAI_API_KEY"]);

        let model = "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"a\"\n";
        for (bad, key) in [
            ("[child_env]\nremove = [\"[\"]\n", "child_env.remove"),
            ("[child_env]\nkeep = [\"\"]\n", "child_env.keep"),
            ("[child_env]\nunset = []\n", "unset"),
        ] {
            let err = parse(&format!("{model}{bad}")).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }
}
