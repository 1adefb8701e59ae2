//! `[[pools]]` (fair throttling), checked here for spans, then by the throttle crate's own
//! validation; and the `pool`, `level` and `weight` of a route.

use sluicegate_middleware::RoutePool;
use sluicegate_throttle::{Capacity, PoolError, PoolSpec, ValidPool};

use super::*;

/// `concurrency`: a number or `"adaptive"`.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Concurrency {
    Slots(u32),
    Word(String),
}

impl Reader<'_> {
    pub(super) fn pools(&mut self, value: Option<&Value<'_>>) -> Vec<ValidPool> {
        let Some(value) = value else {
            return Vec::new();
        };
        let Some(entries) = self.array_of_tables(value, "pools") else {
            return Vec::new();
        };
        let mut out: Vec<ValidPool> = Vec::new();
        for (t, span) in entries {
            let Some(pool) = self.pool(t, span) else {
                continue;
            };
            if out.iter().any(|p| p.name() == pool.name()) {
                let at = t.get("name").map_or(0..0, |v| v.span());
                self.c
                    .error(at, format!("pool {:?} is defined twice", pool.name()));
                continue;
            }
            out.push(pool);
        }
        out
    }

    fn pool(&mut self, t: &DeTable<'_>, span: Range<usize>) -> Option<ValidPool> {
        let what = "pool";
        self.unknown(t, "[[pools]]", POOL);
        let before = self.c_len();
        let name = self.required::<String>(t, "name", what, &span);
        let concurrency = self.required::<Concurrency>(t, "concurrency", what, &span);
        let min = self.get::<u32>(t, "min_concurrency", what);
        let max = self.get::<u32>(t, "max_concurrency", what);
        let capacity = match concurrency.as_ref().map(|c| (c.span(), c.get_ref())) {
            Some((_, Concurrency::Slots(n))) => {
                for bound in [&min, &max].into_iter().flatten() {
                    self.c.error(
                        bound.span(),
                        "min_concurrency and max_concurrency are for concurrency = \"adaptive\"",
                    );
                }
                Capacity::Fixed(*n)
            }
            Some((_, Concurrency::Word(w))) if w == "adaptive" => Capacity::Adaptive {
                min: min.as_ref().map_or(1, |m| *m.get_ref()),
                max: max.as_ref().map_or(256, |m| *m.get_ref()),
            },
            Some((at, Concurrency::Word(w))) => {
                self.c.error(
                    at,
                    format!("concurrency must be a number or \"adaptive\", not {w:?}"),
                );
                return None;
            }
            None => return None,
        };
        let mut spec = PoolSpec {
            capacity,
            ..PoolSpec::fixed(name.as_ref()?.get_ref().clone(), 1)
        };
        if let Some(queue) = self.get::<u64>(t, "queue", what) {
            spec.queue = usize::try_from(*queue.get_ref()).unwrap_or(usize::MAX);
        }
        if let Some(wait) = self.duration(t, "max_wait", what) {
            spec.max_wait = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
        }
        if let Some(levels) = self.get::<BTreeMap<String, u32>>(t, "levels", what) {
            spec.levels = levels.into_inner().into_iter().collect();
        }
        if self.c_len() > before {
            return None;
        }
        match spec.validate() {
            Ok(valid) => Some(valid),
            Err(e) => {
                let field = match e {
                    PoolError::Name(_) => "name",
                    PoolError::Concurrency(_) | PoolError::AdaptiveBounds { .. } => "concurrency",
                    PoolError::Queue(_) => "queue",
                    PoolError::MaxWait(_) => "max_wait",
                    _ => "levels",
                };
                let at = t.get(field).map_or(span, |v| v.span());
                self.c.error(at, e.to_string());
                None
            }
        }
    }

    /// A route's `pool`, `level` and `weight`, checked against the pools.
    pub(super) fn route_pool(
        &mut self,
        t: &DeTable<'_>,
        path: &str,
        pools: &[ValidPool],
    ) -> (Option<String>, Option<String>, Option<u32>) {
        let what = "route";
        let pool = self.get::<String>(t, "pool", what);
        let level = self.get::<String>(t, "level", what);
        let weight = self.get::<u32>(t, "weight", what);
        let Some(pool) = pool else {
            for (key, given) in [("level", level.is_some()), ("weight", weight.is_some())] {
                if given {
                    let at = t.get(key).map_or(0..0, |v| v.span());
                    self.c
                        .error(at, format!("`{key}` needs `pool` on the route"));
                }
            }
            return (None, None, None);
        };
        let Some(found) = pools.iter().find(|p| p.name() == pool.get_ref()) else {
            self.c.error(
                pool.span(),
                format!(
                    "unknown pool {:?} (not defined in [[pools]])",
                    pool.get_ref()
                ),
            );
            return (None, None, None);
        };
        let wanted = RoutePool {
            pool: pool.get_ref().clone(),
            level: level.as_ref().map(|l| l.get_ref().clone()),
            weight: weight.as_ref().map_or(1, |w| *w.get_ref()),
        };
        if let Err(e) = sluicegate_middleware::pool::resolve_level(found, path, &wanted) {
            let at = match e {
                sluicegate_middleware::PoolBindError::Weight { .. } => {
                    weight.as_ref().map(|w| w.span())
                }
                _ => level.as_ref().map(|l| l.span()),
            };
            self.c.error(at.unwrap_or(pool.span()), e.to_string());
        }
        (
            Some(wanted.pool),
            wanted.level,
            weight.map(|w| w.into_inner()),
        )
    }
}
