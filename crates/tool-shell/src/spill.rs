//! The spill folder: when a stream's output is cut for the model, the whole of it (up to a
//! cap; past that it is counted and dropped) goes to a file the model can read with
//! `read_file`. The tool keeps the files of its last N spilling calls and removes older ones.
//!
//! The folder is made by the first call that spills, not before: a run without one leaves
//! nothing in the workspace. Until then a command may create the path itself, so the folder is
//! reached one component at a time, never through a symlink: a command that put a link where
//! the folder goes cannot send dsh's writes (or removals) elsewhere.

use rustix::fs::{Mode, OFlags};
use std::os::fd::OwnedFd;

use std::collections::VecDeque;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use tokio::io::AsyncWriteExt;

/// The spill folder of one tool (one session).
#[derive(Debug)]
pub(crate) struct SpillDir {
    dir: PathBuf,
    keep_calls: usize,
    history: Mutex<VecDeque<Vec<PathBuf>>>,
}

/// A stream being spilled.
pub(crate) struct SpillFile {
    path: PathBuf,
    file: Option<tokio::fs::File>,
    written: u64,
    cap: u64,
}

fn safe_name(call_id: &str) -> String {
    let cleaned: String = call_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "call".into()
    } else {
        cleaned
    }
}

impl SpillDir {
    pub(crate) fn new(dir: PathBuf, keep_calls: usize) -> SpillDir {
        SpillDir {
            dir,
            keep_calls,
            history: Mutex::new(VecDeque::new()),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// A new file for one stream of a call: `CALL.STREAM.txt` (the model can name it in a
    /// later call), or `CALL-N.STREAM.txt` when that name is taken.
    pub(crate) async fn open(&self, call_id: &str, stream: &str, cap: u64) -> SpillFile {
        let name = safe_name(call_id);
        let dir = self.dir.clone();
        let stream = stream.to_string();
        let opened = tokio::task::spawn_blocking(move || create_in(&dir, &name, &stream)).await;
        let (path, file) = match opened {
            Ok(Ok((path, file))) => (path, Some(tokio::fs::File::from_std(file))),
            Ok(Err(e)) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "the spill file could not be created");
                (self.dir.clone(), None)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the spill file could not be created");
                (self.dir.clone(), None)
            }
        };
        SpillFile {
            path,
            file,
            written: 0,
            cap,
        }
    }

    /// Records a call's spill files; removes the files of calls older than the last N.
    pub(crate) fn remember(&self, files: Vec<PathBuf>) {
        if files.is_empty() {
            return;
        }
        let old: Vec<Vec<PathBuf>> = {
            let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
            history.push_back(files);
            let excess = history.len().saturating_sub(self.keep_calls);
            history.drain(..excess).collect()
        };
        if old.is_empty() {
            return;
        }
        let Ok(dir) = open_dir(&self.dir) else {
            return;
        };
        for path in old.into_iter().flatten() {
            if let Some(name) = path.file_name() {
                let _ = rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty());
            }
        }
    }
}

/// Opens the folder `dir` (absolute, its ancestors' symlinks resolved when the tool was
/// made), making the parts that are missing, without following a symlink anywhere on the way.
fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut at = rustix::fs::open("/", flags, Mode::empty())?;
    for part in dir.components() {
        let name = match part {
            Component::RootDir => continue,
            Component::Normal(name) => name,
            _ => {
                return Err(std::io::Error::other(
                    "the spill folder's path is not plain",
                ));
            }
        };
        let next = match rustix::fs::openat(&at, name, flags | OFlags::NOFOLLOW, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) => {
                match rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                rustix::fs::openat(&at, name, flags | OFlags::NOFOLLOW, Mode::empty())?
            }
            other => other?,
        };
        at = next;
    }
    Ok(at)
}

/// A new file for one stream of a call in `dir`: `CALL.STREAM.txt`, or `CALL-N.STREAM.txt`
/// when that name is taken.
fn create_in(dir: &Path, name: &str, stream: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    let at = open_dir(dir)?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for n in 1..1000u32 {
        let file_name = if n == 1 {
            format!("{name}.{stream}.txt")
        } else {
            format!("{name}-{n}.{stream}.txt")
        };
        match rustix::fs::openat(&at, file_name.as_str(), flags, Mode::from_raw_mode(0o644)) {
            Ok(fd) => return Ok((dir.join(file_name), std::fs::File::from(fd))),
            Err(rustix::io::Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(std::io::Error::other(
        "every spill file name of this call is taken",
    ))
}

/// `dir` made absolute with the symlinks of the part that exists resolved: what
/// [`open_dir`] may then walk without following any.
pub(crate) fn resolved(dir: &Path) -> PathBuf {
    let mut existing = dir.to_path_buf();
    let mut rest = Vec::new();
    while existing.canonicalize().is_err() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return dir.to_path_buf(),
        }
    }
    let mut path = existing.canonicalize().unwrap_or(existing);
    path.extend(rest.iter().rev());
    path
}

impl SpillFile {
    /// Appends what fits under the cap.
    pub(crate) async fn write(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.written);
        let take = (bytes.len() as u64).min(room) as usize;
        if take == 0 {
            return;
        }
        if let Some(file) = self.file.as_mut() {
            if file.write_all(&bytes[..take]).await.is_err() {
                self.file = None;
            } else {
                self.written += take as u64;
            }
        }
    }

    /// Flushes; answers the path and the bytes written, if the file exists.
    pub(crate) async fn close(mut self) -> Option<(PathBuf, u64)> {
        let mut file = self.file.take()?;
        let _ = file.flush().await;
        Some((self.path, self.written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_last_calls_keep_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(dir.path().join("spill"), 2);
        let mut kept = Vec::new();
        for i in 0..3 {
            let mut f = spill.open(&format!("c/{i}"), "stdout", 4).await;
            f.write(b"123456").await;
            let (path, n) = f.close().await.unwrap();
            assert_eq!(n, 4, "capped");
            assert_eq!(std::fs::read(&path).unwrap(), b"1234");
            spill.remember(vec![path.clone()]);
            kept.push(path);
        }
        assert!(!kept[0].exists(), "older than the last two");
        assert!(kept[1].exists() && kept[2].exists());
        assert_eq!(kept[2].file_name().unwrap(), "c_2.stdout.txt");
        let again = spill.open("c/2", "stdout", 4).await;
        let (again, _) = again.close().await.unwrap();
        assert_eq!(
            again.file_name().unwrap(),
            "c_2-2.stdout.txt",
            "a taken name"
        );
    }

    #[tokio::test]
    async fn nothing_is_made_before_a_call_spills() {
        let dir = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(dir.path().join(".dsh/spill"), 2);
        assert!(!dir.path().join(".dsh").exists());
        let f = spill.open("c", "stdout", 4).await;
        let (path, _) = f.close().await.unwrap();
        assert_eq!(path, dir.path().join(".dsh/spill/c.stdout.txt"));
        assert!(path.is_file());
    }

    #[tokio::test]
    async fn a_symlink_where_the_folder_goes_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::create_dir_all(dir.path().join("ws/.dsh")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("ws/.dsh/spill")).unwrap();
        let spill = SpillDir::new(dir.path().join("ws/.dsh/spill"), 1);
        let f = spill.open("c", "stdout", 4).await;
        assert!(f.close().await.is_none(), "no spill file through a link");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
}
