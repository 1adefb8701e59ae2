//! `[[policies]]`: every policy checked field by field, names checked for duplicates.

use super::*;

impl Reader<'_> {
    /// Every `[[policies]]` entry, with the span of its name for route errors.
    pub(super) fn policies(
        &mut self,
        value: Option<&Value<'_>>,
    ) -> Vec<(Arc<Policy>, Range<usize>)> {
        let Some(value) = value else {
            return Vec::new();
        };
        let Some(entries) = self.array_of_tables(value, "policies") else {
            return Vec::new();
        };
        let mut out: Vec<(Arc<Policy>, Range<usize>)> = Vec::new();
        for (table, span) in entries {
            // Names are checked for duplicates (and later found by routes) even when the
            // rest of their policy is invalid, so one mistake does not cascade.
            let name = table
                .get("name")
                .and_then(|v| v.get_ref().as_str().map(|n| (n.to_owned(), v.span())));
            if let Some((name, name_span)) = &name {
                if self.defined.contains(name) {
                    self.c
                        .error(name_span.clone(), format!("duplicate policy name {name:?}"));
                    // Still check the rest of it, so its other mistakes show too.
                    let _ = self.policy(table, span);
                    continue;
                }
                self.defined.push(name.clone());
            }
            if let Some((policy, name_span)) = self.policy(table, span) {
                out.push((Arc::new(policy), name_span));
            }
        }
        out
    }

    /// One `[[policies]]` table: the reader checks what TOML decides (unknown fields,
    /// types, the required `name`, `algorithm` and `limit`); [`PolicySpec::validate`] checks
    /// everything else, and each of its errors is reported at its field's place.
    pub(super) fn policy(
        &mut self,
        t: &DeTable<'_>,
        span: Range<usize>,
    ) -> Option<(Policy, Range<usize>)> {
        let what = "policy";
        self.unknown(t, "[[policies]]", POLICY);
        let before = self.c_len();
        let name = self.required::<String>(t, "name", what, &span);
        let algorithm = self.required::<AlgorithmKind>(t, "algorithm", what, &span);
        let limit = self.required::<u64>(t, "limit", what, &span);
        let mut text = |key: &str| self.get::<String>(t, key, what).map(Spanned::into_inner);
        let (period, lease, max_delay) = (text("period"), text("lease"), text("max_delay"));
        let (penalty, calendar, timezone) = (text("penalty"), text("calendar"), text("timezone"));
        let burst = self.get::<u64>(t, "burst", what).map(Spanned::into_inner);
        let mode = self.get::<Mode>(t, "mode", what).map(Spanned::into_inner);
        let on_store_error = self.get::<OnStoreError>(t, "on_store_error", what);
        let spec = PolicySpec {
            name: name?.into_inner(),
            algorithm: algorithm?.into_inner(),
            limit: limit?.into_inner(),
            period: period.unwrap_or_default(),
            lease,
            burst,
            mode: mode.unwrap_or_default(),
            max_delay,
            on_store_error: on_store_error.map(Spanned::into_inner).unwrap_or_default(),
            penalty,
            calendar,
            timezone,
        };
        if self.c_len() > before {
            return None;
        }
        let name_span = t.get("name").map_or(span.clone(), |v| v.span());
        match spec.validate() {
            Ok(policy) => {
                self.specs.push(spec);
                Some((policy, name_span))
            }
            Err(errors) => {
                for e in errors {
                    let at = t.get(e.field).map_or(span.clone(), |v| v.span());
                    self.c.error(at, e.to_string());
                }
                None
            }
        }
    }
}
