//! The descriptor tree of one domain and envoyproxy/ratelimit's matching rules.
//!
//! A request descriptor is a list of entries `(key, value)`. Matching walks the tree one
//! level per entry; at each level the most specific node wins: an exact `key`+`value`
//! node, else the first wildcard node (a value with `*` anywhere, `*` matching any run of
//! characters) in configuration order that the value matches, else a key-only node. The
//! walk does not backtrack. A rule applies only when the descriptor's last entry lands on a
//! node that has one: depth must match, so a two-entry descriptor never uses a one-level
//! rule, nor the reverse.
//!
//! Each distinct value is its own counter, also under a wildcard, unless the wildcard node
//! says `share_threshold: true`: then every value it matches shares one counter.

use std::collections::HashMap;
use std::sync::Arc;

use sluicegate_core::Policy;

use crate::yaml::Window;

/// What a matched rule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleKind {
    /// Check these policies (all must admit), under the descriptor's key.
    Limit(Vec<Arc<Policy>>),
    /// Answer OK with no limit and without touching the store.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over the limit.
    Block(Window),
}

/// A limit attached to a node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The node's path, e.g. `message_type_marketing.to_number`: the metric label.
    pub path: String,
    /// What it does.
    pub kind: RuleKind,
    /// Its `rate_limit.name`, which other rules may replace.
    pub name: Option<String>,
    /// Names of the rules it replaces when both match one request.
    pub replaces: Vec<String>,
    /// Report OK whatever the outcome (its policies are in shadow mode).
    pub shadow: bool,
    /// A soft limit (`quota_mode`): over it, the request is still admitted while another
    /// quota rule of the request has room.
    pub quota: bool,
    /// Append the request's value to the metric label.
    pub detailed_metric: bool,
    /// The rule's `metadata`, returned in the response's dynamic metadata when enabled.
    pub metadata: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
}

/// How a configured value matches a request's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ValueMatch {
    /// Any value.
    Any,
    /// Exactly this value.
    Exact(String),
    /// A pattern with at least one `*`, each matching any run of characters.
    Wildcard(String),
}

impl ValueMatch {
    /// From a configured value: none is [`ValueMatch::Any`], one with `*` a wildcard.
    ///
    /// ```
    /// use sluicegate_envoy::tree::ValueMatch;
    /// assert!(ValueMatch::new(Some("/api/*/action")).matches("/api/v2/action"));
    /// assert!(!ValueMatch::new(Some("/api/*/action")).matches("/api/v2/other"));
    /// assert!(ValueMatch::new(Some("svc*ep*rpc")).matches("svc-a-ep-b-rpc"));
    /// ```
    pub fn new(value: Option<&str>) -> ValueMatch {
        match value {
            None => ValueMatch::Any,
            Some(v) if v.contains('*') => ValueMatch::Wildcard(v.to_owned()),
            Some(v) => ValueMatch::Exact(v.to_owned()),
        }
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            ValueMatch::Any => true,
            ValueMatch::Exact(v) => v == value,
            ValueMatch::Wildcard(pattern) => glob(pattern, value),
        }
    }
}

/// `*`-only glob matching, linear in practice: each `*` takes the shortest run that lets the
/// rest match, backtracking only to the last `*` (no exponential blow-up on hostile values).
fn glob(pattern: &str, value: &str) -> bool {
    let (p, v) = (pattern.as_bytes(), value.as_bytes());
    let (mut pi, mut vi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, vi));
            pi += 1;
        } else if pi < p.len() && p[pi] == v[vi] {
            pi += 1;
            vi += 1;
        } else if let Some((sp, sv)) = star {
            pi = sp + 1;
            vi = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// One entry of a rule's path: a key, how its value is matched, and how it is counted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Step {
    /// The entry key.
    pub key: String,
    /// How the value matches.
    pub value: ValueMatch,
    /// `share_threshold`: every value a wildcard matches shares one counter.
    pub shared: bool,
    /// `value_to_metric`: the request's value goes into the metric label at this level.
    pub value_to_metric: bool,
}

impl Step {
    /// A step from a configured key and optional value (with `*` = wildcard).
    pub fn new(key: &str, value: Option<&str>) -> Step {
        Step {
            key: key.to_owned(),
            value: ValueMatch::new(value),
            shared: false,
            value_to_metric: false,
        }
    }

    /// The path element: `key` or `key_value` (the value as configured, `*` included).
    pub fn label(&self) -> String {
        match &self.value {
            ValueMatch::Any => self.key.clone(),
            ValueMatch::Exact(v) | ValueMatch::Wildcard(v) => format!("{}_{v}", self.key),
        }
    }

    fn same_node(&self, other: &Step) -> bool {
        self.key == other.key && self.value == other.value
    }
}

#[derive(Debug, Clone)]
struct Node {
    step: Step,
    rule: Option<Arc<Rule>>,
    children: Level,
}

#[derive(Debug, Default, Clone)]
struct Level {
    nodes: Vec<Node>,
    exact: HashMap<(String, String), usize>,
    /// Wildcard nodes in configuration order: the first that matches wins.
    wildcards: Vec<usize>,
    any: HashMap<String, usize>,
}

impl Level {
    fn find(&self, key: &str, value: &str) -> Option<&Node> {
        let index = self
            .exact
            .get(&(key.to_owned(), value.to_owned()))
            .copied()
            .or_else(|| {
                self.wildcards.iter().copied().find(|&i| {
                    let step = &self.nodes[i].step;
                    step.key == key && step.value.matches(value)
                })
            })
            .or_else(|| self.any.get(key).copied())?;
        self.nodes.get(index)
    }

    fn child_mut(&mut self, step: &Step) -> &mut Node {
        let existing = self.nodes.iter().position(|n| n.step.same_node(step));
        let index = existing.unwrap_or_else(|| {
            let i = self.nodes.len();
            self.nodes.push(Node {
                step: step.clone(),
                rule: None,
                children: Level::default(),
            });
            match &step.value {
                ValueMatch::Any => {
                    self.any.insert(step.key.clone(), i);
                }
                ValueMatch::Exact(v) => {
                    self.exact.insert((step.key.clone(), v.clone()), i);
                }
                ValueMatch::Wildcard(_) => self.wildcards.push(i),
            }
            i
        });
        // Merged files may set the flags on a node another file made.
        let node = &mut self.nodes[index];
        node.step.shared |= step.shared;
        node.step.value_to_metric |= step.value_to_metric;
        node
    }
}

/// How one entry of a request counts: by its own value, or shared by a wildcard's pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterPart<'a> {
    /// The request's own value.
    Value(&'a str),
    /// Every value the pattern matches shares this counter (`share_threshold`).
    Shared(&'a str),
}

/// A matched rule, its metric label and how each entry counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match<'a> {
    /// The rule.
    pub rule: &'a Arc<Rule>,
    /// The metric label: the rule's path, with request values where `value_to_metric`
    /// asks, and `_<value>` of the last entry with `detailed_metric`.
    pub label: String,
    /// One per entry of the request's descriptor.
    pub counter: Vec<CounterPart<'a>>,
}

/// The rules of one domain.
///
/// ```
/// use sluicegate_envoy::tree::{DomainTree, Rule, RuleKind, Step};
/// let mut tree = DomainTree::default();
/// let rule = Rule { path: "remote_address".into(), kind: RuleKind::Unlimited, name: None,
///     replaces: vec![], shadow: false, quota: false, detailed_metric: false, metadata: None };
/// tree.insert(&[Step::new("remote_address", None)], rule).unwrap();
/// assert!(tree.find(&[("remote_address", "10.0.0.1")]).is_some());
/// assert!(tree.find(&[("remote_address", "10.0.0.1"), ("path", "/")]).is_none());
/// ```
#[derive(Debug, Default, Clone)]
pub struct DomainTree {
    root: Level,
    rules: usize,
}

impl DomainTree {
    /// Attaches `rule` at the end of `path`; an error if that node already has a rule.
    pub fn insert(&mut self, path: &[Step], rule: Rule) -> Result<(), String> {
        if path.is_empty() {
            return Err("a rule needs at least one descriptor entry".to_owned());
        }
        let node = self.node_mut(path);
        if node.rule.is_some() {
            let shown: Vec<String> = path.iter().map(Step::label).collect();
            return Err(format!("descriptor {:?} has two limits", shown.join(".")));
        }
        node.rule = Some(Arc::new(rule));
        self.rules += 1;
        Ok(())
    }

    /// Creates the node at `path` without a rule (a YAML placeholder level).
    pub fn touch(&mut self, path: &[Step]) {
        if !path.is_empty() {
            self.node_mut(path);
        }
    }

    fn node_mut(&mut self, path: &[Step]) -> &mut Node {
        let (last, parents) = path.split_last().expect("a non-empty path");
        let mut level = &mut self.root;
        for step in parents {
            level = &mut level.child_mut(step).children;
        }
        level.child_mut(last)
    }

    /// The rule for a request descriptor, by the most-specific, depth-matching walk.
    pub fn find<'a>(&'a self, entries: &[(&'a str, &'a str)]) -> Option<Match<'a>> {
        let mut level = &self.root;
        let mut labels = Vec::with_capacity(entries.len());
        let mut counter = Vec::with_capacity(entries.len());
        for (i, &(key, value)) in entries.iter().enumerate() {
            let node = level.find(key, value)?;
            let step = &node.step;
            match (&step.value, step.shared) {
                (ValueMatch::Wildcard(pattern), true) => {
                    counter.push(CounterPart::Shared(pattern));
                    labels.push(step.label());
                }
                _ if step.value_to_metric => {
                    counter.push(CounterPart::Value(value));
                    labels.push(format!("{key}_{value}"));
                }
                _ => {
                    counter.push(CounterPart::Value(value));
                    labels.push(step.label());
                }
            }
            if i + 1 == entries.len() {
                let rule = node.rule.as_ref()?;
                let mut label = labels.join(".");
                if rule.detailed_metric && !step.value_to_metric {
                    label = format!("{label}_{value}");
                }
                return Some(Match {
                    rule,
                    label,
                    counter,
                });
            }
            level = &node.children;
        }
        None
    }

    /// How many rules the tree holds.
    pub fn len(&self) -> usize {
        self.rules
    }

    /// Whether the tree holds no rule.
    pub fn is_empty(&self) -> bool {
        self.rules == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_stars_anywhere_without_blowing_up() {
        assert!(glob("foo*", "foo"));
        assert!(glob("foo*", "foobar"));
        assert!(!glob("foo*", "fo"));
        assert!(glob("bar*b", "barxxb"));
        assert!(!glob("bar*b", "barxxc"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "abc"));
        assert!(glob("a*b*c", "a-b-b-c"));
        assert!(!glob("a*b*c", "a-c-b"));
        // Many stars against a long hostile value stays quick (linear-ish).
        let hostile = "a".repeat(10_000);
        assert!(!glob("*a*a*a*a*a*a*b", &hostile));
    }

    fn rule(path: &str) -> Rule {
        Rule {
            path: path.into(),
            kind: RuleKind::Unlimited,
            name: None,
            replaces: vec![],
            shadow: false,
            quota: false,
            detailed_metric: false,
            metadata: None,
        }
    }

    #[test]
    fn shared_wildcards_count_by_pattern_and_value_to_metric_labels_by_value() {
        let mut tree = DomainTree::default();
        let mut files = Step::new("files", Some("files/*"));
        files.shared = true;
        tree.insert(std::slice::from_ref(&files), rule("files_files/*"))
            .unwrap();
        let mut route = Step::new("route", Some("api/*"));
        route.value_to_metric = true;
        tree.insert(&[route, Step::new("method", None)], rule("route.method"))
            .unwrap();

        let found = tree.find(&[("files", "files/a.txt")]).unwrap();
        assert_eq!(found.counter, [CounterPart::Shared("files/*")]);
        assert_eq!(found.label, "files_files/*");
        let found = tree
            .find(&[("route", "api/v1"), ("method", "GET")])
            .unwrap();
        assert_eq!(
            found.counter,
            [CounterPart::Value("api/v1"), CounterPart::Value("GET")]
        );
        assert_eq!(found.label, "route_api/v1.method");
    }

    #[test]
    fn the_first_matching_wildcard_in_configuration_order_wins() {
        let mut tree = DomainTree::default();
        tree.insert(&[Step::new("p", Some("/a*"))], rule("first"))
            .unwrap();
        tree.insert(&[Step::new("p", Some("/a/b*"))], rule("second"))
            .unwrap();
        tree.insert(&[Step::new("p", Some("/a/b/c"))], rule("exact"))
            .unwrap();
        assert_eq!(tree.find(&[("p", "/a/b/x")]).unwrap().rule.path, "first");
        assert_eq!(tree.find(&[("p", "/a/b/c")]).unwrap().rule.path, "exact");
    }
}
