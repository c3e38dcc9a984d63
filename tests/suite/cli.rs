//! The command line: help, version, config lookup, the one-line error a
//! bad config file produces, and the greeting on a terminal.

use std::process::Command;

fn lathe() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lathe"));
    command.env_remove("LATHE_CONFIG").env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL");
    // What runs on this machine's model-server ports is not the test's business.
    command.env("LATHE_DISCOVER", "off");
    command
}

#[test]
fn help_and_version() {
    let help = lathe().arg("--help").output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).unwrap();
    for flag in ["--config", "--log-level", "--log-file", "--version"] {
        assert!(text.contains(flag), "--help mentions {flag}:\n{text}");
    }
    let version = lathe().arg("--version").output().unwrap();
    assert!(version.status.success());
    let line = String::from_utf8(version.stdout).unwrap();
    assert_eq!(line.trim(), format!("lathe {}", lathe::build_info::SUMMARY));
    // The version, the commit, the target and how it was built, in words a
    // bug report can carry.
    let built = match lathe::build_info::DATE {
        "" => "built from source".to_owned(),
        date => format!("built {date}"),
    };
    let (before, after) =
        (format!("lathe {} (commit ", env!("CARGO_PKG_VERSION")), format!(", {}, {built})", lathe::build_info::TARGET));
    match expected_commit() {
        Some(commit) => assert_eq!(line.trim(), format!("{before}{commit}{after}")),
        None => {
            crate::support::testing::skipped(
                "the commit --version names",
                "no git runs here to say HEAD (wine has no Windows git); the rest of the line is checked",
            );
            assert!(line.trim().starts_with(&before) && line.trim().ends_with(&after), "{line}");
        }
    }
    assert!(lathe::build_info::TARGET.contains('-'), "a target triple: {}", lathe::build_info::TARGET);
}

/// The commit `--version` should name: HEAD when this checkout is a git work
/// tree of its own, `unknown` from a tarball; `None` when no git can be run
/// to tell.
fn expected_commit() -> Option<String> {
    let dir = env!("CARGO_MANIFEST_DIR");
    Command::new("git").arg("--version").output().ok()?;
    let git = |args: &[&str]| {
        let output = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let top = git(&["rev-parse", "--show-toplevel"]).map(std::path::PathBuf::from);
    let ours = top.and_then(|top| top.canonicalize().ok()) == std::path::Path::new(dir).canonicalize().ok();
    Some(match ours.then(|| git(&["rev-parse", "--short=12", "HEAD"])).flatten() {
        Some(commit) => commit,
        None => "unknown".to_owned(),
    })
}

#[test]
fn a_bad_config_is_one_line_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"m\"\ncontext_window = \"huge\"\n")
        .unwrap();
    let output = lathe().arg("--config").arg(&path).stdin(std::process::Stdio::null()).output().unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "nothing on stdout");
    let stderr = String::from_utf8(output.stderr).unwrap();
    let line = stderr.trim_end();
    assert!(!line.contains('\n'), "one line: {stderr:?}");
    assert!(line.contains(&format!("{}:4", path.display())), "{line}");
    assert!(line.contains("models.m.context_window"), "{line}");
}

#[test]
fn a_missing_explicit_config_is_an_error() {
    let output =
        lathe().args(["--config", "/nonexistent/lathe.toml"]).stdin(std::process::Stdio::null()).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("/nonexistent/lathe.toml") && stderr.contains("cannot read"), "{stderr}");
}

#[test]
fn config_lookup_uses_lathe_config_then_xdg() {
    // The variable that moves the config folder: `%APPDATA%` on Windows.
    let folder_variable = if cfg!(windows) { "APPDATA" } else { "XDG_CONFIG_HOME" };
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    std::fs::create_dir_all(xdg.join("lathe")).unwrap();
    std::fs::write(xdg.join("lathe/config.toml"), "[models.m]\nbase_url = \"http://x/v1\"\nmodel = 1\n").unwrap();
    // The XDG file is found (and is broken, which proves it was read).
    let output =
        lathe().env(folder_variable, &xdg).env("HOME", dir.path()).stdin(std::process::Stdio::null()).output().unwrap();
    assert!(!output.status.success());
    let named = std::path::Path::new("xdg").join("lathe").join("config.toml");
    assert!(String::from_utf8_lossy(&output.stderr).contains(&*named.to_string_lossy()));
    // LATHE_CONFIG wins over XDG.
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n").unwrap();
    let output = lathe()
        .env(folder_variable, &xdg)
        .env("LATHE_CONFIG", &good)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn logs_never_touch_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("lathe.log");
    let output = lathe()
        .args(["--log-level", "trace", "--log-file"])
        .arg(&log)
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(output.stdout.is_empty(), "stdout is for JSON-RPC only: {:?}", String::from_utf8_lossy(&output.stdout));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("lathe"), "{logged}");
}

/// Serving ACP, lathe logs warnings and errors only unless told otherwise
/// (issue 29): editors show every stderr line to the user (agent-shell as a
/// notice between the prompt and the reply). `--log-level` and `RUST_LOG`
/// still say more.
#[test]
fn serving_acp_logs_warnings_only_by_default() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    // A model session/new accepts (nothing listens there; nothing asks it).
    let config = crate::support::write_config(dir.path(), "http://127.0.0.1:9/v1", "");
    let serve = |extra: &[&str], rust_log: Option<&str>| {
        let mut command = lathe();
        command.arg("--config").arg(&config);
        match rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let mut child = command
            .args(extra)
            // Windows' folders too (`%APPDATA%`, `%LOCALAPPDATA%`), in `dir`.
            .envs(crate::support::agent_env::environment(dir.path(), &[]))
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .env("XDG_DATA_HOME", dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": 1}});
        // JSON by serde: a Windows path's `\` is escaped.
        let new = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
            "params": {"cwd": dir.path(), "mcpServers": []}});
        let lines = format!("{initialize}\n{new}\n");
        child.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("\"id\":1,\"result\"") && stdout.contains("\"id\":2,\"result\""), "{stdout}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let quiet = serve(&[], None);
    assert!(!quiet.contains("INFO"), "{quiet}");
    let told = serve(&["--log-level", "info"], None);
    assert!(told.contains("INFO") && told.contains("session created"), "{told}");
    let told = serve(&[], Some("lathe=info"));
    assert!(told.contains("INFO") && told.contains("session created"), "RUST_LOG: {told}");
}

/// `--log-file` is created 0600 (issue 29), like every other file lathe
/// writes: logs can quote prompts, paths and what servers said.
#[test]
fn the_log_file_is_private() {
    if !crate::support::testing::modes() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("lathe.log");
    let output = lathe()
        .args(["--log-level", "trace", "--log-file"])
        .arg(&log)
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success());
    let mode = crate::support::testing::mode(&log).unwrap() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
}

/// Started by hand on a terminal, lathe says on stderr what it is, which
/// config and model it found and how to connect an editor, then serves the
/// terminal. Under a pipe (an editor) it says nothing of the kind. The
/// terminal is a pseudo-terminal made by util-linux `script`.
#[cfg(target_os = "linux")]
#[test]
fn a_terminal_gets_a_greeting_and_is_served() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let command = format!("{} --data-dir {}", env!("CARGO_BIN_EXE_lathe"), dir.path().join("data").display());
    let mut script = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_remove("LATHE_CONFIG")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("LATHE_DISCOVER", "off")
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux `script` runs lathe on a pseudo-terminal");
    let mut keyboard = script.stdin.take().unwrap();
    // A request typed on the terminal, then Ctrl-D at the start of a line (end of input).
    keyboard
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n\x04")
        .unwrap();
    drop(keyboard);
    let output = script.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{:?}\n{screen}", output.status);
    for expected in [
        &format!("lathe {} - a coding agent", env!("CARGO_PKG_VERSION")) as &str,
        "model:  none configured",
        "\"agent_servers\"",
        "Now serving ACP on this terminal",
        "\"agentInfo\":{",
    ] {
        assert!(screen.contains(expected), "the terminal shows {expected:?}:\n{screen}");
    }

    let piped = lathe()
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(!stderr.contains("Now serving ACP on this terminal"), "no greeting for an editor: {stderr}");
}
