//! What the scanner keeps while the lexer walks a body: the raw JSON of the small
//! fields (`model`, `stream`, the token limits, each message's `role`), and the prompt
//! as the engine will see it, rendered as it streams straight into its prefix hashing
//! (`prefix::PromptHasher`): the text itself is not kept.
//!
//! It follows the shapes OpenAI clients send: a top-level object whose messages are
//! objects, with `content` before `tool_calls` (the role may come anywhere: a message's
//! rendering waits, within the cap, until its role is known). Any other shape, a
//! duplicate field or an escaped key is [`Unsupported`]: the caller then parses the
//! whole body with serde, which reads every shape and words every error.

use std::borrow::Cow;

use super::Unsupported;
use super::lexer::Listener;
use crate::api_error::ApiError;
use crate::config::PrefixSettings;
use crate::prefix::PromptHasher;
use crate::request::model_field::ModelField;
use crate::request::prompt::{TOOLS_TAG, push_content, push_role_tag};
use crate::request::{InferenceRequest, into_request, typed_fields};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum TopField {
    Model,
    Stream,
    Messages,
    Tools,
    Prompt,
    MaxTokens,
    MaxCompletionTokens,
    Other,
}

impl TopField {
    fn from_key(name: &[u8]) -> Self {
        match name {
            b"model" => TopField::Model,
            b"stream" => TopField::Stream,
            b"messages" => TopField::Messages,
            b"tools" => TopField::Tools,
            b"prompt" => TopField::Prompt,
            b"max_tokens" => TopField::MaxTokens,
            b"max_completion_tokens" => TopField::MaxCompletionTokens,
            _ => TopField::Other,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum MessageField {
    Role,
    Content,
    ToolCalls,
    Other,
}

impl MessageField {
    /// Its place in [`Message::seen`]; other fields are not tracked.
    fn slot(self) -> Option<usize> {
        match self {
            MessageField::Role => Some(0),
            MessageField::Content => Some(1),
            MessageField::ToolCalls => Some(2),
            MessageField::Other => None,
        }
    }

    fn from_key(name: &[u8]) -> Self {
        match name {
            b"role" => MessageField::Role,
            b"content" => MessageField::Content,
            b"tool_calls" => MessageField::ToolCalls,
            _ => MessageField::Other,
        }
    }
}

/// Where a value's raw JSON goes while it is captured.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sink {
    /// `model`, `stream` or a token limit, decoded with serde once the body is in.
    Small(TopField),
    Role,
    /// A message's content or the prompt that is not a plain string (a list of
    /// parts, or a number): rendered by the same code as the whole-body parser.
    Content,
    Prompt,
    /// Copied as written, like the whole-body parser's raw values.
    Tools,
    ToolCalls,
}

impl Sink {
    /// The most raw JSON a capture may hold before the scanner gives up on the body.
    fn limit(self) -> usize {
        match self {
            Sink::Small(_) | Sink::Role => 4096,
            Sink::Content | Sink::Prompt => 256 * 1024,
            Sink::Tools | Sink::ToolCalls => usize::MAX,
        }
    }
}

struct Capture {
    level: usize,
    /// Where the value starts in the current chunk (0 once it spans chunks).
    from: usize,
    sink: Sink,
}

/// The most text of a message held while its role is unknown (its content came
/// first); past it the scanner gives up and the whole body is parsed.
const MAX_UNTAGGED_BYTES: usize = 1 << 20;

/// A message being read.
#[derive(Default)]
struct Message {
    seen: [bool; 3],
    key: Option<MessageField>,
    /// Its rendering before its role tag is written (the role came later).
    untagged: Option<Vec<u8>>,
    tagged: bool,
}

impl Message {
    /// Notes `field`; a second one is a duplicate, which serde refuses.
    fn mark(&mut self, field: MessageField) -> Result<(), Unsupported> {
        let duplicate =
            field.slot().and_then(|slot| self.seen.get_mut(slot)).is_some_and(|seen| std::mem::replace(seen, true));
        if duplicate { Err(Unsupported) } else { Ok(()) }
    }

    fn has(&self, field: MessageField) -> bool {
        field.slot().and_then(|slot| self.seen.get(slot)).copied().unwrap_or(false)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TextSink {
    Messages,
    Prompt,
}

pub(super) struct Extract {
    top_key: TopField,
    top_seen: Vec<TopField>,
    model: Option<Vec<u8>>,
    stream: Option<Vec<u8>>,
    max_tokens: Option<Vec<u8>>,
    max_completion_tokens: Option<Vec<u8>>,
    in_messages: bool,
    message: Option<Message>,
    capture: Option<Capture>,
    raw: Vec<u8>,
    text_sink: Option<TextSink>,
    hasher: PromptHasher,
    /// Prompt bytes hashing reads at most (`block_chars × max_blocks`).
    cap: u64,
    /// A message's held text grew past [`MAX_UNTAGGED_BYTES`].
    overflowed: bool,
}

impl Extract {
    pub(super) fn new(prefix: &PrefixSettings) -> Self {
        Self {
            top_key: TopField::Other,
            top_seen: Vec::new(),
            model: None,
            stream: None,
            max_tokens: None,
            max_completion_tokens: None,
            in_messages: false,
            message: None,
            capture: None,
            raw: Vec::new(),
            text_sink: None,
            hasher: PromptHasher::new(prefix),
            cap: u64::try_from(prefix.hashed_bytes()).unwrap_or(u64::MAX),
            overflowed: false,
        }
    }

    /// The body is complete: decodes the small fields as serde would have in the
    /// whole-body parse, and joins the prompt's parts in the engine's order.
    pub(super) fn complete_request(&self) -> Result<Result<InferenceRequest, ApiError>, Unsupported> {
        self.request(0)
    }

    /// The request as routing needs it before the body ends: once `model` is read and
    /// the prompt holds every byte hashing reads. `body_len`, the body's declared
    /// length, stands in for the prompt's. `None` until then, or if a field read so
    /// far does not decode (the whole-body read decides).
    pub(super) fn early(&self, body_len: usize) -> Option<Result<InferenceRequest, ApiError>> {
        if self.model.is_none() || self.hasher.len() < self.cap {
            return None;
        }
        self.request(body_len).ok()
    }

    /// Whether a message's held text overflowed: the body is then parsed whole.
    pub(super) fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Decodes the small fields as serde would have in the whole-body parse, and joins
    /// the prompt's keys in the engine's order; the prompt is at least `min_len` long.
    fn request(&self, min_len: usize) -> Result<Result<InferenceRequest, ApiError>, Unsupported> {
        fn decode<'a, T: serde::Deserialize<'a>>(raw: Option<&'a [u8]>) -> Result<Option<T>, Unsupported> {
            raw.map(|raw| serde_json::from_slice::<Option<T>>(raw).map_err(|_| Unsupported))
                .transpose()
                .map(Option::flatten)
        }
        let model = match self.model.as_deref() {
            None => ModelField::Missing,
            Some(raw) => serde_json::from_slice(raw).map_err(|_| Unsupported)?,
        };
        let stream: Option<bool> = decode(self.stream.as_deref())?;
        let max_tokens: Option<u32> = decode(self.max_tokens.as_deref())?;
        let max_completion_tokens: Option<u32> = decode(self.max_completion_tokens.as_deref())?;
        let prompt_len = usize::try_from(self.hasher.len()).unwrap_or(usize::MAX);
        let prompt = self.hasher.hashes();
        Ok(into_request(model, stream, prompt, prompt_len.max(min_len), max_completion_tokens.or(max_tokens)))
    }

    /// The refusal for a small field whose value does not decode (`stream` not a
    /// boolean, a negative token limit), worded as the whole-body parse words it.
    pub(super) fn field_error(&self) -> Option<ApiError> {
        typed_fields::boolean("stream", self.stream.as_deref())
            .and(typed_fields::token_count("max_completion_tokens", self.max_completion_tokens.as_deref()))
            .and(typed_fields::token_count("max_tokens", self.max_tokens.as_deref()))
            .err()
    }

    fn begin_capture(&mut self, level: usize, at: usize, sink: Sink) {
        self.raw.clear();
        self.capture = Some(Capture { level, from: at, sink });
    }

    fn write(&mut self, sink: Sink, bytes: &[u8]) -> Result<(), Unsupported> {
        match sink {
            Sink::Tools => self.hasher.tools.feed(bytes),
            Sink::ToolCalls => self.message_text(bytes)?,
            _ if self.raw.len().saturating_add(bytes.len()) > sink.limit() => return Err(Unsupported),
            _ => self.raw.extend_from_slice(bytes),
        }
        Ok(())
    }

    /// A captured value is complete in `self.raw` (or already in its text).
    fn captured(&mut self, sink: Sink) -> Result<(), Unsupported> {
        let raw = std::mem::take(&mut self.raw);
        match sink {
            Sink::Small(field) => {
                let slot = match field {
                    TopField::Model => &mut self.model,
                    TopField::Stream => &mut self.stream,
                    TopField::MaxTokens => &mut self.max_tokens,
                    TopField::MaxCompletionTokens => &mut self.max_completion_tokens,
                    _ => return Err(Unsupported),
                };
                *slot = Some(raw);
            }
            Sink::Role => {
                let role: Option<Cow<'_, str>> = serde_json::from_slice(&raw).map_err(|_| Unsupported)?;
                self.tag_message(role.as_deref());
            }
            Sink::Content | Sink::Prompt => {
                let text = std::str::from_utf8(&raw).map_err(|_| Unsupported)?;
                let mut rendered = Vec::new();
                push_content(&mut rendered, text);
                if sink == Sink::Content {
                    self.message_text(&rendered)?;
                } else {
                    self.hasher.prompt.feed(&rendered);
                }
            }
            Sink::Tools | Sink::ToolCalls => {}
        }
        Ok(())
    }

    /// A message's content and tool calls: hashed after its role tag, or, while the
    /// role is unknown, held in the message's own buffer.
    fn message_text(&mut self, bytes: &[u8]) -> Result<(), Unsupported> {
        match self.message.as_mut() {
            Some(message) if !message.tagged => {
                let held = message.untagged.get_or_insert_with(Vec::new);
                if held.len().saturating_add(bytes.len()) > MAX_UNTAGGED_BYTES {
                    self.overflowed = true;
                    return Err(Unsupported);
                }
                held.extend_from_slice(bytes);
            }
            _ => self.hasher.messages.feed(bytes),
        }
        Ok(())
    }

    /// The role is known (or the message ended without one): its tag, then what was
    /// held for it.
    fn tag_message(&mut self, role: Option<&str>) {
        let Some(message) = self.message.as_mut().filter(|m| !m.tagged) else { return };
        message.tagged = true;
        let held = message.untagged.take();
        let mut tag = Vec::new();
        push_role_tag(&mut tag, role);
        self.hasher.messages.feed(&tag);
        if let Some(held) = held {
            self.hasher.messages.feed(&held);
        }
    }

    fn top_value_start(&mut self, first: u8, at: usize) -> Result<bool, Unsupported> {
        match self.top_key {
            field @ (TopField::Model | TopField::Stream | TopField::MaxTokens | TopField::MaxCompletionTokens) => {
                self.begin_capture(1, at, Sink::Small(field));
            }
            TopField::Messages => match first {
                b'[' => self.in_messages = true,
                b'n' => {}
                _ => return Err(Unsupported),
            },
            TopField::Tools if first != b'n' => {
                self.hasher.tools.feed(TOOLS_TAG);
                self.begin_capture(1, at, Sink::Tools);
            }
            TopField::Prompt => return Ok(self.content_start(first, at, 1, TextSink::Prompt, Sink::Prompt)),
            TopField::Tools | TopField::Other => {}
        }
        Ok(false)
    }

    /// Content as text: a string is decoded as it streams; null adds nothing; anything
    /// else is captured and rendered when complete.
    fn content_start(&mut self, first: u8, at: usize, level: usize, text: TextSink, sink: Sink) -> bool {
        match first {
            b'"' => {
                self.text_sink = Some(text);
                true
            }
            b'n' => false,
            _ => {
                self.begin_capture(level, at, sink);
                false
            }
        }
    }

    fn message_value_start(&mut self, first: u8, at: usize) -> Result<bool, Unsupported> {
        let Some(field) = self.message.as_ref().and_then(|m| m.key) else { return Ok(false) };
        match field {
            MessageField::Role => self.begin_capture(3, at, Sink::Role),
            // Rendered content comes before tool calls, whatever the body's order.
            MessageField::Content if self.message.as_ref().is_some_and(|m| m.has(MessageField::ToolCalls)) => {
                return Err(Unsupported);
            }
            MessageField::Content => {
                return Ok(self.content_start(first, at, 3, TextSink::Messages, Sink::Content));
            }
            MessageField::ToolCalls if first != b'n' => self.begin_capture(3, at, Sink::ToolCalls),
            MessageField::ToolCalls | MessageField::Other => {}
        }
        Ok(false)
    }
}

impl Listener for Extract {
    fn value_start(&mut self, level: usize, first: u8, at: usize) -> Result<bool, Unsupported> {
        if self.capture.is_some() {
            return Ok(false);
        }
        match level {
            0 if first == b'{' => Ok(false),
            0 => Err(Unsupported),
            1 => self.top_value_start(first, at),
            2 if self.in_messages => {
                if first != b'{' {
                    return Err(Unsupported);
                }
                self.message = Some(Message::default());
                Ok(false)
            }
            3 if self.message.is_some() => self.message_value_start(first, at),
            _ => Ok(false),
        }
    }

    fn value_end(&mut self, level: usize, chunk: &[u8], end: usize) -> Result<(), Unsupported> {
        if let Some(capture) = self.capture.take_if(|c| c.level == level) {
            self.write(capture.sink, chunk.get(capture.from..end).ok_or(Unsupported)?)?;
            self.captured(capture.sink)?;
        }
        if self.capture.is_some() {
            return Ok(());
        }
        match level {
            1 => {
                self.text_sink = None;
                self.in_messages = false;
            }
            2 if self.in_messages => {
                self.tag_message(None);
                self.message = None;
            }
            3 => self.text_sink = None,
            _ => {}
        }
        Ok(())
    }

    fn key(&mut self, level: usize, name: &[u8], escaped: bool) -> Result<(), Unsupported> {
        if self.capture.is_some() {
            return Ok(());
        }
        match level {
            1 => {
                if escaped {
                    return Err(Unsupported);
                }
                self.top_key = TopField::from_key(name);
                if self.top_key != TopField::Other {
                    if self.top_seen.contains(&self.top_key) {
                        return Err(Unsupported);
                    }
                    self.top_seen.push(self.top_key);
                }
            }
            3 => {
                if let Some(message) = self.message.as_mut() {
                    if escaped {
                        return Err(Unsupported);
                    }
                    let field = MessageField::from_key(name);
                    message.mark(field)?;
                    message.key = Some(field);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn text(&mut self, piece: &[u8]) {
        match self.text_sink {
            // An overflow gives up on the body at the next event the lexer checks.
            Some(TextSink::Messages) => _ = self.message_text(piece),
            Some(TextSink::Prompt) => self.hasher.prompt.feed(piece),
            None => {}
        }
    }

    fn chunk_end(&mut self, chunk: &[u8]) -> Result<(), Unsupported> {
        if let Some((sink, from)) = self.capture.as_mut().map(|c| (c.sink, std::mem::take(&mut c.from))) {
            self.write(sink, chunk.get(from..).ok_or(Unsupported)?)?;
        }
        Ok(())
    }
}
