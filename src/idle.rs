//! Whether this host has a core to spare right now.
//!
//! Polling for a reply instead of sleeping in the kernel saves a wake-up when a core is idle,
//! and takes a core from other work when none is: the other threads and workers of a busy
//! server, and often Redis itself. So callers poll only while the host's runnable tasks
//! (`/proc/loadavg`'s fourth field) are no more than its cores: the caller and the server
//! working on its request may run, anything more and the cores are contended. The reading is
//! taken at most every `REFRESH` per process and shared by every thread.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one reading of the host's load is used.
const REFRESH: Duration = Duration::from_millis(2);

static CHECKED_AT_NS: AtomicU64 = AtomicU64::new(u64::MAX);
/// The last reading: runnable tasks (0: unknown, taken as free).
static RUNNING: AtomicUsize = AtomicUsize::new(0);

fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
}

fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// Whether a core is free for polling (true where the load cannot be read): the runnable
/// tasks are no more than the cores plus `helpers` (threads of ours that take part in
/// delivering the reply, such as the I/O thread for async calls).
pub fn core_free(helpers: usize) -> bool {
    if never_free() {
        return false;
    }
    let now = now_ns();
    let last = CHECKED_AT_NS.load(Ordering::Relaxed);
    let fresh = last != u64::MAX && now.saturating_sub(last) < REFRESH.as_nanos() as u64;
    let running = if fresh {
        RUNNING.load(Ordering::Relaxed)
    } else {
        CHECKED_AT_NS.store(now, Ordering::Relaxed);
        let running = runnable().unwrap_or(0);
        RUNNING.store(running, Ordering::Relaxed);
        running
    };
    running == 0 || leaves_a_core(running.saturating_sub(helpers), cores())
}

/// `REDOXIDE_POLL=never` (read once): treat the host as always busy, for operators who know it
/// is and for tests of the busy-host behaviour.
fn never_free() -> bool {
    static NEVER: OnceLock<bool> = OnceLock::new();
    *NEVER.get_or_init(|| std::env::var("REDOXIDE_POLL").is_ok_and(|v| v == "never"))
}

/// `running` tasks (the caller and the server answering it among them) fit the cores.
fn leaves_a_core(running: usize, cores: usize) -> bool {
    cores > 1 && running <= cores
}

/// The host's runnable tasks now, if the system says.
fn runnable() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::FileExt;
        // Opened once and read from its start each time (the kernel renders it afresh): one
        // system call a reading instead of four. The host's file, so a forked child keeps it.
        static LOADAVG: OnceLock<Option<std::fs::File>> = OnceLock::new();
        let file = LOADAVG.get_or_init(|| std::fs::File::open("/proc/loadavg").ok()).as_ref()?;
        let mut buf = [0u8; 128];
        let n = file.read_at(&mut buf, 0).ok()?;
        parse_loadavg(std::str::from_utf8(&buf[..n]).ok()?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The runnable count from `/proc/loadavg` ("0.50 0.40 0.30 2/180 12345").
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // read only where /proc is
fn parse_loadavg(text: &str) -> Option<usize> {
    let field = text.split_whitespace().nth(3)?;
    field.split('/').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runnable_count_is_read_from_loadavg() {
        assert_eq!(parse_loadavg("0.50 0.40 0.30 2/180 12345\n"), Some(2));
        assert_eq!(parse_loadavg("garbage"), None);
        assert_eq!(parse_loadavg("1 2 3 x/4 5"), None);
    }

    #[test]
    fn a_core_is_free_only_when_the_runnable_tasks_leave_one() {
        assert!(leaves_a_core(1, 2));
        assert!(leaves_a_core(2, 2), "the caller and the server answering it");
        assert!(!leaves_a_core(3, 2));
        assert!(leaves_a_core(4, 4));
        assert!(!leaves_a_core(1, 1), "one core: the reply needs the caller's core");
    }

    #[test]
    fn the_reading_is_cached() {
        let first = core_free(0);
        // Within REFRESH the same answer comes back without reading again.
        assert_eq!(core_free(0), first);
        assert!(core_free(64), "helpers are not counted");
    }
}
