//! The command line: help, version, config lookup and the one-line error a
//! bad config file produces.

use std::process::Command;

fn lathe() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lathe"));
    command.env_remove("LATHE_CONFIG").env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL");
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
    assert_eq!(String::from_utf8(version.stdout).unwrap().trim(), format!("lathe {}", env!("CARGO_PKG_VERSION")));
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
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    std::fs::create_dir_all(xdg.join("lathe")).unwrap();
    std::fs::write(xdg.join("lathe/config.toml"), "[models.m]\nbase_url = \"http://x/v1\"\nmodel = 1\n").unwrap();
    // The XDG file is found (and is broken, which proves it was read).
    let output = lathe()
        .env("XDG_CONFIG_HOME", &xdg)
        .env("HOME", dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("xdg/lathe/config.toml"));
    // LATHE_CONFIG wins over XDG.
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[models.m]\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n").unwrap();
    let output = lathe()
        .env("XDG_CONFIG_HOME", &xdg)
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
