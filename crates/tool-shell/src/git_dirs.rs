//! The git control entries of the workspace, found at every call: a command that could write
//! any repository's control folder could make the user's next `git status` there run its code
//! (hooks, `core.fsmonitor`, `commondir`, `alternates`, `info/`, submodules'
//! `modules/*/config`, worktrees). Every `.git` entry (a folder, or a `gitdir:` file and its
//! target) that exists when the call starts is read-only to the command: the workspace's own,
//! a nested repository's (`vendor/lib/.git`), a submodule's and a worktree's.
//!
//! The walk follows no symlink and is bounded; a folder it cannot list (a command locked it
//! with `chmod 000`) or a workspace past the bound makes the call `DENIED`: a repository
//! could hide there. After the call a second walk names the `.git` entries that appeared, so
//! the result can warn that git should not be run there.

use crate::config::{PathClass, PathRules};
use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, fstat, openat, statat};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What one walk of the workspace found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// The `.git` entries.
    pub git: Vec<PathBuf>,
    /// What the path rules keep read-only.
    pub read_only: Vec<PathBuf>,
    /// What the path rules hide.
    pub hidden: Vec<PathBuf>,
}

/// The most entries one walk reads before it gives up (and the call is `DENIED`).
pub(crate) const MAX_ENTRIES: usize = 1_000_000;

/// Every `.git` entry beneath `workspace` (not descending into them), or why the walk could
/// not be made. A walk without memory (the cache's tests compare against it).
#[cfg(test)]
pub(crate) fn find(workspace: &Path, max_entries: usize) -> Result<Vec<PathBuf>, String> {
    WalkCache::default()
        .walk(workspace, None, max_entries)
        .map(|found| found.git)
}

/// How long after a folder's last change (its mtime or ctime) a listing of it is still
/// distrusted: a change made in the same tick of the filesystem's clock as the listing could
/// leave both times as they were (git's "racily clean" entries). The kernel's coarse clock
/// ticks at most every 10 ms; a listing is trusted only when the folder's times lie well
/// before the moment it was read.
const RACY: Duration = Duration::from_millis(100);

/// What identifies one state of a folder: a folder whose device, inode, mode, owner, mtime
/// and ctime are all unchanged holds the names it held (adding, removing or renaming an entry
/// sets the mtime and ctime; `touch -d` can set the mtime back, never the ctime; `chmod`,
/// `chown` and ACLs set the ctime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    fn of_stat(st: &rustix::fs::Stat) -> Stamp {
        Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            mtime: (st.st_mtime, i64::try_from(st.st_mtime_nsec).unwrap_or(-1)),
            ctime: (st.st_ctime, i64::try_from(st.st_ctime_nsec).unwrap_or(-1)),
        }
    }

    /// The later of the folder's last changes, as a time since the epoch (zero for a time
    /// before it, which is then never trusted: see [`Listing::trusted`]).
    fn last_change(&self) -> Option<Duration> {
        let at = |(s, ns): (i64, i64)| {
            let s = u64::try_from(s).ok()?;
            let ns = u32::try_from(ns).ok()?;
            Some(Duration::new(s, ns))
        };
        Some(at(self.mtime)?.max(at(self.ctime)?))
    }
}

/// One entry of a folder's listing.
#[derive(Debug)]
struct Entry {
    name: OsString,
    /// A folder (not a symlink to one).
    is_dir: bool,
    /// What the path rules made of it (asked once, the first time a walk with rules saw the
    /// entry: the rules answer from the path alone, and the path is the folder's and the
    /// name's).
    class: Option<PathClass>,
}

/// One folder as a walk read it.
#[derive(Debug)]
struct Listing {
    stamp: Stamp,
    /// Whether the folder's times lay more than [`RACY`] before the read: only then can an
    /// unchanged stamp vouch for an unchanged listing.
    trusted: bool,
    entries: Vec<Entry>,
}

/// The workspace walk's memory between calls: each folder's listing with the stamp the folder
/// had when it was read. A call re-stats every folder on its way (one `lstat` each) and reads
/// again only those whose stamp changed or whose listing was read too close to their last
/// change ([`RACY`]); a folder that can no longer be stat'ed or read still denies the call.
/// What the walk finds is therefore what a fresh walk would find at the call's start, at a
/// fraction of its cost.
///
/// Limits (the docs say them): a filesystem that does not keep directory times (some network
/// and FUSE filesystems), or a clock set back across a folder's change, could make a changed
/// folder look unchanged.
#[derive(Default)]
pub(crate) struct WalkCache {
    dirs: Mutex<HashMap<PathBuf, Listing>>,
    /// How many folders were read (not only stat'ed), for the tests.
    reads: AtomicUsize,
}

impl std::fmt::Debug for WalkCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WalkCache(..)")
    }
}

fn unlistable(dir: &Path, e: impl std::fmt::Display) -> String {
    format!(
        "{} cannot be listed to find the git repositories to protect: {e}",
        dir.display()
    )
}

/// Reads `dir` afresh (not through a symlink), keeping the verdicts `previous` had for the
/// names it still holds.
fn read(dir: &Path, previous: Option<Listing>, reads: &AtomicUsize) -> Result<Listing, String> {
    reads.fetch_add(1, Ordering::Relaxed);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let fd = openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| unlistable(dir, std::io::Error::from(e)))?;
    let stamp = Stamp::of_stat(&fstat(&fd).map_err(|e| unlistable(dir, std::io::Error::from(e)))?);
    let mut verdicts: HashMap<OsString, PathClass> = previous
        .map(|l| {
            l.entries
                .into_iter()
                .filter_map(|e| Some((e.name, e.class?)))
                .collect()
        })
        .unwrap_or_default();
    let mut entries = Vec::new();
    let mut listing = Dir::read_from(&fd).map_err(|e| unlistable(dir, std::io::Error::from(e)))?;
    while let Some(entry) = listing.read() {
        let entry = entry.map_err(|e| unlistable(dir, std::io::Error::from(e)))?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => {
                let st = statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| {
                    format!(
                        "{} cannot be read: {}",
                        dir.join(OsStr::from_bytes(name.to_bytes())).display(),
                        std::io::Error::from(e)
                    )
                })?;
                FileType::from_raw_mode(st.st_mode) == FileType::Directory
            }
            _ => false,
        };
        let name = OsStr::from_bytes(name.to_bytes()).to_os_string();
        let class = verdicts.remove(&name);
        entries.push(Entry {
            name,
            is_dir,
            class,
        });
    }
    let trusted = stamp
        .last_change()
        .is_some_and(|changed| changed + RACY < now);
    Ok(Listing {
        stamp,
        trusted,
        entries,
    })
}

/// `previous` if `dir` still has the stamp it had when `previous` was read (and that read was
/// not racy); a fresh listing otherwise.
fn current(dir: &Path, previous: Option<Listing>, reads: &AtomicUsize) -> Result<Listing, String> {
    if let Some(listing) = previous {
        let meta = std::fs::symlink_metadata(dir).map_err(|e| unlistable(dir, e))?;
        if listing.trusted && meta.is_dir() && Stamp::of(&meta) == listing.stamp {
            return Ok(listing);
        }
        return read(dir, Some(listing), reads);
    }
    read(dir, None, reads)
}

impl WalkCache {
    /// One walk: the `.git` entries, and what `rules` classify (a classified folder is not
    /// entered; neither is a `.git`). The walk follows no symlink; a folder it cannot stat or
    /// list, or a workspace of more than `max_entries` entries, is an `Err`.
    pub(crate) fn walk(
        &self,
        workspace: &Path,
        rules: Option<&PathRules>,
        max_entries: usize,
    ) -> Result<Found, String> {
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        let mut old = std::mem::take(&mut *dirs);
        // Only the folders this walk reached are remembered: a removed folder's listing goes.
        let mut kept = HashMap::with_capacity(old.len());
        let result = walk_with(
            workspace,
            rules,
            max_entries,
            &mut old,
            &mut kept,
            &self.reads,
        );
        *dirs = kept;
        result
    }

    /// How many folders walks have read so far (the rest were vouched for by their stamp).
    #[cfg(test)]
    fn reads(&self) -> usize {
        self.reads.load(Ordering::Relaxed)
    }
}

fn walk_with(
    workspace: &Path,
    rules: Option<&PathRules>,
    max_entries: usize,
    old: &mut HashMap<PathBuf, Listing>,
    kept: &mut HashMap<PathBuf, Listing>,
    reads: &AtomicUsize,
) -> Result<Found, String> {
    let mut found = Found::default();
    let mut stack = vec![workspace.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let previous = old.remove(&dir);
        let mut listing = current(&dir, previous, reads)?;
        seen += listing.entries.len();
        if seen > max_entries {
            return Err(format!(
                "the workspace holds more than {max_entries} entries: its git repositories \
                 cannot all be found to protect them"
            ));
        }
        for entry in &mut listing.entries {
            if let Some(rules) = rules {
                let class = *entry
                    .class
                    .get_or_insert_with(|| (rules.0)(&dir.join(&entry.name)));
                match class {
                    PathClass::Hidden => {
                        found.hidden.push(dir.join(&entry.name));
                        continue;
                    }
                    PathClass::ReadOnly => {
                        found.read_only.push(dir.join(&entry.name));
                        continue;
                    }
                    PathClass::Open => {}
                }
            }
            if entry.name == ".git" {
                found.git.push(dir.join(&entry.name));
            } else if entry.is_dir {
                stack.push(dir.join(&entry.name));
            }
        }
        kept.insert(dir, listing);
    }
    found.git.sort();
    Ok(found)
}

/// The paths to keep read-only for one `.git` entry: itself and, where it is a `gitdir:` file
/// (a worktree, a submodule), its target.
pub(crate) fn control_paths(dot_git: &Path) -> Vec<PathBuf> {
    let mut paths = vec![dot_git.to_path_buf()];
    if let Ok(meta) = std::fs::symlink_metadata(dot_git)
        && meta.is_file()
        && let Ok(text) = std::fs::read_to_string(dot_git)
        && let Some(target) = text.lines().find_map(|l| l.strip_prefix("gitdir:"))
        && let Some(parent) = dot_git.parent()
    {
        let target = Path::new(target.trim());
        paths.push(if target.is_absolute() {
            target.to_path_buf()
        } else {
            parent.join(target)
        });
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_repositories_and_gitdir_files_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for p in [".git/hooks", "vendor/lib/.git", "a/b/c"] {
            std::fs::create_dir_all(root.join(p)).unwrap();
        }
        std::fs::write(root.join("a/b/.git"), "gitdir: ../../.git/worktrees/b\n").unwrap();
        let found = find(root, 100).unwrap();
        assert_eq!(
            found,
            vec![
                root.join(".git"),
                root.join("a/b/.git"),
                root.join("vendor/lib/.git")
            ]
        );
        assert_eq!(
            control_paths(&root.join("a/b/.git"))[1],
            root.join("a/b/../../.git/worktrees/b")
        );
        assert!(find(root, 3).is_err(), "past the bound");
    }

    /// A tree whose folders are older than the racy window, and a cache that has walked it.
    fn settled(paths: &[&str]) -> (tempfile::TempDir, PathBuf, WalkCache) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for p in paths {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            if p.extension().is_some() {
                std::fs::write(&p, "x").unwrap();
            } else {
                std::fs::create_dir_all(&p).unwrap();
            }
        }
        std::thread::sleep(RACY + Duration::from_millis(50));
        let cache = WalkCache::default();
        cache.walk(&root, None, 1000).unwrap();
        (dir, root, cache)
    }

    fn git(cache: &WalkCache, root: &Path) -> Vec<PathBuf> {
        let found = cache.walk(root, None, 1000).unwrap().git;
        assert_eq!(
            found,
            find(root, 1000).unwrap(),
            "the cache and a fresh walk differ"
        );
        found
    }

    const TREE: &[&str] = &[".git", "src/a/b", "src/c", "docs/x.md", "vendor/lib/.git"];

    #[test]
    fn an_unchanged_workspace_is_stat_ed_not_read() {
        let (_dir, root, cache) = settled(TREE);
        let first = cache.reads();
        assert_eq!(
            first, 8,
            "every folder once: the root, src, src/a, src/a/b, src/c, docs, vendor, vendor/lib"
        );
        assert_eq!(git(&cache, &root).len(), 2);
        assert_eq!(cache.reads(), first, "nothing changed, nothing read");
    }

    #[test]
    fn an_entry_made_in_a_cached_folder_is_seen() {
        let (_dir, root, cache) = settled(TREE);
        std::fs::create_dir(root.join("src/a/b/.git")).unwrap();
        std::fs::write(root.join("src/c/.git"), "gitdir: ../../.git\n").unwrap();
        assert!(git(&cache, &root).contains(&root.join("src/a/b/.git")));
        assert!(git(&cache, &root).contains(&root.join("src/c/.git")));
    }

    #[test]
    fn a_folder_whose_mtime_was_set_back_is_read_again() {
        let (_dir, root, cache) = settled(TREE);
        let before = std::fs::metadata(root.join("src/c")).unwrap();
        std::fs::create_dir(root.join("src/c/.git")).unwrap();
        // `touch -d` to the folder's old mtime: only the ctime says it changed.
        let old = std::fs::FileTimes::new().set_modified(before.modified().unwrap());
        std::fs::File::open(root.join("src/c"))
            .unwrap()
            .set_times(old)
            .unwrap();
        assert_eq!(
            std::fs::metadata(root.join("src/c")).unwrap().mtime_nsec(),
            before.mtime_nsec()
        );
        assert!(git(&cache, &root).contains(&root.join("src/c/.git")));
    }

    #[test]
    fn a_renamed_folder_is_read_again() {
        let (_dir, root, cache) = settled(TREE);
        // The nested repository moves: it is found where it is now, not where it was.
        std::fs::rename(root.join("vendor/lib"), root.join("vendor/moved")).unwrap();
        assert_eq!(
            git(&cache, &root),
            vec![root.join(".git"), root.join("vendor/moved/.git")]
        );
    }

    #[test]
    fn two_folders_that_swap_names_are_each_read_again() {
        let (_dir, root, cache) = settled(&[".git", "src/a/.git", "src/c/x.md"]);
        std::fs::rename(root.join("src/a"), root.join("src/tmp")).unwrap();
        std::fs::rename(root.join("src/c"), root.join("src/a")).unwrap();
        std::fs::rename(root.join("src/tmp"), root.join("src/c")).unwrap();
        assert_eq!(
            git(&cache, &root),
            vec![root.join(".git"), root.join("src/c/.git")]
        );
    }

    #[test]
    fn a_folder_swapped_for_a_symlink_is_not_followed() {
        let (_dir, root, cache) = settled(TREE);
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(outside.path().join(".git")).unwrap();
        std::fs::rename(root.join("vendor/lib"), root.join("old-lib")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("vendor/lib")).unwrap();
        let found = git(&cache, &root);
        assert!(found.contains(&root.join("old-lib/.git")), "{found:?}");
        assert!(!found.contains(&root.join("vendor/lib/.git")), "{found:?}");
    }

    #[test]
    fn a_folder_locked_after_it_was_cached_denies() {
        // Root lists a folder of mode 000: the test runs itself again as `nobody`.
        if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
            use std::os::unix::process::CommandExt;
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "git_dirs::tests::a_folder_locked_after_it_was_cached_denies",
                    "--nocapture",
                ])
                .env("TMPDIR", "/tmp")
                .uid(65534)
                .gid(65534)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                text.contains("1 passed"),
                "the test did not run as nobody: {text}"
            );
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let (_dir, root, cache) = settled(TREE);
        let lock = |mode| {
            std::fs::set_permissions(root.join("src/c"), std::fs::Permissions::from_mode(mode))
                .unwrap()
        };
        lock(0);
        let walked = cache.walk(&root, None, 1000);
        let again = cache.walk(&root, None, 1000);
        lock(0o755);
        let why = walked.expect_err("a locked folder was vouched for by its cached listing");
        assert!(why.contains("src/c"), "{why}");
        assert!(
            again.is_err(),
            "the second walk after the lock went through"
        );
    }

    #[test]
    fn verdicts_are_asked_once_per_path_until_the_folder_changes() {
        let (_dir, root, cache) = settled(TREE);
        let asked = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let rules = PathRules(std::sync::Arc::new(move |p: &Path| {
            counter.fetch_add(1, Ordering::Relaxed);
            if p.file_name() == Some(OsStr::new(".env")) {
                PathClass::Hidden
            } else {
                PathClass::Open
            }
        }));
        cache.walk(&root, Some(&rules), 1000).unwrap();
        let first = asked.load(Ordering::Relaxed);
        assert!(first > 0);
        cache.walk(&root, Some(&rules), 1000).unwrap();
        assert_eq!(asked.load(Ordering::Relaxed), first);
        std::fs::write(root.join("src/a/.env"), "SECRET=1").unwrap();
        let found = cache.walk(&root, Some(&rules), 1000).unwrap();
        assert_eq!(found.hidden, vec![root.join("src/a/.env")]);
        assert_eq!(
            asked.load(Ordering::Relaxed),
            first + 1,
            "only the new entry is asked"
        );
    }
}
