//! The one source of randomness in the model: a portable, seeded ChaCha8 stream.
//!
//! Odds are integer [`Ratio`]s and spans are drawn as integers, so a seed gives the same
//! numbers on every platform (no floating-point `ln`, whose last bits differ between libms).

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A probability `num/den` as integers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ratio {
    /// Numerator.
    pub num: u64,
    /// Denominator, never zero.
    pub den: u64,
}

impl Ratio {
    /// `num/den`; panics when `den` is zero or the ratio exceeds one.
    pub const fn new(num: u64, den: u64) -> Self {
        assert!(den > 0, "ratio with zero denominator");
        assert!(num <= den, "ratio above one");
        Ratio { num, den }
    }
    /// Never.
    pub const ZERO: Ratio = Ratio { num: 0, den: 1 };
}

/// A seeded pseudo-random stream.
#[derive(Clone, Debug)]
pub struct Prng(ChaCha8Rng);

impl Prng {
    /// The stream for `seed`.
    pub fn from_seed(seed: u64) -> Self {
        Prng(ChaCha8Rng::seed_from_u64(seed))
    }
    /// A child stream, so that adding draws in one component does not shift another's.
    pub fn fork(&mut self) -> Prng {
        Prng::from_seed(self.0.next_u64())
    }
    /// A uniformly random `u64`.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `lo..=hi`.
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi);
        self.0.gen_range(lo..=hi)
    }
    /// True with probability `r`.
    pub fn chance(&mut self, r: Ratio) -> bool {
        r.num > 0 && self.0.gen_range(0..r.den) < r.num
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_fork_is_independent() {
        let mut a = Prng::from_seed(7);
        let mut b = Prng::from_seed(7);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut c = Prng::from_seed(8);
        assert_ne!(xs[0], c.next_u64());
    }

    #[test]
    fn chance_respects_extremes() {
        let mut p = Prng::from_seed(1);
        assert!((0..100).all(|_| !p.chance(Ratio::ZERO)));
        assert!((0..100).all(|_| p.chance(Ratio::new(3, 3))));
        let hits = (0..10_000).filter(|_| p.chance(Ratio::new(1, 4))).count();
        assert!((2_000..3_000).contains(&hits), "{hits}");
    }
}
