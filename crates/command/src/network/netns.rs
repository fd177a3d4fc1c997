//! The agent's network namespace: entered by the starting thread (as root)
//! or by the agent's child process together with a user namespace (not
//! root), and its loopback brought up.

use std::sync::OnceLock;

use rustix::io::Errno;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

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
    fn the_user_namespace_probe_answers_with_a_reason() {
        let root = rustix::process::geteuid().is_root();
        match super::user_namespaces() {
            Ok(()) => {}
            Err(why) if !root => assert!(why.contains("user namespace"), "{why}"),
            Err(why) => panic!("root may always make a user namespace: {why}"),
        }
    }
}
