//! CRC-32C (Castagnoli) of the library's frames and of the records built on them
//! (RemoteLog's log records, the durable RPCs' frames and objects), the same values the
//! `crc32c` crate computes.
//!
//! Why not call the crate directly: these inputs are short (a frame header and a few
//! entries, a 64-byte record), and for short inputs the crate's fixed cost dominates (its
//! split into aligned parts and its two interleaved-block passes, about 130 instructions
//! a call even when both are empty). A round trip of a two-sided persistence method checks
//! or makes six to eight checksums, about 1,000 instructions of both sides' 20,000
//! (`scripts/callgrind.sh method`). Inputs up to [`SHORT`] bytes take one pass of the SSE
//! 4.2 `crc32` instruction, eight bytes at a time; longer ones, and machines without the
//! instruction, go to the crate.

/// Inputs up to this many bytes take the short path.
pub const SHORT: usize = 256;

/// CRC-32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_append(0, bytes)
}

/// CRC-32C of the concatenation of the input `crc` was computed over and `bytes`.
#[inline]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if bytes.len() <= SHORT && std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2 (checked just above; std caches the answer).
        return unsafe { short_sse42(crc, bytes) };
    }
    crc32c::crc32c_append(crc, bytes)
}

/// One serial pass of the `crc32` instruction: 8 bytes at a time, then byte by byte.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn short_sse42(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut words = bytes.chunks_exact(8);
    let mut c = u64::from(!crc);
    for w in &mut words {
        c = _mm_crc32_u64(c, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut c = c as u32;
    for &b in words.remainder() {
        c = _mm_crc32_u8(c, b);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        // RFC 3720 (iSCSI) appendix B.4 test vectors.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        assert_eq!(crc32c(b""), 0);
    }

    proptest! {
        /// Both sides of [`SHORT`], any split, any start: the crate's value.
        #[test]
        fn equals_the_crate(data in proptest::collection::vec(any::<u8>(), 0..600),
                            split in 0usize..600, seed in any::<u32>()) {
            let split = split.min(data.len());
            prop_assert_eq!(crc32c(&data), crc32c::crc32c(&data));
            let (a, b) = data.split_at(split);
            prop_assert_eq!(crc32c_append(crc32c(a), b), crc32c::crc32c(&data));
            prop_assert_eq!(crc32c_append(seed, &data), crc32c::crc32c_append(seed, &data));
        }
    }
}
