//! Virtual time. The model never reads a clock: every entry point takes `now`.
//!
//! Nanosecond resolution in a `u64` covers 584 years of simulated time, far past any run.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in time, in nanoseconds since the runtime's epoch (the start of a simulation, or
/// the moment a real-time runtime started).
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Instant(u64);

/// A span of time in nanoseconds.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Duration(u64);

impl Instant {
    /// The runtime's epoch.
    pub const ZERO: Instant = Instant(0);
    /// A time that never comes; used for "not scheduled".
    pub const NEVER: Instant = Instant(u64::MAX);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }
    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration(0);
    /// A span of `n` nanoseconds.
    pub const fn from_nanos(n: u64) -> Self {
        Duration(n)
    }
    /// A span of `n` microseconds.
    pub const fn from_micros(n: u64) -> Self {
        Duration(n * 1_000)
    }
    /// A span of `n` milliseconds.
    pub const fn from_millis(n: u64) -> Self {
        Duration(n * 1_000_000)
    }
    /// The span in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// `self * n`, saturating.
    pub const fn mul(self, n: u64) -> Self {
        Duration(self.0.saturating_mul(n))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}
impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}
impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        assert!(earlier <= self, "time went backwards: {earlier} > {self}");
        Duration(self.0 - earlier.0)
    }
}
impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}
impl AddAssign for Duration {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Instant::NEVER {
            return write!(f, "never");
        }
        write!(f, "{}", Duration(self.0))
    }
}
impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        if ns >= 1_000_000 {
            write!(f, "{}.{:03}ms", ns / 1_000_000, (ns / 1_000) % 1_000)
        } else if ns >= 1_000 {
            write!(f, "{}.{:03}us", ns / 1_000, ns % 1_000)
        } else {
            write!(f, "{ns}ns")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_and_display() {
        let t = Instant::ZERO + Duration::from_micros(3) + Duration::from_nanos(5);
        assert_eq!(t.as_nanos(), 3_005);
        assert_eq!(t.to_string(), "3.005us");
        assert_eq!(t - Instant::from_nanos(5), Duration::from_micros(3));
        assert_eq!(Instant::NEVER + Duration::from_nanos(1), Instant::NEVER);
        assert_eq!(Instant::ZERO.saturating_since(t), Duration::ZERO);
    }

    #[test]
    #[should_panic(expected = "time went backwards")]
    fn subtracting_a_later_instant_panics() {
        let _ = Instant::ZERO - Instant::from_nanos(1);
    }
}
