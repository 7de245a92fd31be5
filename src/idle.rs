//! Whether this host has a core to spare right now.
//!
//! Polling for a reply instead of sleeping in the kernel saves a wake-up when a core is idle,
//! and takes a core from other work when none is: the other threads and workers of a busy
//! server, and often Redis itself. So callers poll only while the host's runnable tasks
//! (`/proc/loadavg`'s fourth field) are no more than its cores: the caller and the server
//! working on its request may run, anything more and the cores are contended. The reading is
//! taken at most every `REFRESH` per process and shared by every thread.
//!
//! One reading is a snapshot, and on a loaded server snapshots swing: under granian ASGI with
//! two busy workers on two cores, about half of them showed few enough runnable tasks for a
//! "free" core that was not there. So the decision is made on a moving average of the recent
//! readings (`SMOOTHING`), which a loaded server keeps above the line and an idle host below.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one reading of the host's load is used.
const REFRESH: Duration = Duration::from_millis(2);

/// Each new reading moves the average by 1/SMOOTHING of the difference (about 16 ms of
/// readings at one per `REFRESH`).
const SMOOTHING: usize = 8;
/// The average is kept in 1/SCALE tasks.
const SCALE: usize = 256;

static CHECKED_AT_NS: AtomicU64 = AtomicU64::new(u64::MAX);
/// The moving average of the readings, in 1/SCALE runnable tasks (0: unknown, taken as free).
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
    let average = if fresh {
        RUNNING.load(Ordering::Relaxed)
    } else {
        CHECKED_AT_NS.store(now, Ordering::Relaxed);
        // (Two threads refreshing at once may each apply their reading: harmless.)
        let average = runnable().map_or(0, |r| smoothed(RUNNING.load(Ordering::Relaxed), r));
        RUNNING.store(average, Ordering::Relaxed);
        average
    };
    // Rounded to the nearest task.
    let running = (average + SCALE / 2) / SCALE;
    average == 0 || leaves_a_core(running.saturating_sub(helpers), cores())
}

/// The moving average (in 1/SCALE tasks) after a reading of `runnable` tasks.
fn smoothed(average: usize, runnable: usize) -> usize {
    let reading = runnable.saturating_mul(SCALE).max(1);
    if average == 0 {
        return reading; // the first reading
    }
    if reading >= average {
        average + (reading - average) / SMOOTHING
    } else {
        average - (average - reading) / SMOOTHING
    }
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
    fn the_decision_follows_the_average_of_readings_not_one_snapshot() {
        let mut avg = smoothed(0, 2);
        assert_eq!(avg, 2 * SCALE, "the first reading is taken as it is");
        // A loaded server: readings swing between 2 and 6 around 4.
        for r in [2, 6, 3, 5, 2, 6, 4, 3, 5, 4, 2, 6, 3, 5, 4, 4] {
            avg = smoothed(avg, r);
        }
        let running = (avg + SCALE / 2) / SCALE;
        assert!((3..=5).contains(&running), "{avg}");
        assert!(!leaves_a_core(running - 1, 2), "one low snapshot does not free a core");
        // The load goes: within a few dozen readings the average follows it down.
        for _ in 0..40 {
            avg = smoothed(avg, 1);
        }
        assert!(leaves_a_core((avg + SCALE / 2) / SCALE, 2), "{avg}");
        assert!(smoothed(avg, 0) >= 1, "a reading never makes the average unknown");
    }

    #[test]
    fn the_reading_is_cached() {
        let first = core_free(0);
        // Within REFRESH the same answer comes back without reading again.
        assert_eq!(core_free(0), first);
        assert!(core_free(64), "helpers are not counted");
    }
}
