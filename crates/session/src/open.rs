//! Opening a log file: only a regular file, refused before anything is read or written, and
//! for writing only by its own name, never through a symbolic link.
//!
//! A FIFO would block a reader in `open()` or `read()` forever, a device such as `/dev/zero`
//! never ends, and a symbolic link named as the log could point at any file (notes, a policy)
//! that recovery would then take for a damaged log. Readers follow a link (they change
//! nothing, and refuse whatever is not a log); the writer does not.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

fn kind(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a file"
    }
}

/// `Ok` for a regular file; otherwise the error that names what it is.
fn regular(file: &File) -> io::Result<()> {
    let t = file.metadata()?.file_type();
    if t.is_file() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", kind(t)),
        ))
    }
}

/// Opens the log at `path` to read it.
pub(crate) fn for_reading(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // A FIFO opens at once instead of waiting for a writer; on a regular file the flag
        // changes nothing.
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(path)?;
    regular(&file)?;
    Ok(file)
}

/// Opens (creating it if there is none) the log at `path` to append to it. Answers the file
/// and whether it was created.
pub(crate) fn for_writing(path: &Path) -> io::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options.read(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY);
        // A log holds every argument and result of its calls: the user's alone.
        options.mode(0o600);
    }
    // `create_new` never follows a link either: a dangling one is "already exists".
    let (file, created) = match options.clone().create_new(true).open(path) {
        Ok(f) => (f, true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (
            options.open(path).map_err(|e| name_the_link(path, e))?,
            false,
        ),
        Err(e) => return Err(e),
    };
    regular(&file)?;
    Ok((file, created))
}

/// `O_NOFOLLOW`'s `ELOOP`, said as what it means.
fn name_the_link(path: &Path, err: io::Error) -> io::Error {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return err;
    }
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "it is a symbolic link, and dsh writes a log only under its own name, never through a \
         link (name the file itself if it is a dsh log)",
    )
}

/// What names a file, to tell whether a path still names the one open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    #[cfg(unix)]
    dev: u64,
    #[cfg(unix)]
    ino: u64,
}

impl FileId {
    /// The identity of `meta`'s file.
    pub fn of(meta: &std::fs::Metadata) -> FileId {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            FileId {
                dev: meta.dev(),
                ino: meta.ino(),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            FileId {}
        }
    }
}
