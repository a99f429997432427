//! Tests of the generator's pacing and of its checker's verdicts on the
//! frames that come back.

use super::*;

fn plan(dut: Dut) -> Plan {
    Plan {
        dut,
        traffic: Traffic::Established,
        proto: Proto::Tcp,
        vips: vec![(Ipv4Addr::new(10, 0, 0, 100), 80)],
        backends: (1..=3).map(|i| (Ipv4Addr::new(10, 0, 1, i), 8080)).collect(),
        snat: Ipv4Addr::new(10, 0, 0, 200),
        snat_count: 2,
        client_base: Ipv4Addr::new(10, 128, 0, 1),
        clients: 4,
        ports: 16,
        frame_len: 60,
        reply: true,
        new_share: 0.0,
    }
}

/// A forward packet of `flow` as the emulated backend receives it.
fn fwd(plan: &Plan, flow: u32, src: (Ipv4Addr, u16), backend: usize) -> Seen {
    Seen {
        src_mac: [2; 6],
        src,
        dst: plan.backends[backend],
        proto: Proto::Tcp,
        flags: ACK,
        words: (7, flow),
    }
}

#[test]
fn warm_up_forgives_a_pace_debt_the_measured_period_keeps() {
    let burst = BURST_MAX as u64;
    // On pace: what the rate allows, a burst at most, either way.
    for measuring in [false, true] {
        let mut sent = 990;
        assert_eq!(paced(2_000.0, 0.5, &mut sent, measuring), 10);
        assert_eq!(sent, 990);
        let mut sent = 900;
        assert_eq!(paced(2_000.0, 0.5, &mut sent, measuring), BURST_MAX);
        assert_eq!(sent, 900);
    }
    // A second behind at 0.2 Mpps: the measured period sends bursts
    // until it has caught up; warm-up only the last WARMUP_CATCH_UP.
    let mut sent = 0;
    assert_eq!(paced(200_000.0, 1.0, &mut sent, true), BURST_MAX);
    assert_eq!(sent, 0);
    let mut sent = 0;
    assert_eq!(paced(200_000.0, 1.0, &mut sent, false), BURST_MAX);
    assert_eq!(sent, 200_000 - WARMUP_CATCH_UP);
    let mut caught_up = 0;
    for _ in 0..100 {
        let n = paced(200_000.0, 1.0, &mut sent, false) as u64;
        sent += n;
        caught_up += n;
    }
    assert_eq!(caught_up, WARMUP_CATCH_UP);
    assert!(WARMUP_CATCH_UP >= burst);
}

#[test]
fn the_checker_counts_each_kind_of_violation() {
    let p = plan(Dut::FullNat);
    let mut g = Generator::new(&p);
    let st = &mut g.st;
    let snat = (Ipv4Addr::new(10, 0, 0, 201), 5000);
    forward_arrival(st, &fwd(&p, 3, snat, 0));
    forward_arrival(st, &fwd(&p, 3, snat, 0));
    assert_eq!(st.c.violations(), 0, "{:?}", st.c);
    assert_eq!(st.reply.len(), 2, "each forward packet is answered");
    // The same SNAT endpoint on another flow: fine toward another
    // backend, a reuse toward the same one.
    forward_arrival(st, &fwd(&p, 4, snat, 1));
    assert_eq!(st.c.violations(), 0, "{:?}", st.c);
    forward_arrival(st, &fwd(&p, 5, snat, 0));
    assert_eq!(st.c.snat_reused, 1);
    // Flow 3 on another backend.
    forward_arrival(st, &fwd(&p, 3, snat, 2));
    assert_eq!(st.c.backend_changed, 1);
    // Not an SNAT address (the client's own).
    forward_arrival(st, &fwd(&p, 6, p.client(6), 0));
    assert_eq!(st.c.wrong_source, 1);
    // Not a backend.
    let mut s = fwd(&p, 7, snat, 0);
    s.dst.1 = 8081;
    forward_arrival(st, &s);
    assert_eq!(st.c.wrong_backend, 1);
    // A reply from the VIP to the flow's client is fine; from elsewhere,
    // or to another flow's client, it is not.
    let reply = |src, flow: u32, to| Seen {
        src_mac: [2; 6],
        src,
        dst: to,
        proto: Proto::Tcp,
        flags: ACK,
        words: (flow, 7),
    };
    reply_arrival(st, &reply(p.vips[0], 3, p.client(3)));
    assert_eq!((st.c.rx_reply, st.c.wrong_reply), (1, 0));
    reply_arrival(st, &reply(p.backends[0], 3, p.client(3)));
    reply_arrival(st, &reply(p.vips[0], 3, p.client(4)));
    assert_eq!(st.c.wrong_reply, 2);
    // Flow 3 now with another SNAT port: a new connection for a live flow.
    forward_arrival(st, &fwd(&p, 3, (snat.0, snat.1 + 1), 0));
    assert_eq!(st.c.snat_changed, 1);
    assert_eq!(st.c.violations(), 7, "{:?}", st.c);
}

#[test]
fn dnat_wants_the_client_as_the_source() {
    let p = plan(Dut::Dnat);
    let mut g = Generator::new(&p);
    let st = &mut g.st;
    forward_arrival(st, &fwd(&p, 9, p.client(9), 1));
    assert_eq!(st.c.violations(), 0, "{:?}", st.c);
    forward_arrival(st, &fwd(&p, 9, p.client(10), 1));
    forward_arrival(st, &fwd(&p, 9, (Ipv4Addr::new(10, 0, 0, 200), 5000), 1));
    assert_eq!(st.c.wrong_source, 2);
}

#[test]
fn mixed_in_syns_are_not_answered_and_not_tracked() {
    let mut p = plan(Dut::FullNat);
    p.new_share = 0.5;
    let mut g = Generator::new(&p);
    let st = &mut g.st;
    let new_flow = p.flows() as u32 + 5;
    let mut s = fwd(&p, new_flow, (Ipv4Addr::new(10, 0, 0, 200), 6000), 0);
    s.flags = SYN;
    forward_arrival(st, &s);
    forward_arrival(st, &s);
    assert_eq!(st.c.violations(), 0, "{:?}", st.c);
    assert!(st.reply.is_empty());
    assert_eq!(p.flow_of(p.client(new_flow)), Some(new_flow));
}
