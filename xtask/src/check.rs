//! `cargo xtask check`: what a dist directory must be before it is
//! published.
//!
//! - `SHA256SUMS` lists every archive of this version, and each sum matches;
//! - `agent.json` is this version's, names only archives that are here, each
//!   with its true SHA-256, a URL with `/v<version>/` and no `/latest/`, and
//!   a `cmd` that is an executable file in that archive; `icon.svg` passes
//!   the registry's rules;
//! - each archive holds exactly the executable and the documents;
//! - for each target whose binaries run on this host: a static target's
//!   binary has no `NEEDED` entry and no interpreter (`readelf`); with an
//!   empty environment it prints the `--version` line of this commit and
//!   target; and the `dist` integration tests (one ACP turn with an empty
//!   environment: initialize, session/new, a prompt that reads, writes and
//!   runs a command) pass against it. An aarch64 Linux binary is started
//!   under `qemu-aarch64` for `--version` when that is installed; the
//!   Windows mingw build under `wine` for both (`.ci/install-cross windows`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};
use clap::Args;
use serde_json::Value;

use crate::archive::{self, Entry};
use crate::dist::{DOCS, archives_in};
use crate::targets::{Format, Target};
use crate::{Project, Source, cargo, registry, sha256_hex};

/// `cargo xtask check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The dist directory. Default: target/dist.
    #[arg(long, value_name = "DIR")]
    dist: Option<PathBuf>,
    /// Skip the ACP turn (the `dist` integration tests, which cargo builds
    /// first if they are not built).
    #[arg(long)]
    no_turn: bool,
}

pub fn run(args: &CheckArgs) -> anyhow::Result<()> {
    let project = Project::read()?;
    let source = Source::read(&project.root)?;
    let dist = args.dist.clone().unwrap_or_else(|| project.default_dist());
    let version = project.package.version.clone();
    let archives = archives_in(&dist, &version)?;
    ensure!(!archives.is_empty(), "no lathe {version} archives in {}", dist.display());

    check_sums(&dist, &archives)?;
    let mut contents = Vec::new();
    for (name, target) in &archives {
        let bytes = std::fs::read(dist.join(name)).with_context(|| format!("reading {name}"))?;
        let entries = match target.format {
            Format::TarGz => archive::read_tar_gz(&bytes),
            Format::Zip => archive::read_zip(&bytes),
        }
        .with_context(|| format!("reading {name}"))?;
        let mut names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        let mut expected: Vec<&str> = DOCS.iter().copied().chain([target.exe()]).collect();
        expected.sort_unstable();
        ensure!(names == expected, "{name} holds {names:?}, not {expected:?}");
        contents.push((name.clone(), *target, sha256_hex(&bytes), entries));
    }
    check_entry(&dist, &version, &contents)?;
    eprintln!("xtask check: SHA256SUMS, agent.json and icon.svg agree with {} archive(s)", contents.len());

    for (name, target, _, entries) in &contents {
        check_binary(&project, &source, &version, name, target, entries, args.no_turn)?;
    }
    eprintln!("xtask check: all checks passed");
    Ok(())
}

fn check_sums(dist: &Path, archives: &[(String, &Target)]) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(dist.join("SHA256SUMS")).context("reading SHA256SUMS")?;
    let mut listed = Vec::new();
    for line in text.lines() {
        let (sum, name) = line.split_once("  ").with_context(|| format!("SHA256SUMS: a bad line {line:?}"))?;
        let bytes = std::fs::read(dist.join(name)).with_context(|| format!("SHA256SUMS lists {name}"))?;
        ensure!(sha256_hex(&bytes) == sum, "SHA256SUMS: {name} does not match");
        listed.push(name.to_owned());
    }
    for (name, _) in archives {
        ensure!(listed.contains(name), "SHA256SUMS does not list {name}");
    }
    Ok(())
}

/// The registry entry against the archives (see the module's doc).
fn check_entry(dist: &Path, version: &str, contents: &[(String, &Target, String, Vec<Entry>)]) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(dist.join("agent.json")).context("reading agent.json")?;
    let entry: Value = serde_json::from_str(&text).context("agent.json is not JSON")?;
    ensure!(entry["id"] == registry::ID, "agent.json: id {}", entry["id"]);
    ensure!(entry["version"] == version, "agent.json: version {}, not {version}", entry["version"]);
    let binary = entry["distribution"]["binary"].as_object().context("agent.json: no distribution.binary")?;
    ensure!(!binary.is_empty(), "agent.json: no platform");
    for (platform, spec) in binary {
        let url = spec["archive"].as_str().with_context(|| format!("agent.json: {platform} has no archive"))?;
        ensure!(!url.contains("/latest/"), "agent.json: {platform}'s URL has /latest/: {url}");
        ensure!(url.contains(&format!("/v{version}/")), "agent.json: {platform}'s URL is not of v{version}: {url}");
        let file = url.rsplit('/').next().unwrap_or_default();
        let Some((_, target, sum, entries)) = contents.iter().find(|(name, ..)| name == file) else {
            bail!("agent.json: {platform} names {file}, which is not in {}", dist.display());
        };
        ensure!(target.platform == platform, "agent.json: {platform} names {file}, a {} archive", target.platform);
        ensure!(spec["sha256"] == sum.as_str(), "agent.json: {platform}'s sha256 is not {file}'s");
        let cmd = spec["cmd"].as_str().with_context(|| format!("agent.json: {platform} has no cmd"))?;
        let inside = cmd.strip_prefix("./").unwrap_or(cmd);
        let exe = entries.iter().find(|e| e.name == inside);
        ensure!(
            exe.is_some_and(|e| e.mode & 0o111 != 0 || target.is_windows()),
            "agent.json: {platform}'s cmd {cmd} is not an executable in {file}"
        );
    }
    let icon = std::fs::read_to_string(dist.join("icon.svg")).context("reading icon.svg")?;
    let problems = registry::icon_problems(&icon);
    ensure!(problems.is_empty(), "icon.svg: {}", problems.join("; "));
    // Every platform of an archive here is in the entry.
    for (_, target, ..) in contents {
        ensure!(binary.contains_key(target.platform), "agent.json has no {}", target.platform);
    }
    Ok(())
}

/// The binary of one archive, where this host can run it.
fn check_binary(
    project: &Project,
    source: &Source,
    version: &str,
    name: &str,
    target: &Target,
    entries: &[Entry],
    no_turn: bool,
) -> anyhow::Result<()> {
    let qemu =
        (!target.runs_here() && target.triple == "aarch64-unknown-linux-musl").then(|| which("qemu-aarch64")).flatten();
    let wine = (!target.runs_here()).then(|| target.runner_here().and_then(which)).flatten();
    if !target.runs_here() && qemu.is_none() && wine.is_none() {
        eprintln!("xtask check: {name}: not run (this host does not run {} binaries)", target.triple);
        return Ok(());
    }
    let dir = scratch_dir(target.triple)?;
    for entry in entries {
        let path = dir.join(&entry.name);
        std::fs::write(&path, &entry.data).with_context(|| format!("writing {}", path.display()))?;
        set_mode(&path, entry.mode)?;
    }
    let binary = dir.join(target.exe());
    if target.is_static() {
        check_static(&binary)?;
        eprintln!("xtask check: {name}: static (readelf: no NEEDED, no interpreter)");
    }
    let mut command = match qemu.as_ref().or(wine.as_ref()) {
        Some(runner) => {
            let mut command = Command::new(runner);
            command.arg(&binary);
            command
        }
        None => Command::new(&binary),
    };
    command.env_clear();
    if wine.is_some() {
        // What wine itself needs; the Windows side gets wine's defaults.
        command.envs(std::env::vars_os().filter(|(name, _)| {
            let name = name.to_string_lossy();
            name.starts_with("WINE") || name == "HOME" || name == "PATH"
        }));
    }
    let output = command.arg("--version").output().with_context(|| format!("running {}", binary.display()))?;
    let line = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let expected = source.version_line(version, target.triple);
    ensure!(
        output.status.success() && line == expected,
        "{name}: `env -i lathe --version` said {line:?}, not {expected:?}"
    );
    let under = match (&qemu, &wine) {
        (Some(_), _) => " (under qemu)",
        (None, Some(_)) => " (under wine)",
        (None, None) => "",
    };
    eprintln!("xtask check: {name}: env -i lathe --version: {line}{under}");
    if no_turn || qemu.is_some() {
        return cleanup(&dir);
    }
    // `--workspace`, as .ci/run builds the tests: the same features, so
    // nothing is rebuilt.
    let status = cargo()
        .args(["test", "--locked", "--workspace", "--test", "all", "--", "dist::"])
        .current_dir(&project.root)
        .env("LATHE_DIST_BIN", &binary)
        .env("LATHE_DIST_TARGET", target.triple)
        .env("LATHE_DIST_RUNNER", wine.as_deref().unwrap_or(Path::new("")))
        .status()
        .context("running cargo test")?;
    ensure!(status.success(), "{name}: the dist tests (an ACP turn with an empty environment) failed");
    eprintln!("xtask check: {name}: one ACP turn (read, write, command) with an empty environment{under}");
    cleanup(&dir)
}

/// `readelf -d` lists no `NEEDED` and `readelf -l` no `INTERP`.
fn check_static(binary: &Path) -> anyhow::Result<()> {
    let readelf = |flag: &str| -> anyhow::Result<String> {
        let output = Command::new("readelf").arg(flag).arg(binary).output().context("running readelf (binutils)")?;
        ensure!(output.status.success(), "readelf {flag}: {}", String::from_utf8_lossy(&output.stderr));
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let dynamic = readelf("-d")?;
    let needed: Vec<&str> = dynamic.lines().filter(|line| line.contains("(NEEDED)")).collect();
    ensure!(needed.is_empty(), "{} needs shared libraries:\n{}", binary.display(), needed.join("\n"));
    let segments = readelf("-l")?;
    ensure!(!segments.contains("INTERP"), "{} names a dynamic loader (INTERP)", binary.display());
    Ok(())
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join(program)).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|candidate| candidate.is_file())
}

fn scratch_dir(label: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("lathe-check-{}-{label}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn cleanup(dir: &Path) -> anyhow::Result<()> {
    std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).context("chmod")
}

#[cfg(not(unix))]
fn set_mode(_: &Path, _: u32) -> anyhow::Result<()> {
    Ok(())
}
