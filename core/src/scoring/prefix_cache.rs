//! Prefix-cache affinity: matched leading blocks over the prompt's blocks, so a pod that
//! holds more of the prompt skips more prefill. A prompt shorter than one block scores
//! 0 everywhere.

use super::Candidate;

pub(super) fn score(candidates: &[Candidate], out: &mut [f64]) {
    for (slot, c) in out.iter_mut().zip(candidates) {
        *slot = if c.total_blocks == 0 { 0.0 } else { c.matched_blocks as f64 / c.total_blocks as f64 };
    }
}

#[cfg(test)]
mod tests {
    use super::super::candidate;
    use super::*;

    #[test]
    fn the_share_of_matched_blocks() {
        let mut pods = [candidate(1, 0.0, 0.0, None), candidate(2, 0.0, 0.0, None), candidate(3, 0.0, 0.0, None)];
        pods[0].total_blocks = 4;
        pods[0].matched_blocks = 3;
        pods[1].total_blocks = 4;
        let mut out = [9.0; 3];
        score(&pods, &mut out);
        assert_eq!(out, [0.75, 0.0, 0.0]);
    }
}
