//! `lathe init`: writes a commented config file for one provider preset to
//! the default location (or `--config`), refusing to overwrite anything.
//!
//! The text is cut out of `config.example.toml` itself (compiled in), so a
//! preset `init` writes cannot drift from the documented one: every
//! paragraph of the example is kept except the other presets' `[models.*]`
//! tables, and `default_model` names the chosen preset. This module knows
//! the example's layout (paragraphs separated by blank lines, one
//! `[models.<name>]` table per preset paragraph) and nothing else.

use std::path::{Path, PathBuf};

/// The documented example, the source of every preset.
pub const EXAMPLE: &str = include_str!("../../config.example.toml");

/// `lathe init`'s arguments.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The provider preset to configure: one of the `[models.*]` tables of
    /// config.example.toml (ollama, openai, openrouter, vllm, llamacpp,
    /// lmstudio, deepseek). Default: the example's default_model.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Print the file to stdout instead of writing it.
    #[arg(long)]
    pub print: bool,
}

/// Why `init` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// No such preset.
    #[error("there is no preset {name:?}; choose one of: {}", .known.join(", "))]
    UnknownPreset {
        /// What was asked for.
        name: String,
        /// What exists.
        known: Vec<String>,
    },
    /// A file is already there.
    #[error("{} already exists; lathe init never overwrites a config (edit it, or move it away first)", .0.display())]
    Exists(PathBuf),
    /// No default location (no HOME, no XDG_CONFIG_HOME).
    #[error("there is no default config location (HOME and XDG_CONFIG_HOME are unset); pass --config PATH")]
    NoLocation,
    /// The disk said no.
    #[error("cannot write {}: {source}", .path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The example's paragraphs (separated by blank lines), each with the name
/// of the preset it defines, if it defines one.
fn paragraphs(example: &str) -> Vec<(Option<&str>, String)> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in example.lines().chain(std::iter::once("")) {
        if !line.trim().is_empty() {
            current.push(line);
        } else if !current.is_empty() {
            let preset = current.iter().find_map(|line| preset_name(line));
            out.push((preset, current.join("\n")));
            current.clear();
        }
    }
    out
}

/// `ollama` for the line `[models.ollama]`.
fn preset_name(line: &str) -> Option<&str> {
    line.trim().strip_prefix("[models.")?.strip_suffix(']').map(str::trim)
}

/// The presets the example defines, in its order.
pub fn presets() -> Vec<&'static str> {
    EXAMPLE.lines().filter_map(preset_name).collect()
}

/// The preset the example starts sessions with (its `default_model`).
fn example_default() -> Option<&'static str> {
    EXAMPLE.lines().find_map(|line| {
        let value = line.strip_prefix("default_model")?.trim_start().strip_prefix('=')?;
        Some(value.trim().trim_matches('"'))
    })
}

/// The config file for `preset`: the example with only that preset's
/// model, which is also the default.
pub fn render(preset: &str) -> Result<String, InitError> {
    let paragraph = preset_paragraph(preset)?;
    Ok(render_one(&format!("lathe init --preset {preset}"), preset, &paragraph))
}

/// The paragraph of the example that defines `preset` (its comments and
/// its `[models.<preset>]` table).
pub fn preset_paragraph(preset: &str) -> Result<String, InitError> {
    paragraphs(EXAMPLE).into_iter().find(|(defines, _)| *defines == Some(preset)).map(|(_, text)| text).ok_or_else(
        || InitError::UnknownPreset {
            name: preset.to_owned(),
            known: presets().iter().map(|n| (*n).to_owned()).collect(),
        },
    )
}

/// A config file with one model: every paragraph of the example except
/// the presets, `model` (a paragraph defining `[models.<key>]`) where the
/// presets were, and `default_model` naming `key`. `written_by` is the
/// command, for the header.
pub fn render_one(written_by: &str, key: &str, model: &str) -> String {
    let mut text = format!(
        "# Written by `{written_by}` (lathe {}). The other presets and\n\
         # every key are in config.example.toml and the README.\n\n",
        env!("CARGO_PKG_VERSION")
    );
    let mut placed = false;
    for (defines, paragraph) in paragraphs(EXAMPLE) {
        let paragraph = match defines {
            Some(_) if placed => continue,
            Some(_) => {
                placed = true;
                model.to_owned()
            }
            None => paragraph
                .lines()
                .map(|line| match line.starts_with("default_model") {
                    true => format!("default_model = {}", toml_string(key)),
                    false => line.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        };
        text.push_str(&paragraph);
        text.push_str("\n\n");
    }
    text.truncate(text.trim_end().len());
    text.push('\n');
    text
}

/// `text` as a TOML string, quoted and escaped.
pub fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// Runs `lathe init`: writes the preset's file to `path` (the located
/// default when `None`), telling `out` where; or prints it with `--print`.
pub fn run(args: &InitArgs, path: Option<&Path>, out: &mut dyn std::io::Write) -> Result<(), InitError> {
    let preset: &str = match args.preset.as_deref() {
        Some(preset) => preset,
        None => example_default().unwrap_or("ollama"),
    };
    let text = render(preset)?;
    if args.print {
        return out.write_all(text.as_bytes()).map_err(|source| InitError::Io { path: "stdout".into(), source });
    }
    let path = path.map(Path::to_path_buf).ok_or(InitError::NoLocation)?;
    write_new(&path, &text)?;
    let key_hint = text
        .lines()
        .find_map(|line| line.strip_prefix("api_key_env = "))
        .map(|name| format!(" Set {} in your environment;", name.trim_matches('"')))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "lathe: wrote {} (preset {preset}).{key_hint} then run `lathe doctor` to check it.",
        path.display()
    );
    Ok(())
}

/// Writes a new config file, mode 0600, atomically; an existing file (or
/// a link to one) is never touched.
pub fn write_new(path: &Path, text: &str) -> Result<(), InitError> {
    match crate::credentials::write_private(path, text.as_bytes(), crate::credentials::Replace::No) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Err(InitError::Exists(path.to_path_buf())),
        Err(source) => Err(InitError::Io { path: path.to_path_buf(), source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn every_preset_parses_and_is_the_only_model() {
        let presets = presets();
        assert_eq!(presets, ["ollama", "openai", "openrouter", "vllm", "llamacpp", "lmstudio", "deepseek"]);
        for preset in presets {
            let text = render(preset).unwrap();
            let config = Config::from_toml_str(&text, Path::new("init.toml"), &|_| None)
                .unwrap_or_else(|err| panic!("{preset}: {err}\n{text}"));
            assert_eq!(config.default_model, preset);
            assert_eq!(config.models.keys().collect::<Vec<_>>(), [preset], "{preset}");
            // The preset's own comments and every settings section came along.
            for kept in ["[network]", "[sandbox]", "# Models. Each [models.<name>]", "[mcp_servers.<name>]"] {
                assert!(text.contains(kept), "{preset} lacks {kept}");
            }
        }
        assert!(render("openrouter").unwrap().contains("X-OpenRouter-Title"));
        assert!(!render("openrouter").unwrap().contains("[models.ollama]"));
    }

    #[test]
    fn an_unknown_preset_names_the_known_ones() {
        let err = render("gemini").unwrap_err().to_string();
        assert!(err.contains("gemini") && err.contains("openrouter"), "{err}");
    }

    #[test]
    fn writes_once_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conf/lathe/config.toml");
        let args = InitArgs { preset: Some("deepseek".into()), print: false };
        let mut said = Vec::new();
        run(&args, Some(&path), &mut said).unwrap();
        let said = String::from_utf8(said).unwrap();
        assert!(said.contains(&path.display().to_string()) && said.contains("DEEPSEEK_API_KEY"), "{said}");
        let written = std::fs::read_to_string(&path).unwrap();
        assert_eq!(written, render("deepseek").unwrap());

        std::fs::write(&path, "mine").unwrap();
        let err = run(&args, Some(&path), &mut Vec::new()).unwrap_err();
        assert!(matches!(err, InitError::Exists(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "mine", "left alone");
    }
}
