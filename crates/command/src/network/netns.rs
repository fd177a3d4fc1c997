//! The agent's network namespace: entered by the starting thread (as root)
//! or by the agent's child process together with a user namespace (not
//! root), and its loopback brought up.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// `RTM_NEWLINK`: change a link.
const RTM_NEWLINK: u16 = 16;
/// `NLM_F_REQUEST | NLM_F_ACK`.
const REQUEST_ACK: u16 = 1 | 4;
/// `NLMSG_ERROR`: the kernel's answer (an error of 0 is the ack).
const NLMSG_ERROR: u16 = 2;
/// `IFF_UP`.
const IFF_UP: u32 = 1;
/// The loopback's interface index, the same in every namespace.
const LOOPBACK_INDEX: i32 = 1;

/// Brings up the loopback of the calling thread's network namespace with
/// one `RTM_NEWLINK` request over a netlink socket.
///
/// Async-signal-safe: it allocates nothing (the request and the answer are
/// fixed arrays on the stack) and makes only the `socket`, `setsockopt`,
/// `sendto`, `recvfrom` and `close` system calls, so the agent's child may call it
/// between `fork` and `exec` (`spawn.rs`).
pub(crate) fn loopback_up() -> Result<(), Errno> {
    let socket = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // A kernel that never answers must not hang the agent's start (std
    // waits for the child's `exec`).
    rustix::net::sockopt::set_socket_timeout(
        &socket,
        rustix::net::sockopt::Timeout::Recv,
        Some(std::time::Duration::from_secs(5)),
    )?;
    let mut request = [0u8; 32];
    // struct nlmsghdr: length, type, flags, sequence, port id.
    request[0..4].copy_from_slice(&32u32.to_ne_bytes());
    request[4..6].copy_from_slice(&RTM_NEWLINK.to_ne_bytes());
    request[6..8].copy_from_slice(&REQUEST_ACK.to_ne_bytes());
    request[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // struct ifinfomsg: family, pad, type (all 0), index, flags, change.
    request[20..24].copy_from_slice(&LOOPBACK_INDEX.to_ne_bytes());
    request[24..28].copy_from_slice(&IFF_UP.to_ne_bytes());
    request[28..32].copy_from_slice(&IFF_UP.to_ne_bytes());
    rustix::net::send(&socket, &request, SendFlags::empty())?;
    let mut answer = [0u8; 64];
    let (n, _) = rustix::net::recv(&socket, &mut answer[..], RecvFlags::empty())?;
    if n < 20 {
        return Err(Errno::IO);
    }
    let kind = u16::from_ne_bytes([answer[4], answer[5]]);
    let error = i32::from_ne_bytes([answer[16], answer[17], answer[18], answer[19]]);
    match (kind, error) {
        (NLMSG_ERROR, 0) => Ok(()),
        (NLMSG_ERROR, e) if e < 0 => Err(Errno::from_raw_os_error(-e)),
        _ => Err(Errno::IO),
    }
}

/// A listening TCP socket at `127.0.0.1:port` of the calling process's
/// network namespace, sent over `channel` (one end of a Unix socket pair)
/// with `SCM_RIGHTS` and closed here: how the model gateway listens
/// inside a namespace the agent's child made, which korvus itself cannot
/// enter without root.
///
/// Async-signal-safe: a fixed buffer on the stack for the control message,
/// and only the `socket`, `setsockopt`, `bind`, `listen`, `sendmsg` and
/// `close` system calls, so the agent's child may call it between `fork`
/// and `exec`.
pub(crate) fn send_listener(channel: BorrowedFd<'_>, port: u16) -> Result<(), Errno> {
    let socket = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::bind(&socket, &SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))?;
    rustix::net::listen(&socket, 128)?;
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [socket.as_fd()];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(Errno::NOBUFS);
    }
    rustix::net::sendmsg(
        channel,
        &[IoSlice::new(b"L")],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// The listener [`send_listener`] sent over `channel`, if it was sent
/// (the message waits in the socket: it is read without blocking).
pub(crate) fn receive_listener(channel: &OwnedFd) -> std::io::Result<TcpListener> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    rustix::net::recvmsg(
        channel,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    )?;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = message {
            if let Some(fd) = fds.next() {
                return Ok(TcpListener::from(fd));
            }
        }
    }
    Err(std::io::Error::other(
        "no listener came from the agent's namespace",
    ))
}

/// A Unix socket pair for [`send_listener`]: (korvus's end, the child's).
pub(crate) fn listener_channel() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Whether this process may give an agent a user and network namespace of
/// its own (tried once per process, with `/bin/sh -c 'exit 0'`); the error
/// says why not.
pub(crate) fn user_namespaces() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            crate::spawn::probe_own_network()
                .map_err(|e| format!("a user namespace could not be made for the agent ({e})"))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    /// Whether 127.0.0.1 answers in the calling thread's namespace.
    fn loopback_answers() -> bool {
        let Ok(listener) = TcpListener::bind("127.0.0.1:0") else {
            return false;
        };
        let addr = listener.local_addr().unwrap();
        TcpStream::connect(addr).is_ok()
    }

    #[test]
    fn a_new_namespace_has_a_working_loopback_once_brought_up() {
        let root = rustix::process::geteuid().is_root();
        std::thread::spawn(move || match crate::spawn::unshare_thread_network() {
            Ok(()) => {
                assert!(
                    !loopback_answers(),
                    "a new namespace's loopback starts down"
                );
                super::loopback_up().unwrap();
                assert!(loopback_answers());
            }
            // Not root: the agent's child makes the namespace instead
            // (the probe below and the CLI's host tests cover it).
            Err(e) => assert!(!root, "root could not unshare: {e}"),
        })
        .join()
        .unwrap();
        assert!(
            loopback_answers(),
            "the test's other threads kept the host's network"
        );
    }

    #[test]
    fn a_listener_made_in_another_namespace_arrives_and_accepts() {
        let (ours, theirs) = super::listener_channel().unwrap();
        // A thread in a new namespace when root; this one's otherwise.
        let sent = std::thread::spawn(move || {
            if rustix::process::geteuid().is_root() {
                crate::spawn::unshare_thread_network().unwrap();
                super::loopback_up().unwrap();
            }
            super::send_listener(std::os::fd::AsFd::as_fd(&theirs), 0)
        })
        .join()
        .unwrap();
        sent.unwrap();
        let listener = super::receive_listener(&ours).unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(addr.ip().is_loopback());
        if rustix::process::geteuid().is_root() {
            // Another namespace's loopback: unreachable from here.
            assert!(TcpStream::connect(addr).is_err());
        } else {
            assert!(TcpStream::connect(addr).is_ok());
        }
        assert!(
            super::receive_listener(&ours).is_err(),
            "one listener per message"
        );
    }

    #[test]
    fn the_user_namespace_probe_answers_with_a_reason() {
        let root = rustix::process::geteuid().is_root();
        match super::user_namespaces() {
            Ok(()) => {}
            Err(why) if !root => assert!(why.contains("user namespace"), "{why}"),
            Err(why) => panic!("root may always make a user namespace: {why}"),
        }
    }
}
