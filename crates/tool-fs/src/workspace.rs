//! The workspace: its root, and every file operation the tools make, through a `cap-std`
//! directory handle so that no open can leave the root, whatever happens on disk between
//! the resolver's check and the open.
//!
//! Every method here blocks: call them from `spawn_blocking`.

use crate::error::{Denial, FsError};
use crate::sandbox;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt, Permissions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What is at a path, as far as the file tools care.
#[derive(Debug)]
pub enum Existing {
    /// Nothing.
    Missing,
    /// A regular file and its bytes.
    File(Vec<u8>),
    /// A regular file over the size limit; its size.
    TooLarge(u64),
    /// A directory.
    Dir,
    /// A FIFO, socket or device: never opened for reading.
    Special,
}

/// The workspace root, opened once.
///
/// ```
/// use dsh_tool_fs::{Existing, Workspace};
/// let dir = tempfile::tempdir().unwrap();
/// let ws = Workspace::open(dir.path()).unwrap();
/// let rel = ws.resolve("notes/a.txt").unwrap();
/// ws.write_atomic(&rel, b"hi\n").unwrap();
/// assert!(matches!(ws.load(&rel, 1024).unwrap(), Existing::File(b) if b == b"hi\n"));
/// assert!(ws.resolve("../escape").is_err());
/// ```
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    given: PathBuf,
    dir: Dir,
}

/// A unique suffix for temporary files, so concurrent writers never share one.
fn temp_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Turns `cap-std`'s refusal of an escaping path into a denial; other errors stay I/O errors.
fn classify(what: &'static str, path: &Path, e: io::Error) -> FsError {
    let shown = sandbox::display(path);
    if e.kind() == io::ErrorKind::PermissionDenied
        && e.to_string().contains("outside of the filesystem")
    {
        return FsError::denied(
            &shown,
            Denial::SymlinkOutside {
                link: shown.clone(),
            },
        );
    }
    FsError::io(what, &shown, e)
}

/// `.` for the root itself, since `cap-std` wants a non-empty relative path.
fn or_dot(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

impl Workspace {
    /// Opens the root (which must be an existing directory).
    pub fn open(root: impl AsRef<Path>) -> Result<Workspace, FsError> {
        let given = root.as_ref().to_path_buf();
        let err = |source| FsError::Root {
            path: given.display().to_string(),
            source,
        };
        let canonical = std::fs::canonicalize(&given).map_err(err)?;
        let dir = Dir::open_ambient_dir(&canonical, ambient_authority()).map_err(err)?;
        Ok(Workspace {
            root: canonical,
            given,
            dir,
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The root's directory handle: every open below it is confined.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Resolves a path the model gave ([`sandbox::resolve`]); an absolute path under the root
    /// as it was given (not canonical) is accepted too.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, FsError> {
        let under_given = if self.given == self.root {
            None
        } else {
            Path::new(path)
                .strip_prefix(&self.given)
                .ok()
                .and_then(Path::to_str)
        };
        match under_given {
            Some(rest) => {
                let rest = if rest.is_empty() { "." } else { rest };
                sandbox::resolve(&self.root, rest).map_err(|e| match e {
                    FsError::PathDenied { why, .. } => FsError::denied(path, why),
                    other => other,
                })
            }
            None => sandbox::resolve(&self.root, path),
        }
    }

    /// What is at `rel`, reading a regular file's bytes when it is at most `max_bytes` long.
    /// FIFOs and devices are recognised without blocking on them.
    pub fn load(&self, rel: &Path, max_bytes: u64) -> Result<Existing, FsError> {
        let mut options = OpenOptions::new();
        options
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        let mut file = match self.dir.open_with(or_dot(rel), &options) {
            Ok(f) => f,
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                return Ok(Existing::Missing);
            }
            Err(e) => return Err(classify("opening", rel, e)),
        };
        let meta = file.metadata().map_err(|e| classify("reading", rel, e))?;
        if meta.is_dir() {
            return Ok(Existing::Dir);
        }
        if !meta.is_file() {
            return Ok(Existing::Special);
        }
        if meta.len() > max_bytes {
            return Ok(Existing::TooLarge(meta.len()));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        (&mut file)
            .take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| classify("reading", rel, e))?;
        if bytes.len() as u64 > max_bytes {
            return Ok(Existing::TooLarge(bytes.len() as u64));
        }
        Ok(Existing::File(bytes))
    }

    /// The permissions of the regular file at `rel`; `None` when there is no regular file.
    pub(crate) fn file_permissions(&self, rel: &Path) -> Result<Option<Permissions>, FsError> {
        match self.dir.metadata(or_dot(rel)) {
            Ok(m) if m.is_file() => Ok(Some(m.permissions())),
            Ok(_) => Ok(None),
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                Ok(None)
            }
            Err(e) => Err(classify("reading the permissions of", rel, e)),
        }
    }

    /// Opens a directory below the root.
    pub fn open_dir(&self, rel: &Path) -> Result<Dir, FsError> {
        self.dir
            .open_dir(or_dot(rel))
            .map_err(|e| classify("opening the directory", rel, e))
    }

    /// Writes `bytes` to `rel` atomically: a temporary file in the same directory, fsync,
    /// rename over the target, fsync of the directory. An existing file's permissions are
    /// kept. Missing parent directories are created. A crash leaves either the old file or
    /// the new one, never a mix (at worst a stray `.NAME.dsh-*.tmp` beside it).
    pub fn write_atomic(&self, rel: &Path, bytes: &[u8]) -> Result<(), FsError> {
        self.write_atomic_with(rel, bytes, None)
    }

    /// [`Workspace::write_atomic`], giving the new file `permissions` when they are set
    /// (a moved file keeps its source's, a file put back keeps the ones it had) instead of
    /// the existing file's or the default.
    pub(crate) fn write_atomic_with(
        &self,
        rel: &Path,
        bytes: &[u8],
        permissions: Option<&Permissions>,
    ) -> Result<(), FsError> {
        let (parent, name) = split(rel)?;
        if !parent.as_os_str().is_empty() {
            self.dir.create_dir_all(parent).map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists
                    || e.raw_os_error() == Some(libc::ENOTDIR)
                {
                    FsError::io(
                        "writing",
                        &sandbox::display(rel),
                        io::Error::other("one of its parent folders is a file"),
                    )
                } else {
                    classify("creating the folders of", rel, e)
                }
            })?;
        }
        let pdir = self.open_dir(parent)?;
        let keep: Option<Permissions> = match pdir.symlink_metadata(name) {
            Ok(m) if m.is_dir() => {
                return Err(FsError::io(
                    "writing",
                    &sandbox::display(rel),
                    io::Error::other("it is a directory"),
                ));
            }
            Ok(m) if m.is_file() => Some(m.permissions()),
            _ => None,
        };
        let keep = permissions.cloned().or(keep);
        let stem: String = name.to_string_lossy().chars().take(100).collect();
        let temp = format!(".{stem}.dsh-{}.tmp", temp_suffix());
        let written = (|| -> io::Result<()> {
            let mut options = OpenOptions::new();
            options.write(true).create_new(true);
            let mut file = pdir.open_with(&temp, &options)?;
            file.write_all(bytes)?;
            if let Some(permissions) = keep {
                file.set_permissions(permissions)?;
            }
            file.sync_all()?;
            drop(file);
            pdir.rename(&temp, &pdir, name)
        })();
        if let Err(e) = written {
            let _ = pdir.remove_file(&temp);
            return Err(classify("writing", rel, e));
        }
        sync_dir(pdir);
        Ok(())
    }

    /// Removes the temporary files [`Workspace::write_atomic`] leaves behind when its process
    /// dies mid-write (`.NAME.dsh-PID-N.tmp`), for every writer process that is gone; a live
    /// process's files (this one's included) are left alone. Walks the workspace without
    /// following symlinks, through the root's handle, looking at most at `max_entries`
    /// entries. Answers the removed files, relative to the root.
    ///
    /// Knowing whether a process is gone needs `/proc`; without it nothing is removed.
    ///
    /// ```
    /// use dsh_tool_fs::Workspace;
    /// let dir = tempfile::tempdir().unwrap();
    /// std::fs::write(dir.path().join(".a.txt.dsh-999999999-3.tmp"), "half").unwrap();
    /// let ws = Workspace::open(dir.path()).unwrap();
    /// let removed = ws.remove_stale_temp_files(10_000).unwrap();
    /// assert_eq!(removed, vec![std::path::PathBuf::from(".a.txt.dsh-999999999-3.tmp")]);
    /// ```
    pub fn remove_stale_temp_files(&self, max_entries: usize) -> Result<Vec<PathBuf>, FsError> {
        let mut removed = Vec::new();
        if !Path::new("/proc/self").exists() {
            return Ok(removed);
        }
        let own = std::process::id();
        let mut pending: Vec<PathBuf> = vec![PathBuf::new()];
        let mut seen = 0usize;
        while let Some(rel) = pending.pop() {
            let Ok(dir) = self.open_dir(&rel) else {
                continue;
            };
            let Ok(entries) = dir.entries() else {
                continue;
            };
            let mut stale = Vec::new();
            for entry in entries.flatten() {
                seen += 1;
                if seen > max_entries {
                    break;
                }
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let name = entry.file_name();
                if kind.is_dir() {
                    pending.push(rel.join(&name));
                } else if kind.is_file()
                    && let Some(pid) = name.to_str().and_then(temp_file_writer)
                    && pid != own
                    && !Path::new("/proc").join(pid.to_string()).exists()
                {
                    stale.push(name);
                }
            }
            let mut any = false;
            for name in stale {
                match dir.remove_file(&name) {
                    Ok(()) => {
                        any = true;
                        removed.push(rel.join(&name));
                    }
                    Err(e) => tracing::warn!(
                        file = %sandbox::display(&rel.join(&name)),
                        error = %e,
                        "a stale temporary file could not be removed"
                    ),
                }
            }
            if any {
                sync_dir(dir);
            }
            if seen > max_entries {
                tracing::warn!(
                    max_entries,
                    "the workspace is too large to look for stale temporary files everywhere"
                );
                break;
            }
        }
        Ok(removed)
    }

    /// Removes a file (durably).
    pub fn remove_file(&self, rel: &Path) -> Result<(), FsError> {
        let (parent, name) = split(rel)?;
        let pdir = self.open_dir(parent)?;
        pdir.remove_file(name)
            .map_err(|e| classify("deleting", rel, e))?;
        sync_dir(pdir);
        Ok(())
    }
}

/// The writer's process id, when `name` is one of [`Workspace::write_atomic`]'s temporary
/// files: `.STEM.dsh-PID-N.tmp`.
fn temp_file_writer(name: &str) -> Option<u32> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (rest, n) = inner.rsplit_once('-')?;
    let (rest, pid) = rest.rsplit_once('-')?;
    let stem = rest.strip_suffix(".dsh")?;
    if stem.is_empty() || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// The workspace as a [`dsh_core::Confinement`]: what the pipeline resolves every tool's declared paths
/// through, and what their handles read and write through.
impl dsh_core::Confinement for Workspace {
    fn root(&self) -> &Path {
        Workspace::root(self)
    }

    fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        Workspace::resolve(self, raw).map_err(|e| e.to_string())
    }

    fn read(&self, rel: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
        let shown = sandbox::display(rel);
        match self
            .load(rel, max_bytes)
            .map_err(|e| io::Error::other(e.to_string()))?
        {
            Existing::File(bytes) => Ok(bytes),
            Existing::Missing => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("`{shown}` does not exist"),
            )),
            Existing::TooLarge(n) => Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("`{shown}` is {n} bytes, past the limit of {max_bytes}"),
            )),
            Existing::Dir => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("`{shown}` is a directory"),
            )),
            Existing::Special => Err(io::Error::other(format!("`{shown}` is not a regular file"))),
        }
    }

    fn write(&self, rel: &Path, bytes: &[u8]) -> io::Result<()> {
        self.write_atomic(rel, bytes)
            .map_err(|e| io::Error::other(e.to_string()))
    }
}

/// Makes a rename or unlink in `dir` durable. A failure here cannot undo the change, so it
/// is logged, not reported.
fn sync_dir(dir: Dir) {
    if let Err(e) = dir.into_std_file().sync_all() {
        tracing::warn!(error = %e, "fsync of a directory failed");
    }
}

fn split(rel: &Path) -> Result<(&Path, &std::ffi::OsStr), FsError> {
    match (rel.parent(), rel.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(FsError::io(
            "writing",
            &sandbox::display(rel),
            io::Error::other("it is the workspace root, a directory"),
        )),
    }
}
