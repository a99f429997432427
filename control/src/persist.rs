//! The state file: every commit is written atomically, so `lbd` restarts
//! with the last committed state and forwards before any controller
//! reconnects.
//!
//! Format (JSON): `{ "version": 1, "revision": N, "state": <DesiredState> }`.
//!
//! Atomicity: write `<file>.tmp` in the same directory, fsync it, rename it
//! over the state file, fsync the directory. A crash leaves either the old
//! or the new file, never a mix; a failed write leaves the old file and
//! rejects the commit.
//!
//! Loading: a missing file is an empty state at revision 0 (first start);
//! anything else that is wrong (unreadable, not JSON, unknown version) is an
//! error naming the file, never silently an empty state: starting empty
//! would withdraw every service of a node that merely has a typo on disk.
//! The caller validates and compiles what was loaded.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::DesiredState;

/// The only format version written and read.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Serialize)]
struct FileOut<'a> {
    version: u32,
    revision: u64,
    state: &'a DesiredState,
}

/// Read after [`VersionOnly`] accepted the version.
#[derive(Deserialize)]
struct FileIn {
    revision: u64,
    state: DesiredState,
}

#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// Reading failed.
    #[error("state file {path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The content is not a state file of a known version.
    #[error("state file {path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Writing failed; the previous file is intact.
    #[error("state file {path}: cannot write: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

/// Reads the state file. `Ok(None)`: there is none yet.
pub fn load(path: &Path) -> Result<Option<(u64, DesiredState)>, PersistError> {
    let text = match fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(PersistError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let corrupt = |reason: String| PersistError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let v: VersionOnly =
        serde_json::from_slice(&text).map_err(|e| corrupt(format!("not a state file: {e}")))?;
    if v.version != FORMAT_VERSION {
        return Err(corrupt(format!(
            "format version {} is not supported (this lbd reads version {FORMAT_VERSION})",
            v.version
        )));
    }
    let f: FileIn = serde_json::from_slice(&text).map_err(|e| corrupt(format!("invalid content: {e}")))?;
    Ok(Some((f.revision, f.state)))
}

/// Writes `state` at `revision` atomically (see the module doc).
pub fn store(path: &Path, revision: u64, state: &DesiredState) -> Result<(), PersistError> {
    let err = |source| PersistError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let write = || -> io::Result<()> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        serde_json::to_writer(
            &mut w,
            &FileOut {
                version: FORMAT_VERSION,
                revision,
                state,
            },
        )?;
        w.write_all(b"\n")?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(&dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        err(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Mode, Service, Source, TrafficPolicy};

    fn state() -> DesiredState {
        let mut st = DesiredState::default();
        st.services.insert(
            "default/web".into(),
            Service {
                name: "default/web".into(),
                mode: Mode::Dnat,
                traffic_policy: TrafficPolicy::Cluster,
                affinity_timeout_seconds: Some(30),
                source_ranges: vec![],
                source: Source::K8s,
            },
        );
        st
    }

    #[test]
    fn missing_file_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert!(load(&d.path().join("state.json")).unwrap().is_none());
    }

    #[test]
    fn round_trip() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        store(&p, 7, &state()).unwrap();
        assert_eq!(load(&p).unwrap(), Some((7, state())));
        assert!(!d.path().join("state.json.tmp").exists());
        let text = fs::read_to_string(&p).unwrap();
        assert!(
            text.starts_with("{\"version\":1,\"revision\":7,\"state\":{"),
            "{text}"
        );
    }

    #[test]
    fn corrupt_and_unknown_versions_name_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        fs::write(&p, "{\"version\":1,\"revision\":3,\"state\":").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("state.json") && e.contains("not a state file"), "{e}");
        fs::write(&p, "{\"version\":2,\"revision\":3,\"state\":{}}").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("format version 2"), "{e}");
        fs::write(
            &p,
            "{\"version\":1,\"revision\":3,\"state\":{\"services\":[{\"name\":1}]}}",
        )
        .unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("invalid content"), "{e}");
    }

    #[test]
    fn failed_write_keeps_the_previous_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        store(&p, 1, &state()).unwrap();
        let before = fs::read(&p).unwrap();
        // A directory where the temporary file should go makes the write fail
        // whatever the privileges (tests may run as root).
        fs::create_dir(d.path().join("state.json.tmp")).unwrap();
        let e = store(&p, 2, &DesiredState::default()).unwrap_err();
        assert!(matches!(e, PersistError::Write { .. }), "{e}");
        assert_eq!(fs::read(&p).unwrap(), before);
    }
}
