//! The system calls of the fork server ([`crate::fork_server`]) and the engine's memory
//! peak: the only module of this crate that may use `unsafe` (each block says why it is
//! sound).
//!
//! `fork` is called only by the fork server, a process with one thread (checked before it
//! says it is one), so the child may run any code, allocation and locks included: no other
//! thread can have held a lock at the fork. Descriptors passed with `SCM_RIGHTS` are received
//! close-on-exec and owned (`OwnedFd`) from the moment they arrive.
#![allow(unsafe_code)]
// This module is the one place this crate allows `unsafe` (see the crate's Cargo.toml).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// The most descriptors one message carries.
const MAX_FDS: usize = 4;

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A connected pair of `SOCK_SEQPACKET` sockets (messages keep their bounds; the end of one
/// is seen by the other), both close-on-exec.
pub(crate) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: `socketpair` succeeded, so both are open descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The control-message buffer, aligned as `cmsghdr` needs.
#[repr(C, align(8))]
struct CmsgBuf([u8; 128]);

/// Sends one message (blocking), with `fds` as `SCM_RIGHTS`.
pub(crate) fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cmsg = CmsgBuf([0; 128]);
    // SAFETY: an all-zero `msghdr` is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds) as libc::c_uint;
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(bytes) } as usize;
        msg.msg_control = cmsg.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: `msg` points at `cmsg`, 128 aligned bytes, more than CMSG_SPACE of four
        // descriptors, so the first header and its data lie inside it.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(bytes) as _;
            let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
            std::ptr::copy_nonoverlapping(
                raw.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(header),
                bytes as usize,
            );
        }
    }
    loop {
        // SAFETY: `msg` and everything it points at (`iov`, `data`, `cmsg`) live across the
        // call; `sock` is an open socket.
        let sent = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message (blocking) into `buf`: its length (0: the other end is closed) and
/// the descriptors it carried.
pub(crate) fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cmsg = CmsgBuf([0; 128]);
    // SAFETY: an all-zero `msghdr` is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    msg.msg_controllen = cmsg.0.len() as _;
    let got = loop {
        // SAFETY: `msg` points at `iov` (over `buf`) and `cmsg`, which live across the call.
        let got = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if got >= 0 {
            break got as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `cmsg` up to `msg_controllen`; the CMSG_* macros walk only
    // within it, and every descriptor of an SCM_RIGHTS header was installed in this process
    // for us alone, so owning it is sound.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header);
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a message was cut",
        ));
    }
    Ok((got, fds))
}

/// Waits until `fd` can be read, at most `within`; false on timeout.
pub(crate) fn readable_within(fd: BorrowedFd<'_>, within: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(within.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid `pollfd`.
    let n = check(unsafe { libc::poll(&mut pfd, 1, ms) })?;
    Ok(n > 0)
}

/// What [`fork`] answers in each process.
pub(crate) enum Forked {
    /// In the parent: the child's pid.
    Parent(libc::pid_t),
    /// In the child.
    Child,
}

/// Forks. Only the fork server calls it, and only while it has one thread (it checks before
/// serving), so the child is a whole copy that may run any code.
pub(crate) fn fork() -> io::Result<Forked> {
    // SAFETY: the caller has one thread (see above), so no lock or allocator state is held by
    // a thread the child would lack; both processes go on with ordinary code.
    let pid = check(unsafe { libc::fork() })?;
    Ok(if pid == 0 {
        Forked::Child
    } else {
        Forked::Parent(pid)
    })
}

/// Blocks SIGCHLD and answers a `signalfd` that becomes readable when a child ends, and the
/// mask to restore (in a child, before it starts threads).
pub(crate) fn sigchld_fd() -> io::Result<(OwnedFd, libc::sigset_t)> {
    // SAFETY: `sigset_t` is plain data; `sigemptyset` initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to initialised sets; the process has one thread, so the mask
    // of that thread is the process's.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        check(libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old))?;
    }
    // SAFETY: `set` is initialised; -1 asks for a new descriptor.
    let fd = check(unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })?;
    // SAFETY: `signalfd` succeeded: an open descriptor nothing else owns.
    Ok((unsafe { OwnedFd::from_raw_fd(fd) }, old))
}

/// Restores a signal mask saved by [`sigchld_fd`].
pub(crate) fn restore_mask(old: &libc::sigset_t) {
    // SAFETY: `old` is a set `sigprocmask` filled.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

/// Reads what a `signalfd` holds (it is non-blocking), so it is quiet until the next signal.
pub(crate) fn drain_signals(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 128 * 4];
    // SAFETY: `buf` is writable for its length.
    while unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// Waits until `a` or `b` is readable (or closed): which ones.
pub(crate) fn poll_two(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> io::Result<(bool, bool)> {
    let mut pfds = [
        libc::pollfd {
            fd: a.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: two valid `pollfd`s.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, -1) };
        if n >= 0 {
            return Ok((pfds[0].revents != 0, pfds[1].revents != 0));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A child that has ended, reaped now (its pid and raw wait status), if any.
pub(crate) fn reap_any() -> Option<(libc::pid_t, libc::c_int)> {
    let mut status = 0;
    // SAFETY: `status` is a valid int to fill.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some((pid, status))
}

/// Waits for the child `pid` to end and reaps it.
pub(crate) fn reap(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int to fill.
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        if got == pid {
            return Some(status);
        }
        if got < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return None;
    }
}

/// Sends SIGKILL to `pid` (the caller's own child, not yet reaped: the pid is still its).
pub(crate) fn kill(pid: libc::pid_t) {
    // SAFETY: a plain system call; the pid names an unreaped child of ours.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// This process's id.
pub(crate) fn pid() -> libc::pid_t {
    // SAFETY: a plain system call.
    unsafe { libc::getpid() }
}

/// In a child of the fork server: SIGKILL when the server dies, and end now if it is already
/// gone (the parent is then no longer `server`).
pub(crate) fn die_with(server: libc::pid_t) -> io::Result<()> {
    // SAFETY: plain system calls.
    unsafe {
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        if libc::getppid() != server {
            return Err(io::Error::other("the fork server is gone"));
        }
    }
    Ok(())
}

/// Makes `target` (0, 1 or 2) a copy of `fd`.
pub(crate) fn dup_onto(fd: BorrowedFd<'_>, target: RawFd) -> io::Result<()> {
    // SAFETY: `fd` is open; `target` is one of the standard descriptors, which this process
    // means to replace (nothing else owns them as an `OwnedFd`).
    check(unsafe { libc::dup2(fd.as_raw_fd(), target) })?;
    Ok(())
}

/// Closes every descriptor from `first` up (`close_range`; where the kernel lacks it, each one
/// listed in `/proc/self/fd`). The caller owns none of them any more as an `OwnedFd` that
/// will be dropped (it is a fresh worker that keeps only its standard streams).
pub(crate) fn close_from(first: RawFd) {
    let first = first.max(0) as libc::c_uint;
    // SAFETY: a plain system call; see the caller's contract above.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) };
    if r == 0 {
        return;
    }
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd >= first as RawFd)
        .collect();
    for fd in fds {
        // SAFETY: as above (the directory's own descriptor is closed too, which only makes
        // the listing, already read, end).
        unsafe { libc::close(fd) };
    }
}

/// This process's peak resident memory in KiB (`getrusage(RUSAGE_SELF).ru_maxrss`).
pub(crate) fn peak_rss_kib() -> Option<u64> {
    // SAFETY: `rusage` is plain data; all-zero is a valid value for the kernel to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a `rusage`.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    (r == 0)
        .then(|| u64::try_from(usage.ru_maxrss).ok())
        .flatten()
}
