//! The system prompt: the prose in `prompts/*.md` (compiled in, reviewed like
//! code) with the session's environment filled in, followed by the project's
//! own instructions for agents.
//!
//! Instructions are read from, in this order: lathe's user-level file
//! (`~/.config/lathe/AGENTS.md`), then from the repository root (the nearest
//! ancestor of the cwd holding `.git`; the cwd itself when there is none)
//! down to the cwd, in each directory `AGENTS.md`, or `CLAUDE.md` when that
//! directory has no `AGENTS.md`. Each file is capped at
//! [`MAX_INSTRUCTIONS_BYTES`].
//!
//! The workspace is untrusted, so its instruction files are read through the
//! one reader for such files ([`authority::read_workspace_file`]): regular
//! files only (a FIFO or a device never blocks or floods), at most the cap
//! read, and the final target must lie inside the cwd for a file in the cwd,
//! inside the repository root for one above it. An `AGENTS.md` that links to
//! `/proc/self/environ` or any file elsewhere is left out with a warning in
//! the log naming it and why. lathe's own user-level file is the user's: it
//! may lead anywhere, but is type- and size-checked too.
//!
//! When the session has skills ([`crate::skills`]), one line per skill
//! follows the environment, after the intro of `prompts/skills.md`; with
//! none, nothing is added.
//!
//! The prompt is built once per session and kept, so that every request of a
//! session starts with the same bytes (provider prompt caches hit) and nothing
//! volatile, like the time of day, changes between requests. It is built in
//! both profiles ([`PromptProfile`]): the standard prompt, and the lean one
//! for models with a small context window (`prompts/lean/system.md`, with the
//! same environment and instructions); the model in use picks one. This
//! module knows nothing of ACP or the model API.

use std::path::{Path, PathBuf};

use crate::config::PromptProfile;
use crate::platform::authority::{self, Area};
use crate::skills::Skills;

const SYSTEM: &str = include_str!("../prompts/system.md");
const LEAN_SYSTEM: &str = include_str!("../prompts/lean/system.md");
const ENVIRONMENT: &str = include_str!("../prompts/environment.md");
const SANDBOX: &str = include_str!("../prompts/sandbox.md");
const SHELL: &str = include_str!("../prompts/shell.md");

/// What the prompt says about where the agent runs.
#[derive(Debug, Clone)]
pub struct Environment<'a> {
    /// The session's working directory.
    pub cwd: &'a Path,
    /// The operating system, e.g. `linux`.
    pub os: &'a str,
    /// The day the session started, e.g. `Wed, 02 Dec 2026`.
    pub date: &'a str,
    /// What the command sandbox is, one sentence (see
    /// `crate::platform::sandbox::SessionSandbox::describe_for_model`); `None` when
    /// commands run without one.
    pub sandbox: Option<&'a str>,
    /// Which shell commands run in, when it is not `sh` (see
    /// `crate::platform::shell::Shell::for_prompt`): "PowerShell 7 (`pwsh`):
    /// write PowerShell".
    pub shell: Option<&'a str>,
}

impl Environment<'_> {
    /// Today's date, day precision, in the form the prompt uses.
    pub fn today() -> String {
        let stamp = httpdate::fmt_http_date(std::time::SystemTime::now());
        // "Wed, 02 Dec 2026 15:40:00 GMT" -> "Wed, 02 Dec 2026"
        stamp.get(..16).unwrap_or(&stamp).to_owned()
    }
}

/// A session's system prompt in each profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemPrompt {
    standard: String,
    lean: String,
}

impl SystemPrompt {
    /// The prompt for `profile`.
    pub fn get(&self, profile: PromptProfile) -> &str {
        match profile {
            PromptProfile::Standard => &self.standard,
            PromptProfile::Lean => &self.lean,
        }
    }
}

impl From<&str> for SystemPrompt {
    /// The same text in every profile.
    fn from(text: &str) -> Self {
        SystemPrompt { standard: text.to_owned(), lean: text.to_owned() }
    }
}

/// A system prompt the client gave for a session (ACP's `systemPrompt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientPrompt {
    /// `override`: it replaces lathe's own instructions (`prompts/system.md`,
    /// or the lean one), and the environment and the project's instruction
    /// files follow it as usual. Else (`append`) it follows everything.
    pub replace: bool,
    /// Its text.
    pub text: String,
}

/// The complete system prompt for a session, in both profiles.
pub fn system_prompt(environment: &Environment<'_>, instructions: &[Instructions]) -> SystemPrompt {
    system_prompt_with(environment, instructions, &Skills::default(), None)
}

/// [`system_prompt`] with the session's skills listed (nothing is added when
/// there are none) and the client's own prompt, appended or replacing
/// lathe's instructions (see [`ClientPrompt`]). Built once per session, like
/// the rest: every request of the session starts with the same bytes.
pub fn system_prompt_with(
    environment: &Environment<'_>,
    instructions: &[Instructions],
    skills: &Skills,
    client: Option<&ClientPrompt>,
) -> SystemPrompt {
    let rest = after_instructions(environment, skills.listing().as_deref(), instructions);
    let (standard, lean) = (SYSTEM.trim_end(), LEAN_SYSTEM.trim_end());
    match client {
        None => SystemPrompt { standard: format!("{standard}{rest}"), lean: format!("{lean}{rest}") },
        Some(ClientPrompt { replace: false, text }) => {
            let text = text.trim();
            SystemPrompt { standard: format!("{standard}{rest}\n\n{text}"), lean: format!("{lean}{rest}\n\n{text}") }
        }
        Some(ClientPrompt { replace: true, text }) => {
            let text = text.trim();
            SystemPrompt { standard: format!("{text}{rest}"), lean: format!("{text}{rest}") }
        }
    }
}

const SUBAGENT: &str = include_str!("../prompts/subagent.md");

/// The system prompt of a sub-agent: what a sub-agent is, its agent's
/// prompt, the environment and the session's project instructions (the
/// files the parent's prompt has, as the parent read them: a sub-agent
/// works in the same project by the same rules, as Claude Code's get
/// CLAUDE.md and codex's get AGENTS.md).
pub fn subagent_prompt(
    agent_prompt: &str,
    environment: &Environment<'_>,
    instructions: &[Instructions],
) -> SystemPrompt {
    let rest = after_instructions(environment, None, instructions);
    let text = format!("{}\n\n{}{rest}", SUBAGENT.trim_end(), agent_prompt.trim());
    SystemPrompt::from(text.as_str())
}

/// What follows lathe's instructions: the environment, the skills (their
/// listing, when there are any) and the project's files.
fn after_instructions(environment: &Environment<'_>, skills: Option<&str>, instructions: &[Instructions]) -> String {
    let cwd = environment.cwd.display().to_string();
    let filled = ENVIRONMENT.replace("{cwd}", &cwd).replace("{os}", environment.os).replace("{date}", environment.date);
    let mut rest = format!("\n{}", filled.trim_end());
    if let Some(shell) = environment.shell {
        rest.push('\n');
        rest.push_str(SHELL.replace("{shell}", shell).trim_end());
    }
    if let Some(sandbox) = environment.sandbox {
        // One more line of the environment: the prefix has a token budget.
        rest.push('\n');
        rest.push_str(SANDBOX.replace("{sandbox}", sandbox).trim_end());
    }
    if let Some(skills) = skills {
        rest.push_str("\n\n");
        rest.push_str(skills);
    }
    if !instructions.is_empty() {
        rest.push_str("\n\n");
        rest.push_str(INSTRUCTIONS.trim_end());
        for file in instructions {
            rest.push_str(&format!("\n\n## {}\n\n{}", file.path.display(), file.text.trim()));
        }
    }
    rest
}

const INSTRUCTIONS: &str = include_str!("../prompts/instructions.md");

/// Largest instructions file included, in bytes; the rest is cut with a note.
pub const MAX_INSTRUCTIONS_BYTES: usize = 32 * 1024;

/// One instructions file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instructions {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its text (capped).
    pub text: String,
}

/// The instructions files that apply to a session in `cwd` (see the module doc).
pub fn project_instructions(cwd: &Path, user_dir: Option<&Path>) -> Vec<Instructions> {
    let mut files = Vec::new();
    if let Some(dir) = user_dir
        && let Some(file) = read_instructions(&dir.join("AGENTS.md"), Area::Trusted)
    {
        files.push(file);
    }
    let root = cwd.ancestors().find(|dir| dir.join(".git").exists()).unwrap_or(cwd);
    let mut dirs: Vec<&Path> = cwd.ancestors().take_while(|dir| dir.starts_with(root)).collect();
    dirs.reverse();
    let (in_cwd, in_repository) = ([cwd.to_path_buf()], [root.to_path_buf()]);
    for dir in dirs {
        // The checkout is untrusted: a file in the cwd may lead only inside
        // it (not up into a home directory that happens to be a repository).
        let area = Area::Within(if dir == cwd { &in_cwd } else { &in_repository });
        if let Some(file) =
            read_instructions(&dir.join("AGENTS.md"), area).or_else(|| read_instructions(&dir.join("CLAUDE.md"), area))
        {
            files.push(file);
        }
    }
    files
}

fn read_instructions(path: &Path, area: Area<'_>) -> Option<Instructions> {
    let read = match authority::read_workspace_file(path, area, MAX_INSTRUCTIONS_BYTES as u64) {
        Ok(read) => read?,
        Err(refusal) => {
            tracing::warn!(path = %path.display(), reason = %refusal, "instructions file left out of the system prompt");
            return None;
        }
    };
    let mut text = read.text;
    if read.omitted > 0 {
        text.push_str(&format!("\n\n[... {} more bytes of this file not included ...]", read.omitted));
    }
    (!text.trim().is_empty()).then(|| Instructions { path: path.to_path_buf(), text })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_the_environment_and_is_deterministic() {
        let env = Environment {
            cwd: Path::new("/work/project"),
            os: "linux",
            date: "Wed, 02 Dec 2026",
            sandbox: None,
            shell: None,
        };
        let prompts = system_prompt(&env, &[]);
        for profile in [PromptProfile::Standard, PromptProfile::Lean] {
            let prompt = prompts.get(profile);
            assert!(prompt.starts_with("You are lathe"));
            assert!(prompt.contains("Working directory (the project root for this session): /work/project"));
            assert!(prompt.contains("Operating system: linux"));
            assert!(!prompt.contains('{'), "every placeholder is filled: {prompt}");
        }
        assert!(prompts.get(PromptProfile::Lean).len() < prompts.get(PromptProfile::Standard).len() / 2);
        assert_eq!(prompts, system_prompt(&env, &[]));
    }

    /// Issue 25: the sandbox's description, when there is one, is a line of
    /// the environment in both profiles.
    #[test]
    fn the_sandbox_is_described_when_there_is_one() {
        let described = "Shell sandbox: no network, credentials or git hooks.";
        let env = Environment { cwd: Path::new("/p"), os: "linux", date: "d", sandbox: Some(described), shell: None };
        let prompts = system_prompt(&env, &[]);
        for profile in [PromptProfile::Standard, PromptProfile::Lean] {
            let prompt = prompts.get(profile);
            assert!(prompt.contains(&format!("\n- {described}")), "{prompt}");
        }
        let none = system_prompt(&Environment { sandbox: None, ..env }, &[]);
        assert!(!none.get(PromptProfile::Standard).contains("sandbox"));
    }

    #[test]
    fn instructions_from_the_user_dir_and_the_repository_down_to_the_cwd() {
        let home = tempfile::tempdir().unwrap();
        let user = home.path().join("config");
        let repo = home.path().join("repo");
        let cwd = repo.join("crates/core");
        std::fs::create_dir_all(&user).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::write(home.path().join("AGENTS.md"), "outside the repository: not read").unwrap();
        std::fs::write(user.join("AGENTS.md"), "user rules").unwrap();
        std::fs::write(repo.join("AGENTS.md"), "repo rules").unwrap();
        std::fs::write(repo.join("CLAUDE.md"), "ignored: AGENTS.md wins").unwrap();
        std::fs::write(repo.join("crates/CLAUDE.md"), "crates rules").unwrap();
        std::fs::write(cwd.join("AGENTS.md"), "core rules").unwrap();
        let files = project_instructions(&cwd, Some(&user));
        let texts: Vec<&str> = files.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts, ["user rules", "repo rules", "crates rules", "core rules"]);

        let env = Environment { cwd: &cwd, os: "linux", date: "d", sandbox: None, shell: None };
        let prompts = system_prompt(&env, &files);
        for profile in [PromptProfile::Standard, PromptProfile::Lean] {
            let prompt = prompts.get(profile);
            assert!(prompt.contains("repo rules") && prompt.find("repo rules") < prompt.find("core rules"));
            assert!(prompt.contains(&format!("## {}", repo.join("AGENTS.md").display())));
        }
    }

    #[test]
    fn without_a_repository_only_the_cwd_counts() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().join("project");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::write(dir.path().join("AGENTS.md"), "parent: not read").unwrap();
        std::fs::write(cwd.join("CLAUDE.md"), "claude rules").unwrap();
        let texts: Vec<String> = project_instructions(&cwd, None).into_iter().map(|f| f.text).collect();
        assert_eq!(texts, ["claude rules"]);
    }

    /// The client's prompt follows lathe's (append), or takes the place of
    /// lathe's instructions, before the environment and the project's files
    /// (override); the same bytes every time.
    #[test]
    fn the_clients_prompt_is_appended_or_replaces_the_instructions() {
        let env = Environment { cwd: Path::new("/work/project"), os: "linux", date: "d", sandbox: None, shell: None };
        let files = [Instructions { path: PathBuf::from("/work/project/AGENTS.md"), text: "project rules".into() }];
        let own = system_prompt(&env, &files);
        let append = ClientPrompt { replace: false, text: "Answer in French.\n".into() };
        let appended = system_prompt_with(&env, &files, &Skills::default(), Some(&append));
        for profile in [PromptProfile::Standard, PromptProfile::Lean] {
            assert_eq!(appended.get(profile), format!("{}\n\nAnswer in French.", own.get(profile)));
        }
        let replace = ClientPrompt { replace: true, text: "You are a reviewer.".into() };
        let replaced = system_prompt_with(&env, &files, &Skills::default(), Some(&replace));
        for profile in [PromptProfile::Standard, PromptProfile::Lean] {
            let prompt = replaced.get(profile);
            assert!(prompt.starts_with("You are a reviewer.\n"), "{prompt}");
            assert!(!prompt.contains("You are lathe"));
            assert!(prompt.contains("Working directory (the project root for this session): /work/project"));
            assert!(prompt.ends_with("project rules"));
        }
        assert_eq!(replaced, system_prompt_with(&env, &files, &Skills::default(), Some(&replace)));
    }

    /// Skills are listed after the environment, before the project's
    /// files, in both profiles; with none the prompt is exactly as before.
    #[test]
    fn skills_are_listed_only_when_there_are_some() {
        let env = Environment { cwd: Path::new("/p"), os: "linux", date: "d", sandbox: None, shell: None };
        let files = [Instructions { path: PathBuf::from("/p/AGENTS.md"), text: "project rules".into() }];
        let skill = |name: &str| crate::skills::Skill {
            name: name.to_owned(),
            description: format!("{name}s things"),
            path: PathBuf::from(format!("/p/.lathe/skills/{name}/SKILL.md")),
            inside: Some(PathBuf::from("/p")),
        };
        let none = system_prompt_with(&env, &files, &Skills::default(), None);
        assert_eq!(none, system_prompt(&env, &files));
        let skills = Skills::new(vec![skill("zip"), skill("audit")]);
        let listed = system_prompt_with(&env, &files, &skills, None);
        for profile in [PromptProfile::Standard, PromptProfile::Lean] {
            let prompt = listed.get(profile);
            let (audit, zip) =
                (prompt.find("- audit: audits things (.lathe/skills/audit/SKILL.md)"), prompt.find("- zip:"));
            assert!(audit.is_some() && audit < zip, "{prompt}");
            assert!(prompt.find("Operating system") < audit && zip < prompt.find("project rules"), "{prompt}");
            assert_eq!(prompt.replace(&format!("\n\n{}", skills.listing().unwrap()), ""), none.get(profile));
        }
    }

    #[test]
    fn today_has_day_precision() {
        let today = Environment::today();
        assert_eq!(today.len(), 16, "{today}");
    }
}
