//! Where a prompt's prefix is keyed: at every block near its start, then ever more
//! sparsely, so that a prompt of any length has a few hundred keys.
//!
//! A key at block `k` stands for the prompt's first `k` blocks. The first
//! `2 × DENSE_BLOCKS` blocks each have one; from there each doubling of the distance
//! holds `DENSE_BLOCKS` keys, evenly spaced: `[2^j·D, 2^(j+1)·D)` every `2^j` blocks.
//! A match found at a key is therefore at most `1 / DENSE_BLOCKS` (1.6%) short of the
//! prompt's real common prefix, wherever it ends, and the keys of a prompt of `n`
//! blocks number about `D × (2 + log2(n / 2D))`: 64 at 4 KiB (64-byte blocks), 320 at
//! 64 KiB, 576 at 1 MiB, 704 at 4 MiB, where keying every block took 65,536.
//!
//! The places depend on the block number alone, never on the text, so two prompts
//! that share a prefix share its keys, and the longest prefix a pod holds can be found
//! by a binary search over them (`index.rs`).

/// Blocks keyed one by one at the start, and keys per doubling of the distance after.
pub const DENSE_BLOCKS: u64 = 64;

/// The spacing of keys around block `k`.
fn step(k: u64) -> u64 {
    let octave = (k / DENSE_BLOCKS).max(1);
    1 << octave.ilog2()
}

/// The first keyed block after block `after` (0: the first block).
pub fn next_anchor(after: u64) -> u64 {
    let k = after.saturating_add(1);
    k.div_ceil(step(k)).saturating_mul(step(k))
}

/// Whether the prefix of `k` blocks is keyed.
pub fn is_anchor(k: u64) -> bool {
    k > 0 && k % step(k) == 0
}

/// How many keys a prompt of `blocks` full blocks has.
pub fn anchors_within(blocks: u64) -> u64 {
    let mut count = 0;
    let mut k = next_anchor(0);
    while k <= blocks {
        count += 1;
        k = next_anchor(k);
    }
    count
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn dense_first_then_sparser_by_octave() {
        let first: Vec<u64> =
            std::iter::successors(Some(next_anchor(0)), |&k| Some(next_anchor(k))).take(200).collect();
        assert_eq!(first[..128], (1..=128).collect::<Vec<_>>()[..], "every block up to 2 × 64");
        assert_eq!(first[128..132], [130, 132, 134, 136]);
        assert!(is_anchor(256) && is_anchor(260) && !is_anchor(258), "every 4 from 256");
        assert_eq!(next_anchor(511), 512);
        assert_eq!(next_anchor(512), 520, "every 8 from 512");
    }

    #[test]
    fn a_few_hundred_keys_for_any_length() {
        assert_eq!(anchors_within(64), 64);
        assert_eq!(anchors_within(1_024), 320);
        assert_eq!(anchors_within(16_384), 576);
        assert_eq!(anchors_within(65_536), 704);
        assert!(anchors_within(1 << 24) <= 1_300);
    }

    proptest! {
        #[test]
        fn next_is_the_first_anchor_after(after in 0u64..5_000_000) {
            let next = next_anchor(after);
            prop_assert!(next > after && is_anchor(next));
            prop_assert!((after + 1..next).all(|k| !is_anchor(k)));
            // The gap is at most 1/64 of the distance from the start.
            prop_assert!((next - after) * DENSE_BLOCKS <= next.max(DENSE_BLOCKS) * 2);
        }
    }
}
