//! `[[pools]]` (fair throttling), checked here for spans, then by the throttle crate's own
//! validation; and the `pool`, `level` and `weight` of a route.

use serde::Deserialize;
use sluicegate_middleware::RoutePool;
use sluicegate_throttle::{Capacity, PoolField, PoolSpec, ValidPool};

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
            if let Some(DeValue::String(name)) = t.get("name").map(|n| n.get_ref()) {
                self.pools_defined.push(name.to_string());
            }
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

    /// One `[[pools]]` table. Every error is reported, each at its own field (a level's
    /// name or shares at that level); the bounds themselves are the throttle crate's
    /// ([`PoolSpec::problems`]).
    fn pool(&mut self, t: &DeTable<'_>, span: Range<usize>) -> Option<ValidPool> {
        let what = "pool";
        self.unknown(t, "[[pools]]", POOL);
        let before = self.c_len();
        let name = self.required::<String>(t, "name", what, &span);
        let concurrency = self.required::<Concurrency>(t, "concurrency", what, &span);
        let min = self.get::<u32>(t, "min_concurrency", what);
        let max = self.get::<u32>(t, "max_concurrency", what);
        let capacity = self.capacity(concurrency.as_ref(), min.as_ref(), max.as_ref());
        let mut spec = PoolSpec {
            capacity: capacity.unwrap_or(Capacity::Fixed(1)),
            // A missing name is reported above; a placeholder lets the rest be checked.
            ..PoolSpec::fixed(name.as_ref().map_or("_", |n| n.get_ref().as_str()), 1)
        };
        if let Some(queue) = self.get::<u64>(t, "queue", what) {
            spec.queue = usize::try_from(*queue.get_ref()).unwrap_or(usize::MAX);
        }
        if let Some(wait) = self.duration(t, "max_wait", what) {
            spec.max_wait = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
            if spec.queue == 0 {
                let at = t.get("max_wait").map_or(span.clone(), |v| v.span());
                self.c.error(
                    at,
                    "max_wait has no effect with queue = 0 (nothing waits: a request finding \
                     every slot taken is refused at once); remove it or give the pool a queue",
                );
            }
        }
        let levels = self.levels(t);
        spec.levels = levels
            .iter()
            .map(|(l, s)| (l.get_ref().clone(), *s.get_ref()))
            .collect();
        for problem in spec.problems() {
            let field = |key: &str| t.get(key).map(|v| v.span());
            let level = |name: &str, shares: bool| {
                levels
                    .iter()
                    .find(|(l, _)| l.get_ref() == name)
                    .map(|(l, s)| if shares { s.span() } else { l.span() })
            };
            let at = match problem.field() {
                PoolField::Name => field("name"),
                PoolField::Concurrency => field("concurrency"),
                PoolField::MinConcurrency => field("min_concurrency").or(field("concurrency")),
                PoolField::MaxConcurrency => field("max_concurrency").or(field("concurrency")),
                PoolField::Queue => field("queue"),
                PoolField::MaxWait => field("max_wait"),
                PoolField::Levels => field("levels"),
                PoolField::LevelName(l) => level(&l, false),
                PoolField::LevelShares(l) => level(&l, true),
            };
            self.c
                .error(at.unwrap_or(span.clone()), problem.to_string());
        }
        if self.c_len() > before || capacity.is_none() {
            return None;
        }
        spec.validate().ok()
    }

    /// `concurrency` with its adaptive bounds (errors recorded; `None` when unusable).
    fn capacity(
        &mut self,
        concurrency: Option<&Spanned<Concurrency>>,
        min: Option<&Spanned<u32>>,
        max: Option<&Spanned<u32>>,
    ) -> Option<Capacity> {
        match concurrency?.get_ref() {
            Concurrency::Slots(n) => {
                for bound in [min, max].into_iter().flatten() {
                    self.c.error(
                        bound.span(),
                        "min_concurrency and max_concurrency are for concurrency = \"adaptive\"",
                    );
                }
                Some(Capacity::Fixed(*n))
            }
            Concurrency::Word(w) if w == "adaptive" => Some(Capacity::Adaptive {
                min: min.map_or(1, |m| *m.get_ref()),
                max: max.map_or(256, |m| *m.get_ref()),
            }),
            Concurrency::Word(w) => {
                self.c.error(
                    concurrency?.span(),
                    format!("concurrency must be a number or \"adaptive\", not {w:?}"),
                );
                None
            }
        }
    }

    /// `levels = { name = shares, … }`, in file order, each with its spans.
    fn levels(&mut self, t: &DeTable<'_>) -> Vec<(Spanned<String>, Spanned<u32>)> {
        let Some(value) = t.get("levels") else {
            return Vec::new();
        };
        let DeValue::Table(table) = value.get_ref() else {
            self.c.error(
                value.span(),
                "pool `levels` must be a table of shares, e.g. { critical = 3, batch = 1 }",
            );
            return Vec::new();
        };
        if table.is_empty() {
            self.c.error(
                value.span(),
                "pool `levels` names no level (leave it out for one level, `default`)",
            );
        }
        let mut out = Vec::new();
        for (key, shares) in table.iter() {
            match u32::deserialize(shares.clone().into_deserializer()) {
                Ok(n) => out.push((
                    Spanned::new(key.span(), key.get_ref().to_string()),
                    Spanned::new(shares.span(), n),
                )),
                Err(e) => self.c.error(
                    shares.span(),
                    format!(
                        "level {:?} shares must be a whole number from 1 to {}: {}",
                        key.get_ref(),
                        sluicegate_throttle::spec::MAX_SHARES,
                        e.message()
                    ),
                ),
            }
        }
        // The table is kept sorted by name; the file's order is the tie-breaker's.
        out.sort_by_key(|(l, _)| l.span().start);
        out
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
            if self.pools_defined.contains(pool.get_ref()) {
                // The pool's own errors are reported where it is defined.
                return (None, None, None);
            }
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
