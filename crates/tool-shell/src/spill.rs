//! The spill folder: when a stream's output is cut for the model, the whole of it (up to a
//! cap; past that it is counted and dropped) goes to a file the model can read with
//! `read_file`. The tool keeps the files of its last N spilling calls and removes older ones.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
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
        let mut file = None;
        let mut path = self.dir.join(format!("{name}.{stream}.txt"));
        if tokio::fs::create_dir_all(&self.dir).await.is_ok() {
            for n in 1..1000u32 {
                if n > 1 {
                    path = self.dir.join(format!("{name}-{n}.{stream}.txt"));
                }
                match tokio::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .await
                {
                    Ok(f) => {
                        file = Some(f);
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(_) => break,
                }
            }
        }
        if file.is_none() {
            tracing::warn!(path = %path.display(), "the spill file could not be created");
        }
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
        for path in old.into_iter().flatten() {
            let _ = std::fs::remove_file(path);
        }
    }
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
}
