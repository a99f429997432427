use super::*;

fn event(revision: u64) -> Arc<CommitEvent> {
    event_of(revision, 1)
}

/// An event of `n` changes.
fn event_of(revision: u64, n: usize) -> Arc<CommitEvent> {
    Arc::new(CommitEvent {
        revision,
        source: Source::Api,
        changes: vec![crate::model::Change::DeleteService("default/web".into()); n],
    })
}

/// A lag bound the tests never reach.
fn no_lag_bound() -> WatchLag {
    WatchLag {
        committed: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        received: 0,
        max: u64::MAX,
    }
}

#[tokio::test]
async fn a_lagging_watcher_is_cut_off_with_data_loss() {
    let (events, rx) = broadcast::channel(2);
    for r in 1..=5 {
        events.send(event(r)).unwrap();
    }
    let (tx, mut out) = mpsc::channel(8);
    let (_closer, closing) = watch::channel(false);
    pump_watch(rx, tx, closing, no_lag_bound()).await;
    let status = out.recv().await.unwrap().unwrap_err();
    assert_eq!(status.code(), tonic::Code::DataLoss);
    assert!(
        status.message().contains("3 commit events were lost"),
        "{}",
        status.message()
    );
    assert!(out.recv().await.is_none(), "the stream ends after the status");
}

#[tokio::test]
async fn watchers_get_events_in_order_then_unavailable_at_shutdown() {
    let (events, rx) = broadcast::channel(16);
    let (tx, mut out) = mpsc::channel(8);
    let (closer, closing) = watch::channel(false);
    let pump = tokio::spawn(pump_watch(rx, tx, closing, no_lag_bound()));
    events.send(event(1)).unwrap();
    events.send(event(2)).unwrap();
    let a = out.recv().await.unwrap().unwrap();
    let b = out.recv().await.unwrap().unwrap();
    assert_eq!((a.revision, b.revision), (1, 2));
    assert!(matches!(
        &a.changes[..],
        [pb::Change {
            change: Some(pb::change::Change::DeleteService(n))
        }] if n == "default/web"
    ));
    closer.send_replace(true);
    let end = out.recv().await.unwrap().unwrap_err();
    assert_eq!(end.code(), tonic::Code::Unavailable);
    pump.await.unwrap();
}

/// At shutdown a watcher that does not read, its stream full, gives up its
/// place in the broadcast buffer at once, and gets UNAVAILABLE after what
/// its stream holds.
#[tokio::test]
async fn a_watcher_that_does_not_read_ends_at_shutdown_too() {
    let (events, rx) = broadcast::channel(16);
    let (tx, mut out) = mpsc::channel(1);
    let (closer, closing) = watch::channel(false);
    let pump = tokio::spawn(pump_watch(rx, tx, closing, no_lag_bound()));
    events.send(event(1)).unwrap();
    events.send(event(2)).unwrap();
    tokio::task::yield_now().await;
    closer.send_replace(true);
    for _ in 0..100 {
        if events.receiver_count() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(events.receiver_count(), 0, "its place given up");
    assert_eq!(out.recv().await.unwrap().unwrap().revision, 1);
    let end = out.recv().await.unwrap().unwrap_err();
    assert_eq!(end.code(), tonic::Code::Unavailable);
    assert!(out.recv().await.is_none());
    pump.await.unwrap();
}

/// A watcher that stops reading while the plane commits more changes than
/// its bound is cut off once it has taken nothing for WATCH_STALL: it gives
/// up its place in the broadcast buffer (the events only it needed are
/// freed), and its stream ends with DATA_LOSS after the events it already
/// held. One that reads is never cut off, however big the commits.
#[tokio::test(start_paused = true)]
async fn a_watcher_too_many_changes_behind_is_cut_off() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (events, rx) = broadcast::channel(1024);
    let committed = Arc::new(AtomicU64::new(0));
    let send = |r: u64, n: usize| {
        committed.fetch_add(n as u64, Ordering::AcqRel);
        events.send(event_of(r, n)).unwrap();
    };
    let (tx, mut out) = mpsc::channel(2);
    let (_closer, closing) = watch::channel(false);
    let lag = WatchLag {
        committed: Arc::clone(&committed),
        received: 0,
        max: 10,
    };
    let pump = tokio::spawn(pump_watch(rx, tx, closing, lag));
    let secs = std::time::Duration::from_secs;
    // Read as it comes: commits of more changes than the bound, arriving
    // while the pump still holds an earlier one, are not a lag.
    for (r, n) in [(1, 1), (2, 50), (3, 50), (4, 50)] {
        send(r, n);
    }
    for r in 1..=4 {
        assert_eq!(out.recv().await.unwrap().unwrap().revision, r);
        tokio::time::sleep(secs(4)).await;
    }
    assert_eq!(events.receiver_count(), 1, "never cut off while reading");
    // Not read: two events fill the stream, the third waits in the pump.
    for r in 5..=7 {
        send(r, 1);
    }
    tokio::time::sleep(secs(3)).await;
    assert_eq!(events.receiver_count(), 1, "within the bound");
    // 11 more changes behind the pump's event: over the bound, but cut
    // off only once the watcher has taken nothing for WATCH_STALL.
    for r in 8..=18 {
        send(r, 1);
    }
    tokio::time::sleep(secs(5)).await;
    assert_eq!(events.receiver_count(), 1, "not stalled for WATCH_STALL yet");
    tokio::time::sleep(secs(3)).await;
    assert_eq!(events.receiver_count(), 0, "its place in the buffer given up");
    assert_eq!(out.recv().await.unwrap().unwrap().revision, 5);
    assert_eq!(out.recv().await.unwrap().unwrap().revision, 6);
    let end = out.recv().await.unwrap().unwrap_err();
    assert_eq!(end.code(), tonic::Code::DataLoss);
    assert!(
        end.message()
            .starts_with("watcher took nothing for 10 s and fell 11 changes behind, more than the 10"),
        "{}",
        end.message()
    );
    assert!(out.recv().await.is_none(), "the stream ends after the status");
    pump.await.unwrap();
}

/// A read that waits for the plane's lock (a long commit holds it)
/// must not hold a runtime thread: on a one-thread runtime, another
/// task still runs while the read waits. Before reads moved to the
/// blocking pool, the read blocked the only thread, so the signal below
/// was never sent and the holder gave up after its bound.
#[tokio::test(flavor = "current_thread")]
async fn a_read_waiting_for_a_commit_leaves_the_runtime_free() {
    let plane = ControlPlane::open(crate::plane::tests::node(), None).unwrap();
    let plane: SharedPlane = Arc::new(Mutex::new(plane));
    let (svc, _closer) = LoadBalancerService::new(Arc::clone(&plane), ServerInfo::new(Vec::new(), 1));
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let _commit = plane.lock().unwrap();
        locked_tx.send(()).unwrap();
        // Bounded: without the fix the signal never comes.
        go_rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok()
    });
    locked_rx.recv().unwrap();
    let reads = [
        tokio::spawn({
            let svc = svc.clone();
            async move {
                svc.get_info(Request::new(pb::GetInfoRequest {}))
                    .await
                    .map(|_| ())
            }
        }),
        tokio::spawn({
            let svc = svc.clone();
            async move {
                svc.list(Request::new(pb::ListRequest::default()))
                    .await
                    .map(|_| ())
            }
        }),
        tokio::spawn({
            let svc = svc.clone();
            async move {
                svc.get_stats(Request::new(pb::GetStatsRequest {}))
                    .await
                    .map(|_| ())
            }
        }),
    ];
    // Let the reads run up to their wait for the lock.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    // This task only runs if no read holds the thread.
    let _ = go_tx.send(());
    assert!(
        tokio::task::spawn_blocking(move || holder.join().unwrap())
            .await
            .unwrap(),
        "the runtime thread was blocked by a read"
    );
    for r in reads {
        r.await.unwrap().unwrap();
    }
}

/// `operator_state` is output only (AIP-203): an Apply or a Resync that
/// carries one, unknown or known, commits its other fields and leaves
/// the operator's state as SetBackendState set it.
#[tokio::test]
async fn requests_ignore_the_output_only_operator_state() {
    use crate::model::{BackendKey, BackendState};
    use pb::change::Change as C;
    let plane = ControlPlane::open(crate::plane::tests::node(), None).unwrap();
    let plane: SharedPlane = Arc::new(Mutex::new(plane));
    let (svc, _closer) = LoadBalancerService::new(Arc::clone(&plane), ServerInfo::new(Vec::new(), 1));
    let service = pb::Service {
        name: "default/web".into(),
        ..Default::default()
    };
    let backend = |weight: u32, operator_state: i32| pb::Backend {
        service: "default/web".into(),
        address: "10.1.0.11".into(),
        port: 8080,
        weight: Some(weight),
        operator_state,
        ..Default::default()
    };
    let apply = |changes: Vec<C>| {
        Request::new(pb::ApplyRequest {
            changes: changes
                .into_iter()
                .map(|c| pb::Change { change: Some(c) })
                .collect(),
            ..Default::default()
        })
    };
    svc.apply(apply(vec![
        C::UpsertService(service.clone()),
        C::UpsertBackend(backend(1, 0)),
    ]))
    .await
    .unwrap();
    svc.set_backend_state(Request::new(pb::SetBackendStateRequest {
        address: "10.1.0.11".into(),
        state: pb::BackendState::Maintenance.into(),
        ..Default::default()
    }))
    .await
    .unwrap();
    let key = BackendKey {
        service: "default/web".into(),
        addr: "10.1.0.11".parse().unwrap(),
        port: 8080,
    };
    let stored = || {
        let p = plane.lock().unwrap();
        let b = &p.state().backends[&key];
        (p.revision(), b.weight, b.operator_state)
    };
    let held = Some(BackendState::Maintenance);
    assert_eq!(stored(), (2, 1, held));
    let active = i32::from(pb::BackendState::Active);
    for (weight, operator_state) in [(2, 99), (3, active)] {
        let r = svc
            .apply(apply(vec![C::UpsertBackend(backend(weight, operator_state))]))
            .await
            .unwrap();
        assert_eq!(r.into_inner().revision, u64::from(weight) + 1);
        assert_eq!(stored(), (u64::from(weight) + 1, weight, held));
    }
    // A resync that names no source is refused whole: it would have
    // deleted everything `api` owns and it does not list.
    let e = svc
        .resync(Request::new(pb::ResyncRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().starts_with("request: source: required in Resync"),
        "{}",
        e.message()
    );
    assert_eq!(stored(), (4, 3, held));
    for (weight, operator_state) in [(4, 99), (5, active)] {
        let r = svc
            .resync(Request::new(pb::ResyncRequest {
                source: pb::Source::Api.into(),
                services: vec![service.clone()],
                backends: vec![backend(weight, operator_state)],
                ..Default::default()
            }))
            .await
            .unwrap();
        assert_eq!(r.into_inner().updated, 1);
        assert_eq!(stored(), (u64::from(weight) + 1, weight, held));
    }
}

#[test]
fn codes_by_kind() {
    assert_eq!(code_of(ErrorKind::Invalid), tonic::Code::InvalidArgument);
    assert_eq!(code_of(ErrorKind::NotFound), tonic::Code::NotFound);
    assert_eq!(code_of(ErrorKind::AlreadyExists), tonic::Code::AlreadyExists);
    assert_eq!(code_of(ErrorKind::Precondition), tonic::Code::FailedPrecondition);
    assert_eq!(code_of(ErrorKind::Unavailable), tonic::Code::Unavailable);
    assert_eq!(code_of(ErrorKind::Internal), tonic::Code::Internal);
    let s = status_from_validation(&ValidationError::invalid("changes[1] frontend", "port", "bad"));
    assert_eq!(s.message(), "changes[1] frontend: port: bad");
}

/// A message over the bound keeps its start and end, is at most the
/// bound, and is cut on character boundaries (a name of `é`s).
#[test]
fn long_messages_lose_their_middle() {
    let short = "changes[0] service \"a/b\": name: bad".to_string();
    assert_eq!(clip_message(short.clone()), short);
    let at = "x".repeat(MAX_STATUS_MESSAGE);
    assert_eq!(clip_message(at.clone()), at);
    for fill in ["a", "é", "日本"] {
        let long = format!(
            "changes[3] service: name: {:?} must be short",
            fill.repeat(30_000)
        );
        let clipped = clip_message(long.clone());
        assert!(clipped.len() <= MAX_STATUS_MESSAGE, "{}", clipped.len());
        assert!(clipped.starts_with("changes[3] service: name: \""), "{clipped}");
        assert!(clipped.ends_with("\" must be short"), "{clipped}");
        assert!(clipped.contains(" bytes left out ...] "), "{clipped}");
        let left_out: usize = clipped
            .split("[... ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap()
            .parse()
            .unwrap();
        let kept =
            clipped.len() - " [... ".len() - left_out.to_string().len() - " bytes left out ...] ".len();
        assert_eq!(kept + left_out, long.len(), "the count is exact");
    }
}

#[test]
fn instance_ids_differ() {
    assert_ne!(new_instance_id(), new_instance_id());
    assert_eq!(format_mac([0x02, 0, 0, 0, 0xab, 1]), "02:00:00:00:ab:01");
}
