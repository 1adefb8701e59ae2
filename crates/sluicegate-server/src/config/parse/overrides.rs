//! `[[overrides]]`: per-key limits, each checked against its policy (and, on Redis, against
//! what the scripts decide exactly).

use sluicegate_core::OverrideSpec;

use super::super::ConfigOverride;
use super::*;

const OVERRIDE: &[&str] = &["policy", "key", "limit", "burst", "period"];

impl Reader<'_> {
    /// Every `[[overrides]]` entry whose policy exists and whose numbers fit it.
    pub(super) fn overrides(
        &mut self,
        value: Option<&Value<'_>>,
        policies: &[(Arc<Policy>, Range<usize>)],
        store: Option<&StoreConfig>,
    ) -> Vec<ConfigOverride> {
        let Some(entries) = value.and_then(|v| self.array_of_tables(v, "overrides")) else {
            return Vec::new();
        };
        let mut out: Vec<ConfigOverride> = Vec::new();
        for (t, span) in entries {
            let what = "override";
            self.unknown(t, "[[overrides]]", OVERRIDE);
            let name = self.required::<String>(t, "policy", what, &span);
            let key = self.required::<String>(t, "key", what, &span);
            let limit = self.required::<u64>(t, "limit", what, &span);
            let burst = self.get::<u64>(t, "burst", what);
            let period = self.get::<String>(t, "period", what);
            let (Some(name), Some(key), Some(limit)) = (name, key, limit) else {
                continue;
            };
            let Some((policy, _)) = policies.iter().find(|(p, _)| p.name() == name.get_ref())
            else {
                if !self.defined.contains(name.get_ref()) {
                    self.c.error(
                        name.span(),
                        format!("unknown policy {:?} in [[overrides]]", name.get_ref()),
                    );
                }
                continue;
            };
            if let Err(e) = sluicegate_core::store::check_key(key.get_ref()) {
                self.c.error(key.span(), e.to_string());
                continue;
            }
            if out
                .iter()
                .any(|o| o.policy == *name.get_ref() && o.key == *key.get_ref())
            {
                self.c.error(
                    key.span(),
                    format!(
                        "a second override of key {:?} under {:?}",
                        key.get_ref(),
                        name.get_ref()
                    ),
                );
                continue;
            }
            let spec = OverrideSpec {
                limit: *limit.get_ref(),
                burst: burst.map(Spanned::into_inner),
                period: period.map(Spanned::into_inner),
            };
            let value = match spec.parse(policy) {
                Ok(value) => value,
                Err(e) => {
                    self.c.error(span.clone(), format!("override: {e}"));
                    continue;
                }
            };
            if self.store_refuses(store, policy, &value, &span) {
                continue;
            }
            out.push(ConfigOverride {
                policy: name.into_inner(),
                key: key.into_inner(),
                value,
            });
        }
        out
    }

    /// Whether the configured store cannot hold `value` (reported): no overrides with
    /// `store.sync`; on Redis, the overridden numbers must be within the scripts' exact range.
    fn store_refuses(
        &mut self,
        store: Option<&StoreConfig>,
        policy: &Policy,
        value: &sluicegate_core::Override,
        span: &Range<usize>,
    ) -> bool {
        if store.is_some_and(|s| s.sync.is_some()) {
            self.c.error(
                span.clone(),
                "overrides are not supported with store.sync (each instance decides from its own copy of the counts)",
            );
            return true;
        }
        if store.is_some_and(|s| s.backend == Backend::Redis)
            && let Ok(numbers) = policy.with_override(value)
            && let Err(e) = sluicegate_redis::check_policy(&numbers)
        {
            self.c.error(span.clone(), format!("override: {e}"));
            return true;
        }
        false
    }
}
