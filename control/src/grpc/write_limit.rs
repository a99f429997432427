//! At most [`MAX_CONCURRENT_WRITES`] Apply and Resync calls decode and run
//! at once; the others wait, unread, their senders held back by HTTP/2 flow
//! control.
//!
//! Each request is bounded before it is decoded (`lb_proto::bounded`:
//! ~0.6 GB at most while its lists grow, plus its strings), but requests
//! decode concurrently: a client retrying a big Resync on several
//! connections at once could otherwise make lbd, data plane included, take
//! several times that and be killed. The writes run one after another on
//! the plane's lock anyway, so the wait costs them nothing; reads
//! (GetStats, List, Watch, ...) never wait here. Two at once, not one, so
//! that one stalled upload does not hold every other write back.

use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::Semaphore;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::NamedService;

/// Apply and Resync calls that may decode and run at once.
pub const MAX_CONCURRENT_WRITES: usize = 2;

/// The methods that take a request of any size.
fn is_bulk_write(path: &str) -> bool {
    matches!(path, "/lb.v1.LoadBalancer/Apply" | "/lb.v1.LoadBalancer/Resync")
}

/// `S` (the `lb.v1.LoadBalancer` server) with its bulk writes limited to
/// `permits` at once.
#[derive(Debug, Clone)]
pub struct WriteLimit<S> {
    inner: S,
    permits: Arc<Semaphore>,
}

impl<S> WriteLimit<S> {
    /// `inner` with at most `limit` (at least 1) bulk writes at once.
    pub fn new(inner: S, limit: usize) -> Self {
        WriteLimit {
            inner,
            permits: Arc::new(Semaphore::new(limit.max(1))),
        }
    }
}

impl<S, B> Service<http::Request<B>> for WriteLimit<S>
where
    S: Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // The instance polled ready takes the call; a clone stays for the
        // next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if !is_bulk_write(req.uri().path()) {
            return Box::pin(inner.call(req));
        }
        let permits = Arc::clone(&self.permits);
        Box::pin(async move {
            // The semaphore is never closed: a permit always comes.
            let _permit = permits.acquire_owned().await;
            // Held until the response is built: the body is read and
            // decoded inside `inner`'s future.
            inner.call(req).await
        })
    }
}

impl<S: NamedService> NamedService for WriteLimit<S> {
    const NAME: &'static str = S::NAME;
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A service whose calls run until `release` is notified, counting how
    /// many run at once (`now`) and the most that ever did (`most`).
    #[derive(Clone)]
    struct Slow {
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        release: Arc<tokio::sync::Notify>,
    }

    impl Service<http::Request<()>> for Slow {
        type Response = &'static str;
        type Error = Infallible;
        type Future = BoxFuture<&'static str, Infallible>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            let s = self.clone();
            Box::pin(async move {
                let n = s.now.fetch_add(1, Ordering::SeqCst) + 1;
                s.most.fetch_max(n, Ordering::SeqCst);
                if req.uri().path().ends_with("/GetStats") {
                    s.now.fetch_sub(1, Ordering::SeqCst);
                    return Ok("stats");
                }
                s.release.notified().await;
                s.now.fetch_sub(1, Ordering::SeqCst);
                Ok("written")
            })
        }
    }

    fn call(svc: &mut WriteLimit<Slow>, method: &str) -> BoxFuture<&'static str, Infallible> {
        let req = http::Request::builder()
            .uri(format!("/lb.v1.LoadBalancer/{method}"))
            .body(())
            .unwrap();
        svc.call(req)
    }

    /// Five writes at once: two run, three wait, each starting as one
    /// ends; a GetStats meanwhile is answered at once.
    #[tokio::test]
    async fn bulk_writes_wait_for_a_permit_and_reads_do_not() {
        let slow = Slow {
            now: Arc::default(),
            most: Arc::default(),
            release: Arc::default(),
        };
        let mut svc = WriteLimit::new(slow.clone(), MAX_CONCURRENT_WRITES);
        let writes: Vec<_> = ["Apply", "Resync", "Apply", "Resync", "Apply"]
            .into_iter()
            .map(|m| tokio::spawn(call(&mut svc, m)))
            .collect();
        // Bounded: the spawned calls get going.
        for _ in 0..100 {
            if slow.now.load(Ordering::SeqCst) == MAX_CONCURRENT_WRITES {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(slow.now.load(Ordering::SeqCst), MAX_CONCURRENT_WRITES);
        assert_eq!(call(&mut svc, "GetStats").await, Ok("stats"));
        for w in writes {
            // Each release lets a running write end and a waiting one in.
            while !w.is_finished() {
                slow.release.notify_waiters();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            assert_eq!(w.await.unwrap(), Ok("written"));
        }
        assert_eq!(
            slow.most.load(Ordering::SeqCst),
            MAX_CONCURRENT_WRITES + 1,
            "the read ran beside two writes"
        );
    }
}
