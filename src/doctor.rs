//! `lathe doctor`: checks the setup the way a session would use it and
//! reports one line per check, `ok`, `warn`, `FAIL` or `skip`, with a reason
//! a person can act on. It fails (the binary exits 1) when any check fails.
//!
//! The checks: which config file was read (or why none); for each model, the
//! endpoint answers, the key is accepted, the server lists the model, a
//! streamed completion works, a tool call works, usage is reported, and the
//! context window (configured, or asked of the server as a session asks,
//! see [`crate::model::probe`]); the data directory takes writes; each
//! configured MCP server starts and lists its tools; and how much of the
//! command sandbox the kernel enforces.
//!
//! Bounded: every model request has [`CHECK_TIMEOUT`] and connects within
//! [`CONNECT_TIMEOUT`] (or the config's shorter limits), so a dead endpoint
//! fails its line at once and a silent one in bounded time; once an
//! endpoint is unreachable or refuses the key, its remaining checks are
//! skipped rather than waited out. No secret is printed: every detail goes
//! through the trace's [`Redactor`] with the config's secrets.
//!
//! Knows the model client, the store, the MCP hub's one-server check and the
//! sandbox probe; nothing of ACP.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use crate::config::{Config, ConfigError, ConfigSource, ModelConfig, SandboxMode};
use crate::model::{
    Message, ModelClient, ModelError, ModelErrorKind, ModelOutput, StreamDecoder, ToolDefinition, UserPart,
    WindowSource,
};
use crate::platform::sandbox::Enforcement;
use crate::redact::Redactor;

/// Longest any one model request of the doctor may take, start to end.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest the doctor waits for a connection to a model endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The tool the tool-calling check offers.
const PROBE_TOOL: &str = "report_ready";

/// `lathe doctor`'s arguments.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DoctorArgs {
    /// Print one JSON object (`ok`, and `checks`: each check's `check`,
    /// `subject`, `status` and `detail`) instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Check only this model (a `[models.<name>]` key); default: every model.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
}

/// How a check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Works, with a caveat worth knowing.
    Warn,
    /// Broken: lathe will not work as configured.
    Fail,
    /// Not run, because an earlier check failed.
    Skip,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked ("endpoint", "auth", ...).
    pub check: String,
    /// What it was checked on ("model openrouter", "mcp git"), if anything.
    pub subject: Option<String>,
    /// How it went.
    pub status: Status,
    /// Why, in words (secrets redacted).
    pub detail: String,
}

/// Every check, in order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// The checks.
    pub checks: Vec<Check>,
    #[serde(skip)]
    redactor: Redactor,
}

impl Report {
    /// Whether no check failed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|check| check.status != Status::Fail)
    }

    /// The check named `check` on `subject`, if it was made.
    pub fn find(&self, check: &str, subject: Option<&str>) -> Option<&Check> {
        self.checks.iter().find(|c| c.check == check && c.subject.as_deref() == subject)
    }

    fn add(&mut self, check: &str, subject: Option<&str>, status: Status, detail: impl Into<String>) {
        let detail = self.redactor.text(&detail.into());
        self.checks.push(Check { check: check.to_owned(), subject: subject.map(str::to_owned), status, detail });
    }

    /// Writes the report: what this binary is (version, commit, target,
    /// build date), then one line per check; or one JSON object (the same
    /// as `build`).
    pub fn write(&self, out: &mut dyn Write, as_json: bool) -> std::io::Result<()> {
        if as_json {
            let value = json!({"ok": self.passed(), "build": crate::build_info::current(), "checks": self.checks});
            // One line, with C1 controls, bidi and invisible characters of
            // what servers said escaped like C0 ones: safe on a terminal.
            let line = crate::present::text::json_line(&value).map_err(std::io::Error::other)?;
            return writeln!(out, "{line}");
        }
        writeln!(out, "lathe {}", crate::build_info::SUMMARY)?;
        let width = self.checks.iter().map(|c| label(c).chars().count()).max().unwrap_or(0);
        for check in &self.checks {
            // Details quote servers (errors, model names): escaped, one line each.
            let detail = crate::present::text::shown(&check.detail, crate::present::text::Lines::One);
            writeln!(out, "{} {:width$}  {detail}", check.status.label(), label(check))?;
        }
        let failed = self.checks.iter().filter(|c| c.status == Status::Fail).count();
        match failed {
            0 => writeln!(out, "all checks passed"),
            n => writeln!(out, "{n} check{} failed", if n == 1 { "" } else { "s" }),
        }
    }
}

fn label(check: &Check) -> String {
    let label = match &check.subject {
        Some(subject) => format!("{subject}: {}", check.check),
        None => check.check.clone(),
    };
    crate::present::text::shown(&label, crate::present::text::Lines::One).into_owned()
}

/// Runs every check. `loaded` is the config as the binary loaded it,
/// `located` where it looked for a file, `data_dir` where sessions go.
pub async fn run(
    args: &DoctorArgs,
    loaded: Result<Config, ConfigError>,
    located: Option<PathBuf>,
    data_dir: Option<PathBuf>,
) -> Report {
    let mut report = Report { checks: Vec::new(), redactor: Redactor::default() };
    let config = match loaded {
        Ok(config) => config,
        Err(err) => {
            report.add("config", None, Status::Fail, err.to_string());
            check_data_dir(&mut report, data_dir.as_deref());
            return report;
        }
    };
    report.redactor = Redactor::new(crate::redact::secrets_of(&config));
    let looked = located.map_or_else(|| "no default location (HOME unset)".to_owned(), |p| p.display().to_string());
    let configured = match &config.source {
        ConfigSource::File(path) => {
            report.add("config", None, Status::Ok, format!("read {}", path.display()));
            true
        }
        ConfigSource::Environment => {
            report.add(
                "config",
                None,
                Status::Ok,
                format!("no file at {looked}; using OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL"),
            );
            true
        }
        ConfigSource::Discovered { server, base_url } => {
            let model = config.default_model().map_or("", |m| m.model.as_str());
            report.add(
                "config",
                None,
                Status::Ok,
                format!(
                    "no config file at {looked}; using the {server} server found running at {base_url} \
                     (model {model}). `lathe setup` writes a config that keeps it"
                ),
            );
            true
        }
        ConfigSource::Unconfigured => {
            let found = match config.local_servers.as_slice() {
                [] => "no model server runs on this machine's usual ports".to_owned(),
                servers => format!("found {} model servers ({}), none chosen", servers.len(), servers.join("; ")),
            };
            report.add(
                "config",
                None,
                Status::Fail,
                format!(
                    "no config file at {looked}, OPENAI_API_KEY and OPENAI_BASE_URL are unset, and {found}: \
                     run `lathe setup` (or `lathe init --preset <name>`)"
                ),
            );
            false
        }
    };
    if configured {
        let models: Vec<&ModelConfig> = match &args.model {
            Some(key) => match config.models.get(key) {
                Some(model) => vec![model],
                None => {
                    let known: Vec<&str> = config.models.keys().map(String::as_str).collect();
                    report.add(
                        "model",
                        Some(key),
                        Status::Fail,
                        format!("not configured; the models are {}", known.join(", ")),
                    );
                    Vec::new()
                }
            },
            None => config.models.values().collect(),
        };
        for model in models {
            check_model(&mut report, model, &config).await;
        }
    }
    check_data_dir(&mut report, data_dir.as_deref());
    check_mcp(&mut report, &config).await;
    check_sandbox(&mut report, &config);
    report
}

/// The settings the doctor talks to endpoints with: the config's, with
/// the connect and response waits capped.
fn bounded(config: &Config) -> crate::config::NetworkSettings {
    let mut network = config.network.clone();
    network.connect_timeout = network.connect_timeout.min(CONNECT_TIMEOUT);
    network.response_timeout = network.response_timeout.min(CHECK_TIMEOUT);
    network.stream_idle_timeout = network.stream_idle_timeout.min(CHECK_TIMEOUT);
    network
}

/// Every model's lines of `lathe doctor` and nothing else: what `lathe
/// setup` checks before it writes a config.
pub async fn check_models(config: &Config) -> Report {
    let mut report = Report { checks: Vec::new(), redactor: Redactor::new(crate::redact::secrets_of(config)) };
    for model in config.models.values() {
        check_model(&mut report, model, config).await;
    }
    report
}

/// The checks that need no completion, for the default model: the
/// endpoint answers, the key is accepted, the model is listed (one `GET
/// {base_url}/models`). What ACP `authenticate` asks before it says yes.
pub async fn check_access(config: &Config) -> Report {
    let mut report = Report { checks: Vec::new(), redactor: Redactor::new(crate::redact::secrets_of(config)) };
    match config.default_model() {
        Some(model) => {
            let _ = check_reach(&mut report, model, config).await;
        }
        None => report.add("model", Some(&config.default_model), Status::Fail, "not configured"),
    }
    report
}

/// A model's lines, in order: an unreachable endpoint skips those after
/// the first, a refused key those after the second.
const REST: [&str; 7] = ["endpoint", "auth", "listed", "streaming", "tools", "usage", "context window"];

/// Reachable, key accepted, model listed: one `GET {base_url}/models`.
/// The client and how its key was given, when the rest may go on.
async fn check_reach(report: &mut Report, model: &ModelConfig, config: &Config) -> Option<(ModelClient, String)> {
    let subject = format!("model {}", model.key);
    let subject = Some(subject.as_str());
    let client = match ModelClient::new(Arc::new(model.clone()), &bounded(config)) {
        Ok(client) => client,
        Err(err) => {
            report.add("endpoint", subject, Status::Fail, err.to_string());
            return None;
        }
    };
    let key_source = match (&model.api_key, &model.api_key_env) {
        (Some(_), Some(env)) => format!("the key from ${env}"),
        (Some(_), None) if model.api_key_stored => "the key `lathe setup` stored".to_owned(),
        (Some(_), None) => "the configured key".to_owned(),
        (None, Some(env)) => format!("no key (${env} is unset)"),
        (None, None) if model.api_key_stored => "no key (the one `lathe setup` stored was forgotten)".to_owned(),
        (None, None) => "no key (none configured)".to_owned(),
    };
    // Reachable, key accepted, model listed: one GET {base}/models.
    let listed = bounded_wait(client.list_models()).await;
    match &listed {
        Err(err) if unreachable(err) => {
            report.add("endpoint", subject, Status::Fail, format!("{} is unreachable: {err}", model.base_url));
            for check in REST.iter().skip(1) {
                report.add(check, subject, Status::Skip, "the endpoint is unreachable");
            }
            return None;
        }
        Err(ModelError::Http { status, .. }) => {
            report.add("endpoint", subject, Status::Ok, format!("{} answered (HTTP {status})", model.base_url));
        }
        Err(_) | Ok(_) => report.add("endpoint", subject, Status::Ok, format!("{} answered", model.base_url)),
    }
    let refused = |err: &ModelError| err.kind() == ModelErrorKind::Auth;
    if let Err(err) = &listed
        && refused(err)
    {
        report.add("auth", subject, Status::Fail, format!("{key_source} was refused: {err}"));
        for check in REST.iter().skip(2) {
            report.add(check, subject, Status::Skip, "the key was refused");
        }
        return None;
    }
    report.add("auth", subject, Status::Ok, format!("{key_source} was accepted"));
    match &listed {
        Ok(ids) if ids.iter().any(|id| id == &model.model) => {
            report.add("listed", subject, Status::Ok, format!("the server lists {}", model.model));
        }
        Ok(ids) => {
            let some: Vec<&str> = ids.iter().take(5).map(String::as_str).collect();
            let more = if ids.len() > some.len() { ", ..." } else { "" };
            report.add(
                "listed",
                subject,
                Status::Warn,
                format!(
                    "{} is not among the {} models the server lists ({}{more}); some servers serve it anyway, see streaming",
                    model.model,
                    ids.len(),
                    some.join(", ")
                ),
            );
        }
        Err(err) => report.add("listed", subject, Status::Warn, format!("the server gave no model list: {err}")),
    }
    Some((client, key_source))
}

async fn check_model(report: &mut Report, model: &ModelConfig, config: &Config) {
    let subject = format!("model {}", model.key);
    let subject = Some(subject.as_str());
    let Some((client, key_source)) = check_reach(report, model, config).await else { return };
    let auth_at = report.checks.iter().rposition(|c| c.check == "auth" && c.subject.as_deref() == subject).unwrap_or(0);
    let refused = |err: &ModelError| err.kind() == ModelErrorKind::Auth;

    // The window first: a server that lists no tool support for the model
    // makes the client chat-only, as in a session.
    let info = client.info().await.clone();

    let completion = bounded_wait(complete(&client, "Reply with the single word: ready", &[])).await;
    match &completion {
        Ok(output) => {
            let said = one_line(&output.text, 40);
            report.add("streaming", subject, Status::Ok, format!("a streamed completion answered \"{said}\""));
        }
        Err(err) => {
            if refused(err) {
                report.checks[auth_at].status = Status::Fail;
                report.checks[auth_at].detail = report.redactor.text(&format!("{key_source} was refused: {err}"));
            }
            report.add("streaming", subject, Status::Fail, err.to_string());
        }
    }

    let tool = ToolDefinition::function(
        PROBE_TOOL,
        "Report that you are ready. Always call this tool when asked to.",
        json!({"type": "object", "properties": {"ready": {"type": "boolean"}}, "required": ["ready"]}),
    );
    let called = match &completion {
        Err(err) if refused(err) || unreachable(err) => {
            report.add("tools", subject, Status::Skip, "the streamed completion failed");
            None
        }
        _ => Some(
            bounded_wait(complete(
                &client,
                "Call the report_ready tool with ready = true.",
                std::slice::from_ref(&tool),
            ))
            .await,
        ),
    };
    match (&called, client.chat_only()) {
        (None, _) => {}
        (Some(_), Some(why)) => report.add(
            "tools",
            subject,
            Status::Fail,
            format!("the model takes no tools ({why}); lathe would run it chat-only, without file or shell tools"),
        ),
        (Some(Ok(output)), None) if output.tool_calls.iter().any(|call| call.name == PROBE_TOOL) => {
            match output.text_tool_calls {
                None => report.add("tools", subject, Status::Ok, format!("the model called {PROBE_TOOL}")),
                Some(format) => report.add(
                    "tools",
                    subject,
                    Status::Warn,
                    format!(
                        "the model called {PROBE_TOOL} in its answer text ({}): the server has no tool-call parser \
                         for it, so lathe reads calls from the text and asks before each one",
                        format.name()
                    ),
                ),
            }
        }
        (Some(Ok(output)), None) => report.add(
            "tools",
            subject,
            Status::Warn,
            format!(
                "the server took the tool, but the model answered in text (\"{}\") instead of calling it",
                one_line(&output.text, 40)
            ),
        ),
        (Some(Err(err)), None) => report.add("tools", subject, Status::Fail, err.to_string()),
    }

    let usage = [completion.as_ref().ok(), called.as_ref().and_then(|c| c.as_ref().ok())]
        .into_iter()
        .flatten()
        .find_map(|output| output.usage);
    match (usage, &completion) {
        (Some(usage), _) => report.add(
            "usage",
            subject,
            Status::Ok,
            format!("reported ({} prompt + {} completion tokens)", usage.input_tokens, usage.output_tokens),
        ),
        (None, Err(_)) => report.add("usage", subject, Status::Skip, "no completion came back"),
        (None, Ok(_)) => report.add(
            "usage",
            subject,
            Status::Warn,
            "not reported: editors see an estimate of the context used (stream_usage asks for it)",
        ),
    }

    let window = format!("{} tokens, from {}", info.context_window, info.window_source);
    match info.window_source {
        WindowSource::Default => {
            report.add("context window", subject, Status::Warn, format!("{window}; set context_window for this model"))
        }
        WindowSource::Configured | WindowSource::Server(_) => report.add("context window", subject, Status::Ok, window),
    }
}

/// Connection failures and timeouts: nothing else about the endpoint can be learnt.
fn unreachable(err: &ModelError) -> bool {
    matches!(err, ModelError::Connect { .. } | ModelError::ResponseTimeout(_))
}

async fn bounded_wait<T>(work: impl Future<Output = Result<T, ModelError>>) -> Result<T, ModelError> {
    tokio::time::timeout(CHECK_TIMEOUT, work).await.unwrap_or(Err(ModelError::ResponseTimeout(CHECK_TIMEOUT)))
}

/// One streamed request with one user message, read to its end.
async fn complete(client: &ModelClient, prompt: &str, tools: &[ToolDefinition]) -> Result<ModelOutput, ModelError> {
    let messages = [Message::User { parts: vec![UserPart::Text { text: prompt.to_owned() }] }];
    let mut stream = client.stream("You are lathe's setup check. Be brief.", &messages, tools).await?;
    // As a session would on its first request (see `text_tool_calls`).
    let recover = client.model().text_tool_calls != crate::config::TextToolCalls::Off;
    let mut decoder =
        StreamDecoder::new("doctor").offering(tools.iter().map(ToolDefinition::name)).recovering_text_calls(recover);
    let mut ignore = |_| {};
    while let Some(chunk) = stream.next().await {
        decoder.push(chunk?, &mut ignore).map_err(|err| ModelError::Provider(err.0))?;
    }
    decoder.end(&mut ignore);
    Ok(decoder.finish())
}

fn one_line(text: &str, max_chars: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

fn check_data_dir(report: &mut Report, data_dir: Option<&std::path::Path>) {
    let Some(dir) = data_dir else {
        report.add("data dir", None, Status::Warn, "none (set --data-dir or LATHE_DATA_DIR): sessions are not saved");
        return;
    };
    match crate::store::Store::open(dir, crate::store::Retention::default(), Box::new(|_| {})) {
        Ok(_) => report.add(
            "data dir",
            None,
            Status::Ok,
            format!("sessions are saved in {}", dir.join("sessions").display()),
        ),
        Err(err) => report.add("data dir", None, Status::Fail, format!("sessions cannot be saved: {err}")),
    }
}

async fn check_mcp(report: &mut Report, config: &Config) {
    if config.mcp_servers.is_empty() {
        return;
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let launcher =
        crate::platform::process::Launcher::for_session(&config.children, &config.sandbox, std::slice::from_ref(&cwd));
    for server in &config.mcp_servers {
        let subject = format!("mcp {}", server.name);
        // The connection has its own start-up limit; this one only guards it.
        let limit = config.mcp.startup_timeout + Duration::from_secs(5);
        let checked =
            tokio::time::timeout(limit, crate::mcp::check_server(server, &config.mcp, (&cwd, &launcher))).await;
        match checked {
            Ok(Ok(tools)) => {
                let names = one_line(&tools.join(", "), 120);
                report.add(
                    "tools listed",
                    Some(&subject),
                    Status::Ok,
                    format!("started; {} tools: {names}", tools.len()),
                );
            }
            Ok(Err(why)) => report.add("tools listed", Some(&subject), Status::Fail, why),
            Err(_) => report.add(
                "tools listed",
                Some(&subject),
                Status::Fail,
                format!("it did not start within {} s", limit.as_secs()),
            ),
        }
    }
}

fn check_sandbox(report: &mut Report, config: &Config) {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let trampoline = config.children.supervisor.as_deref();
    let sandbox =
        crate::platform::sandbox::SessionSandbox::new(&config.sandbox, std::slice::from_ref(&cwd), trampoline);
    let status = sandbox.status();
    let mode = config.sandbox.mode;
    // What a command in it may do, as the model is told.
    let rules = sandbox
        .policy()
        .map(|policy| {
            let rules = policy.describe();
            format!("; a command in it {}", rules.strip_prefix("it ").unwrap_or(&rules))
        })
        .unwrap_or_default();
    let (level, what) = match (mode, status.enforcement) {
        (SandboxMode::Off, _) => (Status::Ok, "off ([sandbox] mode = \"off\"): commands run unconfined".to_owned()),
        (_, Enforcement::Full) => (Status::Ok, format!("fully enforced ({}){rules}", status.detail)),
        (SandboxMode::Auto, Enforcement::Partial) => {
            (Status::Warn, format!("partly enforced ({}); in auto mode every command asks first{rules}", status.detail))
        }
        (SandboxMode::Auto, Enforcement::None) => {
            (Status::Warn, format!("not enforced ({}); in auto mode every command asks first", status.detail))
        }
        (SandboxMode::Required, Enforcement::Partial | Enforcement::None) => (
            Status::Fail,
            format!(
                "[sandbox] mode = \"required\", but it is not fully enforced ({}): commands will be refused",
                status.detail
            ),
        ),
    };
    report.add("sandbox", None, level, what);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_are_redacted_and_failures_fail() {
        let mut report = Report { checks: Vec::new(), redactor: Redactor::new(vec!["sk-secret-123".into()]) };
        report.add("auth", Some("model m"), Status::Fail, "Incorrect API key provided: sk-secret-123");
        report.add("listed", Some("model m"), Status::Warn, "w");
        assert!(!report.passed());
        let mut text = Vec::new();
        report.write(&mut text, false).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(!text.contains("sk-secret-123") && text.contains("[redacted]"), "{text}");
        assert!(text.contains("FAIL model m: auth"), "{text}");
        // What was run comes first, so a pasted report says it.
        let first = text.lines().next().unwrap();
        assert_eq!(first, format!("lathe {}", crate::build_info::SUMMARY));
        assert!(first.contains(crate::build_info::COMMIT) && first.contains(crate::build_info::TARGET), "{first}");
        let mut json = Vec::new();
        report.write(&mut json, true).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(value["ok"], false);
        assert_eq!(value["build"]["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(value["build"]["target"], crate::build_info::TARGET);
        assert_eq!(value["build"]["commit"], crate::build_info::COMMIT);
        assert_eq!(value["checks"][0]["status"], "fail");
        assert_eq!(value["checks"][1]["subject"], "model m");
    }

    /// Details quote servers (a model name a local server gave, an error
    /// body): an escape sequence or a line break is shown, never sent.
    #[test]
    fn what_servers_said_is_shown_escaped_on_one_line() {
        let mut report = Report::default();
        report.add("config", Some("model \u{1b}]0;x"), Status::Ok, "model qwen\u{1b}[2J\nok   forged line");
        let mut text = Vec::new();
        report.write(&mut text, false).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert!(text.contains("model \\u{1b}]0;x: config") && text.contains("qwen\\u{1b}[2J\\nok   forged"), "{text}");
        assert_eq!(text.lines().count(), 3, "what was run, the check and the summary: {text}");
    }

    /// `--json` too: a C1 control (CSI, U+009B) or a bidi override in a
    /// server's words is a `\u` escape in the output, the value unchanged.
    #[test]
    fn the_json_report_escapes_what_a_terminal_would_obey() {
        let detail = "model qwen\u{9b}2J \u{202e}kc\u{1b}[0m";
        let mut report = Report::default();
        report.add("config", None, Status::Ok, detail);
        let mut json = Vec::new();
        report.write(&mut json, true).unwrap();
        let text = String::from_utf8(json).unwrap();
        assert!(!text.contains(['\u{9b}', '\u{202e}', '\u{1b}']), "{text:?}");
        assert!(text.contains("\\u009b") && text.contains("\\u202e"), "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["checks"][0]["detail"], detail);
    }
}
