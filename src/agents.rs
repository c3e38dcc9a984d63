//! The agents a `task` call can hand a job to (sub-agents): who they are,
//! what they may use, and what their system prompt says. The built-in
//! `explore` agent reads, lists, searches and fetches, and changes nothing.
//!
//! A sub-agent runs a turn of its own (see `agent::task`); this module only
//! describes agents. Which of an agent's tools it really gets is decided by
//! the turn: never more than the parent offers, never `task` (depth 1),
//! never a question to the user. Every agent's system prompt carries the
//! session's project instructions (AGENTS.md), as the parent's does.
//!
//! Agents are also defined in Markdown, in the project's `.lathe/agents/`
//! (and the `[agent] extra_agent_dirs`, e.g. `.claude/agents`) and in
//! lathe's config directory (`~/.config/lathe/agents/`), with the field
//! names of Claude Code's subagent files so that users can copy theirs:
//!
//! ```text
//! ---
//! name: reviewer
//! description: Reviews a diff for bugs
//! tools: read_file, grep, shell     (or a YAML list; Claude's Read, Grep, Bash... too)
//! model: fast                       (a [models.<name>] of the config; else the session's)
//! ---
//! You review code. ...
//! ```
//!
//! Project agent files are untrusted workspace input, read through the one
//! reader for workspace files ([`authority::read_workspace_file`]): regular
//! files only (a FIFO is skipped, never opened for a blocking read), leading
//! inside the project, at most [`MAX_AGENT_BYTES`]; a file that is skipped is
//! named in a warning in the log. A project agent wins over a user agent of
//! the same name. What an agent file lists never grants a tool: the turn
//! still offers only the tools the parent has, and the session's mode
//! judges every call.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::front_matter;
use crate::model::ModelClient;
use crate::platform::authority::{self, Area};
use crate::prompt::Instructions;
use crate::tools::Tool;

/// Largest agent file read; a system prompt has no use for more.
pub const MAX_AGENT_BYTES: u64 = 64 * 1024;

/// The agent a `task` call without `agent` runs.
pub const EXPLORE: &str = "explore";

const EXPLORE_PROMPT: &str = include_str!("../prompts/agents/explore.md");

/// Tools no sub-agent is given, whatever its definition lists: `task`
/// (a sub-agent cannot start sub-agents), the questions to the user (the
/// user does not see a sub-agent's conversation) and the session's plan.
pub const NEVER_DELEGATED: [Tool; 4] = [Tool::Task, Tool::AskUser, Tool::ExitPlanMode, Tool::UpdatePlan];

/// One agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    /// What `task`'s `agent` names it by.
    pub name: String,
    /// One line for the model choosing an agent.
    pub description: String,
    /// The tools it may use (lathe's names, or an MCP tool as
    /// `server__tool`); `None`: every tool the parent has.
    pub tools: Option<Vec<String>>,
    /// A configured model (`[models.<name>]`) it runs on, instead of the parent's.
    pub model: Option<String>,
    /// Its system prompt.
    pub prompt: String,
}

impl AgentSpec {
    /// The built-in explorer.
    pub fn explore() -> AgentSpec {
        AgentSpec {
            name: EXPLORE.to_owned(),
            description: "reads and searches; changes nothing (the default)".to_owned(),
            tools: Some(
                [Tool::ReadFile, Tool::ListDirectory, Tool::Glob, Tool::Grep, Tool::Fetch]
                    .iter()
                    .map(|tool| tool.name().to_owned())
                    .collect(),
            ),
            model: None,
            prompt: EXPLORE_PROMPT.trim().to_owned(),
        }
    }

    /// Whether it may use the tool named `name` (before the parent's
    /// offer and [`NEVER_DELEGATED`] are applied).
    pub fn allows(&self, name: &str) -> bool {
        if NEVER_DELEGATED.iter().any(|tool| tool.name() == name) {
            return false;
        }
        match &self.tools {
            None => true,
            Some(tools) => tools.iter().any(|tool| tool == name),
        }
    }
}

/// The agents of a session, sorted by name (so the `task` tool's
/// description is byte-stable), with the models those that name one run on.
#[derive(Debug, Clone)]
pub struct Agents {
    agents: Vec<AgentSpec>,
    /// Agent name -> the client of the model it names.
    clients: Vec<(String, Arc<ModelClient>)>,
    /// The session's project instructions (AGENTS.md...), which every
    /// agent's system prompt carries as the parent's does.
    instructions: Arc<[Instructions]>,
}

impl Default for Agents {
    fn default() -> Self {
        Agents::builtin()
    }
}

impl Agents {
    /// Only the built-in agents.
    pub fn builtin() -> Agents {
        Agents { agents: vec![AgentSpec::explore()], clients: Vec::new(), instructions: Arc::from([]) }
    }

    /// Whether these are only the built-in agents (the `task` tool's
    /// description is then the one built once for every session).
    pub fn is_builtin(&self) -> bool {
        self.agents == [AgentSpec::explore()]
    }

    /// Runs agent `name` on `client` (the model its file names).
    pub fn set_client(&mut self, name: &str, client: Arc<ModelClient>) {
        self.clients.retain(|(known, _)| known != name);
        self.clients.push((name.to_owned(), client));
    }

    /// Gives every agent the session's project instructions.
    pub fn set_instructions(&mut self, instructions: &[Instructions]) {
        self.instructions = Arc::from(instructions);
    }

    /// The session's project instructions, for an agent's system prompt.
    pub fn instructions(&self) -> &[Instructions] {
        &self.instructions
    }

    /// The model agent `name` runs on, when it names one of its own.
    pub fn client(&self, name: &str) -> Option<&ModelClient> {
        self.clients.iter().find(|(known, _)| known == name).map(|(_, client)| client.as_ref())
    }

    /// The built-in agents and `defined` ones; an agent defined earlier in
    /// `defined` wins over a later one and over a built-in of its name.
    pub fn with(defined: Vec<AgentSpec>) -> Agents {
        let mut agents: Vec<AgentSpec> = Vec::new();
        for agent in defined.into_iter().chain(Agents::builtin().agents) {
            if !agents.iter().any(|known| known.name == agent.name) {
                agents.push(agent);
            }
        }
        agents.sort_by(|a, b| a.name.cmp(&b.name));
        Agents { agents, clients: Vec::new(), instructions: Arc::from([]) }
    }

    /// The agent named `name`.
    pub fn get(&self, name: &str) -> Option<&AgentSpec> {
        self.agents.iter().find(|agent| agent.name == name)
    }

    /// Every agent, by name.
    pub fn all(&self) -> &[AgentSpec] {
        &self.agents
    }

    /// Their names, comma-separated (for a message to the model).
    pub fn names(&self) -> String {
        self.agents.iter().map(|agent| agent.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// One line per agent, `- name: description`, as the `task` tool's
    /// description lists them.
    pub fn listing(&self) -> String {
        self.agents
            .iter()
            .map(|agent| format!("- {}: {}", agent.name, agent.description.lines().next().unwrap_or_default().trim()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The agents defined in Markdown for a session in `cwd`: the project's
/// (`.lathe/agents/`, then each of `extra_dirs`, relative to `cwd` or
/// absolute), then the user's (`<user_dir>/agents/`); the first of a name
/// wins. Blocking: it reads files.
pub fn defined(cwd: &Path, user_dir: Option<&Path>, extra_dirs: &[String]) -> Vec<AgentSpec> {
    let in_cwd = [cwd.to_path_buf()];
    let mut dirs: Vec<(PathBuf, Area<'_>)> = vec![(cwd.join(".lathe").join("agents"), Area::Within(&in_cwd))];
    for extra in extra_dirs {
        // A directory the user names is theirs; a project's is the project's.
        let dir = Path::new(extra);
        let area = if dir.is_absolute() { Area::Trusted } else { Area::Within(&in_cwd) };
        dirs.push((cwd.join(dir), area));
    }
    if let Some(user_dir) = user_dir {
        dirs.push((user_dir.join("agents"), Area::Trusted));
    }
    let mut found: Vec<AgentSpec> = Vec::new();
    for (dir, area) in dirs {
        for agent in agent_files(&dir, area) {
            if !found.iter().any(|known| known.name == agent.name) {
                found.push(agent);
            }
        }
    }
    found
}

/// The agent files of one directory, sorted by name.
fn agent_files(dir: &Path, area: Area<'_>) -> Vec<AgentSpec> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().and_then(|e| e.to_str()) == Some("md"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|path| {
            let stem = path.file_stem()?.to_str()?.to_owned();
            let text = match authority::read_workspace_file(&path, area, MAX_AGENT_BYTES) {
                Ok(Some(read)) if read.omitted == 0 => read.text,
                Ok(Some(_)) => {
                    tracing::warn!(path = %path.display(), limit = MAX_AGENT_BYTES, "skipping an agent file over the size limit");
                    return None;
                }
                Ok(None) => return None,
                Err(refusal) => {
                    tracing::warn!(path = %path.display(), reason = %refusal, "skipping an agent file");
                    return None;
                }
            };
            match parse_agent_file(&stem, &text) {
                Ok(agent) => Some(agent),
                Err(why) => {
                    tracing::warn!(path = %path.display(), reason = %why, "skipping an agent file");
                    None
                }
            }
        })
        .collect()
}

/// Whether `name` may name an agent: what a model can type, one word.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Parses an agent file: front matter (`name`, `description`, `tools`,
/// `model`; read by [`front_matter`]), then the system prompt. `stem` is
/// the name when the front matter gives none.
pub fn parse_agent_file(stem: &str, text: &str) -> Result<AgentSpec, String> {
    let (front, body) = front_matter::split(text)?;
    let name = front.get("name").unwrap_or(stem).to_owned();
    if !valid_name(&name) {
        return Err(format!("the name {name:?} is not a word of letters, digits, - and _"));
    }
    let description = front.get("description").filter(|d| !d.trim().is_empty()).ok_or("no description")?;
    let prompt = body.trim().to_owned();
    if prompt.is_empty() {
        return Err("no system prompt after the front matter".to_owned());
    }
    let tools = front.list("tools").map(|tools| tools.iter().map(|tool| lathe_tool_name(tool)).collect());
    let model = front.get("model").filter(|m| !m.is_empty() && *m != "inherit").map(str::to_owned);
    Ok(AgentSpec { name, description: description.trim().to_owned(), tools, model, prompt })
}

/// lathe's name for a tool an agent file lists: Claude Code's names map to
/// lathe's tools that do the same, and its MCP tools (`mcp__server__tool`)
/// to lathe's (`server__tool`); anything else is kept as written (a lathe
/// tool, or an MCP tool as `server__tool`).
fn lathe_tool_name(tool: &str) -> String {
    if let Some(mcp) = tool.strip_prefix("mcp__").filter(|rest| rest.contains("__")) {
        return mcp.to_owned();
    }
    let lathe = match tool {
        "Read" => Tool::ReadFile.name(),
        "Write" => Tool::WriteFile.name(),
        "Edit" | "MultiEdit" => Tool::EditFile.name(),
        "LS" => Tool::ListDirectory.name(),
        "Glob" => Tool::Glob.name(),
        "Grep" => Tool::Grep.name(),
        "Bash" => Tool::Shell.name(),
        "WebFetch" => Tool::Fetch.name(),
        "TodoWrite" => Tool::UpdatePlan.name(),
        "Task" => Tool::Task.name(),
        "AskUserQuestion" => Tool::AskUser.name(),
        other => other,
    };
    lathe.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explore_reads_and_never_delegates() {
        let explore = AgentSpec::explore();
        for allowed in ["read_file", "list_directory", "glob", "grep", "fetch"] {
            assert!(explore.allows(allowed), "{allowed}");
        }
        for refused in ["write_file", "edit_file", "shell", "task", "ask_user", "update_plan"] {
            assert!(!explore.allows(refused), "{refused}");
        }
        let everything = AgentSpec { tools: None, ..AgentSpec::explore() };
        assert!(everything.allows("write_file") && !everything.allows("task"));
    }

    #[test]
    fn defined_agents_are_sorted_and_win_over_built_ins() {
        let mine =
            |name: &str| AgentSpec { name: name.to_owned(), description: format!("{name}'s"), ..AgentSpec::explore() };
        let agents = Agents::with(vec![mine("reviewer"), mine("explore"), mine("reviewer")]);
        assert_eq!(agents.names(), "explore, reviewer");
        assert_eq!(agents.get("explore").unwrap().description, "explore's");
        assert_eq!(agents.listing(), "- explore: explore's\n- reviewer: reviewer's");
    }
}

#[cfg(test)]
pub(crate) mod file_tests {
    use std::io::Write as _;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// The log lines `run` writes (at warn), with a subscriber of its own
    /// (the skills' tests use it too).
    pub(crate) fn warnings_of<T>(run: impl FnOnce() -> T) -> (T, String) {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let out = tracing::subscriber::with_default(subscriber, run);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        (out, text)
    }

    const REVIEWER: &str =
        "---\nname: reviewer\ndescription: Reviews a diff\ntools: Read, Grep, shell\nmodel: fast\n---\nYou review.\n";

    #[test]
    fn agent_files_in_claude_codes_format() {
        let agent = parse_agent_file("file", REVIEWER).unwrap();
        assert_eq!(agent.name, "reviewer");
        assert_eq!(agent.description, "Reviews a diff");
        assert_eq!(agent.tools.as_deref(), Some(&["read_file".to_owned(), "grep".to_owned(), "shell".to_owned()][..]));
        assert_eq!(agent.model.as_deref(), Some("fast"));
        assert_eq!(agent.prompt, "You review.");
        let listed = parse_agent_file(
            "lister",
            "---\ndescription: \"Lists\"\ntools:\n  - glob\n  - files__search\nmodel: inherit\n---\nList.",
        )
        .unwrap();
        assert_eq!(listed.name, "lister", "the file's name when the front matter has none");
        assert_eq!(listed.tools.as_deref(), Some(&["glob".to_owned(), "files__search".to_owned()][..]));
        let claude = parse_agent_file(
            "claude",
            "---\ndescription: d\ntools: mcp__github__create_issue, TodoWrite, Task, AskUserQuestion, mcp__odd\n---\nC.",
        )
        .unwrap();
        assert_eq!(
            claude.tools.as_deref(),
            Some(&["github__create_issue", "update_plan", "task", "ask_user", "mcp__odd"].map(str::to_owned)[..]),
            "Claude Code's MCP names are lathe's server__tool"
        );
        assert_eq!(listed.model, None, "inherit: the session's model");
        let all = parse_agent_file("all", "---\ndescription: d\n---\nAnything.").unwrap();
        assert_eq!(all.tools, None);
        for broken in [
            "no front matter",
            "---\ndescription: d\nYou review.",
            "---\nname: two words\ndescription: d\n---\nx",
            "---\nname: x\n---\nno description",
            "---\ndescription: d\n---\n   ",
            "---\ndescription: d\nnot a key value line\n---\nx",
        ] {
            assert!(parse_agent_file("x", broken).is_err(), "{broken:?}");
        }
    }

    /// A project agent file linking outside the project, a 50 MB one, a
    /// FIFO and one with broken front matter are skipped with a warning,
    /// without blocking; the good ones are read, the project's first.
    #[test]
    fn untrusted_agent_files_are_skipped_with_a_warning() {
        let home = tempfile::tempdir().unwrap();
        let project = home.path().join("project");
        let agents = project.join(".lathe/agents");
        let user = home.path().join("config");
        std::fs::create_dir_all(&agents).unwrap();
        std::fs::create_dir_all(user.join("agents")).unwrap();
        std::fs::create_dir_all(project.join(".claude/agents")).unwrap();
        std::fs::write(agents.join("reviewer.md"), REVIEWER).unwrap();
        std::fs::write(project.join(".claude/agents/copied.md"), "---\nname: copied\ndescription: c\n---\nC.").unwrap();
        std::fs::write(home.path().join("secret.md"), "---\nname: leak\ndescription: l\n---\nL.").unwrap();
        if !crate::platform::testing::symlink(home.path().join("secret.md"), agents.join("leak.md")) {
            return;
        }
        let big = std::fs::File::create(agents.join("big.md")).unwrap();
        big.set_len(50 * 1024 * 1024).unwrap();
        let mut head = &big;
        head.write_all(b"---\nname: big\ndescription: b\n---\n").unwrap();
        if !crate::platform::testing::fifo(&agents.join("fifo.md")) {
            return;
        }
        std::fs::write(agents.join("broken.md"), "---\nname: broken\n---\nno description").unwrap();
        std::fs::write(user.join("agents/reviewer.md"), "---\ndescription: the user's\n---\nU.").unwrap();
        std::fs::write(user.join("agents/mine.md"), "---\ndescription: the user's own\n---\nM.").unwrap();

        let (found, warnings) = warnings_of(|| defined(&project, Some(&user), &[".claude/agents".to_owned()]));

        let names: Vec<&str> = found.iter().map(|agent| agent.name.as_str()).collect();
        assert_eq!(names, ["reviewer", "copied", "mine"], "{warnings}");
        assert_eq!(found[0].description, "Reviews a diff", "the project's wins");
        for skipped in ["leak.md", "big.md", "fifo.md", "broken.md"] {
            assert!(warnings.contains(skipped), "{skipped} is named in a warning: {warnings}");
        }
        assert!(warnings.contains("outside the project"), "{warnings}");
    }
}
