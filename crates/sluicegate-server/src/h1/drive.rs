//! The connection loop: read, answer the plain requests the handler takes, write, and hand
//! the connection to hyper at the first request it does not take.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Buf, Bytes, BytesMut};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::head::{Head, MAX_FIELDS, Parsed, parse};
use super::rewind::Rewind;

/// The most body bytes buffered for one request, whatever the handler accepts.
const MAX_BODY: u64 = 1 << 20;

/// The most output held before it is written while a tail streams: the bound on what a
/// client that reads slowly costs in memory, beyond the socket's own buffers.
const TAIL_BUFFER: usize = 64 * 1024;

/// The first buffer of a connection: a head and a small body, read at once.
const BUFFER: usize = 8 * 1024;

/// What a listener answers on the lean path.
pub trait Handler: Clone + Send + Sync + 'static {
    /// The body of a [`Tail`]: a response body too large or too slow to write into the
    /// output buffer at once (the gateway's upstream body).
    type Body: Body<Data = Bytes> + Send + Unpin;

    /// Whether this handler answers the plain request of `head` (its body not read yet);
    /// `false` hands the connection, this request included, to hyper. It bounds the body:
    /// the driver buffers `head.content_length()` bytes before [`Handler::answer`] (never
    /// more than 1 MiB; beyond, the request is hyper's).
    fn accepts(&self, head: &Head<'_>) -> bool;

    /// Appends the response to `request` to `out`: the whole of it (status line, fields,
    /// body), or its head alone and the body as a [`Tail`] the driver streams after it.
    /// Dropped unfinished when the client closes the connection meanwhile (as hyper drops
    /// its service's future), so a wait inside it (a delay, a pool's queue) ends with it.
    fn answer<'a>(
        &'a self,
        request: Request<'a>,
        out: &'a mut Vec<u8>,
    ) -> impl Future<Output = Option<Tail<Self::Body>>> + Send + 'a;
}

/// A response body written after its head, frame by frame as `body` yields them, each
/// written before the next is asked for: a client that reads slowly slows the body's
/// source (backpressure) instead of filling memory, and one that stops reading is cut by
/// the connection's idle deadline (the request stays in progress until the tail is done).
/// A body that fails closes the connection, so the client sees a broken response, not a
/// complete one.
#[derive(Debug)]
pub struct Tail<B> {
    /// The data frames (trailers are not sent: only a request with `TE: trailers` asks for
    /// them, and no lean handler takes one).
    pub body: B,
    /// `true`: each frame is written as a chunk and a last chunk ends the body (the head
    /// said `transfer-encoding: chunked`); `false`: the frames are written as they are (the
    /// head gave their exact length).
    pub chunked: bool,
}

/// A request on the lean path: its head, its whole body, its peer.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The plain head.
    pub head: &'a Head<'a>,
    /// Exactly `Content-Length` bytes.
    pub body: &'a [u8],
    /// Who sent it.
    pub peer: SocketAddr,
}

/// The handler of a listener without a lean path (a type with no value).
#[derive(Debug, Clone, Copy)]
pub enum Never {}

impl Handler for Never {
    type Body = http_body_util::Empty<Bytes>;

    fn accepts(&self, _: &Head<'_>) -> bool {
        match *self {}
    }
    fn answer<'a>(
        &'a self,
        _: Request<'a>,
        _: &'a mut Vec<u8>,
    ) -> impl Future<Output = Option<Tail<Self::Body>>> + Send + 'a {
        let never: Never = *self;
        async move { match never {} }
    }
}

/// What to do after looking at the buffer.
enum Next<B> {
    /// A request was answered; look again.
    Answered,
    /// A request was answered with a body to stream after the pending output.
    Tail(Tail<B>),
    /// The client closed the connection while a request was answered.
    Gone,
    /// The request at the front is incomplete.
    Read,
    /// The request at the front is hyper's.
    Fallback,
}

/// Serves `io` from `peer`: plain requests `handler` takes are answered here, each reported
/// by `started` (its guard kept until the response is written); at the first other one the
/// connection goes to `fallback` with the bytes read so far. Between requests, once `stop`
/// resolves, the connection is closed (a request begun is answered first).
pub async fn drive<I, H, G, F, Fut>(
    io: I,
    handler: H,
    peer: SocketAddr,
    stop: impl Future<Output = ()>,
    started: impl Fn() -> G,
    fallback: F,
) where
    I: AsyncRead + AsyncWrite + Unpin,
    H: Handler,
    F: FnOnce(Rewind<I>) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut conn = Conn {
        io,
        buf: BytesMut::with_capacity(BUFFER),
        out: Vec::with_capacity(1024),
        spare: BytesMut::new(),
        guards: Vec::new(),
        current: None,
    };
    tokio::pin!(stop);
    loop {
        match conn.answer_next(&handler, peer, &started).await {
            Next::Answered => continue,
            Next::Tail(tail) => {
                if !conn.stream(tail).await {
                    return;
                }
                continue;
            }
            Next::Gone => return,
            Next::Read => {}
            Next::Fallback => {
                if conn.flush().await {
                    fallback(conn.rewound()).await;
                }
                return;
            }
        }
        if !conn.flush().await {
            return;
        }
        let read = if conn.buf.is_empty() {
            // Between requests: the one place a graceful shutdown closes the connection.
            tokio::select! {
                biased;
                () = &mut stop => return,
                read = conn.read() => read,
            }
        } else {
            conn.read().await
        };
        match read {
            Some(0) if conn.buf.is_empty() => return,
            // Closed mid-request: hyper sees what it would have seen and ends it its way.
            Some(0) => return fallback(conn.rewound()).await,
            Some(_) => {}
            None => return,
        }
    }
}

/// The next frame of `body` as what the driver writes: `Some(Ok(Some(data)))` for data,
/// `Some(Ok(None))` for a frame with nothing to write, `Some(Err(()))` for a failed body.
fn poll_data<B: Body<Data = Bytes> + Unpin>(
    body: &mut B,
    cx: &mut std::task::Context<'_>,
) -> Poll<Option<Result<Option<Bytes>, ()>>> {
    Pin::new(body).poll_frame(cx).map(|frame| {
        frame.map(|frame| match frame {
            Ok(frame) => Ok(frame.into_data().ok().filter(|data| !data.is_empty())),
            Err(_) => Err(()),
        })
    })
}

/// Appends a chunk's size line: upper-case hex, as hyper writes it.
fn chunk_size(out: &mut Vec<u8>, len: usize) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        out.push(HEX[(len >> (i * 4)) & 0xf]);
    }
    out.extend_from_slice(b"\r\n");
}

/// `answering` to its end, unless the client closes the connection first (`None`): what
/// the socket has meanwhile goes to `spare` (the next pipelined request's bytes; once
/// some came, the close of the connection is no longer watched).
async fn while_connected<T>(
    answering: impl Future<Output = T>,
    io: &mut (impl AsyncRead + Unpin),
    spare: &mut BytesMut,
) -> Option<T> {
    tokio::pin!(answering);
    if spare.capacity() < 1024 {
        spare.reserve(1024);
    }
    tokio::select! {
        biased;
        answer = &mut answering => return Some(answer),
        read = io.read_buf(spare) => match read {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    Some(answering.await)
}

/// One connection's socket and buffers.
struct Conn<I, G> {
    io: I,
    /// Bytes read and not yet answered.
    buf: BytesMut,
    /// Responses not yet written.
    out: Vec<u8>,
    /// Bytes read while a request was being answered (the next pipelined request's).
    spare: BytesMut,
    /// The requests of `out`, in progress until it is written.
    guards: Vec<G>,
    /// The request whose body is being read.
    current: Option<G>,
}

impl<I: AsyncRead + AsyncWrite + Unpin, G> Conn<I, G> {
    /// Answers the request at the front of the buffer if it is complete and the handler's.
    async fn answer_next<H: Handler>(
        &mut self,
        handler: &H,
        peer: SocketAddr,
        started: &impl Fn() -> G,
    ) -> Next<H::Body> {
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        let head = match parse(&self.buf, &mut fields) {
            Parsed::Plain(head) => head,
            Parsed::Partial => return Next::Read,
            Parsed::Other => return Next::Fallback,
        };
        if head.content_length() > MAX_BODY || !handler.accepts(&head) {
            return Next::Fallback;
        }
        // The request is in progress from its head on (a stalled upload is timed by
        // idle_timeout, as on hyper's path), until its response is written.
        let guard = self.current.take().unwrap_or_else(started);
        // At most MAX_HEAD + MAX_BODY: fits a usize.
        let end = head.len() + head.content_length() as usize;
        if self.buf.len() < end {
            self.buf.reserve(end - self.buf.len());
            self.current = Some(guard);
            return Next::Read;
        }
        self.guards.push(guard);
        let request = Request {
            head: &head,
            body: &self.buf[head.len()..end],
            peer,
        };
        let answering = handler.answer(request, &mut self.out);
        let Some(tail) = while_connected(answering, &mut self.io, &mut self.spare).await else {
            return Next::Gone;
        };
        self.buf.advance(end);
        if !self.spare.is_empty() {
            self.buf.extend_from_slice(&self.spare);
            self.spare.clear();
        }
        match tail {
            Some(tail) => Next::Tail(tail),
            None => Next::Answered,
        }
    }

    /// Writes the pending output, then `tail`'s frames; the request's guard is kept until
    /// the last is written. As hyper does, what the body has ready goes into the output
    /// with the head, and the output is written when the body has nothing ready (or holds
    /// [`TAIL_BUFFER`] bytes): a body that fails before anything was written leaves the
    /// client with nothing, not a head without its body. `false` if the socket or the body
    /// failed (the connection is then closed).
    async fn stream<B: Body<Data = Bytes> + Unpin>(&mut self, mut tail: Tail<B>) -> bool {
        let guards = std::mem::take(&mut self.guards);
        loop {
            let ready = std::future::poll_fn(|cx| {
                Poll::Ready(match poll_data(&mut tail.body, cx) {
                    Poll::Ready(frame) => Some(frame),
                    Poll::Pending => None,
                })
            });
            let frame = match ready.await {
                Some(frame) => frame,
                None => {
                    if !self.flush().await {
                        return false;
                    }
                    std::future::poll_fn(|cx| poll_data(&mut tail.body, cx)).await
                }
            };
            let data = match frame {
                None => break,
                Some(Err(())) => return false,
                Some(Ok(Some(data))) => data,
                // Trailers, or an empty frame (which a chunk could not carry).
                Some(Ok(None)) => continue,
            };
            if tail.chunked {
                chunk_size(&mut self.out, data.len());
                self.out.extend_from_slice(&data);
                self.out.extend_from_slice(b"\r\n");
            } else {
                self.out.extend_from_slice(&data);
            }
            if self.out.len() >= TAIL_BUFFER && !self.flush().await {
                return false;
            }
        }
        if tail.chunked {
            self.out.extend_from_slice(b"0\r\n\r\n");
        }
        let done = self.flush().await;
        // A large body's frames grew the output buffer: not kept for the connection's life.
        self.out.shrink_to(BUFFER);
        drop(guards);
        done
    }

    /// The socket for hyper, the bytes read first. A request begun here is no longer in
    /// progress: hyper reports it again when it reads its head.
    fn rewound(self) -> Rewind<I> {
        Rewind::new(self.buf.freeze(), self.io)
    }

    /// Reads what the socket has: `Some(0)` at its end, `None` on an error.
    async fn read(&mut self) -> Option<usize> {
        if self.buf.capacity() - self.buf.len() < 1024 {
            self.buf.reserve(BUFFER);
        }
        self.io.read_buf(&mut self.buf).await.ok()
    }

    /// Writes the pending responses with one write; `false` if the socket failed.
    async fn flush(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let written = self.io.write_all(&self.out).await.is_ok() && self.io.flush().await.is_ok();
        self.out.clear();
        self.guards.clear();
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_upper_case_hex() {
        for (len, text) in [(1, "1"), (15, "F"), (16, "10"), (255, "FF"), (4096, "1000")] {
            let mut out = Vec::new();
            chunk_size(&mut out, len);
            assert_eq!(out, format!("{text}\r\n").into_bytes());
        }
    }
}
