//! The state file: every commit is made durable before it is published,
//! so `lbd` restarts with the last committed state and forwards before any
//! controller reconnects.
//!
//! Two files:
//! - the **base** `<file>`: JSON `{ "version": 1, "revision": N, "state":
//!   <DesiredState> }`, the whole state at revision N;
//! - the **journal** `<file>.journal`: one JSON line per commit after the
//!   base, `{"revision": N, "changes": [<Change>...]}`, the effective
//!   changes of that commit in order (cascades included), appended and
//!   `fdatasync`ed before the commit is published.
//!
//! Beside them `<file>.lock`, empty and never removed, is locked
//! exclusively by the one [`StateFile`] using them: a second lbd on the
//! same file would append the same revisions and compact over the first
//! one's files, so it fails at open instead.
//!
//! A commit costs the size of its change, not of the state (a full rewrite
//! of a 10,000-service state is ~13 MB). When the journal outgrows
//! `max(`[`COMPACT_MIN_BYTES`]`, base size)`, or after a failed append,
//! the next commit **compacts** instead: it writes the whole state as the
//! new base and removes the journal.
//!
//! Base atomicity: write `<file>.tmp` in the same directory, fsync it,
//! rename it over the base, fsync the directory. `<file>.tmp` (so the
//! base) and the journal are created mode 0600: the state names every
//! service and backend of the node. A crash leaves the old or
//! the new base, never a mix. A crash between the rename and the journal's
//! removal leaves journal lines at or below the base's revision: loading
//! skips them. A failed write rejects the commit and leaves both files as
//! they were (a partly appended line is cut off again). If even the cut
//! fails, the journal may hold the rejected commit, and a restart would
//! apply it: the plane then rewrites the base at the revision before it
//! and removes the journal ([`StateFile::restore`]); failing that, the
//! next commit does. The one failure
//! that cannot be undone, the directory's fsync after the rename, keeps
//! the commit (the new base is what a reader sees), is logged, keeps the
//! journal and makes the next commit write the base again.
//!
//! Loading: a missing base is an empty state at revision 0 (first start);
//! the journal's lines are then replayed in order, each the next revision.
//! A last line cut short (a crash during an append, so never acknowledged)
//! is ignored with a warning, and so is a last line holding NUL bytes,
//! which no JSON line has: the file grew but part of the line's data never
//! reached the disk before the crash. Anything else that is wrong (unreadable, not
//! JSON, unknown version, a gap in the revisions, a change that does not
//! apply) is an error naming the file, never silently an empty state:
//! starting empty would withdraw every service of a node that merely has a
//! typo on disk. The caller validates and compiles what was loaded.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufWriter, ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::{Change, DesiredState};
use crate::store::Txn;

/// The highest revision a state file may hold: far beyond any real
/// count of commits, and far enough below `u64::MAX` that counting on
/// from it cannot overflow.
const MAX_REVISION: u64 = 1 << 62;

/// The only format version written and read.
pub const FORMAT_VERSION: u32 = 1;

/// The journal is compacted into the base once it is larger than this and
/// than the base.
pub const COMPACT_MIN_BYTES: u64 = 4 << 20;

#[derive(Serialize)]
struct LineOut<'a> {
    revision: u64,
    changes: &'a [Change],
}

#[derive(Deserialize)]
struct LineIn {
    revision: u64,
    changes: Vec<Change>,
}

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
    /// Another process (or another [`StateFile`] in this one) holds the
    /// state file's lock.
    #[error("state file {path}: in use by another lbd (lock {lock} held)")]
    Locked {
        /// The state file.
        path: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
}

/// The bytes of `path`, `None` if it does not exist: `Read` naming it
/// otherwise.
fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, PersistError> {
    match fs::read(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PersistError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Reads the state file. `Ok(None)`: there is none yet.
pub fn load(path: &Path) -> Result<Option<(u64, DesiredState)>, PersistError> {
    let Some(text) = read_if_present(path)? else {
        return Ok(None);
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

/// What [`store`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// The file's size.
    pub len: u64,
    /// False if fsyncing the directory failed after the rename: the new
    /// file is in place (what a reader sees), but whether the rename
    /// survives a crash is unknown.
    pub dir_synced: bool,
}

/// Writes `state` at `revision` atomically (see the module doc). An error
/// leaves the file as it was; once the new file has replaced it, only
/// `dir_synced` can be false.
pub fn store(path: &Path, revision: u64, state: &DesiredState) -> Result<Stored, PersistError> {
    let err = |source| PersistError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = dir_of(path);
    let tmp = with_suffix(path, ".tmp");
    let write = || -> io::Result<Stored> {
        // Opened first: out of file descriptors, the write fails before
        // it replaces anything.
        let dir = File::open(&dir)?;
        // Created afresh, never reused: the base gets this file's mode,
        // 0600 whatever the umask or the mode of a leftover.
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
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
        let len = file.metadata()?.len();
        fs::rename(&tmp, path)?;
        // Past the rename the old file is gone: a failure now cannot undo
        // the write, so it is reported, not returned as "nothing changed".
        let dir_synced = match dir.sync_all() {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(path = %path.display(), "state file written, but fsync of its directory failed: {e}");
                false
            }
        };
        Ok(Stored { len, dir_synced })
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        err(e)
    })
}

/// The directory `path` is in.
fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `path` with `suffix` added to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name: OsString = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// Creates the directory of `path` if missing (mode 0700), and makes each
/// directory it created durable in its parent (fsync of the parent), or a
/// power loss could take the new directory and every commit made in it:
/// `Write` naming the directory otherwise.
fn ensure_dir(path: &Path) -> Result<(), PersistError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = dir_of(path);
    if !dir.is_dir() {
        let mut created = Vec::new();
        let mut d = dir.as_path();
        while !d.is_dir() {
            created.push(d.to_path_buf());
            match d.parent() {
                Some(p) if !p.as_os_str().is_empty() => d = p,
                _ => break,
            }
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|source| PersistError::Write {
                path: dir.clone(),
                source,
            })?;
        // Deepest first: a parent's entry is synced after its child's
        // directory exists in it.
        for c in &created {
            let parent = dir_of(c);
            File::open(&parent)
                .and_then(|f| f.sync_all())
                .map_err(|source| PersistError::Write { path: parent, source })?;
        }
        tracing::info!(dir = %dir.display(), "created the state file's directory");
    }
    Ok(())
}

/// Takes the exclusive lock on `<path>.lock` (created mode 0600 if
/// missing, never removed) without waiting: `Locked` if another open file
/// holds it. The lock lasts as long as the returned handle.
fn lock(path: &Path) -> Result<File, PersistError> {
    let lock = with_suffix(path, ".lock");
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock);
    let file = match file {
        Ok(f) => f,
        Err(source) => return Err(PersistError::Write { path: lock, source }),
    };
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(PersistError::Locked {
            path: path.to_path_buf(),
            lock,
        }),
        Err(TryLockError::Error(source)) => Err(PersistError::Write { path: lock, source }),
    }
}

/// Creates `<path>.tmp`, which every compaction writes, and removes it
/// again: `Write` naming it if that fails. Only under the lock: another
/// lbd's compaction may be writing that file.
fn check_writable(path: &Path) -> Result<(), PersistError> {
    let tmp = with_suffix(path, ".tmp");
    let probe = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp);
    match probe {
        Ok(_) => {
            let _ = fs::remove_file(&tmp);
            Ok(())
        }
        Err(source) => Err(PersistError::Write { path: tmp, source }),
    }
}

/// What [`read`] found besides the state.
struct Replayed {
    journal: PathBuf,
    /// Bytes of whole journal lines.
    journal_len: u64,
    base_len: u64,
    /// The journal ends in a torn line, left out of `journal_len`.
    torn: bool,
}

/// Loads the base and replays the journal (module doc), taking no lock:
/// [`StateFile::open`] holds it, tests read what a restart would load.
fn read(path: &Path) -> Result<(Replayed, Option<(u64, DesiredState)>), PersistError> {
    let journal = with_suffix(path, ".journal");
    let loaded = load(path)?;
    let base_exists = loaded.is_some();
    let base_len = if base_exists {
        fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    } else {
        0
    };
    let (mut revision, mut state) = loaded.unwrap_or_default();
    if revision > MAX_REVISION {
        // No lbd writes such a revision (2^62 commits); the counter
        // would overflow a few commits on.
        return Err(PersistError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("revision {revision} is beyond {MAX_REVISION}"),
        });
    }
    let text = read_if_present(&journal)?.unwrap_or_default();
    let corrupt = |reason: String| PersistError::Corrupt {
        path: journal.clone(),
        reason,
    };
    let mut replayed = 0u64;
    let mut good_len = 0usize;
    let mut rest = &text[..];
    while !rest.is_empty() {
        let Some(i) = rest.iter().position(|&b| b == b'\n') else {
            // The last line, cut short by a crash mid-append: that
            // commit was never acknowledged.
            tracing::warn!(path = %journal.display(), bytes = rest.len(), "ignoring an incomplete last journal line");
            break;
        };
        let line = &rest[..i];
        let entry: LineIn = match serde_json::from_slice(line) {
            Ok(e) => e,
            Err(_) if line.contains(&0) && !rest[i + 1..].contains(&b'\n') => {
                // The last line, with NUL bytes where its data should
                // be: the file grew, but the crash came before all of
                // it reached the disk, so before the commit was
                // acknowledged. No JSON line holds a NUL.
                tracing::warn!(path = %journal.display(), bytes = rest.len(), "ignoring a last journal line with unwritten (NUL) bytes");
                break;
            }
            Err(e) => return Err(corrupt(format!("the line after revision {revision}: {e}"))),
        };
        rest = &rest[i + 1..];
        if entry.revision <= revision && replayed == 0 {
            // Left over from a compaction interrupted after the rename.
            good_len = text.len() - rest.len();
            continue;
        }
        if entry.revision != revision + 1 {
            return Err(corrupt(format!(
                "revision {} follows revision {revision}",
                entry.revision
            )));
        }
        let mut txn = Txn::new(&mut state);
        for c in entry.changes {
            if let Err(e) = txn.change(c) {
                txn.rollback();
                return Err(corrupt(format!("revision {}: {e}", entry.revision)));
            }
        }
        let _ = txn.commit();
        revision = entry.revision;
        replayed += 1;
        good_len = text.len() - rest.len();
    }
    let out = (base_exists || replayed > 0).then_some((revision, state));
    let r = Replayed {
        journal,
        journal_len: good_len as u64,
        base_len,
        torn: good_len < text.len(),
    };
    Ok((r, out))
}

/// What a restart would load from `path`, read while a [`StateFile`] holds
/// it (tests).
#[cfg(test)]
pub(crate) fn load_all(path: &Path) -> Result<Option<(u64, DesiredState)>, PersistError> {
    read(path).map(|(_, loaded)| loaded)
}

/// The base and the journal of one state file (module doc).
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    journal: PathBuf,
    /// Bytes in the journal.
    journal_len: u64,
    /// Bytes in the base (0: none yet).
    base_len: u64,
    /// The next commit rewrites the base (a failed append, or the journal
    /// outgrew the base).
    compact_next: bool,
    /// A rejected commit's revision whose line could not be cut off the
    /// journal again, until a base at or beyond it, or the journal's
    /// removal, makes it harmless.
    rejected: Option<u64>,
    /// `<file>.lock`, locked exclusively for as long as this value lives,
    /// so that no other lbd appends to the journal or compacts.
    _lock: File,
    /// Test-only failures to inject.
    #[cfg(test)]
    fail: Fail,
}

/// I/O failures a test can inject where no file system makes them on
/// demand.
#[cfg(test)]
#[derive(Debug, Default)]
struct Fail {
    /// The append's `fdatasync` (after its write succeeded).
    sync: bool,
    /// Cutting a failed append off again.
    cut: bool,
}

impl StateFile {
    /// Loads the base and replays the journal. `None`: no state file yet.
    /// First makes sure commits can be written: the directory is created
    /// (mode 0700) if missing; `<file>.lock` is locked exclusively, so that
    /// a second lbd on the same file fails here ([`PersistError::Locked`])
    /// instead of interleaving its commits with this one's; and
    /// `<file>.tmp`, which every compaction writes, is created and removed
    /// again, so that a path lbd cannot write fails at start, naming the
    /// directory, instead of at the first commit.
    pub fn open(path: &Path) -> Result<(StateFile, Option<(u64, DesiredState)>), PersistError> {
        ensure_dir(path)?;
        let lock = lock(path)?;
        check_writable(path)?;
        let (r, loaded) = read(path)?;
        let f = StateFile {
            path: path.to_path_buf(),
            journal: r.journal,
            journal_len: r.journal_len,
            base_len: r.base_len,
            // A cut-off tail is dropped by rewriting the base.
            compact_next: r.torn,
            rejected: None,
            _lock: lock,
            #[cfg(test)]
            fail: Fail::default(),
        };
        Ok((f, loaded))
    }

    /// The base file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal file.
    pub fn journal_path(&self) -> &Path {
        &self.journal
    }

    /// Makes the commit of `changes`, which took the state to `state` at
    /// `revision`, durable: a journal line, or a new base when it is time
    /// to compact. On error nothing is changed on disk that a later load
    /// would read differently, and the caller must reject the commit.
    pub fn commit(
        &mut self,
        revision: u64,
        state: &DesiredState,
        changes: &[Change],
    ) -> Result<(), PersistError> {
        let compact = self.compact_next
            || self.base_len == 0
            || self.journal_len > COMPACT_MIN_BYTES.max(self.base_len);
        if compact {
            return self.compact(revision, state);
        }
        let mut line =
            serde_json::to_vec(&LineOut { revision, changes }).map_err(|e| PersistError::Write {
                path: self.journal.clone(),
                source: io::Error::other(e),
            })?;
        line.push(b'\n');
        let before = self.journal_len;
        let append = || -> io::Result<()> {
            let mut f = OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(&self.journal)?;
            f.write_all(&line)?;
            #[cfg(test)]
            if self.fail.sync {
                return Err(io::Error::other("injected fdatasync failure"));
            }
            f.sync_data()?;
            if before == 0 {
                // A journal just created (after a compaction removed the
                // last): its directory entry must be durable too, or a
                // crash could lose the file with this acknowledged commit.
                File::open(dir_of(&self.journal))?.sync_all()?;
            }
            Ok(())
        };
        match append() {
            Ok(()) => {
                self.journal_len += line.len() as u64;
                Ok(())
            }
            Err(source) => {
                // Cut a partial line off again; if even that fails, the
                // next commit rewrites the base and drops the journal.
                #[cfg(test)]
                let injected = self.fail.cut;
                #[cfg(not(test))]
                let injected = false;
                let cut = if injected {
                    Err(io::Error::other("injected truncate failure"))
                } else {
                    OpenOptions::new()
                        .write(true)
                        .open(&self.journal)
                        .and_then(|f| f.set_len(before).and_then(|()| f.sync_data()))
                };
                if let Err(e) = cut {
                    tracing::error!(path = %self.journal.display(), revision, "cannot cut the rejected commit off the journal: {e}");
                    self.compact_next = true;
                    self.rejected = Some(revision);
                }
                Err(PersistError::Write {
                    path: self.journal.clone(),
                    source,
                })
            }
        }
    }

    /// Writes the whole state as the base and removes the journal.
    fn compact(&mut self, revision: u64, state: &DesiredState) -> Result<(), PersistError> {
        let stored = store(&self.path, revision, state)?;
        self.base_len = stored.len;
        if !stored.dir_synced {
            // The new base stands (the commit with it) but its rename may
            // not survive a crash: keep the journal, which still holds
            // everything up to the previous revision, and write the base
            // again at the next commit.
            self.compact_next = true;
            return Ok(());
        }
        self.compact_next = false;
        if self.rejected.is_some_and(|r| r <= revision) {
            // A base at the rejected commit's revision makes its line stale.
            self.rejected = None;
        }
        match fs::remove_file(&self.journal) {
            Ok(()) => self.journal_len = 0,
            Err(e) if e.kind() == ErrorKind::NotFound => self.journal_len = 0,
            // The base is durable; its revision makes the journal's lines
            // stale, and a later load skips them. Try again next time.
            Err(e) => {
                tracing::warn!(path = %self.journal.display(), "cannot remove the compacted journal: {e}");
                self.compact_next = true;
                return Ok(());
            }
        }
        self.rejected = None;
        Ok(())
    }

    /// Makes the next appends' fdatasync and cut fail (tests).
    #[cfg(test)]
    pub(crate) fn inject_failures(&mut self, sync: bool, cut: bool) {
        self.fail = Fail { sync, cut };
    }

    /// After a rejected commit: if its line may still be in the journal
    /// (the cut after the failed append failed too), writes `state` at
    /// `revision`, the state before that commit, as the base and removes
    /// the journal, so that a restart does not apply the rejected commit.
    /// Ok when the files no longer hold it (or never did).
    pub fn restore(&mut self, revision: u64, state: &DesiredState) -> Result<(), PersistError> {
        if self.rejected.is_none() {
            return Ok(());
        }
        self.compact(revision, state)?;
        match self.rejected {
            None => Ok(()),
            Some(r) => Err(PersistError::Write {
                path: self.journal.clone(),
                source: io::Error::other(format!(
                    "the journal still holds rejected revision {r} and could not be removed"
                )),
            }),
        }
    }
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

    /// A state file in a directory that does not exist yet gets it; one
    /// that cannot be written fails at open, not at the first commit.
    #[test]
    fn open_creates_the_directory_and_checks_it_is_writable() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("var/lib/lbd/state.json");
        let (mut f, loaded) = StateFile::open(&p).unwrap();
        assert!(loaded.is_none());
        let dir = d.path().join("var/lib/lbd");
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(!with_suffix(&p, ".tmp").exists(), "the probe is removed");
        f.commit(1, &state(), &[]).unwrap();
        assert_eq!(load(&p).unwrap(), Some((1, state())));
        // Under a regular file: no directory can be made there.
        let blocker = d.path().join("file");
        fs::write(&blocker, b"x").unwrap();
        let e = StateFile::open(&blocker.join("state.json")).unwrap_err();
        assert!(
            matches!(&e, PersistError::Write { path, .. } if path == &blocker),
            "{e}"
        );
        assert!(e.to_string().contains("cannot write"), "{e}");
    }

    /// A second `StateFile` on one path, in this process or another lbd,
    /// fails at open naming the lock, before it touches any file (the
    /// other's `<file>.tmp` is left alone); dropping the first frees it.
    /// `File::try_lock` is `flock`: separate opens of the lock file
    /// conflict within one process too.
    #[test]
    fn a_state_file_in_use_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        let (mut f, _) = StateFile::open(&p).unwrap();
        f.commit(1, &state(), &[]).unwrap();
        let lock = d.path().join("state.json.lock");
        assert_eq!(fs::metadata(&lock).unwrap().permissions().mode() & 0o777, 0o600);
        let tmp = d.path().join("state.json.tmp");
        fs::write(&tmp, b"the other's compaction").unwrap();
        let e = StateFile::open(&p).unwrap_err();
        assert!(matches!(&e, PersistError::Locked { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "state file {}: in use by another lbd (lock {} held)",
                p.display(),
                lock.display()
            )
        );
        assert_eq!(fs::read(&tmp).unwrap(), b"the other's compaction");
        fs::remove_file(&tmp).unwrap();
        drop(f);
        let (_f, loaded) = StateFile::open(&p).unwrap();
        assert_eq!(loaded, Some((1, state())));
        assert!(lock.exists(), "the lock file is never removed");
    }

    /// The base (written as `<file>.tmp`) and the journal are created
    /// 0600 whatever the umask: a leftover `<file>.tmp` with a wider mode
    /// is not reused, and a compaction makes a base widened since 0600
    /// again.
    #[test]
    fn the_files_are_private_to_lbd() {
        use std::os::unix::fs::PermissionsExt;
        let private = |p: &Path| {
            let mode = fs::metadata(p).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{}: mode {mode:o}", p.display());
        };
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        let tmp = d.path().join("state.json.tmp");
        fs::write(&tmp, b"left over").unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)).unwrap();
        store(&p, 1, &state()).unwrap();
        private(&p);
        let (mut f, _) = StateFile::open(&p).unwrap();
        let mut st = state();
        let changes = backend_change(&mut st, 8002);
        f.commit(2, &st, &changes).unwrap();
        let journal = d.path().join("state.json.journal");
        private(&journal);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        f.journal_len = COMPACT_MIN_BYTES + 1;
        let changes = backend_change(&mut st, 8003);
        f.commit(3, &st, &changes).unwrap();
        assert!(!journal.exists(), "compacted");
        private(&p);
        assert_eq!(load_all(&p).unwrap(), Some((3, st)));
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

    fn backend_change(st: &mut DesiredState, port: u16) -> Vec<Change> {
        use crate::model::{Backend, BackendKey, BackendState};
        let mut txn = Txn::new(st);
        txn.change(Change::UpsertBackend(Backend {
            key: BackendKey {
                service: "default/web".into(),
                addr: "10.1.0.1".parse().unwrap(),
                port,
            },
            weight: 1,
            state: BackendState::Active,
            operator_state: None,
            node: None,
            zone: None,
            source: Source::Api,
        }))
        .unwrap();
        let (changes, _) = txn.commit();
        changes
    }

    fn lines_of(path: &Path) -> Vec<String> {
        fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }

    /// Revision 1 as the base, 2..=5 in the journal; returns the state.
    fn five_commits(p: &Path) -> DesiredState {
        let (mut f, loaded) = StateFile::open(p).unwrap();
        assert!(loaded.is_none());
        let mut st = state();
        f.commit(1, &st, &[]).unwrap();
        for rev in 2..=5 {
            let changes = backend_change(&mut st, 8000 + rev as u16);
            f.commit(rev, &st, &changes).unwrap();
        }
        st
    }

    #[test]
    fn journal_round_trip_and_compaction() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        let st = five_commits(&p);
        let journal = d.path().join("state.json.journal");
        assert_eq!(fs::read_to_string(&journal).unwrap().lines().count(), 4);
        assert_eq!(load(&p).unwrap().map(|x| x.0), Some(1), "the base stays at 1");
        let (mut f, loaded) = StateFile::open(&p).unwrap();
        assert_eq!(loaded, Some((5, st.clone())));
        // Past the threshold the next commit rewrites the base.
        f.journal_len = COMPACT_MIN_BYTES + 1;
        let mut st6 = st.clone();
        let changes = backend_change(&mut st6, 9000);
        f.commit(6, &st6, &changes).unwrap();
        assert!(!journal.exists());
        assert_eq!(load(&p).unwrap(), Some((6, st6.clone())));
        assert_eq!(load_all(&p).unwrap(), Some((6, st6)));
    }

    #[test]
    fn torn_tail_stale_lines_gaps_and_garbage() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        let st = five_commits(&p);
        let journal = d.path().join("state.json.journal");
        let good = fs::read_to_string(&journal).unwrap();

        // A last line cut short by a crash: ignored, and the next commit
        // rewrites the base so the tail goes away.
        fs::write(&journal, format!("{good}{{\"revision\":6,\"chan")).unwrap();
        let (mut f, loaded) = StateFile::open(&p).unwrap();
        assert_eq!(loaded, Some((5, st.clone())));
        f.commit(6, &st, &[]).unwrap();
        assert!(!journal.exists());
        assert_eq!(load(&p).unwrap().map(|x| x.0), Some(6));

        // Lines at or below the base's revision (a compaction interrupted
        // after its rename) are skipped.
        let lines: Vec<&str> = good.lines().collect();
        fs::write(&journal, format!("{}\n{}\n", lines[2], lines[3])).unwrap();
        assert_eq!(load_all(&p).unwrap().map(|x| x.0), Some(6));

        // A gap, or garbage before the end: errors naming the journal.
        five_commits(&d.path().join("b.json"));
        let jb = d.path().join("b.json.journal");
        let lines = lines_of(&jb);
        fs::write(&jb, format!("{}\n{}\n", lines[0], lines[2])).unwrap();
        let e = StateFile::open(&d.path().join("b.json")).unwrap_err().to_string();
        assert!(
            e.contains("b.json.journal") && e.contains("revision 4 follows revision 2"),
            "{e}"
        );
        fs::write(&jb, format!("{}\nnot json\n{}\n", lines[0], lines[1])).unwrap();
        let e = StateFile::open(&d.path().join("b.json")).unwrap_err().to_string();
        assert!(
            e.contains("b.json.journal") && e.contains("after revision 2"),
            "{e}"
        );
        // A change that does not apply to the state.
        fs::write(
            &jb,
            "{\"revision\":2,\"changes\":[{\"DeleteService\":\"nope/nope\"}]}\n",
        )
        .unwrap();
        let e = StateFile::open(&d.path().join("b.json")).unwrap_err().to_string();
        assert!(e.contains("revision 2") && e.contains("no such service"), "{e}");
    }

    /// A last line with NUL bytes (the file grew, its data never reached
    /// the disk) is a torn tail even with its newline; anywhere else it is
    /// corruption.
    #[test]
    fn a_last_line_with_unwritten_bytes_is_a_torn_tail() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        let st = five_commits(&p);
        let journal = d.path().join("state.json.journal");
        let good = fs::read_to_string(&journal).unwrap();
        let torn = "{\"revision\":6,\"changes\":[\0\0\0\0\0\0]}\n";
        fs::write(&journal, format!("{good}{torn}")).unwrap();
        let (mut f, loaded) = StateFile::open(&p).unwrap();
        assert_eq!(loaded, Some((5, st.clone())));
        f.commit(6, &st, &[]).unwrap();
        assert!(!journal.exists(), "the next commit drops the tail");

        five_commits(&d.path().join("b.json"));
        let jb = d.path().join("b.json.journal");
        let lines = lines_of(&jb);
        fs::write(&jb, format!("{}\n{torn}{}\n", lines[0], lines[1])).unwrap();
        let e = StateFile::open(&d.path().join("b.json")).unwrap_err().to_string();
        assert!(
            e.contains("b.json.journal") && e.contains("after revision 2"),
            "{e}"
        );
    }

    /// A commit whose append was written but not synced, and could not be
    /// cut off again, is still in the journal: a load would apply it.
    /// `restore` rewrites the base at the revision before it.
    #[test]
    fn a_rejected_commit_left_in_the_journal_is_removed_by_restore() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        let st5 = five_commits(&p);
        let (mut f, _) = StateFile::open(&p).unwrap();
        let mut st6 = st5.clone();
        let changes = backend_change(&mut st6, 9999);
        f.inject_failures(true, true);
        assert!(f.commit(6, &st6, &changes).is_err());
        // What a crash now would restart with: the rejected commit.
        assert_eq!(load_all(&p).unwrap().map(|x| x.0), Some(6));
        f.inject_failures(false, false);
        f.restore(5, &st5).unwrap();
        assert_eq!(load_all(&p).unwrap(), Some((5, st5.clone())));
        // Nothing to restore after a clean failure or none.
        f.restore(5, &st5).unwrap();
        f.commit(6, &st6, &changes).unwrap();
        assert_eq!(load_all(&p).unwrap(), Some((6, st6)));
    }

    #[test]
    fn a_revision_no_lbd_could_have_written_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        let big = u64::MAX - 1;
        fs::write(&p, format!("{{\"version\":1,\"revision\":{big},\"state\":{{\"services\":[],\"frontends\":[],\"backends\":[]}}}}")).unwrap();
        let e = StateFile::open(&p).unwrap_err().to_string();
        assert!(
            e.contains("state.json") && e.contains(&format!("revision {big}")),
            "{e}"
        );
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
