//! A Kubernetes API server for the sidecar's tests, as small as the
//! sidecar's use of it: list and watch of Services (`/api/v1/services`)
//! and EndpointSlices (`/apis/discovery.k8s.io/v1/endpointslices`), all
//! namespaces, over plain HTTP/1.1. There is no kube-apiserver on the
//! development machines (Debian packages none, and nothing else can be
//! fetched), so this speaks the protocol's subset the watcher uses: a list
//! answers every object with the collection's resourceVersion, a watch
//! (`watch=true`) streams `{"type": "ADDED"|"MODIFIED"|"DELETED",
//! "object": ...}` lines for each later change. Label selectors are not
//! applied (the tests' slices all carry the service-name label). It also
//! takes Events (`POST /apis/events.k8s.io/v1/namespaces/NS/events`),
//! kept for the tests to read, or refused with 403 while told to.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// The two kinds served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Service,
    EndpointSlice,
}

impl Kind {
    fn list_kind(self) -> &'static str {
        match self {
            Kind::Service => "ServiceList",
            Kind::EndpointSlice => "EndpointSliceList",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::Service => "v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
        }
    }
}

#[derive(Default)]
struct Inner {
    revision: u64,
    objects: BTreeMap<(Kind, String, String), Value>,
    watchers: Vec<(Kind, mpsc::UnboundedSender<Bytes>)>,
    /// Lists of a kind answered 403 while set.
    failing: Vec<Kind>,
    /// Requests seen, by kind: (lists, watches).
    seen: BTreeMap<Kind, (u32, u32)>,
    /// Events created, as posted.
    events: Vec<Value>,
    /// Events refused (403) while set.
    refuse_events: bool,
}

/// The server; it stops with the test's runtime.
#[derive(Clone)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
    pub addr: SocketAddr,
}

impl FakeApi {
    /// Listens on 127.0.0.1, any port, on the current runtime.
    pub async fn start() -> FakeApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let api = FakeApi {
            inner: Arc::default(),
            addr,
        };
        let server = api.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let s = server.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let s = s.clone();
                        async move { Ok::<_, Infallible>(s.answer(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        api
    }

    /// The URL for a kubeconfig or `kube::Config::new`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds or replaces an object (its namespace and name say which).
    pub fn apply(&self, kind: Kind, mut object: Value) {
        let mut g = self.inner.lock().unwrap();
        g.revision += 1;
        let rv = g.revision.to_string();
        object["apiVersion"] = json!(kind.api_version());
        object["kind"] = json!(match kind {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
        });
        object["metadata"]["resourceVersion"] = json!(rv);
        let key = key(kind, &object);
        let verb = if g.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        g.objects.insert(key, object.clone());
        g.send(kind, verb, object);
    }

    /// Deletes an object.
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) {
        let mut g = self.inner.lock().unwrap();
        g.revision += 1;
        let rv = g.revision.to_string();
        if let Some(mut o) = g.objects.remove(&(kind, namespace.to_string(), name.to_string())) {
            o["metadata"]["resourceVersion"] = json!(rv);
            g.send(kind, "DELETED", o);
        }
    }

    /// Answers lists of `kind` with 403, as for a service account without
    /// the permission (`true`), or as usual. (Not 503: kube's client
    /// retries those by itself for minutes.)
    pub fn fail_lists(&self, kind: Kind, fail: bool) {
        let mut g = self.inner.lock().unwrap();
        g.failing.retain(|&k| k != kind);
        if fail {
            g.failing.push(kind);
        }
    }

    /// (lists, watches) of `kind` asked for so far.
    pub fn seen(&self, kind: Kind) -> (u32, u32) {
        self.inner
            .lock()
            .unwrap()
            .seen
            .get(&kind)
            .copied()
            .unwrap_or_default()
    }

    /// The Events created so far.
    pub fn events(&self) -> Vec<Value> {
        self.inner.lock().unwrap().events.clone()
    }

    /// Refuses Events with 403, as for a service account without the
    /// permission (`true`), or takes them.
    pub fn refuse_events(&self, refuse: bool) {
        self.inner.lock().unwrap().refuse_events = refuse;
    }

    async fn answer(&self, req: Request<hyper::body::Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
        if req.method() == hyper::Method::POST {
            return self.post(req).await;
        }
        self.get(req)
    }

    /// An Event created.
    async fn post(&self, req: Request<hyper::body::Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
        let path = req.uri().path().to_string();
        let ns = path
            .strip_prefix("/apis/events.k8s.io/v1/namespaces/")
            .and_then(|rest| rest.strip_suffix("/events"));
        let Some(ns) = ns.map(str::to_string) else {
            return status(StatusCode::NOT_FOUND, &format!("no POST {path} here"));
        };
        let Ok(body) = req.into_body().collect().await else {
            return status(StatusCode::BAD_REQUEST, "no body");
        };
        let Ok(mut event) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
            return status(StatusCode::BAD_REQUEST, "not JSON");
        };
        let mut g = self.inner.lock().unwrap();
        if g.refuse_events {
            return status(StatusCode::FORBIDDEN, "events refused on purpose");
        }
        if event["metadata"]["namespace"] != json!(ns) {
            return status(
                StatusCode::BAD_REQUEST,
                "the namespace of the path and of the event differ",
            );
        }
        g.revision += 1;
        event["metadata"]["resourceVersion"] = json!(g.revision.to_string());
        g.events.push(event.clone());
        Response::builder()
            .status(StatusCode::CREATED)
            .header("content-type", "application/json")
            .body(BodyExt::boxed(Full::new(Bytes::from(event.to_string()))))
            .unwrap()
    }

    fn get(&self, req: Request<hyper::body::Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
        let kind = match req.uri().path() {
            "/api/v1/services" => Kind::Service,
            "/apis/discovery.k8s.io/v1/endpointslices" => Kind::EndpointSlice,
            other => return status(StatusCode::NOT_FOUND, &format!("no {other} here")),
        };
        let watch = req
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .any(|kv| kv == "watch=true");
        let mut g = self.inner.lock().unwrap();
        let seen = g.seen.entry(kind).or_default();
        if watch {
            seen.1 += 1;
            let (tx, rx) = mpsc::unbounded_channel();
            g.watchers.push((kind, tx));
            let body = StreamBody::new(futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
            }));
            return Response::builder()
                .header("content-type", "application/json")
                .body(BodyExt::boxed(body))
                .unwrap();
        }
        seen.0 += 1;
        if g.failing.contains(&kind) {
            return status(StatusCode::FORBIDDEN, "failing on purpose");
        }
        let items: Vec<Value> = g
            .objects
            .iter()
            .filter(|((k, _, _), _)| *k == kind)
            .map(|(_, v)| v.clone())
            .collect();
        let list = json!({
            "apiVersion": kind.api_version(),
            "kind": kind.list_kind(),
            "metadata": {"resourceVersion": g.revision.to_string()},
            "items": items,
        });
        Response::builder()
            .header("content-type", "application/json")
            .body(BodyExt::boxed(Full::new(Bytes::from(list.to_string()))))
            .unwrap()
    }
}

impl Inner {
    fn send(&mut self, kind: Kind, verb: &str, object: Value) {
        let mut line = json!({"type": verb, "object": object}).to_string();
        line.push('\n');
        let line = Bytes::from(line);
        self.watchers
            .retain(|(k, tx)| *k != kind || tx.send(line.clone()).is_ok());
    }
}

fn key(kind: Kind, o: &Value) -> (Kind, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (kind, s(&o["metadata"]["namespace"]), s(&o["metadata"]["name"]))
}

fn status(code: StatusCode, message: &str) -> Response<BoxBody<Bytes, Infallible>> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "code": code.as_u16(),
    });
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(Full::new(Bytes::from(body.to_string()))))
        .unwrap()
}
