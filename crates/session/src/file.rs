//! The JSON Lines file backend: one event a line, appended, synced when asked.

use crate::backend::LogBackend;
use crate::error::SessionError;
use crate::recover::{self, Recovery};
use dsh_core::SessionEvent;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A buffer grown by one huge group is given back rather than kept for the session's life.
const KEEP_BUFFER: usize = 1 << 20;

/// Appends events to a JSON Lines file.
///
/// Opening recovers the file (see [`FileBackend::open`]). Each commit writes its whole group
/// with one `write` and, when asked, one `fdatasync`. A commit that fails cuts the file back to
/// its length before the commit, so a failed group leaves no partial line behind; if even that
/// fails the backend answers [`SessionError::Poisoned`] until it is reopened.
///
/// ```
/// use dsh_core::event::{EventBody, SessionEvent, UserMessageData};
/// use dsh_session::{FileBackend, LogBackend};
/// let dir = std::env::temp_dir().join(format!("dsh-doc-file-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("session.jsonl");
/// # let _ = std::fs::remove_file(&path);
/// let (mut backend, recovery) = FileBackend::open(&path).unwrap();
/// assert_eq!(recovery.next_seq, 1);
/// let body = EventBody::UserMessage(UserMessageData { content: "hi".into(), origin: "c1".into() });
/// backend.commit(vec![SessionEvent { seq: 1, step: 1, body }], true).unwrap();
/// drop(backend);
/// let (backend, recovery) = FileBackend::open(&path).unwrap();
/// assert_eq!((recovery.events_read, recovery.next_seq, recovery.next_step), (1, 2, 2));
/// assert_eq!(backend.read_all().unwrap().len(), 1);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct FileBackend {
    file: File,
    path: PathBuf,
    /// The file's length after the last successful commit: where a failed one is cut back to.
    len: u64,
    buf: Vec<u8>,
    #[cfg(test)]
    faults: Faults,
}

/// Failures the unit tests inject where the OS would not fail on demand.
#[cfg(test)]
#[derive(Debug, Default)]
struct Faults {
    fail_sync: bool,
    fail_truncate: bool,
}

fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

impl FileBackend {
    /// Opens the log at `path`, creating it when it does not exist, and recovers it.
    ///
    /// Recovery cuts off a torn tail (a torn last line, or every line from the first bad one to
    /// the end when none of them is whole: the unsynced region a crash can leave under
    /// `batch`), adds the newline a whole last event lacks, verifies that seqs run 1, 2, 3, ...
    /// without gaps, and closes every call left without a result with a synthesized `ABORTED`
    /// result (in the call's step, pointing back at it), appended at the end. The repairs are synced before this returns, reported in the [`Recovery`]
    /// and as a `tracing` warning. A bad line that something whole follows is
    /// [`SessionError::Corrupt`] naming it, and whole events that break an invariant of the
    /// log (which no crash leaves) are [`SessionError::Invariant`] naming the first: in both
    /// cases the file is left untouched.
    pub fn open(path: impl AsRef<Path>) -> Result<(FileBackend, Recovery), SessionError> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let opening = || format!("opening {shown}");
        let (file, created) = match OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => (f, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (
                OpenOptions::new()
                    .read(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| SessionError::io(opening(), &e))?,
                false,
            ),
            Err(e) => return Err(SessionError::io(opening(), &e)),
        };
        let kind = file
            .metadata()
            .map_err(|e| SessionError::io(opening(), &e))?
            .file_type();
        if !kind.is_file() {
            // A device or a FIFO would never end (or never hold what was written).
            return Err(SessionError::Io {
                context: opening(),
                message: "not a regular file".into(),
            });
        }
        // One writer per log: a second process (or a restarted session whose old writer is
        // still finishing a commit) must not interleave lines with the first.
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(SessionError::InUse(shown));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(SessionError::io(format!("locking {shown}"), &e));
            }
        }
        if created {
            // The new name must survive a crash as much as the lines written under it.
            sync_dir(&path)
                .map_err(|e| SessionError::io(format!("syncing the directory of {shown}"), &e))?;
        }
        let (tail, tracker) = recover::scan_tracked(&file, &shown, |_| {})?;
        let (closings, recovery) = tracker.finish(tail)?;
        let mut backend = FileBackend {
            file,
            path,
            len: tail.valid_len,
            buf: Vec::new(),
            #[cfg(test)]
            faults: Faults::default(),
        };
        if recovery.repaired() {
            backend.repair(tail, closings)?;
        }
        recover::report(&shown, &recovery);
        Ok((backend, recovery))
    }

    fn repair(
        &mut self,
        tail: recover::Tail,
        closings: Vec<SessionEvent>,
    ) -> Result<(), SessionError> {
        let shown = self.path.display().to_string();
        if tail.torn_bytes > 0 {
            self.file
                .set_len(tail.valid_len)
                .map_err(|e| SessionError::io(format!("cutting the torn tail of {shown}"), &e))?;
        }
        if tail.missing_newline {
            self.file
                .write_all(b"\n")
                .map_err(|e| SessionError::io(format!("ending the last line of {shown}"), &e))?;
            self.len += 1;
        }
        // Also syncs the cut and the newline when there is nothing to close.
        self.commit(closings, true)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes committed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing is in the log.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Undoes a failed commit: the file goes back to its last good length, or the backend
    /// gives up.
    fn roll_back(&mut self, doing: &str, err: &io::Error) -> SessionError {
        let failed = SessionError::io(format!("{doing} {}", self.path.display()), err);
        #[cfg(test)]
        let truncated = if self.faults.fail_truncate {
            Err(io::Error::other("injected truncate failure"))
        } else {
            self.file.set_len(self.len)
        };
        #[cfg(not(test))]
        let truncated = self.file.set_len(self.len);
        match truncated {
            Ok(()) => failed,
            Err(cut) => SessionError::Poisoned(format!(
                "{failed}; cutting {} back to {} bytes also failed: {cut}",
                self.path.display(),
                self.len
            )),
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        #[cfg(test)]
        if self.faults.fail_sync {
            return Err(io::Error::other("injected sync failure"));
        }
        self.file.sync_data()
    }
}

impl LogBackend for FileBackend {
    fn commit(&mut self, events: Vec<SessionEvent>, sync: bool) -> Result<(), SessionError> {
        self.buf.clear();
        for event in &events {
            serde_json::to_writer(&mut self.buf, event).map_err(|e| SessionError::Io {
                context: format!("encoding event {}", event.seq),
                message: e.to_string(),
            })?;
            self.buf.push(b'\n');
        }
        if !self.buf.is_empty()
            && let Err(e) = self.file.write_all(&self.buf)
        {
            return Err(self.roll_back("writing to", &e));
        }
        if sync && let Err(e) = self.sync() {
            return Err(self.roll_back("syncing", &e));
        }
        self.len += self.buf.len() as u64;
        if self.buf.capacity() > KEEP_BUFFER {
            self.buf = Vec::new();
        }
        Ok(())
    }

    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        let shown = self.path.display().to_string();
        let file =
            File::open(&self.path).map_err(|e| SessionError::io(format!("opening {shown}"), &e))?;
        let mut events = Vec::new();
        let tail = recover::scan(file, &shown, |e| events.push(e))?;
        if tail.torn_bytes > 0 || tail.missing_newline {
            return Err(SessionError::Corrupt {
                line: events.len() + 1,
                reason: "the last line is not a whole event; was the file changed underneath \
                         the writer?"
                    .into(),
            });
        }
        Ok(events)
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::EventBody;
    use dsh_core::event::UserMessageData;

    fn user(seq: u64) -> SessionEvent {
        SessionEvent {
            seq,
            step: 1,
            body: EventBody::UserMessage(UserMessageData {
                content: format!("m{seq}"),
                origin: "c".into(),
            }),
        }
    }

    #[test]
    fn a_failed_sync_cuts_the_group_off_and_the_next_commit_continues() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let (mut b, _) = FileBackend::open(&path).unwrap();
        b.commit(vec![user(1), user(2)], true).unwrap();
        let good = b.len();
        b.faults.fail_sync = true;
        let err = b.commit(vec![user(3), user(4)], true).unwrap_err();
        assert!(matches!(err, SessionError::Io { .. }), "{err}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good);
        assert_eq!(b.len(), good);
        b.faults.fail_sync = false;
        b.commit(vec![user(3)], true).unwrap();
        let seqs: Vec<u64> = b.read_all().unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        drop(b);
        let (_, rec) = FileBackend::open(&path).unwrap();
        assert!(!rec.repaired());
        assert_eq!(rec.next_seq, 4);
    }

    #[test]
    fn a_failed_rollback_poisons() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let (mut b, _) = FileBackend::open(&path).unwrap();
        b.commit(vec![user(1)], true).unwrap();
        b.faults.fail_sync = true;
        b.faults.fail_truncate = true;
        let err = b.commit(vec![user(2)], true).unwrap_err();
        assert!(matches!(err, SessionError::Poisoned(_)), "{err}");
    }
}
