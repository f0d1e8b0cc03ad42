//! The fork and everything that runs between fork and exec: the only module of the workspace
//! that may use `unsafe` (each block says why it is sound).
//!
//! # The process chain
//!
//! ```text
//! dsh (the spawner thread) ── fork ──> keeper ── fork ──> init ── vfork ──> bash -c COMMAND
//! ```
//!
//! Where the call has cgroups, the keeper is forked by the call's *standby* (below) instead:
//! a process made while the previous call ran, already in this call's cgroups.
//!
//! - **keeper**: dies with dsh (`PR_SET_PDEATHSIG`, checked with `getppid` after the fork),
//!   leaves dsh's session, keeps only the descriptors of this call, enters new user, mount,
//!   PID (and, with the network off, network) namespaces, makes the mounts of the sandbox, then
//!   forks `init` and waits for it. Its exit tells dsh that the whole tree is gone.
//! - **init**: PID 1 of the new PID namespace (or, where the kernel gives none, a child
//!   subreaper). It forks the command, reports its wait status, reaps every orphan, and obeys
//!   the control pipe: `T` sends SIGTERM to every process of the call, `K` SIGKILL, and the end
//!   of the pipe (dsh gone, or done) kills them all and exits. When PID 1 exits, the kernel
//!   kills whatever is left in its namespace, double-forked `setsid` daemons included.
//! - **the command**: started as `vfork` does (it shares init's memory, on a stack of its own,
//!   until its `execve`, while init waits: no copy of dsh's page tables), its own session
//!   and process group, signals reset, stdin `/dev/null`,
//!   stdout and stderr to dsh's pipes, capabilities dropped, `no_new_privs`, Landlock, then
//!   the seccomp filters, then `execve`.
//!
//! # Async-signal safety
//!
//! dsh is multithreaded, so after `fork` only async-signal-safe work is allowed: no
//! allocation, no locks, no `std` I/O, no `tracing`. Everything here is a direct system call
//! on memory prepared before the fork ([`ChildPlan`], [`ExecPtrs`]): C strings, descriptor
//! numbers, the BPF programs. Failures are reported as fixed-size records on the report pipe
//! ([`Record`]), then the process `_exit`s.
#![allow(unsafe_code)]
// This module is the one place the workspace allows `unsafe` (see the crate's Cargo.toml).

use super::plan::{ChildPlan, ExecPtrs, MountOp, Stage};
use super::report::{KIND_ERROR, KIND_EXIT, KIND_FALLBACK, KIND_LEFTOVERS, encode_record};
use libc::{c_char, c_int, c_long, c_void, pid_t};
use std::ffi::CStr;

/// The most processes the fallback (no PID namespace) walk tracks in one round.
const MAX_TRACKED: usize = 4096;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `keyctl(2)`'s operation that gives the caller a new session keyring.
const KEYCTL_JOIN_SESSION_KEYRING: c_long = 1;

const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const AT_RECURSIVE: c_int = 0x8000;

/// `struct __user_cap_header_struct` and `__user_cap_data_struct` (version 3: two words).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const c_void,
}

/// Forks the keeper. Called on the spawner thread (which lives as long as dsh, so the
/// keeper's parent-death signal fires only when dsh dies). Returns the keeper's pid.
pub(super) fn fork_keeper(plan: &ChildPlan, exec: &ExecPtrs) -> std::io::Result<pid_t> {
    // SAFETY: `fork` is sound to call from any thread. In the child only this module's code
    // runs, and it is async-signal-safe (see the module docs): it touches only memory that was
    // fully built before the fork (`plan`, `exec`), and it never returns into the caller: every
    // path ends in `execve` or `_exit`.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(std::io::Error::last_os_error()),
        0 => keeper(plan, exec),
        pid => Ok(pid),
    }
}

// ---------------------------------------------------------------------------------------------
// The standby: a process made ahead of a call that is already in the call's cgroups.
//
// Joining a cgroup (a write to `cgroup.procs`) waits for an RCU grace period when no other
// migration happened just before: 10 to 20 ms on a loaded VM, the largest single cost of a
// sandboxed call. A standby pays it between calls. It is made by `clone` with `CLONE_VM |
// CLONE_FILES` (dsh's memory and descriptor table, its own process otherwise), joins the next
// call's cgroups and waits on a pipe. At the call, the spawner thread writes the address of a
// [`ForkOrder`] into the pipe; the standby forks the keeper with `CLONE_PARENT` (the keeper is
// dsh's child, as without a standby, and inherits the standby's cgroups), stores its pid in the
// order and exits. A fork made from dsh's memory sees the plan built after the standby was
// made, and a fork made from dsh's descriptor table the call's pipes.
//
// The standby itself runs on a stack of its own and touches nothing of dsh's memory but its
// arguments and the order: no allocation, no lock, only system calls. It shares the spawner
// thread's thread-local block (no CLONE_SETTLS), so one of its system calls that fails writes
// that thread's `errno`: at worst an error the spawner thread reports at the same moment names
// the wrong cause. The keeper it forks has a copy of dsh's memory made without glibc's fork
// protocol, which is why the chain below forks with the bare system call (`fork` below).

/// What a standby reads, fixed before it is made; lives until the standby is reaped.
#[derive(Debug)]
#[repr(C)]
pub(super) struct StandbyArgs {
    /// dsh's pid: the standby exits if it is no longer its parent.
    parent_pid: pid_t,
    /// The read end of the order pipe.
    orders: c_int,
    /// The call's `cgroup.procs`, open for writing (at most two: memory and pids).
    procs: [c_int; 2],
    /// How many of `procs` are used.
    n_procs: usize,
}

/// One order to a standby: the keeper's plan, and where the standby puts the keeper's pid (or
/// minus the errno of the fork).
pub(super) struct ForkOrder<'a> {
    pub plan: &'a ChildPlan,
    pub exec: &'a ExecPtrs,
    pub keeper: std::sync::atomic::AtomicI64,
}

/// A standby's own stack.
const STANDBY_STACK: usize = 2 << 20;

/// A running standby, as the spawner thread holds it.
#[derive(Debug)]
pub(crate) struct StandbyProcess {
    pid: pid_t,
    /// The write end of the order pipe: closing it tells the standby to exit.
    orders: Option<std::os::fd::OwnedFd>,
    /// Its read end (the standby shares dsh's descriptor table: dsh closes it after the
    /// standby is gone).
    orders_r: Option<std::os::fd::OwnedFd>,
    args: Box<StandbyArgs>,
    stack: usize,
}

/// Makes a standby that joins the cgroups whose `cgroup.procs` are `procs`. Called on the
/// spawner thread (the standby's parent-death signal follows that thread, which lives as long
/// as dsh).
pub(super) fn start_standby(parent_pid: pid_t, procs: &[c_int]) -> std::io::Result<StandbyProcess> {
    if procs.len() > 2 {
        return Err(std::io::Error::other("a standby joins at most two cgroups"));
    }
    let (orders_r, orders_w) = std::io::pipe()?;
    let mut args = Box::new(StandbyArgs {
        parent_pid,
        orders: std::os::fd::AsRawFd::as_raw_fd(&orders_r),
        procs: [-1; 2],
        n_procs: procs.len(),
    });
    args.procs[..procs.len()].copy_from_slice(procs);
    // Freed only once the standby is reaped (`reap_standby`).
    let (stack, top) = map_stack(STANDBY_STACK).map_err(std::io::Error::from_raw_os_error)?;
    let arg: *mut StandbyArgs = &mut *args;
    // SAFETY: `standby_main` runs on the fresh stack `top` (16-byte aligned, below it the
    // mapping) with `arg`, which stays valid until the standby is reaped; with CLONE_VM it
    // shares this memory and touches only `arg`, the orders it is sent, and its own stack.
    let pid = unsafe {
        libc::clone(
            standby_main,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_FILES | libc::SIGCHLD,
            arg.cast(),
        )
    };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: the mapping made above, used by nobody (the clone failed).
        unsafe { libc::munmap(stack, STANDBY_STACK) };
        return Err(e);
    }
    Ok(StandbyProcess {
        pid,
        orders: Some(orders_w.into()),
        orders_r: Some(orders_r.into()),
        args,
        stack: stack as usize,
    })
}

extern "C" fn standby_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `StandbyArgs` `start_standby` passed, alive until this process is
    // reaped.
    let args = unsafe { &*arg.cast::<StandbyArgs>() };
    if prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong).is_err() {
        return 3;
    }
    // SAFETY: no arguments, no memory effects.
    if unsafe { libc::getppid() } != args.parent_pid {
        return 125;
    }
    for &fd in &args.procs[..args.n_procs.min(2)] {
        // SAFETY: a one-byte buffer valid for the call.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            // The spawner thread forks the keeper itself, which joins (or reports why not).
            return 2;
        }
    }
    let mut order = [0u8; std::mem::size_of::<usize>()];
    let mut got = 0;
    while got < order.len() {
        match read_some(args.orders, &mut order[got..]) {
            Ok(0) | Err(_) => return 0,
            Ok(n) => got += n,
        }
    }
    let order = usize::from_ne_bytes(order) as *const ForkOrder<'_>;
    // SAFETY: the spawner thread sent the address of a `ForkOrder` that it keeps alive until
    // it has reaped this process.
    let order = unsafe { &*order };
    match raw_clone((libc::CLONE_PARENT | libc::SIGCHLD) as c_long) {
        Ok(0) => keeper(order.plan, order.exec),
        Ok(pid) => order
            .keeper
            .store(i64::from(pid), std::sync::atomic::Ordering::SeqCst),
        Err(e) => order
            .keeper
            .store(-i64::from(e.max(1)), std::sync::atomic::Ordering::SeqCst),
    }
    0
}

/// Sends `order` to `standby` and waits for it to exit. `Ok(pid)`: the keeper it forked;
/// `Err(())`: it forked none (it could not join the cgroups, or it died), and the caller forks
/// the keeper itself.
pub(super) fn fork_through(
    mut standby: StandbyProcess,
    order: &ForkOrder<'_>,
) -> Result<pid_t, ()> {
    let address = (order as *const ForkOrder<'_> as usize).to_ne_bytes();
    if let Some(w) = standby.orders.take() {
        write_all(std::os::fd::AsRawFd::as_raw_fd(&w), &address);
        // Closing it here: a standby that already exited (it could not join) never reads it.
        drop(w);
    }
    reap_standby(&mut standby);
    match order.keeper.load(std::sync::atomic::Ordering::SeqCst) {
        pid if pid > 0 => pid_t::try_from(pid).map_err(|_| ()),
        _ => Err(()),
    }
}

/// Waits for the standby to exit (after its order pipe was closed, or its order sent), then
/// frees its stack.
fn reap_standby(standby: &mut StandbyProcess) {
    standby.orders = None;
    let _ = waitpid(standby.pid, libc::__WALL);
    standby.orders_r = None;
    if standby.stack != 0 {
        // SAFETY: the stack `start_standby` mapped; its only user has exited.
        unsafe { libc::munmap(standby.stack as *mut c_void, STANDBY_STACK) };
        standby.stack = 0;
    }
    let _ = &standby.args;
}

impl Drop for StandbyProcess {
    /// An unused standby: the end of its order pipe makes it exit; it is reaped here (it
    /// exits at once, or once its cgroup join returns), so that its cgroups can go next.
    fn drop(&mut self) {
        if self.stack != 0 {
            reap_standby(self);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Thin wrappers: each one system call, on arguments that are valid for its whole duration.

/// A stack of `len` bytes for a process started by `clone` on it: an anonymous private mapping
/// whose lowest page stays inaccessible, so an overflow faults rather than writing past it.
/// Answers the mapping (for `munmap` with `len`) and its 16-byte aligned top, or the errno.
/// Only system calls, no allocation: it is also called in init, between fork and exec.
fn map_stack(len: usize) -> Result<(*mut c_void, usize), i32> {
    // SAFETY: an anonymous private mapping, checked below; the caller unmaps it.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(errno());
    }
    // SAFETY: the first page of the mapping made above.
    unsafe { libc::mprotect(stack, 4096, libc::PROT_NONE) };
    Ok((stack, (stack as usize + len) & !15))
}

fn errno() -> i32 {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

fn check(ret: c_long) -> Result<c_long, i32> {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

fn exit_now(code: c_int) -> ! {
    // SAFETY: `_exit` ends the process without running atexit handlers or destructors, which
    // is what a forked child of a multithreaded process must do.
    unsafe { libc::_exit(code) }
}

fn write_all(fd: c_int, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: `buf` is a valid slice for the call's duration.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return;
        }
        buf = &buf[n as usize..];
    }
}

fn read_some(fd: c_int, buf: &mut [u8]) -> Result<usize, i32> {
    loop {
        // SAFETY: `buf` is a valid, writable slice for the call's duration.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

fn close(fd: c_int) {
    // SAFETY: closing a descriptor number has no memory effects; a stale one gives EBADF.
    unsafe { libc::close(fd) };
}

fn dup2(from: c_int, to: c_int) -> Result<(), i32> {
    // SAFETY: `dup2` only operates on descriptor numbers.
    check(unsafe { libc::dup2(from, to) } as c_long).map(|_| ())
}

fn kill(pid: pid_t, sig: c_int) {
    // SAFETY: sending a signal has no memory effects on this process.
    unsafe { libc::kill(pid, sig) };
}

fn getpid() -> pid_t {
    // SAFETY: no arguments, no memory effects.
    unsafe { libc::getpid() }
}

fn prctl(option: c_int, arg: libc::c_ulong) -> Result<(), i32> {
    // SAFETY: the options used here take integer arguments only.
    check(unsafe { libc::prctl(option, arg, 0, 0, 0) } as c_long).map(|_| ())
}

/// `fork` as the bare system call: no `atfork` handlers, no malloc locks taken. A keeper
/// forked by a standby holds a copy of dsh's memory made without glibc's fork protocol, so
/// a lock another thread of dsh held at that moment stays held in the copy: glibc's `fork`
/// would wait on it forever. Nothing after this fork allocates, so nothing needs them.
fn fork() -> Result<pid_t, i32> {
    raw_clone(libc::SIGCHLD as c_long)
}

/// The `clone` system call with `flags`, no new stack: fork's semantics (both return here).
fn raw_clone(flags: c_long) -> Result<pid_t, i32> {
    let zero: c_long = 0;
    // SAFETY: without CLONE_VM and without a new stack, the child gets a copy of this
    // process's memory and returns here with 0, like fork; it continues in this module's
    // code only (every path ends in `execve` or `_exit`).
    check(unsafe { libc::syscall(libc::SYS_clone, flags, zero, zero, zero, zero) })
        .map(|pid| pid as pid_t)
}

fn waitpid(pid: pid_t, options: c_int) -> Result<(pid_t, c_int), i32> {
    let mut status: c_int = 0;
    loop {
        // SAFETY: `status` is a valid, writable int for the call's duration.
        let r = unsafe { libc::waitpid(pid, &mut status, options) };
        if r >= 0 {
            return Ok((r, status));
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

fn open_cstr(path: &CStr, flags: c_int) -> Result<c_int, i32> {
    // SAFETY: `path` is a valid NUL-terminated string for the call's duration.
    check(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) } as c_long)
        .map(|fd| fd as c_int)
}

fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<(), i32> {
    let ptr = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is null or a valid NUL-terminated string for the call's duration.
    check(unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data).cast(),
        )
    } as c_long)
    .map(|_| ())
}

/// `mount_setattr(2)`: sets `set` and clears `clear` on the mount at `target` (and, with
/// `recursive`, every mount below it).
fn mount_setattr(target: &CStr, set: u64, clear: u64, recursive: bool) -> Result<(), i32> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `target` is a valid C string and `attr` a valid `struct mount_attr` whose size is
    // passed along; both outlive the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            if recursive { AT_RECURSIVE } else { 0 },
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(|_| ())
}

fn mount_setattr_rdonly(target: &CStr) -> Result<(), i32> {
    mount_setattr(target, MOUNT_ATTR_RDONLY, 0, true)
}

// ---------------------------------------------------------------------------------------------
// Reports.

fn report(plan: &ChildPlan, kind: u8, stage: Stage, index: u16, value: i32) {
    write_all(plan.report_w, &encode_record(kind, stage, index, value));
}

fn fail(plan: &ChildPlan, stage: Stage, index: u16, errno: i32) -> ! {
    report(plan, KIND_ERROR, stage, index, errno);
    exit_now(126)
}

// ---------------------------------------------------------------------------------------------
// The keeper.

/// Closes every descriptor but `keep` (and 0, 1, 2, which are pointed at /dev/null).
fn close_all_except(keep: &mut [c_int]) {
    keep.sort_unstable();
    let mut next: c_long = 3;
    for &fd in keep.iter() {
        let fd = fd as c_long;
        if fd < next {
            continue;
        }
        if fd > next {
            // SAFETY: `close_range` only operates on descriptor numbers.
            unsafe { libc::syscall(libc::SYS_close_range, next, fd - 1, 0) };
        }
        next = fd + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, next, c_long::from(u32::MAX), 0) };
}

fn keeper(plan: &ChildPlan, exec: &ExecPtrs) -> ! {
    // Die with dsh; the check closes the race where dsh died before the prctl.
    if let Err(e) = prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) {
        fail(plan, Stage::ParentDeathSignal, 0, e);
    }
    // SAFETY: no arguments, no memory effects.
    if unsafe { libc::getppid() } != plan.parent_pid {
        exit_now(125);
    }
    let mut keep = [
        plan.stdin_null,
        plan.stdout_w,
        plan.stderr_w,
        plan.report_w,
        plan.control_r,
        plan.landlock_fd.unwrap_or(plan.stdin_null),
        plan.cgroup_procs
            .first()
            .copied()
            .unwrap_or(plan.stdin_null),
        plan.cgroup_procs.get(1).copied().unwrap_or(plan.stdin_null),
        plan.net.map_or(plan.stdin_null, |n| n.channel),
    ];
    close_all_except(&mut keep);
    // The call's cgroups, joined before anything else is forked: every process of the call
    // is counted (`0` is the writer itself). A keeper forked by a standby is in them already
    // (the standby joined them before the call, and a fork stays in its parent's cgroups).
    for (i, &fd) in plan.cgroup_procs.iter().enumerate() {
        // SAFETY: a one-byte buffer valid for the call.
        if !plan.joined && unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            fail(plan, Stage::Cgroup, i as u16, errno());
        }
        close(fd);
    }
    for fd in 0..3 {
        let _ = dup2(plan.stdin_null, fd);
    }
    // SAFETY: no arguments, no memory effects.
    if unsafe { libc::setsid() } < 0 {
        fail(plan, Stage::Setsid, 0, errno());
    }
    let mut pid_namespace = false;
    if let Some(ns) = &plan.namespaces {
        let with_pid = ns.flags | libc::CLONE_NEWPID;
        // SAFETY: `unshare` takes flags only; the keeper is single-threaded, as a new user
        // namespace requires.
        if unsafe { libc::unshare(with_pid) } == 0 {
            pid_namespace = true;
        } else {
            let first = errno();
            // SAFETY: as above.
            if unsafe { libc::unshare(ns.flags) } != 0 {
                fail(plan, Stage::Unshare, 0, errno());
            }
            // Namespaces but no PID namespace: init becomes a subreaper instead.
            report(plan, KIND_FALLBACK, Stage::Unshare, 0, first);
        }
        write_file(
            plan,
            c"/proc/self/setgroups",
            ns.setgroups.as_bytes(),
            Stage::Setgroups,
        );
        write_file(
            plan,
            c"/proc/self/uid_map",
            ns.uid_map.as_bytes(),
            Stage::UidMap,
        );
        write_file(
            plan,
            c"/proc/self/gid_map",
            ns.gid_map.as_bytes(),
            Stage::GidMap,
        );
        for (i, op) in ns.mounts.iter().enumerate() {
            let index = u16::try_from(i).unwrap_or(u16::MAX);
            if let Err((stage, e)) = apply_mount(op) {
                fail(plan, stage, index, e);
            }
        }
        if let Some(net) = plan.net
            && let Err((step, e)) = super::child_net::loopback_and_listen(net.channel, net.port)
        {
            fail(plan, Stage::Network, step, e);
        }
    } else {
        // No namespaces (`full`): a subreaper keeps every orphan in reach.
        report(plan, KIND_FALLBACK, Stage::Unshare, 0, 0);
    }
    if !pid_namespace && prctl(libc::PR_SET_CHILD_SUBREAPER, 1).is_err() {
        fail(plan, Stage::Subreaper, 0, errno());
    }
    let keeper_pid = getpid();
    match fork() {
        Err(e) => fail(plan, Stage::ForkInit, 0, e),
        Ok(0) => init(plan, exec, pid_namespace, keeper_pid),
        Ok(init_pid) => {
            close(plan.control_r);
            close(plan.stdout_w);
            close(plan.stderr_w);
            let _ = waitpid(init_pid, 0);
            if !pid_namespace {
                // Whatever init left (it was killed, say) was handed to this subreaper.
                kill_descendants(libc::SIGKILL, true);
                while waitpid(-1, 0).is_ok() {}
            }
            // Exiting closes the report pipe: dsh reads that as "the whole tree is gone".
            exit_now(0)
        }
    }
}

fn write_file(plan: &ChildPlan, path: &CStr, bytes: &[u8], stage: Stage) {
    if bytes.is_empty() {
        return;
    }
    let fd = match open_cstr(path, libc::O_WRONLY) {
        Ok(fd) => fd,
        Err(e) => fail(plan, stage, 0, e),
    };
    // SAFETY: `bytes` is a valid slice for the call's duration.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    if n < 0 {
        fail(plan, stage, 0, errno());
    }
    close(fd);
}

fn apply_mount(op: &MountOp) -> Result<(), (Stage, i32)> {
    const NONE: Option<&CStr> = None;
    match op {
        MountOp::MakePrivate => mount(NONE, c"/", NONE, libc::MS_REC | libc::MS_PRIVATE, NONE)
            .map_err(|e| (Stage::MountPrivate, e)),
        MountOp::ReadOnlyWorld => mount_setattr_rdonly(c"/").map_err(|e| (Stage::ReadOnly, e)),
        MountOp::BindSelf { path, read_only } => {
            mount(Some(path), path, NONE, libc::MS_BIND | libc::MS_REC, NONE)
                .map_err(|e| (Stage::Bind, e))?;
            if *read_only {
                mount_setattr_rdonly(path).map_err(|e| (Stage::ReadOnly, e))?;
            } else {
                // The bind copied the read-only flag the world got: clear it on this mount
                // alone (mounts below it keep theirs).
                mount_setattr(path, 0, MOUNT_ATTR_RDONLY, false).map_err(|e| (Stage::Bind, e))?;
            }
            Ok(())
        }
        MountOp::Tmpfs { target, data } => mount(
            Some(c"tmpfs"),
            target,
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(data),
        )
        .map_err(|e| (Stage::Tmpfs, e)),
        MountOp::Cover { source, target } => {
            mount(Some(source), target, NONE, libc::MS_BIND, NONE).map_err(|e| (Stage::Hide, e))?;
            mount_setattr_rdonly(target).map_err(|e| (Stage::ReadOnly, e))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Init.

/// Overwrites this process's copy of dsh's arguments and environment and makes it
/// non-dumpable (its `/proc` files then belong to root and `environ` needs ptrace rights), so
/// no command reads dsh's command line or variables through it. Done in init, after the
/// keeper wrote its own uid and gid maps (a non-dumpable process cannot open them).
fn hide_dsh_blocks(plan: &ChildPlan) {
    for &(start, end) in &plan.dsh_blocks {
        if start != 0 && end > start {
            // SAFETY: `[start, end)` is this process's argument or environment block, as the
            // kernel recorded it (read from /proc/self/stat before the fork): mapped and
            // writable (the initial stack). This forked copy never reads it again (nothing
            // here uses `std::env`), and the write touches only its own copy-on-write pages.
            unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
        }
    }
    if let Err(e) = prctl(libc::PR_SET_DUMPABLE, 0) {
        fail(plan, Stage::Dumpable, 0, e);
    }
}

fn init(plan: &ChildPlan, exec: &ExecPtrs, pid_namespace: bool, keeper_pid: pid_t) -> ! {
    hide_dsh_blocks(plan);
    if pid_namespace {
        // PID 1 dies with the keeper (and with it the namespace). The keeper cannot be named
        // from inside the namespace (getppid is 0 here), so the race the check would close is
        // closed by the control pipe instead: its end means dsh is gone.
        let _ = prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if plan.mount_proc
            && let Err(e) = mount(
                Some(c"proc"),
                c"/proc",
                Some(c"proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
            )
        {
            fail(plan, Stage::MountProc, 0, e);
        }
    } else {
        // A subreaper must outlive its descendants long enough to kill them: no parent-death
        // signal here; the end of the control pipe makes it kill them all and exit.
        if prctl(libc::PR_SET_CHILD_SUBREAPER, 1).is_err() {
            fail(plan, Stage::Subreaper, 0, errno());
        }
        // SAFETY: no arguments, no memory effects.
        if unsafe { libc::getppid() } != keeper_pid {
            exit_now(125);
        }
    }
    // SIGCHLD arrives through a signalfd, so one poll waits for both children and dsh.
    // SAFETY: `set` is a valid sigset_t for the calls' duration.
    let sigfd = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
    };
    if sigfd < 0 {
        fail(plan, Stage::SignalFd, 0, errno());
    }
    let command = match spawn_command(plan, exec) {
        Err(e) => fail(plan, Stage::ForkCommand, 0, e),
        Ok(pid) => pid,
    };
    close(plan.stdout_w);
    close(plan.stderr_w);
    close(plan.stdin_null);
    if let Some(fd) = plan.landlock_fd {
        close(fd);
    }
    supervise(plan, sigfd, command, pid_namespace)
}

/// The command's own stack while it shares init's memory (until its `execve`).
const COMMAND_STACK: usize = 256 << 10;

/// What the command's first function reads: init's plan, on init's stack (init is suspended
/// until the command execs or exits).
struct CommandArgs<'a> {
    plan: &'a ChildPlan,
    exec: &'a ExecPtrs,
}

extern "C" fn command_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `CommandArgs` `spawn_command` passed, on the stack of init, which
    // `CLONE_VFORK` keeps suspended (and the value alive) until this process execs or exits.
    let args = unsafe { &*arg.cast::<CommandArgs<'_>>() };
    command(args.plan, args.exec)
}

/// Starts the command as `vfork` does: it shares init's memory (no copy of the page tables, no
/// copy-on-write faults) on a stack of its own until its `execve`, while init waits. Everything
/// else is its own (descriptors, working directory, signal handlers, limits, credentials), so
/// what `command` changes before the exec touches init in nothing but memory init does not
/// read again: the stack, which goes once the exec is done.
fn spawn_command(plan: &ChildPlan, exec: &ExecPtrs) -> Result<pid_t, i32> {
    // Unmapped once the command has exec'd or exited (the return of the `CLONE_VFORK` clone).
    let (stack, top) = map_stack(COMMAND_STACK)?;
    let args = CommandArgs { plan, exec };
    // SAFETY: `command_main` runs on the fresh stack `top` (16-byte aligned, the mapping below
    // it) with `args`, alive on this stack frame while `CLONE_VFORK` suspends this process;
    // it touches only `args`, what they point to (built before the first fork) and its own
    // stack, and ends in `execve` or `_exit`.
    let pid = unsafe {
        libc::clone(
            command_main,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&args as *const CommandArgs<'_>).cast_mut().cast(),
        )
    };
    let result = if pid < 0 { Err(errno()) } else { Ok(pid) };
    // SAFETY: the mapping made above; the command no longer runs on it.
    unsafe { libc::munmap(stack, COMMAND_STACK) };
    result
}

fn terminate(sig: c_int, pid_namespace: bool) {
    if pid_namespace {
        // From PID 1, -1 means every other process of the namespace.
        kill(-1, sig);
    } else {
        kill_descendants(sig, sig == libc::SIGKILL);
    }
}

fn supervise(plan: &ChildPlan, sigfd: c_int, command: pid_t, pid_namespace: bool) -> ! {
    let mut command_done = false;
    let mut leftovers_told = false;
    let mut control_open = true;
    let mut buf = [0u8; 128 * 8];
    loop {
        // Reap whatever has exited; the command's status goes to dsh.
        loop {
            match waitpid(-1, libc::WNOHANG) {
                Ok((0, _)) => {
                    // Children left after the command: dsh decides when they go.
                    if command_done && !leftovers_told {
                        leftovers_told = true;
                        report(plan, KIND_LEFTOVERS, Stage::None, 0, 0);
                    }
                    break;
                }
                Ok((pid, status)) => {
                    if pid == command {
                        command_done = true;
                        report(plan, KIND_EXIT, Stage::None, 0, status);
                    }
                }
                Err(_) => {
                    // No child left: after the command, that is the whole tree.
                    if command_done {
                        exit_now(0);
                    }
                    break;
                }
            }
        }
        let mut fds = [
            libc::pollfd {
                fd: sigfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if control_open { plan.control_r } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the call's duration.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            continue;
        }
        if fds[0].revents != 0 {
            // Drain: the reap loop above does the work.
            while matches!(read_some(sigfd, &mut buf), Ok(n) if n > 0) {}
        }
        if control_open && fds[1].revents != 0 {
            let mut byte = [0u8; 1];
            match read_some(plan.control_r, &mut byte) {
                Ok(1) if byte[0] == b'T' => terminate(libc::SIGTERM, pid_namespace),
                Ok(1) if byte[0] == b'K' => terminate(libc::SIGKILL, pid_namespace),
                Ok(1) => {}
                _ => {
                    // dsh is gone or done with this call: nothing of it may outlive that.
                    control_open = false;
                    terminate(libc::SIGKILL, pid_namespace);
                    if pid_namespace {
                        exit_now(0);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fallback walk (no PID namespace): every process whose chain of parents leads here.

/// Writes `n` in decimal into `buf` from `at`; returns the new end.
fn put_decimal(buf: &mut [u8], mut at: usize, n: u32) -> usize {
    let mut digits = [0u8; 10];
    let mut len = 0;
    let mut n = n;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    while len > 0 && at < buf.len() {
        len -= 1;
        buf[at] = digits[len];
        at += 1;
    }
    at
}

/// The parent pid and whether the process is still running (not a zombie), from
/// `/proc/PID/stat`.
fn stat_of(pid: u32) -> Option<(pid_t, bool)> {
    let mut path = [0u8; 32];
    let prefix = b"/proc/";
    path[..prefix.len()].copy_from_slice(prefix);
    let mut at = put_decimal(&mut path, prefix.len(), pid);
    for &b in b"/stat" {
        path[at] = b;
        at += 1;
    }
    path[at] = 0;
    let path = CStr::from_bytes_until_nul(&path).ok()?;
    let fd = open_cstr(path, libc::O_RDONLY).ok()?;
    let mut buf = [0u8; 512];
    let n = read_some(fd, &mut buf).unwrap_or(0);
    close(fd);
    let text = &buf[..n];
    // "pid (comm) S ppid ...": the command name may hold anything, so parse after the last ')'.
    let close_paren = text.iter().rposition(|&b| b == b')')?;
    let rest = text.get(close_paren + 2..)?;
    let state = *rest.first()?;
    let mut ppid: i64 = 0;
    for &b in rest.get(2..)? {
        if !b.is_ascii_digit() {
            break;
        }
        ppid = ppid * 10 + i64::from(b - b'0');
    }
    Some((ppid as pid_t, state != b'Z' && state != b'X'))
}

fn parse_pid(name: &[u8]) -> Option<u32> {
    if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u32 = 0;
    for &b in name {
        n = n.checked_mul(10)?.checked_add(u32::from(b - b'0'))?;
    }
    Some(n)
}

/// Calls `f` with each pid listed in `/proc`.
fn for_each_pid(mut f: impl FnMut(u32)) {
    let Ok(fd) = open_cstr(c"/proc", libc::O_RDONLY | libc::O_DIRECTORY) else {
        return;
    };
    let mut buf = [0u8; 8192];
    loop {
        // SAFETY: `buf` is a valid, writable buffer of the given length.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd,
                buf.as_mut_ptr(),
                buf.len() as libc::c_uint,
            )
        };
        if n <= 0 {
            break;
        }
        let mut off = 0usize;
        let n = n as usize;
        // struct linux_dirent64 { u64 ino; i64 off; u16 reclen; u8 type; char name[]; }
        while off + 19 <= n {
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            if reclen == 0 || off + reclen > n {
                break;
            }
            let name = &buf[off + 19..off + reclen];
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            if let Some(pid) = parse_pid(&name[..end]) {
                f(pid);
            }
            off += reclen;
        }
    }
    close(fd);
}

/// Sends `sig` to every live descendant of this process; with `until_gone`, repeats until
/// none is left running (killed processes' children come back to this subreaper, and the next
/// round finds them).
fn kill_descendants(sig: c_int, until_gone: bool) {
    let me = getpid();
    loop {
        let mut tree = [0 as pid_t; MAX_TRACKED];
        tree[0] = me;
        let mut len = 1usize;
        let mut live = 0usize;
        // Grow the set of descendants until a scan adds nobody.
        loop {
            let before = len;
            for_each_pid(|pid| {
                let pid = pid as pid_t;
                if len >= MAX_TRACKED || tree[..len].contains(&pid) {
                    return;
                }
                if let Some((ppid, running)) = stat_of(pid as u32)
                    && tree[..len].contains(&ppid)
                {
                    tree[len] = pid;
                    len += 1;
                    if running {
                        live += 1;
                        kill(pid, sig);
                    }
                }
            });
            if len == before || len >= MAX_TRACKED {
                break;
            }
        }
        // No reaping here: init's loop reaps (and must see the command's status). A killed
        // process hands its children to this subreaper as it dies, zombie or not.
        if !until_gone || live == 0 {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The command.

fn command(plan: &ChildPlan, exec: &ExecPtrs) -> ! {
    // SAFETY: `setsid` takes no arguments.
    if unsafe { libc::setsid() } < 0 {
        fail(plan, Stage::Setsid, 1, errno());
    }
    // Signals as a fresh program expects them: nothing blocked, nothing ignored (dsh ignores
    // SIGPIPE, and an ignored signal stays ignored across exec: `yes | head` would not end).
    // SAFETY: `set` is a valid sigset_t; `signal` takes integers only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
    if let Err(e) = dup2(plan.stdin_null, 0)
        .and_then(|()| dup2(plan.stdout_w, 1))
        .and_then(|()| dup2(plan.stderr_w, 2))
    {
        fail(plan, Stage::Dup, 0, e);
    }
    // SAFETY: `workdir` is a valid C string.
    if unsafe { libc::chdir(plan.workdir.as_ptr()) } != 0 {
        fail(plan, Stage::Chdir, 0, errno());
    }
    for (i, &(resource, soft, hard)) in plan.rlimits.iter().enumerate() {
        let limit = libc::rlimit {
            rlim_cur: soft as libc::rlim_t,
            rlim_max: hard as libc::rlim_t,
        };
        // SAFETY: `limit` is a valid rlimit for the call's duration.
        if unsafe { libc::setrlimit(resource as _, &limit) } != 0 {
            fail(plan, Stage::Rlimit, i as u16, errno());
        }
    }
    if plan.sandboxed {
        // A new, empty session keyring: the command must not see the keys of dsh's session
        // (the seccomp filter then refuses every keyring call). A kernel built without keys
        // has no keyring to share.
        // SAFETY: integer arguments and a null name (an anonymous keyring).
        let r = unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_JOIN_SESSION_KEYRING,
                std::ptr::null::<c_char>(),
            )
        };
        if r < 0 && errno() != libc::ENOSYS {
            fail(plan, Stage::Keyring, 0, errno());
        }
        drop_capabilities(plan);
        if let Err(e) = prctl(libc::PR_SET_NO_NEW_PRIVS, 1) {
            fail(plan, Stage::NoNewPrivs, 0, e);
        }
        if let Some(fd) = plan.landlock_fd {
            // SAFETY: integer arguments only.
            let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) };
            if r != 0 {
                fail(plan, Stage::Landlock, 0, errno());
            }
        }
        for (i, program) in plan.seccomp.iter().enumerate() {
            let prog = SockFprog {
                len: program.len() as u16,
                filter: program.as_ptr().cast(),
            };
            // SAFETY: `prog` points at a BPF program built before the fork, valid and
            // unchanged for the call's duration; the kernel copies it.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0u32,
                    &prog as *const SockFprog,
                )
            };
            if r != 0 {
                fail(plan, Stage::Seccomp, i as u16, errno());
            }
        }
    }
    // SAFETY: `program`, `argv` and `envp` are NUL-terminated strings and null-terminated
    // pointer arrays built before the fork, alive until exec replaces this image.
    unsafe {
        libc::execve(
            exec.program,
            exec.argv.as_ptr().cast::<*const c_char>(),
            exec.envp.as_ptr().cast::<*const c_char>(),
        )
    };
    fail(plan, Stage::Exec, 0, errno())
}

/// Empties every capability set, the bounding set and the ambient set: the command may be
/// root inside its user namespace, and root with capabilities could undo the mounts.
fn drop_capabilities(plan: &ChildPlan) {
    for cap in 0..=plan.last_cap {
        if let Err(e) = prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap))
            && e != libc::EINVAL
        {
            fail(plan, Stage::Capabilities, cap as u16, e);
        }
    }
    // SAFETY: integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and `data` are valid version-3 capability structs for the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) };
    if r != 0 {
        fail(plan, Stage::Capabilities, 999, errno());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_paths_are_written_without_allocating() {
        let mut buf = [0u8; 16];
        let end = put_decimal(&mut buf, 2, 40_213);
        assert_eq!(&buf[2..end], b"40213");
        assert_eq!(put_decimal(&mut buf, 0, 0), 1);
        assert_eq!(buf[0], b'0');
    }

    #[test]
    fn the_stat_line_is_read_past_a_hostile_command_name() {
        // This process's own stat: its parent is the test runner.
        let (ppid, running) = stat_of(std::process::id()).unwrap();
        // SAFETY: getppid takes no arguments.
        assert_eq!(ppid, unsafe { libc::getppid() });
        assert!(running);
        assert_eq!(parse_pid(b"123"), Some(123));
        assert_eq!(parse_pid(b"self"), None);
        assert_eq!(parse_pid(b""), None);
    }

    #[test]
    fn the_proc_listing_finds_this_process() {
        let mut found = false;
        for_each_pid(|pid| found |= pid == std::process::id());
        assert!(found);
    }
}
