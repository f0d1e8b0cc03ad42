//! Everything the child processes need, built before the fork: after it they may not
//! allocate, so every string is already a C string and every program already compiled.

use libc::{c_char, pid_t};
use seccompiler::BpfProgram;
use std::ffi::CString;
use std::os::fd::RawFd;

/// The step of the setup a report names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    /// No step (exit reports).
    None = 0,
    /// `PR_SET_PDEATHSIG`.
    ParentDeathSignal = 1,
    /// `setsid`.
    Setsid = 2,
    /// `unshare` of the user and mount namespaces.
    Unshare = 3,
    /// `/proc/self/setgroups`.
    Setgroups = 4,
    /// `/proc/self/uid_map`.
    UidMap = 5,
    /// `/proc/self/gid_map`.
    GidMap = 6,
    /// Making the mounts private.
    MountPrivate = 7,
    /// A bind mount.
    Bind = 8,
    /// Making a mount read-only (`mount_setattr`).
    ReadOnly = 9,
    /// Covering a hidden path.
    Hide = 10,
    /// Mounting `/proc` for the PID namespace.
    MountProc = 11,
    /// Forking init.
    ForkInit = 12,
    /// Forking the command.
    ForkCommand = 13,
    /// `PR_SET_CHILD_SUBREAPER`.
    Subreaper = 14,
    /// `signalfd`.
    SignalFd = 15,
    /// Redirecting stdin, stdout, stderr.
    Dup = 16,
    /// `chdir` to the working directory.
    Chdir = 17,
    /// Dropping capabilities.
    Capabilities = 18,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs = 19,
    /// `landlock_restrict_self`.
    Landlock = 20,
    /// Installing a seccomp filter.
    Seccomp = 21,
    /// `execve`.
    Exec = 22,
    /// Joining a session keyring of its own (`KEYCTL_JOIN_SESSION_KEYRING`).
    Keyring = 23,
    /// Making init non-dumpable (`PR_SET_DUMPABLE`).
    Dumpable = 24,
    /// Mounting the call's temp folder (a tmpfs of bounded size).
    Tmpfs = 25,
    /// Setting a resource limit (`setrlimit`; the index names which).
    Rlimit = 26,
    /// Joining the call's cgroup (writing `cgroup.procs`; the index names which).
    Cgroup = 27,
    /// The network namespace's loopback and the proxy's port in it (`child_net.rs`).
    Network = 28,
}

impl Stage {
    pub(crate) fn from_u8(n: u8) -> Stage {
        use Stage::*;
        [
            None,
            ParentDeathSignal,
            Setsid,
            Unshare,
            Setgroups,
            UidMap,
            GidMap,
            MountPrivate,
            Bind,
            ReadOnly,
            Hide,
            MountProc,
            ForkInit,
            ForkCommand,
            Subreaper,
            SignalFd,
            Dup,
            Chdir,
            Capabilities,
            NoNewPrivs,
            Landlock,
            Seccomp,
            Exec,
            Keyring,
            Dumpable,
            Tmpfs,
            Rlimit,
            Cgroup,
            Network,
        ]
        .get(usize::from(n))
        .copied()
        .unwrap_or(None)
    }

    /// What the step is, for a message.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Stage::None => "the setup",
            Stage::ParentDeathSignal => "the parent-death signal (PR_SET_PDEATHSIG)",
            Stage::Setsid => "a new session (setsid)",
            Stage::Unshare => "user and mount namespaces (unshare)",
            Stage::Setgroups => "the user namespace's setgroups policy",
            Stage::UidMap => "the user namespace's uid map",
            Stage::GidMap => "the user namespace's gid map",
            Stage::MountPrivate => "private mount propagation",
            Stage::Bind => "a bind mount",
            Stage::ReadOnly => "a read-only mount (mount_setattr)",
            Stage::Hide => "a mount over a hidden path",
            Stage::MountProc => "/proc for the PID namespace",
            Stage::ForkInit => "forking the namespace's init",
            Stage::ForkCommand => "forking the command",
            Stage::Subreaper => "a child subreaper (PR_SET_CHILD_SUBREAPER)",
            Stage::SignalFd => "a signalfd for SIGCHLD",
            Stage::Dup => "redirecting stdin, stdout and stderr",
            Stage::Chdir => "the working directory",
            Stage::Capabilities => "dropping capabilities",
            Stage::NoNewPrivs => "no_new_privs (PR_SET_NO_NEW_PRIVS)",
            Stage::Landlock => "Landlock (landlock_restrict_self)",
            Stage::Seccomp => "the seccomp filter",
            Stage::Exec => "running the shell (execve)",
            Stage::Keyring => "a session keyring of its own (keyctl)",
            Stage::Dumpable => "hiding dsh's memory from the command (PR_SET_DUMPABLE)",
            Stage::Tmpfs => "mounting the private temp folder (tmpfs)",
            Stage::Rlimit => "a resource limit (setrlimit)",
            Stage::Cgroup => "joining the call's cgroup",
            Stage::Network => "the network namespace's loopback and the proxy's port",
        }
    }

    /// Whether a failure here means the sandbox could not be set up (as opposed to the
    /// command not starting for an ordinary reason: a missing working directory, say).
    pub(crate) fn is_sandbox(self) -> bool {
        !matches!(self, Stage::Chdir | Stage::Exec | Stage::Dup)
    }
}

/// One mount of the sandbox, made in the keeper's new mount namespace.
#[derive(Debug)]
pub(crate) enum MountOp {
    /// Stop mounts from propagating back to the host (`MS_REC | MS_PRIVATE` on `/`).
    MakePrivate,
    /// Bind a path onto itself, recursively: a mount point cannot be renamed or removed, and
    /// a read-only one cannot be written. A writable one has the read-only flag the world
    /// got cleared on its top mount.
    BindSelf {
        /// The path (absolute).
        path: CString,
        /// Make it read-only (with everything mounted below it).
        read_only: bool,
    },
    /// Make every mount of the namespace read-only (`mount_setattr` on `/`, recursively):
    /// the world outside the writable binds that follow, modes, times and xattrs included.
    ReadOnlyWorld,
    /// Mount a tmpfs (the call's private temp folder), `data` its options (`size=…`).
    Tmpfs {
        /// Where.
        target: CString,
        /// `size=N,mode=0700`.
        data: CString,
    },
    /// Bind an empty, inaccessible file or directory over a hidden path, read-only.
    Cover {
        /// The empty stand-in.
        source: CString,
        /// The hidden path.
        target: CString,
    },
}

/// The namespaces and mounts of a sandboxed call.
#[derive(Debug)]
pub(crate) struct Namespaces {
    /// `CLONE_NEWUSER | CLONE_NEWNS | …` (the PID namespace is added, and dropped if the
    /// kernel refuses it).
    pub flags: libc::c_int,
    /// `deny`.
    pub setgroups: String,
    /// `UID UID 1`: the command keeps its uid inside.
    pub uid_map: String,
    /// `GID GID 1`.
    pub gid_map: String,
    /// The mounts, in order.
    pub mounts: Vec<MountOp>,
}

/// The network by policy: the keeper brings the namespace's loopback up, listens on
/// `127.0.0.1:port` and hands the listener to dsh over `channel`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NetSetup {
    /// dsh's Unix socket (the keeper's end).
    pub channel: RawFd,
    /// The port inside the namespace.
    pub port: u16,
}

/// Everything the forked processes use.
#[derive(Debug)]
pub(crate) struct ChildPlan {
    /// dsh's pid, to check after the fork that dsh is still the parent.
    pub parent_pid: pid_t,
    /// `/dev/null`, read-only: the command's stdin.
    pub stdin_null: RawFd,
    /// The write ends of the output pipes.
    pub stdout_w: RawFd,
    /// The write end of the stderr pipe.
    pub stderr_w: RawFd,
    /// The write end of the report pipe.
    pub report_w: RawFd,
    /// The read end of the control pipe.
    pub control_r: RawFd,
    /// The Landlock ruleset, when sandboxed.
    pub landlock_fd: Option<RawFd>,
    /// The network by policy, when the command gets it.
    pub net: Option<NetSetup>,
    /// None: no namespaces (`full`).
    pub namespaces: Option<Namespaces>,
    /// Mount a fresh `/proc` in the PID namespace.
    pub mount_proc: bool,
    /// Drop capabilities, set `no_new_privs`, restrict with Landlock and seccomp.
    pub sandboxed: bool,
    /// The highest capability number (`/proc/sys/kernel/cap_last_cap`).
    pub last_cap: u32,
    /// The seccomp filters, installed in order.
    pub seccomp: Vec<BpfProgram>,
    /// The command's working directory.
    pub workdir: CString,
    /// The shell's path.
    pub program: CString,
    /// The shell's arguments, `argv[0]` first.
    pub argv: Vec<CString>,
    /// The environment, `NAME=value`.
    pub envp: Vec<CString>,
    /// Resource limits the command gets (`RLIMIT_*`, soft, hard), set before exec.
    pub rlimits: Vec<(u32, u64, u64)>,
    /// `cgroup.procs` of the call's cgroups, open for writing: the keeper joins each (writes
    /// `0`) before it forks anything.
    pub cgroup_procs: Vec<RawFd>,
    /// The keeper is in the call's cgroups already: a standby that joined them forked it.
    pub joined: bool,
    /// dsh's argument and environment blocks (`[start, end)` addresses), which the forked init
    /// still holds a copy of and overwrites: see [`own_argument_blocks`].
    pub dsh_blocks: [(usize, usize); 2],
}

/// Where this process's argument and environment blocks lie (the kernel's `arg_start`,
/// `arg_end`, `env_start`, `env_end`, fields 48 to 51 of `/proc/self/stat`). A forked init
/// is a copy of dsh that never execs: without overwriting them, a command in its PID
/// namespace reads dsh's whole command line and environment (a store's password, say) from
/// `/proc/1/cmdline` and `/proc/1/environ`. Empty ranges when they cannot be read.
pub(crate) fn own_argument_blocks() -> [(usize, usize); 2] {
    static BLOCKS: std::sync::OnceLock<[(usize, usize); 2]> = std::sync::OnceLock::new();
    *BLOCKS.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // The fields after the command name, which may hold spaces and parentheses.
        let after = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
        let fields: Vec<usize> = after
            .split_whitespace()
            .skip(45)
            .take(4)
            .filter_map(|f| f.parse().ok())
            .collect();
        match fields[..] {
            [a, b, c, d] if a <= b && c <= d => [(a, b), (c, d)],
            _ => [(0, 0), (0, 0)],
        }
    })
}

/// The pointer arrays `execve` takes, made on the spawner thread right before the fork (raw
/// pointers cannot cross threads, and nothing may be built after the fork).
pub(crate) struct ExecPtrs {
    /// The program.
    pub program: *const c_char,
    /// `argv`, null-terminated.
    pub argv: Vec<*const c_char>,
    /// `envp`, null-terminated.
    pub envp: Vec<*const c_char>,
}

impl ExecPtrs {
    /// Pointers into `plan`'s strings; valid while `plan` lives.
    pub(crate) fn of(plan: &ChildPlan) -> ExecPtrs {
        let list = |strings: &[CString]| {
            let mut ptrs: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
            ptrs.push(std::ptr::null());
            ptrs
        };
        ExecPtrs {
            program: plan.program.as_ptr(),
            argv: list(&plan.argv),
            envp: list(&plan.envp),
        }
    }
}
