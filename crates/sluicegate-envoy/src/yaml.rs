//! envoyproxy/ratelimit's YAML configuration format, read as it is.
//!
//! One file holds one `domain` and a tree of `descriptors`; each has a `key`, an optional
//! `value` (`*` anywhere makes it a wildcard), an optional `rate_limit` {`unit`,
//! `requests_per_unit`, `unit_multiplier`, `name`, `unlimited`, `replaces`}, the flags
//! `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric` and `share_threshold`,
//! and free-form `metadata`. Everything that can be checked is checked while parsing, so
//! each error carries the line and column of the offending descriptor.
//!
//! Where this reader is stricter than envoyproxy/ratelimit (docs/envoy.md lists it): a
//! known key in the wrong place (e.g. `unit` outside `rate_limit`) is an error rather than
//! silently ignored, and a limited `rate_limit` must say `requests_per_unit` (write 0 to
//! block every request, as upstream's zero default would).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The time unit of a `rate_limit`, as envoyproxy/ratelimit spells it (any case).
///
/// Week, month and year follow upstream: 7, 30 and 365 days, windows aligned to the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3600 s.
    Hour,
    /// 86 400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length in seconds.
    ///
    /// ```
    /// use sluicegate_envoy::yaml::Unit;
    /// assert_eq!(Unit::Week.seconds(), 604_800);
    /// ```
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// The unit as a [`Duration`].
    pub fn duration(self) -> Duration {
        Duration::from_secs(self.seconds())
    }

    /// The lower-case name, as written in YAML.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// Parses a unit name in any case.
    ///
    /// ```
    /// use sluicegate_envoy::yaml::Unit;
    /// assert_eq!(Unit::parse("MINUTE"), Some(Unit::Minute));
    /// assert_eq!(Unit::parse("fortnight"), None);
    /// ```
    pub fn parse(text: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|unit| unit.name().eq_ignore_ascii_case(text.trim()))
    }
}

/// A window: a unit times `unit_multiplier` (upstream's field; 1 when absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// The unit.
    pub unit: Unit,
    /// How many units one window lasts, at least 1.
    pub multiplier: u32,
}

impl Window {
    /// One `unit`.
    pub fn of(unit: Unit) -> Window {
        Window {
            unit,
            multiplier: 1,
        }
    }

    /// The window's length in seconds.
    ///
    /// ```
    /// use sluicegate_envoy::yaml::{Unit, Window};
    /// assert_eq!(Window { unit: Unit::Minute, multiplier: 5 }.seconds(), 300);
    /// ```
    pub fn seconds(self) -> u64 {
        self.unit.seconds() * u64::from(self.multiplier)
    }

    /// The window as a [`Duration`].
    pub fn duration(self) -> Duration {
        Duration::from_secs(self.seconds())
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One file: a domain and its descriptor tree.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlConfig {
    /// The domain Envoy names in its `rate_limit` filter (never empty once parsed).
    #[serde(default, deserialize_with = "optional_scalar")]
    pub domain: Option<String>,
    /// The top-level descriptors.
    #[serde(default, deserialize_with = "descriptor_list")]
    pub descriptors: Vec<YamlDescriptor>,
    /// Where `domain:` is written (1-based line and column), for errors about the domain.
    #[serde(skip)]
    pub domain_at: Option<(usize, usize)>,
}

/// One node of the descriptor tree.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlDescriptor {
    /// The entry key to match.
    #[serde(deserialize_with = "non_empty_scalar")]
    pub key: String,
    /// The entry value to match; none matches any value; a trailing `*` matches a prefix.
    #[serde(default, deserialize_with = "optional_scalar")]
    pub value: Option<String>,
    /// The limit applied when a request's descriptor ends at this node.
    #[serde(default)]
    pub rate_limit: Option<YamlRateLimit>,
    /// Report OK whatever the outcome, but count and report what would have happened.
    #[serde(default, deserialize_with = "flag")]
    pub shadow_mode: bool,
    /// A soft limit: over it, the request stays admitted while another quota descriptor of
    /// the request has room.
    #[serde(default, deserialize_with = "flag")]
    pub quota_mode: bool,
    /// Put the request's value into the metric's descriptor label (unbounded cardinality).
    #[serde(default, deserialize_with = "flag")]
    pub detailed_metric: bool,
    /// Put the request's value into the metric label at this level.
    #[serde(default, deserialize_with = "flag")]
    pub value_to_metric: bool,
    /// On a wildcard: every value it matches shares one counter.
    #[serde(default, deserialize_with = "flag")]
    pub share_threshold: bool,
    /// Free-form data returned in the response's dynamic metadata when enabled.
    #[serde(default, deserialize_with = "metadata")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Nested descriptors, matched against the next entry of a request's descriptor.
    #[serde(default, deserialize_with = "descriptor_list")]
    pub descriptors: Vec<YamlDescriptor>,
}

/// A `rate_limit` block.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawRateLimit")]
pub struct YamlRateLimit {
    /// The window; `None` only when `unlimited`.
    pub unit: Option<Window>,
    /// Requests per unit; 0 blocks every request.
    pub requests_per_unit: u32,
    /// A name other rules can `replace`.
    pub name: Option<String>,
    /// No limit: answered OK without touching the store.
    pub unlimited: bool,
    /// Names of limits this one replaces when both match one request.
    pub replaces: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    #[serde(default, deserialize_with = "optional_scalar")]
    unit: Option<String>,
    #[serde(default)]
    requests_per_unit: Option<u32>,
    #[serde(default)]
    unit_multiplier: Option<u32>,
    #[serde(default, deserialize_with = "optional_scalar")]
    name: Option<String>,
    #[serde(default, deserialize_with = "flag")]
    unlimited: bool,
    #[serde(default)]
    replaces: Option<Vec<RawReplaces>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplaces {
    #[serde(default, deserialize_with = "optional_scalar")]
    name: Option<String>,
}

impl TryFrom<RawRateLimit> for YamlRateLimit {
    type Error = String;

    fn try_from(raw: RawRateLimit) -> Result<Self, Self::Error> {
        let unit = match raw.unit.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(Unit::parse(text).ok_or_else(|| {
                format!(
                    "invalid rate limit unit {text:?}; expected second, minute, hour, day, week, month or year"
                )
            })?),
        };
        let multiplier = match raw.unit_multiplier {
            Some(0) => return Err("unit_multiplier must be at least 1".into()),
            Some(n) => n,
            None => 1,
        };
        let unit = unit.map(|unit| Window { unit, multiplier });
        if raw.unlimited && unit.is_some() {
            return Err("an unlimited rate_limit must not have a unit".into());
        }
        if !raw.unlimited && unit.is_none() {
            return Err("rate_limit needs a unit (second, minute, hour, day, week, month or year) or unlimited: true".into());
        }
        if !raw.unlimited && raw.requests_per_unit.is_none() {
            return Err("rate_limit needs requests_per_unit (0 blocks every request)".into());
        }
        let name = raw.name.filter(|n| !n.is_empty());
        let mut replaces = Vec::new();
        for entry in raw.replaces.unwrap_or_default() {
            let replaced = entry
                .name
                .filter(|n| !n.is_empty())
                .ok_or_else(|| "every replaces entry needs a non-empty name".to_owned())?;
            if name.as_deref() == Some(replaced.as_str()) {
                return Err(format!("rate_limit {replaced:?} must not replace itself"));
            }
            replaces.push(replaced);
        }
        Ok(YamlRateLimit {
            unit,
            requests_per_unit: raw.requests_per_unit.unwrap_or(0),
            name,
            unlimited: raw.unlimited,
            replaces,
        })
    }
}

/// A list of descriptors whose `key`/`value` pairs are unique at their level. Each element
/// is checked while its own mapping is read, so a duplicate is reported at its own line.
fn descriptor_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<YamlDescriptor>, D::Error> {
    Ok(Option::<DescriptorList>::deserialize(d)?
        .map(|list| list.0)
        .unwrap_or_default())
}

struct DescriptorList(Vec<YamlDescriptor>);

impl<'de> Deserialize<'de> for DescriptorList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(ListVisitor)
    }
}

struct ListVisitor;

impl<'de> Visitor<'de> for ListVisitor {
    type Value = DescriptorList;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of descriptors")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DescriptorList, A::Error> {
        let mut list: Vec<YamlDescriptor> = Vec::new();
        while let Some(descriptor) = seq.next_element_seed(Unique(&list))? {
            list.push(descriptor);
        }
        Ok(DescriptorList(list))
    }
}

/// One list element, refused when an earlier sibling has its `key` and `value`.
struct Unique<'a>(&'a [YamlDescriptor]);

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = YamlDescriptor;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<YamlDescriptor, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = YamlDescriptor;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a descriptor (a map with key, value, rate_limit, descriptors, ...)")
    }

    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<YamlDescriptor, M::Error> {
        // The error is raised inside this element's mapping, so serde_yaml reports the
        // element's own position.
        let descriptor = YamlDescriptor::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let same = |o: &YamlDescriptor| o.key == descriptor.key && o.value == descriptor.value;
        if self.0.iter().any(same) {
            let shown = match &descriptor.value {
                Some(value) => format!("{}_{}", descriptor.key, value),
                None => descriptor.key.clone(),
            };
            return Err(de::Error::custom(format!(
                "duplicate descriptor composite key {shown:?} at the same level"
            )));
        }
        Ok(descriptor)
    }
}

/// `metadata`: a map of anything YAML can say, kept as JSON values.
fn metadata<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, D::Error> {
    match Option::<serde_json::Value>::deserialize(d)? {
        None => Ok(None),
        Some(serde_json::Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(de::Error::custom("metadata must be a map")),
    }
}

/// A YAML scalar read as text, as Go's YAML decoder does for string fields (`value: 30`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn into_text(self) -> String {
        match self {
            Scalar::Text(text) => text,
            Scalar::Unsigned(n) => n.to_string(),
            Scalar::Signed(n) => n.to_string(),
            Scalar::Float(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

fn optional_scalar<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<Scalar>::deserialize(d)?.map(Scalar::into_text))
}

fn non_empty_scalar<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match optional_scalar(d)? {
        Some(text) if !text.is_empty() => Ok(text),
        _ => Err(de::Error::custom("must not be empty")),
    }
}

/// A boolean that may also be written as null (absent).
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(d)?.unwrap_or(false))
}

/// A YAML error with its position, when serde_yaml knows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", location.map(|(l, c)| format!("line {l}, column {c}: ")).unwrap_or_default())]
pub struct YamlError {
    /// 1-based line and column.
    pub location: Option<(usize, usize)>,
    /// What is wrong.
    pub message: String,
}

/// Parses one envoyproxy/ratelimit file.
///
/// ```
/// use sluicegate_envoy::yaml::{parse, Unit};
/// let config = parse("domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 10}\n").unwrap();
/// assert_eq!(config.descriptors[0].rate_limit.as_ref().unwrap().unit.map(|w| w.unit), Some(Unit::Minute));
/// let error = parse("domain: api\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n").unwrap_err();
/// assert_eq!(error.location.map(|(line, _)| line), Some(3)); // the descriptor holding it
/// ```
pub fn parse(text: &str) -> Result<YamlConfig, YamlError> {
    let mut config: YamlConfig = serde_yaml::from_str(text).map_err(|error| YamlError {
        location: error.location().map(|l| (l.line(), l.column())),
        message: strip_position(&error.to_string()),
    })?;
    config.domain_at = domain_position(text);
    if config.domain.as_deref().is_none_or(str::is_empty) {
        return Err(YamlError {
            location: Some(config.domain_at.unwrap_or((1, 1))),
            message: "domain must not be empty".into(),
        });
    }
    Ok(config)
}

/// Where the top-level `domain:` key is written (serde_yaml keeps no positions of values
/// that parsed): the first unindented line starting with it.
fn domain_position(text: &str) -> Option<(usize, usize)> {
    text.lines()
        .position(|line| line.starts_with("domain:") || line.starts_with("\"domain\":"))
        .map(|i| (i + 1, 1))
}

/// serde_yaml appends " at line L column C" to its messages; the location is reported apart.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}
