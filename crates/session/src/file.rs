//! The JSON Lines file backend: one event a line, appended, synced when asked.

use crate::backend::LogBackend;
use crate::error::SessionError;
use crate::limits::MAX_GROUP_BYTES;
use crate::lines::ReadAt;
use crate::open::{self, FileId};
use crate::recover::{self, Recovery};
use dsh_core::SessionEvent;
use dsh_core::event::MAX_EVENT_BYTES;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// A buffer grown by one huge group is given back rather than kept for the session's life.
const KEEP_BUFFER: usize = 1 << 20;

/// Appends events to a JSON Lines file.
///
/// Opening recovers the file (see [`FileBackend::open`]). Each commit writes its group with one
/// `write` and, when asked, one `fdatasync`; a group longer than one largest event line (64 MiB
/// and its newline) is written and synced in parts no longer than that, so a crash leaves at
/// most that much half-written (the bound recovery holds a torn tail to). A commit that fails
/// cuts the file back to its length before the commit, so a failed group leaves no partial line
/// behind; if even that fails the backend answers [`SessionError::Poisoned`] until it is
/// reopened.
///
/// Before each commit the backend checks that the log's path still names the file it holds
/// open: a log replaced (renamed over) or removed under a running session fails the commit
/// with [`SessionError::Poisoned`], rather than appending to a file nobody can see.
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
/// backend.commit(vec![SessionEvent { at: None, seq: 1, step: 1, body }], true).unwrap();
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
    /// The open file's identity, to notice the path naming another file.
    id: FileId,
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
    /// The size of every `write` a commit made.
    writes: Vec<usize>,
    /// Smaller limits than the real ones (event line, group), so a test need not write
    /// tens of megabytes to cross them.
    limits: Option<(usize, usize)>,
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
    /// Only a regular file is a log, and the writer opens it only under its own name: a
    /// symbolic link, a FIFO, a device or a directory is refused before anything is read. A
    /// file is a dsh log only if its first line is the event seq 1, or the torn start of one
    /// (a crash during the first write); an empty file is a new log.
    ///
    /// Recovery cuts off a torn tail: what a crash can leave of the last group commit, and
    /// nothing else. That is the next event lines as far as they were written, with zero bytes
    /// where pages were lost: the first bad line must start as the next event does (`{"seq":`
    /// and the next seq) or with zeros, no line may hold bytes a log line never holds (control
    /// characters), lines ended by a newline but not whole events need a lost page (zeros)
    /// among them, and the whole tail is at most one group commit long. Recovery also adds the
    /// newline a whole last event lacks, verifies that seqs run 1, 2, 3, ... without gaps, and
    /// closes every call left without a result with a synthesized `ABORTED` result (in the
    /// call's step, pointing back at it), appended at the end. The repairs are synced before
    /// this returns, reported in the [`Recovery`] and as a `tracing` warning.
    ///
    /// Anything else is refused and the file left byte for byte as it was:
    /// [`SessionError::NotALog`] when the first line is not an event, [`SessionError::Corrupt`]
    /// naming the first bad line of a log (a bad line something whole follows, or a tail that
    /// is not what a torn write leaves: text appended to a log is never cut), and
    /// [`SessionError::Invariant`] naming the first whole event that breaks an invariant of the
    /// log (which no crash leaves).
    ///
    /// Under `none` nothing is synced, so a crash may lose more than one group: a tail longer
    /// than a group is then refused, and left for a person to judge.
    pub fn open(path: impl AsRef<Path>) -> Result<(FileBackend, Recovery), SessionError> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let opening = || format!("opening {shown}");
        let (file, created) =
            open::for_writing(&path).map_err(|e| SessionError::io(opening(), &e))?;
        let id = FileId::of(
            &file
                .metadata()
                .map_err(|e| SessionError::io(opening(), &e))?,
        );
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
            id,
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

    /// Fails (poisoning the writer) when the log's path no longer names the open file: an
    /// agent or an editor replaced it, or someone removed it. Appending on would write where
    /// no reader of the log will ever look, and the session would go on as if recorded.
    fn still_named(&self) -> Result<(), SessionError> {
        let shown = self.path.display();
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if FileId::of(&meta) == self.id => Ok(()),
            Ok(_) => Err(SessionError::Poisoned(format!(
                "the log file {shown} was replaced by another file while this session wrote to \
                 it; nothing more is written (the events so far are in the file that was \
                 replaced)"
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(SessionError::Poisoned(format!(
                "the log file {shown} was removed while this session wrote to it; nothing more \
                 is written"
            ))),
            Err(e) => Err(SessionError::io(
                format!("checking that {shown} is still the log"),
                &e,
            )),
        }
    }

    /// Gives up a commit that wrote `written` bytes so far: they are cut off again (or the
    /// backend is poisoned when that fails), and `err` is the answer.
    fn abandon(&mut self, written: u64, err: SessionError) -> SessionError {
        self.buf.clear();
        if written == 0 {
            return err;
        }
        match self.roll_back("abandoning a commit to", &io::Error::other(err.to_string())) {
            poisoned @ SessionError::Poisoned(_) => poisoned,
            _ => err,
        }
    }

    /// Writes `self.buf[..end]` (whole lines), syncing it when asked; on failure the file goes
    /// back to where the commit began.
    fn write_part(&mut self, end: usize, sync: bool) -> Result<(), SessionError> {
        if end == 0 {
            return Ok(());
        }
        #[cfg(test)]
        self.faults.writes.push(end);
        if let Err(e) = self.file.write_all(&self.buf[..end]) {
            return Err(self.roll_back("writing to", &e));
        }
        if sync && let Err(e) = self.sync() {
            return Err(self.roll_back("syncing", &e));
        }
        Ok(())
    }
}

impl FileBackend {
    /// The longest event line and the most one part of a group writes.
    fn limits(&self) -> (usize, usize) {
        #[cfg(test)]
        if let Some(limits) = self.faults.limits {
            return limits;
        }
        (MAX_EVENT_BYTES, MAX_GROUP_BYTES)
    }
}

impl LogBackend for FileBackend {
    fn commit(&mut self, events: Vec<SessionEvent>, sync: bool) -> Result<(), SessionError> {
        self.still_named()?;
        let (max_event, max_group) = self.limits();
        self.buf.clear();
        // Bytes of this commit already written (in earlier parts of a long group).
        let mut written = 0u64;
        for event in &events {
            let start = self.buf.len();
            if let Err(e) = serde_json::to_writer(&mut self.buf, event) {
                let err = SessionError::Io {
                    context: format!("encoding event {}", event.seq),
                    message: e.to_string(),
                };
                return Err(self.abandon(written, err));
            }
            if self.buf.len() - start > max_event {
                // The writer refuses such an event before it gets here; a direct caller is
                // refused too, with nothing of the commit left in the file.
                let err = SessionError::Refused(format!(
                    "event {} is more than {max_event} bytes long",
                    event.seq
                ));
                return Err(self.abandon(written, err));
            }
            self.buf.push(b'\n');
            if self.buf.len() > max_group {
                // Write (and sync) what came before this line: a part is at most one group.
                self.write_part(start, sync)?;
                written += start as u64;
                self.buf.copy_within(start.., 0);
                self.buf.truncate(self.buf.len() - start);
            }
        }
        let end = self.buf.len();
        if end > 0 || sync {
            if end == 0 {
                if let Err(e) = self.sync() {
                    return Err(self.roll_back("syncing", &e));
                }
            } else {
                self.write_part(end, sync)?;
            }
        }
        written += end as u64;
        self.len += written;
        if self.buf.capacity() > KEEP_BUFFER {
            self.buf = Vec::new();
        }
        Ok(())
    }

    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        // Reads the open file, not the path: exactly the bytes this backend committed.
        let shown = self.path.display().to_string();
        let mut events = Vec::new();
        let reader = ReadAt::new(&self.file, 0).take(self.len);
        let tail = recover::scan(reader, &shown, |e| events.push(e))?;
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
            at: None,
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

    #[test]
    fn a_group_longer_than_one_event_line_is_written_and_synced_in_parts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let (mut b, _) = FileBackend::open(&path).unwrap();
        // An event line of at most 1000 bytes, a part of at most 1001.
        b.faults.limits = Some((1000, 1001));
        let big = |seq| SessionEvent {
            at: None,
            seq,
            step: 1,
            body: EventBody::UserMessage(UserMessageData {
                content: "z".repeat(210),
                origin: "c".into(),
            }),
        };
        b.commit((1..=9).map(big).collect(), true).unwrap();
        let writes = std::mem::take(&mut b.faults.writes);
        assert!(writes.len() >= 3, "{writes:?}");
        assert!(writes.iter().all(|w| *w <= 1001), "{writes:?}");
        assert_eq!(writes.iter().sum::<usize>() as u64, b.len());
        assert_eq!(b.read_all().unwrap().len(), 9);
        // A failure in a later part cuts the earlier parts off too: nothing of the commit stays.
        let good = b.len();
        b.faults.fail_sync = true;
        assert!(b.commit((10..=18).map(big).collect(), true).is_err());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good);
        assert_eq!(b.len(), good);
    }

    #[test]
    fn an_event_longer_than_the_largest_line_is_refused_by_the_backend_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let (mut b, _) = FileBackend::open(&path).unwrap();
        b.faults.limits = Some((1000, 1001));
        let sized = |seq, n| SessionEvent {
            at: None,
            seq,
            step: 1,
            body: EventBody::UserMessage(UserMessageData {
                content: "q".repeat(n),
                origin: "c".into(),
            }),
        };
        // Parts of the commit are written before the long event is met: they go again.
        let mut events: Vec<SessionEvent> = (1..=5).map(|s| sized(s, 400)).collect();
        events.push(sized(6, 1000));
        let err = b.commit(events, true).unwrap_err();
        assert!(matches!(err, SessionError::Refused(_)), "{err}");
        assert!(!b.faults.writes.is_empty(), "no part was written first");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        assert_eq!(b.len(), 0);
        b.commit(vec![user(1)], true).unwrap();
        assert_eq!(b.read_all().unwrap(), vec![user(1)]);
    }
}
