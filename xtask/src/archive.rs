//! Reproducible archives: the same files give the same bytes, on any
//! system, at any time. Entries are sorted by name and have no directory
//! entries; every timestamp is the one given (`SOURCE_DATE_EPOCH`); owners
//! are 0 with no names; modes are 0755 for the executable and 0644 for the
//! rest, whatever the files on disk say. The gzip header has no name and a
//! zero time; compression is flate2's pure-Rust backend at its best level.
//!
//! Also the readers the checks use.

use std::io::{Read, Write};

use anyhow::{Context, ensure};
use flate2::Compression;

/// A file to archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name in the archive (no directories).
    pub name: String,
    /// Unix mode bits (0o755 or 0o644).
    pub mode: u32,
    /// Its contents.
    pub data: Vec<u8>,
}

fn sorted(entries: &[Entry]) -> Vec<&Entry> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    sorted
}

/// A `.tar.gz` of `entries`, every mtime `mtime`.
pub fn tar_gz(entries: &[Entry], mtime: u64) -> anyhow::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for entry in sorted(entries) {
        let mut header = tar::Header::new_ustar();
        header.set_path(&entry.name).with_context(|| format!("tar: the name {}", entry.name))?;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(entry.data.len() as u64);
        header.set_mode(entry.mode);
        header.set_mtime(mtime);
        header.set_uid(0);
        header.set_gid(0);
        header.set_cksum();
        tar.append(&header, entry.data.as_slice()).with_context(|| format!("tar: {}", entry.name))?;
    }
    let tar = tar.into_inner().context("tar: finishing")?;
    // No file name, time 0, OS "unknown" (255): nothing of this machine.
    let mut gz = flate2::GzBuilder::new().mtime(0).operating_system(255).write(Vec::new(), Compression::best());
    gz.write_all(&tar).context("gzip")?;
    gz.finish().context("gzip: finishing")
}

/// The entries of a `.tar.gz` (regular files only; anything else is refused).
pub fn read_tar_gz(bytes: &[u8]) -> anyhow::Result<Vec<Entry>> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut entries = Vec::new();
    for entry in archive.entries().context("reading the tar")? {
        let mut entry = entry.context("reading a tar entry")?;
        let header = entry.header();
        ensure!(header.entry_type() == tar::EntryType::Regular, "a tar entry that is not a regular file");
        let name = entry.path().context("a tar entry's name")?.to_string_lossy().into_owned();
        let mode = entry.header().mode().context("a tar entry's mode")?;
        let mut data = Vec::new();
        entry.read_to_end(&mut data).with_context(|| format!("reading {name}"))?;
        entries.push(Entry { name, mode, data });
    }
    Ok(entries)
}

/// A `.zip` of `entries` (deflated at the best level), every time `mtime`
/// (the format keeps local time in 2-second steps: written as UTC), Unix
/// modes kept in the external attributes (so `unzip` on Unix restores the
/// executable bit).
pub fn zip(entries: &[Entry], mtime: u64) -> anyhow::Result<Vec<u8>> {
    let when = time::OffsetDateTime::from_unix_timestamp(i64::try_from(mtime).context("a time past 2262")?)
        .context("zip: the time")?;
    // The format's epoch is 1980: earlier times are its first day.
    let when = when.max(time::macros::datetime!(1980-01-01 0:00 UTC));
    let when = zip::DateTime::try_from(time::PrimitiveDateTime::new(when.date(), when.time()))
        .context("zip: a time the format cannot hold")?;
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for entry in sorted(entries) {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .compression_level(Some(9))
            .last_modified_time(when)
            .unix_permissions(entry.mode);
        writer.start_file(entry.name.as_str(), options).with_context(|| format!("zip: {}", entry.name))?;
        writer.write_all(&entry.data).with_context(|| format!("zip: {}", entry.name))?;
    }
    Ok(writer.finish().context("zip: finishing")?.into_inner())
}

/// The entries of a `.zip` (regular files only), each checked against its
/// CRC as it is read.
pub fn read_zip(bytes: &[u8]) -> anyhow::Result<Vec<Entry>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).context("zip: reading the archive")?;
    let mut entries = Vec::with_capacity(archive.len());
    for index in 0..archive.len() {
        let mut file = archive.by_index(index).context("zip: reading an entry")?;
        let name = file.name().context("zip: a name that is not UTF-8")?.into_owned();
        ensure!(file.is_file(), "zip: {name} is not a regular file");
        let mode = file.unix_mode().unwrap_or(0) & 0o7777;
        let mut data = Vec::new();
        file.read_to_end(&mut data).with_context(|| format!("zip: {name} is damaged"))?;
        entries.push(Entry { name, mode, data });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<Entry> {
        vec![
            Entry { name: "lathe".into(), mode: 0o755, data: b"\x7fELF binary".repeat(1000) },
            Entry { name: "README.md".into(), mode: 0o644, data: b"# lathe\n".to_vec() },
            Entry { name: "LICENSE-MIT".into(), mode: 0o644, data: b"MIT\n".to_vec() },
        ]
    }

    #[test]
    fn the_same_files_give_the_same_bytes_whatever_their_order() {
        let mut reversed = files();
        reversed.reverse();
        assert_eq!(tar_gz(&files(), 1_700_000_000).unwrap(), tar_gz(&reversed, 1_700_000_000).unwrap());
        assert_eq!(zip(&files(), 1_700_000_000).unwrap(), zip(&reversed, 1_700_000_000).unwrap());
        assert_ne!(tar_gz(&files(), 1_700_000_000).unwrap(), tar_gz(&files(), 1_700_000_002).unwrap());
    }

    #[test]
    fn a_tar_gz_reads_back_sorted_with_its_modes_owner_and_time() {
        let bytes = tar_gz(&files(), 1_700_000_000).unwrap();
        // gzip: no name flag, mtime 0, OS 255.
        assert_eq!(&bytes[..4], &[0x1f, 0x8b, 8, 0]);
        assert_eq!(&bytes[4..8], &[0, 0, 0, 0]);
        assert_eq!(bytes[9], 255);
        let entries = read_tar_gz(&bytes).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["LICENSE-MIT", "README.md", "lathe"]);
        assert_eq!(entries[2].mode, 0o755);
        assert_eq!(entries[2].data, files()[0].data);
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let header = entry.header();
            assert_eq!((header.uid().unwrap(), header.gid().unwrap()), (0, 0));
            assert_eq!(header.mtime().unwrap(), 1_700_000_000);
            assert_eq!(header.username().unwrap(), Some(""));
        }
    }

    #[test]
    fn a_zip_reads_back_with_modes_and_its_dos_time() {
        let bytes = zip(&files(), 1_700_000_000).unwrap();
        let entries = read_zip(&bytes).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["LICENSE-MIT", "README.md", "lathe"]);
        assert_eq!((entries[2].mode, entries[1].mode), (0o755, 0o644));
        assert_eq!(entries[2].data, files()[0].data);
        // 2023-11-14 22:13:20 UTC.
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(&bytes)).unwrap();
        let when = archive.by_index(2).unwrap().last_modified().unwrap();
        assert_eq!(
            (when.year(), when.month(), when.day(), when.hour(), when.minute(), when.second()),
            (2023, 11, 14, 22, 13, 20)
        );
        // Damage is noticed.
        let mut damaged = bytes.clone();
        let at = damaged.len() / 2;
        damaged[at] ^= 0xff;
        assert!(read_zip(&damaged).is_err());
    }

    /// Python's zipfile (what the registry's verifier extracts with) reads
    /// it too, when python3 is here.
    #[test]
    fn python_reads_our_zip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.zip");
        std::fs::write(&path, zip(&files(), 1_700_000_000).unwrap()).unwrap();
        let script = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\n\
                      print(' '.join(f'{i.filename}:{i.external_attr >> 16:o}' for i in z.infolist()))";
        let output = match std::process::Command::new("python3").arg("-c").arg(script).arg(&path).output() {
            Ok(output) => output,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("python_reads_our_zip: no python3 here; read_zip's own test stands alone");
                return;
            }
            Err(err) => panic!("python3: {err}"),
        };
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "LICENSE-MIT:100644 README.md:100644 lathe:100755");
    }
}
