//! At most [`MAX_CONCURRENT_WRITES`] Apply and Resync calls are read,
//! decoded and run at once; one more is refused at once with UNAVAILABLE
//! (retry), unread.
//!
//! Each request is bounded before it is decoded (`lb_proto::bounded`:
//! ~0.6 GB at most while its lists grow, plus its strings), but requests
//! decode concurrently: a client retrying a big Resync on several
//! connections at once could otherwise make lbd, data plane included, take
//! several times that and be killed. The writes commit one after another
//! on the plane's lock anyway. Two at once, not one, so that one stalled
//! upload does not refuse every other write.
//!
//! Refused, not queued: a call waiting here unread would keep up to a
//! stream window of its body in HTTP/2's buffers, counted against its
//! connection's window, and on a connection shared with the calls that
//! hold the permits (one client sending three big writes at once) it could
//! leave them no window to finish their bodies in: a deadlock. Refused, its
//! stream ends and its window comes back.
//!
//! The permit travels with the request ([`BulkWritePermit`] in its
//! extensions): the handler moves it into the blocking task that commits,
//! so a call its client cancels keeps its permit until that work ends.

use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::NamedService;

/// Apply and Resync calls that may be read, decoded and run at once.
pub const MAX_CONCURRENT_WRITES: usize = 2;

/// The methods that take a request of any size.
fn is_bulk_write(path: &str) -> bool {
    matches!(path, "/lb.v1.LoadBalancer/Apply" | "/lb.v1.LoadBalancer/Resync")
}

/// A bulk write's share of [`MAX_CONCURRENT_WRITES`], in its request's
/// extensions; held until every clone is dropped.
#[derive(Debug, Clone)]
pub struct BulkWritePermit(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

/// `S` (the `lb.v1.LoadBalancer` server) with at most `limit` bulk writes
/// at once.
#[derive(Debug, Clone)]
pub struct WriteLimit<S> {
    inner: S,
    permits: Arc<Semaphore>,
    limit: usize,
}

impl<S> WriteLimit<S> {
    /// `inner` with at most `limit` (at least 1) bulk writes at once.
    pub fn new(inner: S, limit: usize) -> Self {
        let limit = limit.max(1);
        WriteLimit {
            inner,
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }
}

impl<S, B, R> Service<http::Request<B>> for WriteLimit<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        // The instance polled ready takes the call; a clone stays for the
        // next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if !is_bulk_write(req.uri().path()) {
            return Box::pin(inner.call(req));
        }
        let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            let status = tonic::Status::unavailable(format!(
                "{} Apply/Resync calls are being read or committed, the most lbd takes at once; retry",
                self.limit
            ));
            return Box::pin(std::future::ready(Ok(status.into_http())));
        };
        let permit = BulkWritePermit(Arc::new(permit));
        req.extensions_mut().insert(permit.clone());
        Box::pin(async move {
            // Held while the body is read and decoded (inside `inner`'s
            // future) and the response built; the handler's clone keeps it
            // through the commit if the call is cancelled.
            let _permit = permit;
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

    /// A service whose writes run until `release` is notified, counting
    /// how many run at once (`now`) and how many saw their permit.
    #[derive(Clone, Default)]
    struct Slow {
        now: Arc<AtomicUsize>,
        with_permit: Arc<AtomicUsize>,
        release: Arc<tokio::sync::Notify>,
    }

    impl Service<http::Request<()>> for Slow {
        type Response = http::Response<String>;
        type Error = Infallible;
        type Future = BoxFuture<http::Response<String>, Infallible>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            let s = self.clone();
            Box::pin(async move {
                if req.uri().path().ends_with("/GetStats") {
                    return Ok(http::Response::new("stats".into()));
                }
                if req.extensions().get::<BulkWritePermit>().is_some() {
                    s.with_permit.fetch_add(1, Ordering::SeqCst);
                }
                s.now.fetch_add(1, Ordering::SeqCst);
                s.release.notified().await;
                s.now.fetch_sub(1, Ordering::SeqCst);
                Ok(http::Response::new("written".into()))
            })
        }
    }

    fn call(svc: &mut WriteLimit<Slow>, method: &str) -> BoxFuture<http::Response<String>, Infallible> {
        let req = http::Request::builder()
            .uri(format!("/lb.v1.LoadBalancer/{method}"))
            .body(())
            .unwrap();
        svc.call(req)
    }

    /// The gRPC status of a response: "0" (its header absent) for OK.
    fn grpc_status(r: &http::Response<String>) -> String {
        r.headers()
            .get("grpc-status")
            .map_or("0".into(), |v| v.to_str().unwrap().to_string())
    }

    /// Two writes run; a third is refused at once with UNAVAILABLE (14),
    /// a read is answered meanwhile, and once a write ends another is
    /// taken.
    #[tokio::test]
    async fn a_third_bulk_write_is_refused_and_reads_pass() {
        let slow = Slow::default();
        let mut svc = WriteLimit::new(slow.clone(), MAX_CONCURRENT_WRITES);
        let running: Vec<_> = ["Apply", "Resync"]
            .into_iter()
            .map(|m| tokio::spawn(call(&mut svc, m)))
            .collect();
        for _ in 0..200 {
            if slow.now.load(Ordering::SeqCst) == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(slow.now.load(Ordering::SeqCst), 2);
        assert_eq!(slow.with_permit.load(Ordering::SeqCst), 2);
        let within = |f| tokio::time::timeout(Duration::from_secs(5), f);
        for m in ["Apply", "Resync"] {
            let r = within(call(&mut svc, m)).await.expect("refused at once").unwrap();
            assert_eq!(grpc_status(&r), "14", "{m}");
            assert!(
                r.headers()["grpc-message"].to_str().unwrap().contains("retry"),
                "{:?}",
                r.headers()
            );
        }
        let r = within(call(&mut svc, "GetStats"))
            .await
            .expect("a read never waits")
            .unwrap();
        assert_eq!(r.body(), "stats");
        assert_eq!(slow.now.load(Ordering::SeqCst), 2, "the refused ones never ran");
        for w in running {
            while !w.is_finished() {
                slow.release.notify_waiters();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            assert_eq!(w.await.unwrap().unwrap().body(), "written");
        }
        // The permits came back.
        let next = tokio::spawn(call(&mut svc, "Apply"));
        while !next.is_finished() {
            slow.release.notify_waiters();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(grpc_status(&next.await.unwrap().unwrap()), "0");
    }

    /// An Apply whose client goes away while its commit waits for the
    /// plane's lock keeps its permit until that commit has run: the
    /// handler moved it into the blocking task.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_apply_keeps_its_permit_through_the_commit() {
        use crate::grpc::{LoadBalancerService, ServerInfo};
        use lb_proto::v1 as pb;
        use pb::load_balancer_server::LoadBalancer;

        let plane = crate::plane::ControlPlane::open(crate::plane::tests::node(), None).unwrap();
        let plane = Arc::new(std::sync::Mutex::new(plane));
        let (svc, _closer) = LoadBalancerService::new(Arc::clone(&plane), ServerInfo::new(Vec::new(), 1));
        let permits = Arc::new(Semaphore::new(1));
        let mut req = tonic::Request::new(pb::ApplyRequest {
            changes: vec![pb::Change {
                change: Some(pb::change::Change::UpsertService(pb::Service {
                    name: "default/web".into(),
                    ..Default::default()
                })),
            }],
            ..Default::default()
        });
        let permit = Arc::clone(&permits).try_acquire_owned().unwrap();
        req.extensions_mut().insert(BulkWritePermit(Arc::new(permit)));
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn({
            let plane = Arc::clone(&plane);
            move || {
                let _commit = plane.lock().unwrap();
                locked_tx.send(()).unwrap();
                let _ = go_rx.recv_timeout(Duration::from_secs(20));
            }
        });
        locked_rx.recv().unwrap();
        let call = tokio::spawn(async move { svc.apply(req).await.map(drop) });
        // The call reaches the blocking task, which waits for the lock.
        tokio::time::sleep(Duration::from_millis(200)).await;
        call.abort();
        let _ = call.await;
        assert_eq!(permits.available_permits(), 0, "kept while the commit waits");
        go_tx.send(()).unwrap();
        holder.join().unwrap();
        for _ in 0..200 {
            if permits.available_permits() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(permits.available_permits(), 1, "given back once the commit ran");
        assert_eq!(plane.lock().unwrap().revision(), 1, "the commit ran");
    }
}
