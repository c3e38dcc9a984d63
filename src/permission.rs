//! The permission policy: which tool calls run without asking, which ask the
//! user, and which are refused, given the session mode, the session roots and
//! the "always" answers the user already gave. Pure and table-tested.
//!
//! Also the [`Approver`] seam through which the agent asks the user; `acp`
//! implements it with `session/request_permission`. This module knows tool
//! access descriptions but nothing of ACP, the model or how tools run.

use std::collections::HashSet;
use std::path::PathBuf;

use futures_util::future::BoxFuture;

use crate::fs_guard::Target;
use crate::tools::{Access, DisplayContent, Location, Tool, ToolKind, paths, shell};

/// How much the agent may do without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Reads and searches only: no edits, no commands.
    ReadOnly,
    /// Ask before every edit and every command (the default).
    Ask,
    /// Edits inside the project without asking; commands still ask.
    AcceptEdits,
    /// Nothing asks.
    FullAuto,
}

impl Mode {
    /// Every mode, in the order editors list them.
    pub const ALL: [Mode; 4] = [Mode::ReadOnly, Mode::Ask, Mode::AcceptEdits, Mode::FullAuto];

    /// The id used on the wire.
    pub fn id(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::Ask => "ask",
            Mode::AcceptEdits => "accept-edits",
            Mode::FullAuto => "full-auto",
        }
    }

    /// The name editors show.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Read only",
            Mode::Ask => "Ask",
            Mode::AcceptEdits => "Accept edits",
            Mode::FullAuto => "Full auto",
        }
    }

    /// One line about what it allows.
    pub fn description(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Read and search only; no file changes, no commands",
            Mode::Ask => "Ask before every file change and every command",
            Mode::AcceptEdits => "Change files in the project without asking; ask before commands",
            Mode::FullAuto => "Change files and run commands without asking",
        }
    }

    /// The mode with this id.
    pub fn from_id(id: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.id() == id)
    }
}

/// What the policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Ask the user first.
    Ask,
    /// Do not run it; the message goes to the model.
    Deny(String),
}

/// What the user answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Run this call.
    AllowOnce,
    /// Run this call and similar ones from now on.
    AllowAlways,
    /// Do not run this call.
    RejectOnce,
    /// Do not run this call nor similar ones from now on.
    RejectAlways,
    /// The prompt turn was cancelled while asking.
    Cancelled,
}

impl Answer {
    /// Whether the call may run.
    pub fn allows(self) -> bool {
        matches!(self, Answer::AllowOnce | Answer::AllowAlways)
    }
}

/// Whether a path-touching call stays inside the session roots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Scope {
    Inside,
    Outside,
}

/// A remembered "always" answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Rule {
    /// A file tool family (reads: `ReadFile`, edits: `EditFile`), inside or
    /// outside the roots.
    Tool(Tool, Scope),
    /// Shell commands starting with these words.
    CommandPrefix(String),
    /// Exactly this shell command (when it has no usable prefix).
    Command(String),
    /// One tool of one MCP server.
    External {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
    },
    /// Fetches from one host (`docs.rs`, `localhost:8080`).
    FetchHost(String),
}

/// The session's permission state: its mode and the "always" answers.
#[derive(Debug, Clone)]
pub struct Policy {
    mode: Mode,
    allowed: HashSet<Rule>,
    rejected: HashSet<Rule>,
}

impl Default for Policy {
    fn default() -> Self {
        Self::new(Mode::Ask)
    }
}

/// The message a refused write or command sends back to the model in read-only mode.
const READ_ONLY_REFUSAL: &str = "The session is in read-only mode: file changes and commands are not allowed. \
Describe the change you would make instead, or ask the user to switch to another mode.";

/// The message a refused MCP tool sends back to the model in read-only mode.
const READ_ONLY_EXTERNAL_REFUSAL: &str = "The session is in read-only mode: only tools that change nothing are \
allowed, and this MCP server does not mark this tool read-only. Use another tool, or ask the user to switch to \
another mode.";

impl Policy {
    /// A policy in `mode` with nothing remembered.
    pub fn new(mode: Mode) -> Self {
        Self { mode, allowed: HashSet::new(), rejected: HashSet::new() }
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Switches the mode; takes effect on the next call.
    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// Judges a call by what it touches.
    pub fn judge(&self, access: &Access, roots: &[PathBuf]) -> Verdict {
        let rule = rule_for(access, roots);
        if let Some(rule) = &rule
            && self.rejected.contains(rule)
        {
            return Verdict::Deny(
                "The user declined calls like this one for the rest of the session. Do not retry it; find another way or ask the user."
                    .to_owned(),
            );
        }
        let remembered = rule.as_ref().is_some_and(|rule| self.allowed.contains(rule));
        match access {
            Access::Nothing => Verdict::Allow,
            Access::Read(paths) => {
                let inside = all_inside(paths, roots);
                match self.mode {
                    _ if inside => Verdict::Allow,
                    Mode::FullAuto => Verdict::Allow,
                    _ if remembered => Verdict::Allow,
                    Mode::ReadOnly | Mode::Ask | Mode::AcceptEdits => Verdict::Ask,
                }
            }
            Access::Write(paths) => {
                let inside = all_inside(paths, roots);
                match self.mode {
                    Mode::ReadOnly => Verdict::Deny(READ_ONLY_REFUSAL.to_owned()),
                    Mode::FullAuto => Verdict::Allow,
                    Mode::AcceptEdits if inside => Verdict::Allow,
                    _ if remembered => Verdict::Allow,
                    Mode::Ask | Mode::AcceptEdits => Verdict::Ask,
                }
            }
            Access::Execute { cwd, .. } => match self.mode {
                Mode::ReadOnly => Verdict::Deny(READ_ONLY_REFUSAL.to_owned()),
                Mode::FullAuto => Verdict::Allow,
                // A command run outside the roots asks even when its prefix is remembered.
                _ if remembered && paths::is_inside_roots(cwd, roots) => Verdict::Allow,
                Mode::Ask | Mode::AcceptEdits => Verdict::Ask,
            },
            // A read-only tool has no paths to check: it is a read inside the
            // roots. Anything else is judged like a command.
            Access::External { read_only: true, .. } => Verdict::Allow,
            Access::External { read_only: false, .. } => match self.mode {
                Mode::ReadOnly => Verdict::Deny(READ_ONLY_EXTERNAL_REFUSAL.to_owned()),
                Mode::FullAuto => Verdict::Allow,
                _ if remembered => Verdict::Allow,
                Mode::Ask | Mode::AcceptEdits => Verdict::Ask,
            },
            // Reaching outside asks, like a command, except in full-auto; a
            // visibly local host asks even there, since the fetch refuses
            // local addresses the user did not allow.
            Access::Fetch { local, .. } => match self.mode {
                _ if remembered => Verdict::Allow,
                Mode::FullAuto if !*local => Verdict::Allow,
                Mode::ReadOnly | Mode::Ask | Mode::AcceptEdits | Mode::FullAuto => Verdict::Ask,
            },
        }
    }

    /// The choices to offer for a call, in the order editors show them.
    pub fn options(&self, access: &Access, roots: &[PathBuf]) -> Vec<Choice> {
        let rule = rule_for(access, roots);
        let always = match &rule {
            Some(Rule::CommandPrefix(prefix)) => Some(format!("Always allow `{prefix}` commands")),
            Some(Rule::Tool(tool, Scope::Outside)) => Some(format!("Always allow {} outside the project", verb(*tool))),
            Some(Rule::Tool(tool, Scope::Inside)) => Some(format!("Always allow {}", verb(*tool))),
            Some(Rule::External { server, tool }) => Some(format!("Always allow `{tool}` from `{server}`")),
            Some(Rule::FetchHost(host)) => Some(format!("Always allow fetching from `{host}`")),
            Some(Rule::Command(_)) | None => None,
        };
        let mut choices = vec![Choice { answer: Answer::AllowOnce, id: "allow_once", label: "Allow".to_owned() }];
        if let Some(label) = always {
            choices.push(Choice { answer: Answer::AllowAlways, id: "allow_always", label });
        }
        choices.push(Choice { answer: Answer::RejectOnce, id: "reject_once", label: "Reject".to_owned() });
        if rule.is_some() {
            choices.push(Choice {
                answer: Answer::RejectAlways,
                id: "reject_always",
                label: "Always reject".to_owned(),
            });
        }
        choices
    }

    /// Remembers an "always" answer.
    pub fn remember(&mut self, access: &Access, roots: &[PathBuf], answer: Answer) {
        let Some(rule) = rule_for(access, roots) else { return };
        match answer {
            Answer::AllowAlways => {
                self.rejected.remove(&rule);
                self.allowed.insert(rule);
            }
            Answer::RejectAlways => {
                self.allowed.remove(&rule);
                self.rejected.insert(rule);
            }
            Answer::AllowOnce | Answer::RejectOnce | Answer::Cancelled => {}
        }
    }

    /// The hosts the user allowed fetches from for the rest of the session.
    pub fn fetch_hosts(&self) -> HashSet<String> {
        self.allowed
            .iter()
            .filter_map(|rule| match rule {
                Rule::FetchHost(host) => Some(host.clone()),
                Rule::Tool(..) | Rule::CommandPrefix(_) | Rule::Command(_) | Rule::External { .. } => None,
            })
            .collect()
    }
}

fn verb(tool: Tool) -> &'static str {
    match tool {
        Tool::ReadFile | Tool::ListDirectory | Tool::Glob | Tool::Grep => "reading files",
        Tool::WriteFile | Tool::EditFile => "file edits",
        Tool::Shell => "this command",
        Tool::UpdatePlan => "plan updates",
        Tool::Fetch => "fetching",
    }
}

/// Whether every target stays inside the roots, judged on where it really
/// leads (see [`crate::fs_guard`]).
fn all_inside(targets: &[Target], roots: &[PathBuf]) -> bool {
    targets.iter().all(|target| target.is_inside(roots))
}

/// The rule an "always" answer to this call would create. Reads and writes
/// share a rule per tool family so that "always allow edits" covers both edit
/// tools (the only ones that write); an MCP tool is its own rule.
fn rule_for(access: &Access, roots: &[PathBuf]) -> Option<Rule> {
    let scope = |targets: &[Target]| if all_inside(targets, roots) { Scope::Inside } else { Scope::Outside };
    match access {
        Access::Nothing => None,
        Access::Read(paths) => Some(Rule::Tool(Tool::ReadFile, scope(paths))),
        Access::Write(paths) => Some(Rule::Tool(Tool::EditFile, scope(paths))),
        Access::Execute { command, .. } => Some(match shell::command_prefix(command) {
            Some(prefix) => Rule::CommandPrefix(prefix),
            None => Rule::Command(command.trim().to_owned()),
        }),
        Access::External { server, tool, .. } => Some(Rule::External { server: server.clone(), tool: tool.clone() }),
        Access::Fetch { host, .. } => Some(Rule::FetchHost(host.clone())),
    }
}

/// One option offered to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// What choosing it means.
    pub answer: Answer,
    /// The option id on the wire.
    pub id: &'static str,
    /// The label editors show.
    pub label: String,
}

/// What the user is asked about.
#[derive(Debug, Clone)]
pub struct PermissionQuestion {
    /// The tool call being asked about (already announced to the editor).
    pub call_id: String,
    /// Its title.
    pub title: String,
    /// Its kind.
    pub kind: ToolKind,
    /// Files it touches.
    pub locations: Vec<Location>,
    /// What it would do (a diff, a command).
    pub preview: Vec<DisplayContent>,
    /// The arguments as the model sent them.
    pub raw_input: Option<serde_json::Value>,
    /// The choices.
    pub choices: Vec<Choice>,
}

/// Why asking failed (the editor is gone or answered nonsense).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ApprovalError(pub String);

/// How the agent asks the user. Dropping the returned future withdraws the question.
pub trait Approver: Send + Sync {
    /// Asks and waits for the answer.
    fn ask<'a>(&'a self, question: &'a PermissionQuestion) -> BoxFuture<'a, Result<Answer, ApprovalError>>;
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn roots() -> Vec<PathBuf> {
        vec![PathBuf::from("/nonexistent-root/project")]
    }

    fn inside() -> Vec<Target> {
        vec![Target::of(Path::new("/nonexistent-root/project/src/a.rs"))]
    }

    fn outside() -> Vec<Target> {
        vec![Target::of(Path::new("/nonexistent-root/elsewhere/a.rs"))]
    }

    fn run(command: &str) -> Access {
        Access::Execute { command: command.to_owned(), cwd: PathBuf::from("/nonexistent-root/project") }
    }

    fn web(url: &str, host: &str, local: bool) -> Access {
        Access::Fetch { url: url.to_owned(), host: host.to_owned(), local }
    }

    fn mcp(tool: &str, read_only: bool) -> Access {
        Access::External { server: "docs".to_owned(), tool: tool.to_owned(), read_only }
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Expect {
        Allow,
        Ask,
        Deny,
    }

    #[test]
    fn the_mode_table() {
        use Expect::{Allow, Ask, Deny};
        let cases = [
            (Mode::Ask, Tool::ReadFile, Access::Read(inside()), Allow),
            (Mode::Ask, Tool::ReadFile, Access::Read(outside()), Ask),
            (Mode::ReadOnly, Tool::ReadFile, Access::Read(inside()), Allow),
            (Mode::FullAuto, Tool::ReadFile, Access::Read(outside()), Allow),
            (Mode::Ask, Tool::EditFile, Access::Write(inside()), Ask),
            (Mode::AcceptEdits, Tool::EditFile, Access::Write(inside()), Allow),
            (Mode::AcceptEdits, Tool::EditFile, Access::Write(outside()), Ask),
            (Mode::ReadOnly, Tool::WriteFile, Access::Write(inside()), Deny),
            (Mode::FullAuto, Tool::WriteFile, Access::Write(outside()), Allow),
            (Mode::Ask, Tool::Shell, run("cargo test"), Ask),
            (Mode::AcceptEdits, Tool::Shell, run("cargo test"), Ask),
            (Mode::ReadOnly, Tool::Shell, run("ls"), Deny),
            (Mode::FullAuto, Tool::Shell, run("rm -rf target"), Allow),
            (Mode::ReadOnly, Tool::UpdatePlan, Access::Nothing, Allow),
            // MCP tools: read-only ones never ask; the others are commands.
            (Mode::Ask, Tool::Shell, mcp("search", true), Allow),
            (Mode::ReadOnly, Tool::Shell, mcp("search", true), Allow),
            (Mode::AcceptEdits, Tool::Shell, mcp("search", true), Allow),
            (Mode::FullAuto, Tool::Shell, mcp("search", true), Allow),
            (Mode::Ask, Tool::Shell, mcp("publish", false), Ask),
            (Mode::AcceptEdits, Tool::Shell, mcp("publish", false), Ask),
            (Mode::ReadOnly, Tool::Shell, mcp("publish", false), Deny),
            (Mode::FullAuto, Tool::Shell, mcp("publish", false), Allow),
            // Fetches ask except in full-auto; a visibly local host asks there too.
            (Mode::ReadOnly, Tool::Fetch, web("https://docs.rs/", "docs.rs", false), Ask),
            (Mode::Ask, Tool::Fetch, web("https://docs.rs/", "docs.rs", false), Ask),
            (Mode::AcceptEdits, Tool::Fetch, web("https://docs.rs/", "docs.rs", false), Ask),
            (Mode::FullAuto, Tool::Fetch, web("https://docs.rs/", "docs.rs", false), Allow),
            (Mode::FullAuto, Tool::Fetch, web("http://localhost:3000/", "localhost:3000", true), Ask),
        ];
        for (mode, tool, access, expected) in cases {
            let verdict = Policy::new(mode).judge(&access, &roots());
            let got = match verdict {
                Verdict::Allow => Allow,
                Verdict::Ask => Ask,
                Verdict::Deny(_) => Deny,
            };
            assert_eq!(got, expected, "{mode:?} {tool:?} {access:?}");
        }
    }

    #[test]
    fn always_answers_are_remembered() {
        let mut policy = Policy::new(Mode::Ask);
        policy.remember(&Access::Write(inside()), &roots(), Answer::AllowAlways);
        assert_eq!(policy.judge(&Access::Write(inside()), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&Access::Write(outside()), &roots()), Verdict::Ask);

        policy.remember(&run("cargo test --all"), &roots(), Answer::AllowAlways);
        assert_eq!(policy.judge(&run("cargo test -p lathe"), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&run("cargo build"), &roots()), Verdict::Ask);
        assert_eq!(policy.judge(&run("cargo test && rm -rf ~"), &roots()), Verdict::Ask);

        policy.remember(&run("git push --force"), &roots(), Answer::RejectAlways);
        assert!(matches!(policy.judge(&run("git push origin main"), &roots()), Verdict::Deny(_)));
        // "Once" answers leave nothing behind.
        policy.remember(&run("make"), &roots(), Answer::AllowOnce);
        assert_eq!(policy.judge(&run("make"), &roots()), Verdict::Ask);
    }

    #[test]
    fn options_offer_always_only_when_it_means_something() {
        let policy = Policy::new(Mode::Ask);
        let ids = |access: &Access| policy.options(access, &roots()).iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids(&run("cargo test")), vec!["allow_once", "allow_always", "reject_once", "reject_always"]);
        assert_eq!(ids(&run("a; b")), vec!["allow_once", "reject_once", "reject_always"]);
        let labels = policy.options(&run("cargo test --all"), &roots());
        assert_eq!(labels[1].label, "Always allow `cargo test` commands");
        assert_eq!(ids(&mcp("publish", false)), vec!["allow_once", "allow_always", "reject_once", "reject_always"]);
        assert_eq!(policy.options(&mcp("publish", false), &roots())[1].label, "Always allow `publish` from `docs`");
    }

    /// "Always" for a fetch covers that host (and port) only, in every mode.
    #[test]
    fn always_answers_for_fetches_are_per_host() {
        let mut policy = Policy::new(Mode::Ask);
        let docs = web("https://docs.rs/serde", "docs.rs", false);
        let local = web("http://localhost:8080/a", "localhost:8080", true);
        assert_eq!(policy.options(&local, &roots())[1].label, "Always allow fetching from `localhost:8080`");
        policy.remember(&docs, &roots(), Answer::AllowOnce);
        assert_eq!(policy.judge(&docs, &roots()), Verdict::Ask, "once is once");
        policy.remember(&local, &roots(), Answer::AllowAlways);
        assert_eq!(policy.judge(&web("http://localhost:8080/b?c", "localhost:8080", true), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&web("http://localhost:9090/", "localhost:9090", true), &roots()), Verdict::Ask);
        assert_eq!(policy.judge(&web("http://127.0.0.1:8080/", "127.0.0.1:8080", true), &roots()), Verdict::Ask);
        assert_eq!(policy.judge(&docs, &roots()), Verdict::Ask);
        assert_eq!(policy.fetch_hosts(), HashSet::from(["localhost:8080".to_owned()]));
        for mode in Mode::ALL {
            policy.set_mode(mode);
            assert_eq!(policy.judge(&local, &roots()), Verdict::Allow, "{mode:?}");
        }
        policy.remember(&docs, &roots(), Answer::RejectAlways);
        assert!(matches!(policy.judge(&docs, &roots()), Verdict::Deny(_)));
    }

    /// "Always" for an MCP tool covers that tool of that server only.
    #[test]
    fn always_answers_for_mcp_tools_are_per_tool() {
        let mut policy = Policy::new(Mode::Ask);
        policy.remember(&mcp("publish", false), &roots(), Answer::AllowAlways);
        assert_eq!(policy.judge(&mcp("publish", false), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&mcp("delete", false), &roots()), Verdict::Ask);
        let other_server = Access::External { server: "wiki".to_owned(), tool: "publish".to_owned(), read_only: false };
        assert_eq!(policy.judge(&other_server, &roots()), Verdict::Ask);
        policy.remember(&mcp("delete", false), &roots(), Answer::RejectAlways);
        assert!(matches!(policy.judge(&mcp("delete", false), &roots()), Verdict::Deny(_)));
        // Read-only mode refuses even a remembered tool that changes things.
        policy.set_mode(Mode::ReadOnly);
        assert!(matches!(policy.judge(&mcp("publish", false), &roots()), Verdict::Deny(_)));
    }

    /// Paths are judged where they lead: `..`, absolute paths and symlinks
    /// (dangling ones too) leaving the roots are outside, for reads and
    /// writes alike; a hard link is judged by its name, except for a write
    /// the editor makes in place (see `fs_guard`).
    #[cfg(unix)]
    #[test]
    fn links_and_dot_dots_are_judged_by_where_they_lead() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let roots = vec![root.path().to_path_buf()];
        let secret = elsewhere.path().join("secret.txt");
        std::fs::write(&secret, "s").unwrap();
        std::os::unix::fs::symlink(&secret, root.path().join("file_link")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), root.path().join("dir_link")).unwrap();
        std::fs::hard_link(&secret, root.path().join("hard_link")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("newdir/x"), root.path().join("dangling")).unwrap();

        let ask = Policy::new(Mode::Ask);
        let accept = Policy::new(Mode::AcceptEdits);
        let outside =
            ["file_link", "dir_link/secret.txt", "dir_link/new/file.rs", "dangling", "../../etc/passwd", "/etc/passwd"];
        for asked in outside {
            let target = Target::resolve(root.path(), asked);
            let read = Access::Read(vec![target.clone()]);
            let write = Access::Write(vec![target]);
            assert_eq!(ask.judge(&read, &roots), Verdict::Ask, "reading {asked}");
            assert_eq!(accept.judge(&write, &roots), Verdict::Ask, "writing {asked}");
        }
        let hard = Target::resolve(root.path(), "hard_link");
        assert_eq!(ask.judge(&Access::Read(vec![hard.clone()]), &roots), Verdict::Allow);
        assert_eq!(accept.judge(&Access::Write(vec![hard.clone()]), &roots), Verdict::Allow);
        let in_place = hard.written_in_place(true);
        assert_eq!(accept.judge(&Access::Write(vec![in_place]), &roots), Verdict::Ask, "the editor writes in place");
        let inside = Target::resolve(root.path(), "src/../lib.rs");
        assert_eq!(accept.judge(&Access::Write(vec![inside]), &roots), Verdict::Allow);
    }

    #[test]
    fn modes_round_trip() {
        for mode in Mode::ALL {
            assert_eq!(Mode::from_id(mode.id()), Some(mode));
        }
        assert_eq!(Mode::from_id("yolo"), None);
    }
}
