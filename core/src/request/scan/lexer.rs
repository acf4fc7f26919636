//! A push JSON lexer: the body goes in as chunks, cut anywhere. It checks the grammar
//! serde_json accepts (RFC 8259: no comments, no trailing commas, no leading zeros, no
//! control characters in strings). It tells a [`Listener`] where values and keys begin
//! and end. Nesting lives on a heap stack, so a deep body costs memory, never the call
//! stack.
//!
//! It leaves UTF-8 to its caller: bytes above 0x7F are legal only inside strings, and
//! there they are text.

use super::Unsupported;

/// What the lexer reports. Offsets are indices into the chunk being fed.
pub(super) trait Listener {
    /// A value begins at `chunk[at]` with byte `first`, inside `level` containers.
    /// For a string, the answer says whether to decode its text into [`Listener::text`].
    fn value_start(&mut self, level: usize, first: u8, at: usize) -> Result<bool, Unsupported>;
    /// The value that began at `level` ends just before `chunk[end]`.
    fn value_end(&mut self, level: usize, chunk: &[u8], end: usize) -> Result<(), Unsupported>;
    /// An object key at `level`, escapes decoded (its first bytes only), with whether
    /// it held an escape.
    fn key(&mut self, level: usize, name: &[u8], escaped: bool) -> Result<(), Unsupported>;
    /// Decoded text of the string being decoded, in pieces.
    fn text(&mut self, piece: &[u8]);
    /// The chunk is used up; anything kept from it must be copied now.
    fn chunk_end(&mut self, chunk: &[u8]) -> Result<(), Unsupported>;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum StringRole {
    Key,
    Skipped,
    Decoded,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Escape {
    None,
    Backslash,
    /// `\u` and `digits` hex digits so far; `high` is a decoded leading surrogate
    /// waiting for its trailing half.
    Hex {
        digits: u8,
        value: u32,
        high: Option<u32>,
    },
    /// After a leading surrogate: its trailing half must follow as `\u`.
    TrailBackslash {
        high: u32,
    },
    TrailU {
        high: u32,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Number {
    Minus,
    Zero,
    Integer,
    Dot,
    Fraction,
    Exponent,
    ExponentSign,
    ExponentDigits,
}

impl Number {
    fn complete(self) -> bool {
        matches!(self, Number::Zero | Number::Integer | Number::Fraction | Number::ExponentDigits)
    }

    /// The next state on `byte`, or `None` if `byte` is not part of the number.
    fn next(self, byte: u8) -> Option<Number> {
        let digit = byte.is_ascii_digit();
        match (self, byte) {
            (Number::Minus, b'0') => Some(Number::Zero),
            (Number::Minus | Number::Integer, _) if digit => Some(Number::Integer),
            (Number::Zero | Number::Integer, b'.') => Some(Number::Dot),
            (Number::Dot | Number::Fraction, _) if digit => Some(Number::Fraction),
            (Number::Zero | Number::Integer | Number::Fraction, b'e' | b'E') => Some(Number::Exponent),
            (Number::Exponent, b'+' | b'-') => Some(Number::ExponentSign),
            (Number::Exponent | Number::ExponentSign | Number::ExponentDigits, _) if digit => {
                Some(Number::ExponentDigits)
            }
            _ => None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Value,
    ValueOrArrayEnd,
    KeyOrObjectEnd,
    Key,
    Colon,
    AfterValue,
    String { role: StringRole, escape: Escape },
    Number(Number),
    Literal { rest: &'static [u8] },
    Done,
}

/// Longest key kept for matching; every key the scanner looks for is shorter.
const KEY_BYTES: usize = 32;

pub(super) struct Lexer {
    state: State,
    /// Open containers, `{` or `[`.
    stack: Vec<u8>,
    key: Vec<u8>,
    key_escaped: bool,
}

fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\n' | b'\r' | b'\t')
}

fn ends_plain_run(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

/// How many bytes of `bytes` are plain string text, eight at a time while none of the
/// eight can end the run (prompts are long runs of plain text).
fn plain_len(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A byte of `x` is zero (or below `n`) if the word-wise subtraction borrows into
    // its high bit while the byte itself had that bit clear.
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS;
    let mut plain = 0;
    for word in bytes.chunks_exact(8) {
        let x = u64::from_le_bytes(word.try_into().unwrap_or_default());
        if below(x ^ (ONES * u64::from(b'"')), 1) | below(x ^ (ONES * u64::from(b'\\')), 1) | below(x, 0x20) != 0 {
            break;
        }
        plain += 8;
    }
    let rest = bytes.get(plain..).unwrap_or_default();
    plain + rest.iter().position(|&b| ends_plain_run(b)).unwrap_or(rest.len())
}

fn hex_value(byte: u8) -> Option<u32> {
    char::from(byte).to_digit(16)
}

impl Lexer {
    pub(super) fn new() -> Self {
        Self { state: State::Value, stack: Vec::new(), key: Vec::with_capacity(KEY_BYTES), key_escaped: false }
    }

    /// The body ended: true if it was one complete value.
    pub(super) fn complete(&self) -> bool {
        self.state == State::Done
    }

    pub(super) fn feed<L: Listener>(&mut self, chunk: &[u8], listener: &mut L) -> Result<(), Unsupported> {
        let mut at = 0;
        while let Some(&byte) = chunk.get(at) {
            at = match self.state {
                State::String { role, escape: Escape::None } => self.string_run(role, chunk, at, listener)?,
                State::String { role, escape } => {
                    self.escape(role, escape, byte, listener)?;
                    at + 1
                }
                State::Number(number) => match number.next(byte) {
                    Some(next) => {
                        self.state = State::Number(next);
                        at + 1
                    }
                    None if number.complete() => {
                        self.end_value(chunk, at, listener)?;
                        at // the byte after a number is the next token's
                    }
                    None => return Err(Unsupported),
                },
                State::Literal { rest } => {
                    let (&expected, rest) = rest.split_first().ok_or(Unsupported)?;
                    if byte != expected {
                        return Err(Unsupported);
                    }
                    self.state = State::Literal { rest };
                    if rest.is_empty() {
                        self.end_value(chunk, at + 1, listener)?;
                    }
                    at + 1
                }
                _ if is_space(byte) => at + 1,
                _ => {
                    self.token(byte, chunk, at, listener)?;
                    at + 1
                }
            };
        }
        listener.chunk_end(chunk)
    }

    /// A structural byte, outside strings, numbers and literals.
    fn token<L: Listener>(&mut self, byte: u8, chunk: &[u8], at: usize, listener: &mut L) -> Result<(), Unsupported> {
        match (self.state, byte) {
            (State::ValueOrArrayEnd, b']') | (State::KeyOrObjectEnd, b'}') => self.close(byte, chunk, at, listener),
            (State::Value | State::ValueOrArrayEnd, _) => self.begin_value(byte, at, listener),
            (State::KeyOrObjectEnd | State::Key, b'"') => {
                self.key.clear();
                self.key_escaped = false;
                self.state = State::String { role: StringRole::Key, escape: Escape::None };
                Ok(())
            }
            (State::Colon, b':') => {
                self.state = State::Value;
                Ok(())
            }
            (State::AfterValue, b',') => {
                self.state = if self.stack.last() == Some(&b'{') { State::Key } else { State::Value };
                Ok(())
            }
            (State::AfterValue, b'}' | b']') => self.close(byte, chunk, at, listener),
            _ => Err(Unsupported),
        }
    }

    fn begin_value<L: Listener>(&mut self, byte: u8, at: usize, listener: &mut L) -> Result<(), Unsupported> {
        let level = self.stack.len();
        self.state = match byte {
            b'{' | b'[' => {
                listener.value_start(level, byte, at)?;
                self.stack.push(byte);
                if byte == b'{' { State::KeyOrObjectEnd } else { State::ValueOrArrayEnd }
            }
            b'"' => {
                let decoded = listener.value_start(level, byte, at)?;
                let role = if decoded { StringRole::Decoded } else { StringRole::Skipped };
                State::String { role, escape: Escape::None }
            }
            b'-' | b'0'..=b'9' => {
                listener.value_start(level, byte, at)?;
                State::Number(match byte {
                    b'-' => Number::Minus,
                    b'0' => Number::Zero,
                    _ => Number::Integer,
                })
            }
            b't' | b'f' | b'n' => {
                listener.value_start(level, byte, at)?;
                let rest: &'static [u8] = match byte {
                    b't' => b"rue",
                    b'f' => b"alse",
                    _ => b"ull",
                };
                State::Literal { rest }
            }
            _ => return Err(Unsupported),
        };
        Ok(())
    }

    fn close<L: Listener>(&mut self, byte: u8, chunk: &[u8], at: usize, listener: &mut L) -> Result<(), Unsupported> {
        let opener = if byte == b'}' { b'{' } else { b'[' };
        if self.stack.pop() != Some(opener) {
            return Err(Unsupported);
        }
        self.end_value(chunk, at + 1, listener)
    }

    fn end_value<L: Listener>(&mut self, chunk: &[u8], end: usize, listener: &mut L) -> Result<(), Unsupported> {
        self.state = if self.stack.is_empty() { State::Done } else { State::AfterValue };
        listener.value_end(self.stack.len(), chunk, end)
    }

    /// Plain string bytes up to the next quote, backslash or control byte; returns
    /// where to continue.
    fn string_run<L: Listener>(
        &mut self,
        role: StringRole,
        chunk: &[u8],
        at: usize,
        listener: &mut L,
    ) -> Result<usize, Unsupported> {
        let rest = chunk.get(at..).unwrap_or_default();
        let run = plain_len(rest);
        let plain = rest.get(..run).unwrap_or_default();
        match role {
            StringRole::Decoded => listener.text(plain),
            StringRole::Key => self.push_key(plain),
            StringRole::Skipped => {}
        }
        match rest.get(run) {
            None => {}
            Some(b'"') if role == StringRole::Key => {
                self.state = State::Colon;
                listener.key(self.stack.len(), &self.key, self.key_escaped)?;
            }
            Some(b'"') => self.end_value(chunk, at + run + 1, listener)?,
            Some(b'\\') => {
                self.key_escaped |= role == StringRole::Key;
                self.state = State::String { role, escape: Escape::Backslash };
            }
            Some(_) => return Err(Unsupported),
        }
        Ok(at + run + rest.get(run).map_or(0, |_| 1))
    }

    fn escape<L: Listener>(
        &mut self,
        role: StringRole,
        escape: Escape,
        byte: u8,
        listener: &mut L,
    ) -> Result<(), Unsupported> {
        let next = match escape {
            Escape::Backslash => {
                let simple = match byte {
                    b'"' | b'\\' | b'/' => byte,
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'u' => return self.set_escape(role, Escape::Hex { digits: 0, value: 0, high: None }),
                    _ => return Err(Unsupported),
                };
                match role {
                    StringRole::Decoded => listener.text(&[simple]),
                    StringRole::Key => self.push_key(&[simple]),
                    StringRole::Skipped => {}
                }
                Escape::None
            }
            Escape::Hex { digits, value, high } => {
                let value = value * 16 + hex_value(byte).ok_or(Unsupported)?;
                if digits < 3 {
                    Escape::Hex { digits: digits + 1, value, high }
                } else {
                    match role {
                        StringRole::Skipped => Escape::None,
                        StringRole::Decoded => match decode_code_unit(value, high)? {
                            Decoded::Char(character) => {
                                listener.text(character.encode_utf8(&mut [0; 4]).as_bytes());
                                Escape::None
                            }
                            Decoded::HighSurrogate(escape) => escape,
                        },
                        // Keys are checked as skipped strings are (serde_json does not
                        // check a skipped key's surrogates); only a plain character is
                        // kept, which is all a known key can hold.
                        StringRole::Key => {
                            if let Ok(Decoded::Char(character)) = decode_code_unit(value, None) {
                                self.push_key(character.encode_utf8(&mut [0; 4]).as_bytes());
                            }
                            Escape::None
                        }
                    }
                }
            }
            Escape::TrailBackslash { high } if byte == b'\\' => Escape::TrailU { high },
            Escape::TrailU { high } if byte == b'u' => Escape::Hex { digits: 0, value: 0, high: Some(high) },
            // A leading surrogate without its trailing half: serde_json refuses the string.
            Escape::TrailBackslash { .. } | Escape::TrailU { .. } | Escape::None => return Err(Unsupported),
        };
        self.set_escape(role, next)
    }

    /// A key's decoded bytes, kept up to [`KEY_BYTES`].
    fn push_key(&mut self, bytes: &[u8]) {
        let room = KEY_BYTES.saturating_sub(self.key.len());
        self.key.extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
    }

    fn set_escape(&mut self, role: StringRole, escape: Escape) -> Result<(), Unsupported> {
        self.state = State::String { role, escape };
        Ok(())
    }
}

/// What a `\uXXXX` code unit of a decoded string or key is.
enum Decoded {
    Char(char),
    /// The first half of a surrogate pair: the escape that must follow.
    HighSurrogate(Escape),
}

/// A `\uXXXX` code unit: a character, or the first half of a surrogate pair. Lone
/// halves are refused, as serde_json refuses them in a string.
fn decode_code_unit(unit: u32, high: Option<u32>) -> Result<Decoded, Unsupported> {
    let scalar = match (high, unit) {
        (None, 0xD800..=0xDBFF) => return Ok(Decoded::HighSurrogate(Escape::TrailBackslash { high: unit })),
        (None, 0xDC00..=0xDFFF) => return Err(Unsupported),
        (None, _) => unit,
        (Some(high), 0xDC00..=0xDFFF) => 0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00),
        (Some(_), _) => return Err(Unsupported),
    };
    char::from_u32(scalar).map(Decoded::Char).ok_or(Unsupported)
}
