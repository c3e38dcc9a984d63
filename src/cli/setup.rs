//! `lathe setup`: the interactive setup, on a terminal, the same whether a
//! person types `lathe setup` or an editor runs it for its Terminal Auth
//! button (see `crate::acp`'s auth methods).
//!
//! 1. Where the config goes (`--config`, `$LATHE_CONFIG`, else
//!    `~/.config/lathe/config.toml`); a file already there is replaced only
//!    if the user says so (the old one is kept as `config.toml.bak`).
//! 2. The model servers running on this machine ([`crate::discover`]),
//!    offered first; then the presets of `config.example.toml` (the ones
//!    `lathe init` writes); then "another OpenAI-compatible server", whose
//!    URL is typed.
//! 3. The key: pasted (read in raw mode, never shown) and then stored by
//!    lathe ([`crate::credentials`], 0600, `api_key_stored = true`), or the
//!    name of the environment variable that holds it (`$NAME`,
//!    `api_key_env`), or none.
//! 4. The model, from the server's `GET /models` (a found server's own list,
//!    with which models take tools).
//! 5. `lathe doctor`'s checks of that model ([`crate::doctor::check_models`]);
//!    a failure asks before writing anyway.
//! 6. The file: the text `lathe init` writes for the preset (cut from
//!    `config.example.toml` by [`super::init`]) with the server, model and key
//!    chosen, written atomically, mode 0600; where it went is said.
//!
//! `lathe init` is the same code without the questions: the preset as it
//! is, keys from the environment, never replacing a file.
//!
//! The questions go through [`Prompter`], so the flow is tested without a
//! terminal; [`TerminalPrompter`] is the real one.

use std::io::{BufRead as _, Write};
use std::path::{Path, PathBuf};

use crate::config::{ApiKey, Config, ModelConfig};
use crate::credentials::Replace;
use crate::discover::{LocalServer, Plan};

/// `lathe setup`'s arguments.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SetupArgs {}

/// How a setup ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A config was written here.
    Written(PathBuf),
    /// The existing config was kept (and it names a usable model).
    Kept(PathBuf),
}

/// Why a setup stopped.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The user stopped it (end of input, Ctrl-C, or "no").
    #[error("stopped; nothing was written")]
    Stopped,
    /// No default location.
    #[error("there is no default config location (HOME and XDG_CONFIG_HOME are unset); pass --config PATH")]
    NoLocation,
    /// The answers do not make a config (a bug, if it happens).
    #[error("the config lathe made does not parse: {0}")]
    Invalid(String),
    /// The disk said no.
    #[error("cannot write {}: {source}", .path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The key could not be stored.
    #[error("{0}")]
    Credentials(#[from] crate::credentials::CredentialsError),
}

/// The questions and what is said in between.
pub trait Prompter {
    /// Shows `text` (a line or more; no question).
    fn say(&mut self, text: &str);
    /// Asks `question`; the answer is shown as typed. `None`: no answer
    /// will come (end of input).
    fn ask(&mut self, question: &str) -> Option<String>;
    /// Asks `question`; the answer is never shown, nor its length.
    fn ask_secret(&mut self, question: &str) -> Option<String>;
}

/// Where the answers come from and what setup may use.
pub struct Context<'a> {
    /// The config file to write (as lathe finds it).
    pub path: Option<PathBuf>,
    /// lathe's config directory, where a pasted key is stored.
    pub user_dir: Option<PathBuf>,
    /// The environment (for `$NAME` keys and the config's parse).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Where to look for running servers (`None`: do not look).
    pub discovery: Option<Plan>,
}

/// What the user chose to talk to.
#[derive(Debug, Clone)]
struct Server {
    /// The preset whose paragraph the config starts from, if any.
    preset: Option<String>,
    /// The model table's name.
    key: String,
    /// The base URL.
    base_url: String,
    /// The preset's model and its key variable, if any.
    preset_model: Option<String>,
    preset_key_env: Option<String>,
    /// A found server's models, with what it said of tools.
    found: Option<LocalServer>,
}

/// How the key is given.
#[derive(Debug, Clone)]
enum Key {
    None,
    Env(String),
    Stored(ApiKey),
}

/// Runs the setup.
pub async fn run(ask: &mut dyn Prompter, cx: &Context<'_>) -> Result<Outcome, SetupError> {
    let path = cx.path.clone().ok_or(SetupError::NoLocation)?;
    ask.say(&format!("lathe setup: one model for lathe, written to {}.", path.display()));
    let replace = path.exists();
    if replace {
        let usable = Config::load(Some(&path), cx.env).ok().filter(|config| config.unusable().is_none());
        let question = format!(
            "{} exists. Replace it (the old one is kept as {})? [y/N] ",
            path.display(),
            backup_of(&path).display()
        );
        if !yes(ask.ask(&question).ok_or(SetupError::Stopped)?.as_str()) {
            return match usable {
                Some(_) => {
                    ask.say("Kept it as it is.");
                    Ok(Outcome::Kept(path))
                }
                None => Err(SetupError::Stopped),
            };
        }
    }

    let found = match &cx.discovery {
        Some(plan) => {
            ask.say("Looking for model servers running on this machine...");
            crate::discover::discover(plan).await.servers
        }
        None => Vec::new(),
    };
    let server = choose_server(ask, &found)?;
    let (model_config, key) = choose_key_and_model(ask, cx, &server).await?;

    // The config as it will be written, checked as lathe will read it.
    let text = render(&server, &model_config.model, &key);
    let mut config = Config::from_toml_str(&text, &path, cx.env).map_err(|err| SetupError::Invalid(err.to_string()))?;
    if let (Key::Stored(secret), Some(model)) = (&key, config.models.get_mut(&server.key)) {
        model.api_key = Some(secret.clone());
    }
    ask.say(&format!("Checking {} at {} (what `lathe doctor` checks)...", model_config.model, model_config.base_url));
    let report = crate::doctor::check_models(&config).await;
    let mut shown = Vec::new();
    let _ = report.write(&mut shown, false);
    ask.say(String::from_utf8_lossy(&shown).trim_end());
    if !report.passed() {
        let answer = ask.ask("Some checks failed. Write the config anyway? [y/N] ").ok_or(SetupError::Stopped)?;
        if !yes(&answer) {
            return Err(SetupError::Stopped);
        }
    }

    // The key first: a config naming a stored key that is not there is unusable.
    let stored = match (&key, &cx.user_dir) {
        (Key::Stored(secret), Some(dir)) => Some(crate::credentials::store(dir, &server.key, secret)?),
        (Key::Stored(_), None) => return Err(SetupError::NoLocation),
        (Key::None | Key::Env(_), _) => None,
    };
    let io = |source| SetupError::Io { path: path.clone(), source };
    if replace {
        std::fs::copy(&path, backup_of(&path)).map_err(io)?;
    }
    let mode = if replace { Replace::Yes } else { Replace::No };
    crate::credentials::write_private(&path, text.as_bytes(), mode).map_err(io)?;

    ask.say(&format!(
        "Wrote {} (mode 0600): model {} at {}.",
        path.display(),
        model_config.model,
        model_config.base_url
    ));
    match (&key, stored) {
        (Key::Stored(_), Some(file)) => ask.say(&format!(
            "The key is stored in {} (mode 0600), not in the config; an editor's logout forgets it.",
            file.display()
        )),
        (Key::Env(name), _) => {
            ask.say(&format!("lathe reads the key from ${name}: set it where your editor starts lathe."))
        }
        (Key::None | Key::Stored(_), _) => {}
    }
    if replace {
        ask.say(&format!("The old config is in {}.", backup_of(&path).display()));
    }
    ask.say("`lathe doctor` checks it again any time. Done.");
    Ok(Outcome::Written(path))
}

/// `config.toml` -> `config.toml.bak`.
fn backup_of(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".bak");
    path.with_file_name(name)
}

fn yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// The server: a found one, a preset, or a typed URL.
fn choose_server(ask: &mut dyn Prompter, found: &[LocalServer]) -> Result<Server, SetupError> {
    let presets: Vec<(String, ModelConfig)> = super::init::presets()
        .into_iter()
        .filter_map(|preset| Some((preset.to_owned(), preset_model(preset)?)))
        .collect();
    let mut lines = vec!["Where is your model?".to_owned()];
    let mut n = 0;
    for server in found {
        n += 1;
        lines.push(format!("  {n:>2}. {} (running here)", server.describe()));
    }
    for (preset, model) in &presets {
        n += 1;
        lines.push(format!("  {n:>2}. {preset:<11} {}", model.base_url));
    }
    n += 1;
    let other = n;
    lines.push(format!("  {n:>2}. another OpenAI-compatible server (type its URL)"));
    ask.say(&lines.join("\n"));
    let default = if found.is_empty() { None } else { Some(1) };
    let choice = loop {
        let hint = default.map_or_else(String::new, |d| format!(" [{d}]"));
        let answer = ask.ask(&format!("Choose 1-{n}{hint}: ")).ok_or(SetupError::Stopped)?;
        match (answer.trim().parse::<usize>().ok(), default) {
            (Some(choice), _) if (1..=n).contains(&choice) => break choice,
            (None, Some(d)) if answer.trim().is_empty() => break d,
            _ => ask.say(&format!("Type a number from 1 to {n}.")),
        }
    };
    if let Some(server) = choice.checked_sub(1).and_then(|at| found.get(at)) {
        let preset = server.kind.preset();
        let known = preset_model(preset);
        return Ok(Server {
            preset: Some(preset.to_owned()),
            key: preset.to_owned(),
            base_url: server.base_url.clone(),
            preset_model: known.map(|model| model.model),
            preset_key_env: None,
            found: Some(server.clone()),
        });
    }
    if let Some((preset, model)) = choice.checked_sub(found.len() + 1).and_then(|at| presets.get(at)) {
        return Ok(Server {
            preset: Some(preset.clone()),
            key: preset.clone(),
            base_url: model.base_url.clone(),
            preset_model: Some(model.model.clone()),
            preset_key_env: model.api_key_env.clone(),
            found: None,
        });
    }
    debug_assert_eq!(choice, other);
    let base_url = loop {
        let url = ask.ask("Its base URL, up to and including the version path (e.g. http://host:8000/v1): ");
        let url = url.ok_or(SetupError::Stopped)?.trim().trim_end_matches('/').to_owned();
        match url::Url::parse(&url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host_str().is_some() => break url,
            _ => ask.say("That is not an http:// or https:// URL."),
        }
    };
    Ok(Server {
        preset: None,
        key: "custom".to_owned(),
        base_url,
        preset_model: None,
        preset_key_env: None,
        found: None,
    })
}

/// A preset's model as `lathe init` would write it (keys not read).
fn preset_model(preset: &str) -> Option<ModelConfig> {
    let text = super::init::render(preset).ok()?;
    let config = Config::from_toml_str(&text, Path::new("config.example.toml"), &|_| None).ok()?;
    config.models.get(preset).cloned()
}

/// The key, then the model from the server's list. Asks for the key again
/// when the server refuses it.
async fn choose_key_and_model(
    ask: &mut dyn Prompter,
    cx: &Context<'_>,
    server: &Server,
) -> Result<(ModelConfig, Key), SetupError> {
    for _ in 0..3 {
        let key = choose_key(ask, cx, server)?;
        let mut model = ModelConfig::plain(&server.key, &server.base_url, "");
        match &key {
            Key::Env(name) => {
                model.api_key_env = Some(name.clone());
                model.api_key = (cx.env)(name).filter(|value| !value.is_empty()).map(ApiKey::new);
                if model.api_key.is_none() {
                    ask.say(&format!("${name} is not set here; lathe reads it when it starts."));
                }
            }
            Key::Stored(secret) => {
                model.api_key_stored = true;
                model.api_key = Some(secret.clone());
            }
            Key::None => {}
        }
        let listed = match &server.found {
            Some(found) => Ok(found
                .models
                .iter()
                .map(|m| {
                    let tools = match m.tools {
                        Some(true) => " (takes tools)",
                        Some(false) => " (takes no tools)",
                        None => "",
                    };
                    (m.id.clone(), tools)
                })
                .collect::<Vec<_>>()),
            None => list_models(&model).await.map(|ids| ids.into_iter().map(|id| (id, "")).collect()),
        };
        let ids = match listed {
            Ok(ids) => ids,
            Err(ListError::Refused(why)) => {
                ask.say(&format!("The server refused the key: {why}"));
                continue;
            }
            Err(ListError::Other(why)) => {
                ask.say(&format!("The server gave no model list ({why})."));
                Vec::new()
            }
        };
        model.model = choose_model(ask, server, &ids)?;
        return Ok((model, key));
    }
    ask.say("The key was refused three times.");
    Err(SetupError::Stopped)
}

/// Pasted, named, or none.
fn choose_key(ask: &mut dyn Prompter, cx: &Context<'_>, server: &Server) -> Result<Key, SetupError> {
    let default = server.preset_key_env.clone();
    let enter = match &default {
        Some(name) => format!("Enter for ${name}"),
        None => "Enter for none".to_owned(),
    };
    let question =
        format!("API key: paste it (it is not shown), or type $NAME for an environment variable, or press {enter}: ");
    let answer = ask.ask_secret(&question).ok_or(SetupError::Stopped)?;
    let answer = answer.trim();
    let key = match (answer.strip_prefix('$'), answer.is_empty(), default) {
        (Some(name), _, _) if !name.is_empty() => Key::Env(name.to_owned()),
        (_, true, Some(name)) => Key::Env(name),
        (_, true, None) => Key::None,
        _ => Key::Stored(ApiKey::new(answer)),
    };
    match &key {
        Key::Stored(_) if cx.user_dir.is_none() => {
            ask.say("There is nowhere to store a key (HOME is unset): give an environment variable instead.");
            choose_key(ask, cx, server)
        }
        Key::Stored(_) => {
            ask.say("Key received.");
            Ok(key)
        }
        Key::Env(name) => {
            ask.say(&format!("lathe will read the key from ${name}."));
            Ok(key)
        }
        Key::None => {
            ask.say("No key.");
            Ok(key)
        }
    }
}

enum ListError {
    Refused(String),
    Other(String),
}

/// The server's models (`GET {base_url}/models`), bounded like the doctor's.
async fn list_models(model: &ModelConfig) -> Result<Vec<String>, ListError> {
    let network = crate::config::NetworkSettings {
        connect_timeout: crate::doctor::CONNECT_TIMEOUT,
        response_timeout: crate::doctor::CHECK_TIMEOUT,
        ..crate::config::NetworkSettings::default()
    };
    let client = crate::model::ModelClient::new(std::sync::Arc::new(model.clone()), &network)
        .map_err(|err| ListError::Other(err.to_string()))?;
    match tokio::time::timeout(crate::doctor::CHECK_TIMEOUT, client.list_models()).await {
        Ok(Ok(ids)) => Ok(ids),
        Ok(Err(err)) if err.kind() == crate::model::ModelErrorKind::Auth => Err(ListError::Refused(err.to_string())),
        Ok(Err(err)) => Err(ListError::Other(err.to_string())),
        Err(_) => Err(ListError::Other(format!("no answer within {} s", crate::doctor::CHECK_TIMEOUT.as_secs()))),
    }
}

/// Most models listed by number.
const MAX_LISTED: usize = 40;

/// The model: by number from the list, or typed.
fn choose_model(ask: &mut dyn Prompter, server: &Server, ids: &[(String, &str)]) -> Result<String, SetupError> {
    let picked = server.found.as_ref().and_then(LocalServer::pick).map(|m| m.id.clone());
    let default = picked
        .or_else(|| {
            server.preset_model.clone().filter(|preset| ids.is_empty() || ids.iter().any(|(id, _)| id == preset))
        })
        .or_else(|| ids.first().map(|(id, _)| id.clone()));
    if !ids.is_empty() {
        let mut lines = vec!["Models the server lists:".to_owned()];
        for (n, (id, note)) in ids.iter().take(MAX_LISTED).enumerate() {
            lines.push(format!("  {:>2}. {id}{note}", n + 1));
        }
        if ids.len() > MAX_LISTED {
            lines.push(format!("  ... and {} more (type a name)", ids.len() - MAX_LISTED));
        }
        ask.say(&lines.join("\n"));
    }
    loop {
        let hint = default.as_ref().map_or_else(String::new, |d| format!(" [{d}]"));
        let question = match ids.is_empty() {
            true => format!("Model name{hint}: "),
            false => format!("Model (number or name){hint}: "),
        };
        let answer = ask.ask(&question).ok_or(SetupError::Stopped)?;
        let answer = answer.trim();
        if answer.is_empty() {
            match &default {
                Some(default) => return Ok(default.clone()),
                None => continue,
            }
        }
        let listed = ids.len().min(MAX_LISTED);
        return Ok(match answer.parse::<usize>() {
            Ok(n) if (1..=listed).contains(&n) => ids[n - 1].0.clone(),
            Ok(_) | Err(_) => answer.to_owned(),
        });
    }
}

/// The config file for the choices: the preset's paragraph (or a new one)
/// with the server, model and key chosen.
fn render(server: &Server, model: &str, key: &Key) -> String {
    let key_line = match key {
        Key::None => None,
        Key::Env(name) => Some(format!("api_key_env = {}", super::init::toml_string(name))),
        Key::Stored(_) => Some("api_key_stored = true".to_owned()),
    };
    let paragraph = match server.preset.as_deref().map(super::init::preset_paragraph) {
        Some(Ok(paragraph)) => {
            // What the preset says of its own model (its window, images,
            // reasoning) does not hold for another.
            let same_model = server.preset_model.as_deref() == Some(model);
            edit_paragraph(&paragraph, &server.base_url, model, key_line.as_deref(), same_model)
        }
        Some(Err(_)) | None => {
            let mut lines = vec![
                "# An OpenAI-compatible server, chosen with `lathe setup`.".to_owned(),
                format!("[models.{}]", server.key),
                format!("base_url = {}", super::init::toml_string(&server.base_url)),
                format!("model = {}", super::init::toml_string(model)),
            ];
            lines.extend(key_line);
            lines.join("\n")
        }
    };
    super::init::render_one("lathe setup", &server.key, &paragraph)
}

/// The preset's paragraph with `base_url`, `model` and the key line
/// replaced; without `keep_specifics`, the lines describing the preset's
/// model (`context_window`, `vision`, `reasoning_effort`) dropped.
fn edit_paragraph(
    paragraph: &str,
    base_url: &str,
    model: &str,
    key_line: Option<&str>,
    keep_specifics: bool,
) -> String {
    let mut out = Vec::new();
    for line in paragraph.lines() {
        let name = match line.trim_start().starts_with('#') {
            true => "",
            false => line.split('=').next().map_or("", str::trim),
        };
        match name {
            "base_url" => out.push(format!("base_url = {}", super::init::toml_string(base_url))),
            "model" => {
                out.push(format!("model = {}", super::init::toml_string(model)));
                out.extend(key_line.map(str::to_owned));
            }
            "api_key_env" | "api_key_stored" => {}
            "context_window" | "vision" | "reasoning_effort" if !keep_specifics => {}
            _ => out.push(line.to_owned()),
        }
    }
    out.join("\n")
}

/// The prompter of a real terminal: questions and text on `out` (stdout),
/// answers from stdin, the secret read in raw mode so the terminal never
/// shows it.
pub struct TerminalPrompter<W: Write> {
    out: W,
}

impl<W: Write> TerminalPrompter<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        Self { out }
    }
}

/// What is written to the terminal: model names and errors come from the
/// server being set up, so control characters and escape sequences are
/// shown escaped, never sent to the terminal.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    crate::present::text::shown(text, crate::present::text::Lines::Many)
}

impl<W: Write> Prompter for TerminalPrompter<W> {
    fn say(&mut self, text: &str) {
        let _ = writeln!(self.out, "{}", shown(text));
        let _ = self.out.flush();
    }

    fn ask(&mut self, question: &str) -> Option<String> {
        let _ = write!(self.out, "{}", shown(question));
        let _ = self.out.flush();
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches(['\r', '\n']).to_owned()),
        }
    }

    fn ask_secret(&mut self, question: &str) -> Option<String> {
        // Raw mode before the question: nothing typed after it is seen can echo.
        if crossterm::terminal::enable_raw_mode().is_err() {
            return None;
        }
        let _ = write!(self.out, "{}", shown(question));
        let _ = self.out.flush();
        let secret = read_secret();
        let _ = crossterm::terminal::disable_raw_mode();
        // Raw mode swallowed the Enter: end the line ourselves.
        let _ = writeln!(self.out);
        let _ = self.out.flush();
        secret.ok().flatten()
    }
}

/// One line from the terminal, which is in raw mode, so nothing typed or
/// pasted is shown. Enter ends it; Ctrl-C or Ctrl-D gives `None`.
fn read_secret() -> std::io::Result<Option<String>> {
    use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    let mut secret = String::new();
    loop {
        let key = match event::read()? {
            Event::Key(key) if key.kind != KeyEventKind::Release => key,
            Event::Paste(text) => {
                secret.push_str(text.trim_end_matches(['\r', '\n']));
                continue;
            }
            _ => continue,
        };
        let control = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Enter => return Ok(Some(secret)),
            // A line feed in raw mode reads as Ctrl-J (a pasted key's end, a pty's Enter).
            KeyCode::Char('j' | 'm') if control => return Ok(Some(secret)),
            KeyCode::Char('c' | 'd') if control => return Ok(None),
            KeyCode::Char('u') if control => secret.clear(),
            KeyCode::Backspace => {
                secret.pop();
            }
            KeyCode::Char(c) if !control => secret.push(c),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// Answers from a script; records what was said and asked.
    struct Script {
        answers: VecDeque<String>,
        shown: String,
    }

    impl Script {
        fn new(answers: &[&str]) -> Self {
            Self { answers: answers.iter().map(|a| (*a).to_owned()).collect(), shown: String::new() }
        }
    }

    impl Prompter for Script {
        fn say(&mut self, text: &str) {
            self.shown.push_str(text);
            self.shown.push('\n');
        }
        fn ask(&mut self, question: &str) -> Option<String> {
            self.shown.push_str(question);
            let answer = self.answers.pop_front()?;
            self.shown.push_str(&answer);
            self.shown.push('\n');
            Some(answer)
        }
        fn ask_secret(&mut self, question: &str) -> Option<String> {
            self.shown.push_str(question);
            self.shown.push('\n');
            self.answers.pop_front()
        }
    }

    fn preset_server(preset: &str) -> Server {
        let model = preset_model(preset).unwrap();
        Server {
            preset: Some(preset.to_owned()),
            key: preset.to_owned(),
            base_url: model.base_url.clone(),
            preset_model: Some(model.model.clone()),
            preset_key_env: model.api_key_env.clone(),
            found: None,
        }
    }

    #[test]
    fn every_choice_renders_a_config_that_parses() {
        let env = |_: &str| None;
        for preset in super::super::init::presets() {
            let server = preset_server(preset);
            for key in [Key::None, Key::Env("MY_KEY".into()), Key::Stored(ApiKey::new("sk-x"))] {
                let text = render(&server, "some-other-model", &key);
                let config = Config::from_toml_str(&text, Path::new("setup.toml"), &env)
                    .unwrap_or_else(|err| panic!("{preset} {key:?}: {err}\n{text}"));
                let model = &config.models[preset];
                assert_eq!((config.default_model.as_str(), model.model.as_str()), (preset, "some-other-model"));
                assert_eq!(model.context_window, None, "{preset}: the preset's window is its own model's");
                match &key {
                    Key::Env(name) => assert_eq!(model.api_key_env.as_deref(), Some(name.as_str())),
                    Key::Stored(_) => assert!(model.api_key_stored && model.api_key_env.is_none()),
                    Key::None => assert!(model.api_key_env.is_none() && !model.api_key_stored),
                }
                assert!(!text.contains("sk-x"), "the key never goes in the config");
                assert!(text.starts_with("# Written by `lathe setup`"), "{text}");
            }
        }
        let openai = preset_server("openai");
        let same = render(&openai, openai.preset_model.as_deref().unwrap(), &Key::None);
        let config = Config::from_toml_str(&same, Path::new("setup.toml"), &env).unwrap();
        assert_eq!(config.models["openai"].context_window, Some(1_050_000), "the preset's own model keeps its window");
        let custom = Server {
            preset: None,
            key: "custom".into(),
            base_url: "http://gpu.lan:8000/v1".into(),
            preset_model: None,
            preset_key_env: None,
            found: None,
        };
        let text = render(&custom, "qwen\"3", &Key::Stored(ApiKey::new("k")));
        let config = Config::from_toml_str(&text, Path::new("setup.toml"), &env).unwrap();
        assert_eq!(config.models["custom"].model, "qwen\"3");
        assert_eq!(config.models["custom"].base_url, "http://gpu.lan:8000/v1");
    }

    #[tokio::test]
    async fn an_existing_config_is_never_replaced_without_a_yes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "not toml at all [").unwrap();
        let env = |_: &str| None;
        let cx =
            Context { path: Some(path.clone()), user_dir: Some(dir.path().to_path_buf()), env: &env, discovery: None };
        for answers in [&["n"][..], &[""][..], &[][..]] {
            let mut ask = Script::new(answers);
            assert!(matches!(run(&mut ask, &cx).await, Err(SetupError::Stopped)), "{answers:?}: {}", ask.shown);
            assert!(ask.shown.contains("exists. Replace it"), "{}", ask.shown);
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not toml at all [");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "nothing else written");
        // A working config that the user keeps is a success.
        std::fs::write(&path, "[models.m]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n").unwrap();
        let mut ask = Script::new(&["no"]);
        assert_eq!(run(&mut ask, &cx).await.unwrap(), Outcome::Kept(path.clone()));
    }

    #[test]
    fn the_backup_sits_beside_the_config() {
        assert_eq!(backup_of(Path::new("/a/config.toml")), Path::new("/a/config.toml.bak"));
    }

    #[test]
    fn the_server_menu_offers_found_servers_first_then_presets_then_a_url() {
        let found = LocalServer {
            kind: crate::discover::ServerKind::Ollama,
            port: 11434,
            base_url: "http://127.0.0.1:11434/v1".into(),
            models: vec![crate::discover::LocalModel { id: "qwen3:8b".into(), tools: Some(true), loaded: true }],
        };
        let mut ask = Script::new(&[""]);
        let server = choose_server(&mut ask, std::slice::from_ref(&found)).unwrap();
        assert_eq!((server.key.as_str(), server.found.is_some()), ("ollama", true), "Enter takes the found server");
        assert!(
            ask.shown.contains(" 1. Ollama at http://127.0.0.1:11434 (qwen3:8b takes tools) (running here)"),
            "{}",
            ask.shown
        );
        let last = super::super::init::presets().len() + 2;
        let mut ask = Script::new(&["99", &last.to_string(), "ftp://x", "http://10.0.0.2:8000/v1/"]);
        let server = choose_server(&mut ask, std::slice::from_ref(&found)).unwrap();
        assert_eq!((server.key.as_str(), server.base_url.as_str()), ("custom", "http://10.0.0.2:8000/v1"));
        assert!(ask.shown.contains("Type a number") && ask.shown.contains("not an http://"), "{}", ask.shown);
    }

    #[test]
    fn a_pasted_key_a_variable_or_none() {
        let env = |_: &str| None;
        let cx = Context { path: None, user_dir: Some(PathBuf::from("/tmp/x")), env: &env, discovery: None };
        let server = preset_server("openrouter");
        let mut ask = Script::new(&["sk-pasted"]);
        assert!(matches!(choose_key(&mut ask, &cx, &server).unwrap(), Key::Stored(k) if k.expose() == "sk-pasted"));
        assert!(!ask.shown.contains("sk-pasted"), "never shown: {}", ask.shown);
        let mut ask = Script::new(&[""]);
        assert!(matches!(choose_key(&mut ask, &cx, &server).unwrap(), Key::Env(n) if n == "OPENROUTER_API_KEY"));
        let mut ask = Script::new(&["$MINE"]);
        assert!(matches!(choose_key(&mut ask, &cx, &server).unwrap(), Key::Env(n) if n == "MINE"));
        let mut ask = Script::new(&[""]);
        assert!(matches!(choose_key(&mut ask, &cx, &preset_server("ollama")).unwrap(), Key::None));
    }
}
