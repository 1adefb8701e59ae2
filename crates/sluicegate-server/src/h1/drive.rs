//! The connection loop: read, answer the plain requests the handler takes, write, and hand
//! the connection to hyper at the first request it does not take.

use std::future::Future;
use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::head::{Head, MAX_FIELDS, Parsed, parse};
use super::rewind::Rewind;

/// The most body bytes buffered for one request, whatever the handler accepts.
const MAX_BODY: u64 = 1 << 20;

/// The first buffer of a connection: a head and a small body, read at once.
const BUFFER: usize = 8 * 1024;

/// What a listener answers on the lean path.
pub trait Handler: Clone + Send + Sync + 'static {
    /// Whether this handler answers the plain request of `head` (its body not read yet);
    /// `false` hands the connection, this request included, to hyper. It bounds the body:
    /// the driver buffers `head.content_length()` bytes before [`Handler::answer`] (never
    /// more than 1 MiB; beyond, the request is hyper's).
    fn accepts(&self, head: &Head<'_>) -> bool;

    /// Appends the whole response to `request` (status line, fields, body) to `out`.
    fn answer<'a>(
        &'a self,
        request: Request<'a>,
        out: &'a mut Vec<u8>,
    ) -> impl Future<Output = ()> + Send + 'a;
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
    fn accepts(&self, _: &Head<'_>) -> bool {
        match *self {}
    }
    fn answer<'a>(
        &'a self,
        _: Request<'a>,
        _: &'a mut Vec<u8>,
    ) -> impl Future<Output = ()> + Send + 'a {
        let never: Never = *self;
        async move { match never {} }
    }
}

/// What to do after looking at the buffer.
enum Next {
    /// A request was answered; look again.
    Answered,
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
        guards: Vec::new(),
        current: None,
    };
    tokio::pin!(stop);
    loop {
        match conn.answer_next(&handler, peer, &started).await {
            Next::Answered => continue,
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

/// One connection's socket and buffers.
struct Conn<I, G> {
    io: I,
    /// Bytes read and not yet answered.
    buf: BytesMut,
    /// Responses not yet written.
    out: Vec<u8>,
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
    ) -> Next {
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
        handler.answer(request, &mut self.out).await;
        self.buf.advance(end);
        Next::Answered
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
