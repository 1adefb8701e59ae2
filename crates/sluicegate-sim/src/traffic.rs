//! [`Traffic`]: the requests a simulation offers, as times relative to its start.

use sluicegate_core::Micros;

/// The most requests one simulation holds; bounds the simulator's memory whatever the flags.
pub const MAX_REQUESTS: u64 = 10_000_000;

/// One offered request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Microseconds since the start of the simulation.
    pub at: Micros,
    /// Index into [`Traffic::keys`].
    pub key: u32,
    /// The request's weight: what is charged on arrival (the estimate, when `real` is set).
    pub cost: u64,
    /// How long the request runs once admitted, µs; `None`: it is not modelled (a
    /// concurrency lease is then held until it expires).
    pub duration: Option<Micros>,
    /// The real cost, known when the request ends; `None`: the cost charged is the real one.
    pub real: Option<u64>,
}

impl Arrival {
    /// A request of `cost` at `at` from key `key`, with no duration or real cost.
    pub fn new(at: Micros, key: u32, cost: u64) -> Self {
        Arrival {
            at,
            key,
            cost,
            duration: None,
            real: None,
        }
    }
}

/// Offered requests in time order, and the client keys they name.
///
/// ```
/// use sluicegate_sim::Traffic;
/// let traffic = Traffic::single_key(vec![0, 500, 1_000]);
/// assert_eq!(traffic.arrivals().len(), 3);
/// assert_eq!(traffic.keys(), ["client"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traffic {
    arrivals: Vec<Arrival>,
    keys: Vec<String>,
    duration: Micros,
}

impl Traffic {
    /// Builds traffic from arrivals (sorted here, stably) and the key names they index.
    /// `duration` is extended to cover the last arrival; a `key` index past the end of
    /// `keys` is clamped to the last key, and no keys at all means one key, `client`.
    pub fn new(mut arrivals: Vec<Arrival>, keys: Vec<String>, duration: Micros) -> Self {
        let keys = if keys.is_empty() {
            vec!["client".to_owned()]
        } else {
            keys
        };
        let last_key = u32::try_from(keys.len() - 1).unwrap_or(u32::MAX);
        for arrival in &mut arrivals {
            arrival.key = arrival.key.min(last_key);
        }
        arrivals.sort_by_key(|a| a.at);
        let end = arrivals.last().map_or(0, |a| a.at + 1);
        Traffic {
            arrivals,
            keys,
            duration: duration.max(end),
        }
    }

    /// Requests of cost 1 from one client called `client` at the given times (µs).
    pub fn single_key(times: Vec<Micros>) -> Self {
        let duration = times.iter().max().map_or(0, |t| t + 1);
        let arrivals = times.into_iter().map(|at| Arrival::new(at, 0, 1)).collect();
        Traffic::new(arrivals, vec!["client".to_owned()], duration)
    }

    /// The requests, in time order.
    pub fn arrivals(&self) -> &[Arrival] {
        &self.arrivals
    }

    /// The requests, to change them (then [`Traffic::new`] again).
    pub fn into_arrivals(self) -> Vec<Arrival> {
        self.arrivals
    }

    /// The client keys; [`Arrival::key`] indexes this.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The simulated span, µs.
    pub fn duration(&self) -> Micros {
        self.duration
    }

    /// The largest cost of any request (0 when there are none).
    pub fn max_cost(&self) -> u64 {
        self.arrivals.iter().map(|a| a.cost).max().unwrap_or(0)
    }
}
