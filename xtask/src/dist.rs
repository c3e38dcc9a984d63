//! `cargo xtask dist`: the release build.
//!
//! Reproducible: the same commit gives the same archives, byte for byte,
//! wherever the checkout and cargo's home are:
//! - `SOURCE_DATE_EPOCH` is the commit's time (unless set): the build date
//!   `--version` prints and every archive entry's mtime;
//! - `LATHE_BUILD_COMMIT` is the commit (`+dirty` after it for uncommitted
//!   changes, which `--allow-dirty` must allow);
//! - rustc gets `--remap-path-prefix` for cargo's home, the checkout and the
//!   target directory (file names in panics and line tables), and a C
//!   compiler that takes gcc's flags `-ffile-prefix-map` for the same;
//! - `--locked`: the lock file's versions, nothing resolved anew;
//! - archives: sorted entries, fixed modes and owners (see `archive`); text
//!   files with LF line ends whatever the checkout's setting.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;

use crate::archive::{self, Entry};
use crate::registry::{self, Archive};
use crate::targets::{Builder, Format, TARGETS, Target};
use crate::{Project, Source, UrlArgs, cargo, sha256_hex};

/// `cargo xtask dist`.
#[derive(Debug, Args)]
pub struct DistArgs {
    /// A target to build (repeatable). Default: every target this host
    /// builds (`cargo xtask targets`).
    #[arg(long = "target", value_name = "TRIPLE")]
    targets: Vec<String>,
    /// Where the archives go. Default: target/dist.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Also try the targets lathe does not build for yet.
    #[arg(long)]
    include_unready: bool,
    /// Build a tree with uncommitted changes (its commit is then `<hash>+dirty`).
    #[arg(long)]
    allow_dirty: bool,
    #[command(flatten)]
    urls: UrlArgs,
}

/// The files every archive holds besides the executable.
pub const DOCS: [&str; 4] = ["README.md", "LICENSE-MIT", "LICENSE-APACHE", "config.example.toml"];

pub fn run(args: &DistArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let project = Project::read()?;
    let source = Source::read(&project.root)?;
    if source.dirty() && !args.allow_dirty {
        bail!("the tree has uncommitted changes (commit them, or pass --allow-dirty)");
    }
    let targets = select(&args.targets, args.include_unready)?;
    if targets.is_empty() {
        // Only targets lathe does not build for yet were asked for (the
        // release workflow's macOS and Windows runners until issue 26):
        // nothing to pack, and not a failure that would hold back the
        // release of the platforms that build.
        eprintln!("xtask dist: nothing to build");
        return Ok(());
    }
    let out = args.out.clone().unwrap_or_else(|| project.default_dist());
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let version = &project.package.version;
    eprintln!(
        "xtask dist: lathe {version}, commit {}, SOURCE_DATE_EPOCH={} ({}), into {}",
        source.commit,
        source.epoch,
        source.date(),
        out.display()
    );
    let mut built = Vec::new();
    for target in &targets {
        let began = Instant::now();
        let binary = build(&project, &source, target)?;
        let bytes = pack(&project, &source, target, &binary)?;
        let name = target.archive_name(version);
        std::fs::write(out.join(&name), &bytes).with_context(|| format!("writing {name}"))?;
        built.push(name.clone());
        eprintln!(
            "xtask dist: {name}: {} bytes ({:.1} MiB), sha256 {}, {:.0} s",
            bytes.len(),
            bytes.len() as f64 / 1_048_576.0,
            sha256_hex(&bytes),
            began.elapsed().as_secs_f64()
        );
    }
    // The entry and the sums cover every archive of this version in `out`
    // (so that targets built one at a time add up); say which were not
    // built now, as they may be of another commit.
    for (name, _) in archives_in(&out, version)? {
        if !built.contains(&name) {
            eprintln!("xtask dist: warning: {name} is from an earlier build; SHA256SUMS and agent.json list it too");
        }
    }
    write_checksums(&out, version)?;
    write_registry(&project, &out, &out, &args.urls)?;
    eprintln!("xtask dist: done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The targets to build: those named, else those this host builds. Targets
/// lathe does not build for yet are skipped, saying why, unless asked for.
fn select(named: &[String], include_unready: bool) -> anyhow::Result<Vec<&'static Target>> {
    let mut selected = Vec::new();
    let candidates: Vec<&'static Target> = if named.is_empty() {
        TARGETS.iter().filter(|t| t.host_cannot_build().is_none()).collect()
    } else {
        let mut found = Vec::new();
        for triple in named {
            match Target::find(triple) {
                Some(target) => found.push(target),
                None => {
                    let known: Vec<&str> = TARGETS.iter().map(|t| t.triple).collect();
                    bail!("unknown target {triple} (known: {})", known.join(", "));
                }
            }
        }
        found
    };
    for target in candidates {
        if let (Some(why), false) = (target.unready, include_unready) {
            eprintln!("xtask dist: skipping {}: {why}", target.triple);
            continue;
        }
        if let Some(why) = target.host_cannot_build() {
            bail!("{} cannot be built here: {why}", target.triple);
        }
        selected.push(target);
    }
    Ok(selected)
}

/// Builds the release binary for `target`; returns its path.
fn build(project: &Project, source: &Source, target: &Target) -> anyhow::Result<PathBuf> {
    ensure_rust_target(target.triple)?;
    let mut command = cargo();
    match target.builder {
        Builder::Zig => {
            let zigbuild = Command::new("cargo-zigbuild").arg("--version").output();
            if !zigbuild.is_ok_and(|output| output.status.success()) {
                bail!(
                    "{} is built with cargo-zigbuild and zig, which are not on PATH: \
                     eval \"$(.ci/install-cross musl)\" installs them",
                    target.triple
                );
            }
            command.arg("zigbuild");
        }
        Builder::Mingw => {
            let gcc = Command::new("x86_64-w64-mingw32-gcc").arg("--version").output();
            if !gcc.is_ok_and(|output| output.status.success()) {
                bail!(
                    "{} is built with mingw-w64 (x86_64-w64-mingw32-gcc), which is not on PATH: \
                     eval \"$(.ci/install-cross windows)\" installs it",
                    target.triple
                );
            }
            command.arg("build");
        }
        Builder::Native(_) => {
            command.arg("build");
        }
    }
    command
        .args(["--release", "--locked", "--target", target.triple])
        .current_dir(&project.root)
        .env("SOURCE_DATE_EPOCH", source.epoch.to_string())
        .env("LATHE_BUILD_COMMIT", &source.commit)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags(project).join("\x1f"))
        .env_remove("RUSTFLAGS");
    if target.gcc_like_cc() {
        let variable = format!("CFLAGS_{}", target.triple.replace('-', "_"));
        command.env(
            variable,
            prefix_maps(project)
                .iter()
                .map(|(from, to)| format!("-ffile-prefix-map={from}={to}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    eprintln!("xtask dist: {command:?}");
    let status = command.status().context("running cargo")?;
    if !status.success() {
        bail!("the build for {} failed ({status})", target.triple);
    }
    let binary = project.target_dir.join(target.triple).join("release").join(target.exe());
    if !binary.is_file() {
        bail!("the build left no {}", binary.display());
    }
    Ok(binary)
}

/// Installs the Rust standard library for `triple` when rustup lacks it.
fn ensure_rust_target(triple: &str) -> anyhow::Result<()> {
    let Ok(output) = Command::new("rustup").args(["target", "list", "--installed"]).output() else {
        return Ok(()); // No rustup: the toolchain is what it is, and cargo will say.
    };
    if String::from_utf8_lossy(&output.stdout).lines().any(|line| line.trim() == triple) {
        return Ok(());
    }
    let status = Command::new("rustup").args(["target", "add", triple]).status().context("rustup target add")?;
    if !status.success() {
        bail!("rustup target add {triple} failed");
    }
    Ok(())
}

/// The path prefixes a build must not leak, and what they become: cargo's
/// home (the registry's sources), the checkout, the target directory
/// (generated code under OUT_DIR). Later entries win in rustc.
fn prefix_maps(project: &Project) -> Vec<(String, &'static str)> {
    let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE")).map(PathBuf::from);
    let cargo_home = std::env::var_os("CARGO_HOME").map(PathBuf::from).or_else(|| home.map(|h| h.join(".cargo")));
    let mut maps = Vec::new();
    if let Some(cargo_home) = cargo_home {
        maps.push((cargo_home.display().to_string(), "/cargo"));
    }
    maps.push((project.root.display().to_string(), "/lathe"));
    maps.push((project.target_dir.display().to_string(), "/target"));
    maps
}

fn rustflags(project: &Project) -> Vec<String> {
    prefix_maps(project).into_iter().map(|(from, to)| format!("--remap-path-prefix={from}={to}")).collect()
}

/// The archive's bytes: the executable and [`DOCS`].
fn pack(project: &Project, source: &Source, target: &Target, binary: &Path) -> anyhow::Result<Vec<u8>> {
    let mut entries = vec![Entry {
        name: target.exe().to_owned(),
        mode: 0o755,
        data: std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?,
    }];
    for name in DOCS {
        let path = project.root.join(name);
        let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        entries.push(Entry { name: name.to_owned(), mode: 0o644, data: lf(text) });
    }
    match target.format {
        Format::TarGz => archive::tar_gz(&entries, source.epoch),
        Format::Zip => archive::zip(&entries, source.epoch),
    }
}

/// `text` with CRLF line ends made LF (a Windows checkout's autocrlf).
fn lf(text: Vec<u8>) -> Vec<u8> {
    if !text.windows(2).any(|pair| pair == b"\r\n") {
        return text;
    }
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.iter().peekable();
    while let Some(&byte) = bytes.next() {
        if byte == b'\r' && bytes.peek() == Some(&&b'\n') {
            continue;
        }
        out.push(byte);
    }
    out
}

/// This version's archives in `dir`: (file name, target), sorted by name.
pub fn archives_in(dir: &Path, version: &str) -> anyhow::Result<Vec<(String, &'static Target)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(target) = TARGETS.iter().find(|t| t.archive_name(version) == name) {
            found.push((name, target));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

/// `SHA256SUMS` (`sha256sum -c` reads it) of this version's archives in `dir`.
pub fn write_checksums(dir: &Path, version: &str) -> anyhow::Result<()> {
    let mut text = String::new();
    for (name, _) in archives_in(dir, version)? {
        let bytes = std::fs::read(dir.join(&name)).with_context(|| format!("reading {name}"))?;
        text.push_str(&format!("{}  {name}\n", sha256_hex(&bytes)));
    }
    std::fs::write(dir.join("SHA256SUMS"), text).context("writing SHA256SUMS")
}

/// Writes `agent.json` (the archives in `dist`, their URLs and SHA-256) and
/// `icon.svg` to `out`.
pub fn write_registry(project: &Project, dist: &Path, out: &Path, urls: &UrlArgs) -> anyhow::Result<()> {
    let version = &project.package.version;
    let mut archives = Vec::new();
    for (file, target) in archives_in(dist, version)? {
        let bytes = std::fs::read(dist.join(&file)).with_context(|| format!("reading {file}"))?;
        archives.push(Archive { target, file, sha256: sha256_hex(&bytes) });
    }
    if archives.is_empty() {
        bail!("no lathe {version} archives in {}", dist.display());
    }
    let mut package = project.package.clone();
    package.repository = project.repository(urls);
    let base_url = urls.base_url.clone().unwrap_or_else(|| registry::default_base_url(&package.repository, version));
    let entry = registry::entry(&package, &base_url, &archives);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(out.join("agent.json"), registry::to_text(&entry)).context("writing agent.json")?;
    // Copied, unless `out` is where it is kept (a copy onto itself empties it).
    let icon = project.root.join("packaging/acp-registry/icon.svg");
    let copy = out.join("icon.svg");
    let same = matches!((icon.canonicalize(), copy.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if !same {
        std::fs::copy(&icon, &copy).context("copying icon.svg")?;
    }
    let mut platforms: Vec<&str> = TARGETS
        .iter()
        .filter(|t| entry["distribution"]["binary"].get(t.platform).is_some())
        .map(|t| t.platform)
        .collect();
    // Two targets give windows-x86_64 (MSVC and mingw): named once.
    platforms.dedup();
    eprintln!("xtask: {} for {} ({})", out.join("agent.json").display(), platforms.join(", "), base_url);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_becomes_lf_and_lone_cr_stays() {
        assert_eq!(lf(b"a\r\nb\rc\n".to_vec()), b"a\nb\rc\n");
        assert_eq!(lf(b"plain\n".to_vec()), b"plain\n");
    }

    #[test]
    fn unready_targets_are_skipped_unless_asked_and_unknown_ones_refused() {
        let skipped = select(&["x86_64-pc-windows-msvc".into()], false).unwrap();
        assert!(skipped.is_empty());
        assert!(select(&["riscv64gc-unknown-linux-gnu".into()], false).is_err());
        if std::env::consts::OS == "linux" {
            let musl = select(&["x86_64-unknown-linux-musl".into()], false).unwrap();
            assert_eq!(musl.iter().map(|t| t.triple).collect::<Vec<_>>(), ["x86_64-unknown-linux-musl"]);
            // Asked for, a Windows MSVC target needs a Windows host.
            assert!(select(&["x86_64-pc-windows-msvc".into()], true).is_err());
        }
    }
}
