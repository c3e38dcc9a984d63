//! The API keys lathe was given to keep, and the one way lathe writes a
//! file only its owner may read.
//!
//! `lathe setup` asks for a model's key; pasted there (rather than named as
//! an environment variable), it is kept in `credentials.toml` in lathe's
//! config directory (`$XDG_CONFIG_HOME/lathe`), mode 0600, and the model's
//! table in the config says `api_key_stored = true`. That is how a key lathe
//! stored is told from the user's own: keys named by `api_key_env` live in
//! the user's environment, which lathe never writes, and nothing but lathe
//! writes this file (its header says so). An ACP `logout` deletes it; the
//! config file, and every variable, stay as they are.
//!
//! Files are written whole to a temporary file beside the target (created
//! 0600), synced, then moved into place: a reader sees the old file or the
//! new one, never half of either, and never a moment where the key is
//! readable by others.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::ApiKey;

/// The file's name, in lathe's config directory.
pub const FILE_NAME: &str = "credentials.toml";

/// What heads the file.
const HEADER: &str = "# API keys that `lathe setup` stored, by [models.<name>] (each such model says\n\
                      # api_key_stored = true in the config). Written by lathe only: do not edit.\n\
                      # An editor's logout deletes this file. Keys in environment variables\n\
                      # (api_key_env) are never written here.\n";

/// Why the keys could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The disk said no.
    #[error("{}: {source}", .path.display())]
    Io {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not what lathe writes.
    #[error("{}: not a credentials file lathe wrote ({message}); delete it and run `lathe setup`", .path.display())]
    Malformed {
        /// Which file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsToml {
    #[serde(default)]
    keys: BTreeMap<String, String>,
}

/// Where the keys are kept, given lathe's config directory.
pub fn path(user_dir: &Path) -> PathBuf {
    user_dir.join(FILE_NAME)
}

/// The stored keys by model; none when there is no file.
pub fn read(user_dir: &Path) -> Result<BTreeMap<String, ApiKey>, CredentialsError> {
    let path = path(user_dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => return Err(CredentialsError::Io { path, source }),
    };
    warn_if_shared(&path);
    let parsed: CredentialsToml = toml::from_str(&text)
        .map_err(|err| CredentialsError::Malformed { path: path.clone(), message: err.message().to_owned() })?;
    Ok(parsed
        .keys
        .into_iter()
        .filter(|(_, key)| !key.is_empty())
        .map(|(model, key)| (model, ApiKey::new(key)))
        .collect())
}

/// Keeps `key` for model `model`, beside the keys already kept; returns
/// the file's path.
pub fn store(user_dir: &Path, model: &str, key: &ApiKey) -> Result<PathBuf, CredentialsError> {
    let path = path(user_dir);
    let mut keys: BTreeMap<String, String> =
        read(user_dir)?.into_iter().map(|(model, key)| (model, key.expose().to_owned())).collect();
    keys.insert(model.to_owned(), key.expose().to_owned());
    let body = toml::to_string(&CredentialsToml { keys })
        .map_err(|err| CredentialsError::Malformed { path: path.clone(), message: err.to_string() })?;
    write_private(&path, format!("{HEADER}\n{body}").as_bytes(), Replace::Yes)
        .map_err(|source| CredentialsError::Io { path: path.clone(), source })?;
    Ok(path)
}

/// Forgets every key lathe stored (deletes the file). `true` when there
/// was a file.
pub fn forget(user_dir: &Path) -> Result<bool, CredentialsError> {
    let path = path(user_dir);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(CredentialsError::Io { path, source }),
    }
}

/// Whether lathe holds any stored key.
pub fn any_stored(user_dir: &Path) -> bool {
    path(user_dir).exists()
}

/// What [`write_private`] does when the target exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Replace it (atomically).
    Yes,
    /// Leave it, and fail with `AlreadyExists`.
    No,
}

/// Writes `contents` to `path`, readable and writable by its owner only
/// (0600 on Unix), atomically: a temporary file in the same directory, synced,
/// then renamed into place (or, with [`Replace::No`], linked, so an existing
/// file is never touched). Missing parent directories are created, 0700.
pub fn write_private(path: &Path, contents: &[u8], replace: Replace) -> std::io::Result<()> {
    let parent = match path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        Some(parent) => parent.to_path_buf(),
        None => PathBuf::from("."),
    };
    if !parent.exists() {
        crate::platform::private::create_dir(&parent)?;
    }
    // tempfile creates the file 0600 on Unix.
    let mut file = tempfile::Builder::new().prefix(".lathe-").suffix(".tmp").tempfile_in(&parent)?;
    file.write_all(contents)?;
    file.as_file().sync_all()?;
    match replace {
        Replace::Yes => file.persist(path).map(|_| ()).map_err(|err| err.error),
        Replace::No => file.persist_noclobber(path).map(|_| ()).map_err(|err| err.error),
    }
}

/// A credentials file others can read is worth a line in the log.
fn warn_if_shared(path: &Path) {
    if crate::platform::private::readable_by_others(path) {
        tracing::warn!(file = %path.display(), "lathe's credentials file can be read by others; it should be mode 0600");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_kept_privately_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let user_dir = dir.path().join("conf/lathe");
        assert!(read(&user_dir).unwrap().is_empty(), "no file, no keys");
        let path = store(&user_dir, "openrouter", &ApiKey::new("sk-one")).unwrap();
        store(&user_dir, "deepseek", &ApiKey::new("sk-two")).unwrap();
        let keys = read(&user_dir).unwrap();
        assert_eq!(keys["openrouter"].expose(), "sk-one");
        assert_eq!(keys["deepseek"].expose(), "sk-two");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# API keys that `lathe setup` stored"), "{text}");
        if let Some(mode) = crate::platform::testing::mode(&path) {
            assert_eq!(mode & 0o777, 0o600);
            assert_eq!(crate::platform::testing::mode(&user_dir).map(|mode| mode & 0o777), Some(0o700));
        }
        // Nothing but the file is left in the directory (no temporary files).
        assert_eq!(std::fs::read_dir(&user_dir).unwrap().count(), 1);
        assert!(any_stored(&user_dir));
        assert!(forget(&user_dir).unwrap());
        assert!(!forget(&user_dir).unwrap(), "forgetting twice is fine");
        assert!(read(&user_dir).unwrap().is_empty());
    }

    #[test]
    fn an_existing_file_is_never_clobbered_unless_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "mine").unwrap();
        let err = write_private(&path, b"new", Replace::No).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "mine");
        write_private(&path, b"new", Replace::Yes).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left behind");
    }

    #[test]
    fn a_file_lathe_did_not_write_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), "api_key = \"x\"\n").unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(err.contains(FILE_NAME) && err.contains("lathe setup"), "{err}");
    }
}
