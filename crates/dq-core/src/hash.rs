//! Stable hashes: the same value in every process and release (unlike std's
//! `Hash`), for what several dq instances must agree on — which partition
//! holds a job, which shard holds a partition, which dispatcher handles a
//! topic.

/// FNV-1a, 64 bits, of the concatenation of `parts`.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The SplitMix64 finalizer: spreads the bits of `h`, so that similar inputs
/// (`t1`, `t2`, …) get unrelated values.
pub fn mix64(mut h: u64) -> u64 {
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"abc"]));
        assert_ne!(mix64(1), mix64(2));
    }
}
