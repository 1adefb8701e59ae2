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
        // Concurrency has a lease instead of a period (checked with the spec below).
        let concurrency = algorithm
            .as_ref()
            .is_some_and(|a| a.get_ref().is_concurrency());
        let lease = self.get::<String>(t, "lease", what);
        let calendar = self.get::<String>(t, "calendar", what);
        let timezone = self.get::<String>(t, "timezone", what);
        // A calendar replaces the period: exactly one of them.
        let period = match &calendar {
            None if concurrency => self.get::<String>(t, "period", what),
            None => self.required::<String>(t, "period", what, &span),
            Some(cal) => {
                let period = self.get::<String>(t, "period", what);
                if let Some(p) = &period {
                    self.c.error(
                        p.span(),
                        format!(
                            "period and calendar = {:?} both given; the calendar replaces the period",
                            cal.get_ref()
                        ),
                    );
                }
                Some(Spanned::new(cal.span(), String::new()))
            }
        };
        let burst = self.get::<u64>(t, "burst", what);
        let mode = self.get::<Mode>(t, "mode", what);
        let max_delay = self.get::<String>(t, "max_delay", what);
        let on_store_error = self.get::<OnStoreError>(t, "on_store_error", what);
        let penalty = self.get::<String>(t, "penalty", what);

        // Each check on its own, so a policy with three mistakes reports three errors.
        if let Some(name) = &name
            && let Err(e @ PolicyError::InvalidName(_)) = Policy::builder(
                name.get_ref(),
                AlgorithmKind::Gcra,
                1,
                Duration::from_secs(1),
            )
            .build()
        {
            self.c.error(name.span(), e.to_string());
        }
        if let Some(limit) = &limit
            && *limit.get_ref() == 0
        {
            self.c
                .error(limit.span(), PolicyError::ZeroLimit.to_string());
        }
        if let Some(period) = period.as_ref().filter(|_| calendar.is_none()) {
            match parse_duration(period.get_ref()) {
                Ok(d) if d.as_micros() == 0 => self
                    .c
                    .error(period.span(), PolicyError::ZeroPeriod.to_string()),
                Ok(d) if d > MAX_PERIOD => self
                    .c
                    .error(period.span(), PolicyError::TooLong("period").to_string()),
                Ok(_) => {}
                Err(e) => self.c.error(period.span(), e.to_string()),
            }
        }
        if let Some(burst) = &burst
            && *burst.get_ref() == 0
        {
            self.c
                .error(burst.span(), PolicyError::ZeroBurst.to_string());
        }
        if let (Some(mode), Some(algorithm)) = (&mode, &algorithm)
            && *mode.get_ref() == Mode::Delay
            && !algorithm.get_ref().supports_delay()
        {
            self.c.error(
                mode.span(),
                PolicyError::DelayOnWindow(*algorithm.get_ref()).to_string(),
            );
        }
        if let Some(max_delay) = &max_delay {
            match parse_duration(max_delay.get_ref()) {
                Ok(d) if d > MAX_PERIOD => self.c.error(
                    max_delay.span(),
                    PolicyError::TooLong("max_delay").to_string(),
                ),
                Ok(_) => {}
                Err(e) => self.c.error(max_delay.span(), e.to_string()),
            }
        }
        if let Some(penalty) = &penalty {
            match parse_duration(penalty.get_ref()) {
                Ok(d) if d.is_zero() => self.c.error(
                    penalty.span(),
                    "penalty must be longer than 0 (remove it for no penalty)",
                ),
                Ok(d)
                    if sluicegate_core::clock::micros(d) > sluicegate_core::policy::MAX_PENALTY =>
                {
                    self.c
                        .error(penalty.span(), PolicyError::PenaltyTooLong.to_string())
                }
                Ok(_) => {}
                Err(e) => self.c.error(penalty.span(), e.to_string()),
            }
        }
        if let Err(e) = sluicegate_core::spec::parse_calendar(
            calendar.as_ref().map(|c| c.get_ref().as_str()),
            timezone.as_ref().map(|z| z.get_ref().as_str()),
        ) {
            let at = timezone.as_ref().or(calendar.as_ref()).map(Spanned::span);
            self.c.error(at.unwrap_or(span.clone()), e.to_string());
        }
        if let (Some(cal), Some(algorithm)) = (&calendar, &algorithm)
            && *algorithm.get_ref() != AlgorithmKind::FixedWindow
        {
            self.c.error(
                cal.span(),
                PolicyError::CalendarNeedsFixedWindow(*algorithm.get_ref()).to_string(),
            );
        }
        self.concurrency_fields(t, concurrency, lease.as_ref());
        if self.c_len() > before {
            return None;
        }
        let (name, algorithm, limit) = (name?, algorithm?, limit?);
        let spec = PolicySpec {
            name: name.get_ref().clone(),
            algorithm: algorithm.into_inner(),
            limit: *limit.get_ref(),
            period: period.map(Spanned::into_inner).unwrap_or_default(),
            lease: lease.map(Spanned::into_inner),
            burst: burst.map(Spanned::into_inner),
            mode: mode.map(Spanned::into_inner).unwrap_or_default(),
            max_delay: max_delay.map(Spanned::into_inner),
            on_store_error: on_store_error.map(Spanned::into_inner).unwrap_or_default(),
            penalty: penalty.map(Spanned::into_inner),
            calendar: calendar.map(Spanned::into_inner),
            timezone: timezone.map(Spanned::into_inner),
        };
        match spec.build() {
            Ok(policy) => Some((policy, name.span())),
            Err(e) => {
                // Only the cross-field limits (overflow) are left at this point.
                self.c.error(limit.span(), e.to_string());
                None
            }
        }
    }
}

impl Reader<'_> {
    /// The fields that only one kind of policy has: `lease` (concurrency), `period`,
    /// `burst` and `max_delay` (rate algorithms), each reported at its own line.
    fn concurrency_fields(
        &mut self,
        t: &DeTable<'_>,
        concurrency: bool,
        lease: Option<&Spanned<String>>,
    ) {
        if let Some(lease) = lease {
            if !concurrency {
                self.c.error(
                    lease.span(),
                    "lease is for algorithm \"concurrency\" only".to_owned(),
                );
            } else {
                match parse_duration(lease.get_ref()) {
                    Ok(d) if d.as_micros() == 0 => self
                        .c
                        .error(lease.span(), "lease must be at least 1µs".to_owned()),
                    Ok(_) => {}
                    Err(e) => self.c.error(lease.span(), e.to_string()),
                }
            }
        }
        if !concurrency {
            return;
        }
        for (field, why) in [
            (
                "period",
                "concurrency has no period: set lease (how long an unreleased request holds its slot)",
            ),
            (
                "burst",
                "burst is not used by concurrency: limit is the number in flight",
            ),
            ("max_delay", "max_delay is not used by concurrency"),
        ] {
            if let Some(value) = t.get(field) {
                self.c.error(value.span(), why.to_owned());
            }
        }
    }
}
