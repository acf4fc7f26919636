//! UTF-8 checking across chunk boundaries: a character cut by a boundary is held (at
//! most three bytes) until the next chunk completes it.

use super::Unsupported;

#[derive(Default)]
pub(super) struct Utf8Check {
    held: [u8; 4],
    held_len: usize,
}

/// A sequence's length from its first byte, for bytes that can start one.
fn sequence_len(first: u8) -> usize {
    match first {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

impl Utf8Check {
    pub(super) fn feed(&mut self, chunk: &[u8]) -> Result<(), Unsupported> {
        let mut rest = chunk;
        if self.held_len > 0 {
            let want = sequence_len(self.held.first().copied().unwrap_or_default());
            let take = want.saturating_sub(self.held_len).min(rest.len());
            let (head, tail) = rest.split_at(take);
            let end = self.held_len + take;
            self.held.get_mut(self.held_len..end).ok_or(Unsupported)?.copy_from_slice(head);
            self.held_len = end;
            rest = tail;
            if self.held_len < want {
                // Still cut; what is held must at least be a valid start.
                return match std::str::from_utf8(self.held.get(..self.held_len).unwrap_or_default()) {
                    Err(e) if e.error_len().is_none() => Ok(()),
                    _ => Err(Unsupported),
                };
            }
            std::str::from_utf8(self.held.get(..want).unwrap_or_default()).map_err(|_| Unsupported)?;
            self.held_len = 0;
        }
        match std::str::from_utf8(rest) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                let cut = rest.get(e.valid_up_to()..).unwrap_or_default();
                self.held.get_mut(..cut.len()).ok_or(Unsupported)?.copy_from_slice(cut);
                self.held_len = cut.len();
                Ok(())
            }
            Err(_) => Err(Unsupported),
        }
    }

    /// The body ended: nothing may still be cut.
    pub(super) fn complete(&self) -> bool {
        self.held_len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(chunks: &[&[u8]]) -> bool {
        let mut utf8 = Utf8Check::default();
        chunks.iter().all(|c| utf8.feed(c).is_ok()) && utf8.complete()
    }

    #[test]
    fn characters_cut_anywhere_are_joined() {
        let text = "añ€😀z".as_bytes();
        for cut in 0..=text.len() {
            for cut2 in cut..=text.len() {
                assert!(check(&[&text[..cut], &text[cut..cut2], &text[cut2..]]), "{cut} {cut2}");
            }
        }
    }

    #[test]
    fn bad_and_unfinished_bytes_are_refused() {
        assert!(!check(&[b"a\xff"]));
        assert!(!check(&[b"\xe2\x82"]));
        assert!(!check(&[b"\xe2", b"\x28\xa1"]));
        assert!(!check(&[b"\xed\xa0", b"\x80"])); // an encoded surrogate
        assert!(!check(&[b"\xf0", b"\x9f", b"\x98"]));
    }
}
