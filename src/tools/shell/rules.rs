//! The permission rules for commands (portable): what an "always allow"
//! answer for a command remembers ([`CommandRule`]: this exact command, or a
//! known read-only program kept inside the roots) and what an "always
//! reject" answer matches ([`command_prefix`], [`matches_prefix`]: the
//! program and its subcommand). The rules read a command line by POSIX
//! word rules; a line in another shell's syntax (PowerShell, cmd on
//! Windows) simply matches less, which only means the user is asked more.

use std::path::{Path, PathBuf};

use super::super::paths;
use super::code_span;

/// What an "always allow" answer for a command remembers. Deliberately
/// narrow: a rule covers the same command again, or a known read-only
/// program looking only inside the roots; it never covers an interpreter's
/// inline code, a path outside the roots or another subcommand. When a
/// command cannot be judged (shell patterns, variables, redirections), no
/// rule covers it and the user is asked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CommandRule {
    /// Exactly this command line (its text, trimmed), run in this directory.
    Exact {
        /// The command line.
        command: String,
        /// Where it ran.
        cwd: PathBuf,
    },
    /// A program (and subcommand) from [`READ_ONLY_COMMANDS`], with any
    /// arguments that stay inside the roots and none of its options that
    /// write or run something.
    ReadOnly(Vec<String>),
}

impl CommandRule {
    /// The rule, as the "always allow" option names it.
    pub fn describe(&self) -> String {
        match self {
            CommandRule::Exact { command, .. } => {
                let shown: String = command.chars().take(RULE_MAX_CHARS).collect();
                let cut = if command.chars().count() > RULE_MAX_CHARS { "…" } else { "" };
                code_span(&format!("{shown}{cut}"))
            }
            // The program names come from READ_ONLY_COMMANDS: no backticks.
            CommandRule::ReadOnly(words) => format!("`{} …` inside the project", words.join(" ")),
        }
    }

    /// Whether running `command` in `cwd` falls under this rule.
    pub fn covers(&self, command: &str, cwd: &Path, roots: &[PathBuf]) -> bool {
        match self {
            CommandRule::Exact { command: allowed, cwd: allowed_cwd } => {
                command.trim() == allowed && paths::normalize(cwd) == *allowed_cwd
            }
            CommandRule::ReadOnly(prefix) => {
                read_only_prefix(command).is_some_and(|found| found == *prefix) && stays_inside(command, cwd, roots)
            }
        }
    }
}

/// Characters of a command shown in an "always allow" option.
const RULE_MAX_CHARS: usize = 60;

/// Programs (and git subcommands) that only read and print, each with the
/// options that would make it write a file or run a program. A forbidden
/// long option is refused in any abbreviation; a forbidden short one
/// anywhere in a cluster (`-aR`).
pub const READ_ONLY_COMMANDS: &[(&[&str], &[&str])] = &[
    (&["cat"], &[]),
    (&["head"], &[]),
    (&["tail"], &[]),
    (&["wc"], &[]),
    (&["nl"], &[]),
    (&["ls"], &[]),
    (&["pwd"], &[]),
    (&["stat"], &[]),
    (&["du"], &[]),
    (&["realpath"], &[]),
    (&["file"], &["-C", "--compile"]),
    (&["tree"], &["-o", "-R"]),
    (&["grep"], &[]),
    (&["egrep"], &[]),
    (&["fgrep"], &[]),
    (&["rg"], &["--pre"]),
    (&["diff"], &[]),
    (&["cmp"], &[]),
    (&["git", "status"], &[]),
    (&["git", "diff"], &["--output", "--ext-diff"]),
    (&["git", "log"], &["--output", "--ext-diff"]),
    (&["git", "show"], &["--output", "--ext-diff"]),
    (&["git", "blame"], &[]),
    (&["git", "ls-files"], &[]),
    (&["git", "rev-parse"], &[]),
    (&["git", "grep"], &["-O", "--open-files-in-pager"]),
];

/// Interpreters and shells, whose inline code no rule covers.
const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "zsh",
    "dash",
    "ksh",
    "fish",
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "node",
    "nodejs",
    "deno",
    "bun",
    "ruby",
    "perl",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "Rscript",
    "pwsh",
    "powershell",
    "osascript",
];

/// Options that hand an interpreter code to run.
const INLINE_CODE_FLAGS: &[&str] = &["-c", "-e", "-E", "-p", "-r", "--eval", "--print", "--command"];

/// The rule an "always allow" answer to `command` run in `cwd` creates, or
/// `None` when no answer may cover it again without asking: control
/// operators, redirections or substitutions (`;`, `&`, `|`, backticks, `$(`,
/// `>`, `<`, newlines), a leading variable assignment (`LD_PRELOAD=…`), text
/// that does not split into words, or an interpreter given inline code
/// (`python3 -c`, `node -e`, `sh -c`, `perl -e`, ...).
pub fn command_rule(command: &str, cwd: &Path) -> Option<CommandRule> {
    let words = plain_words(command)?;
    if words.first()?.contains('=') || runs_inline_code(&words) {
        return None;
    }
    if let Some(prefix) = read_only_prefix(command)
        && !has_expansions(command)
        && forbidden_option(&words).is_none()
    {
        return Some(CommandRule::ReadOnly(prefix));
    }
    Some(CommandRule::Exact { command: command.trim().to_owned(), cwd: paths::normalize(cwd) })
}

/// An exact-command rule for `command` in `cwd`, as a rule file writes it
/// down (see `crate::rules`): only for a command an "always allow" could
/// have remembered at all ([`command_rule`] gives a rule for it), so a file
/// can hold nothing wider than an answer could. A read-only program's
/// command becomes the narrower exact rule.
pub fn exact_rule(command: &str, cwd: &Path) -> Option<CommandRule> {
    command_rule(command, cwd)?;
    Some(CommandRule::Exact { command: command.trim().to_owned(), cwd: paths::normalize(cwd) })
}

/// The read-only rule for `program` (`cat`, `git log`): only for an entry of
/// [`READ_ONLY_COMMANDS`], word for word.
pub fn read_only_rule(program: &str) -> Option<CommandRule> {
    let words = plain_words(program)?;
    READ_ONLY_COMMANDS
        .iter()
        .find(|(prefix, _)| prefix.len() == words.len() && prefix.iter().zip(&words).all(|(want, word)| want == word))
        .map(|_| CommandRule::ReadOnly(words))
}

/// The words of an "always reject" rule as a rule file writes them
/// (`git push`), normalised; `None` when they are not plain words.
pub fn reject_prefix(words: &str) -> Option<String> {
    let words = plain_words(words)?;
    if words.first()?.contains('=') {
        return None;
    }
    Some(shell_words::join(words))
}

/// The words that name a command for an "always reject" rule, or `None`
/// when the command can never match one.
///
/// The program, plus its subcommand when the second word looks like one
/// (lowercase letters, digits, `-`, `_`, `:`; not a flag, path, file name
/// or glob): `git push --force` → `git push`, `rm -rf x` → `rm`. For `npm`,
/// `yarn`, `pnpm` and `bun`, `run` takes the script name too: `npm run build`
/// → `npm run build`. A rejection may be broad: it only ever asks less.
///
/// `None` for the commands [`command_rule`] refuses for their syntax.
pub fn command_prefix(command: &str) -> Option<String> {
    let words = plain_words(command)?;
    let program = words.first()?;
    if program.contains('=') {
        return None;
    }
    let mut prefix = vec![program.as_str()];
    if let Some(second) = words.get(1).filter(|word| is_subcommand(word)) {
        prefix.push(second);
        let runs_scripts = matches!(program.as_str(), "npm" | "yarn" | "pnpm" | "bun");
        if runs_scripts
            && second == "run"
            && let Some(script) = words.get(2).filter(|word| !word.starts_with('-'))
        {
            prefix.push(script);
        }
    }
    Some(shell_words::join(prefix))
}

/// Whether `command` falls under an "always reject" rule for `prefix`: it has
/// no control operators or substitutions (see [`command_rule`]) and its
/// words start with the prefix's words.
pub fn matches_prefix(command: &str, prefix: &str) -> bool {
    let (Some(words), Ok(wanted)) = (plain_words(command), shell_words::split(prefix)) else {
        return false;
    };
    !wanted.is_empty() && words.starts_with(&wanted)
}

/// The words of a command with nothing but words in it.
fn plain_words(command: &str) -> Option<Vec<String>> {
    const CONTROL: [&str; 9] = [";", "&", "|", "`", "$(", ">", "<", "\n", "\r"];
    if CONTROL.iter().any(|op| command.contains(op)) {
        return None;
    }
    shell_words::split(command).ok().filter(|words| !words.is_empty())
}

/// The [`READ_ONLY_COMMANDS`] entry `command` starts with, by its words.
fn read_only_prefix(command: &str) -> Option<Vec<String>> {
    let words = plain_words(command)?;
    READ_ONLY_COMMANDS
        .iter()
        .map(|(prefix, _)| prefix)
        .find(|prefix| prefix.len() <= words.len() && prefix.iter().zip(&words).all(|(want, word)| want == word))
        .map(|prefix| prefix.iter().map(|word| (*word).to_owned()).collect())
}

/// The first option of `words` that makes its read-only command write or run
/// something, if any.
fn forbidden_option(words: &[String]) -> Option<&str> {
    let (prefix, forbidden) = READ_ONLY_COMMANDS
        .iter()
        .find(|(prefix, _)| prefix.len() <= words.len() && prefix.iter().zip(words).all(|(want, word)| want == word))?;
    let arguments = words[prefix.len()..].iter().take_while(|word| *word != "--");
    for word in arguments {
        for option in forbidden.iter() {
            let hit = match (option.strip_prefix("--"), word.strip_prefix("--")) {
                // Long options also work abbreviated: `--out=x` is `--output=x`.
                (Some(long), Some(given)) => {
                    let given = given.split('=').next().unwrap_or_default();
                    !given.is_empty() && (long.starts_with(given) || given.starts_with(long))
                }
                (Some(_), None) => false,
                (None, _) => {
                    let letter = option.trim_start_matches('-');
                    word.starts_with('-') && !word.starts_with("--") && word[1..].contains(letter)
                }
            };
            if hit {
                return Some(option);
            }
        }
    }
    None
}

/// Whether `words` hand an interpreter inline code, wherever it comes in
/// the command (`env python3 -c …`, `timeout 5 node -e …`).
fn runs_inline_code(words: &[String]) -> bool {
    words.iter().enumerate().any(|(at, word)| {
        let program = word.rsplit('/').next().unwrap_or(word);
        let interpreter = INTERPRETERS.contains(&program)
            || program.strip_prefix("python").is_some_and(|version| version.chars().all(|c| c.is_ascii_digit() || c == '.'));
        interpreter
            && words[at + 1..].iter().any(|arg| {
                INLINE_CODE_FLAGS.contains(&arg.as_str())
                    || INLINE_CODE_FLAGS.iter().any(|flag| flag.starts_with("--") && arg.starts_with(&format!("{flag}=")))
                    // A cluster such as `-ce` or `-xc`.
                    || (arg.starts_with('-') && !arg.starts_with("--") && arg.len() > 2 && arg[1..].contains(['c', 'e']))
            })
    })
}

/// Whether the shell would expand something in `command` before running it:
/// a variable or substitution (`$`, backticks, also inside double quotes), a
/// pattern (`*`, `?`, `[`), braces or a leading `~`, outside quotes.
fn has_expansions(command: &str) -> bool {
    #[derive(PartialEq)]
    enum Quote {
        None,
        Single,
        Double,
    }
    let mut quote = Quote::None;
    let mut previous = ' ';
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match quote {
            Quote::Single => {
                if c == '\'' {
                    quote = Quote::None;
                }
            }
            Quote::Double => match c {
                '\\' => {
                    chars.next();
                }
                '"' => quote = Quote::None,
                '$' | '`' => return true,
                _ => {}
            },
            Quote::None => match c {
                '\\' => {
                    chars.next();
                }
                '\'' => quote = Quote::Single,
                '"' => quote = Quote::Double,
                '$' | '`' | '*' | '?' | '[' | '{' | '}' => return true,
                '~' if previous.is_whitespace() || matches!(previous, '=' | ':') => return true,
                _ => {}
            },
        }
        previous = c;
    }
    false
}

/// Whether every argument of a read-only command names something inside the
/// roots. Each non-option word is taken for a path (a pattern or a number
/// then resolves inside the directory, which is harmless), as is the value
/// of a `--option=value`; an option word carrying a path (`-f/etc/x`) is
/// refused, and so is anything the shell would expand.
fn stays_inside(command: &str, cwd: &Path, roots: &[PathBuf]) -> bool {
    let Some(words) = plain_words(command) else { return false };
    if has_expansions(command) || forbidden_option(&words).is_some() || !paths::is_inside_roots(cwd, roots) {
        return false;
    }
    let mut options_ended = false;
    words.iter().skip(1).all(|word| {
        let path = if options_ended || !word.starts_with('-') || word == "-" {
            word.as_str()
        } else if word == "--" {
            options_ended = true;
            return true;
        } else if let Some((_, value)) = word.split_once('=').filter(|_| word.starts_with("--")) {
            value
        } else {
            return !word.contains('/');
        };
        path.is_empty() || paths::is_inside_roots(&paths::resolve(cwd, path), roots)
    })
}

fn is_subcommand(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_lowercase())
        && word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | ':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_rules() {
        let cwd = Path::new("/p");
        let exact = |command: &str| Some(CommandRule::Exact { command: command.to_owned(), cwd: PathBuf::from("/p") });
        let read_only = |words: &[&str]| Some(CommandRule::ReadOnly(words.iter().map(|w| (*w).to_owned()).collect()));
        let table = [
            ("cargo test --all", exact("cargo test --all")),
            ("  ls -la ", read_only(&["ls"])),
            ("cat src/main.rs", read_only(&["cat"])),
            ("git status", read_only(&["git", "status"])),
            ("git log --output=x", exact("git log --output=x")),
            ("git push", exact("git push")),
            ("cat $HOME/x", exact("cat $HOME/x")),
            ("cat *.rs", exact("cat *.rs")),
            ("/bin/cat x", exact("/bin/cat x")),
            ("python script.py", exact("python script.py")),
            ("python -c 'print(1)'", None),
            ("python3.12 -c 'print(1)'", None),
            ("node --eval=1", None),
            ("timeout 5 sh -c 'x'", None),
            ("cargo test; rm -rf /", None),
            ("echo $(id)", None),
            ("LD_PRELOAD=x.so cargo test", None),
            ("echo 'unclosed", None),
            ("   ", None),
        ];
        for (command, expected) in table {
            assert_eq!(command_rule(command, cwd), expected, "{command}");
        }
        assert_eq!(
            CommandRule::Exact { command: "x".repeat(70), cwd: PathBuf::from("/p") }.describe(),
            format!("`{}…`", "x".repeat(60))
        );
    }

    #[test]
    fn expansions_are_seen_outside_single_quotes() {
        let table = [
            ("cat a.txt", false),
            ("grep 'a*b' x", false),
            ("grep \"a*b\" x", false),
            ("grep a\\*b x", false),
            ("echo '$HOME'", false),
            ("git log --format='%h'", false),
            ("echo a~b", false),
            ("echo \"$HOME\"", true),
            ("cat *.rs", true),
            ("cat file?", true),
            ("cat {a,b}", true),
            ("cat ~/x", true),
            ("cat --file=~/x", true),
            ("cat a[1]", true),
        ];
        for (command, expected) in table {
            assert_eq!(has_expansions(command), expected, "{command}");
        }
    }

    #[test]
    fn command_prefixes() {
        let table = [
            ("cargo test --all", Some("cargo test")),
            ("git status", Some("git status")),
            ("ls -la", Some("ls")),
            ("ls", Some("ls")),
            ("python script.py", Some("python")),
            ("cat src/main.rs", Some("cat")),
            ("npm run build -- --watch", Some("npm run build")),
            ("pnpm run --silent lint", Some("pnpm run")),
            ("npm install", Some("npm install")),
            ("cargo +nightly fmt", Some("cargo")),
            ("'my tool' sub", Some("'my tool' sub")),
            ("cargo test; rm -rf /", None),
            ("cargo test && rm x", None),
            ("cargo test || true", None),
            ("cargo test | tail", None),
            ("sleep 1 &", None),
            ("echo `id`", None),
            ("echo $(id)", None),
            ("echo hi > f", None),
            ("sort < f", None),
            ("cargo test\nrm x", None),
            ("LD_PRELOAD=x.so cargo test", None),
            ("echo 'unclosed", None),
            ("   ", None),
        ];
        for (command, expected) in table {
            assert_eq!(command_prefix(command).as_deref(), expected, "{command}");
        }
    }

    #[test]
    fn prefix_matching() {
        let table = [
            ("cargo test --all", "cargo test", true),
            ("cargo test", "cargo test", true),
            ("cargo  'test'  -q", "cargo test", true),
            ("cargo testx", "cargo test", false),
            ("cargo", "cargo test", false),
            ("cargo build", "cargo test", false),
            ("cargo test; rm -rf /", "cargo test", false),
            ("cargo test $(rm x)", "cargo test", false),
            ("cargo test > out", "cargo", false),
            ("ls -la", "ls", true),
            ("ls", "", false),
            ("env X=1 cargo test", "cargo test", false),
        ];
        for (command, prefix, expected) in table {
            assert_eq!(matches_prefix(command, prefix), expected, "{command} vs {prefix}");
        }
    }
}
