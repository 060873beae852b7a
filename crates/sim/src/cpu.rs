//! CPU contention on a node: a CPU-bound background program time-shares its cores.
//!
//! Seed 003 §5.5 (Figures 15 and 16) raises the receiver's or the sender's CPU load "by
//! running a computation-intensive program in the background". The simulator has no
//! scheduler of its own: a node's threads are async tasks whose CPU work is
//! `compute`/`memcpy`/`persist_local` and whose waking is `wait_cq`. Under a [`CpuLoad`]
//! the node's CPU alternates between *on* windows (its threads run) and *off* windows
//! (the background program has the cores): work only progresses in on windows, a task
//! woken by a completion in an off window runs at the next on window, and a busy poller's
//! probes (which are `compute` gaps) are deferred the same way. Window lengths are drawn
//! from the node's own seeded stream, uniformly within ±50% of their means, so a closed
//! loop of requests does not lock onto a fixed phase.
//!
//! One window sequence serves every thread of the node (the background program takes all
//! cores at once); the model does not track which core a thread runs on.

use remora_model::prng::Prng;
use remora_model::time::{Duration, Instant};
use std::collections::VecDeque;

/// A CPU-bound background program on one node (seed 003 §5.5, Figures 15–16).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CpuLoad {
    /// Share of the CPU the background program takes, in percent (1–99).
    pub percent: u32,
    /// Mean length of one scheduling period (one on window and one off window).
    pub period: Duration,
}

impl CpuLoad {
    /// Mean length of an on window (the node's threads run).
    fn on_mean(&self) -> u64 {
        self.period.as_nanos() * (100 - self.percent.clamp(1, 99)) as u64 / 100
    }

    /// Mean length of an off window (the background program runs).
    fn off_mean(&self) -> u64 {
        self.period.as_nanos() * self.percent.clamp(1, 99) as u64 / 100
    }
}

/// One node's on/off windows, generated lazily from its stream.
pub(crate) struct CpuSched {
    load: CpuLoad,
    rng: Prng,
    /// Consecutive windows `(on, off, end)`: the node's threads run in `on..off`, the
    /// background program in `off..end`; the next window starts at `end`.
    windows: VecDeque<(Instant, Instant, Instant)>,
}

impl CpuSched {
    /// Windows from `now` on; the first on window has a random remaining length (the
    /// load starts at an arbitrary point of its period).
    pub(crate) fn new(load: CpuLoad, mut rng: Prng, now: Instant) -> Self {
        let on = rng.range_inclusive(0, load.on_mean() * 3 / 2);
        let off = Self::draw(&mut rng, load.off_mean());
        let first = now + Duration::from_nanos(on);
        let mut windows = VecDeque::new();
        windows.push_back((now, first, first + Duration::from_nanos(off)));
        CpuSched { load, rng, windows }
    }

    fn draw(rng: &mut Prng, mean: u64) -> u64 {
        rng.range_inclusive(mean / 2, mean * 3 / 2).max(1)
    }

    fn push_next(&mut self) {
        let end = self.windows.back().expect("at least one window").2;
        let on = Self::draw(&mut self.rng, self.load.on_mean());
        let off = Self::draw(&mut self.rng, self.load.off_mean());
        let off_at = end + Duration::from_nanos(on);
        self.windows
            .push_back((end, off_at, off_at + Duration::from_nanos(off)));
    }

    /// Drops windows that ended by `now` (time only moves forward); call after
    /// [`cover`](Self::cover)`(now)`, so one window is left.
    fn advance(&mut self, now: Instant) {
        while self.windows.front().is_some_and(|w| w.2 <= now) {
            self.windows.pop_front();
        }
    }

    /// Makes sure the window sequence reaches past `t`.
    fn cover(&mut self, t: Instant) {
        while self.windows.back().expect("at least one window").2 <= t {
            self.push_next();
        }
    }

    /// The first instant at or after `now` at which the node's threads run.
    pub(crate) fn ready(&mut self, now: Instant) -> Instant {
        self.cover(now);
        self.advance(now);
        let (_, off, end) = self.windows[0];
        if now < off {
            now
        } else {
            end
        }
    }

    /// When `d` of CPU work started at `now` finishes: it progresses in on windows only.
    pub(crate) fn finish(&mut self, now: Instant, d: Duration) -> Instant {
        let mut t = self.ready(now);
        let mut left = d.as_nanos();
        let mut i = 0;
        loop {
            self.cover(t);
            while self.windows[i].2 <= t {
                i += 1;
            }
            let (on, off, end) = self.windows[i];
            let t0 = t.max(on);
            let avail = off.saturating_since(t0).as_nanos();
            if left <= avail {
                return t0 + Duration::from_nanos(left);
            }
            left -= avail;
            t = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(percent: u32) -> CpuSched {
        CpuSched::new(
            CpuLoad {
                percent,
                period: Duration::from_micros(100),
            },
            Prng::from_seed(7),
            Instant::ZERO,
        )
    }

    #[test]
    fn work_only_progresses_in_on_windows() {
        let mut s = sched(50);
        // 10 ms of work at a 50% share takes about 20 ms.
        let end = s.finish(Instant::ZERO, Duration::from_millis(10));
        let ms = end.as_nanos() as f64 / 1e6;
        assert!((17.0..23.0).contains(&ms), "{ms} ms");
        // Ready instants are never in an off window and never before the query.
        let mut t = Instant::ZERO;
        for k in 0..1000u64 {
            t += Duration::from_nanos(k * 37 % 5000);
            let r = s.ready(t);
            assert!(r >= t);
            assert_eq!(s.ready(r), r, "ready at its own instant");
        }
    }

    #[test]
    fn the_share_sets_the_slowdown() {
        let light = sched(20).finish(Instant::ZERO, Duration::from_millis(10));
        let heavy = sched(80).finish(Instant::ZERO, Duration::from_millis(10));
        assert!(heavy.as_nanos() > 3 * light.as_nanos());
    }
}
