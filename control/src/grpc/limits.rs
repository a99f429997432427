//! The `lb.v1.LoadBalancer` server's request limits, before tonic reads a
//! request: [`RequestLimits`].
//!
//! **Bulk writes.** At most [`MAX_CONCURRENT_WRITES`] Apply and Resync
//! calls are read, decoded and run at once; one more is refused at once
//! with UNAVAILABLE (retry), unread.
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
//!
//! **Every other method** takes a request of a few names and numbers: its
//! body is refused with RESOURCE_EXHAUSTED past [`MAX_SMALL_REQUEST_BYTES`],
//! as it arrives, so that a GetService of 256 MiB (the server's message
//! limit, which Resync needs) is neither buffered nor decoded. These calls
//! are not limited in number: each holds at most that much.
//!
//! **Stalled uploads.** A request whose body stops arriving for
//! [`REQUEST_IDLE_TIMEOUT`] is ended with DEADLINE_EXCEEDED, whatever its
//! method, so that a client that is alive (it answers HTTP/2 pings) but
//! stopped sending gives its write share back. One that keeps sending a
//! little at a time (a byte every 29 s) gives it back too: a body that has
//! been waited for longer than [`REQUEST_IDLE_TIMEOUT`] in all and
//! averages under [`MIN_REQUEST_RATE`] bytes a second of that wait is
//! ended the same way, when its next bytes come. (Both count only the
//! time lbd waits for bytes it asked for, not the time it takes between
//! asks.)

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::codegen::{http, BoxFuture, Bytes, Service};
use tonic::server::NamedService;
use tonic::Status;

/// Apply and Resync calls that may be read, decoded and run at once.
pub const MAX_CONCURRENT_WRITES: usize = 2;

/// The largest request body of a method other than Apply and Resync
/// (framing included): its requests are a few names and numbers, ~300
/// bytes at most.
pub const MAX_SMALL_REQUEST_BYTES: usize = 64 << 10;

/// How long a request's body may stop arriving before the call is ended.
pub const REQUEST_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The average rate, in bytes a second of waiting for them, below which a
/// body waited for longer than [`REQUEST_IDLE_TIMEOUT`] is ended (8 kbit/s: any link a
/// controller uses does far better; a 100 MB Resync at it would take 28
/// hours).
pub const MIN_REQUEST_RATE: u64 = 1024;

/// The methods that take a request of any size.
fn is_bulk_write(path: &str) -> bool {
    matches!(path, "/lb.v1.LoadBalancer/Apply" | "/lb.v1.LoadBalancer/Resync")
}

/// A bulk write's share of [`MAX_CONCURRENT_WRITES`], in its request's
/// extensions; held until every clone is dropped.
#[derive(Debug, Clone)]
pub struct BulkWritePermit(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

/// `S` (the `lb.v1.LoadBalancer` server) with the limits of the module
/// doc: at most `limit` bulk writes at once, small bodies for the other
/// methods, and no stalled body.
#[derive(Debug, Clone)]
pub struct RequestLimits<S> {
    inner: S,
    permits: Arc<Semaphore>,
    limit: usize,
    idle: Duration,
}

impl<S> RequestLimits<S> {
    /// `inner` with at most `limit` (at least 1) bulk writes at once and
    /// [`REQUEST_IDLE_TIMEOUT`].
    pub fn new(inner: S, limit: usize) -> Self {
        let limit = limit.max(1);
        RequestLimits {
            inner,
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            idle: REQUEST_IDLE_TIMEOUT,
        }
    }

    /// The same with `idle` instead of [`REQUEST_IDLE_TIMEOUT`].
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }
}

impl<S, B, R> Service<http::Request<B>> for RequestLimits<S>
where
    S: Service<http::Request<LimitedBody<B>>, Response = http::Response<R>> + Clone + Send + 'static,
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

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // The instance polled ready takes the call; a clone stays for the
        // next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let path = req.uri().path();
        let method = path.rsplit('/').next().unwrap_or(path).to_string();
        if !is_bulk_write(path) {
            let req = req.map(|b| LimitedBody::new(b, method, MAX_SMALL_REQUEST_BYTES, self.idle));
            return Box::pin(inner.call(req));
        }
        let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            let status = Status::unavailable(format!(
                "{} Apply/Resync calls are being read or committed, the most lbd takes at once; retry",
                self.limit
            ));
            return Box::pin(std::future::ready(Ok(status.into_http())));
        };
        let permit = BulkWritePermit(Arc::new(permit));
        // The server's message limit bounds a bulk write's size.
        let mut req = req.map(|b| LimitedBody::new(b, method, usize::MAX, self.idle));
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

impl<S: NamedService> NamedService for RequestLimits<S> {
    const NAME: &'static str = S::NAME;
}

/// A request body with [`RequestLimits`]' size and idle bounds; its error
/// is the [`Status`] the call ends with (tonic passes a body's `Status`
/// through as it is).
#[derive(Debug)]
pub struct LimitedBody<B> {
    inner: B,
    /// The method, for the messages.
    method: String,
    max_bytes: usize,
    read: usize,
    idle: Duration,
    /// Armed while the body waits for bytes.
    timer: Option<Pin<Box<Sleep>>>,
    /// A frame came since the timer was armed: the next wait starts it
    /// again (from then, not from the frame: the reader may take its time
    /// before it asks for more).
    rearm: bool,
    /// How long lbd has waited for the body's frames in all, and since
    /// when it waits for the next one, for [`MIN_REQUEST_RATE`].
    waited: Duration,
    asked: Option<Instant>,
}

impl<B> LimitedBody<B> {
    fn new(inner: B, method: String, max_bytes: usize, idle: Duration) -> Self {
        LimitedBody {
            inner,
            method,
            max_bytes,
            read: 0,
            idle,
            timer: None,
            rearm: false,
            waited: Duration::ZERO,
            asked: None,
        }
    }
}

impl<B> Body for LimitedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.rearm = true;
                if let Some(t) = this.asked.take() {
                    this.waited += t.elapsed();
                }
                if let Some(data) = frame.data_ref() {
                    this.read = this.read.saturating_add(data.len());
                    if this.read > this.max_bytes {
                        return Poll::Ready(Some(Err(Status::resource_exhausted(format!(
                            "{} request larger than {} bytes, the most lbd reads for it (only Apply and Resync take big requests)",
                            this.method, this.max_bytes
                        )))));
                    }
                }
                // A trickle keeps the idle timer from firing: the average
                // ends it.
                let took = this.waited;
                if took > this.idle
                    && (this.read as u128) < u128::from(MIN_REQUEST_RATE) * took.as_millis() / 1000
                {
                    return Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                        "{} request: {} bytes in {} s, under the {MIN_REQUEST_RATE} bytes a second lbd asks of a request that takes over {} s; send it again",
                        this.method,
                        this.read,
                        took.as_secs(),
                        this.idle.as_secs()
                    )))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Status::from_error(e.into())))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                this.asked.get_or_insert_with(Instant::now);
                let idle = this.idle;
                let timer = match &mut this.timer {
                    Some(t) => {
                        if std::mem::take(&mut this.rearm) {
                            t.as_mut().reset(Instant::now() + idle);
                        }
                        t
                    }
                    None => this.timer.insert(Box::pin(tokio::time::sleep(idle))),
                };
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                        "{} request: no byte of it arrived for {} s (after {} bytes); send it again",
                        this.method,
                        idle.as_secs(),
                        this.read
                    ))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Empty};
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A service whose writes run until `release` is notified, counting
    /// how many run at once (`now`) and how many saw their permit.
    #[derive(Clone, Default)]
    struct Slow {
        now: Arc<AtomicUsize>,
        with_permit: Arc<AtomicUsize>,
        release: Arc<tokio::sync::Notify>,
    }

    impl Service<http::Request<LimitedBody<Empty<Bytes>>>> for Slow {
        type Response = http::Response<String>;
        type Error = Infallible;
        type Future = BoxFuture<http::Response<String>, Infallible>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<LimitedBody<Empty<Bytes>>>) -> Self::Future {
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

    fn call(svc: &mut RequestLimits<Slow>, method: &str) -> BoxFuture<http::Response<String>, Infallible> {
        let req = http::Request::builder()
            .uri(format!("/lb.v1.LoadBalancer/{method}"))
            .body(Empty::new())
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
        let mut svc = RequestLimits::new(slow.clone(), MAX_CONCURRENT_WRITES);
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

    /// A body of `frames` frames of `size` bytes, each `every` after the
    /// reader asks for it.
    struct Trickle {
        frames: usize,
        size: usize,
        every: Duration,
        next: Pin<Box<Sleep>>,
        /// `next` is set for the frame being asked for.
        asked: bool,
    }

    impl Trickle {
        fn new(frames: usize, every: Duration) -> Self {
            Trickle::sized(frames, 1, every)
        }

        fn sized(frames: usize, size: usize, every: Duration) -> Self {
            Trickle {
                frames,
                size,
                every,
                next: Box::pin(tokio::time::sleep(every)),
                asked: false,
            }
        }
    }

    impl Body for Trickle {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if self.frames == 0 {
                return Poll::Ready(None);
            }
            if !std::mem::replace(&mut self.asked, true) {
                let every = self.every;
                self.next.as_mut().reset(Instant::now() + every);
            }
            if self.next.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.frames -= 1;
            self.asked = false;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; self.size])))))
        }
    }

    fn limited<B>(body: B, max_bytes: usize) -> LimitedBody<B> {
        LimitedBody::new(body, "GetService".into(), max_bytes, REQUEST_IDLE_TIMEOUT)
    }

    /// A small method's body is refused with RESOURCE_EXHAUSTED on the
    /// frame that goes past the bound, naming the method; up to the bound
    /// it is read whole.
    #[tokio::test]
    async fn a_body_past_its_bound_is_refused_as_it_arrives() {
        let at = http_body_util::Full::new(Bytes::from(vec![7u8; MAX_SMALL_REQUEST_BYTES]));
        let read = limited(at, MAX_SMALL_REQUEST_BYTES)
            .collect()
            .await
            .expect("at the bound");
        assert_eq!(read.to_bytes().len(), MAX_SMALL_REQUEST_BYTES);

        let past = http_body_util::Full::new(Bytes::from(vec![7u8; MAX_SMALL_REQUEST_BYTES + 1]));
        let err = limited(past, MAX_SMALL_REQUEST_BYTES)
            .collect()
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        assert!(
            err.message()
                .starts_with("GetService request larger than 65536 bytes"),
            "{err:?}"
        );

        // Counted over frames: the third of three 1-byte frames passes 2.
        let mut body = limited(Trickle::new(3, Duration::from_millis(1)), 2);
        for _ in 0..2 {
            assert!(body.frame().await.unwrap().is_ok());
        }
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    }

    /// A body that stops arriving ends with DEADLINE_EXCEEDED after the
    /// idle timeout; one whose frames come more often than that is read
    /// whole however long it takes (each frame pushes the deadline back).
    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_ends_and_a_slow_one_does_not() {
        let idle = REQUEST_IDLE_TIMEOUT;
        let start = Instant::now();
        let mut stalled = limited(Trickle::new(1, Duration::from_secs(3600)), usize::MAX);
        let err = stalled.frame().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
        assert!(
            err.message()
                .starts_with("GetService request: no byte of it arrived for 30 s"),
            "{err:?}"
        );
        assert_eq!(start.elapsed(), idle);

        // Three frames of 32 KiB, each two thirds of the timeout after the
        // last: 2x the timeout in all, ~1.6 KiB a second.
        let start = Instant::now();
        let slow = limited(Trickle::sized(3, 32 << 10, idle * 2 / 3), usize::MAX);
        let read = slow.collect().await.expect("never idle for the timeout");
        assert_eq!(read.to_bytes().len(), 3 * (32 << 10));
        assert_eq!(start.elapsed(), idle * 2);

        // A byte every two thirds of the timeout never lets the idle timer
        // fire, but averages far under the rate: the frame that comes
        // after the timeout ends it.
        let start = Instant::now();
        let mut drip = limited(Trickle::new(100, idle * 2 / 3), usize::MAX);
        assert!(drip.frame().await.unwrap().is_ok());
        let err = drip.frame().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
        assert_eq!(
            err.message(),
            "GetService request: 2 bytes in 40 s, under the 1024 bytes a second lbd asks of a request that takes over 30 s; send it again"
        );
        assert_eq!(start.elapsed(), idle * 4 / 3);

        // A reader that takes longer than the timeout between two frames
        // (a long decode) does not count against the sender: the wait
        // starts when it asks (nor against its rate: 64 KiB in the 40 s
        // waited is enough, in the 100 s since the first ask it would not
        // be).
        let mut body = limited(Trickle::sized(2, 32 << 10, idle * 2 / 3), usize::MAX);
        assert!(body.frame().await.unwrap().is_ok());
        tokio::time::sleep(idle * 2).await;
        assert!(
            body.frame().await.unwrap().is_ok(),
            "the sender was idle 2/3 of the timeout"
        );
    }

    /// A body that sends `first` and then nothing, ever.
    struct Stall(Option<Bytes>);

    impl Body for Stall {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.0.take() {
                Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
                None => Poll::Pending,
            }
        }
    }

    /// Through a real server with one write share: an Apply whose client
    /// stops sending mid-message (its HTTP/2 connection alive) holds the
    /// share, so another Apply is refused, until the idle timeout ends it
    /// with DEADLINE_EXCEEDED; then the share is back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_apply_ends_and_gives_its_share_back() {
        use crate::grpc::{LoadBalancerService, ServerInfo};
        use lb_proto::v1 as pb;
        use pb::load_balancer_client::LoadBalancerClient;
        use pb::load_balancer_server::LoadBalancerServer;

        let plane = crate::plane::ControlPlane::open(crate::plane::tests::node(), None).unwrap();
        let plane = Arc::new(std::sync::Mutex::new(plane));
        let (svc, _closer) = LoadBalancerService::new(Arc::clone(&plane), ServerInfo::new(Vec::new(), 1));
        let idle = Duration::from_secs(2);
        let lb = RequestLimits::new(LoadBalancerServer::new(svc), 1).with_idle_timeout(idle);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(lb)
                .serve_with_incoming(incoming),
        );

        // A gRPC message header announcing 100 bytes, and 3 of them.
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let io = hyper_util::rt::TokioIo::new(tcp);
        let (mut h2, conn) = hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        let stalled = http::Request::post(format!("http://{addr}/lb.v1.LoadBalancer/Apply"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Stall(Some(Bytes::from_static(&[0, 0, 0, 0, 100, 10, 2, 10]))))
            .unwrap();
        let start = Instant::now();
        let stalled = tokio::spawn(h2.send_request(stalled));

        let apply = || {
            tonic::Request::new(pb::ApplyRequest {
                changes: vec![pb::Change {
                    change: Some(pb::change::Change::UpsertService(pb::Service {
                        name: "default/web".into(),
                        ..Default::default()
                    })),
                }],
                ..Default::default()
            })
        };
        let mut client = LoadBalancerClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        // Give the stalled call time to take the share.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let refused = client.apply(apply()).await.expect_err("the share is held");
        assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
        assert!(start.elapsed() < idle, "the refusal came before the timeout");

        let response = tokio::time::timeout(idle * 5, stalled)
            .await
            .expect("ended by the idle timeout")
            .unwrap()
            .expect("a response");
        let (parts, body) = response.into_parts();
        let trailers = body.collect().await.ok().and_then(|c| c.trailers().cloned());
        let field = |name: &str| {
            parts
                .headers
                .get(name)
                .or_else(|| trailers.as_ref()?.get(name))
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(
            field("grpc-status").as_deref(),
            Some("4"),
            "{parts:?} {trailers:?}"
        );
        let message = field("grpc-message").unwrap();
        assert!(message.contains("no%20byte%20of%20it%20arrived"), "{message}");
        assert!(start.elapsed() >= idle);

        client.apply(apply()).await.expect("the share came back");
        assert_eq!(plane.lock().unwrap().revision(), 1);
        server.abort();
    }
}
