//! The network by policy, at the descriptor level: the keeper's side (after the fork, in the
//! command's new network namespace: no allocation, raw system calls only) and dsh's side
//! (receiving the listener the keeper made).
//!
//! A socket belongs to the network namespace it was made in, whoever holds it later: the
//! keeper makes a listening socket on the namespace's `127.0.0.1:PORT` and passes it to dsh
//! (`SCM_RIGHTS`), and dsh's proxy accepts on it from outside. The command's namespace has
//! no interface but loopback, so that port is its only way out; no process inside relays.
//!
//! `unsafe` is allowed here as in `child.rs`: these are the system calls the safe wrappers of
//! the crate's dependencies do not offer (`ioctl(SIOCSIFFLAGS)`, `sendmsg`/`recvmsg` with
//! descriptors).
#![allow(unsafe_code)]

use libc::{c_int, c_void};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn close(fd: c_int) {
    // SAFETY: closing a descriptor this function owns.
    unsafe { libc::close(fd) };
}

/// In the keeper, after `unshare(CLONE_NEWNET)` (it holds every capability of its user
/// namespace): loopback up, a listener on `127.0.0.1:port`, sent over `channel`, then both
/// closed (init and the command never hold them). `Err((step, errno))`.
pub(crate) fn loopback_and_listen(channel: c_int, port: u16) -> Result<(), (u16, i32)> {
    // 1. Loopback up: a new network namespace starts with it down.
    // SAFETY: plain system call, no pointers.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err((1, errno()));
    }
    // SAFETY: an all-zero `ifreq` is a valid value (a C struct of integers and arrays).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    ifr.ifr_name[0] = b'l' as libc::c_char;
    ifr.ifr_name[1] = b'o' as libc::c_char;
    // SAFETY: `ifr` is a valid `ifreq` the kernel fills.
    if unsafe { libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut ifr) } < 0 {
        let e = errno();
        close(s);
        return Err((2, e));
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    unsafe {
        ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: as above.
    let up = unsafe { libc::ioctl(s, libc::SIOCSIFFLAGS as _, &ifr) };
    let e = errno();
    close(s);
    if up < 0 {
        return Err((3, e));
    }
    // 2. The listener, non-blocking (dsh's runtime polls it).
    // SAFETY: plain system call.
    let l = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if l < 0 {
        return Err((4, errno()));
    }
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `addr` is a valid `sockaddr_in` of the length given.
    let bound = unsafe {
        libc::bind(
            l,
            (&addr as *const libc::sockaddr_in).cast::<libc::sockaddr>(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    // SAFETY: plain system call.
    if bound < 0 || unsafe { libc::listen(l, 1024) } < 0 {
        let e = errno();
        close(l);
        return Err((5, e));
    }
    // 3. Hand it to dsh.
    let sent = send_fd(channel, l);
    close(l);
    close(channel);
    sent.map_err(|e| (6, e))
}

/// Room for one descriptor's control message, aligned as `cmsghdr` wants.
#[repr(C, align(8))]
struct Control([u8; 64]);

fn send_fd(channel: c_int, fd: c_int) -> Result<(), i32> {
    let mut byte = [b'L'];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast::<c_void>(),
        iov_len: 1,
    };
    let mut control = Control([0; 64]);
    // SAFETY: an all-zero `msghdr` is valid; the pointers set below outlive the call, and the
    // control buffer is larger than CMSG_SPACE(sizeof(int)) and aligned.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast::<c_void>();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<c_int>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(libc::EINVAL);
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<c_int>(), fd);
        if libc::sendmsg(channel, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(errno());
        }
    }
    Ok(())
}

/// In dsh: the listener the keeper sent over `channel` (blocking; the channel has a receive
/// timeout). `Ok(None)`: the keeper closed it without sending (its setup failed, and its
/// report says why).
pub(crate) fn receive_fd(channel: RawFd) -> std::io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast::<c_void>(),
        iov_len: 1,
    };
    let mut control = Control([0; 64]);
    // SAFETY: as in `send_fd`; the kernel writes at most `msg_controllen` bytes of control.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast::<c_void>();
        msg.msg_controllen = control.0.len() as _;
        let n = libc::recvmsg(channel, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(None);
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        let mut got: Option<OwnedFd> = None;
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<c_int>();
                let count = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<c_int>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    // Every descriptor received is ours to close; the first is the listener.
                    let owned = OwnedFd::from_raw_fd(fd);
                    if got.is_none() {
                        got = Some(owned);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        match got {
            Some(fd) => Ok(Some(fd)),
            None => Err(std::io::Error::other("the keeper sent no listener")),
        }
    }
}
