//! Permission rules that outlast the session: "always allow … for this
//! project" and "… in every project" answers, kept in files the user can
//! read and edit, never in the workspace.
//!
//! - A project's rules are in lathe's data directory, in
//!   `projects/<name>-<hash>/permissions.toml`, keyed by the project root's
//!   real path (the repository root, the nearest ancestor of the cwd with a
//!   `.git`, else the cwd; links resolved). The file names its project
//!   (`project = "/real/path"`) and is ignored when it names another.
//! - The user's rules are `permissions.toml` in lathe's config directory
//!   (`~/.config/lathe/permissions.toml`).
//! - A `.lathe/permissions.toml` in a repository grants nothing: a checkout
//!   cannot grant itself anything. lathe says so once per project and how to
//!   review and import it (`lathe permissions import`).
//!
//! A file is TOML, one table per rule, in the kinds an answer can give and
//! nothing wider (see [`crate::permission::Rule`]):
//!
//! ```toml
//! [[allow]]                # exactly this command, run in this directory
//! command = "cargo test --all"
//! cwd = "/home/you/project"
//!
//! [[allow]]                # a known read-only program, on paths inside the project
//! program = "git log"
//!
//! [[allow]]                # file edits (or "read": reading files), inside the project
//! files = "edit"           # outside = true: outside it
//!
//! [[allow]]                # one tool of one MCP server
//! mcp_server = "docs"
//! mcp_tool = "publish"
//!
//! [[allow]]                # fetches from one host (and port)
//! fetch = "docs.rs"
//!
//! [[reject]]               # any command starting with these words
//! program = "git push"
//! ```
//!
//! It is checked when it is read: a line that is not TOML, or a table that is
//! not one of these rules (an unknown key, a program that is not read-only, a
//! command with `;` or inline code, a relative directory), is skipped with a
//! warning naming the file and the line, and the other rules hold. lathe
//! appends what it remembers (with a comment naming the rule) and removes
//! rules by cutting their text out, so the rest of a file, comments
//! included, stays as the user left it. Every write takes the file's lock
//! (`permissions.toml.lock`, `crate::platform::files::lock`), reads the file
//! again and replaces it atomically (a private temporary file, then rename):
//! files are private in private directories (`crate::platform::private`:
//! `0600` in `0700` on Unix).

use std::fs::File;
use std::io::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::permission::{Remembered, Rule, RuleSet, Scope};
use crate::platform;
use crate::present::text::{Lines, shown};
use crate::tools::Tool;
use crate::tools::shell::{self, CommandRule};

/// The rule file's name, in a project's folder and in the config directory.
pub const RULES_FILE: &str = "permissions.toml";

/// Where a repository's own rule file would be; it is never read as rules.
pub const REPOSITORY_RULES: &str = ".lathe/permissions.toml";

/// Largest rule file read, in bytes; the rest is left out with a warning.
const MAX_RULES_BYTES: u64 = 1024 * 1024;

/// Why a rule file could not be written or changed.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The disk said no.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> RulesError + '_ {
    move |source| RulesError::Io { path: path.to_path_buf(), source }
}

/// The project a session in `cwd` belongs to: the nearest ancestor with a
/// `.git` (the repository root), else `cwd`, as its real path (links
/// resolved; as given when it cannot be resolved). Blocking.
pub fn project_root(cwd: &Path) -> PathBuf {
    let root = cwd.ancestors().find(|dir| dir.join(".git").exists()).unwrap_or(cwd);
    crate::platform::paths::canonical(root).unwrap_or_else(|_| root.to_path_buf())
}

/// The folder in lathe's data directory where what lathe keeps about the
/// project at `root` (its rules, the hooks it was trusted to run) lives:
/// `projects/<last component>-<16 hex digits of the SHA-256 of the path>`.
pub fn project_dir(data_dir: &Path, root: &Path) -> PathBuf {
    // The path's bytes as the system holds them (on Unix, its bytes as is).
    let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
    let hash: String = digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect();
    let name: String = root
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' })
        .take(40)
        .collect();
    let name = if name.is_empty() || name.starts_with('.') { format!("_{name}") } else { name };
    data_dir.join("projects").join(format!("{name}-{hash}"))
}

/// One rule as a file holds it: an allow or a reject, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// An "always allow" (else an "always reject").
    pub allow: bool,
    /// The rule.
    pub rule: Rule,
    /// Its line in the file (1-based).
    pub line: usize,
    /// Its bytes in the file (with the comment lines right above it).
    span: Range<usize>,
}

/// A rule file as read: its valid rules, and what was skipped and why.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// The rules, in file order.
    pub entries: Vec<Entry>,
    /// One line per skipped line or table: `file:line: why`.
    pub warnings: Vec<String>,
    /// The file's text (for changing it).
    text: String,
}

impl Loaded {
    /// The rules as the policy holds them.
    pub fn rules(&self) -> RuleSet {
        let mut set = RuleSet::default();
        for entry in &self.entries {
            let list = if entry.allow { &mut set.allowed } else { &mut set.rejected };
            if !list.contains(&entry.rule) {
                list.push(entry.rule.clone());
            }
        }
        set
    }
}

/// A rule table as written in a file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RuleToml {
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    files: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outside: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mcp_server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mcp_tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fetch: Option<String>,
}

/// A rule file's top level.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    project: Option<PathBuf>,
    #[serde(default)]
    allow: Vec<toml::Spanned<toml::Table>>,
    #[serde(default)]
    reject: Vec<toml::Spanned<toml::Table>>,
}

impl RuleToml {
    /// The rule this table names, or why it names none. `base` resolves a
    /// relative `cwd` (a repository's file); without it `cwd` must be absolute.
    fn to_rule(&self, allow: bool, base: Option<&Path>) -> Result<Rule, String> {
        let given: Vec<&str> = [
            self.command.as_ref().map(|_| "command"),
            self.program.as_ref().map(|_| "program"),
            self.files.as_ref().map(|_| "files"),
            self.mcp_server.as_ref().or(self.mcp_tool.as_ref()).map(|_| "mcp_server"),
            self.fetch.as_ref().map(|_| "fetch"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if given.len() != 1 {
            return Err(format!(
                "a rule names exactly one of command, program, files, mcp_server (with mcp_tool) or fetch (this one: {})",
                if given.is_empty() { "none".to_owned() } else { given.join(", ") }
            ));
        }
        let only = |allowed: &[&str]| {
            let extra: Vec<&str> = [
                self.cwd.as_ref().map(|_| "cwd"),
                self.outside.map(|_| "outside"),
                self.mcp_tool.as_ref().map(|_| "mcp_tool"),
            ]
            .into_iter()
            .flatten()
            .filter(|key| !allowed.contains(key))
            .collect();
            if extra.is_empty() {
                Ok(())
            } else {
                Err(format!("`{}` does not belong in this rule", extra.join("`, `")))
            }
        };
        if let Some(command) = &self.command {
            only(&["cwd"])?;
            let cwd = self.cwd.as_ref().ok_or("a command rule needs the directory it runs in (`cwd`)")?;
            let cwd = match base {
                Some(base) if cwd.is_relative() => base.join(cwd),
                _ if cwd.is_relative() => return Err("`cwd` must be an absolute path".to_owned()),
                _ => cwd.clone(),
            };
            let rule = if allow {
                shell::exact_rule(command, &cwd).ok_or(
                    "lathe never remembers a command with `;`, `&&`, `|`, redirections, substitutions, a leading \
                     variable or an interpreter's inline code",
                )?
            } else {
                if command.trim().is_empty() {
                    return Err("the command is empty".to_owned());
                }
                CommandRule::Exact { command: command.trim().to_owned(), cwd: crate::tools::paths::normalize(&cwd) }
            };
            return Ok(Rule::Command(rule));
        }
        if let Some(program) = &self.program {
            only(&[])?;
            return if allow {
                let rule = shell::read_only_rule(program).ok_or_else(|| {
                    format!(
                        "`{program}` is not a read-only program lathe knows (see README, \"Tools and permissions\")"
                    )
                })?;
                Ok(Rule::Command(rule))
            } else {
                shell::reject_prefix(program).map(Rule::CommandPrefix).ok_or_else(|| "not plain words".to_owned())
            };
        }
        if let Some(files) = &self.files {
            only(&["outside"])?;
            let tool = match files.as_str() {
                "read" => Tool::ReadFile,
                "edit" => Tool::EditFile,
                other => return Err(format!("files = \"{other}\": expected \"read\" or \"edit\"")),
            };
            let scope = if self.outside.unwrap_or(false) { Scope::Outside } else { Scope::Inside };
            return Ok(Rule::Tool(tool, scope));
        }
        if let Some(host) = &self.fetch {
            only(&[])?;
            let valid = !host.is_empty() && !host.chars().any(|c| c.is_whitespace() || c == '/' || c.is_control());
            return if valid { Ok(Rule::FetchHost(host.to_ascii_lowercase())) } else { Err("not a host".to_owned()) };
        }
        only(&["mcp_tool"])?;
        match (&self.mcp_server, &self.mcp_tool) {
            (Some(server), Some(tool)) if !server.is_empty() && !tool.is_empty() => {
                Ok(Rule::External { server: server.clone(), tool: tool.clone() })
            }
            _ => Err("an MCP rule needs both mcp_server and mcp_tool".to_owned()),
        }
    }

    /// The table for `rule`.
    fn of(rule: &Rule) -> RuleToml {
        let mut table = RuleToml::default();
        match rule {
            Rule::Command(CommandRule::Exact { command, cwd }) => {
                table.command = Some(command.clone());
                table.cwd = Some(cwd.clone());
            }
            Rule::Command(CommandRule::ReadOnly(words)) => table.program = Some(shell_words::join(words)),
            Rule::CommandPrefix(prefix) => table.program = Some(prefix.clone()),
            Rule::Tool(tool, scope) => {
                table.files = Some(if *tool == Tool::ReadFile { "read" } else { "edit" }.to_owned());
                if *scope == Scope::Outside {
                    table.outside = Some(true);
                }
            }
            Rule::External { server, tool } => {
                table.mcp_server = Some(server.clone());
                table.mcp_tool = Some(tool.clone());
            }
            Rule::FetchHost(host) => table.fetch = Some(host.clone()),
        }
        table
    }
}

/// The line (1-based) of byte `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())].iter().filter(|byte| **byte == b'\n').count() + 1
}

/// The bytes of the line holding byte `at`, without its newline.
fn line_range(text: &str, at: usize) -> Range<usize> {
    let at = at.min(text.len());
    let start = text[..at].rfind('\n').map_or(0, |newline| newline + 1);
    let end = text[at..].find('\n').map_or(text.len(), |newline| at + newline);
    start..end
}

/// Reads rules from `text` (the file `path`, for warnings). `project`: the
/// project root the file must name, if it names one. `base`: what a
/// relative `cwd` is relative to (a repository's file), else none may be.
pub fn parse(text: &str, path: &Path, project: Option<&Path>, base: Option<&Path>) -> Loaded {
    let shown_path = shown(&path.display().to_string(), Lines::One).into_owned();
    let mut warnings = Vec::new();
    // A line that is not TOML is blanked (offsets and line numbers stay) and
    // the rest read again; each pass blanks one more line.
    let mut working = text.to_owned();
    let file = loop {
        match toml::from_str::<FileToml>(&working) {
            Ok(file) => break Some(file),
            Err(err) => {
                let message = err.message().lines().next().unwrap_or("not TOML").to_owned();
                let Some(span) = err.span() else {
                    warnings.push(format!("{shown_path}: skipped the whole file: {}", shown(&message, Lines::One)));
                    break None;
                };
                let line = line_range(&working, span.start);
                if working[line.clone()].trim().is_empty() {
                    warnings.push(format!(
                        "{shown_path}:{}: skipped the rest of the file: {}",
                        line_of(&working, span.start),
                        shown(&message, Lines::One)
                    ));
                    break None;
                }
                warnings.push(format!(
                    "{shown_path}:{}: skipped this line: {}",
                    line_of(&working, span.start),
                    shown(&message, Lines::One)
                ));
                let blank = " ".repeat(line.len());
                working.replace_range(line, &blank);
            }
        }
    };
    let mut loaded = Loaded { entries: Vec::new(), warnings, text: text.to_owned() };
    let Some(file) = file else { return loaded };
    if let (Some(named), Some(expected)) = (&file.project, project)
        && named != expected
    {
        loaded.warnings.push(format!(
            "{shown_path}: skipped the whole file: it holds the rules of {}, not of {}",
            shown(&named.display().to_string(), Lines::One),
            shown(&expected.display().to_string(), Lines::One)
        ));
        return loaded;
    }
    for (allow, tables) in [(true, file.allow), (false, file.reject)] {
        for table in tables {
            let span = table.span();
            let line = line_of(text, span.start);
            let parsed = toml::Value::Table(table.into_inner())
                .try_into::<RuleToml>()
                .map_err(|err| err.message().lines().next().unwrap_or("not a rule").to_owned())
                .and_then(|rule| rule.to_rule(allow, base));
            match parsed {
                Ok(rule) => loaded.entries.push(Entry { allow, rule, line, span: with_comments(text, span) }),
                Err(why) => {
                    loaded.warnings.push(format!("{shown_path}:{line}: skipped this rule: {}", shown(&why, Lines::One)))
                }
            }
        }
    }
    loaded.entries.sort_by_key(|entry| entry.line);
    loaded
}

/// The text of the table whose `[[allow]]` or `[[reject]]` header is at
/// `header`: whole lines from the comment (and blank) lines right above the
/// header to the line before the next table's own comments, or the end.
fn with_comments(text: &str, header: Range<usize>) -> Range<usize> {
    let header = line_range(text, header.start);
    let after = |range: &Range<usize>| (range.end + 1).min(text.len());
    let mut end = text.len();
    let mut at = after(&header);
    while at < text.len() {
        let line = line_range(text, at);
        if text[line.clone()].trim_start().starts_with('[') {
            end = line.start;
            break;
        }
        at = after(&line);
    }
    // Comments right above the next header (and a blank line above them) are that table's.
    let next = comments_above(text, end);
    if next > after(&header) {
        end = next;
    }
    // Blank lines at its end stay: they part what was before from what follows.
    while end > after(&header) && text[line_range(text, end - 1)].trim().is_empty() {
        end = line_range(text, end - 1).start;
    }
    let start = comments_above(text, header.start);
    start..end
}

/// Where the comment lines right above the line starting at `at` begin,
/// with one blank line above them (`at` when there are none).
fn comments_above(text: &str, at: usize) -> usize {
    let mut start = at;
    while start > 0 {
        let above = line_range(text, start - 1);
        if !text[above.clone()].trim_start().starts_with('#') {
            break;
        }
        start = above.start;
    }
    if start > 0 && text[line_range(text, start - 1)].trim().is_empty() {
        start = line_range(text, start - 1).start;
    }
    start
}

/// Reads a rule file (see [`parse`]); a missing file holds no rules.
/// Blocking.
pub fn load(path: &Path, project: Option<&Path>) -> Loaded {
    match read_capped(path) {
        Ok(Some((text, omitted))) => {
            let mut loaded = parse(&text, path, project, None);
            if omitted > 0 {
                loaded.warnings.push(format!(
                    "{}: only its first {MAX_RULES_BYTES} bytes were read",
                    shown(&path.display().to_string(), Lines::One)
                ));
            }
            loaded
        }
        Ok(None) => Loaded::default(),
        Err(err) => Loaded {
            warnings: vec![format!("{}: cannot read it: {err}", shown(&path.display().to_string(), Lines::One))],
            ..Loaded::default()
        },
    }
}

/// A file of lathe's own (the data or config directory): regular, capped.
fn read_capped(path: &Path) -> std::io::Result<Option<(String, u64)>> {
    use std::io::Read as _;
    let file = match platform::files::open_read_nonblocking(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_RULES_BYTES).read_to_end(&mut bytes)?;
    let omitted = metadata.len().saturating_sub(bytes.len() as u64);
    Ok(Some((String::from_utf8_lossy(&bytes).into_owned(), omitted)))
}

/// The text a rule is written as: a comment naming it, then its table.
pub fn render(allow: bool, rule: &Rule) -> String {
    let verb = if allow { "Always allow" } else { "Always reject" };
    let described = shown(&rule.describe(), Lines::One).into_owned();
    let table = toml::to_string(&RuleToml::of(rule)).unwrap_or_default();
    format!("\n# {verb} {described}\n[[{}]]\n{table}", if allow { "allow" } else { "reject" })
}

/// The first lines of a new project file.
fn project_header(root: &Path) -> String {
    let root_toml = toml::Value::String(root.to_string_lossy().into_owned()).to_string();
    format!(
        "# Permission rules lathe keeps for the project at {}:\n\
         # [[allow]] tables are \"always allow\" answers, [[reject]] tables \"always reject\" ones.\n\
         # You may edit them; `lathe permissions list` shows them and `lathe permissions rm` removes one.\n\
         project = {root_toml}\n",
        shown(&root.display().to_string(), Lines::One)
    )
}

/// The first lines of a new user file.
const USER_HEADER: &str = "# Permission rules lathe keeps for every project:\n\
# [[allow]] tables are \"always allow\" answers, [[reject]] tables \"always reject\" ones.\n\
# You may edit them; `lathe permissions list` shows them and `lathe permissions rm` removes one.\n";

/// Replaces `path` with `bytes` atomically: a private (`0600`) temporary
/// file beside it, then rename. The directory is created (private) first.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().ok_or_else(|| std::io::Error::other("no parent directory"))?;
    platform::private::create_dir(dir)?;
    // tempfile creates its files 0600, and the rename keeps that.
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|err| err.error)?;
    Ok(())
}

/// Holds `<path>.lock` (exclusive: `platform::files::lock`) while it lives: every change of
/// a file lathe keeps (read, change, replace) runs under it, so two lathe
/// processes never lose each other's changes.
pub struct FileLock(#[allow(dead_code)] File);

impl FileLock {
    /// Waits for the lock of `path`.
    pub fn take(path: &Path) -> std::io::Result<FileLock> {
        let mut name = path.as_os_str().to_owned();
        name.push(".lock");
        if let Some(dir) = path.parent() {
            platform::private::create_dir(dir)?;
        }
        let file = platform::private::open_rw(&PathBuf::from(name))?;
        platform::files::lock(&file, true)?;
        Ok(FileLock(file))
    }
}

/// One rule file and what it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleFile {
    /// The file.
    pub path: PathBuf,
    /// The project root it is for; `None` for the user's file.
    pub project: Option<PathBuf>,
}

impl RuleFile {
    /// The rules of the project at `root`, in `data_dir`.
    pub fn project(data_dir: &Path, root: &Path) -> RuleFile {
        RuleFile { path: project_dir(data_dir, root).join(RULES_FILE), project: Some(root.to_path_buf()) }
    }

    /// The user's rules, in lathe's config directory.
    pub fn user(user_dir: &Path) -> RuleFile {
        RuleFile { path: user_dir.join(RULES_FILE), project: None }
    }

    /// Reads it. Blocking.
    pub fn load(&self) -> Loaded {
        load(&self.path, self.project.as_deref())
    }

    /// Appends a rule (unless the file holds it already). Blocking.
    pub fn add(&self, allow: bool, rule: &Rule) -> Result<(), RulesError> {
        let _lock = FileLock::take(&self.path).map_err(io_error(&self.path))?;
        let loaded = self.load();
        if loaded.entries.iter().any(|entry| entry.allow == allow && entry.rule == *rule) {
            return Ok(());
        }
        let mut text = loaded.text;
        if text.trim().is_empty() {
            text = match &self.project {
                Some(root) => project_header(root),
                None => USER_HEADER.to_owned(),
            };
        }
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&render(allow, rule));
        write_private(&self.path, text.as_bytes()).map_err(io_error(&self.path))
    }

    /// Removes the rules `keep` says no to (by their position in the file's
    /// valid rules); returns how many went. Blocking.
    pub fn remove(&self, remove: impl Fn(usize, &Entry) -> bool) -> Result<usize, RulesError> {
        let _lock = FileLock::take(&self.path).map_err(io_error(&self.path))?;
        let loaded = self.load();
        let mut text = loaded.text.clone();
        let mut removed = 0;
        // From the end, so earlier spans stay where they are.
        for (index, entry) in loaded.entries.iter().enumerate().rev() {
            if remove(index, entry) {
                text.replace_range(entry.span.clone(), "");
                removed += 1;
            }
        }
        if removed > 0 {
            write_private(&self.path, text.as_bytes()).map_err(io_error(&self.path))?;
        }
        Ok(removed)
    }
}

/// The rule files of one session: its project's (when lathe has a data
/// directory) and the user's (when it knows its config directory).
#[derive(Debug, Clone)]
pub struct SessionRules {
    /// The project root the session belongs to.
    pub root: PathBuf,
    /// The project's rules.
    pub project: Option<RuleFile>,
    /// The user's rules.
    pub user: Option<RuleFile>,
    /// Where lathe keeps what it knows about this project (`None` without a data directory).
    pub project_dir: Option<PathBuf>,
}

/// What [`SessionRules::load`] found.
#[derive(Debug, Default)]
pub struct Standing {
    /// The project's rules (`None`: they cannot be kept).
    pub project: Option<RuleSet>,
    /// The user's rules (`None`: they cannot be kept).
    pub user: Option<RuleSet>,
    /// Skipped lines and tables, `file:line: why`.
    pub warnings: Vec<String>,
    /// The repository holds a rule file, which lathe ignores, and the user
    /// has not been told yet: what to tell them (said once per project).
    pub repository_notice: Option<String>,
}

/// The marker in a project's folder that says the user was told about the
/// repository's own rule file.
const NOTICED: &str = "repository-rules-noticed";

impl SessionRules {
    /// The files for a session in `cwd`. Blocking (it resolves the project root).
    pub fn for_cwd(cwd: &Path, data_dir: Option<&Path>, user_dir: Option<&Path>) -> SessionRules {
        let root = project_root(cwd);
        SessionRules {
            project: data_dir.map(|dir| RuleFile::project(dir, &root)),
            user: user_dir.map(RuleFile::user),
            project_dir: data_dir.map(|dir| project_dir(dir, &root)),
            root,
        }
    }

    /// No files: the rules of a session whose project is unknown hold in memory only.
    pub fn nowhere(cwd: &Path) -> SessionRules {
        SessionRules { root: cwd.to_path_buf(), project: None, user: None, project_dir: None }
    }

    /// Reads both files, and whether the repository's own rule file needs
    /// its one-time notice. Blocking.
    pub fn load(&self) -> Standing {
        let mut standing = Standing::default();
        for (file, slot) in [(&self.project, &mut standing.project), (&self.user, &mut standing.user)] {
            if let Some(file) = file {
                let loaded = file.load();
                standing.warnings.extend(loaded.warnings.iter().cloned());
                *slot = Some(loaded.rules());
            }
        }
        let repository = self.root.join(REPOSITORY_RULES);
        if std::fs::symlink_metadata(&repository).is_ok() {
            let told = self.project_dir.as_ref().map(|dir| dir.join(NOTICED));
            if !told.as_ref().is_some_and(|marker| marker.exists()) {
                if let Some(marker) = &told
                    && let Err(err) = write_private(marker, b"")
                {
                    tracing::warn!(path = %marker.display(), %err, "cannot remember the repository rules notice");
                }
                standing.repository_notice = Some(repository_notice(&repository));
            }
        }
        standing
    }

    /// Writes down an answer that outlasts the session. Blocking.
    pub fn keep(&self, remembered: &Remembered) -> Result<(), RulesError> {
        let file = match remembered.lasting {
            crate::permission::Lasting::Project => self.project.as_ref(),
            crate::permission::Lasting::User => self.user.as_ref(),
            crate::permission::Lasting::Session => None,
        };
        match file {
            Some(file) => file.add(remembered.allow, &remembered.rule),
            None => Ok(()),
        }
    }
}

/// What the user is told (once per project) about a repository's own rule file.
fn repository_notice(path: &Path) -> String {
    format!(
        "This repository has {}: lathe ignores it, because a checkout cannot grant itself permissions. To use \
         its rules, review them with `lathe permissions import` in the project, which shows each rule and asks \
         before keeping it for this project.",
        shown(&path.display().to_string(), Lines::One)
    )
}

/// The listing `/permissions` answers and `lathe permissions list` prints:
/// the session's answers (when given), then the project's and the user's
/// rules, each as the user reads it, numbered for `lathe permissions rm`
/// (`p1`, `u1`), with the file it is in.
pub fn listing(session: Option<(&[Rule], &[Rule])>, rules: &SessionRules) -> String {
    let mut out = String::new();
    let line = |out: &mut String, id: &str, allow: bool, rule: &Rule| {
        let verb = if allow { "allow " } else { "reject" };
        let mut text = rule.describe();
        if let Rule::Command(CommandRule::Exact { cwd, .. }) = rule {
            text.push_str(&format!(" in {}", cwd.display()));
        }
        out.push_str(&format!("- {id}{verb} {}\n", shown(&text, Lines::One)));
    };
    if let Some((allowed, rejected)) = session {
        out.push_str("For this session:\n");
        if allowed.is_empty() && rejected.is_empty() {
            out.push_str("- none\n");
        }
        for rule in allowed {
            line(&mut out, "", true, rule);
        }
        for rule in rejected {
            line(&mut out, "", false, rule);
        }
    }
    let files = [
        (&rules.project, "p", format!("For this project ({})", rules.root.display())),
        (&rules.user, "u", "In every project".to_owned()),
    ];
    for (file, prefix, heading) in files {
        let Some(file) = file else {
            let why = if prefix == "p" { "no data directory" } else { "no config directory" };
            out.push_str(&format!("{}: not kept ({why}).\n", shown(&heading, Lines::One)));
            continue;
        };
        let loaded = file.load();
        out.push_str(&format!(
            "{} (`{}`):\n",
            shown(&heading, Lines::One),
            shown(&file.path.display().to_string(), Lines::One)
        ));
        if loaded.entries.is_empty() {
            out.push_str("- none\n");
        }
        for (index, entry) in loaded.entries.iter().enumerate() {
            line(&mut out, &format!("{prefix}{} ", index + 1), entry.allow, &entry.rule);
        }
        for warning in &loaded.warnings {
            out.push_str(&format!("  warning: {warning}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> PathBuf {
        PathBuf::from("/home/you/project")
    }

    #[test]
    fn a_file_with_a_broken_line_still_loads_the_others() {
        if !crate::platform::testing::unix_paths() {
            return;
        }
        let text = "project = \"/home/you/project\"\n\
                    [[allow]]\n\
                    command = \"cargo test\"\n\
                    cwd = \"/home/you/project\"\n\
                    \n\
                    this line is not toml\n\
                    [[allow]]\n\
                    program = \"git log\"\n\
                    [[allow]]\n\
                    program = \"rm\"\n\
                    [[allow]]\n\
                    command = \"make; rm -rf ~\"\n\
                    cwd = \"/home/you/project\"\n\
                    [[allow]]\n\
                    files = \"edit\"\n\
                    colour = \"red\"\n\
                    [[reject]]\n\
                    program = \"git push\"\n\
                    [[allow]]\n\
                    fetch = \"docs.rs\"\n";
        let loaded = parse(text, Path::new("/rules.toml"), Some(&project()), None);
        let rules: Vec<(bool, String)> =
            loaded.entries.iter().map(|entry| (entry.allow, entry.rule.describe())).collect();
        assert_eq!(
            rules,
            [
                (true, "`cargo test`".to_owned()),
                (true, "`git log …` inside the project".to_owned()),
                (false, "`git push …`".to_owned()),
                (true, "fetching from `docs.rs`".to_owned()),
            ]
        );
        let lines: Vec<&str> = loaded.warnings.iter().map(|w| w.split(": ").next().unwrap()).collect();
        assert_eq!(
            lines,
            ["/rules.toml:6", "/rules.toml:9", "/rules.toml:11", "/rules.toml:14"],
            "{:#?}",
            loaded.warnings
        );
        assert!(loaded.warnings[1].contains("not a read-only program"), "{}", loaded.warnings[1]);
        assert!(loaded.warnings[2].contains("never remembers"), "{}", loaded.warnings[2]);
        assert!(loaded.warnings[3].contains("colour"), "{}", loaded.warnings[3]);
        assert_eq!(loaded.entries[1].line, 7);

        // Another project's file grants nothing here.
        let other = parse(text, Path::new("/rules.toml"), Some(Path::new("/elsewhere")), None);
        assert!(other.entries.is_empty() && other.warnings.last().unwrap().contains("not of /elsewhere"));
    }

    #[test]
    fn rules_round_trip_through_their_tables() {
        if !crate::platform::testing::unix_paths() {
            return;
        }
        let rules = [
            (true, Rule::Command(CommandRule::Exact { command: "cargo test \"a b\"".into(), cwd: project() })),
            (true, Rule::Command(CommandRule::ReadOnly(vec!["git".into(), "log".into()]))),
            (false, Rule::CommandPrefix("git push".into())),
            (true, Rule::Tool(Tool::EditFile, Scope::Inside)),
            (true, Rule::Tool(Tool::ReadFile, Scope::Outside)),
            (true, Rule::External { server: "docs".into(), tool: "publish".into() }),
            (false, Rule::FetchHost("localhost:8080".into())),
        ];
        let mut text = project_header(&project());
        for (allow, rule) in &rules {
            text.push_str(&render(*allow, rule));
        }
        let loaded = parse(&text, Path::new("/r.toml"), Some(&project()), None);
        assert!(loaded.warnings.is_empty(), "{:?}\n{text}", loaded.warnings);
        let back: Vec<(bool, Rule)> = loaded.entries.iter().map(|e| (e.allow, e.rule.clone())).collect();
        assert_eq!(back, rules);
    }

    #[test]
    fn files_are_changed_in_place_and_private() {
        if !crate::platform::testing::unix_paths() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = RuleFile::project(dir.path(), &project());
        let make = Rule::Command(CommandRule::Exact { command: "make".into(), cwd: project() });
        let log = Rule::Command(CommandRule::ReadOnly(vec!["git".into(), "log".into()]));
        file.add(true, &make).unwrap();
        file.add(true, &make).unwrap();
        file.add(true, &log).unwrap();
        // The user's own comment stays when a rule goes.
        let mut text = std::fs::read_to_string(&file.path).unwrap();
        text.push_str("\n# my own note\n\n[[reject]]\nprogram = \"git push\"\n");
        std::fs::write(&file.path, &text).unwrap();
        assert_eq!(file.load().entries.len(), 3);
        assert_eq!(file.remove(|index, _| index == 0).unwrap(), 1);
        let after = std::fs::read_to_string(&file.path).unwrap();
        assert!(after.contains("# my own note") && !after.contains("make"), "{after}");
        let rules: Vec<Rule> = file.load().entries.into_iter().map(|e| e.rule).collect();
        assert_eq!(rules, [log, Rule::CommandPrefix("git push".into())]);
        // Private where the system has permission bits (`None` elsewhere).
        let mode = |path: &Path| platform::testing::mode(path).map(|mode| mode & 0o777);
        assert!(mode(&file.path).is_none_or(|mode| mode == 0o600), "{:?}", mode(&file.path));
        let parent = file.path.parent().unwrap();
        assert!(mode(parent).is_none_or(|mode| mode == 0o700), "{:?}", mode(parent));

        // The user's file keeps its heading when its first rule goes.
        let user = RuleFile::user(&dir.path().join("config"));
        user.add(true, &Rule::FetchHost("docs.rs".into())).unwrap();
        user.add(false, &Rule::FetchHost("evil.example".into())).unwrap();
        assert_eq!(user.remove(|index, _| index == 0).unwrap(), 1);
        let text = std::fs::read_to_string(&user.path).unwrap();
        assert!(text.starts_with(USER_HEADER) && !text.contains("docs.rs") && text.contains("evil.example"), "{text}");
    }
}
