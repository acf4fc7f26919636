//! What the host calls: a plugin's root callbacks and each stream's callbacks. The
//! roles implement these; `sdk` forwards the proxy-wasm SDK's callbacks to them, and
//! the fake host in tests calls them directly.

/// What a stream callback tells the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on to the next filter.
    Continue,
    /// Hold the stream: more body is needed, or a local reply was sent.
    Pause,
}

/// A configured plugin on one worker (its root context).
pub trait RootEvents {
    /// An enqueue woke a queue this root registered.
    fn on_queue_ready(&mut self, _queue: u32) {}
    /// The tick period elapsed.
    fn on_tick(&mut self) {}
    /// The plugin is being torn down (a changed config, a new module).
    fn on_done(&mut self) {}
    /// The answer to an HTTP call a root callback made (the SDK gives an answer to the
    /// context whose callback dispatched the call, whichever stream it had made
    /// effective): as [`StreamEvents::on_http_call_response`].
    fn on_http_call_response(&mut self, _token: u32, _num_headers: usize, _body_size: usize) {}
    /// A new stream on this plugin's filter chain; `context_id` names it to
    /// [`super::Host::set_effective_context`].
    fn new_stream(&self, context_id: u32) -> Box<dyn StreamEvents>;
}

/// One HTTP stream through the filter.
pub trait StreamEvents {
    fn on_request_headers(&mut self, _end_of_stream: bool) -> Flow {
        Flow::Continue
    }
    /// `body_size`: the bytes buffered so far.
    fn on_request_body(&mut self, _body_size: usize, _end_of_stream: bool) -> Flow {
        Flow::Continue
    }
    fn on_response_headers(&mut self, _end_of_stream: bool) -> Flow {
        Flow::Continue
    }
    /// `body_size`: the bytes of this chunk (or of the buffered body, once paused).
    fn on_response_body(&mut self, _body_size: usize, _end_of_stream: bool) -> Flow {
        Flow::Continue
    }
    /// The answer to an HTTP call this stream's callback made: `num_headers` 0 when the
    /// call failed (no answer to read), else its headers and `body_size` bytes of body
    /// are readable until the callback returns.
    fn on_http_call_response(&mut self, _token: u32, _num_headers: usize, _body_size: usize) {}
    /// The stream is over, however it ended.
    fn on_log(&mut self) {}
}

/// A stream the plugin has nothing to do with.
pub struct PassThrough;

impl StreamEvents for PassThrough {}
