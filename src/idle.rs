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
//!
//! That average misses one kind of host with a core to spare: processes that take turns. Under
//! granian WSGI with one thread per worker, the workers, Redis and the load generator mostly
//! wait for each other, so more of them are runnable at once than there are cores, and yet a
//! third of a core sits idle (median of 100 ms windows, 2026-12-03). A thread blocked in a
//! sync call spends that idle time well by polling: its reply comes sooner, and Redis does not
//! have to wake it. So sync calls also poll when the host's cores were idle for at least
//! `MIN_IDLE_MILLICORES` over the last `IDLE_WINDOW` (`/proc/stat`, read once per window per
//! process); with four threads per worker the idle time was under a fifth of a core, and they
//! do not. That idle time is the host's, so the rule applies only to a process that may use
//! every core (not one held to a few by affinity or a cgroup quota). An event loop's waits
//! keep to the runnable rule alone: its thread is what a loaded async server runs out of.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    few_runnable(helpers)
}

/// Whether a thread waiting for a sync call's reply may poll for it: a core is free by the
/// runnable rule (`core_free`), or the cores were recently idle long enough (see the module's
/// text).
pub fn core_free_for_sync() -> bool {
    if never_free() {
        return false;
    }
    few_runnable(0) || (whole_host() && recently_idle())
}

/// Whether this process may run on every core of the host: `/proc/stat`'s idle time is the
/// host's, so in a container held to a few of many cores (affinity or a cgroup quota) it says
/// nothing of ours, and only the runnable rule is used.
fn whole_host() -> bool {
    static WHOLE: OnceLock<bool> = OnceLock::new();
    *WHOLE.get_or_init(|| {
        #[cfg(unix)]
        {
            crate::ffi::online_cpus() == Some(cores())
        }
        #[cfg(not(unix))]
        {
            false
        }
    })
}

/// The moving average of runnable tasks leaves a core (see `core_free`).
fn few_runnable(helpers: usize) -> bool {
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

/// How long one reading of the host's idle time stands. The kernel counts it in ticks of 10 ms
/// per core, so a much shorter window would mostly read no change at all.
const IDLE_WINDOW: Duration = Duration::from_millis(100);
/// The idle time over a window, in thousandths of a core, that counts as a core to spare.
const MIN_IDLE_MILLICORES: u64 = 300;

static IDLE_AT_NS: AtomicU64 = AtomicU64::new(u64::MAX);
/// The last `/proc/stat` reading: the ticks of every core, all and idle (0: none yet).
static TICKS_TOTAL: AtomicU64 = AtomicU64::new(0);
static TICKS_IDLE: AtomicU64 = AtomicU64::new(0);
/// The verdict on the last window (false until there is one, and where it cannot be read).
static IDLE_ENOUGH: AtomicBool = AtomicBool::new(false);

/// Whether the host's cores were idle for at least `MIN_IDLE_MILLICORES` over the last
/// `IDLE_WINDOW`.
fn recently_idle() -> bool {
    let now = now_ns();
    let last = IDLE_AT_NS.load(Ordering::Relaxed);
    if last != u64::MAX && now.saturating_sub(last) < IDLE_WINDOW.as_nanos() as u64 {
        return IDLE_ENOUGH.load(Ordering::Relaxed);
    }
    IDLE_AT_NS.store(now, Ordering::Relaxed);
    let Some((total, idle)) = cpu_ticks() else {
        return false;
    };
    // (Two threads reading at once may each judge a window: harmless.)
    let before =
        (TICKS_TOTAL.swap(total, Ordering::Relaxed), TICKS_IDLE.swap(idle, Ordering::Relaxed));
    let verdict = enough_idle(before, (total, idle), cores());
    IDLE_ENOUGH.store(verdict, Ordering::Relaxed);
    verdict
}

/// Between two readings of (all ticks, idle ticks) summed over `cores` cores: were the cores
/// idle for at least `MIN_IDLE_MILLICORES`? With no earlier reading, no tick between them or
/// counters that went back, the answer is no (the next window decides).
fn enough_idle(before: (u64, u64), after: (u64, u64), cores: usize) -> bool {
    let (Some(total), Some(idle)) = (after.0.checked_sub(before.0), after.1.checked_sub(before.1))
    else {
        return false;
    };
    if before.0 == 0 || total == 0 {
        return false;
    }
    idle.min(total) * 1000 * cores as u64 >= MIN_IDLE_MILLICORES * total
}

/// The host's (all, idle) ticks summed over its cores, if the system says.
fn cpu_ticks() -> Option<(u64, u64)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::FileExt;
        // Opened once and read from its start each time; only the first line ("cpu ...") is
        // used. The host's file, so a forked child keeps it.
        static STAT: OnceLock<Option<std::fs::File>> = OnceLock::new();
        let file = STAT.get_or_init(|| std::fs::File::open("/proc/stat").ok()).as_ref()?;
        let mut buf = [0u8; 256];
        let n = file.read_at(&mut buf, 0).ok()?;
        parse_cpu_line(std::str::from_utf8(&buf[..n]).ok()?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// (all, idle) ticks from `/proc/stat`'s first line: "cpu user nice system idle iowait irq
/// softirq steal guest guest_nice"; idle counts iowait, and guest time (already in user) is
/// not added again.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // read only where /proc is
fn parse_cpu_line(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.lines().next()?.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields.take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if ticks.len() < 5 {
        return None;
    }
    Some((ticks.iter().sum(), ticks[3] + ticks[4]))
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
        let idle = recently_idle();
        assert_eq!(recently_idle(), idle, "within IDLE_WINDOW, the same verdict");
    }

    #[test]
    fn the_idle_rule_needs_the_whole_host() {
        let online = crate::ffi::online_cpus();
        assert!(online.is_some_and(|n| n >= cores()), "no process has more cores than the host");
        assert_eq!(whole_host(), online == Some(cores()));
    }

    #[test]
    fn the_idle_ticks_are_read_from_proc_stat() {
        let text = "cpu  100 5 50 800 20 3 2 10 7 0\ncpu0 50 2 25 400 10 1 1 5 3 0\n";
        assert_eq!(parse_cpu_line(text), Some((990, 820)));
        assert_eq!(parse_cpu_line("cpu0 1 2 3 4 5"), None, "the first line sums every core");
        assert_eq!(parse_cpu_line("cpu 1 2 x 4 5"), None);
        assert_eq!(parse_cpu_line("cpu 1 2 3"), None);
        #[cfg(target_os = "linux")]
        assert!(cpu_ticks().is_some_and(|(total, idle)| idle <= total));
    }

    #[test]
    fn sync_polls_on_idle_time_only_after_a_window_that_had_enough() {
        // Two cores over 100 ticks each (200 in all).
        let start = (10_000, 4_000);
        assert!(enough_idle(start, (10_200, 4_100), 2), "one core idle");
        assert!(enough_idle(start, (10_200, 4_030), 2), "0.3 of a core idle");
        assert!(!enough_idle(start, (10_200, 4_020), 2), "0.2 of a core idle");
        assert!(!enough_idle(start, (10_200, 4_000), 2), "the cores were never idle");
        assert!(!enough_idle((0, 0), (10_200, 4_000), 2), "no earlier reading");
        assert!(!enough_idle(start, start, 2), "no tick between the readings");
        assert!(!enough_idle(start, (9_000, 4_000), 2), "counters that went back");
    }
}
