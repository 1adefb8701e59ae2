//! Freeing a concurrency policy's leases when the request really ends: when its response
//! body has been sent to the end, or when the body is dropped early (the client went away,
//! the upstream failed, the server shut down). [`LeaseBody`] wraps the response body and
//! owns a [`LeaseGuard`]; whichever comes first releases the leases, once.
//!
//! A process that dies holding leases cannot release them: its slots come back when their
//! `lease` passes (see [`Concurrency`](sluicegate_core::algorithm::Concurrency)).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use sluicegate_core::{Lease, Store};

use crate::settle::UsageTap;

/// Releases leases when dropped (or by [`LeaseGuard::release`]), in a task on the current
/// Tokio runtime, so a drop never blocks. Releasing twice is harmless: a freed lease
/// matches nothing.
pub struct LeaseGuard {
    store: Arc<dyn Store>,
    leases: Vec<Lease>,
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("leases", &self.leases)
            .finish_non_exhaustive()
    }
}

impl LeaseGuard {
    /// A guard over `leases` in `store`; `None` when there is nothing to release.
    pub fn new(store: Arc<dyn Store>, leases: Vec<Lease>) -> Option<LeaseGuard> {
        (!leases.is_empty()).then_some(LeaseGuard { store, leases })
    }

    /// The leases held.
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// Releases now (in a spawned task) and disarms the guard.
    pub fn release(mut self) {
        self.spawn_release();
    }

    fn spawn_release(&mut self) {
        let leases = std::mem::take(&mut self.leases);
        if leases.is_empty() {
            return;
        }
        let store = Arc::clone(&self.store);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime (a test dropping a body by hand): the leases expire by themselves.
            return;
        };
        runtime.spawn(async move {
            if let Err(error) = store.release(&leases).await {
                // The slots come back when their lease passes.
                tracing::debug!(%error, "could not release a concurrency lease");
            }
        });
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.spawn_release();
    }
}

pin_project_lite::pin_project! {
    /// A response body that releases its request's leases when it ends or is dropped, and
    /// shows its bytes to a [`UsageTap`] (a route's `settle = "openai-usage"`) on the way.
    /// Frames pass through untouched and at once: nothing is buffered or delayed.
    pub struct LeaseBody<B> {
        #[pin]
        inner: B,
        guard: Option<LeaseGuard>,
        tap: Option<UsageTap>,
    }
}

impl<B> LeaseBody<B> {
    /// Wraps `inner`; with `guard` `None` it only passes frames through.
    pub fn new(inner: B, guard: Option<LeaseGuard>) -> Self {
        LeaseBody {
            inner,
            guard,
            tap: None,
        }
    }

    /// Also shows every data frame to `tap`, which settles when the body ends or is dropped.
    // Inlined: called, it moved the whole response body in and out (two `memcpy` calls a
    // response; docs/benchmarks/middleware.md, sixth pass).
    #[inline]
    pub fn with_tap(mut self, tap: Option<UsageTap>) -> Self {
        self.tap = tap;
        self
    }
}

impl<B: Body> Body for LeaseBody<B>
where
    B::Data: Buf,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Some(tap) = this.tap.as_mut() {
            match &polled {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        tap.feed(data.chunk());
                    }
                }
                Poll::Ready(None) => tap.finish(),
                _ => {}
            }
        }
        // The last frame went out (or the body failed): the request is over.
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_))))
            && let Some(guard) = this.guard.take()
        {
            guard.release();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
