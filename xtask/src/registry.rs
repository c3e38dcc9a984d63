//! lathe's entry in the ACP Agent Registry (the repository
//! `agentclientprotocol/registry`: one folder per agent holding `agent.json`
//! and `icon.svg`), made from the release's archives, their URLs and their
//! SHA-256; and the registry's icon rules, which its CI applies
//! (`build_registry.py`: 16x16, square, `fill`/`stroke` only `currentColor`,
//! `none` or `inherit`, `currentColor` used, no comments).
//!
//! The schema the entry must satisfy is kept, with the commit it came from,
//! in `packaging/acp-registry/` (see the README there); the tests below
//! validate against it.

use serde_json::{Map, Value, json};

use crate::targets::{TARGETS, Target};

/// The entry's id (and the registry folder's name).
pub const ID: &str = "lathe";

/// What the entry says about the package (from Cargo.toml).
#[derive(Debug, Clone)]
pub struct Package {
    /// The version: `x.y.z`.
    pub version: String,
    /// One sentence.
    pub description: String,
    /// An SPDX expression.
    pub license: String,
    /// The source repository's URL (no trailing slash).
    pub repository: String,
}

/// One built archive.
#[derive(Debug, Clone)]
pub struct Archive {
    /// Its target.
    pub target: &'static Target,
    /// Its file name.
    pub file: String,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
}

/// Where a release's archives are downloaded from: GitHub's release assets
/// for the tag `v<version>` (the registry checks that a URL's
/// `/download/v<version>/` matches the entry's version).
pub fn default_base_url(repository: &str, version: &str) -> String {
    format!("{}/releases/download/v{version}", repository.trim_end_matches('/'))
}

/// The entry, as the registry wants it: one `binary` target per platform
/// that has an archive (archive URL, `cmd` inside it, `sha256`).
pub fn entry(package: &Package, base_url: &str, archives: &[Archive]) -> Value {
    let base_url = base_url.trim_end_matches('/');
    let mut binary = Map::new();
    for target in TARGETS {
        if binary.contains_key(target.platform) {
            continue;
        }
        let Some(archive) = archives.iter().find(|archive| archive.target.triple == target.triple) else { continue };
        binary.insert(
            target.platform.to_owned(),
            json!({
                "archive": format!("{base_url}/{}", archive.file),
                "cmd": format!("./{}", target.exe()),
                "sha256": archive.sha256,
            }),
        );
    }
    let repository = package.repository.trim_end_matches('/');
    json!({
        "id": ID,
        "name": "lathe",
        "version": package.version,
        "description": package.description,
        "repository": repository,
        "license": package.license,
        "license_url": format!("{repository}/blob/v{}/README.md#license", package.version),
        "distribution": {"binary": binary},
    })
}

/// `entry` as the file's text: two-space indentation, keys sorted, a final
/// newline (as the registry's own tools write it).
pub fn to_text(entry: &Value) -> String {
    let mut text = serde_json::to_string_pretty(entry).unwrap_or_default();
    text.push('\n');
    text
}

/// What the registry's CI would reject in an `icon.svg`; empty when none.
/// Attribute-level, like its checker: `fill`, `stroke` and `style`'s
/// `fill:`/`stroke:` anywhere in the file.
pub fn icon_problems(svg: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if svg.contains("<!--") {
        problems.push("comments are refused (they break the registry's MDX pages)".to_owned());
    }
    let Some(root_at) = svg.find("<svg") else {
        problems.push("no <svg> element".to_owned());
        return problems;
    };
    let root = &svg[root_at..svg[root_at..].find('>').map_or(svg.len(), |end| root_at + end)];
    let size = |name: &str| attribute(root, name).and_then(|v| v.trim_end_matches("px").parse::<f64>().ok());
    let (width, height) = match (size("width"), size("height")) {
        (Some(w), Some(h)) => (w, h),
        _ => match attribute(root, "viewBox").map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>()) {
            Some(parts) if parts.len() == 4 => {
                (parts[2].parse().unwrap_or(f64::NAN), parts[3].parse().unwrap_or(f64::NAN))
            }
            _ => (f64::NAN, f64::NAN),
        },
    };
    if width != 16.0 || height != 16.0 {
        problems.push(format!("must be 16x16 (is {width}x{height})"));
    }
    let mut current = false;
    let mut paint = |what: &str, value: &str| match value.trim().to_ascii_lowercase().as_str() {
        "currentcolor" => current = true,
        "none" | "inherit" => {}
        _ => problems.push(format!("a hard-coded {what}: {value}")),
    };
    for name in ["fill", "stroke"] {
        for value in attributes(svg, name) {
            paint(name, value);
        }
    }
    for style in attributes(svg, "style") {
        for declaration in style.split(';') {
            if let Some((name, value)) = declaration.split_once(':') {
                let name = name.trim().to_ascii_lowercase();
                if name == "fill" || name == "stroke" {
                    paint(&name, value);
                }
            }
        }
    }
    if svg.contains("<style") {
        problems.push("a <style> element: keep colours in attributes".to_owned());
    }
    if !current {
        problems.push("currentColor is never used (the icon would not follow the theme)".to_owned());
    }
    problems
}

/// The value of the first `name="..."` attribute in `text`.
fn attribute<'a>(text: &'a str, name: &'a str) -> Option<&'a str> {
    attributes(text, name).next()
}

/// Every value of a `name="..."` (or `'...'`) attribute in `text`, where
/// `name` stands alone (`fill`, not `fill-rule`).
fn attributes<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    text.match_indices(name).filter_map(move |(at, _)| {
        let before = text[..at].chars().next_back()?;
        if !before.is_whitespace() {
            return None;
        }
        let rest = text[at + name.len()..].trim_start().strip_prefix('=')?.trim_start();
        let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let value = &rest[1..];
        Some(&value[..value.find(quote)?])
    })
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn packaging() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/acp-registry")
    }

    fn read_json(name: &str) -> Value {
        let text = std::fs::read_to_string(packaging().join(name)).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// The registry's schema, kept verbatim (see packaging/acp-registry/README.md).
    fn validator() -> jsonschema::Validator {
        jsonschema::validator_for(&read_json("agent.schema.json")).unwrap()
    }

    fn errors(entry: &Value) -> Vec<String> {
        validator().iter_errors(entry).map(|e| format!("{} at {}", e, e.instance_path())).collect()
    }

    fn package() -> Package {
        Package {
            version: "1.2.3".into(),
            description: "A coding agent.".into(),
            license: "MIT OR Apache-2.0".into(),
            repository: "https://github.com/example/lathe".into(),
        }
    }

    fn archives(triples: &[&str]) -> Vec<Archive> {
        triples
            .iter()
            .map(|triple| {
                let target = Target::find(triple).unwrap();
                Archive { target, file: target.archive_name("1.2.3"), sha256: "ab".repeat(32) }
            })
            .collect()
    }

    #[test]
    fn a_generated_entry_validates_against_the_registry_schema() {
        let all: Vec<&str> = TARGETS.iter().map(|t| t.triple).collect();
        for triples in [&["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"][..], &all] {
            let base = default_base_url("https://github.com/example/lathe", "1.2.3");
            let entry = entry(&package(), &base, &archives(triples));
            assert_eq!(errors(&entry), Vec::<String>::new(), "{}", to_text(&entry));
        }
    }

    #[test]
    fn the_generated_entry_is_what_the_registry_expects() {
        let base = default_base_url("https://github.com/example/lathe/", "1.2.3");
        let entry = entry(&package(), &base, &archives(&["x86_64-pc-windows-gnu", "x86_64-pc-windows-msvc"]));
        // Two targets give windows-x86_64: the MSVC build is the one named.
        let windows = &entry["distribution"]["binary"]["windows-x86_64"];
        assert_eq!(
            windows["archive"],
            "https://github.com/example/lathe/releases/download/v1.2.3/lathe-1.2.3-x86_64-pc-windows-msvc.zip"
        );
        assert_eq!(windows["cmd"], "./lathe.exe");
        assert_eq!(entry["distribution"]["binary"].as_object().unwrap().len(), 1);
        assert_eq!(entry["license_url"], "https://github.com/example/lathe/blob/v1.2.3/README.md#license");
        assert_eq!(entry["id"], ID);
        assert!(to_text(&entry).ends_with("}\n"));
    }

    /// The validator is live: what the registry refuses, it refuses.
    #[test]
    fn the_schema_refuses_what_the_registry_refuses() {
        let good = entry(&package(), "https://example.com/v1.2.3", &archives(&["x86_64-unknown-linux-musl"]));
        assert!(errors(&good).is_empty());
        type Breakage = (&'static str, fn(&mut Value));
        let broken: [Breakage; 6] = [
            ("an unknown platform", |e| {
                e["distribution"]["binary"]["linux-riscv64"] = json!({"archive": "https://x/a.tar.gz", "cmd": "x"});
            }),
            ("a sha256 that is not 64 hex digits", |e| {
                e["distribution"]["binary"]["linux-x86_64"]["sha256"] = json!("abc");
            }),
            ("a field the target does not have", |e| {
                e["distribution"]["binary"]["linux-x86_64"]["checksum"] = json!("x");
            }),
            ("no cmd", |e| {
                e["distribution"]["binary"]["linux-x86_64"].as_object_mut().unwrap().remove("cmd");
            }),
            ("an id with capitals", |e| e["id"] = json!("Lathe")),
            ("a version that is not x.y.z", |e| e["version"] = json!("one")),
        ];
        for (what, breakage) in broken {
            let mut entry = good.clone();
            breakage(&mut entry);
            assert!(!errors(&entry).is_empty(), "accepted {what}: {entry}");
        }
    }

    /// The committed entry: valid, this version, Linux x86_64 at least, each
    /// URL naming this version's archive of a target lathe builds for.
    #[test]
    fn the_committed_entry_validates_and_is_this_version() {
        let entry = read_json("agent.json");
        assert_eq!(errors(&entry), Vec::<String>::new());
        let lathe_version = xtask_version_of_lathe();
        assert_eq!(entry["version"], lathe_version.as_str(), "regenerate it: cargo xtask dist (README, Install)");
        let binary = entry["distribution"]["binary"].as_object().unwrap();
        assert!(binary.contains_key("linux-x86_64"), "{binary:?}");
        for (platform, spec) in binary {
            let target = TARGETS.iter().find(|t| t.platform == platform && t.unready.is_none()).unwrap();
            let url = spec["archive"].as_str().unwrap();
            assert!(url.ends_with(&format!("/v{lathe_version}/{}", target.archive_name(&lathe_version))), "{url}");
            assert!(!url.contains("/latest/"), "{url}");
            assert_eq!(spec["cmd"], format!("./{}", target.exe()));
        }
        // Required by the registry's schema since mid-2026 (see the README there).
        assert!(entry["license_url"].as_str().is_some_and(|u| u.starts_with("https://")));
        let committed = std::fs::read_to_string(packaging().join("agent.json")).unwrap();
        assert_eq!(committed, to_text(&entry), "written as to_text writes it");
    }

    /// lathe's version, from its Cargo.toml (this crate's is 0.0.0).
    fn xtask_version_of_lathe() -> String {
        let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml")).unwrap();
        manifest
            .lines()
            .find_map(|line| line.strip_prefix("version = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap()
            .to_owned()
    }

    #[test]
    fn the_icon_passes_the_registry_rules() {
        let svg = std::fs::read_to_string(packaging().join("icon.svg")).unwrap();
        assert_eq!(icon_problems(&svg), Vec::<String>::new());
    }

    #[test]
    fn icon_rules_refuse_colours_sizes_and_comments() {
        let ok = r#"<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16"><path fill="currentColor" fill-rule="evenodd" d="M0 0h16v16H0z"/></svg>"#;
        assert!(icon_problems(ok).is_empty(), "{:?}", icon_problems(ok));
        let viewbox_only = ok.replace(r#"width="16" height="16" "#, "");
        assert!(icon_problems(&viewbox_only).is_empty(), "{:?}", icon_problems(&viewbox_only));
        for bad in [
            ok.replace(r#"fill="currentColor""#, r##"fill="#ff0000""##),
            ok.replace(r#"fill="currentColor""#, r#"style="stroke: red""#),
            ok.replace(r#"width="16" height="16""#, r#"width="24" height="24""#),
            ok.replace("<path", "<!-- a comment --><path"),
            ok.replace(r#"fill="currentColor""#, r#"fill="none""#),
        ] {
            assert!(!icon_problems(&bad).is_empty(), "accepted {bad}");
        }
    }
}
