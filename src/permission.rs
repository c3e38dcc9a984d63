//! The permission policy: which tool calls run without asking, which ask the
//! user, and which are refused, given the session mode, the session roots,
//! the "always" answers the user already gave and what the command sandbox
//! amounts to ([`Confinement`]); and which commands run in the sandbox
//! ([`Policy::runs_sandboxed`]). Pure and table-tested.
//!
//! With a sandbox in use, a command runs in it unless the mode is full-auto
//! or the user let it out: by answering "Allow outside the sandbox", or by
//! allowing a call the model made with `outside_sandbox` (which always
//! asks, whatever was remembered). `[sandbox] mode = "required"` keeps every
//! command in, full-auto too, and refuses every request to leave.
//!
//! Two kinds of path ask in every mode but full-auto, whatever was
//! remembered, and the question says why ([`Policy::caution`]): writing
//! what makes git or lathe run something later (a hook, git's config,
//! `.lathe/`: `crate::platform::sandbox::protected`, the same list the sandbox mounts
//! read-only), and reading what the sandbox keeps from commands (credentials
//! and lathe's own files: `crate::platform::sandbox::secrets`), so that the boundary
//! does not depend on the tool the model picks.
//!
//! Also the [`Approver`] seam through which the agent asks the user; `acp`
//! implements it with `session/request_permission`. This module knows tool
//! access descriptions but nothing of ACP, the model or how tools run.

use std::collections::HashSet;
use std::path::PathBuf;

use futures_util::future::BoxFuture;

use crate::fs_guard::Target;
use crate::platform::sandbox::protected::{self, Protection};
use crate::platform::sandbox::{Confinement, ReadDenials};
use crate::tools::shell::CommandRule;
use crate::tools::{Access, DisplayContent, Location, Tool, ToolKind, paths, shell};

/// How much the agent may do without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Reads and searches only: no edits, no commands.
    ReadOnly,
    /// Reads, searches and fetches while the model writes a plan; it then
    /// asks the user to run the plan (`exit_plan_mode`), which switches the mode.
    Plan,
    /// Ask before every edit and every command (the default).
    Ask,
    /// Edits inside the project without asking; commands still ask.
    AcceptEdits,
    /// Edits inside the project and commands in a fully enforced sandbox
    /// without asking; leaving the sandbox asks. Without such a sandbox,
    /// commands ask.
    Auto,
    /// Nothing asks.
    FullAuto,
}

impl Mode {
    /// Every mode, in the order editors list them.
    pub const ALL: [Mode; 6] = [Mode::ReadOnly, Mode::Plan, Mode::Ask, Mode::AcceptEdits, Mode::Auto, Mode::FullAuto];

    /// The id used on the wire.
    pub fn id(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::Plan => "plan",
            Mode::Ask => "ask",
            Mode::AcceptEdits => "accept-edits",
            Mode::Auto => "auto",
            Mode::FullAuto => "full-auto",
        }
    }

    /// The name editors show.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Read only",
            Mode::Plan => "Plan",
            Mode::Ask => "Ask",
            Mode::AcceptEdits => "Accept edits",
            Mode::Auto => "Auto (sandboxed)",
            Mode::FullAuto => "Full auto",
        }
    }

    /// One line about what it allows.
    pub fn description(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Read and search only; no file changes, no commands",
            Mode::Plan => "Read and search, then propose a plan and ask before running it",
            Mode::Ask => "Ask before every file change and every command",
            Mode::AcceptEdits => "Change files in the project without asking; ask before commands",
            Mode::Auto => {
                "Change files in the project and run commands in the sandbox without asking; ask to leave the sandbox"
            }
            Mode::FullAuto => "Change files and run commands without asking, outside the sandbox",
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

/// How long an "always" answer lasts, and where it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lasting {
    /// Until the session ends (in memory).
    Session,
    /// In every session of this project (lathe's data directory, keyed by
    /// the project root's real path).
    Project,
    /// In every session anywhere (`~/.config/lathe/permissions.toml`).
    User,
}

impl Lasting {
    /// The words an option label ends with.
    pub fn phrase(self) -> &'static str {
        match self {
            Lasting::Session => "for this session",
            Lasting::Project => "for this project",
            Lasting::User => "in every project",
        }
    }
}

/// What the user answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Run this call.
    AllowOnce,
    /// Run this call and similar ones from now on, for as long as it says.
    AllowAlways(Lasting),
    /// Run this command, outside the sandbox, this once.
    AllowOutside,
    /// Do not run this call.
    RejectOnce,
    /// Do not run this call nor similar ones from now on, for as long as it says.
    RejectAlways(Lasting),
    /// The prompt turn was cancelled while asking.
    Cancelled,
}

impl Answer {
    /// Whether the call may run.
    pub fn allows(self) -> bool {
        matches!(self, Answer::AllowOnce | Answer::AllowAlways(_) | Answer::AllowOutside)
    }
}

/// Whether a path-touching call stays inside the session roots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every path inside the session roots.
    Inside,
    /// Some path outside them.
    Outside,
}

/// A remembered "always" answer: what it covers, nothing wider (see the
/// README, "Tools and permissions"). Rules that outlast the session are
/// kept in files (`crate::rules`), in these same kinds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A file tool family (reads: `ReadFile`, edits: `EditFile`), inside or
    /// outside the roots.
    Tool(Tool, Scope),
    /// Shell commands an "always allow" covers (see [`CommandRule`]).
    Command(CommandRule),
    /// Shell commands starting with these words: what an "always reject"
    /// of a command remembers (a broad rejection only ever asks less).
    CommandPrefix(String),
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

impl Rule {
    /// Whether this rule covers a call with this access.
    fn covers(&self, access: &Access, roots: &[PathBuf]) -> bool {
        match (self, access) {
            (Rule::Command(rule), Access::Execute { command, cwd, .. }) => rule.covers(command, cwd, roots),
            (Rule::CommandPrefix(prefix), Access::Execute { command, .. }) => shell::matches_prefix(command, prefix),
            (Rule::Command(_) | Rule::CommandPrefix(_), _) => false,
            (Rule::Tool(..) | Rule::External { .. } | Rule::FetchHost(_), _) => {
                allow_rule(access, roots).as_ref() == Some(self)
            }
        }
    }

    /// The rule as the user reads it, without "always allow": `` `cargo
    /// test` ``, `` `cat …` inside the project ``, `file edits outside the
    /// project`, `` `publish` from `docs` ``, `` fetching from `docs.rs` ``.
    /// Built from untrusted text: shown through `present::text::shown`.
    pub fn describe(&self) -> String {
        match self {
            Rule::Command(rule) => rule.describe(),
            Rule::CommandPrefix(prefix) => format!("`{prefix} …`"),
            Rule::Tool(tool, Scope::Outside) => format!("{} outside the project", verb(*tool)),
            Rule::Tool(tool, Scope::Inside) => verb(*tool).to_owned(),
            Rule::External { server, tool } => format!("`{tool}` from `{server}`"),
            Rule::FetchHost(host) => format!("fetching from `{host}`"),
        }
    }

    /// Whether an "always allow" of this rule may be kept for every
    /// project: the rules that name no directory and cover nothing of one
    /// project that another lacks (a read-only program inside whichever
    /// project, an MCP tool, a host). An exact command is tied to its
    /// directory, and file tools' rules are what the modes are for.
    fn fits_everywhere(&self) -> bool {
        match self {
            Rule::Command(CommandRule::ReadOnly(_)) | Rule::External { .. } | Rule::FetchHost(_) => true,
            Rule::Command(CommandRule::Exact { .. }) | Rule::CommandPrefix(_) | Rule::Tool(..) => false,
        }
    }
}

/// Rules kept outside the session: one project's, or the user's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSet {
    /// What "always allow" covers.
    pub allowed: Vec<Rule>,
    /// What "always reject" refuses.
    pub rejected: Vec<Rule>,
}

impl RuleSet {
    fn allows(&self, access: &Access, roots: &[PathBuf]) -> bool {
        self.allowed.iter().any(|rule| rule.covers(access, roots))
    }

    fn rejects(&self, access: &Access, roots: &[PathBuf]) -> bool {
        self.rejected.iter().any(|rule| rule.covers(access, roots))
    }
}

/// An "always" answer to keep beyond the session, as [`Policy::remember`]
/// returns it for the caller to write down (see `crate::rules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    /// Where: [`Lasting::Project`] or [`Lasting::User`].
    pub lasting: Lasting,
    /// An "always allow" (else an "always reject").
    pub allow: bool,
    /// What it covers.
    pub rule: Rule,
}

/// The session's permission state: its mode, the "always" answers given in
/// it, and the standing rules of its project and of the user (`None` where
/// no such rules can be kept: then they are not offered).
#[derive(Debug, Clone)]
pub struct Policy {
    mode: Mode,
    confinement: Confinement,
    denials: ReadDenials,
    /// Folders outside the roots that read like the roots: the user's own
    /// skills (see [`Policy::set_skill_folders`]).
    skill_folders: Vec<PathBuf>,
    allowed: HashSet<Rule>,
    rejected: HashSet<Rule>,
    project: Option<RuleSet>,
    user: Option<RuleSet>,
}

impl Default for Policy {
    fn default() -> Self {
        Self::new(Mode::Ask)
    }
}

/// The option id of "Allow outside the sandbox".
pub const ALLOW_OUTSIDE: &str = "allow_outside";

/// The message a refused write or command sends back to the model in read-only mode.
const READ_ONLY_REFUSAL: &str = "The session is in read-only mode: file changes and commands are not allowed. \
Describe the change you would make instead, or ask the user to switch to another mode.";

/// The message a refused write or command sends back to the model in plan mode.
const PLAN_REFUSAL: &str = "The session is in plan mode: read, search and fetch, but change nothing and run nothing. \
Write your plan, then call exit_plan_mode with it to ask the user to run it.";

/// The message a refused MCP tool sends back to the model in read-only (or plan) mode.
fn external_refusal(mode: Mode) -> String {
    format!(
        "The session is in {} mode: only tools that change nothing are allowed, and this MCP server does not mark \
         this tool read-only. Use another tool, or ask the user to switch to another mode.",
        mode.id()
    )
}

impl Policy {
    /// A policy in `mode` with nothing remembered.
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            confinement: Confinement::Off,
            denials: ReadDenials::default(),
            skill_folders: Vec::new(),
            allowed: HashSet::new(),
            rejected: HashSet::new(),
            project: None,
            user: None,
        }
    }

    /// Sets the standing rules: the project's and the user's, as read from
    /// their files (`None`: that kind cannot be kept, so it is not offered).
    pub fn set_standing(&mut self, project: Option<RuleSet>, user: Option<RuleSet>) {
        self.project = project;
        self.user = user;
    }

    /// The "always" answers given in this session: allowed, then rejected.
    pub fn session_rules(&self) -> (Vec<Rule>, Vec<Rule>) {
        let sorted = |rules: &HashSet<Rule>| {
            let mut rules: Vec<Rule> = rules.iter().cloned().collect();
            rules.sort_by_key(Rule::describe);
            rules
        };
        (sorted(&self.allowed), sorted(&self.rejected))
    }

    /// Whether a standing rule of the project or the user, or an "always"
    /// answer of this session, refuses this call.
    fn rejects(&self, access: &Access, roots: &[PathBuf]) -> bool {
        self.rejected.iter().any(|rule| rule.covers(access, roots))
            || self.project.as_ref().is_some_and(|rules| rules.rejects(access, roots))
            || self.user.as_ref().is_some_and(|rules| rules.rejects(access, roots))
    }

    /// Whether one allows it.
    fn allows(&self, access: &Access, roots: &[PathBuf]) -> bool {
        self.allowed.iter().any(|rule| rule.covers(access, roots))
            || self.project.as_ref().is_some_and(|rules| rules.allows(access, roots))
            || self.user.as_ref().is_some_and(|rules| rules.allows(access, roots))
    }

    /// Learns from a session's `launcher` what its command sandbox amounts
    /// to and what it keeps from commands (the permission side asks the
    /// platform layer, never the other way round).
    pub fn follow_sandbox_of(&mut self, launcher: &crate::platform::process::Launcher) {
        self.set_confinement(launcher.confinement());
        self.set_read_denials(launcher.read_denials());
    }

    /// Says what the command sandbox amounts to (no sandbox until told).
    pub fn set_confinement(&mut self, confinement: Confinement) {
        self.confinement = confinement;
    }

    /// Says what sandboxed commands may not read: reading it with a file
    /// tool asks too (nothing is denied until told).
    pub fn set_read_denials(&mut self, denials: ReadDenials) {
        self.denials = denials;
    }

    /// Says which folders hold the user's own skills (as they really are):
    /// reading in them is judged like reading inside the roots (allowed
    /// without asking, in every mode), though they lie in lathe's config
    /// folder, which is kept from commands. The model reads a skill's
    /// instructions and files there whenever a task calls for the skill;
    /// asking each time would make the user's own skills a chore, and they
    /// hold nothing the user did not put there for the agent. A link in
    /// them is judged where it leads.
    pub fn set_skill_folders(&mut self, folders: Vec<PathBuf>) {
        self.skill_folders = folders;
    }

    /// The roots a read is judged against: the session's and the skill folders.
    fn readable<'a>(&self, roots: &'a [PathBuf]) -> std::borrow::Cow<'a, [PathBuf]> {
        if self.skill_folders.is_empty() {
            return std::borrow::Cow::Borrowed(roots);
        }
        std::borrow::Cow::Owned(roots.iter().chain(&self.skill_folders).cloned().collect())
    }

    /// Why a call asks in every mode but full-auto whatever was remembered,
    /// if it does: a write of a protected path (a git hook, git's config,
    /// `.lathe/`), a read of a path the sandbox keeps from commands. A
    /// phrase for the permission question ("a git hook: git runs ...").
    pub fn caution(&self, access: &Access, roots: &[PathBuf]) -> Option<String> {
        match access {
            Access::Write(targets) => Policy::protected_write(targets, roots).map(|what| what.why().to_owned()),
            Access::Read(targets) => targets.iter().find_map(|target| {
                let denied = self.denials.covering(&target.real, &real_roots(&self.readable(roots)))?;
                Some(format!(
                    "it may hold credentials: sandboxed commands cannot read `{}`, nor does lathe unasked",
                    denied.display()
                ))
            }),
            Access::Nothing | Access::Execute { .. } | Access::External { .. } | Access::Fetch { .. } => None,
        }
    }

    /// Whether a write touches a protected path (see [`Policy::caution`]).
    fn protected_write(targets: &[Target], roots: &[PathBuf]) -> Option<Protection> {
        targets.iter().find_map(|target| protected::covering(&target.real, roots))
    }

    /// Whether a call with this access, allowed (by the policy, or by the
    /// user's `answer`), runs in the sandbox. Only commands do.
    pub fn runs_sandboxed(&self, access: &Access, answer: Option<Answer>) -> bool {
        let Access::Execute { outside, .. } = access else { return false };
        match self.confinement {
            Confinement::Required => true,
            Confinement::Enforced | Confinement::Partial => {
                !(self.mode == Mode::FullAuto || *outside || answer == Some(Answer::AllowOutside))
            }
            Confinement::Off | Confinement::Refused(_) => false,
        }
    }

    /// Whether running this call would take a command out of the sandbox
    /// in use: a question no hook and no rule may skip.
    pub fn leaves_sandbox(&self, access: &Access) -> bool {
        matches!(access, Access::Execute { outside: true, .. }) && self.confinement.in_use()
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
        if self.rejects(access, roots) {
            return Verdict::Deny(
                "The user declined calls like this one from now on. Do not retry it; find another way or ask the user."
                    .to_owned(),
            );
        }
        // No rule, of this session, of the project or of the user, allows a
        // cautioned call: it asks every time (the arms below say so too).
        let remembered = self.caution(access, roots).is_none() && self.allows(access, roots);
        match access {
            Access::Nothing => Verdict::Allow,
            Access::Read(paths) => {
                let readable = self.readable(roots);
                let inside = all_inside(paths, &readable);
                let readable = real_roots(&readable);
                let secret = paths.iter().any(|target| self.denials.covering(&target.real, &readable).is_some());
                match self.mode {
                    Mode::FullAuto => Verdict::Allow,
                    _ if secret => Verdict::Ask,
                    _ if inside => Verdict::Allow,
                    _ if remembered => Verdict::Allow,
                    Mode::ReadOnly | Mode::Plan | Mode::Ask | Mode::AcceptEdits | Mode::Auto => Verdict::Ask,
                }
            }
            Access::Write(paths) => {
                let inside = all_inside(paths, roots);
                let protected = Policy::protected_write(paths, roots).is_some();
                match self.mode {
                    Mode::ReadOnly => Verdict::Deny(READ_ONLY_REFUSAL.to_owned()),
                    Mode::Plan => Verdict::Deny(PLAN_REFUSAL.to_owned()),
                    Mode::FullAuto => Verdict::Allow,
                    _ if protected => Verdict::Ask,
                    Mode::AcceptEdits | Mode::Auto if inside => Verdict::Allow,
                    _ if remembered => Verdict::Allow,
                    Mode::Ask | Mode::AcceptEdits | Mode::Auto => Verdict::Ask,
                }
            }
            Access::Execute { cwd, outside, .. } => {
                let sandbox = &self.confinement;
                if let (Confinement::Refused(why), false) = (sandbox, matches!(self.mode, Mode::ReadOnly | Mode::Plan))
                {
                    return Verdict::Deny(format!(
                        "Not run: the sandbox is required (`[sandbox] mode = \"required\"`) but not available here \
                         ({why}), so no command runs. Tell the user; do not try to work around it."
                    ));
                }
                match self.mode {
                    Mode::ReadOnly => Verdict::Deny(READ_ONLY_REFUSAL.to_owned()),
                    Mode::Plan => Verdict::Deny(PLAN_REFUSAL.to_owned()),
                    _ if *outside && *sandbox == Confinement::Required => Verdict::Deny(
                        "Not run: the sandbox is required (`[sandbox] mode = \"required\"`), so no command runs \
                         outside it. Run it without `outside_sandbox`, or tell the user what it needs."
                            .to_owned(),
                    ),
                    Mode::FullAuto => Verdict::Allow,
                    // Leaving the sandbox always asks, whatever was remembered.
                    _ if *outside && sandbox.in_use() => Verdict::Ask,
                    Mode::Auto if matches!(sandbox, Confinement::Enforced | Confinement::Required) => Verdict::Allow,
                    // A command run outside the roots asks even when its prefix is remembered.
                    _ if remembered && paths::is_inside_roots(cwd, roots) => Verdict::Allow,
                    Mode::Ask | Mode::AcceptEdits | Mode::Auto => Verdict::Ask,
                }
            }
            // An MCP tool is judged like a command: what it touches is
            // unknown. The server's `readOnlyHint` never lowers the bar (the
            // MCP spec: clients must not rely on hints from untrusted
            // servers); it only lets read-only mode ask instead of refusing,
            // and there every call asks, "always" or not, since a hint may lie.
            Access::External { read_only, .. } => match self.mode {
                Mode::ReadOnly | Mode::Plan if *read_only => Verdict::Ask,
                Mode::ReadOnly | Mode::Plan => Verdict::Deny(external_refusal(self.mode)),
                Mode::FullAuto => Verdict::Allow,
                _ if remembered => Verdict::Allow,
                Mode::Ask | Mode::AcceptEdits | Mode::Auto => Verdict::Ask,
            },
            // Reaching outside asks, like a command, except in full-auto; a
            // visibly local host asks even there, since the fetch refuses
            // local addresses the user did not allow.
            Access::Fetch { local, .. } => match self.mode {
                _ if remembered => Verdict::Allow,
                Mode::FullAuto if !*local => Verdict::Allow,
                Mode::ReadOnly | Mode::Plan | Mode::Ask | Mode::AcceptEdits | Mode::Auto | Mode::FullAuto => {
                    Verdict::Ask
                }
            },
        }
    }

    /// The choices to offer for a call, in the order editors show them.
    /// An "always" choice names what it will remember and for how long:
    /// for this session, for this project (where project rules can be
    /// kept), in every project (where user rules can be kept and the rule
    /// fits every project). Of the choices of one ACP kind the narrowest
    /// comes first, so a client that binds one key per kind binds it to
    /// the session's.
    pub fn options(&self, access: &Access, roots: &[PathBuf]) -> Vec<Choice> {
        let sandboxed = self.runs_sandboxed(access, None);
        let reject_lasting = if self.project.is_some() { Lasting::Project } else { Lasting::Session };
        let reject_always = |rule: Rule| {
            let label = format!("Always reject {} {}", rule.describe(), reject_lasting.phrase());
            Choice { answer: Answer::RejectAlways(reject_lasting), id: "reject_always", label }
        };
        if let Access::Execute { outside: true, .. } = access
            && self.confinement.in_use()
        {
            // The model asked to leave the sandbox: yes (this once) or no.
            let mut choices = vec![
                Choice {
                    answer: Answer::AllowOutside,
                    id: ALLOW_OUTSIDE,
                    label: "Allow outside the sandbox".to_owned(),
                },
                Choice { answer: Answer::RejectOnce, id: "reject_once", label: "Reject".to_owned() },
            ];
            if let Some(rule @ Rule::CommandPrefix(_)) = reject_rule(access, roots) {
                choices.push(reject_always(rule));
            }
            return choices;
        }
        // Read-only and plan modes ask about every MCP call (see `judge`),
        // and a cautioned call asks every time (see `Policy::caution`): an
        // "always" of any length would mean nothing, or worse, a standing
        // rule the next such call must ignore anyway.
        let cautioned = self.caution(access, roots).is_some();
        let every_time = cautioned
            || (matches!(self.mode, Mode::ReadOnly | Mode::Plan) && matches!(access, Access::External { .. }));
        let always = allow_rule(access, roots).filter(|_| !every_time);
        let allow = if sandboxed { "Allow in the sandbox" } else { "Allow" };
        let mut choices = vec![Choice { answer: Answer::AllowOnce, id: "allow_once", label: allow.to_owned() }];
        if let Some(rule) = always {
            let described = rule.describe();
            let mut lastings = vec![(Lasting::Session, "allow_always")];
            if self.project.is_some() {
                lastings.push((Lasting::Project, "allow_always_project"));
            }
            if self.user.is_some() && rule.fits_everywhere() {
                lastings.push((Lasting::User, "allow_always_user"));
            }
            for (lasting, id) in lastings {
                // "`cat …` inside the project, in every project" reads better with the comma.
                let comma = if described.ends_with("the project") && lasting == Lasting::User { "," } else { "" };
                let label = format!("Always allow {described}{comma} {}", lasting.phrase());
                let label = if sandboxed { format!("{label}, in the sandbox") } else { label };
                choices.push(Choice { answer: Answer::AllowAlways(lasting), id, label });
            }
        }
        if sandboxed && self.confinement != Confinement::Required {
            let label = "Allow outside the sandbox".to_owned();
            choices.push(Choice { answer: Answer::AllowOutside, id: ALLOW_OUTSIDE, label });
        }
        choices.push(Choice { answer: Answer::RejectOnce, id: "reject_once", label: "Reject".to_owned() });
        if let Some(rule) = reject_rule(access, roots).filter(|_| !cautioned) {
            choices.push(reject_always(rule));
        }
        choices
    }

    /// Remembers an "always" answer. One that outlasts the session is kept
    /// in memory here (so it holds at once) and returned, for the caller to
    /// write down where it lasts.
    /// Nothing is remembered of a cautioned call (see [`Policy::caution`]),
    /// which offers no "always": it asks again next time.
    pub fn remember(&mut self, access: &Access, roots: &[PathBuf], answer: Answer) -> Option<Remembered> {
        if self.caution(access, roots).is_some() {
            return None;
        }
        match answer {
            Answer::AllowAlways(lasting) => {
                let rule = allow_rule(access, roots)?;
                self.rejected.retain(|rejected| !rejected.covers(access, roots));
                let kept = match lasting {
                    Lasting::Session => {
                        self.allowed.insert(rule);
                        return None;
                    }
                    Lasting::Project => self.project.as_mut(),
                    Lasting::User => self.user.as_mut(),
                }?;
                if !kept.allowed.contains(&rule) {
                    kept.allowed.push(rule.clone());
                }
                Some(Remembered { lasting, allow: true, rule })
            }
            Answer::RejectAlways(lasting) => {
                let rule = reject_rule(access, roots)?;
                self.allowed.retain(|allowed| !allowed.covers(access, roots));
                let kept = match lasting {
                    Lasting::Session => {
                        self.rejected.insert(rule);
                        return None;
                    }
                    Lasting::Project => self.project.as_mut(),
                    Lasting::User => self.user.as_mut(),
                }?;
                if !kept.rejected.contains(&rule) {
                    kept.rejected.push(rule.clone());
                }
                Some(Remembered { lasting, allow: false, rule })
            }
            Answer::AllowOnce | Answer::AllowOutside | Answer::RejectOnce | Answer::Cancelled => None,
        }
    }

    /// The hosts the user allowed fetches from: for the rest of the
    /// session, or by a standing rule.
    pub fn fetch_hosts(&self) -> HashSet<String> {
        let standing = [&self.project, &self.user].into_iter().flatten().flat_map(|rules| rules.allowed.iter());
        self.allowed
            .iter()
            .chain(standing)
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
        Tool::AskUser => "questions",
        Tool::ExitPlanMode => "plan approvals",
        Tool::Task => "sub-agents",
    }
}

/// The roots as they really are (links followed), as denials are judged.
fn real_roots(roots: &[PathBuf]) -> Vec<PathBuf> {
    roots.iter().map(|root| Target::of(root).real).collect()
}

/// Whether every target stays inside the roots, judged on where it really
/// leads (see [`crate::fs_guard`]).
fn all_inside(targets: &[Target], roots: &[PathBuf]) -> bool {
    targets.iter().all(|target| target.is_inside(roots))
}

/// The rule an "always allow" answer to this call creates. Reads and writes
/// share a rule per tool family so that "always allow edits" covers both edit
/// tools (the only ones that write); an MCP tool is its own rule; a command
/// gets the narrow [`CommandRule`], or none (inline code, `;`, `$(`, ...).
fn allow_rule(access: &Access, roots: &[PathBuf]) -> Option<Rule> {
    let scope = |targets: &[Target]| if all_inside(targets, roots) { Scope::Inside } else { Scope::Outside };
    match access {
        Access::Nothing => None,
        Access::Read(paths) => Some(Rule::Tool(Tool::ReadFile, scope(paths))),
        Access::Write(paths) => Some(Rule::Tool(Tool::EditFile, scope(paths))),
        Access::Execute { command, cwd, .. } => shell::command_rule(command, cwd).map(Rule::Command),
        Access::External { server, tool, .. } => Some(Rule::External { server: server.clone(), tool: tool.clone() }),
        Access::Fetch { host, .. } => Some(Rule::FetchHost(host.clone())),
    }
}

/// The rule an "always reject" answer to this call creates: as for allowing,
/// except that a command is rejected by its program and subcommand (or, when
/// it has none that can be matched, exactly).
fn reject_rule(access: &Access, roots: &[PathBuf]) -> Option<Rule> {
    match access {
        Access::Execute { command, cwd, .. } => Some(match shell::command_prefix(command) {
            Some(prefix) => Rule::CommandPrefix(prefix),
            None => Rule::Command(CommandRule::Exact { command: command.trim().to_owned(), cwd: cwd.clone() }),
        }),
        Access::Nothing | Access::Read(_) | Access::Write(_) | Access::External { .. } | Access::Fetch { .. } => {
            allow_rule(access, roots)
        }
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
    /// For a sub-agent's call, the `task` call that runs the sub-agent.
    pub parent_call_id: Option<String>,
}

/// Why asking failed (the editor is gone or answered nonsense).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ApprovalError(pub String);

/// How the agent asks the user. Dropping the returned future withdraws the question.
pub trait Approver: Send + Sync {
    /// Asks and waits for the answer.
    fn ask<'a>(&'a self, question: &'a PermissionQuestion) -> BoxFuture<'a, Result<Answer, ApprovalError>>;

    /// Whether anybody can answer (`lathe exec` without a terminal cannot):
    /// what only a question may allow is then left undone, not asked.
    fn can_ask(&self) -> bool {
        true
    }

    /// Puts a question of the model's (`ask_user`) or the plan's approval
    /// (`exit_plan_mode`) to the user and waits for the answer. The default
    /// has no one to ask (a front end without a user, a sub-agent).
    fn ask_user<'a>(&'a self, question: &'a UserQuestion) -> BoxFuture<'a, Result<UserReply, AskError>> {
        let _ = question;
        Box::pin(async { Err(AskError::NoOneToAsk("nobody is there to answer".to_owned())) })
    }
}

/// A question for the user that is not a permission: the model's own
/// (`ask_user`), or whether to run a plan (`exit_plan_mode`).
#[derive(Debug, Clone, PartialEq)]
pub struct UserQuestion {
    /// The tool call that asks (already announced to the editor).
    pub call_id: String,
    /// The call's title.
    pub title: String,
    /// The question, as the user reads it.
    pub question: String,
    /// The answers offered, in order.
    pub choices: Vec<UserChoice>,
    /// Whether an answer in the user's own words is welcome.
    pub free_text: bool,
    /// An approval (run the plan?) rather than the model's question: asked
    /// the way permissions are, whatever else the front end could show.
    pub approval: bool,
    /// What the user is shown to decide on (the plan).
    pub preview: Vec<DisplayContent>,
}

/// One answer offered to a [`UserQuestion`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserChoice {
    /// Its id on the wire.
    pub id: String,
    /// What the user reads.
    pub label: String,
    /// Choosing it says no (shown as a rejection where editors tell them apart).
    pub declines: bool,
}

/// How the user answered a [`UserQuestion`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserReply {
    /// They chose the choice with this id.
    Chose(String),
    /// They wrote this.
    Wrote(String),
    /// They declined to answer (dismissed the question).
    Declined,
    /// The turn was cancelled while asking.
    Cancelled,
}

/// Why a [`UserQuestion`] got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// Nobody can answer here (`lathe exec` without a terminal): said at once.
    #[error("no one to ask: {0}")]
    NoOneToAsk(String),
    /// The front end could not ask (the editor failed, or cannot show this question).
    #[error("{0}")]
    Failed(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn roots() -> Vec<PathBuf> {
        vec![PathBuf::from("/nonexistent-root/project")]
    }

    fn inside() -> Vec<Target> {
        vec![Target::of(Path::new("/nonexistent-root/project/src/a.rs"))]
    }

    fn outside() -> Vec<Target> {
        vec![Target::of(Path::new("/nonexistent-root/elsewhere/a.rs"))]
    }

    fn web(url: &str, host: &str, local: bool) -> Access {
        Access::Fetch { url: url.to_owned(), host: host.to_owned(), local }
    }

    fn run(command: &str) -> Access {
        Access::Execute { command: command.to_owned(), cwd: PathBuf::from("/nonexistent-root/project"), outside: false }
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
            // Plan mode reads, searches and fetches; it writes and runs nothing, and asks nothing about it.
            (Mode::Plan, Tool::ReadFile, Access::Read(inside()), Allow),
            (Mode::Plan, Tool::ReadFile, Access::Read(outside()), Ask),
            (Mode::Plan, Tool::WriteFile, Access::Write(inside()), Deny),
            (Mode::Plan, Tool::Shell, run("ls"), Deny),
            (Mode::Plan, Tool::Fetch, web("https://docs.rs/", "docs.rs", false), Ask),
            (Mode::Plan, Tool::Shell, mcp("search", true), Ask),
            (Mode::Plan, Tool::Shell, mcp("publish", false), Deny),
            (Mode::Plan, Tool::AskUser, Access::Nothing, Allow),
            // MCP tools ask like commands, whatever the server's hints say
            // (issue 11, defect 10); in read-only mode, only the ones the
            // server calls read-only may be asked about.
            (Mode::Ask, Tool::Shell, mcp("search", true), Ask),
            (Mode::ReadOnly, Tool::Shell, mcp("search", true), Ask),
            (Mode::AcceptEdits, Tool::Shell, mcp("search", true), Ask),
            (Mode::FullAuto, Tool::Shell, mcp("search", true), Allow),
            (Mode::Ask, Tool::Shell, mcp("publish", false), Ask),
            (Mode::AcceptEdits, Tool::Shell, mcp("publish", false), Ask),
            (Mode::ReadOnly, Tool::Shell, mcp("publish", false), Deny),
            // Fetches ask except in full-auto; a visibly local host asks there too.
            (Mode::ReadOnly, Tool::Fetch, web("https://docs.rs/", "docs.rs", false), Ask),
            (Mode::Ask, Tool::Fetch, web("https://docs.rs/", "docs.rs", false), Ask),
            (Mode::AcceptEdits, Tool::Fetch, web("https://docs.rs/", "docs.rs", false), Ask),
            (Mode::FullAuto, Tool::Fetch, web("https://docs.rs/", "docs.rs", false), Allow),
            (Mode::FullAuto, Tool::Fetch, web("http://localhost:3000/", "localhost:3000", true), Ask),
            (Mode::FullAuto, Tool::Shell, mcp("publish", false), Allow),
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
        policy.remember(&Access::Write(inside()), &roots(), Answer::AllowAlways(Lasting::Session));
        assert_eq!(policy.judge(&Access::Write(inside()), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&Access::Write(outside()), &roots()), Verdict::Ask);

        policy.remember(&run("cargo test --all"), &roots(), Answer::AllowAlways(Lasting::Session));
        assert_eq!(policy.judge(&run("cargo test --all"), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&run("  cargo test --all "), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&run("cargo test -p lathe"), &roots()), Verdict::Ask, "exact commands only");
        assert_eq!(policy.judge(&run("cargo build"), &roots()), Verdict::Ask);
        assert_eq!(policy.judge(&run("cargo test --all && rm -rf ~"), &roots()), Verdict::Ask);
        let elsewhere = Access::Execute {
            outside: false,
            command: "cargo test --all".to_owned(),
            cwd: PathBuf::from("/nonexistent-root/project/sub"),
        };
        assert_eq!(policy.judge(&elsewhere, &roots()), Verdict::Ask, "in another directory it is another command");

        policy.remember(&run("git push --force"), &roots(), Answer::RejectAlways(Lasting::Session));
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
        assert_eq!(ids(&run("python3 -c 'print(1)'")), vec!["allow_once", "reject_once", "reject_always"]);
        // Each "always" option names the rule it remembers.
        let labels =
            |access: &Access| policy.options(access, &roots()).into_iter().map(|c| c.label).collect::<Vec<_>>();
        assert_eq!(
            labels(&run("cargo test --all")),
            [
                "Allow",
                "Always allow `cargo test --all` for this session",
                "Reject",
                "Always reject `cargo test …` for this session"
            ]
        );
        assert_eq!(labels(&run("cat README.md"))[1], "Always allow `cat …` inside the project for this session");
        assert_eq!(
            labels(&run("git log --oneline"))[1],
            "Always allow `git log …` inside the project for this session"
        );
        assert_eq!(
            labels(&run("echo `date`; ls"))[1..],
            ["Reject", "Always reject `` echo `date`; ls `` for this session"]
        );
        assert_eq!(ids(&mcp("publish", false)), vec!["allow_once", "allow_always", "reject_once", "reject_always"]);
        assert_eq!(
            policy.options(&mcp("publish", false), &roots())[1].label,
            "Always allow `publish` from `docs` for this session"
        );
    }

    /// "Always" for an MCP tool covers that tool of that server only.
    #[test]
    fn always_answers_for_mcp_tools_are_per_tool() {
        let mut policy = Policy::new(Mode::Ask);
        policy.remember(&mcp("publish", false), &roots(), Answer::AllowAlways(Lasting::Session));
        assert_eq!(policy.judge(&mcp("publish", false), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&mcp("delete", false), &roots()), Verdict::Ask);
        let other_server = Access::External { server: "wiki".to_owned(), tool: "publish".to_owned(), read_only: false };
        assert_eq!(policy.judge(&other_server, &roots()), Verdict::Ask);
        policy.remember(&mcp("delete", false), &roots(), Answer::RejectAlways(Lasting::Session));
        assert!(matches!(policy.judge(&mcp("delete", false), &roots()), Verdict::Deny(_)));
        // Read-only mode refuses even a remembered tool that changes things,
        // and asks about every call of a tool the server calls read-only.
        policy.set_mode(Mode::ReadOnly);
        assert!(matches!(policy.judge(&mcp("publish", false), &roots()), Verdict::Deny(_)));
        policy.remember(&mcp("lookup", true), &roots(), Answer::AllowAlways(Lasting::Session));
        assert_eq!(policy.judge(&mcp("lookup", true), &roots()), Verdict::Ask);
        let ids: Vec<&str> = policy.options(&mcp("lookup", true), &roots()).iter().map(|c| c.id).collect();
        assert_eq!(ids, ["allow_once", "reject_once", "reject_always"]);
    }

    /// Paths are judged where they lead: `..`, absolute paths and symlinks
    /// (dangling ones too) leaving the roots are outside, for reads and
    /// writes alike; a hard link is judged by its name, except for a write
    /// the editor makes in place (see `fs_guard`).
    #[test]
    fn links_and_dot_dots_are_judged_by_where_they_lead() {
        use crate::platform::testing::symlink;
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let roots = vec![root.path().to_path_buf()];
        let secret = elsewhere.path().join("secret.txt");
        std::fs::write(&secret, "s").unwrap();
        if !symlink(&secret, root.path().join("file_link")) {
            return;
        }
        assert!(symlink(elsewhere.path(), root.path().join("dir_link")));
        std::fs::hard_link(&secret, root.path().join("hard_link")).unwrap();
        assert!(symlink(elsewhere.path().join("newdir/x"), root.path().join("dangling")));

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

    /// "Always" for a fetch covers that host (and port) only, in every mode.
    #[test]
    fn always_answers_for_fetches_are_per_host() {
        let mut policy = Policy::new(Mode::Ask);
        let docs = web("https://docs.rs/serde", "docs.rs", false);
        let local = web("http://localhost:8080/a", "localhost:8080", true);
        assert_eq!(
            policy.options(&local, &roots())[1].label,
            "Always allow fetching from `localhost:8080` for this session"
        );
        policy.remember(&docs, &roots(), Answer::AllowOnce);
        assert_eq!(policy.judge(&docs, &roots()), Verdict::Ask, "once is once");
        policy.remember(&local, &roots(), Answer::AllowAlways(Lasting::Session));
        assert_eq!(policy.judge(&web("http://localhost:8080/b?c", "localhost:8080", true), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&web("http://localhost:9090/", "localhost:9090", true), &roots()), Verdict::Ask);
        assert_eq!(policy.judge(&web("http://127.0.0.1:8080/", "127.0.0.1:8080", true), &roots()), Verdict::Ask);
        assert_eq!(policy.judge(&docs, &roots()), Verdict::Ask);
        assert_eq!(policy.fetch_hosts(), HashSet::from(["localhost:8080".to_owned()]));
        for mode in Mode::ALL {
            policy.set_mode(mode);
            assert_eq!(policy.judge(&local, &roots()), Verdict::Allow, "{mode:?}");
        }
        policy.remember(&docs, &roots(), Answer::RejectAlways(Lasting::Session));
        assert!(matches!(policy.judge(&docs, &roots()), Verdict::Deny(_)));
    }

    /// Issue 11, defect 8: after "always allow" for the first command of
    /// each pair, the second still asks (and the first is allowed again).
    #[test]
    fn always_allow_never_stretches_to_other_arguments() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let roots = vec![root.path().to_path_buf()];
        // Where no link can be made (wine, Windows without the right), the
        // row that needs it is left out, and the helper says so.
        let linked = crate::platform::testing::symlink(elsewhere.path(), root.path().join("link_out"));
        let outside = elsewhere.path().display().to_string();
        let run = |command: &str| Access::Execute {
            command: command.to_owned(),
            cwd: root.path().to_path_buf(),
            outside: false,
        };
        let table: Vec<(&str, String)> = vec![
            // The four.
            ("find . -name '*.rs'", format!("find {outside} -delete")),
            ("cat README.md", format!("cat {outside}/secret")),
            ("sed -n 1p x", "sed -i s/a/b/ x".to_owned()),
            ("python3 script.py", "python3 -c 'import os; os.remove(\"x\")'".to_owned()),
            // Read-only programs: paths, links and expansions that leave the roots.
            ("cat README.md", "cat ../other/secret".to_owned()),
            ("cat README.md", "cat link_out/secret".to_owned()),
            ("cat README.md", "cat ~/.ssh/id_rsa".to_owned()),
            ("cat README.md", "cat $HOME/.netrc".to_owned()),
            ("cat README.md", "cat \"$HOME/.netrc\"".to_owned()),
            ("cat README.md", "cat */../../x".to_owned()),
            ("cat README.md", "cat {README.md,/etc/passwd}".to_owned()),
            ("cat README.md", format!("cat -- {outside}/x")),
            ("grep -r todo src", format!("grep -r --file={outside}/patterns src")),
            ("grep -r todo src", format!("grep -f{outside}/patterns src")),
            ("grep -r todo src", "grep -r todo src > out.txt".to_owned()),
            ("ls", "ls; rm -rf src".to_owned()),
            ("head -n 5 a.txt", "/tmp/head -n 5 a.txt".to_owned()),
            // Another subcommand, or an option that writes or runs something.
            ("git log --oneline", "git push --force".to_owned()),
            ("git log --oneline", "git log --output=notes.txt".to_owned()),
            ("git log --oneline", "git log --out=notes.txt".to_owned()),
            ("git diff", "git -c core.pager=sh diff".to_owned()),
            ("git grep todo", "git grep -O todo".to_owned()),
            ("tree", "tree -aR".to_owned()),
            ("rg todo", "rg --pre ./evil todo".to_owned()),
            ("cargo test", "cargo test --config build.rustc-wrapper='/bin/evil'".to_owned()),
            ("npm run build", "npm run deploy".to_owned()),
            // Interpreters' inline code, however it is reached.
            ("node app.js", "node -e 'process.exit(1)'".to_owned()),
            ("sh build.sh", "sh -c 'rm -rf /'".to_owned()),
            ("perl tool.pl", "perl -e 'unlink q(x)'".to_owned()),
            ("ruby tool.rb", "ruby -e 'File.delete(\"x\")'".to_owned()),
            ("python3 script.py", "env python3 -c 'print(1)'".to_owned()),
            ("bash build.sh", "bash -ec 'rm x'".to_owned()),
        ];
        for (first, second) in table.iter().filter(|(_, second)| linked || !second.contains("link_out")) {
            let mut policy = Policy::new(Mode::Ask);
            assert_eq!(policy.judge(&run(first), &roots), Verdict::Ask, "{first} asks at first");
            assert!(
                policy.options(&run(first), &roots).iter().any(|c| c.answer == Answer::AllowAlways(Lasting::Session)),
                "{first}"
            );
            policy.remember(&run(first), &roots, Answer::AllowAlways(Lasting::Session));
            assert_eq!(policy.judge(&run(first), &roots), Verdict::Allow, "{first} is allowed again");
            assert_eq!(policy.judge(&run(second), &roots), Verdict::Ask, "{second} after {first}");
        }

        // What a read-only rule does cover: the same program on other files inside.
        let mut policy = Policy::new(Mode::Ask);
        policy.remember(&run("cat README.md"), &roots, Answer::AllowAlways(Lasting::Session));
        policy.remember(&run("git log --oneline"), &roots, Answer::AllowAlways(Lasting::Session));
        policy.remember(&run("grep -r todo src"), &roots, Answer::AllowAlways(Lasting::Session));
        for covered in [
            "cat src/lib.rs Cargo.toml",
            "cat -n 'a file.txt'",
            "git log -p -- src/main.rs",
            "git log --format='%h %s' -5",
            "grep -rn 'fn [a-z]*' src",
            "grep -e TODO -- -weird-name",
        ] {
            assert_eq!(policy.judge(&run(covered), &roots), Verdict::Allow, "{covered}");
        }
    }

    fn outside_run(command: &str) -> Access {
        Access::Execute { command: command.to_owned(), cwd: PathBuf::from("/nonexistent-root/project"), outside: true }
    }

    /// Issue 14: commands by mode and sandbox; which run sandboxed; what is offered.
    #[test]
    fn the_sandbox_table() {
        use Expect::{Allow, Ask, Deny};
        let refused = Confinement::Refused("no Landlock".to_owned());
        let table = [
            // (confinement, mode, asks to leave, verdict, sandboxed when allowed without an answer)
            (Confinement::Enforced, Mode::Auto, false, Allow, true),
            (Confinement::Enforced, Mode::Auto, true, Ask, false),
            (Confinement::Enforced, Mode::Ask, false, Ask, true),
            (Confinement::Enforced, Mode::AcceptEdits, false, Ask, true),
            (Confinement::Enforced, Mode::AcceptEdits, true, Ask, false),
            (Confinement::Enforced, Mode::FullAuto, false, Allow, false),
            (Confinement::Enforced, Mode::FullAuto, true, Allow, false),
            (Confinement::Enforced, Mode::ReadOnly, false, Deny, true),
            // Partly enforced or none: auto asks, as ask mode does.
            (Confinement::Partial, Mode::Auto, false, Ask, true),
            (Confinement::Partial, Mode::Auto, true, Ask, false),
            (Confinement::Off, Mode::Auto, false, Ask, false),
            (Confinement::Off, Mode::Auto, true, Ask, false),
            (Confinement::Off, Mode::FullAuto, false, Allow, false),
            // Required: every command in, full-auto too; none out.
            (Confinement::Required, Mode::Auto, false, Allow, true),
            (Confinement::Required, Mode::FullAuto, false, Allow, true),
            (Confinement::Required, Mode::Ask, true, Deny, true),
            (Confinement::Required, Mode::FullAuto, true, Deny, true),
            (refused.clone(), Mode::Auto, false, Deny, false),
            (refused.clone(), Mode::FullAuto, false, Deny, false),
            (refused, Mode::Ask, false, Deny, false),
        ];
        for (confinement, mode, outside, expected, sandboxed) in table {
            let mut policy = Policy::new(mode);
            policy.set_confinement(confinement.clone());
            let access = if outside { outside_run("cargo test") } else { run("cargo test") };
            let got = match policy.judge(&access, &roots()) {
                Verdict::Allow => Allow,
                Verdict::Ask => Ask,
                Verdict::Deny(_) => Deny,
            };
            assert_eq!(got, expected, "{confinement:?} {mode:?} outside={outside}");
            assert_eq!(policy.runs_sandboxed(&access, None), sandboxed, "{confinement:?} {mode:?} outside={outside}");
        }

        // Asking in the sandbox offers to let the command out; the answer decides.
        let mut policy = Policy::new(Mode::Ask);
        policy.set_confinement(Confinement::Enforced);
        let labels: Vec<String> = policy.options(&run("cargo test"), &roots()).into_iter().map(|c| c.label).collect();
        assert_eq!(
            labels,
            [
                "Allow in the sandbox",
                "Always allow `cargo test` for this session, in the sandbox",
                "Allow outside the sandbox",
                "Reject",
                "Always reject `cargo test …` for this session"
            ]
        );
        assert!(policy.runs_sandboxed(&run("cargo test"), Some(Answer::AllowOnce)));
        assert!(policy.runs_sandboxed(&run("cargo test"), Some(Answer::AllowAlways(Lasting::Session))));
        assert!(!policy.runs_sandboxed(&run("cargo test"), Some(Answer::AllowOutside)));
        // "Allow outside" is remembered for nothing.
        policy.remember(&run("cargo test"), &roots(), Answer::AllowOutside);
        assert_eq!(policy.judge(&run("cargo test"), &roots()), Verdict::Ask);
        // A request to leave asks even after "always allow" of the same command, and offers no "always".
        policy.remember(&run("cargo test"), &roots(), Answer::AllowAlways(Lasting::Session));
        assert_eq!(policy.judge(&run("cargo test"), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&outside_run("cargo test"), &roots()), Verdict::Ask);
        let ids: Vec<&str> = policy.options(&outside_run("cargo test"), &roots()).iter().map(|c| c.id).collect();
        assert_eq!(ids, [ALLOW_OUTSIDE, "reject_once", "reject_always"]);
        // Required: nothing offers to leave.
        policy.set_confinement(Confinement::Required);
        let ids: Vec<&str> = policy.options(&run("make"), &roots()).iter().map(|c| c.id).collect();
        assert_eq!(ids, ["allow_once", "allow_always", "reject_once", "reject_always"]);
        // Without a sandbox the options are as they always were.
        policy.set_confinement(Confinement::Off);
        assert_eq!(policy.options(&run("make"), &roots())[0].label, "Allow");
        assert_eq!(policy.options(&outside_run("make"), &roots())[0].id, "allow_once");
    }

    /// Issue 26: on a system without a sandbox (Windows: the `none`
    /// family's status), auto mode asks before every command, as on a Linux
    /// without Landlock; full-auto still runs them.
    #[test]
    fn without_a_sandbox_auto_asks_before_commands() {
        use crate::platform::sandbox::{SessionSandbox, none};
        let settings = crate::config::SandboxSettings::default();
        let status = none::status(&settings, Some(std::path::Path::new("lathe")));
        let sandbox = SessionSandbox::from_status(&settings, &roots(), status);
        let mut policy = Policy::new(Mode::Auto);
        policy.set_confinement(sandbox.confinement());
        for command in ["cargo test", "ls", "git status"] {
            assert_eq!(policy.judge(&run(command), &roots()), Verdict::Ask, "{command}");
            assert!(!policy.runs_sandboxed(&run(command), Some(Answer::AllowOnce)), "{command}");
        }
        policy.set_mode(Mode::FullAuto);
        assert_eq!(policy.judge(&run("cargo test"), &roots()), Verdict::Allow);
    }

    /// Auto mode takes edits inside the project like accept-edits; the rest asks.
    #[test]
    fn auto_mode_edits_like_accept_edits() {
        let mut policy = Policy::new(Mode::Auto);
        policy.set_confinement(Confinement::Enforced);
        assert_eq!(policy.judge(&Access::Write(inside()), &roots()), Verdict::Allow);
        assert_eq!(policy.judge(&Access::Write(outside()), &roots()), Verdict::Ask);
        assert_eq!(policy.judge(&Access::Read(outside()), &roots()), Verdict::Ask);
        assert_eq!(policy.judge(&mcp("publish", false), &roots()), Verdict::Ask);
        assert_eq!(policy.judge(&web("https://docs.rs/", "docs.rs", false), &roots()), Verdict::Ask);
        assert_eq!(Mode::ALL.map(Mode::id), ["read-only", "plan", "ask", "accept-edits", "auto", "full-auto"]);
    }

    /// Issue 27: the user's own skill folders (in lathe's config folder,
    /// which is kept from commands) read without asking in every mode; a
    /// file beside them in the config folder, or a link in them leading
    /// elsewhere, still asks; writing there is judged as outside.
    #[test]
    fn the_users_skill_folders_read_without_asking() {
        let root = tempfile::tempdir().unwrap();
        let config = tempfile::tempdir().unwrap();
        let skill = config.path().join("skills/pdf");
        std::fs::create_dir_all(skill.join("references")).unwrap();
        std::fs::write(skill.join("SKILL.md"), "---").unwrap();
        std::fs::write(config.path().join("credentials.toml"), "k").unwrap();
        let linked = crate::platform::testing::symlink(config.path().join("credentials.toml"), skill.join("key.md"));
        let roots = vec![root.path().to_path_buf()];
        let read = |path: &Path| Access::Read(vec![Target::of(path)]);
        for mode in Mode::ALL {
            let mut policy = Policy::new(mode);
            policy.set_read_denials(ReadDenials::new(None, &[config.path().to_path_buf()]));
            let asks = if mode == Mode::FullAuto { Verdict::Allow } else { Verdict::Ask };
            assert_eq!(policy.judge(&read(&skill.join("SKILL.md")), &roots), asks, "{mode:?}: not yet");
            policy.set_skill_folders(vec![Target::of(&skill).real]);
            for path in [skill.join("SKILL.md"), skill.join("references/forms.md")] {
                assert_eq!(policy.judge(&read(&path), &roots), Verdict::Allow, "{mode:?}: {path:?}");
                assert_eq!(policy.caution(&read(&path), &roots), None);
            }
            assert_eq!(policy.judge(&read(&config.path().join("credentials.toml")), &roots), asks, "{mode:?}");
            if linked {
                assert_eq!(policy.judge(&read(&skill.join("key.md")), &roots), asks, "{mode:?}: a link out");
            }
            let write = Access::Write(vec![Target::of(&skill.join("SKILL.md"))]);
            if mode != Mode::FullAuto {
                assert_ne!(policy.judge(&write, &roots), Verdict::Allow, "{mode:?}");
            }
        }
    }

    /// Issues 25 and 29: writing what git runs (a hook, its config) and
    /// reading what the sandbox keeps from commands (a key) ask in every mode
    /// but full-auto, whatever "always" was given, offer no "always", and say
    /// why; read-only mode refuses the write. Other paths keep their rules.
    #[test]
    fn what_git_runs_and_credentials_ask_every_time() {
        let root = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join(".git/hooks")).unwrap();
        std::fs::create_dir_all(home.path().join(".ssh")).unwrap();
        let roots = vec![root.path().to_path_buf()];
        let write = |path: &str| Access::Write(vec![Target::of(&root.path().join(path))]);
        let read = |path: &str| Access::Read(vec![Target::of(&home.path().join(path))]);
        let (hook, config, plain) = (write(".git/hooks/pre-commit"), write(".git/config"), write("src/a.rs"));
        let (key, notes) = (read(".ssh/id_ed25519"), read("notes.txt"));
        for mode in Mode::ALL {
            let mut policy = Policy::new(mode);
            policy.set_read_denials(ReadDenials::new(Some(home.path()), &[]));
            policy.remember(&plain, &roots, Answer::AllowAlways(Lasting::Session));
            policy.remember(&notes, &roots, Answer::AllowAlways(Lasting::Session));
            let (protected, secret) = match mode {
                Mode::ReadOnly => (Verdict::Deny(READ_ONLY_REFUSAL.to_owned()), Verdict::Ask),
                Mode::Plan => (Verdict::Deny(PLAN_REFUSAL.to_owned()), Verdict::Ask),
                Mode::FullAuto => (Verdict::Allow, Verdict::Allow),
                Mode::Ask | Mode::AcceptEdits | Mode::Auto => (Verdict::Ask, Verdict::Ask),
            };
            assert_eq!(policy.judge(&hook, &roots), protected, "{mode:?}");
            assert_eq!(policy.judge(&config, &roots), protected, "{mode:?}");
            assert_eq!(policy.judge(&key, &roots), secret, "{mode:?}");
            if !matches!(mode, Mode::ReadOnly | Mode::Plan) {
                assert_eq!(policy.judge(&plain, &roots), Verdict::Allow, "{mode:?}: remembered");
            }
            assert_eq!(policy.judge(&notes, &roots), Verdict::Allow, "{mode:?}: remembered");
            for access in [&hook, &key] {
                let ids: Vec<&str> = policy.options(access, &roots).iter().map(|c| c.id).collect();
                assert!(!ids.contains(&"allow_always"), "{mode:?}: {ids:?}");
            }
            assert!(policy.caution(&hook, &roots).is_some_and(|why| why.contains("a git hook")));
            assert!(policy.caution(&key, &roots).is_some_and(|why| why.contains("credentials")));
            assert_eq!(policy.caution(&plain, &roots), None);
        }
        // A key inside a session root is the user's to read: no caution.
        let mut policy = Policy::new(Mode::Auto);
        policy.set_read_denials(ReadDenials::new(Some(home.path()), &[]));
        let home_root = vec![home.path().to_path_buf()];
        assert_eq!(policy.judge(&key, &home_root), Verdict::Allow);
        assert_eq!(policy.caution(&key, &home_root), None);
    }

    #[test]
    fn modes_round_trip() {
        for mode in Mode::ALL {
            assert_eq!(Mode::from_id(mode.id()), Some(mode));
        }
        assert_eq!(Mode::from_id("yolo"), None);
    }
}

#[cfg(test)]
mod lasting_tests {
    use super::*;

    fn roots() -> Vec<PathBuf> {
        vec![PathBuf::from("/nonexistent-root/project")]
    }

    fn run(command: &str) -> Access {
        Access::Execute { command: command.to_owned(), cwd: PathBuf::from("/nonexistent-root/project"), outside: false }
    }

    /// Issue 32: every "always" offers how long it lasts, narrowest first
    /// within its kind; "in every project" only for rules naming no
    /// directory; "always reject" for the project when project rules can be kept.
    #[test]
    fn always_answers_offer_how_long_they_last() {
        let mut policy = Policy::new(Mode::Ask);
        let ids = |policy: &Policy, access: &Access| -> Vec<&'static str> {
            policy.options(access, &roots()).iter().map(|c| c.id).collect()
        };
        // Nowhere to keep rules: as before, for this session.
        assert_eq!(ids(&policy, &run("cargo test")), ["allow_once", "allow_always", "reject_once", "reject_always"]);
        assert_eq!(policy.options(&run("cargo test"), &roots())[3].answer, Answer::RejectAlways(Lasting::Session));
        policy.set_standing(Some(RuleSet::default()), Some(RuleSet::default()));
        let labels: Vec<String> = policy.options(&run("cargo test"), &roots()).into_iter().map(|c| c.label).collect();
        assert_eq!(
            labels,
            [
                "Allow",
                "Always allow `cargo test` for this session",
                "Always allow `cargo test` for this project",
                "Reject",
                "Always reject `cargo test …` for this project"
            ]
        );
        let answers: Vec<Answer> = policy.options(&run("cat a"), &roots()).into_iter().map(|c| c.answer).collect();
        assert_eq!(
            answers,
            [
                Answer::AllowOnce,
                Answer::AllowAlways(Lasting::Session),
                Answer::AllowAlways(Lasting::Project),
                Answer::AllowAlways(Lasting::User),
                Answer::RejectOnce,
                Answer::RejectAlways(Lasting::Project)
            ]
        );
        assert_eq!(
            policy.options(&run("cat a"), &roots())[3].label,
            "Always allow `cat …` inside the project, in every project"
        );
        let web = Access::Fetch { url: "https://docs.rs/".into(), host: "docs.rs".into(), local: false };
        assert_eq!(policy.options(&web, &roots())[3].label, "Always allow fetching from `docs.rs` in every project");

        // A project answer holds at once and is handed back to be written down.
        let kept = policy.remember(&run("cargo test"), &roots(), Answer::AllowAlways(Lasting::Project));
        assert_eq!(policy.judge(&run("cargo test"), &roots()), Verdict::Allow);
        let Some(Remembered { lasting: Lasting::Project, allow: true, rule }) = kept else { panic!("{kept:?}") };
        assert_eq!(rule.describe(), "`cargo test`");
        assert_eq!(policy.session_rules(), (Vec::new(), Vec::new()), "not a session rule");
        let kept = policy.remember(&run("git push -f"), &roots(), Answer::RejectAlways(Lasting::Project));
        assert!(matches!(kept, Some(Remembered { allow: false, .. })));
        assert!(matches!(policy.judge(&run("git push origin"), &roots()), Verdict::Deny(_)));
        assert_eq!(policy.remember(&run("make"), &roots(), Answer::AllowAlways(Lasting::Session)), None);

        // Standing rules from the files: a user reject beats everything.
        let mut fresh = Policy::new(Mode::Ask);
        let user = RuleSet { allowed: Vec::new(), rejected: vec![Rule::CommandPrefix("rm".into())] };
        let project = RuleSet {
            allowed: vec![Rule::Command(CommandRule::Exact {
                command: "rm -rf target".into(),
                cwd: PathBuf::from("/nonexistent-root/project"),
            })],
            rejected: Vec::new(),
        };
        fresh.set_standing(Some(project), Some(user));
        assert!(matches!(fresh.judge(&run("rm -rf target"), &roots()), Verdict::Deny(_)));
    }
}

#[cfg(test)]
mod caution_tests {
    use super::*;

    /// Issues 25 and 32 together: a cautioned call (a write of what git
    /// runs, a read of what the sandbox keeps from commands) is asked every
    /// time. No standing rule allows it, of the project or of the user, nor
    /// an "always" of this session; no "always" of any kind or length is
    /// offered for it; an "always" answer to it is not kept. A standing
    /// reject still refuses it. Other calls keep their rules.
    #[test]
    fn no_lasting_rule_allows_a_cautioned_call() {
        let root = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join(".git/hooks")).unwrap();
        std::fs::create_dir_all(home.path().join(".ssh")).unwrap();
        let roots = vec![root.path().to_path_buf()];
        let write = |path: &str| Access::Write(vec![Target::of(&root.path().join(path))]);
        let read = |path: &str| Access::Read(vec![Target::of(&home.path().join(path))]);
        let (hook, plain) = (write(".git/hooks/pre-commit"), write("src/a.rs"));
        let (key, notes) = (read(".ssh/id_ed25519"), read("notes.txt"));
        let edits = RuleSet { allowed: vec![Rule::Tool(Tool::EditFile, Scope::Inside)], rejected: Vec::new() };
        let reads = RuleSet { allowed: vec![Rule::Tool(Tool::ReadFile, Scope::Outside)], rejected: Vec::new() };
        let always = |choice: &Choice| matches!(choice.answer, Answer::AllowAlways(_) | Answer::RejectAlways(_));
        for (project, user) in [(edits.clone(), reads.clone()), (reads.clone(), edits.clone())] {
            for mode in [Mode::Ask, Mode::AcceptEdits, Mode::Auto] {
                let mut policy = Policy::new(mode);
                policy.set_read_denials(ReadDenials::new(Some(home.path()), &[]));
                policy.set_standing(Some(project.clone()), Some(user.clone()));
                assert_eq!(policy.judge(&plain, &roots), Verdict::Allow, "{mode:?}: the rule holds");
                assert_eq!(policy.judge(&notes, &roots), Verdict::Allow, "{mode:?}: the rule holds");
                for cautioned in [&hook, &key] {
                    assert_eq!(policy.judge(cautioned, &roots), Verdict::Ask, "{mode:?}: {cautioned:?}");
                    let options = policy.options(cautioned, &roots);
                    assert!(!options.iter().any(always), "{mode:?}: {options:?}");
                    let ids: Vec<&str> = options.iter().map(|c| c.id).collect();
                    assert_eq!(ids, ["allow_once", "reject_once"], "{mode:?}");
                    for lasting in [Lasting::Session, Lasting::Project, Lasting::User] {
                        for answer in [Answer::AllowAlways(lasting), Answer::RejectAlways(lasting)] {
                            assert_eq!(policy.remember(cautioned, &roots, answer), None, "{mode:?}: {answer:?}");
                        }
                    }
                    assert_eq!(policy.judge(cautioned, &roots), Verdict::Ask, "{mode:?}: nothing was kept");
                    assert_eq!(policy.session_rules(), (Vec::new(), Vec::new()), "{mode:?}");
                }
                // An "always" given in the session for the same kind of call does not cover it either.
                policy.remember(&plain, &roots, Answer::AllowAlways(Lasting::Session));
                policy.remember(&notes, &roots, Answer::AllowAlways(Lasting::Session));
                assert_eq!(policy.judge(&hook, &roots), Verdict::Ask, "{mode:?}");
                assert_eq!(policy.judge(&key, &roots), Verdict::Ask, "{mode:?}");
            }
        }
        // A standing reject refuses it (a refusal never needs a question).
        let mut policy = Policy::new(Mode::Ask);
        let no_edits = RuleSet { allowed: Vec::new(), rejected: vec![Rule::Tool(Tool::EditFile, Scope::Inside)] };
        policy.set_standing(Some(no_edits), None);
        assert!(matches!(policy.judge(&hook, &roots), Verdict::Deny(_)));
    }
}
