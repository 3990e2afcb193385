//! Connection handling shared by the three listeners: a connection limit, idle/stall timeouts,
//! HTTP/1 header timeouts, and a kill switch that ends every connection at the shutdown deadline.
//!
//! Why not `axum::serve`: it has no header timeout, no connection limit, and its graceful shutdown
//! waits forever for a client that never finishes its request (a slow-loris client could block
//! SIGTERM). Here every accepted socket is wrapped in [`Guarded`], which holds a connection-limit
//! permit and fails its I/O once the server's kill token fires or the socket stalls.

use crate::types::ServeError;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Timeouts and limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Most connections open at once; further clients wait in the kernel's accept backlog.
    pub max_connections: usize,
    /// HTTP/1: time allowed for a request's headers (also closes idle keep-alive connections).
    pub header_timeout: Duration,
    /// A socket that makes no progress for this long is closed (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Whether a read that waits past `idle_timeout` also closes the socket. HTTP/1 leaves this
    /// off (the header and body timeouts cover reads, and a long inference must not count as
    /// idle); gRPC turns it on (HTTP/2 keep-alive pings keep healthy connections busy).
    pub idle_reads: bool,
}

/// A TCP stream that holds a connection-limit permit, fails once `kill` fires, and fails a stalled
/// read or write after the idle timeout.
pub struct Guarded {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    kill: Pin<Box<WaitForCancellationFutureOwned>>,
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    idle_reads: bool,
}

impl Guarded {
    fn new(
        inner: TcpStream,
        permit: OwnedSemaphorePermit,
        kill: &CancellationToken,
        l: &ConnLimits,
    ) -> Self {
        let idle = l.idle_timeout.map(|d| (d, Box::pin(tokio::time::sleep(d))));
        Self {
            inner,
            _permit: permit,
            kill: Box::pin(kill.clone().cancelled_owned()),
            idle,
            idle_reads: l.idle_reads,
        }
    }

    fn killed(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.kill.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(io::ErrorKind::ConnectionAborted, "server shutdown deadline reached")
        })
    }

    fn progressed(&mut self) {
        if let Some((d, s)) = &mut self.idle {
            s.as_mut().reset(Instant::now() + *d);
        }
    }

    /// Called when the socket would block: has it been stalled for too long?
    fn stalled(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let (_, s) = self.idle.as_mut()?;
        s.as_mut()
            .poll(cx)
            .is_ready()
            .then(|| io::Error::new(io::ErrorKind::TimedOut, "connection idle timeout"))
    }
}

use std::future::Future;

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.killed(cx) {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.progressed();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.idle_reads => match this.stalled(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            other => other,
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.killed(cx) {
            return Poll::Ready(Err(e));
        }
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    this.progressed();
                }
                Poll::Ready(Ok(n))
            }
            // A client that stops reading its response cannot pin the connection forever.
            Poll::Pending => match this.stalled(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            other => other,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.killed(cx) {
            return Poll::Ready(Err(e));
        }
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    this.progressed();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => match this.stalled(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            other => other,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.killed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Guarded {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Accepts the next connection once a permit is free; `None` when `stop` fires. Accept errors
/// (e.g. EMFILE) are logged and retried after a pause instead of ending the listener.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    stop: &mut watch::Receiver<bool>,
    kill: &CancellationToken,
    limits: &ConnLimits,
) -> Option<Guarded> {
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.ok()?,
            _ = stop.wait_for(|s| *s) => return None,
        };
        let res = tokio::select! {
            r = listener.accept() => r,
            _ = stop.wait_for(|s| *s) => return None,
        };
        match res {
            Ok((tcp, _)) => {
                let _ = tcp.set_nodelay(true);
                return Some(Guarded::new(tcp, permit, kill, limits));
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                drop(permit);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serves an axum router over HTTP/1.1 with the limits: header timeout (hyper), connection limit
/// and stall timeout ([`Guarded`]). On `stop` it stops accepting and drains: idle connections
/// close at once, in-flight requests finish. The caller enforces the exit deadline by firing
/// `kill` and aborting this task (which drops every connection task with it).
pub(crate) async fn serve_http(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
    kill: CancellationToken,
) -> Result<(), ServeError> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut conns = tokio::task::JoinSet::new();
    while let Some(io) = accept(&listener, &permits, &mut stop, &kill, &limits).await {
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(io), svc);
        let conn = graceful.watch(conn);
        conns.spawn(async move {
            let _ = conn.await;
        });
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// An accepted-connection stream for tonic, with the same limit and guards.
pub(crate) fn incoming(
    listener: TcpListener,
    limits: ConnLimits,
    stop: watch::Receiver<bool>,
    kill: CancellationToken,
) -> impl futures_util::Stream<Item = Result<Guarded, io::Error>> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    futures_util::stream::unfold(
        (listener, permits, stop, kill),
        move |(listener, permits, mut stop, kill)| async move {
            let io = accept(&listener, &permits, &mut stop, &kill, &limits).await?;
            Some((Ok(io), (listener, permits, stop, kill)))
        },
    )
}
