//! Every `unsafe` libc call of the crate, each behind a safe function.
//!
//! The descriptors passed in are borrowed: the callers keep them open for the duration of
//! the call (a socket owned by its connection, an eventfd or pipe owned by its queue).
//!
//! Everything here is POSIX (`cfg(unix)`) but the eventfd, which is Linux's (`cfg(target_os =
//! "linux")`); on other Unixes the bridge's queue uses the self-pipe instead.
#![cfg(unix)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Keep `send` from raising SIGPIPE on a closed peer. macOS has no such flag; CPython ignores
/// SIGPIPE at startup, so there a closed peer is only the error EPIPE.
#[cfg(not(target_vendor = "apple"))]
const NO_SIGPIPE: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(target_vendor = "apple")]
const NO_SIGPIPE: libc::c_int = 0;

/// Receive into `buf` without blocking: `Ok(0)` is end of stream, `WouldBlock` no data yet.
pub fn recv_nonblocking(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, initialised, writable slice of `buf.len()` bytes for the
    // whole call; MSG_DONTWAIT keeps the call from blocking. A bad descriptor is an error.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Whether a socket that should be idle has something to say: data nobody asked for, end of
/// stream or an error. Never blocks and consumes nothing.
pub fn has_pending_input(fd: RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: peeks at most one byte into a valid local; MSG_DONTWAIT keeps it from blocking.
    let n = unsafe {
        libc::recv(fd, std::ptr::from_mut(&mut byte).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
    };
    n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock
}

/// Send what the socket takes right now without blocking (and without SIGPIPE); return how
/// much that was. Errors count as nothing sent: the connection's reader or writer reports them.
pub fn send_nonblocking(fd: RawFd, buf: &[u8]) -> usize {
    // SAFETY: `buf` is a valid, readable slice of `buf.len()` bytes for the whole call.
    let n =
        unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_DONTWAIT | NO_SIGPIPE) };
    usize::try_from(n).unwrap_or(0)
}

/// Send what the socket takes right now without blocking (and without SIGPIPE), errors
/// included: `WouldBlock` when it takes nothing.
pub fn send_some(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, readable slice of `buf.len()` bytes for the whole call.
    let n =
        unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_DONTWAIT | NO_SIGPIPE) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// What `wait_for` waits for.
#[derive(Clone, Copy)]
pub enum Ready {
    Read,
    Write,
}

/// Wait up to `timeout` for a socket to be readable or writable (or in error, or closed):
/// whether it became so. A signal cuts the wait short (reported as ready: the caller tries
/// again, and waits again for what is left).
pub fn wait_for(fd: RawFd, ready: Ready, timeout: std::time::Duration) -> io::Result<bool> {
    let events = match ready {
        Ready::Read => libc::POLLIN,
        Ready::Write => libc::POLLOUT,
    };
    let mut poll = libc::pollfd { fd, events, revents: 0 };
    // Rounded up: a wait shorter than a millisecond still waits.
    let millis =
        libc::c_int::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
    // SAFETY: `poll` is one valid, initialised pollfd for the whole call.
    let n = unsafe { libc::poll(&mut poll, 1, millis) };
    match n {
        0 => Ok(false),
        1.. => Ok(true),
        _ => match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            e => Err(e),
        },
    }
}

/// Shut a socket down both ways, waking whoever waits on it; the descriptor stays open.
pub fn shutdown(fd: RawFd) {
    // SAFETY: shutdown takes no memory; on a bad descriptor it fails harmlessly.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

/// A new non-blocking, close-on-exec eventfd with a zero counter.
#[cfg(target_os = "linux")]
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no memory; the result is checked below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Add one to an eventfd's counter, making it readable. A full counter (EAGAIN) still leaves
/// it readable, which is all callers need, so the result is ignored.
#[cfg(target_os = "linux")]
pub fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes the 8 bytes of a valid local u64, the size an eventfd expects.
    unsafe {
        libc::write(fd, std::ptr::from_ref(&one).cast(), 8);
    }
}

/// Reset an eventfd's counter to zero (non-blocking: a zero counter is left as it is).
#[cfg(target_os = "linux")]
pub fn eventfd_reset(fd: RawFd) {
    let mut counter: u64 = 0;
    // SAFETY: reads at most 8 bytes into a valid local u64; the eventfd is non-blocking.
    unsafe {
        libc::read(fd, std::ptr::from_mut(&mut counter).cast(), 8);
    }
}

/// A new pipe, both ends non-blocking and close-on-exec: `(read end, write end)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [libc::c_int; 2] = [-1, -1];
    // SAFETY: writes two descriptors into a valid local array of two; checked below.
    #[cfg(target_os = "linux")]
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    // SAFETY: as above. No pipe2 on macOS: the flags are set just after.
    #[cfg(not(target_os = "linux"))]
    let made = unsafe { libc::pipe(fds.as_mut_ptr()) };
    if made < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors that nothing else owns.
    let ends = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    #[cfg(not(target_os = "linux"))]
    for fd in fds {
        // SAFETY: fcntl on a descriptor owned above, with integer arguments only.
        let failed = unsafe {
            libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK) < 0
                || libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) < 0
        };
        if failed {
            return Err(io::Error::last_os_error()); // `ends` drops, closing both
        }
    }
    Ok(ends)
}

/// Write one byte to a non-blocking pipe, making its read end readable. A full pipe (EAGAIN)
/// is readable already, which is all callers need, so the result is ignored.
pub fn pipe_signal(fd: RawFd) {
    let byte = 1u8;
    // SAFETY: writes the one byte of a valid local.
    unsafe {
        libc::write(fd, std::ptr::from_ref(&byte).cast(), 1);
    }
}

/// Read a non-blocking pipe until it is empty.
pub fn pipe_drain(fd: RawFd) {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: reads at most `buf.len()` bytes into a valid local; the pipe is non-blocking.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < isize::try_from(buf.len()).unwrap_or(isize::MAX) {
            return; // empty now, or an error (EAGAIN, a bad descriptor): nothing left to read
        }
    }
}

/// Run `child` in the child process after every `fork()`. `child` must be async-signal-safe
/// (touch atomics only).
pub fn on_fork_in_child(child: extern "C" fn()) {
    // SAFETY: registers a plain function pointer; no memory is handed over.
    unsafe {
        libc::pthread_atfork(None, None, Some(child));
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn recv_reports_no_data_data_and_end_of_stream() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut buf = [0u8; 8];
        let err = recv_nonblocking(b.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert!(!has_pending_input(b.as_raw_fd()));
        a.write_all(b"hi").unwrap();
        assert!(has_pending_input(b.as_raw_fd()));
        assert_eq!(recv_nonblocking(b.as_raw_fd(), &mut buf).unwrap(), 2);
        assert_eq!(&buf[..2], b"hi");
        drop(a);
        assert!(has_pending_input(b.as_raw_fd()));
        assert_eq!(recv_nonblocking(b.as_raw_fd(), &mut buf).unwrap(), 0);
    }

    #[test]
    fn pipe_signals_until_drained() {
        use std::io::Read;
        let (read, write) = pipe().unwrap();
        for _ in 0..100 {
            pipe_signal(write.as_raw_fd());
        }
        pipe_drain(read.as_raw_fd());
        let mut file = std::fs::File::from(read);
        let err = file.read(&mut [0u8; 8]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn eventfd_signals_until_reset() {
        use std::io::Read;
        let fd = eventfd().unwrap();
        let raw = fd.as_raw_fd();
        eventfd_signal(raw);
        eventfd_signal(raw);
        eventfd_reset(raw);
        let mut file = std::fs::File::from(fd);
        let err = file.read(&mut [0u8; 8]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }
}
