//! The descriptor tree of one domain and envoyproxy/ratelimit's matching rules.
//!
//! A request descriptor is a list of entries `(key, value)`. Matching walks the tree one
//! level per entry; at each level the most specific node wins: an exact `key`+`value`
//! node, else the first wildcard node (value ending in `*`) whose prefix the value starts
//! with, else a key-only node. The walk does not backtrack. A rule applies only when the
//! descriptor's last entry lands on a node that has one: depth must match, so a
//! two-entry descriptor never uses a one-level rule, nor the reverse.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use sluicegate_core::Policy;

use crate::yaml::Unit;

/// What a matched rule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleKind {
    /// Check these policies (all must admit), under the descriptor's key.
    Limit(Vec<Arc<Policy>>),
    /// Answer OK with no limit and without touching the store.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over the limit.
    Block(Unit),
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
    /// Append the request's value to the metric label.
    pub detailed_metric: bool,
}

/// One entry of a rule's path: a key and how its value is matched.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// Any value.
    Key(String),
    /// Exactly this value.
    Exact(String, String),
    /// Any value starting with this prefix (the configured value without its `*`).
    Prefix(String, String),
}

impl Step {
    /// A step from a configured key and optional value (trailing `*` = wildcard).
    pub fn new(key: &str, value: Option<&str>) -> Step {
        match value {
            None => Step::Key(key.to_owned()),
            Some(v) => match v.strip_suffix('*') {
                Some(prefix) => Step::Prefix(key.to_owned(), prefix.to_owned()),
                None => Step::Exact(key.to_owned(), v.to_owned()),
            },
        }
    }

    /// The path element: `key` or `key_value` (the value as configured, `*` included).
    pub fn label(&self) -> String {
        match self {
            Step::Key(k) => k.clone(),
            Step::Exact(k, v) => format!("{k}_{v}"),
            Step::Prefix(k, p) => format!("{k}_{p}*"),
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Node {
    rule: Option<Arc<Rule>>,
    children: Level,
}

#[derive(Debug, Default, Clone)]
struct Level {
    nodes: Vec<Node>,
    exact: HashMap<(String, String), usize>,
    wildcards: Vec<(String, String, usize)>,
    any: HashMap<String, usize>,
}

impl Level {
    fn find(&self, key: &str, value: &str) -> Option<&Node> {
        let index = self
            .exact
            .get(&(key.to_owned(), value.to_owned()))
            .or_else(|| {
                self.wildcards
                    .iter()
                    .find(|(k, prefix, _)| k == key && value.starts_with(prefix.as_str()))
                    .map(|(_, _, i)| i)
            })
            .or_else(|| self.any.get(key))?;
        self.nodes.get(*index)
    }

    fn child_mut(&mut self, step: &Step) -> &mut Node {
        let existing = match step {
            Step::Key(k) => self.any.get(k).copied(),
            Step::Exact(k, v) => self.exact.get(&(k.clone(), v.clone())).copied(),
            Step::Prefix(k, p) => self
                .wildcards
                .iter()
                .find(|(wk, wp, _)| wk == k && wp == p)
                .map(|(_, _, i)| *i),
        };
        let index = match existing {
            Some(i) => i,
            None => {
                let i = self.nodes.len();
                self.nodes.push(Node::default());
                match step {
                    Step::Key(k) => {
                        self.any.insert(k.clone(), i);
                    }
                    Step::Exact(k, v) => {
                        self.exact.insert((k.clone(), v.clone()), i);
                    }
                    Step::Prefix(k, p) => self.wildcards.push((k.clone(), p.clone(), i)),
                }
                i
            }
        };
        &mut self.nodes[index]
    }
}

/// A matched rule and the metric label of this match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match<'a> {
    /// The rule.
    pub rule: &'a Arc<Rule>,
    /// The rule's path, plus `_<value>` of the last entry when `detailed_metric` is set.
    pub label: Cow<'a, str>,
}

/// The rules of one domain.
///
/// ```
/// use sluicegate_envoy::tree::{DomainTree, Rule, RuleKind, Step};
/// let mut tree = DomainTree::default();
/// let rule = Rule { path: "remote_address".into(), kind: RuleKind::Unlimited, name: None,
///     replaces: vec![], shadow: false, detailed_metric: false };
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
        let (last, parents) = path
            .split_last()
            .ok_or_else(|| "a rule needs at least one descriptor entry".to_owned())?;
        let mut level = &mut self.root;
        for step in parents {
            level = &mut level.child_mut(step).children;
        }
        let node = level.child_mut(last);
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
        let mut level = &mut self.root;
        for step in path {
            level = &mut level.child_mut(step).children;
        }
    }

    /// The rule for a request descriptor, by the most-specific, depth-matching walk.
    pub fn find<'a>(&'a self, entries: &[(&str, &str)]) -> Option<Match<'a>> {
        let mut level = &self.root;
        for (i, (key, value)) in entries.iter().enumerate() {
            let node = level.find(key, value)?;
            if i + 1 == entries.len() {
                let rule = node.rule.as_ref()?;
                let label = if rule.detailed_metric {
                    Cow::Owned(format!("{}_{}", rule.path, value))
                } else {
                    Cow::Borrowed(rule.path.as_str())
                };
                return Some(Match { rule, label });
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
