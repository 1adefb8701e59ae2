//! The scheduler on a virtual clock: closed-loop clients (each keeps a fixed number of
//! requests outstanding) against an upstream with a fixed service time per client. Nothing
//! sleeps; every bound below is derived from the configuration.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use proptest::prelude::*;
use sluicegate_throttle::scheduler::{RequestId, Withdraw};
use sluicegate_throttle::{Arrival, PoolSpec, Rejected, Scheduler};

#[derive(Debug, Clone)]
struct Client {
    level: usize,
    weight: u32,
    outstanding: usize,
    service: u64,
}

#[derive(Debug, Default)]
struct Report {
    started: Vec<u64>,
    max_wait: Vec<u64>,
    /// Time-weighted mean of running requests per level.
    mean_running: Vec<f64>,
    peak_running: u32,
}

fn run(spec: PoolSpec, clients: &[Client], horizon: u64) -> Report {
    let valid = spec.validate().unwrap();
    let levels = valid.spec().levels.len();
    let mut s = Scheduler::new(&valid);
    let mut ends: BinaryHeap<Reverse<(u64, RequestId)>> = BinaryHeap::new();
    let mut owner: HashMap<RequestId, (usize, u64)> = HashMap::new();
    let mut report = Report {
        started: vec![0; clients.len()],
        max_wait: vec![0; clients.len()],
        mean_running: vec![0.0; levels],
        peak_running: 0,
    };
    let mut running_time = vec![0u128; levels];
    let mut last = 0u64;
    let start = |id: RequestId,
                 now: u64,
                 ends: &mut BinaryHeap<_>,
                 report: &mut Report,
                 owner: &HashMap<RequestId, (usize, u64)>| {
        let (c, arrived) = owner[&id];
        report.started[c] += 1;
        report.max_wait[c] = report.max_wait[c].max(now - arrived);
        ends.push(Reverse((now + clients[c].service, id)));
    };
    let arrive =
        |c: usize, now: u64, s: &mut Scheduler, owner: &mut HashMap<_, _>| -> Option<RequestId> {
            let cl = &clients[c];
            match s.arrive(now, cl.level, &format!("client-{c}"), cl.weight) {
                Arrival::Admitted(id) => {
                    owner.insert(id, (c, now));
                    Some(id)
                }
                Arrival::Queued { id, displaced } => {
                    assert!(displaced.is_none(), "queues are large enough here");
                    owner.insert(id, (c, now));
                    None
                }
                Arrival::Rejected(r) => panic!("rejected: {r:?}"),
            }
        };
    for (c, client) in clients.iter().enumerate() {
        for _ in 0..client.outstanding {
            if let Some(id) = arrive(c, 0, &mut s, &mut owner) {
                start(id, 0, &mut ends, &mut report, &owner);
            }
        }
    }
    while let Some(Reverse((now, id))) = ends.pop() {
        if now > horizon {
            break;
        }
        for (l, stats) in s.levels().enumerate() {
            running_time[l] += u128::from(stats.running) * u128::from(now - last);
        }
        last = now;
        let (c, _) = owner.remove(&id).unwrap();
        for next in s.release(id, now).admitted {
            start(next, now, &mut ends, &mut report, &owner);
        }
        if let Some(id) = arrive(c, now, &mut s, &mut owner) {
            start(id, now, &mut ends, &mut report, &owner);
        }
        assert!(s.running() <= s.limit());
        assert!(
            s.queued() == 0 || s.running() == s.limit(),
            "a slot idles while requests wait"
        );
        report.peak_running = report.peak_running.max(s.running());
    }
    report.mean_running = running_time
        .iter()
        .map(|t| *t as f64 / last.max(1) as f64)
        .collect();
    report
}

fn heavy(level: usize, weight: u32, outstanding: usize) -> Client {
    Client {
        level,
        weight,
        outstanding,
        service: 10_000,
    }
}

#[test]
fn a_light_client_waits_about_one_service_time_behind_a_heavy_one() {
    // The scenario: pool of 4, heavy keeps 50 in flight, light sends one at a time.
    let spec = PoolSpec::fixed("p", 4).max_wait_micros(3_600_000_000);
    let clients = [heavy(0, 1, 50), heavy(0, 1, 1)];
    let r = run(spec, &clients, 10_000_000);
    assert!(r.max_wait[1] <= 10_000, "light waited {} µs", r.max_wait[1]);
    // FIFO would make it wait behind ~46 others: 46 / 4 × 10 ms.
    assert!(
        r.max_wait[0] >= 100_000,
        "heavy waits behind itself: {}",
        r.max_wait[0]
    );
    assert_eq!(r.peak_running, 4);

    // At worst it re-arrives just after the slots turned over: one per two service times.
    assert!(r.started[1] >= 490, "light got {}", r.started[1]);
}

#[test]
fn an_idle_level_lends_its_share_and_takes_it_back() {
    let spec = PoolSpec::fixed("p", 8)
        .level("critical", 3)
        .level("batch", 1);
    // Only batch: it uses every slot.
    let r = run(spec.clone(), &[heavy(1, 1, 50)], 1_000_000);
    assert!(
        (r.mean_running[1] - 8.0).abs() < 0.01,
        "{:?}",
        r.mean_running
    );
    // Both: 6 and 2.
    let r = run(spec, &[heavy(0, 1, 50), heavy(1, 1, 50)], 10_000_000);
    assert!(
        (r.mean_running[0] - 6.0).abs() < 0.1,
        "{:?}",
        r.mean_running
    );
    assert!(
        (r.mean_running[1] - 2.0).abs() < 0.1,
        "{:?}",
        r.mean_running
    );
}

#[test]
fn a_returning_level_gets_its_share_within_one_service_time() {
    let spec = PoolSpec::fixed("p", 8)
        .level("critical", 3)
        .level("batch", 1);
    let mut s = Scheduler::new(&spec.validate().unwrap());
    let mut batch = Vec::new();
    for _ in 0..8 {
        let Arrival::Admitted(id) = s.arrive(0, 1, "b", 1) else {
            panic!()
        };
        batch.push(id);
    }
    for _ in 0..20 {
        s.arrive(0, 1, "b", 1);
    }
    for i in 0..10 {
        assert!(matches!(
            s.arrive(1, 0, &format!("c{i}"), 1),
            Arrival::Queued { .. }
        ));
    }
    // As the eight batch requests end, critical gets six slots, batch two.
    let mut to_critical = 0;
    for (i, id) in batch.into_iter().enumerate() {
        for next in s.release(id, 10 + i as u64).admitted {
            to_critical += usize::from(s.level_of(next) == Some(0));
        }
    }
    assert_eq!(to_critical, 6);
    let running: Vec<u32> = s.levels().map(|l| l.running).collect();
    assert_eq!(running, vec![6, 2]);
}

#[test]
fn a_full_queue_pushes_out_the_heaviest_flow() {
    let spec = PoolSpec::fixed("p", 1).queue(3);
    let mut s = Scheduler::new(&spec.validate().unwrap());
    assert!(matches!(s.arrive(0, 0, "heavy", 1), Arrival::Admitted(_)));
    let mut queued = Vec::new();
    for _ in 0..3 {
        let Arrival::Queued {
            id,
            displaced: None,
        } = s.arrive(0, 0, "heavy", 1)
        else {
            panic!()
        };
        queued.push(id);
    }
    // The heavy flow's own next request finds the queue full: refused.
    assert_eq!(
        s.arrive(0, 0, "heavy", 1),
        Arrival::Rejected(Rejected::QueueFull)
    );
    // A light flow's pushes out heavy's newest.
    let Arrival::Queued { displaced, .. } = s.arrive(0, 0, "light", 1) else {
        panic!()
    };
    assert_eq!(displaced, Some(queued[2]));
    assert_eq!(s.queued(), 3);
    // A second light request: heavy has 2, light 1: no longer two more, refused.
    assert_eq!(
        s.arrive(0, 0, "light", 1),
        Arrival::Rejected(Rejected::QueueFull)
    );
    assert_eq!(s.levels().next().unwrap().rejected_full, 3);
}

#[test]
fn waiting_requests_time_out_and_leave_when_their_client_goes() {
    let spec = PoolSpec::fixed("p", 1).queue(10).max_wait_micros(1_000);
    let mut s = Scheduler::new(&spec.validate().unwrap());
    let Arrival::Admitted(first) = s.arrive(0, 0, "a", 1) else {
        panic!()
    };
    let Arrival::Queued { id: b, .. } = s.arrive(0, 0, "b", 1) else {
        panic!()
    };
    let Arrival::Queued { id: c, .. } = s.arrive(500, 0, "c", 1) else {
        panic!()
    };
    assert_eq!(s.next_deadline(), Some(1_000));
    assert_eq!(s.expire(999), Vec::<RequestId>::new());
    assert_eq!(s.expire(1_000), vec![b]);
    assert_eq!(
        s.withdraw(c, 1_200, Withdraw::Gone),
        (true, Default::default())
    );
    assert_eq!(s.queued(), 0);
    assert!(s.release(first, 1_300).admitted.is_empty());
    let stats = s.levels().next().unwrap();
    assert_eq!(
        (stats.rejected_timeout, stats.cancelled, stats.running),
        (1, 1, 0)
    );
    // A running request withdrawn frees its slot for the next.
    let Arrival::Admitted(d) = s.arrive(2_000, 0, "d", 1) else {
        panic!()
    };
    let Arrival::Queued { id: e, .. } = s.arrive(2_000, 0, "e", 1) else {
        panic!()
    };
    assert_eq!(s.withdraw(d, 2_100, Withdraw::Gone).1.admitted, vec![e]);
}

fn clients() -> impl Strategy<Value = Vec<Client>> {
    prop::collection::vec(
        (
            0usize..2,
            1u32..4,
            prop_oneof![Just(1usize), 2usize..40],
            1_000u64..20_000,
        )
            .prop_map(|(level, weight, outstanding, service)| Client {
                level,
                weight,
                outstanding,
                service,
            }),
        1..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Every client gets served, and a one-at-a-time client never waits longer than it takes
    /// every flow ahead of it to be served once.
    #[test]
    fn no_flow_starves(limit in 1u32..12, shares in (1u32..5, 1u32..5), clients in clients()) {
        let spec = PoolSpec::fixed("p", limit)
            .max_wait_micros(3_600_000_000)
            .level("a", shares.0)
            .level("b", shares.1);
        let horizon = 2_000_000;
        let r = run(spec, &clients, horizon);
        let longest = clients.iter().map(|c| c.service).max().unwrap();
        for (c, client) in clients.iter().enumerate() {
            prop_assert!(r.started[c] > 0, "client {c} starved: {:?}", r.started);
            // Bound: every other flow once, every level's slots turning over once.
            let others: usize = clients.len();
            let bound = (others as u64 / u64::from(limit) + 2) * longest * 4;
            if client.outstanding == 1 && clients.iter().filter(|o| o.level == client.level).count() == 1 {
                prop_assert!(r.max_wait[c] <= bound, "client {c} waited {} > {bound}", r.max_wait[c]);
            }
        }
    }

    /// Two saturated levels split the slots by their shares, within one slot.
    #[test]
    fn shares_are_respected_within_one_slot(limit in 2u32..24, a in 1u32..6, b in 1u32..6) {
        let spec = PoolSpec::fixed("p", limit).max_wait_micros(3_600_000_000).level("a", a).level("b", b);
        let clients = [heavy(0, 1, 64), heavy(1, 1, 64), heavy(1, 2, 64)];
        let r = run(spec, &clients, 2_000_000);
        let total = f64::from(a + b);
        for (l, share) in [a, b].into_iter().enumerate() {
            let nominal = f64::from(limit) * f64::from(share) / total;
            prop_assert!((r.mean_running[l] - nominal).abs() <= 1.0, "level {l}: {} vs {nominal}", r.mean_running[l]);
        }
    }

    /// Saturated flows of one level get service in proportion to their weights.
    #[test]
    fn weights_are_respected(limit in 1u32..8, weights in prop::collection::vec(1u32..5, 2..5)) {
        let spec = PoolSpec::fixed("p", limit).max_wait_micros(3_600_000_000);
        let clients: Vec<Client> = weights.iter().map(|w| heavy(0, *w, 40)).collect();
        let r = run(spec, &clients, 4_000_000);
        let total_w: u32 = weights.iter().sum();
        let total: u64 = r.started.iter().sum();
        for (c, w) in weights.iter().enumerate() {
            let expected = total as f64 * f64::from(*w) / f64::from(total_w);
            let got = r.started[c] as f64;
            prop_assert!((got - expected).abs() <= expected * 0.05 + 2.0 * f64::from(limit), "client {c}: {got} vs {expected}");
        }
    }

    /// Under any sequence of arrivals, releases, withdrawals and expiries: never more than
    /// the limit running, never more than the queue waiting, never a free slot while
    /// someone waits, and the level counters add up.
    #[test]
    fn invariants_hold_under_any_operations(
        limit in 1u32..6,
        queue in 0usize..8,
        ops in prop::collection::vec((0u8..4, 0usize..3, 0usize..4), 1..300),
    ) {
        let spec = PoolSpec::fixed("p", limit).queue(queue).max_wait_micros(50).level("x", 2).level("y", 1);
        let mut s = Scheduler::new(&spec.validate().unwrap());
        let mut running: Vec<RequestId> = Vec::new();
        let mut waiting: Vec<RequestId> = Vec::new();
        let mut now = 0;
        for (op, level, flow) in ops {
            now += 7;
            match op {
                0 | 1 => match s.arrive(now, level, &format!("f{flow}"), 1) {
                    Arrival::Admitted(id) => running.push(id),
                    Arrival::Queued { id, displaced } => {
                        waiting.push(id);
                        waiting.retain(|w| Some(*w) != displaced);
                    }
                    Arrival::Rejected(_) => prop_assert!(s.queued() == queue),
                },
                2 if !running.is_empty() => {
                    let id = running.remove(flow % running.len());
                    for a in s.release(id, now).admitted {
                        waiting.retain(|w| *w != a);
                        running.push(a);
                    }
                }
                3 if !waiting.is_empty() => {
                    let id = waiting.remove(flow % waiting.len());
                    prop_assert!(s.withdraw(id, now, Withdraw::Gone).0);
                }
                _ => {
                    for id in s.expire(now) {
                        waiting.retain(|w| *w != id);
                    }
                }
            }
            prop_assert!(s.running() <= s.limit());
            prop_assert!(s.queued() <= queue);
            prop_assert!(s.queued() == 0 || s.running() == s.limit());
            prop_assert_eq!(s.running() as usize, running.len());
            prop_assert_eq!(s.queued(), waiting.len());
            let (r, q) = s.levels().fold((0, 0), |(r, q), l| (r + l.running, q + l.queued));
            prop_assert_eq!((r, q), (s.running(), s.queued()));
        }
    }
}
