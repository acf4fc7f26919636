//! Text of which only the start is kept: prefix hashing reads at most
//! `block_chars × max_blocks` bytes, and the token estimate needs only the length.

pub(super) struct CappedText {
    kept: Vec<u8>,
    len: usize,
    cap: usize,
}

impl CappedText {
    pub(super) fn new(cap: usize) -> Self {
        Self { kept: Vec::new(), len: 0, cap }
    }

    pub(super) fn append(&mut self, bytes: &[u8]) {
        self.len = self.len.saturating_add(bytes.len());
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
    }

    /// Appends another capped text (whose kept bytes are its start).
    pub(super) fn append_text(&mut self, other: &CappedText) {
        let room = self.cap.saturating_sub(self.kept.len());
        let kept = other.kept.get(..room.min(other.kept.len())).unwrap_or_default();
        self.kept.extend_from_slice(kept);
        self.len = self.len.saturating_add(other.len);
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn cap(&self) -> usize {
        self.cap
    }

    pub(super) fn kept(&self) -> &[u8] {
        &self.kept
    }
}
