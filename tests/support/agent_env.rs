//! How an agent under test is configured and started, in the pieces that
//! do not need lathe's library: its environment (inherited, less the
//! developer's `LATHE_*` and `OPENAI_*`, with a temporary home) and its
//! config file pointing at the mock model. Shared by the test suites, the
//! e2e benchmark and the official-SDK package (`tests/official-sdk`), which
//! links no lathe code.

use std::path::{Path, PathBuf};

/// Environment variables removed from the inherited environment so the
/// developer's own settings cannot leak into a test (a test may set them again
/// through `envs`).
const SCRUBBED_ENV_PREFIXES: &[&str] = &["LATHE_", "OPENAI_"];

/// Hosts that must bypass any proxy configured in the environment.
const LOOPBACK: &str = "127.0.0.1,localhost,::1";

/// Whether an inherited variable is withheld from the agent.
pub fn scrubbed(name: &str) -> bool {
    SCRUBBED_ENV_PREFIXES.iter().any(|prefix| name.starts_with(prefix))
}

/// The variables an agent gets on top of the (scrubbed) inherited
/// environment, later entries winning: `HOME` and `XDG_CONFIG_HOME` in
/// `home` (so no user config leaks in; on Windows `USERPROFILE` and
/// `APPDATA`), sessions saved under `home`,
/// loopback exempt from any proxy (`NO_PROXY`), no looking for model
/// servers running on the machine (`LATHE_DISCOVER=off`: a test that wants
/// it names its mock servers' ports), then `envs`. The one description of
/// an agent's environment, for the binary and in-process.
pub fn environment(home: &Path, envs: &[(&str, &str)]) -> Vec<(String, String)> {
    let path = |path: PathBuf| path.to_string_lossy().into_owned();
    let mut vars = vec![
        ("HOME".to_owned(), path(home.to_path_buf())),
        ("XDG_CONFIG_HOME".to_owned(), path(home.join(".config"))),
        // Sessions are saved under the temporary home, never the developer's.
        ("XDG_DATA_HOME".to_owned(), path(home.join(".local").join("share"))),
        // The mock model server is on loopback; never route it via a proxy.
        ("NO_PROXY".to_owned(), LOOPBACK.to_owned()),
        ("no_proxy".to_owned(), LOOPBACK.to_owned()),
        // Whatever runs on this machine's usual model-server ports is not the test's.
        ("LATHE_DISCOVER".to_owned(), "off".to_owned()),
    ];
    // Windows' folders: the profile (`~`), `%APPDATA%` (config) and
    // `%LOCALAPPDATA%`, all under `home`; sessions where the tests look for
    // them on every system (named: Windows has no `XDG_DATA_HOME`).
    if cfg!(windows) {
        vars.push(("USERPROFILE".to_owned(), path(home.to_path_buf())));
        vars.push(("APPDATA".to_owned(), path(home.join("AppData").join("Roaming"))));
        vars.push(("LOCALAPPDATA".to_owned(), path(home.join("AppData").join("Local"))));
        vars.push(("LATHE_DATA_DIR".to_owned(), path(home.join(".local").join("share").join("lathe"))));
    }
    vars.extend(envs.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())));
    vars
}

/// lathe's config folder (the user's rule file, `config.toml`) under a test's
/// `home`, as [`environment`] moves it: `$XDG_CONFIG_HOME/lathe`, on Windows
/// `%APPDATA%\lathe`.
pub fn config_dir(home: &Path) -> PathBuf {
    if cfg!(windows) { home.join("AppData").join("Roaming").join("lathe") } else { home.join(".config").join("lathe") }
}

/// Writes `dir/config.toml` pointing the default model `mock` at `base_url`,
/// followed by `extra_toml` verbatim, and returns its path (pass it to the
/// agent as `--config <path>`).
pub fn write_config(dir: &Path, base_url: &str, extra_toml: &str) -> PathBuf {
    let path = dir.join("config.toml");
    let base_url = toml_string(base_url);
    let config = format!(
        "default_model = \"mock\"\n\
         [models.mock]\n\
         base_url = {base_url}\n\
         model = \"mock-model\"\n\
         context_window = 32768\n\
         max_output_tokens = 1024\n\
         {extra_toml}"
    );
    std::fs::write(&path, config).expect("write the test config");
    path
}

/// `text` as a TOML basic string, quoted and escaped.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}
