//! Hooks: the user's own commands, run at fixed points of a session, with
//! Claude Code's event names and the JSON it gives its hooks on stdin, so a
//! hook written for one works with the other (the README, "Hooks", names
//! every difference).
//!
//! - **Events**: `SessionStart` (at a session's first prompt), then at every
//!   prompt `UserPromptSubmit` (before the model sees it), `PreToolUse` and
//!   `PostToolUse` around each tool call, `Stop` when the model is done.
//!   A matcher picks tool calls by name: lathe's (`shell`, `write_file`,
//!   `docs__search`) or Claude Code's for the same tool (`Bash`, `Write`,
//!   `mcp__docs__search`), a regular expression matched against the whole
//!   name.
//! - **Answers**: exit 0 goes on (what the hook printed is shown on the tool
//!   call, or as a notice); exit 2 blocks (its stderr is the reason: to the
//!   model, or to the user for `UserPromptSubmit`); a JSON object on stdout
//!   decides as Claude Code's do (`permissionDecision` allow / deny / ask,
//!   `decision: "block"`, `additionalContext`, `continue`, `systemMessage`).
//!   A `PreToolUse` "allow" never overrides the sandbox or a mode that
//!   refuses the call: it only skips the question the mode would have
//!   asked, and never the question about leaving the sandbox.
//! - **Where they come from**: the user's config (`[[hooks.PreToolUse]]`),
//!   trusted; and the project's `.lathe/hooks.toml` and `.claude/settings.json`
//!   (`hooks`), which are workspace content: read through the one reader for
//!   workspace files, and run only once the user trusted that exact set of
//!   hooks (a question listing every command; the trust is kept in lathe's
//!   data directory with the set's SHA-256, and asked for again when the set
//!   changes). Where nobody can be asked (`lathe exec` without a terminal),
//!   untrusted project hooks are skipped, with a notice.
//! - **How they run** ([`run`]): `sh -c <command>` as the user, in the
//!   session's directory, through the same trampoline as commands (scrubbed
//!   environment, killed with lathe), not sandboxed, each within its timeout
//!   (default 60 s); a cancel kills it at once, a timeout is reported. What a
//!   hook prints is shown escaped ([`crate::present::text::shown`]).
//!
//! This module knows the hooks, their files and their answers; the turn
//! ([`crate::agent`]) decides what an answer does to a call.

pub mod run;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::agent::{AgentEvent, EventSink};
use crate::cancel::{Cancelled, OrCancel as _};
pub use crate::config::{HookEvent, HookSpec};
use crate::fs_guard::{self, Area};
use crate::permission::{Answer, Approver, Choice, Lasting, PermissionQuestion};
use crate::present::text::{Lines, shown};
use crate::sync::lock;
use crate::tools::{DisplayContent, Launcher, ToolKind};

/// A project's own hook file.
pub const PROJECT_HOOKS: &str = ".lathe/hooks.toml";

/// Claude Code's project settings, whose `hooks` lathe also runs.
pub const CLAUDE_SETTINGS: &str = ".claude/settings.json";

/// Largest project hook file read.
const MAX_HOOK_FILE_BYTES: u64 = 64 * 1024;

/// The file in a project's folder (data directory) naming the hooks trusted.
const TRUST_FILE: &str = "hooks-trust.toml";

/// Most of one hook's output shown to the user, in bytes.
const SHOWN_BYTES: usize = 4 * 1024;

/// Most of one hook's output given to the model, in bytes.
const CONTEXT_BYTES: usize = 16 * 1024;

/// Where a hook comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The user's config: trusted.
    User,
    /// A project file: run once trusted.
    Project(&'static str),
}

/// A hook ready to run.
#[derive(Debug, Clone)]
pub struct Hook {
    /// What it is.
    pub spec: HookSpec,
    /// Where it comes from.
    pub origin: Origin,
    matcher: Option<regex_automata::meta::Regex>,
}

impl Hook {
    /// A hook from `spec`; `None` when its matcher is not a regular
    /// expression (files are checked when read, so this is for the rest).
    pub fn new(spec: HookSpec, origin: Origin) -> Option<Hook> {
        let matcher = match spec.matcher.as_deref().map(crate::config::hook_matcher) {
            None => None,
            Some(Ok(matcher)) => matcher,
            Some(Err(_)) => return None,
        };
        Some(Hook { spec, origin, matcher })
    }

    /// Whether it runs for a call or a start with one of these names. An
    /// event that names nothing (`UserPromptSubmit`, `Stop`) ignores the
    /// matcher, as Claude Code does.
    fn matches(&self, names: &[String]) -> bool {
        match &self.matcher {
            None => true,
            Some(_) if names.is_empty() => true,
            Some(regex) => names.iter().any(|name| regex.is_match(name.as_str())),
        }
    }

    /// How it is named to the user: its command, on one line, shortened.
    pub fn label(&self) -> String {
        let command: String = self.spec.command.trim().chars().take(60).collect();
        let cut = if self.spec.command.trim().chars().count() > 60 { "…" } else { "" };
        shown(&format!("{command}{cut}"), Lines::One).into_owned()
    }
}

/// The project's hooks as read from its files, and the SHA-256 of that set.
#[derive(Debug, Clone, Default)]
pub struct ProjectHooks {
    /// The hooks, in file order.
    pub hooks: Vec<Hook>,
    /// Names the exact set (file, event, matcher, command, timeout of each).
    pub hash: String,
    /// What was left out and why (a file that is not valid, an event or a
    /// hook type lathe does not have), for a notice.
    pub problems: Vec<String>,
}

/// Reads the project's hook files under `root` through the workspace
/// reader (regular files inside the project, capped). Blocking.
pub fn read_project_hooks(root: &Path) -> ProjectHooks {
    let mut found = ProjectHooks::default();
    let within = [root.to_path_buf()];
    for (file, parse) in [
        (PROJECT_HOOKS, lathe_file as fn(&str, &Path) -> Result<(Vec<HookSpec>, Vec<String>), String>),
        (CLAUDE_SETTINGS, claude_file),
    ] {
        let path = root.join(file);
        let text = match fs_guard::read_workspace_file(&path, Area::Within(&within), MAX_HOOK_FILE_BYTES) {
            Ok(None) => continue,
            Ok(Some(read)) if read.omitted > 0 => {
                found.problems.push(format!("{file} is over {MAX_HOOK_FILE_BYTES} bytes: none of its hooks run"));
                continue;
            }
            Ok(Some(read)) => read.text,
            Err(refusal) => {
                found.problems.push(format!("{file} was not read ({refusal}): none of its hooks run"));
                continue;
            }
        };
        match parse(&text, &path) {
            Ok((specs, left_out)) => {
                found.problems.extend(left_out.into_iter().map(|why| format!("{file}: {why}")));
                found.hooks.extend(specs.into_iter().filter_map(|spec| Hook::new(spec, Origin::Project(file))));
            }
            Err(why) => found.problems.push(format!("{why}: none of its hooks run")),
        }
    }
    found.hash = set_hash(&found.hooks);
    found
}

fn lathe_file(text: &str, path: &Path) -> Result<(Vec<HookSpec>, Vec<String>), String> {
    crate::config::project_hooks(text, path).map(|specs| (specs, Vec::new())).map_err(|err| err.to_string())
}

/// The `hooks` of a Claude Code `settings.json`: `{"PreToolUse": [{"matcher":
/// "Bash", "hooks": [{"type": "command", "command": "...", "timeout": 30}]}]}`.
/// Events lathe does not have and hooks that are not commands are left out
/// (named in the second list).
fn claude_file(text: &str, path: &Path) -> Result<(Vec<HookSpec>, Vec<String>), String> {
    let file = path.display();
    let settings: Value = serde_json::from_str(text).map_err(|err| format!("{file}: not JSON ({err})"))?;
    let Some(events) = settings.get("hooks") else { return Ok((Vec::new(), Vec::new())) };
    let events = events.as_object().ok_or_else(|| format!("{file}: `hooks` is not an object"))?;
    let mut specs = Vec::new();
    let mut left_out = Vec::new();
    for (name, groups) in events {
        let Some(event) = HookEvent::from_name(name) else {
            left_out.push(format!("lathe has no {name} event; those hooks do not run"));
            continue;
        };
        let groups = groups.as_array().ok_or_else(|| format!("{file}: hooks.{name} is not a list"))?;
        for group in groups {
            let matcher = match group.get("matcher") {
                None | Some(Value::Null) => None,
                Some(Value::String(matcher)) => Some(matcher.clone()),
                Some(_) => return Err(format!("{file}: a matcher of hooks.{name} is not a string")),
            };
            if let Some(matcher) = &matcher
                && let Err(err) = crate::config::hook_matcher(matcher)
            {
                return Err(format!("{file}: hooks.{name}: matcher {matcher:?} is not a regular expression ({err})"));
            }
            let hooks = group.get("hooks").and_then(Value::as_array).cloned().unwrap_or_default();
            for hook in hooks {
                let kind = hook.get("type").and_then(Value::as_str).unwrap_or("command");
                let Some(command) = hook.get("command").and_then(Value::as_str).filter(|_| kind == "command") else {
                    left_out.push(format!("a `{kind}` hook of {name}: lathe runs only command hooks"));
                    continue;
                };
                let timeout = match hook.get("timeout").and_then(Value::as_f64) {
                    Some(secs) if secs.is_finite() && secs > 0.0 && secs < 1e9 => Duration::from_secs_f64(secs),
                    _ => crate::config::DEFAULT_HOOK_TIMEOUT,
                };
                if !command.trim().is_empty() {
                    specs.push(HookSpec { event, matcher: matcher.clone(), command: command.to_owned(), timeout });
                }
            }
        }
    }
    Ok((specs, left_out))
}

/// The SHA-256 (hex) of a set of hooks: each one's file, event, matcher,
/// command and timeout, in order. Comments and unrelated settings do not
/// count; any change to what would run does.
fn set_hash(hooks: &[Hook]) -> String {
    let mut digest = Sha256::new();
    for hook in hooks {
        let origin = match hook.origin {
            Origin::User => "user",
            Origin::Project(file) => file,
        };
        let record = json!([
            origin,
            hook.spec.event.name(),
            hook.spec.matcher,
            hook.spec.command,
            hook.spec.timeout.as_secs_f64()
        ]);
        digest.update(record.to_string().as_bytes());
        digest.update(b"\n");
    }
    digest.finalize().iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Whether the set with `hash` is the one the user trusted for the project
/// whose folder is `project_dir`. Blocking.
fn is_trusted(project_dir: &Path, root: &Path, hash: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Trust {
        project: PathBuf,
        sha256: String,
    }
    let Ok(text) = std::fs::read_to_string(project_dir.join(TRUST_FILE)) else { return false };
    toml::from_str::<Trust>(&text).is_ok_and(|trust| trust.project == root && trust.sha256 == hash)
}

/// Keeps that the user trusts the set with `hash`. Blocking.
fn trust(project_dir: &Path, root: &Path, hash: &str) -> std::io::Result<()> {
    let root_toml = toml::Value::String(root.to_string_lossy().into_owned()).to_string();
    let text = format!(
        "# lathe runs the hooks of {} ({PROJECT_HOOKS}, {CLAUDE_SETTINGS}) while they are\n\
         # exactly the set you trusted, which this hash names; any change asks again.\n\
         project = {root_toml}\nsha256 = \"{hash}\"\n",
        shown(&root.display().to_string(), Lines::One)
    );
    crate::rules::write_private(&project_dir.join(TRUST_FILE), text.as_bytes())
}

/// What every hook's input carries, and where hooks run.
#[derive(Debug, Clone)]
pub struct Common {
    /// The session id.
    pub session_id: String,
    /// The session's journal (`log.jsonl`), when it is saved.
    pub transcript_path: Option<PathBuf>,
    /// The session's directory: where hooks run, and their `cwd`.
    pub cwd: PathBuf,
    /// The project root (`LATHE_PROJECT_DIR`, `CLAUDE_PROJECT_DIR`).
    pub root: PathBuf,
}

/// One session's hooks: the user's, the project's once trusted, and what
/// the session remembers about them.
#[derive(Debug)]
pub struct SessionHooks {
    user: Vec<Hook>,
    common: Common,
    /// The project's folder in the data directory (trust is kept there).
    project_dir: Option<PathBuf>,
    /// `startup` for a new session, `resume` for one loaded or resumed.
    source: &'static str,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// `SessionStart` ran.
    started: bool,
    /// The set the user trusted for this session only.
    trusted_here: Option<String>,
    /// The set the user declined for this session.
    declined: Option<String>,
    /// Notices given already (so each is said once per session).
    told: Vec<String>,
}

impl SessionHooks {
    /// The hooks of a session: the user's `config` hooks; the project's are
    /// read at each prompt. `resumed`: the session was loaded or resumed.
    pub fn new(user: &[HookSpec], common: Common, project_dir: Option<PathBuf>, resumed: bool) -> SessionHooks {
        SessionHooks {
            user: user.iter().cloned().filter_map(|spec| Hook::new(spec, Origin::User)).collect(),
            common,
            project_dir,
            source: if resumed { "resume" } else { "startup" },
            state: Mutex::new(State::default()),
        }
    }

    /// The hooks of one prompt: the user's, and the project's as their
    /// files are now when the user trusts them (asking through `approver`
    /// when the set is new or changed; a pseudo tool call shows the
    /// question and its answer). `Err` when the turn was cancelled.
    pub async fn for_turn(
        &self,
        approver: &dyn Approver,
        events: &dyn EventSink,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<TurnHooks, Cancelled> {
        let mut hooks = self.user.clone();
        let root = self.common.root.clone();
        let project = tokio::task::spawn_blocking(move || read_project_hooks(&root)).await.unwrap_or_default();
        for problem in &project.problems {
            self.tell_once(
                events,
                "A project hook file was left out",
                &format!("A project hook file was left out: {problem}"),
            );
        }
        if !project.hooks.is_empty() && self.project_trusted(&project, approver, events, cancel).await? {
            hooks.extend(project.hooks);
        }
        let first = !std::mem::replace(&mut lock(&self.state).started, true);
        Ok(TurnHooks { hooks, common: self.common.clone(), first, source: self.source })
    }

    /// Whether the project's hooks may run this turn, asking when needed.
    async fn project_trusted(
        &self,
        project: &ProjectHooks,
        approver: &dyn Approver,
        events: &dyn EventSink,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<bool, Cancelled> {
        {
            let state = lock(&self.state);
            if state.trusted_here.as_deref() == Some(project.hash.as_str()) {
                return Ok(true);
            }
            if state.declined.as_deref() == Some(project.hash.as_str()) {
                return Ok(false);
            }
        }
        if let Some(dir) = self.project_dir.clone() {
            let (root, hash) = (self.common.root.clone(), project.hash.clone());
            let trusted = tokio::task::spawn_blocking(move || is_trusted(&dir, &root, &hash)).await.unwrap_or(false);
            if trusted {
                lock(&self.state).trusted_here = Some(project.hash.clone());
                return Ok(true);
            }
        }
        if !approver.can_ask() {
            self.tell_once(
                events,
                "This project's hooks did not run",
                &format!(
                    "{} has hooks you have not trusted, and nobody can be asked here, so they were skipped. Run \
                     lathe on a terminal (or in an editor) in this project to review and trust them.",
                    shown(&self.common.root.display().to_string(), Lines::One)
                ),
            );
            return Ok(false);
        }
        let id = format!("hooks_{}", uuid::Uuid::new_v4().simple());
        events.emit(AgentEvent::ToolCallStarted {
            id: id.clone(),
            title: "Run this project's hooks?".to_owned(),
            kind: ToolKind::Execute,
            // No model's tool: the question is lathe's own.
            name: "hooks".to_owned(),
        });
        let keeps = self.project_dir.is_some();
        let mut choices =
            vec![Choice { answer: Answer::AllowOnce, id: "allow_once", label: "Run them in this session".to_owned() }];
        if keeps {
            choices.insert(
                0,
                Choice {
                    answer: Answer::AllowAlways(Lasting::Project),
                    id: "allow_always",
                    label: "Trust them for this project (asked again when they change)".to_owned(),
                },
            );
        }
        choices.push(Choice { answer: Answer::RejectOnce, id: "reject_once", label: "Do not run them".to_owned() });
        let question = PermissionQuestion {
            call_id: id.clone(),
            title: "Run this project's hooks?".to_owned(),
            kind: ToolKind::Execute,
            locations: Vec::new(),
            preview: vec![DisplayContent::Text(listing(&project.hooks, &self.common.root))],
            raw_input: None,
            choices,
            parent_call_id: None,
        };
        let answer = match approver.ask(&question).or_cancel(cancel).await {
            Err(Cancelled) | Ok(Ok(Answer::Cancelled)) => {
                finish(events, &id, false, "Cancelled.");
                return Err(Cancelled);
            }
            Ok(Ok(answer)) => answer,
            Ok(Err(err)) => {
                finish(events, &id, false, &format!("Not run: the question could not be asked ({err})."));
                return Ok(false);
            }
        };
        let run = answer.allows();
        if run {
            lock(&self.state).trusted_here = Some(project.hash.clone());
        } else {
            lock(&self.state).declined = Some(project.hash.clone());
        }
        let said = match answer {
            Answer::AllowAlways(_) => {
                let kept = match self.project_dir.clone() {
                    Some(dir) => {
                        let (root, hash) = (self.common.root.clone(), project.hash.clone());
                        tokio::task::spawn_blocking(move || trust(&dir, &root, &hash))
                            .await
                            .map_err(std::io::Error::other)
                            .and_then(|kept| kept)
                    }
                    None => Ok(()),
                };
                match kept {
                    Ok(()) => "Trusted: they run until they change.".to_owned(),
                    Err(err) => format!("Trusted for this session only: the trust could not be kept ({err})."),
                }
            }
            Answer::AllowOnce | Answer::AllowOutside => "They run in this session.".to_owned(),
            Answer::RejectOnce | Answer::RejectAlways(_) | Answer::Cancelled => "Not run in this session.".to_owned(),
        };
        finish(events, &id, run, &said);
        Ok(run)
    }

    /// Says something once per session (a notice).
    fn tell_once(&self, events: &dyn EventSink, title: &str, text: &str) {
        let key = format!("{title}\n{text}");
        {
            let mut state = lock(&self.state);
            if state.told.contains(&key) {
                return;
            }
            state.told.push(key);
        }
        events.emit(AgentEvent::Notice { title: title.to_owned(), text: text.to_owned() });
    }
}

fn finish(events: &dyn EventSink, id: &str, ok: bool, said: &str) {
    let status = if ok { crate::agent::ToolCallStatus::Completed } else { crate::agent::ToolCallStatus::Failed };
    events.emit(AgentEvent::ToolCallUpdated {
        id: id.to_owned(),
        change: crate::agent::ToolCallChange {
            status: Some(status),
            content: Some(vec![DisplayContent::Text(said.to_owned())]),
            ..crate::agent::ToolCallChange::default()
        },
    });
}

/// Every hook of a set, as the trust question shows it: event, matcher,
/// timeout, file, and the whole command.
fn listing(hooks: &[Hook], root: &Path) -> String {
    let mut text = format!(
        "This project ({}) has hooks: commands lathe would run as you, unsandboxed, in the project, at these \
         points. Trust them only if you would run them yourself.\n",
        root.display()
    );
    for hook in hooks {
        let file = match hook.origin {
            Origin::User => "config",
            Origin::Project(file) => file,
        };
        let matcher = hook.spec.matcher.as_deref().filter(|m| !m.is_empty()).unwrap_or("*");
        text.push_str(&format!(
            "\n{} (matcher {matcher}, timeout {} s, from {file}):\n```sh\n{}\n```\n",
            hook.spec.event.name(),
            hook.spec.timeout.as_secs_f64(),
            hook.spec.command
        ));
    }
    text
}

/// A `PreToolUse` hook's permission decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    /// Skip the question the mode would ask (never a refusal, never the
    /// question about leaving the sandbox).
    Allow,
    /// Ask even where the mode would not.
    Ask,
    /// Refuse the call.
    Deny,
}

/// What the hooks of one event came to, together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answers {
    /// How many hooks ran.
    pub ran: usize,
    /// Blocked (exit 2, `decision: "block"`, `permissionDecision: "deny"`):
    /// why, from each hook that did.
    pub blocked: Vec<String>,
    /// `PreToolUse`'s decision (the strongest of the hooks': deny, ask, allow).
    pub decision: Option<Decision>,
    /// For the model (`additionalContext`; a `UserPromptSubmit` or
    /// `SessionStart` hook's output; a `PostToolUse` hook's output).
    pub context: Vec<String>,
    /// For the user: a line per hook (what it printed, how it failed),
    /// already made safe to show.
    pub notes: Vec<String>,
    /// `continue: false`: the turn stops, for this reason (to the user).
    pub stop: Option<String>,
}

impl Answers {
    /// The reasons of the hooks that blocked, together (for the model or the user).
    pub fn block_reason(&self) -> Option<String> {
        (!self.blocked.is_empty()).then(|| self.blocked.join("\n"))
    }

    /// The context for the model, together.
    pub fn context_text(&self) -> Option<String> {
        (!self.context.is_empty()).then(|| self.context.join("\n\n"))
    }
}

/// The hooks of one prompt.
pub struct TurnHooks {
    hooks: Vec<Hook>,
    common: Common,
    /// This is the session's first prompt: `SessionStart` runs.
    pub first: bool,
    source: &'static str,
}

impl TurnHooks {
    /// No hooks (a turn without a session's hooks: tests).
    pub fn none() -> TurnHooks {
        TurnHooks {
            hooks: Vec::new(),
            common: Common {
                session_id: String::new(),
                transcript_path: None,
                cwd: PathBuf::new(),
                root: PathBuf::new(),
            },
            first: false,
            source: "startup",
        }
    }

    /// Whether any hook runs at `event` for a call or start named so.
    pub fn any(&self, event: HookEvent, names: &[String]) -> bool {
        self.hooks.iter().any(|hook| hook.spec.event == event && hook.matches(names))
    }

    /// How the session started, for `SessionStart`'s matcher and input.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// Runs the hooks of `event` that match `names` (all at once), each with
    /// the common input, `permission_mode` and `fields` on its stdin, and
    /// reads their answers. `Err` when cancelled (every hook is killed).
    pub async fn run(
        &self,
        event: HookEvent,
        names: &[String],
        permission_mode: &str,
        fields: serde_json::Map<String, Value>,
        launcher: &Launcher,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Answers, Cancelled> {
        let matching: Vec<&Hook> =
            self.hooks.iter().filter(|hook| hook.spec.event == event && hook.matches(names)).collect();
        if matching.is_empty() {
            return Ok(Answers::default());
        }
        let mut input = serde_json::Map::new();
        input.insert("session_id".to_owned(), json!(self.common.session_id));
        let transcript = self.common.transcript_path.as_ref().map(|path| path.display().to_string());
        input.insert("transcript_path".to_owned(), json!(transcript.unwrap_or_default()));
        input.insert("cwd".to_owned(), json!(self.common.cwd.display().to_string()));
        input.insert("permission_mode".to_owned(), json!(permission_mode));
        input.insert("hook_event_name".to_owned(), json!(event.name()));
        input.extend(fields);
        let stdin = Value::Object(input).to_string();
        let place = run::Place { cwd: &self.common.cwd, project: &self.common.root };
        let runs = matching.iter().map(|hook| run::run(hook, &stdin, place, launcher, cancel));
        let ran = futures_util::future::join_all(runs).await;
        if cancel.is_cancelled() {
            return Err(Cancelled);
        }
        let mut answers = Answers { ran: matching.len(), ..Answers::default() };
        for (hook, ran) in matching.iter().zip(ran) {
            read_answer(event, hook, ran, &mut answers);
        }
        Ok(answers)
    }
}

/// The names a tool call is matched by: lathe's, and Claude Code's for the
/// same tool (`Bash` for `shell`, `mcp__<server>__<tool>` for an MCP tool).
pub fn tool_names(name: &str) -> Vec<String> {
    let claude = match name {
        "shell" => Some("Bash".to_owned()),
        "read_file" => Some("Read".to_owned()),
        "write_file" => Some("Write".to_owned()),
        "edit_file" => Some("Edit".to_owned()),
        "list_directory" => Some("LS".to_owned()),
        "glob" => Some("Glob".to_owned()),
        "grep" => Some("Grep".to_owned()),
        "fetch" => Some("WebFetch".to_owned()),
        "update_plan" => Some("TodoWrite".to_owned()),
        other if other.contains("__") => Some(format!("mcp__{other}")),
        _ => None,
    };
    std::iter::once(name.to_owned()).chain(claude).collect()
}

/// Claude Code's `permission_mode` for a lathe mode.
pub fn permission_mode(mode: crate::permission::Mode) -> &'static str {
    use crate::permission::Mode;
    match mode {
        Mode::ReadOnly | Mode::Plan => "plan",
        Mode::Ask => "default",
        Mode::AcceptEdits => "acceptEdits",
        Mode::Auto => "auto",
        Mode::FullAuto => "bypassPermissions",
    }
}

/// `text` cut to `max` bytes (at a character), with a note when cut.
fn capped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[... {} more bytes]", &text[..end], text.len() - end)
}

/// One hook's output, made safe to show.
fn shown_output(text: &str) -> String {
    shown(&capped(text.trim_end(), SHOWN_BYTES), Lines::Many).into_owned()
}

/// Reads one hook's run into `answers` (see the module docs and the README
/// for what each answer means at each event).
fn read_answer(event: HookEvent, hook: &Hook, ran: run::Ran, answers: &mut Answers) {
    let label = hook.label();
    let head = format!("{} hook `{label}`", event.name());
    let (code, stdout, stderr) = match ran {
        run::Ran::Exited { code, stdout, stderr } => (code, stdout, stderr),
        run::Ran::Killed { status, stderr } => {
            let why = if stderr.trim().is_empty() { String::new() } else { format!(": {}", shown_output(&stderr)) };
            answers.notes.push(format!("{head} was killed ({status}){why}"));
            return;
        }
        run::Ran::TimedOut(after) => {
            answers.notes.push(format!("{head} timed out after {} s and was stopped", after.as_secs_f64()));
            return;
        }
        run::Ran::NotStarted(why) => {
            answers.notes.push(format!("{head} could not start: {}", shown(&why, Lines::One)));
            return;
        }
    };
    match code {
        0 => {
            let json = stdout.trim_start().starts_with('{').then(|| serde_json::from_str::<Value>(stdout.trim()).ok());
            match json.flatten().filter(Value::is_object) {
                Some(json) => read_json(event, &head, &json, answers),
                None => {
                    let said = stdout.trim();
                    let into_context =
                        matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart | HookEvent::PostToolUse);
                    if into_context && !said.is_empty() {
                        answers.context.push(capped(said, CONTEXT_BYTES));
                    }
                    answers.notes.push(if said.is_empty() {
                        format!("{head}: ok")
                    } else {
                        format!("{head}:\n{}", shown_output(said))
                    });
                }
            }
        }
        2 => {
            let reason = stderr.trim();
            let reason =
                if reason.is_empty() { format!("the hook `{label}` said no") } else { capped(reason, CONTEXT_BYTES) };
            match event {
                // The call already ran: the model hears why the hook objects.
                HookEvent::PostToolUse => answers.context.push(reason.clone()),
                // Nothing to block: the user is told.
                HookEvent::SessionStart => {}
                HookEvent::PreToolUse | HookEvent::UserPromptSubmit | HookEvent::Stop => {
                    answers.blocked.push(reason.clone());
                    if event == HookEvent::PreToolUse {
                        answers.decision = answers.decision.max(Some(Decision::Deny));
                    }
                }
            }
            answers.notes.push(format!("{head} blocked (exit 2):\n{}", shown_output(&reason)));
        }
        code => {
            let said = stderr.trim();
            let said = if said.is_empty() { String::new() } else { format!(":\n{}", shown_output(said)) };
            answers.notes.push(format!("{head} failed (exit {code}){said}"));
        }
    }
}

/// A hook's JSON answer (Claude Code's fields).
fn read_json(event: HookEvent, head: &str, json: &Value, answers: &mut Answers) {
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
    let specific = json.get("hookSpecificOutput");
    let mut said = Vec::new();
    if json.get("continue").and_then(Value::as_bool) == Some(false) {
        let reason = text(json.get("stopReason")).unwrap_or_else(|| "a hook stopped the turn".to_owned());
        said.push(format!("stopped the turn: {}", shown(&reason, Lines::Many)));
        answers.stop.get_or_insert(reason);
    }
    if let Some(message) = text(json.get("systemMessage")) {
        said.push(shown_output(&message));
    }
    if let Some(context) = text(specific.and_then(|s| s.get("additionalContext"))) {
        answers.context.push(capped(&context, CONTEXT_BYTES));
    }
    let reason = text(specific.and_then(|s| s.get("permissionDecisionReason"))).or_else(|| text(json.get("reason")));
    match event {
        HookEvent::PreToolUse => {
            // `decision` "approve"/"block" is the older spelling Claude Code still reads.
            let decided = text(specific.and_then(|s| s.get("permissionDecision")))
                .or_else(|| text(json.get("decision")))
                .and_then(|decision| match decision.as_str() {
                    "allow" | "approve" => Some(Decision::Allow),
                    "ask" => Some(Decision::Ask),
                    "deny" | "block" => Some(Decision::Deny),
                    _ => None,
                });
            if decided == Some(Decision::Deny) {
                answers.blocked.push(reason.clone().unwrap_or_else(|| "a hook refused this call".to_owned()));
            }
            if let Some(decided) = decided {
                let name = match decided {
                    Decision::Allow => "allow",
                    Decision::Ask => "ask",
                    Decision::Deny => "deny",
                };
                let why = reason.as_deref().map(|r| format!(": {}", shown(r, Lines::Many))).unwrap_or_default();
                said.push(format!("{name}{why}"));
                answers.decision = answers.decision.max(Some(decided));
            }
            if specific.and_then(|s| s.get("updatedInput")).is_some() {
                said.push("(its updatedInput was not applied: lathe does not change a call's input)".to_owned());
            }
        }
        HookEvent::PostToolUse | HookEvent::UserPromptSubmit | HookEvent::Stop => {
            if text(json.get("decision")).as_deref() == Some("block") {
                let reason = reason.unwrap_or_else(|| "a hook blocked this".to_owned());
                said.push(format!("block: {}", shown(&reason, Lines::Many)));
                if event == HookEvent::PostToolUse {
                    answers.context.push(capped(&reason, CONTEXT_BYTES));
                } else {
                    answers.blocked.push(reason);
                }
            }
            if specific.and_then(|s| s.get("updatedMCPToolOutput")).is_some() {
                said.push("(its updatedMCPToolOutput was not applied)".to_owned());
            }
        }
        HookEvent::SessionStart => {}
    }
    answers.notes.push(if said.is_empty() { format!("{head}: ok") } else { format!("{head}: {}", said.join("; ")) });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(event: HookEvent, matcher: Option<&str>) -> Hook {
        let spec = HookSpec {
            event,
            matcher: matcher.map(str::to_owned),
            command: "true".to_owned(),
            timeout: Duration::from_secs(1),
        };
        Hook::new(spec, Origin::User).unwrap()
    }

    #[test]
    fn matchers_take_lathe_and_claude_code_names() {
        let names = |name: &str| tool_names(name);
        assert!(hook(HookEvent::PreToolUse, Some("Bash")).matches(&names("shell")));
        assert!(hook(HookEvent::PreToolUse, Some("shell")).matches(&names("shell")));
        assert!(hook(HookEvent::PreToolUse, Some("Edit|Write")).matches(&names("write_file")));
        assert!(!hook(HookEvent::PreToolUse, Some("Edit|Write")).matches(&names("read_file")));
        assert!(hook(HookEvent::PreToolUse, Some("mcp__docs__.*")).matches(&names("docs__search")));
        assert!(hook(HookEvent::PreToolUse, Some("docs__search")).matches(&names("docs__search")));
        assert!(!hook(HookEvent::PreToolUse, Some("Bas")).matches(&names("shell")), "whole names only");
        assert!(hook(HookEvent::PreToolUse, Some("*")).matches(&names("grep")));
        assert!(hook(HookEvent::PreToolUse, Some("")).matches(&names("grep")));
        assert!(hook(HookEvent::PreToolUse, None).matches(&names("grep")));
        assert!(hook(HookEvent::UserPromptSubmit, Some("Bash")).matches(&[]), "prompts and stops name nothing");
    }

    fn answer(event: HookEvent, code: i32, stdout: &str, stderr: &str) -> Answers {
        let mut answers = Answers::default();
        let ran = run::Ran::Exited { code, stdout: stdout.to_owned(), stderr: stderr.to_owned() };
        read_answer(event, &hook(event, None), ran, &mut answers);
        answers
    }

    #[test]
    fn exit_codes_and_json_decide_as_claude_codes_do() {
        let blocked = answer(HookEvent::PreToolUse, 2, "", "no rm here\n");
        assert_eq!((blocked.decision, blocked.block_reason().as_deref()), (Some(Decision::Deny), Some("no rm here")));
        let noted = answer(HookEvent::PreToolUse, 0, "checked \u{1b}[31mred\n", "");
        assert_eq!(noted.decision, None);
        assert!(noted.notes[0].contains("checked \\u{1b}[31mred"), "escaped: {:?}", noted.notes);
        assert!(noted.context.is_empty(), "PreToolUse output is for the user");
        let failed = answer(HookEvent::PreToolUse, 1, "", "oops");
        assert_eq!((failed.decision, failed.blocked.len()), (None, 0), "other codes go on");
        assert!(failed.notes[0].contains("failed (exit 1)"));

        let allow = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"known safe"}}"#;
        assert_eq!(answer(HookEvent::PreToolUse, 0, allow, "").decision, Some(Decision::Allow));
        let deny = r#"{"hookSpecificOutput":{"permissionDecision":"deny","permissionDecisionReason":"not on main"}}"#;
        let denied = answer(HookEvent::PreToolUse, 0, deny, "");
        assert_eq!(denied.block_reason().as_deref(), Some("not on main"));
        let legacy = answer(HookEvent::PreToolUse, 0, r#"{"decision":"block","reason":"old style"}"#, "");
        assert_eq!(legacy.decision, Some(Decision::Deny));
        let ask = answer(HookEvent::PreToolUse, 0, r#"{"hookSpecificOutput":{"permissionDecision":"ask"}}"#, "");
        assert_eq!(ask.decision, Some(Decision::Ask));

        let post = answer(
            HookEvent::PostToolUse,
            0,
            r#"{"decision":"block","reason":"lint failed","hookSpecificOutput":{"additionalContext":"see line 3"}}"#,
            "",
        );
        assert_eq!(post.context, ["see line 3", "lint failed"]);
        assert!(post.blocked.is_empty(), "a PostToolUse hook cannot undo the call");
        assert_eq!(answer(HookEvent::PostToolUse, 0, "formatted a.rs\n", "").context, ["formatted a.rs"]);
        assert_eq!(answer(HookEvent::PostToolUse, 2, "", "bad style").context, ["bad style"]);

        let prompt = answer(HookEvent::UserPromptSubmit, 2, "", "no secrets in prompts");
        assert_eq!(prompt.block_reason().as_deref(), Some("no secrets in prompts"));
        assert_eq!(answer(HookEvent::UserPromptSubmit, 0, "branch: main\n", "").context, ["branch: main"]);
        let stop = answer(HookEvent::Stop, 0, r#"{"decision":"block","reason":"run the tests"}"#, "");
        assert_eq!(stop.block_reason().as_deref(), Some("run the tests"));
        let halt = answer(HookEvent::Stop, 0, r#"{"continue":false,"stopReason":"quota"}"#, "");
        assert_eq!(halt.stop.as_deref(), Some("quota"));
        let start = answer(HookEvent::SessionStart, 2, "", "cannot block");
        assert!(start.blocked.is_empty() && start.notes[0].contains("cannot block"));
    }

    #[test]
    fn claude_code_settings_give_their_command_hooks() {
        let settings = r#"{"permissions": {"allow": ["Bash(ls)"]}, "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./check.sh", "timeout": 5}]}],
            "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "prompt", "prompt": "x"}, {"type": "command", "command": "fmt"}]}],
            "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}]
        }}"#;
        let (specs, left_out) = claude_file(settings, Path::new(".claude/settings.json")).unwrap();
        let commands: Vec<(&str, &str)> = specs.iter().map(|s| (s.event.name(), s.command.as_str())).collect();
        assert_eq!(commands, [("PreToolUse", "./check.sh"), ("PostToolUse", "fmt")]);
        assert_eq!(specs[0].timeout, Duration::from_secs(5));
        assert_eq!(left_out.len(), 2, "{left_out:?}");
        assert!(claude_file("{", Path::new("x")).is_err());
    }
}
