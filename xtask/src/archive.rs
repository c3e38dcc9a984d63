//! Reproducible archives: the same files give the same bytes, on any
//! system, at any time. Entries are sorted by name and have no directory
//! entries; every timestamp is the one given (`SOURCE_DATE_EPOCH`); owners
//! are 0 with no names; modes are 0755 for the executable and 0644 for the
//! rest, whatever the files on disk say. The gzip header has no name and a
//! zero time; compression is flate2's pure-Rust backend at its best level.
//!
//! Also the readers the checks use (a `.zip` reader of our own: the few
//! fields our writer sets, no more).

use std::io::{Read, Write};

use anyhow::{Context, bail, ensure};
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

/// MS-DOS date and time (local fields, 2-second steps) of a Unix time, as
/// UTC; times before 1980 (the format's epoch) are 1980-01-01.
fn dos_time(epoch: u64) -> (u16, u16) {
    let epoch = epoch.max(315_532_800);
    let days = i64::try_from(epoch / 86_400).unwrap_or(0);
    let seconds = epoch % 86_400;
    let (year, month, day) = civil_from_days(days);
    let date = (((year - 1980) << 9) | (month << 5) | day) as u16;
    let time = (((seconds / 3600) << 11) | ((seconds % 3600 / 60) << 5) | ((seconds % 60) / 2)) as u16;
    (time, date)
}

/// Year, month (1-12), day (1-31) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`; build.rs has the same).
pub fn civil_from_days(days: i64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year as u64, month as u64, day as u64)
}

/// A `.zip` of `entries` (deflated), every time `mtime`, Unix modes kept in
/// the external attributes (so `unzip` on Unix restores the executable bit).
pub fn zip(entries: &[Entry], mtime: u64) -> anyhow::Result<Vec<u8>> {
    const VERSION: u16 = 20; // 2.0: deflate
    const MADE_BY_UNIX: u16 = (3 << 8) | VERSION;
    let (time, date) = dos_time(mtime);
    let mut out = Vec::new();
    let mut central = Vec::new();
    let entries = sorted(entries);
    for entry in &entries {
        let mut crc = flate2::Crc::new();
        crc.update(&entry.data);
        let mut deflate = flate2::write::DeflateEncoder::new(Vec::new(), Compression::best());
        deflate.write_all(&entry.data).context("deflate")?;
        let compressed = deflate.finish().context("deflate: finishing")?;
        let size = u32::try_from(entry.data.len()).context("a file over 4 GiB")?;
        let packed = u32::try_from(compressed.len()).context("a file over 4 GiB")?;
        let name = entry.name.as_bytes();
        let name_len = u16::try_from(name.len()).context("a long name")?;
        let offset = u32::try_from(out.len()).context("an archive over 4 GiB")?;
        // Local file header.
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        for field in [VERSION, 0, 8, time, date] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        for field in [crc.sum(), packed, size] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        out.extend_from_slice(&name_len.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&compressed);
        // Its central directory record.
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        for field in [MADE_BY_UNIX, VERSION, 0, 8, time, date] {
            central.extend_from_slice(&field.to_le_bytes());
        }
        for field in [crc.sum(), packed, size] {
            central.extend_from_slice(&field.to_le_bytes());
        }
        for field in [name_len, 0, 0, 0, 0] {
            central.extend_from_slice(&field.to_le_bytes());
        }
        central.extend_from_slice(&((0o100_000 | entry.mode) << 16).to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name);
    }
    let count = u16::try_from(entries.len()).context("too many files")?;
    let central_at = u32::try_from(out.len()).context("an archive over 4 GiB")?;
    let central_len = u32::try_from(central.len()).context("an archive over 4 GiB")?;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    for field in [0, 0, count, count] {
        out.extend_from_slice(&field.to_le_bytes());
    }
    out.extend_from_slice(&central_len.to_le_bytes());
    out.extend_from_slice(&central_at.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    Ok(out)
}

fn u16_at(bytes: &[u8], at: usize) -> anyhow::Result<u16> {
    match bytes.get(at..at + 2) {
        Some(b) => Ok(u16::from_le_bytes([b[0], b[1]])),
        None => bail!("zip: truncated at {at}"),
    }
}

fn u32_at(bytes: &[u8], at: usize) -> anyhow::Result<u32> {
    match bytes.get(at..at + 4) {
        Some(b) => Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        None => bail!("zip: truncated at {at}"),
    }
}

/// The entries of a `.zip` as [`zip`] writes them (deflated or stored, no
/// zip64, no comment), read through its central directory; the CRC of each
/// is checked.
pub fn read_zip(bytes: &[u8]) -> anyhow::Result<Vec<Entry>> {
    ensure!(bytes.len() >= 22, "zip: too short");
    let end = bytes.len() - 22;
    ensure!(u32_at(bytes, end)? == 0x0605_4b50, "zip: no end of central directory (or a comment)");
    let count = usize::from(u16_at(bytes, end + 10)?);
    let mut at = u32_at(bytes, end + 16)? as usize;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        ensure!(u32_at(bytes, at)? == 0x0201_4b50, "zip: bad central directory record at {at}");
        let method = u16_at(bytes, at + 10)?;
        let crc = u32_at(bytes, at + 16)?;
        let packed = u32_at(bytes, at + 20)? as usize;
        let size = u32_at(bytes, at + 24)? as usize;
        let name_len = usize::from(u16_at(bytes, at + 28)?);
        let skip = usize::from(u16_at(bytes, at + 30)?) + usize::from(u16_at(bytes, at + 32)?);
        let mode = (u32_at(bytes, at + 38)? >> 16) & 0o7777;
        let local = u32_at(bytes, at + 42)? as usize;
        let name = bytes.get(at + 46..at + 46 + name_len).context("zip: truncated name")?;
        let name = String::from_utf8(name.to_vec()).context("zip: a name that is not UTF-8")?;
        at += 46 + name_len + skip;
        ensure!(u32_at(bytes, local)? == 0x0403_4b50, "zip: bad local header for {name}");
        let data_at = local + 30 + usize::from(u16_at(bytes, local + 26)?) + usize::from(u16_at(bytes, local + 28)?);
        let raw = bytes.get(data_at..data_at + packed).context("zip: truncated data")?;
        let data = match method {
            0 => raw.to_vec(),
            8 => {
                let mut data = Vec::with_capacity(size);
                flate2::read::DeflateDecoder::new(raw).read_to_end(&mut data).context("zip: inflate")?;
                data
            }
            other => bail!("zip: {name} uses method {other}"),
        };
        let mut check = flate2::Crc::new();
        check.update(&data);
        ensure!(data.len() == size && check.sum() == crc, "zip: {name} is damaged");
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
        assert_eq!(dos_time(1_700_000_000), ((22 << 11) | (13 << 5) | 10, (43 << 9) | (11 << 5) | 14));
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
