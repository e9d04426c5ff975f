//! CPU use as E2B reports it: the share of the sandbox's CPUs its processes used since the
//! previous reading, in percent rounded to two decimals (envd's `cpu_used_pct`, gopsutil's
//! `cpu.Percent(0, false)` in the VM; the control plane's `cpuUsedPct` is envd's reading
//! every 5 s). Read from the sandbox's cgroup v2 subtree (`cpu.stat`'s `usage_usec`, there
//! whether or not the cpu controller is enabled), so processes that ended count too.

use std::sync::Mutex;
use std::time::Instant;

/// One reader's previous reading: when, and the subtree's CPU time then.
#[derive(Debug, Default)]
pub(crate) struct CpuMeter {
    last: Mutex<Option<(Instant, u64)>>,
}

impl CpuMeter {
    /// The percent of `cpus` CPUs used since this meter's previous reading, given the
    /// subtree's total CPU time now (`None`: not measured, 0). The first reading has
    /// nothing to compare with and reads 0.
    pub(crate) fn percent(&self, usage_usec: Option<u64>, cpus: u32) -> f64 {
        self.percent_at(Instant::now(), usage_usec, cpus)
    }

    fn percent_at(&self, now: Instant, usage_usec: Option<u64>, cpus: u32) -> f64 {
        let Some(usage) = usage_usec else { return 0.0 };
        let Ok(mut last) = self.last.lock() else {
            return 0.0;
        };
        let previous = last.replace((now, usage));
        let Some((then, used)) = previous else {
            return 0.0;
        };
        let wall = now.duration_since(then).as_micros() as f64 * f64::from(cpus.max(1));
        if wall <= 0.0 {
            return 0.0;
        }
        let pct = (usage.saturating_sub(used) as f64 / wall * 100.0).clamp(0.0, 100.0);
        (pct * 100.0).round() / 100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_the_share_of_the_cpus_since_the_previous_one() {
        let m = CpuMeter::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        assert_eq!(
            m.percent_at(t0, Some(1_000), 2),
            0.0,
            "the first reading has no base"
        );
        // 100 ms of one CPU's time in 300 ms of 2 CPUs: a sixth, to two decimals.
        assert_eq!(m.percent_at(at(300), Some(101_000), 2), 16.67);
        assert_eq!(m.percent_at(at(400), None, 2), 0.0);
        // Never above 100, never below 0 (a counter that went back).
        assert_eq!(m.percent_at(at(500), Some(u64::MAX / 2), 1), 100.0);
        assert_eq!(m.percent_at(at(600), Some(0), 1), 0.0);
    }
}
