//! A response body read off a lane connection, as an `http_body::Body`: whole when it was
//! already in the buffer with the head (the connection then went back at once), else
//! streamed by its framing — `Content-Length`, chunked (decoded; trailers passed on as a
//! trailers frame), or until the upstream closes. The connection goes back to the pool
//! when the body has been read to its exact end and nothing follows it; a body dropped
//! before its end drops (closes) the connection, whose rest is still coming.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

use super::chunked::{Chunked, Decoded};
use super::{Conn, Framing, LaneError};
use crate::upstream::Upstream;

/// A response body from the lane (see the module's documentation).
pub struct LaneBody {
    state: State,
}

enum State {
    /// The whole body in hand (or nothing left to give).
    Whole(Option<Bytes>),
    /// Still on the connection.
    Streaming(Streaming),
}

struct Streaming {
    conn: Conn,
    kind: Kind,
    /// Body bytes read with the head, passed on first.
    first: Option<Bytes>,
    /// Where the connection goes back, and the pool generation it came from.
    back: (Arc<Upstream>, u64),
}

enum Kind {
    /// Bytes still to come after `first`.
    Length(u64),
    Chunked(Chunked),
    Close,
}

/// What a step of a streaming body came to.
enum Step {
    Frame(Frame<Bytes>),
    /// The end: the connection has been given back or dropped.
    End,
    /// More bytes are needed from the connection.
    More,
}

impl LaneBody {
    /// The body of the response whose head `conn` has just read, framed by `framing`; gives
    /// the connection back to `upstream` (pool `generation`) once it is fit for another
    /// request — at once when the whole body is already in the buffer.
    pub fn start(
        mut conn: Conn,
        framing: Framing,
        upstream: &Arc<Upstream>,
        generation: u64,
    ) -> LaneBody {
        let take = match framing {
            Framing::Empty => Some(0),
            Framing::Length(n) => usize::try_from(n).ok().filter(|&n| n <= conn.read.len()),
            Framing::Chunked | Framing::Close => None,
        };
        if let Some(n) = take {
            let whole = conn.read.split_to(n).freeze();
            upstream.give_back_conn(conn, generation);
            return LaneBody {
                state: State::Whole((!whole.is_empty()).then_some(whole)),
            };
        }
        let (kind, first) = match framing {
            Framing::Length(n) => {
                let first = already_read(&mut conn);
                let read = first.as_ref().map_or(0, |b| b.len() as u64);
                (Kind::Length(n - read), first)
            }
            Framing::Chunked => (Kind::Chunked(Chunked::new()), None),
            Framing::Empty | Framing::Close => (Kind::Close, already_read(&mut conn)),
        };
        LaneBody {
            state: State::Streaming(Streaming {
                conn,
                kind,
                first,
                back: (upstream.clone(), generation),
            }),
        }
    }
}

impl LaneBody {
    /// The whole body, taken out, when it came with the head (its connection already given
    /// back; `Some(None)`: empty); `None` while it is still streaming.
    pub fn take_whole(&mut self) -> Option<Option<Bytes>> {
        match &mut self.state {
            State::Whole(whole) => Some(whole.take()),
            State::Streaming(_) => None,
        }
    }
}

impl http_body::Body for LaneBody {
    type Data = Bytes;
    type Error = LaneError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, LaneError>>> {
        let streaming = match &mut self.state {
            State::Whole(whole) => return Poll::Ready(whole.take().map(|b| Ok(Frame::data(b)))),
            State::Streaming(streaming) => streaming,
        };
        let polled = streaming.poll(cx);
        let finished = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => streaming.is_end(),
            // A broken body: the connection is dropped (closed), not given back.
            Poll::Ready(Some(Err(_))) => {
                self.state = State::Whole(None);
                false
            }
            Poll::Pending => false,
        };
        if finished
            && let State::Streaming(done) = std::mem::replace(&mut self.state, State::Whole(None))
        {
            // The last of the body: the connection is done with now.
            done.finish();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.state {
            State::Whole(whole) => whole.is_none(),
            State::Streaming(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            State::Whole(whole) => {
                SizeHint::with_exact(whole.as_ref().map_or(0, |b| b.len() as u64))
            }
            State::Streaming(Streaming {
                kind: Kind::Length(rest),
                first,
                ..
            }) => SizeHint::with_exact(rest + first.as_ref().map_or(0, |b| b.len() as u64)),
            State::Streaming(_) => SizeHint::default(),
        }
    }
}

impl Streaming {
    /// The next frame, reading from the connection as needed.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, LaneError>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        loop {
            match self.step() {
                Ok(Step::Frame(frame)) => return Poll::Ready(Some(Ok(frame))),
                Ok(Step::End) => return Poll::Ready(None),
                Ok(Step::More) => {}
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
            match ready!(self.conn.poll_fill(cx)) {
                Ok(0) if matches!(self.kind, Kind::Close) => {
                    self.conn.keep_alive = false;
                    self.kind = Kind::Length(0);
                    return Poll::Ready(None);
                }
                Ok(0) => return Poll::Ready(Some(Err(LaneError::Truncated))),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(LaneError::Io(e)))),
            }
        }
    }

    /// Whether everything of the body has been passed on.
    fn is_end(&self) -> bool {
        matches!(self.kind, Kind::Length(0)) && self.first.is_none()
    }

    /// Gives the connection back (the pool takes it only if fit for another request).
    fn finish(self) {
        let (upstream, generation) = self.back;
        upstream.give_back_conn(self.conn, generation);
    }

    /// Decodes what the buffer holds into the next frame, if it can.
    fn step(&mut self) -> Result<Step, LaneError> {
        let read = &mut self.conn.read;
        match &mut self.kind {
            Kind::Length(0) => Ok(Step::End),
            Kind::Length(rest) => {
                if read.is_empty() {
                    return Ok(Step::More);
                }
                let take = usize::try_from(*rest).map_or(read.len(), |rest| rest.min(read.len()));
                *rest -= take as u64;
                Ok(Step::Frame(Frame::data(read.split_to(take).freeze())))
            }
            Kind::Close if read.is_empty() => Ok(Step::More),
            Kind::Close => Ok(Step::Frame(Frame::data(read.split().freeze()))),
            Kind::Chunked(_) => self.step_chunked(),
        }
    }

    /// One step of the chunked decoder; at the body's end the connection is done with.
    fn step_chunked(&mut self) -> Result<Step, LaneError> {
        let Kind::Chunked(decoder) = &mut self.kind else {
            return Ok(Step::End);
        };
        let (step, over) = match decoder.decode(&mut self.conn.read)? {
            Decoded::Data(data) => (Step::Frame(Frame::data(data)), false),
            Decoded::More => (Step::More, false),
            Decoded::Trailers(fields) => (Step::Frame(Frame::trailers(fields)), true),
            Decoded::End => (Step::End, true),
        };
        if over {
            // Everything of the body has been read: the end comes with the next poll.
            self.kind = Kind::Length(0);
        }
        Ok(step)
    }
}

/// The body bytes read with the head, if any.
fn already_read(conn: &mut Conn) -> Option<Bytes> {
    (!conn.read.is_empty()).then(|| conn.read.split().freeze())
}
