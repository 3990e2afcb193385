//! Charges gRPC request bytes to the server's in-flight budget *before* tonic decodes them.
//!
//! The HTTP front end charges a body as it arrives; gRPC messages used to be charged only after
//! tonic had buffered and decoded them, so many concurrent large messages could hold far more
//! memory than `--max-inflight-request-bytes`. This tower layer wraps every gRPC request body
//! and reads the 5-byte length prefix of each gRPC message as it streams in: the message's size
//! is taken from the budget when its prefix arrives (as a declared `Content-Length` is), and the
//! permit is held until the next message starts or the body is dropped, which covers tonic's
//! decode. A message that does not fit is refused with RESOURCE_EXHAUSTED before its bytes are
//! buffered. Sizes above twice `--max-request-bytes` are left to tonic's own message bound.

use crate::server::State;
use bytes::Buf;
use http_body::Frame;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::codegen::http::Request;

/// The tower layer that wraps each request body in a [`Charged`] body.
#[derive(Clone)]
pub struct BudgetLayer {
    state: Arc<State>,
}

impl BudgetLayer {
    pub fn new(state: Arc<State>) -> Self {
        Self { state }
    }
}

impl<S> tower::Layer<S> for BudgetLayer {
    type Service = BudgetService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        BudgetService { inner, state: self.state.clone() }
    }
}

/// The service [`BudgetLayer`] produces.
#[derive(Clone)]
pub struct BudgetService<S> {
    inner: S,
    state: Arc<State>,
}

impl<S> tower::Service<Request<Body>> for BudgetService<S>
where
    S: tower::Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let state = self.state.clone();
        self.inner.call(req.map(|b| Body::new(Charged::new(b, state))))
    }
}

/// A gRPC request body whose messages are charged to the in-flight budget as their prefixes arrive.
pub struct Charged {
    inner: Body,
    state: Arc<State>,
    /// Bytes of the current 5-byte message prefix seen so far.
    prefix: [u8; 5],
    prefix_len: usize,
    /// Payload bytes of the current message still to come.
    remaining: u64,
    held: crate::http::Charge,
}

impl Charged {
    fn new(inner: Body, state: Arc<State>) -> Self {
        Self {
            inner,
            state,
            prefix: [0; 5],
            prefix_len: 0,
            remaining: 0,
            held: crate::http::Charge::none(),
        }
    }

    /// Walks the framing of `data`, charging each message whose prefix completes in it.
    fn account(&mut self, mut data: &[u8]) -> Result<(), tonic::Status> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let take = (self.remaining.min(data.len() as u64)) as usize;
                self.remaining -= take as u64;
                data = &data[take..];
                continue;
            }
            let take = (5 - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&data[..take]);
            self.prefix_len += take;
            data = &data[take..];
            if self.prefix_len == 5 {
                self.prefix_len = 0;
                let len = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]) as u64;
                self.remaining = len;
                // The previous message is decoded by now; its bytes leave the budget.
                self.held = crate::http::Charge::none();
                self.charge(len)?;
            }
        }
        Ok(())
    }

    fn charge(&mut self, len: u64) -> Result<(), tonic::Status> {
        let limit = self.state.options.max_request_bytes as u64;
        // Larger messages are refused by tonic's bound (2x the limit) without being buffered.
        let n = usize::try_from(len.min(limit.saturating_mul(2)) + 5).unwrap_or(usize::MAX);
        crate::http::charge(&self.state, &mut self.held, n).map_err(|e| {
            tonic::Status::resource_exhausted(format!(
                "a gRPC message of {len} bytes does not fit: {}",
                e.message
            ))
        })
    }
}

impl http_body::Body for Charged {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    if let Err(e) = this.account(d.chunk()) {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
