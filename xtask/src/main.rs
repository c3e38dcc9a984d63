//! `cargo xtask`: lathe's release build and what checks it.
//!
//! - `cargo xtask dist`: builds the release binary for each target this host
//!   builds, packs each with the README, the licences and
//!   `config.example.toml` into a reproducible archive, and writes
//!   `SHA256SUMS`, the registry entry `agent.json` and its `icon.svg` next to
//!   them (default `target/dist/`). The release workflow runs the same.
//! - `cargo xtask registry`: the registry entry again, from the archives in a
//!   directory (the release workflow's last job, once every runner's
//!   archives are together; or to update `packaging/acp-registry/`).
//! - `cargo xtask check`: checks a dist directory: checksums, the entry
//!   against its archives, each archive's files, and for the targets this
//!   host runs, the binary itself: static (no `NEEDED`, no interpreter),
//!   `--version` and one ACP turn with an empty environment.
//! - `cargo xtask targets`: the targets, and which this host builds.
//!
//! Why an xtask and not a script: it is the same program on Linux, macOS and
//! Windows (the release workflow's runners) with nothing but cargo, where a
//! shell script would need GNU tar's sorting and owner flags (BSD tar on
//! macOS has neither) and a zip tool on Windows; and the archive writers,
//! the registry entry and their checks are Rust code with unit tests.

mod archive;
mod check;
mod dist;
mod registry;
mod targets;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use clap::{Args, Parser};

/// lathe's project tasks (`cargo xtask <task> --help`).
#[derive(Debug, Parser)]
#[command(name = "cargo xtask")]
enum Cli {
    /// Build, pack and checksum a release, and write its registry entry.
    Dist(dist::DistArgs),
    /// Write SHA256SUMS and the registry entry (agent.json, icon.svg) for the archives in a directory.
    Registry(RegistryArgs),
    /// Check a dist directory: checksums, entry, archives, and the binaries this host runs.
    Check(check::CheckArgs),
    /// List the targets and whether this host builds them.
    Targets,
}

/// Where the registry entry's URLs point.
#[derive(Debug, Clone, Default, Args)]
pub struct UrlArgs {
    /// The source repository's URL. Default: Cargo.toml's `repository`, else
    /// $GITHUB_SERVER_URL/$GITHUB_REPOSITORY (GitHub Actions), else a
    /// placeholder (https://github.com/OWNER/lathe), with a warning.
    #[arg(long, value_name = "URL")]
    pub repository: Option<String>,
    /// Where the archives are downloaded from. Default: the repository's
    /// release assets for the tag v<version>.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
}

/// `cargo xtask registry`.
#[derive(Debug, Args)]
struct RegistryArgs {
    /// The directory holding the archives.
    #[arg(long, value_name = "DIR")]
    dist: Option<PathBuf>,
    /// Where to write agent.json and icon.svg. Default: the --dist directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Fail unless this is the release's tag, v<version> (the release
    /// workflow passes the tag it runs for).
    #[arg(long, value_name = "TAG")]
    expect_tag: Option<String>,
    #[command(flatten)]
    urls: UrlArgs,
}

fn main() -> ExitCode {
    let result = match Cli::parse() {
        Cli::Dist(args) => dist::run(&args),
        Cli::Registry(args) => registry_command(&args),
        Cli::Check(args) => check::run(&args),
        Cli::Targets => {
            list_targets();
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn list_targets() {
    for target in targets::TARGETS {
        let status = match (target.unready, target.host_cannot_build()) {
            (Some(why), _) => format!("skipped: {why}"),
            (None, Some(why)) => format!("not here: {why}"),
            (None, None) => "built here".to_owned(),
        };
        println!("{:28} {:16} {}", target.triple, target.platform, status);
    }
}

/// `SHA256SUMS` in the dist directory, and the entry where asked.
fn registry_command(args: &RegistryArgs) -> anyhow::Result<()> {
    let project = Project::read()?;
    if let Some(tag) = &args.expect_tag {
        let version = &project.package.version;
        if *tag != format!("v{version}") {
            bail!("the tag {tag} is not v{version}, Cargo.toml's version: the entry's URLs would be wrong");
        }
    }
    let dist = args.dist.clone().unwrap_or_else(|| project.default_dist());
    let out = args.out.clone().unwrap_or_else(|| dist.clone());
    dist::write_checksums(&dist, &project.package.version)?;
    dist::write_registry(&project, &dist, &out, &args.urls)
}

/// The lathe package and its checkout.
#[derive(Debug, Clone)]
pub struct Project {
    /// The checkout's top directory.
    pub root: PathBuf,
    /// cargo's target directory.
    pub target_dir: PathBuf,
    /// The package, as the registry entry describes it.
    pub package: registry::Package,
    /// Cargo.toml's `repository`, if any.
    pub repository: Option<String>,
}

/// The cargo that runs this task (the same toolchain builds the release),
/// without the variables `cargo run` set for xtask itself: build scripts
/// that watch them (ring's watches `CARGO_MANIFEST_DIR` and `CARGO_PKG_*`)
/// would otherwise see them change between a plain `cargo test` and one
/// started from here, and rebuild ring and all above it each time.
pub fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if is_set_by_cargo_run(&name) {
            command.env_remove(&*name);
        }
    }
    command
}

/// Whether `cargo run` sets `name` for the program it runs (the package's
/// and the binary's own variables; cargo's configuration ones stay).
fn is_set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
        )
}

impl Project {
    /// Reads `cargo metadata` of the checkout this xtask belongs to.
    pub fn read() -> anyhow::Result<Project> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("xtask has a parent directory")?.to_owned();
        let output = cargo()
            .args(["metadata", "--no-deps", "--format-version", "1", "--locked"])
            .current_dir(&root)
            .output()
            .context("running cargo metadata")?;
        if !output.status.success() {
            bail!("cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
        }
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).context("cargo metadata's output")?;
        let lathe = metadata["packages"]
            .as_array()
            .and_then(|packages| packages.iter().find(|p| p["name"] == "lathe"))
            .context("no lathe package in cargo metadata")?;
        let field = |name: &str| lathe[name].as_str().map(str::to_owned);
        let target_dir = metadata["target_directory"].as_str().context("cargo metadata: target_directory")?;
        Ok(Project {
            root,
            target_dir: PathBuf::from(target_dir),
            package: registry::Package {
                version: field("version").context("lathe's version")?,
                description: field("description").context("lathe's description")?,
                license: field("license").context("lathe's license")?,
                repository: String::new(),
            },
            repository: field("repository"),
        })
    }

    /// `target/dist`.
    pub fn default_dist(&self) -> PathBuf {
        self.target_dir.join("dist")
    }

    /// The repository URL the entry names: `--repository`, Cargo.toml,
    /// GitHub Actions' variables, or the placeholder.
    pub fn repository(&self, urls: &UrlArgs) -> String {
        if let Some(url) = urls.repository.clone().or_else(|| self.repository.clone()) {
            return url.trim_end_matches('/').to_owned();
        }
        if let (Ok(server), Ok(repository)) = (std::env::var("GITHUB_SERVER_URL"), std::env::var("GITHUB_REPOSITORY")) {
            return format!("{}/{repository}", server.trim_end_matches('/'));
        }
        eprintln!(
            "xtask: warning: no repository URL (Cargo.toml has none; pass --repository): the entry's URLs use the \
             placeholder {PLACEHOLDER_REPOSITORY}"
        );
        PLACEHOLDER_REPOSITORY.to_owned()
    }
}

/// What the entry's URLs use when no repository is known.
pub const PLACEHOLDER_REPOSITORY: &str = "https://github.com/OWNER/lathe";

/// The commit and time a build describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// `HEAD`'s 12 hex digits, `+dirty` after them when tracked files have
    /// uncommitted changes; `unknown` without git.
    pub commit: String,
    /// `SOURCE_DATE_EPOCH` when set, else `HEAD`'s commit time.
    pub epoch: u64,
}

impl Source {
    /// Reads git in `root`.
    pub fn read(root: &Path) -> anyhow::Result<Source> {
        let git = |args: &[&str]| -> Option<String> {
            let output = Command::new("git").arg("-C").arg(root).args(args).output().ok()?;
            output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        };
        let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
            Some(commit) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
                Some(changes) if changes.is_empty() => commit,
                _ => format!("{commit}+dirty"),
            },
            None => "unknown".to_owned(),
        };
        let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
            Ok(epoch) => epoch.trim().parse().context("SOURCE_DATE_EPOCH is not a number")?,
            Err(_) => git(&["log", "-1", "--format=%ct", "HEAD"])
                .and_then(|time| time.parse().ok())
                .context("no git commit time here: set SOURCE_DATE_EPOCH")?,
        };
        Ok(Source { commit, epoch })
    }

    /// Whether the tree had uncommitted changes.
    pub fn dirty(&self) -> bool {
        self.commit.ends_with("+dirty")
    }

    /// The build date `--version` shows: the UTC day of `epoch`.
    pub fn date(&self) -> String {
        let day = i64::try_from(self.epoch)
            .ok()
            .and_then(|epoch| time::OffsetDateTime::from_unix_timestamp(epoch).ok())
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
            .date();
        format!("{:04}-{:02}-{:02}", day.year(), u8::from(day.month()), day.day())
    }

    /// The line `lathe --version` prints for a dist build of `target`.
    pub fn version_line(&self, version: &str, target: &str) -> String {
        format!("lathe {version} (commit {}, {target}, built {})", self.commit, self.date())
    }
}

/// The SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_is_what_build_rs_writes() {
        let source = Source { commit: "0123456789ab".into(), epoch: 1_764_806_400 };
        assert_eq!(source.date(), "2025-12-04");
        assert_eq!(
            source.version_line("0.1.0", "x86_64-unknown-linux-musl"),
            "lathe 0.1.0 (commit 0123456789ab, x86_64-unknown-linux-musl, built 2025-12-04)"
        );
        assert_eq!(Source { commit: "x".into(), epoch: 0 }.date(), "1970-01-01");
        assert_eq!(Source { commit: "x".into(), epoch: 951_782_400 }.date(), "2000-02-29");
    }

    #[test]
    fn the_package_variables_of_cargo_run_are_dropped_and_cargo_settings_kept() {
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION_MAJOR", "CARGO_CRATE_NAME"] {
            assert!(is_set_by_cargo_run(name), "{name}");
        }
        for name in ["CARGO_HOME", "CARGO_TARGET_DIR", "CARGO_TERM_COLOR", "CARGO_ENCODED_RUSTFLAGS", "PATH"] {
            assert!(!is_set_by_cargo_run(name), "{name}");
        }
    }

    #[test]
    fn sha256_is_lowercase_hex() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
