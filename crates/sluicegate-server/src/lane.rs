//! The gateway's lean upstream lane: a hand-written HTTP/1.1 client connection for the
//! common request — `http://` upstream, no request body, no upgrade — kept on the worker's
//! pool ([`crate::upstream`]). Everything else (request bodies, upgrades, `https://`)
//! still goes through hyper's client, which handles writing a body while the response comes
//! back and handing an upgraded connection to the tunnel.
//!
//! Why: hyper's client drives each connection from a task of its own, with a channel
//! between the request and that task; a proxied `GET` paid ~6,000 user-space instructions
//! for it (callgrind, docs/benchmarks/server.md). Here the request's own future writes the
//! head with one `write`, reads the response head into the connection's buffer, parses it
//! with `httparse`, and, for the usual small response whose body is already in the buffer,
//! gives the connection back before the body is passed on.
//!
//! The upstream is trusted less than we are: the head is bounded ([`MAX_HEAD`] bytes,
//! [`MAX_HEADERS`] fields), framing is checked (RFC 9112 §6: `Transfer-Encoding` other than a
//! lone `chunked`, both it and `Content-Length`, or differing lengths are a 502), and a
//! connection is reused only after a response framed by length or chunks, read to its exact
//! end, on HTTP/1.1 without `Connection: close`.

mod body;
mod chunked;
mod head;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http::request::Parts;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

pub use body::LaneBody;
pub use chunked::{Chunked, Decoded};
pub use head::{Framing, Parsed as ParsedHead, Response as ResponseHead};
pub use head::{decode as decode_head, frame as frame_head, parse as parse_head};

/// The head hyper's client path writes for `parts` (the lean front's tests compare theirs).
#[cfg(test)]
pub(crate) use head::write_request as write_request_for_test;

/// The largest response head the lane reads (status line and fields), like hyper's bound.
pub const MAX_HEAD: usize = 64 * 1024;

/// The most header fields a response head may carry (hyper's default too).
pub const MAX_HEADERS: usize = 100;

/// Why the lane got no usable response head, or a body broke off.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// Reading or writing the connection failed.
    #[error("upstream connection: {0}")]
    Io(#[from] io::Error),
    /// The upstream closed the connection before a whole response head (`received`: some
    /// of it had come).
    #[error("the upstream closed the connection before its response head")]
    Closed {
        /// Whether any byte of a response had arrived.
        received: bool,
    },
    /// The response head or its framing is not HTTP/1.1 we accept.
    #[error("malformed upstream response: {0}")]
    Malformed(&'static str),
    /// The body ended before its framing said it would.
    #[error("the upstream closed the connection in the middle of a response body")]
    Truncated,
    /// No response head by the request's deadline (`gateway.upstream_timeout`).
    #[error("no response head in time")]
    TimedOut,
}

impl LaneError {
    /// Whether the upstream certainly sent nothing back: on a kept-alive connection, the
    /// sign that it had closed it before the request arrived.
    pub fn nothing_received(&self) -> bool {
        match self {
            LaneError::Closed { received } => !received,
            LaneError::Io(e) => matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionAborted
            ),
            _ => false,
        }
    }
}

/// A request the lane sends: `http` parts written as a head here, or a head already
/// written as bytes (the gateway's lean front writes it from the client's field lines).
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// Parts to write (a request without a body).
    Parts(&'a Parts),
    /// A whole request head of a `GET` (no body).
    Get(&'a [u8]),
}

impl Request<'_> {
    /// Whether sending it twice is harmless (a retry after a closed kept-alive connection).
    pub fn is_idempotent(&self) -> bool {
        match self {
            Request::Parts(parts) => parts.method.is_idempotent(),
            Request::Get(_) => true,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Request::Parts(parts) => head::write_request(out, parts),
            Request::Get(head) => out.extend_from_slice(head),
        }
    }

    /// Whether it is a `HEAD` (its answer has no body, whatever its fields say).
    pub fn is_head(&self) -> bool {
        matches!(self, Request::Parts(parts) if parts.method == http::Method::HEAD)
    }
}

/// One upstream connection: the socket, what has been read from it and not yet used, and
/// the buffer the request head is written into (both kept, so a kept-alive connection
/// allocates nothing per request).
pub struct Conn {
    stream: TcpStream,
    read: BytesMut,
    write: Vec<u8>,
    /// Scratch for the header fields' offsets while a head is parsed.
    offsets: Vec<[usize; 4]>,
    /// Whether the current response leaves the connection fit for another request (once
    /// its body has been read to its end).
    keep_alive: bool,
    /// The response-head deadline, one timer for the connection's life (made by its first
    /// request): moved later for each request, which Tokio does with one atomic update
    /// while the timer is still registered, where a `timeout` per request added and
    /// removed a timer-wheel entry (callgrind: ~1,000 instructions a request).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Conn {
    /// A new connection over `stream` (already connected).
    pub fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            read: BytesMut::with_capacity(8 * 1024),
            write: Vec::with_capacity(1024),
            offsets: Vec::new(),
            keep_alive: true,
            timer: None,
        }
    }

    /// Whether the last response left the connection fit for another request: read to its
    /// exact end (nothing after it in the buffer) and kept alive.
    pub fn reusable(&self) -> bool {
        self.keep_alive && self.read.is_empty()
    }

    /// Whether an idle connection can carry a request: the upstream has neither closed it
    /// nor sent anything unasked. Costs no system call unless the socket has become
    /// readable (Tokio's readiness), which an idle one should not be.
    pub fn still_open(&self) -> bool {
        if !self.read.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        match self.stream.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                let mut byte = [0u8; 1];
                matches!(self.stream.try_read(&mut byte),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Sends the head of a request without a body and reads the final response head by
    /// `deadline` (interim 1xx answers skipped): its bytes, taken off the buffer, and what
    /// `parse` found (its fields' offsets in [`Conn::offsets`]); its body is read from this
    /// connection, once [`Conn::decode`] or [`Conn::frame`] has judged the head. Past the
    /// deadline, [`LaneError::TimedOut`] (and the caller drops the connection: an answer
    /// may still come on it).
    pub async fn exchange(
        &mut self,
        request: Request<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<(Bytes, head::Parsed), LaneError> {
        let mut timer = match self.timer.take() {
            Some(mut timer) => {
                timer.as_mut().reset(deadline);
                timer
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        };
        let answer = tokio::select! {
            biased;
            answer = self.exchange_untimed(request) => answer,
            () = &mut timer => Err(LaneError::TimedOut),
        };
        self.timer = Some(timer);
        answer
    }

    /// [`Conn::exchange`] without its deadline.
    async fn exchange_untimed(
        &mut self,
        request: Request<'_>,
    ) -> Result<(Bytes, head::Parsed), LaneError> {
        self.write.clear();
        self.keep_alive = true;
        request.write(&mut self.write);
        self.stream.write_all(&self.write).await?;
        loop {
            let parsed = self.read_head().await?;
            if parsed.status() == 101 {
                // Never asked for on this lane (upgrades go through hyper's client).
                return Err(LaneError::Malformed("an upgrade that was not asked for"));
            }
            let head = self.read.split_to(parsed.len()).freeze();
            // An interim 1xx answer (100 Continue, 103 Early Hints): the real one follows.
            if !(100..200).contains(&parsed.status()) {
                return Ok((head, parsed));
            }
        }
    }

    /// The response head `exchange` read, decoded into `http` parts, and its framing; the
    /// connection is not reused after it if the response says so.
    pub fn decode(
        &mut self,
        head: Bytes,
        parsed: &head::Parsed,
        head_request: bool,
    ) -> Result<(http::response::Parts, Framing), LaneError> {
        let response = head::decode(head, parsed, &self.offsets, head_request)?.ok_or(
            LaneError::Malformed("an interim answer where a final one was due"),
        )?;
        self.keep_alive &= response.keep_alive;
        Ok((response.parts, response.framing))
    }

    /// [`Conn::decode`] without building the parts: the status and the framing, the
    /// fields left where they are in `head` (at [`Conn::offsets`]), for a caller that
    /// writes them on as bytes. The same checks, the same framing.
    pub fn frame(
        &mut self,
        head: &[u8],
        parsed: &head::Parsed,
        head_request: bool,
    ) -> Result<(http::StatusCode, Framing), LaneError> {
        let (status, framing, keep_alive) = head::frame(head, parsed, &self.offsets, head_request)?;
        self.keep_alive &= keep_alive;
        Ok((status, framing))
    }

    /// Where the fields of the last head `exchange` read are: name start, end, value
    /// start, end.
    pub fn offsets(&self) -> &[[usize; 4]] {
        &self.offsets
    }

    /// Reads until the buffer starts with a whole response head; returns it parsed.
    async fn read_head(&mut self) -> Result<head::Parsed, LaneError> {
        loop {
            // Only the first MAX_HEAD bytes may hold the head, however much one read brought.
            let window = &self.read[..self.read.len().min(MAX_HEAD)];
            if !window.is_empty()
                && let Some(parsed) = head::parse(window, &mut self.offsets)?
            {
                return Ok(parsed);
            }
            if self.read.len() >= MAX_HEAD {
                return Err(LaneError::Malformed("response head too large"));
            }
            self.reserve();
            if self.stream.read_buf(&mut self.read).await? == 0 {
                return Err(LaneError::Closed {
                    received: !self.read.is_empty(),
                });
            }
        }
    }

    /// Room for the next read.
    fn reserve(&mut self) {
        if self.read.capacity() - self.read.len() < 2048 {
            self.read.reserve(16 * 1024);
        }
    }

    /// Reads more into the buffer from a body's `poll_frame`: the number of bytes read
    /// (0: the upstream closed the connection).
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.reserve();
        loop {
            match self.stream.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
            match self.stream.try_read_buf(&mut self.read) {
                // Spurious readiness: try_read cleared it; wait again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                read => return Poll::Ready(read),
            }
        }
    }
}

/// Connects to `authority` (port 80 when it names none), within `timeout`.
pub async fn connect(
    authority: &http::uri::Authority,
    timeout: std::time::Duration,
) -> io::Result<Conn> {
    let port = authority.port_u16().unwrap_or(80);
    let host = authority.host();
    let connecting = TcpStream::connect((host.trim_matches(['[', ']']), port));
    let stream = tokio::time::timeout(timeout, connecting)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    Ok(Conn::new(stream))
}
