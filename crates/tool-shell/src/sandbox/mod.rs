//! The OS sandbox of one call, prepared in dsh before the fork.
//!
//! Two walls, each enough on its own for what it covers:
//!
//! - **A mount namespace** (in a user namespace, so no privilege is needed): the workspace and
//!   every ancestor of a protected path are bound onto themselves (a mount point cannot be
//!   renamed or removed, so `mv .git x` cannot carry `.git/hooks` away), read-only paths are
//!   bound read-only, hidden paths are covered by an empty, unreadable stand-in. In
//!   `read-only` mode the workspace itself is read-only.
//! - **Landlock**: reading is allowed everywhere, writing only in the workspace (not in
//!   `read-only`), the call's private temp folder and a few devices; with the network off, no
//!   TCP and no abstract Unix socket outside; signals only inside. Landlock grants whole
//!   subtrees, which is why the mounts carry the exceptions inside the workspace.
//!
//! Whatever the network setting, the command joins a session keyring of its own and a seccomp
//! filter refuses the keyring calls (`keyctl`, `add_key`, `request_key`).
//! With the network off, a seccomp filter (`seccomp.rs`: no socket but AF_UNIX, no io_uring,
//! no ptrace) and Landlock's TCP rules and abstract-socket scope are added; on a kernel whose
//! Landlock cannot scope abstract sockets, a network namespace (no interface but a down
//! loopback) as well. The command also loses every capability and gets
//! `no_new_privs`. Anything that cannot be set up makes the call `DENIED`, never unsandboxed.

mod cleanup;
mod landlock;
mod seccomp;

use crate::config::{SandboxConfig, SandboxMode};
use crate::process::plan::{MountOp, Namespaces};
use seccompiler::BpfProgram;
use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The sandbox of one call, ready for the fork.
pub(crate) struct Prepared {
    /// The Landlock ruleset.
    pub landlock: Option<OwnedFd>,
    /// The seccomp filters.
    pub seccomp: Vec<BpfProgram>,
    /// Namespaces and mounts (none in `full`).
    pub namespaces: Option<Namespaces>,
    /// Mount `/proc` afresh inside the PID namespace.
    pub mount_proc: bool,
    /// Whether the command is sandboxed at all.
    pub sandboxed: bool,
}

/// The call's private folder: `w/tmp/` (the command's `TMPDIR`: in a sandbox, a tmpfs of
/// bounded size mounted there, gone with the call's mount namespace) and `hide/` (the empty
/// stand-ins mounted over hidden paths, which the command cannot touch). Landlock lets the
/// command write beneath `w/`, which holds nothing but `tmp` (a rule on the mount point
/// itself would not reach into the tmpfs: Landlock skips hidden mount points).
#[derive(Debug)]
pub(crate) struct PrivateDir {
    dir: tempfile::TempDir,
}

/// Nothing of a call outlives it: the folder goes whatever the command left in it.
impl Drop for PrivateDir {
    fn drop(&mut self) {
        if let Err(e) = cleanup::remove_tree(self.dir.path()) {
            tracing::warn!(path = %self.dir.path().display(), error = %e, "the call's private folder could not be removed");
        }
    }
}

impl PrivateDir {
    pub(crate) fn new() -> std::io::Result<PrivateDir> {
        let dir = tempfile::Builder::new().prefix("dsh-shell-").tempdir()?;
        std::fs::create_dir(dir.path().join("w"))?;
        std::fs::create_dir(dir.path().join("w").join("tmp"))?;
        let hide = dir.path().join("hide");
        std::fs::create_dir(&hide)?;
        let empty_dir = hide.join("dir");
        std::fs::create_dir(&empty_dir)?;
        std::fs::set_permissions(&empty_dir, std::fs::Permissions::from_mode(0o000))?;
        let empty_file = hide.join("file");
        std::fs::File::create(&empty_file)?;
        std::fs::set_permissions(&empty_file, std::fs::Permissions::from_mode(0o000))?;
        Ok(PrivateDir { dir })
    }

    /// The folder itself.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The command's temp folder.
    pub(crate) fn tmp(&self) -> PathBuf {
        self.dir.path().join("w").join("tmp")
    }

    /// The folder Landlock lets the command write beneath (it holds only `tmp`).
    fn writable(&self) -> PathBuf {
        self.dir.path().join("w")
    }

    fn stand_in(&self, dir: bool) -> PathBuf {
        self.dir
            .path()
            .join("hide")
            .join(if dir { "dir" } else { "file" })
    }
}

fn cstring(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{} holds a NUL byte", path.display()))
}

/// `path` made absolute (from the workspace) with its symlinks resolved; `None` when it does
/// not exist (nothing to protect). Any other failure to resolve it (permission denied on a
/// folder a command locked, a symlink loop) is an `Err` naming it: the sandbox must never be
/// built with a piece missing.
fn existing(workspace: &Path, path: &Path) -> Result<Option<PathBuf>, String> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        workspace.join(path)
    };
    match absolute.canonicalize() {
        Ok(resolved) => Ok(Some(resolved)),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            Ok(None)
        }
        Err(e) => Err(format!(
            "{} must be protected or hidden but cannot be resolved: {e}",
            absolute.display()
        )),
    }
}

/// The paths of one call, found by the tool's walk (beside the config's own).
pub(crate) struct Paths<'a> {
    /// Read-only to the command (the spill folder, git control entries, what the path rules
    /// keep read-only).
    pub protected: &'a [PathBuf],
    /// Hidden from the command (what the path rules hide).
    pub hidden: &'a [PathBuf],
}

/// The mounts: private propagation, the whole world read-only, the workspace (writable in
/// `workspace-write`) and the private temp folder (a tmpfs of `tmp_bytes`), then each
/// protected path's ancestors inside the workspace, then the read-only and hidden paths,
/// shallowest first.
fn mounts(
    config: &SandboxConfig,
    workspace: &Path,
    paths: &Paths<'_>,
    private: &PrivateDir,
    tmp_bytes: u64,
) -> Result<Vec<MountOp>, String> {
    let protected = paths.protected;
    let data = format!("size={tmp_bytes},mode=0700");
    let mut ops = vec![
        MountOp::MakePrivate,
        MountOp::ReadOnlyWorld,
        MountOp::BindSelf {
            path: cstring(workspace)?,
            read_only: config.mode == SandboxMode::ReadOnly,
        },
        MountOp::Tmpfs {
            target: cstring(&private.tmp())?,
            data: CString::new(data).map_err(|_| "tmpfs options hold a NUL byte".to_string())?,
        },
    ];
    let mut read_only: BTreeSet<PathBuf> = BTreeSet::new();
    for path in protected.iter().chain(&config.read_only_paths) {
        if let Some(path) = existing(workspace, path)?
            && path != workspace
        {
            read_only.insert(path);
        }
    }
    let mut hidden: BTreeSet<PathBuf> = BTreeSet::new();
    for path in config.hidden_paths.iter().chain(paths.hidden) {
        if let Some(path) = existing(workspace, path)? {
            hidden.insert(path);
        }
    }
    let mut ancestors = BTreeSet::new();
    for path in read_only.iter().chain(&hidden) {
        if let Ok(inside) = path.strip_prefix(workspace) {
            let mut at = workspace.to_path_buf();
            let parts: Vec<_> = inside.components().collect();
            for part in parts.iter().take(parts.len().saturating_sub(1)) {
                at.push(part);
                ancestors.insert(at.clone());
            }
        }
    }
    let depth = |p: &PathBuf| p.components().count();
    let mut ancestors: Vec<PathBuf> = ancestors
        .into_iter()
        .filter(|a| !read_only.contains(a) && !hidden.contains(a))
        .collect();
    ancestors.sort_by_key(depth);
    for path in ancestors {
        ops.push(MountOp::BindSelf {
            path: cstring(&path)?,
            read_only: false,
        });
    }
    let mut covered: Vec<(PathBuf, bool)> = read_only
        .into_iter()
        .map(|p| (p, false))
        .chain(hidden.into_iter().map(|p| (p, true)))
        .collect();
    covered.sort_by_key(|(p, _)| depth(p));
    for (path, hide) in covered {
        if hide {
            let is_dir = std::fs::metadata(&path)
                .map_err(|e| format!("{} must be hidden but cannot be read: {e}", path.display()))?
                .is_dir();
            ops.push(MountOp::Cover {
                source: cstring(&private.stand_in(is_dir))?,
                target: cstring(&path)?,
            });
        } else {
            ops.push(MountOp::BindSelf {
                path: cstring(&path)?,
                read_only: true,
            });
        }
    }
    Ok(ops)
}

fn network_filter() -> Result<BpfProgram, String> {
    static FILTER: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    FILTER.get_or_init(seccomp::network_off).clone()
}

fn always_filter() -> Result<BpfProgram, String> {
    static FILTER: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    FILTER.get_or_init(seccomp::always).clone()
}

/// This kernel's Landlock ABI and the rights it lacks (the result's `meta.landlock`).
pub(crate) fn landlock_report() -> serde_json::Value {
    landlock::kernel_report()
}

/// Prepares the sandbox of one call. `protected` are the paths the tool itself keeps
/// read-only (`.git/hooks`, `.git/config`, the spill folder). An `Err` names what is missing;
/// the call is then `DENIED`.
pub(crate) fn prepare(
    config: &SandboxConfig,
    workspace: &Path,
    paths: &Paths<'_>,
    private: &PrivateDir,
    tmp_bytes: u64,
) -> Result<Prepared, String> {
    if config.mode == SandboxMode::Full {
        return Ok(Prepared {
            landlock: None,
            seccomp: Vec::new(),
            namespaces: None,
            mount_proc: false,
            sandboxed: false,
        });
    }
    if config.pretend_no_landlock {
        return Err("Landlock is not available in this kernel (simulated)".into());
    }
    let tmp = private.writable();
    let mut writable = vec![tmp.as_path()];
    if config.mode == SandboxMode::WorkspaceWrite {
        writable.push(workspace);
    }
    // The network by policy (`crate::net`): a namespace of its own, TCP only, through dsh's
    // proxy.
    let proxied = crate::net::proxied(config);
    let landlock = landlock::ruleset(&landlock::Rules {
        writable,
        network_off: !config.network && !proxied,
    })?;
    let mut seccomp = vec![always_filter()?];
    if proxied {
        seccomp.push(crate::net::filter()?);
    } else if !config.network {
        seccomp.push(network_filter()?);
    }
    // The command keeps its own uid and gid inside the user namespace.
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .map_err(|e| format!("/proc is not readable: {e}"))?;
    let gid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
        .map_err(|e| format!("/proc is not readable: {e}"))?;
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWIPC;
    if proxied || (!config.network && !landlock::scopes_abstract_sockets()) {
        // Without Landlock's scoping, only a network namespace keeps abstract Unix sockets
        // (and anything the seccomp filter might miss) inside.
        flags |= libc::CLONE_NEWNET;
    }
    Ok(Prepared {
        landlock: Some(landlock),
        seccomp,
        namespaces: Some(Namespaces {
            flags,
            setgroups: "deny".into(),
            uid_map: format!("{uid} {uid} 1"),
            gid_map: format!("{gid} {gid} 1"),
            mounts: mounts(config, workspace, paths, private, tmp_bytes)?,
        }),
        mount_proc: true,
        sandboxed: true,
    })
}

/// The highest capability number of this kernel.
pub(crate) fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(ops: &[MountOp]) -> Vec<(String, &'static str)> {
        ops.iter()
            .filter_map(|op| match op {
                MountOp::MakePrivate | MountOp::ReadOnlyWorld | MountOp::Tmpfs { .. } => None,
                MountOp::BindSelf { path, read_only } => Some((
                    path.to_string_lossy().into_owned(),
                    if *read_only { "ro" } else { "rw" },
                )),
                MountOp::Cover { target, .. } => {
                    Some((target.to_string_lossy().into_owned(), "hidden"))
                }
            })
            .collect()
    }

    #[test]
    fn ancestors_of_protected_paths_become_mount_points_first() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "").unwrap();
        std::fs::create_dir_all(root.join("a/b/secret")).unwrap();
        let private = PrivateDir::new().unwrap();
        let config = SandboxConfig::workspace_write()
            .hidden_path("a/b/secret")
            .read_only_path("missing/too");
        let ops = mounts(
            &config,
            &root,
            &Paths {
                protected: &[PathBuf::from(".git/hooks"), PathBuf::from(".git/config")],
                hidden: &[],
            },
            &private,
            1 << 20,
        )
        .unwrap();
        let r = |p: &str| root.join(p).to_string_lossy().into_owned();
        assert_eq!(
            paths(&ops),
            vec![
                (root.to_string_lossy().into_owned(), "rw"),
                (r(".git"), "rw"),
                (r("a"), "rw"),
                (r("a/b"), "rw"),
                (r(".git/config"), "ro"),
                (r(".git/hooks"), "ro"),
                (r("a/b/secret"), "hidden"),
            ]
        );
    }
}
