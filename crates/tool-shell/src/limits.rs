//! What one call may consume: memory, processes, CPU time, file size, open files and the size
//! of its private temp folder.
//!
//! - **A cgroup per call** where dsh can make one (as root, or in a delegated cgroup v2
//!   subtree): memory and processes are bounded for the whole tree, and its counters say
//!   afterwards whether the call hit the bound (`memory.events`/`memory.oom_control`,
//!   `pids.events`). On a machine whose memory and pids controllers are mounted on cgroup v1
//!   (this project's CI machines), the v1 hierarchies are used.
//! - **rlimits** where it cannot: `RLIMIT_AS` (each process's address space) for memory,
//!   `RLIMIT_NPROC` for processes (counted per user in the call's own user namespace, so the
//!   call's processes only; the kernel exempts only a process with capabilities in the
//!   initial namespace, and the command has none). CPU time (`RLIMIT_CPU`), file size
//!   (`RLIMIT_FSIZE`) and open files (`RLIMIT_NOFILE`) are always rlimits, per process.
//! - **A tmpfs of bounded size** as the call's `TMPDIR` (sandboxed modes).
//!
//! The total written into the workspace is not bounded (rlimits bound each file, not a
//! folder): the docs say so. Where a limit cannot be set at all (a cgroup file refuses the
//! value), the call is `DENIED`, never run unbounded.

use crate::config::ShellLimits;
use serde_json::{Map, Value, json};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Which cgroup a controller of this machine is reached through.
#[derive(Debug, Clone)]
struct Controller {
    /// `memory` or `pids`.
    name: &'static str,
    /// dsh's own cgroup in that hierarchy (absolute folder).
    parent: PathBuf,
    /// Whether it is cgroup v2 (file names differ).
    v2: bool,
}

/// The hierarchies dsh can make cgroups in, found once.
fn controllers() -> &'static [Controller] {
    static FOUND: std::sync::OnceLock<Vec<Controller>> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        ["memory", "pids"]
            .into_iter()
            .filter_map(|name| find_controller(name, &mountinfo, &own))
            .collect()
    })
}

/// `name`'s hierarchy: a cgroup v1 mount with that controller, else the v2 mount if its root
/// offers it; and dsh's cgroup in it.
fn find_controller(name: &'static str, mountinfo: &str, own: &str) -> Option<Controller> {
    let mut v2_mount: Option<PathBuf> = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4)?;
        let mut fields = right.split(' ');
        let fstype = fields.next()?;
        let options = fields.nth(1).unwrap_or("");
        if fstype == "cgroup" && options.split(',').any(|o| o == name) {
            // "ID:controllers:path"
            let path = own.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                list.split(',').any(|c| c == name).then(|| path.to_string())
            })?;
            return Some(Controller {
                name,
                parent: Path::new(mount_point).join(path.trim_start_matches('/')),
                v2: false,
            });
        }
        if fstype == "cgroup2" && v2_mount.is_none() {
            v2_mount = Some(PathBuf::from(mount_point));
        }
    }
    let mount = v2_mount?;
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .trim_start_matches('/');
    let parent = mount.join(path);
    let offered = std::fs::read_to_string(parent.join("cgroup.subtree_control")).ok()?;
    offered
        .split_whitespace()
        .any(|c| c == name)
        .then_some(Controller {
            name,
            parent,
            v2: true,
        })
}

/// The limits of one call, ready for the fork; the cgroups go when it drops.
#[derive(Debug)]
pub(crate) struct CallLimits {
    cgroups: Vec<(Controller, PathBuf)>,
    procs: Vec<OwnedFd>,
    /// `(RLIMIT_*, soft, hard)`.
    pub rlimits: Vec<(u32, u64, u64)>,
    held: Map<String, Value>,
}

/// What the limits say after the call: the limits hit for sure, and those the call may have
/// hit (the mechanism cannot tell; the command's output suggests it).
#[derive(Debug, Default)]
pub(crate) struct LimitsOutcome {
    pub hit: Vec<&'static str>,
    pub maybe: Vec<&'static str>,
}

/// The hard limit dsh itself has (a call cannot be given more).
fn hard_limit(resource: u32) -> u64 {
    use rustix::process::Resource;
    let resource = match resource {
        libc::RLIMIT_AS => Resource::As,
        libc::RLIMIT_NPROC => Resource::Nproc,
        libc::RLIMIT_CPU => Resource::Cpu,
        libc::RLIMIT_FSIZE => Resource::Fsize,
        _ => Resource::Nofile,
    };
    rustix::process::getrlimit(resource)
        .maximum
        .unwrap_or(u64::MAX)
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl CallLimits {
    /// Makes the call's cgroups (where dsh can) and picks the rlimits. An `Err` names a
    /// cgroup that was made but refused its limit: the call is then `DENIED`.
    pub(crate) fn prepare(limits: &ShellLimits, sandboxed: bool) -> Result<CallLimits, String> {
        let mut call = CallLimits {
            cgroups: Vec::new(),
            procs: Vec::new(),
            rlimits: Vec::new(),
            held: Map::new(),
        };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("dsh-shell-{}-{n}", std::process::id());
        let wanted = [("memory", limits.memory_bytes), ("pids", limits.processes)];
        for (controller, value) in wanted {
            let Some(value) = value else { continue };
            let Some(found) = controllers().iter().find(|c| c.name == controller) else {
                continue;
            };
            let dir = found.parent.join(&name);
            if std::fs::create_dir(&dir).is_err() {
                // No right to make one here: the rlimit below holds instead.
                continue;
            }
            call.cgroups.push((found.clone(), dir.clone()));
            let file = match (controller, found.v2) {
                ("memory", false) => "memory.limit_in_bytes",
                ("memory", true) => "memory.max",
                _ => "pids.max",
            };
            std::fs::write(dir.join(file), value.to_string())
                .map_err(|e| format!("the call's cgroup {} refused {file}: {e}", dir.display()))?;
            if controller == "memory" && found.v2 {
                // Swap would let a call hold memory past the bound.
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            }
            let procs = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
                .map_err(|e| {
                    format!("the call's cgroup {} cannot be joined: {e}", dir.display())
                })?;
            call.procs.push(OwnedFd::from(procs));
            let mechanism = if found.v2 { "cgroup v2" } else { "cgroup v1" };
            let key = if controller == "memory" {
                "memoryBytes"
            } else {
                "processes"
            };
            call.held
                .insert(key.into(), json!({"max": value, "heldBy": mechanism}));
        }
        let memory_held = call.held.contains_key("memoryBytes");
        let processes_held = call.held.contains_key("processes");
        let wanted = [
            (
                "memoryBytes",
                libc::RLIMIT_AS,
                limits.memory_bytes.filter(|_| !memory_held),
                "rlimit (RLIMIT_AS, per process)",
            ),
            (
                "processes",
                libc::RLIMIT_NPROC,
                limits.processes.filter(|_| !processes_held),
                "rlimit (RLIMIT_NPROC, the call's user namespace)",
            ),
            (
                "cpuSeconds",
                libc::RLIMIT_CPU,
                limits.cpu_seconds,
                "rlimit (RLIMIT_CPU, per process)",
            ),
            (
                "fileSizeBytes",
                libc::RLIMIT_FSIZE,
                limits.file_size_bytes,
                "rlimit (RLIMIT_FSIZE, per file)",
            ),
            (
                "openFiles",
                libc::RLIMIT_NOFILE,
                limits.open_files,
                "rlimit (RLIMIT_NOFILE, per process)",
            ),
        ];
        for (key, resource, value, mechanism) in wanted {
            if let Some(value) = value {
                let hard = hard_limit(resource);
                let value = value.min(hard);
                // CPU: SIGXCPU at the soft limit (a result that says so), SIGKILL a few
                // seconds on for a process that ignores it.
                let max = if resource == libc::RLIMIT_CPU {
                    value.saturating_add(5).min(hard)
                } else {
                    value
                };
                call.rlimits.push((resource, value, max));
                call.held
                    .insert(key.into(), json!({"max": value, "heldBy": mechanism}));
            }
        }
        if sandboxed {
            call.held.insert(
                "tmpBytes".into(),
                json!({"max": limits.tmp_bytes, "heldBy": "tmpfs"}),
            );
        }
        call.held.insert(
            "workspaceBytes".into(),
            json!({"max": null, "heldBy": "not bounded: rlimits bound each file, not the total"}),
        );
        Ok(call)
    }

    /// The `cgroup.procs` descriptors the keeper writes itself into.
    pub(crate) fn procs_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// Drops dsh's copies of the `cgroup.procs` descriptors (after the fork).
    pub(crate) fn forked(&mut self) {
        self.procs.clear();
    }

    /// Which limit held by which mechanism, for the result's meta.
    pub(crate) fn meta(&self) -> Value {
        Value::Object(self.held.clone())
    }

    /// After the tree is gone: which limits the call hit (its cgroup counters, its signal)
    /// and which it may have hit (what its output says).
    pub(crate) fn outcome(
        &self,
        signal: Option<i32>,
        exit: Option<i32>,
        output: &str,
    ) -> LimitsOutcome {
        let mut out = LimitsOutcome::default();
        for (controller, dir) in &self.cgroups {
            let counted = |file: &str, key: &str| {
                std::fs::read_to_string(dir.join(file))
                    .ok()
                    .and_then(|text| {
                        text.lines().find_map(|l| {
                            l.strip_prefix(key)
                                .and_then(|v| v.trim().parse::<u64>().ok())
                        })
                    })
                    .unwrap_or(0)
            };
            match (controller.name, controller.v2) {
                ("memory", false) if counted("memory.oom_control", "oom_kill ") > 0 => {
                    out.hit.push("memoryBytes")
                }
                ("memory", true) if counted("memory.events", "oom_kill ") > 0 => {
                    out.hit.push("memoryBytes")
                }
                ("pids", _) if counted("pids.events", "max ") > 0 => out.hit.push("processes"),
                _ => {}
            }
        }
        match signal {
            Some(libc::SIGXCPU) => out.hit.push("cpuSeconds"),
            Some(libc::SIGXFSZ) => out.hit.push("fileSizeBytes"),
            _ => {}
        }
        let says = |needles: &[&str]| needles.iter().any(|n| output.contains(n));
        let mut maybe = |key: &'static str, yes: bool| {
            if yes && !out.hit.contains(&key) && self.held.contains_key(key) {
                out.maybe.push(key);
            }
        };
        maybe(
            "memoryBytes",
            says(&[
                "Cannot allocate memory",
                "MemoryError",
                "out of memory",
                "bad_alloc",
            ]),
        );
        maybe(
            "processes",
            says(&["Resource temporarily unavailable", "fork: retry"]),
        );
        maybe(
            "cpuSeconds",
            exit == Some(128 + libc::SIGXCPU) || says(&["CPU time limit exceeded"]),
        );
        maybe(
            "fileSizeBytes",
            exit == Some(128 + libc::SIGXFSZ)
                || says(&["File size limit exceeded", "File too large"]),
        );
        maybe("openFiles", says(&["Too many open files"]));
        maybe("tmpBytes", says(&["No space left on device"]));
        out
    }
}

/// The call's cgroups go with it. Normally its processes are all gone by then; a call dropped
/// mid-run (cancelled) still has processes dying for a grace, so the removal is retried from a
/// thread of its own rather than blocking here.
impl Drop for CallLimits {
    fn drop(&mut self) {
        let dirs: Vec<PathBuf> = self.cgroups.drain(..).rev().map(|(_, dir)| dir).collect();
        let remove = |dirs: &mut Vec<PathBuf>| {
            dirs.retain(|dir| match std::fs::remove_dir(dir) {
                Ok(()) => false,
                Err(e) => e.kind() != std::io::ErrorKind::NotFound,
            })
        };
        let mut left = dirs;
        remove(&mut left);
        if left.is_empty() {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("dsh-shell-cgroup".into())
            .spawn(move || {
                for _ in 0..200 {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    remove(&mut left);
                    if left.is_empty() {
                        return;
                    }
                }
                for dir in &left {
                    tracing::warn!(path = %dir.display(), "the call's cgroup could not be removed");
                }
            });
        if spawned.is_err() {
            tracing::warn!("no thread to remove the call's cgroups; they are left behind");
        }
    }
}
