//! How much work validating a value against a schema can cost, judged before the schema is
//! compiled, so that a small hostile schema (an MCP server's `inputSchema` of chained `anyOf`
//! and `$ref`) is refused when its tool is registered instead of costing gigabytes when the
//! first bad argument arrives.
//!
//! The measure is *applications per value*: how many subschemas the validator may apply to
//! one value of the instance, in the worst case. `anyOf` tries every branch when none
//! matches, so a chain of `anyOf`s whose branches `$ref` the next link doubles it at each
//! link, on one value (20 links: a million applications from 1.7 KB); branches that each
//! descend into the same property double it per level of the instance instead. Both are
//! counted: the schema graph (every subschema, `$ref`s resolved as the validator resolves
//! them) is walked once per level of instance depth, each subschema's count memoized.
//!
//! At depth 0 a subschema costs 1 plus what its in-place subschemas cost (`allOf`, `anyOf`,
//! `oneOf`, `not`, `if`/`then`/`else`, `dependentSchemas`, `$ref`; a `$dynamicRef` or
//! `$recursiveRef` lands on one of its candidate targets, so it costs the dearest). At depth
//! k it costs, for the child that costs most, what every subschema applied to that child
//! costs at depth k-1: a property name picks its `properties` entries (across all in-place
//! subschemas at once, so a union of object types with distinct property names stays
//! cheap), an index its `prefixItems` entries, and every `patternProperties`,
//! `additionalProperties`, `items`, `contains`, … entry applies to every child. Each choice
//! over-approximates (siblings are summed, `if`/`then`/`else` all count, every pattern
//! matches), so the real work is never more than the bound. `unevaluatedProperties` and
//! `unevaluatedItems` make the validator apply the in-place subschemas once more to find
//! what they evaluated; that is counted too.
//!
//! A `$ref` cycle that does not descend into the value would recurse forever and is refused.

use jsonschema::{Draft, Registry};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// The most subschema applications one value of an instance may cost.
pub(crate) const MAX_APPLICATIONS_PER_VALUE: u64 = 10_000;
/// The most JSON values (objects, arrays, strings, …) a schema document may hold.
pub(crate) const MAX_SCHEMA_VALUES: usize = 100_000;
/// The deepest nesting of a schema document.
pub(crate) const MAX_SCHEMA_DEPTH: usize = 128;
/// The instance depths the bound considers: serde_json refuses to parse JSON nested deeper
/// than 128, so no argument or MCP result can be deeper.
const INSTANCE_LEVELS: usize = 130;
/// Property names (or indices) a cost profile tells apart; past this many it keeps one
/// bound for all of them.
const PROFILE_KEYS: usize = 64;

/// The base URI the validator gives a schema without `$id`.
const DEFAULT_BASE_URI: &str = "json-schema:///";

const CAP: u64 = MAX_APPLICATIONS_PER_VALUE + 1;

fn add(a: u64, b: u64) -> u64 {
    a.saturating_add(b).min(CAP)
}

/// What the check found out about a schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SchemaCost {
    /// The most subschema applications one value of an instance may cost (at least 1).
    pub(crate) per_value: u64,
}

/// Judges `schema`; `Err` says why it is refused.
pub(crate) fn judge(schema: &Value) -> Result<SchemaCost, String> {
    check_size(schema)?;
    let graph = Graph::build(schema)?;
    let per_value = graph.worst_applications_per_value()?;
    Ok(SchemaCost {
        per_value: per_value.max(1),
    })
}

/// Refuses documents too large or too deep to analyse cheaply, without recursing.
fn check_size(schema: &Value) -> Result<(), String> {
    let mut stack = vec![(schema, 1usize)];
    let mut values = 0usize;
    while let Some((value, depth)) = stack.pop() {
        values += 1;
        if values > MAX_SCHEMA_VALUES {
            return Err(format!(
                "it holds more than {MAX_SCHEMA_VALUES} JSON values"
            ));
        }
        if depth > MAX_SCHEMA_DEPTH {
            return Err(format!("it is nested deeper than {MAX_SCHEMA_DEPTH}"));
        }
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// One subschema and its edges (indices into `Graph::nodes`).
#[derive(Debug, Default)]
struct Node {
    /// Subschemas applied to the same value: all of them, or only one of them for an
    /// `alternative`.
    in_place: Vec<usize>,
    /// Not a subschema but a choice, made here for a dynamic reference: exactly one of the
    /// `in_place` targets applies, and the choice itself costs nothing.
    alternative: bool,
    /// `properties` (key: the interned name) and `prefixItems`/array `items` (key: index).
    keyed_object: Vec<(u32, usize)>,
    keyed_array: Vec<(u32, usize)>,
    /// Subschemas that may apply to every child of an object / array.
    every_object_child: Vec<usize>,
    every_array_child: Vec<usize>,
    /// `unevaluatedProperties` / `unevaluatedItems`: in-place subschemas applied again.
    unevaluated: bool,
    /// `$dynamicAnchor` name, and whether `$recursiveAnchor: true`.
    dynamic_anchor: Option<String>,
    recursive_anchor: bool,
}

struct Graph {
    nodes: Vec<Node>,
}

/// A reference whose target depends on the dynamic scope: every candidate is found once
/// the whole graph is known.
enum Dynamic {
    Anchor(usize, Option<usize>, String),
    Recursive(usize, Option<usize>),
}

fn array_items<'a>(map: &'a Map<String, Value>, keyword: &str) -> impl Iterator<Item = &'a Value> {
    map.get(keyword)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn map_entries<'a>(
    map: &'a Map<String, Value>,
    keyword: &str,
) -> impl Iterator<Item = (&'a String, &'a Value)> {
    map.get(keyword)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
}

fn is_schema(value: &Value) -> bool {
    value.is_object() || value.is_boolean()
}

/// Where a subschema sits in its parent.
#[derive(Debug, Clone, Copy)]
enum Slot<'a> {
    InPlace,
    Property(&'a str),
    EveryObjectChild,
    UnevaluatedObjectChild,
    Index(usize),
    EveryArrayChild,
    UnevaluatedArrayChild,
}

/// The subschemas of an object schema (other than references), by where they apply.
fn subschemas(map: &Map<String, Value>) -> Vec<(Slot<'_>, &Value)> {
    let mut out = Vec::new();
    for keyword in ["allOf", "anyOf", "oneOf"] {
        out.extend(array_items(map, keyword).map(|v| (Slot::InPlace, v)));
    }
    for keyword in ["not", "if", "then", "else"] {
        out.extend(map.get(keyword).map(|v| (Slot::InPlace, v)));
    }
    for keyword in ["dependentSchemas", "dependencies"] {
        out.extend(map_entries(map, keyword).map(|(_, v)| (Slot::InPlace, v)));
    }
    out.extend(map_entries(map, "properties").map(|(k, v)| (Slot::Property(k), v)));
    out.extend(map_entries(map, "patternProperties").map(|(_, v)| (Slot::EveryObjectChild, v)));
    for keyword in ["additionalProperties", "propertyNames"] {
        out.extend(map.get(keyword).map(|v| (Slot::EveryObjectChild, v)));
    }
    out.extend(
        map.get("unevaluatedProperties")
            .map(|v| (Slot::UnevaluatedObjectChild, v)),
    );
    match map.get("items") {
        Some(Value::Array(items)) => {
            out.extend(items.iter().enumerate().map(|(i, v)| (Slot::Index(i), v)));
        }
        Some(item) => out.push((Slot::EveryArrayChild, item)),
        None => {}
    }
    out.extend(
        array_items(map, "prefixItems")
            .enumerate()
            .map(|(i, v)| (Slot::Index(i), v)),
    );
    for keyword in ["additionalItems", "contains"] {
        out.extend(map.get(keyword).map(|v| (Slot::EveryArrayChild, v)));
    }
    out.extend(
        map.get("unevaluatedItems")
            .map(|v| (Slot::UnevaluatedArrayChild, v)),
    );
    out.retain(|(_, v)| is_schema(v));
    out
}

/// The node of `target`, queued for its own walk the first time it is seen. `R` is the
/// reference resolver (generic only because its crate does not export its name).
fn intern<'v, R: Clone>(
    target: &'v Value,
    graph: &mut Walk<'v, R>,
    resolver: &R,
    draft: Draft,
    enter: bool,
) -> usize {
    let key = std::ptr::from_ref(target);
    if let Some(&known) = graph.ids.get(&key) {
        return known;
    }
    let new = graph.nodes.len();
    graph.nodes.push(Node::default());
    graph.ids.insert(key, new);
    graph
        .work
        .push((new, target, resolver.clone(), draft, enter));
    new
}

/// The graph while it is being found.
struct Walk<'v, R> {
    nodes: Vec<Node>,
    ids: HashMap<*const Value, usize>,
    /// (node, its value, its resolver, its draft, whether the resolver still has to enter
    /// the value's own `$id`: true for lexical children, false for `$ref` targets, whose
    /// resolver the lookup already placed).
    work: Vec<(usize, &'v Value, R, Draft, bool)>,
    names: HashMap<&'v str, u32>,
}

impl<'v, R> Walk<'v, R> {
    fn name(&mut self, name: &'v str) -> u32 {
        let next = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        *self.names.entry(name).or_insert(next)
    }
}

impl Graph {
    fn build(schema: &Value) -> Result<Graph, String> {
        let unresolvable = |e: jsonschema::ReferencingError| format!("its references: {e}");
        let draft = Draft::default().detect(schema);
        let resource = draft.create_resource_ref(schema);
        let base = match schema
            .as_object()
            .and_then(|m| m.get(draft.id_keyword()))
            .and_then(Value::as_str)
        {
            Some(id) => jsonschema::uri::from_str(id),
            None => jsonschema::uri::from_str(DEFAULT_BASE_URI),
        }
        .map_err(unresolvable)?;
        let registry = Registry::new()
            .draft(draft)
            .add(base.as_str(), resource)
            .and_then(|builder| builder.prepare())
            .map_err(unresolvable)?;

        let mut walk = Walk {
            nodes: vec![Node::default()],
            ids: HashMap::from([(std::ptr::from_ref(schema), 0)]),
            work: vec![(0usize, schema, registry.resolver(base), draft, false)],
            names: HashMap::new(),
        };
        let mut dynamic = Vec::new();

        while let Some((id, value, resolver, draft, enter)) = walk.work.pop() {
            let Value::Object(map) = value else {
                continue;
            };
            let draft = match draft.detect(value) {
                Draft::Unknown => draft,
                detected => detected,
            };
            let resolver = if enter && map.contains_key(draft.id_keyword()) {
                resolver
                    .in_subresource(draft.create_resource_ref(value))
                    .map_err(unresolvable)?
            } else {
                resolver
            };
            let mut node = Node::default();
            for (slot, target) in subschemas(map) {
                let c = intern(target, &mut walk, &resolver, draft, true);
                match slot {
                    Slot::InPlace => node.in_place.push(c),
                    Slot::Property(name) => {
                        let key = walk.name(name);
                        node.keyed_object.push((key, c));
                    }
                    Slot::Index(i) => {
                        let key = u32::try_from(i).unwrap_or(u32::MAX);
                        node.keyed_array.push((key, c));
                    }
                    Slot::EveryObjectChild => node.every_object_child.push(c),
                    Slot::EveryArrayChild => node.every_array_child.push(c),
                    // Applied to each child left unevaluated, and once more while marking
                    // what the in-place subschemas evaluated.
                    Slot::UnevaluatedObjectChild => {
                        node.every_object_child.extend([c, c]);
                        node.unevaluated = true;
                    }
                    Slot::UnevaluatedArrayChild => {
                        node.every_array_child.extend([c, c]);
                        node.unevaluated = true;
                    }
                }
            }
            let mut lookup = |keyword: &str| -> Result<Option<usize>, String> {
                let Some(reference) = map.get(keyword).and_then(Value::as_str) else {
                    return Ok(None);
                };
                let resolved = resolver.lookup(reference).map_err(|e| {
                    format!("its `{keyword}` `{reference}` cannot be resolved: {e}")
                })?;
                let (contents, target_resolver, target_draft) = resolved.into_inner();
                Ok(Some(intern(
                    contents,
                    &mut walk,
                    &target_resolver,
                    target_draft,
                    false,
                )))
            };
            if let Some(target) = lookup("$ref")? {
                node.in_place.push(target);
            }
            if let Some(reference) = map.get("$dynamicRef").and_then(Value::as_str) {
                let name = reference.rsplit_once('#').map_or("", |(_, name)| name);
                dynamic.push(Dynamic::Anchor(
                    id,
                    lookup("$dynamicRef")?,
                    name.to_string(),
                ));
            }
            if map.contains_key("$recursiveRef") {
                dynamic.push(Dynamic::Recursive(id, lookup("$recursiveRef")?));
            }
            node.dynamic_anchor = map
                .get("$dynamicAnchor")
                .and_then(Value::as_str)
                .map(str::to_string);
            node.recursive_anchor = map.get("$recursiveAnchor") == Some(&Value::Bool(true));
            if let Some(slot) = walk.nodes.get_mut(id) {
                *slot = node;
            }
        }

        let mut nodes = walk.nodes;
        // A dynamic reference lands on its static target or on an anchor of its name in
        // the dynamic scope: one of them. Each anchor name gets one choice among all its
        // anchors, and each reference a choice between that and its static target, so the
        // edges stay linear in the number of references and anchors.
        let mut by_anchor: HashMap<Option<String>, Vec<usize>> = HashMap::new();
        for (n, node) in nodes.iter().enumerate() {
            if let Some(name) = &node.dynamic_anchor {
                by_anchor.entry(Some(name.clone())).or_default().push(n);
            }
            if node.recursive_anchor {
                by_anchor.entry(None).or_default().push(n);
            }
        }
        let mut anchors: HashMap<Option<String>, usize> = HashMap::new();
        let mut anchor_choice = |nodes: &mut Vec<Node>, name: Option<String>| -> usize {
            if let Some(&known) = anchors.get(&name) {
                return known;
            }
            let choice = nodes.len();
            nodes.push(Node {
                in_place: by_anchor.remove(&name).unwrap_or_default(),
                alternative: true,
                ..Node::default()
            });
            anchors.insert(name, choice);
            choice
        };
        for reference in dynamic {
            let (from, fixed, name) = match reference {
                Dynamic::Anchor(from, fixed, name) => (from, fixed, Some(name)),
                Dynamic::Recursive(from, fixed) => (from, fixed, None),
            };
            let anchored = anchor_choice(&mut nodes, name);
            let choice = nodes.len();
            nodes.push(Node {
                in_place: fixed.into_iter().chain([anchored]).collect(),
                alternative: true,
                ..Node::default()
            });
            if let Some(node) = nodes.get_mut(from) {
                node.in_place.push(choice);
            }
        }
        Ok(Graph { nodes })
    }

    /// Every node after the nodes it applies in place; `Err` when the in-place edges have a
    /// cycle.
    fn children_first(&self) -> Result<Vec<usize>, String> {
        let n = self.nodes.len();
        let mut parents = vec![0usize; n];
        for node in &self.nodes {
            for c in node.in_place.iter().copied() {
                parents[c] += 1;
            }
        }
        let mut ready: Vec<usize> = (0..n).filter(|&v| parents[v] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(v) = ready.pop() {
            order.push(v);
            for c in self.nodes[v].in_place.iter().copied() {
                parents[c] -= 1;
                if parents[c] == 0 {
                    ready.push(c);
                }
            }
        }
        if order.len() < n {
            return Err(
                "a `$ref` cycle applies the same subschema to the same value again \
                        without descending into it, so validating would never end"
                    .into(),
            );
        }
        order.reverse();
        Ok(order)
    }

    /// The worst count over every instance depth, or `Err` past the bound.
    fn worst_applications_per_value(&self) -> Result<u64, String> {
        let order = self.children_first()?;
        let n = self.nodes.len();
        let marks = self.nodes.iter().any(|node| node.unevaluated);
        let mut previous = vec![0u64; n];
        let mut worst = 0u64;
        for depth in 0..=INSTANCE_LEVELS {
            let current = if depth == 0 {
                self.level_zero(&order, marks)
            } else {
                self.level(&order, marks, &previous)
            };
            worst = worst.max(current[0]);
            if worst > MAX_APPLICATIONS_PER_VALUE {
                return Err(format!(
                    "validating one value against it can take more than \
                     {MAX_APPLICATIONS_PER_VALUE} subschema applications (at instance depth \
                     {depth}): nested `anyOf`/`oneOf`/`allOf`/`$ref` multiply, and reporting \
                     one mismatch could take gigabytes"
                ));
            }
            if current.iter().all(|&c| c == 0) || current == previous {
                break;
            }
            previous = current;
        }
        Ok(worst)
    }

    /// Applications on the value a node is applied to.
    fn level_zero(&self, order: &[usize], marks: bool) -> Vec<u64> {
        let n = self.nodes.len();
        let mut total = vec![0u64; n];
        let mut marking = vec![0u64; n];
        for &v in order {
            let node = &self.nodes[v];
            let (mut sum, mut marked) = (0u64, 0u64);
            for &c in &node.in_place {
                let with_marking = add(total[c], marking[c]);
                if node.alternative {
                    sum = sum.max(total[c]);
                    marked = marked.max(with_marking);
                } else {
                    sum = add(sum, total[c]);
                    marked = add(marked, with_marking);
                }
            }
            if !node.alternative {
                sum = add(sum, 1);
            }
            if marks {
                marking[v] = marked;
            }
            if node.unevaluated {
                sum = add(sum, marked);
            }
            total[v] = sum;
        }
        total
    }

    /// Applications on one value `depth` levels below the one a node is applied to, given
    /// each node's count one level less deep (`previous`).
    fn level(&self, order: &[usize], marks: bool, previous: &[u64]) -> Vec<u64> {
        let n = self.nodes.len();
        let mut total: Vec<Children> = vec![Children::default(); n];
        let mut marking: Vec<Children> = if marks {
            vec![Children::default(); n]
        } else {
            Vec::new()
        };
        let mut counts = vec![0u64; n];
        for &v in order {
            let node = &self.nodes[v];
            let mut sum = Children::own(node, previous);
            let mut marked = Children::default();
            for &c in &node.in_place {
                let with_marking = if marks {
                    let mut both = total[c].clone();
                    both.add(&marking[c]);
                    Some(both)
                } else {
                    None
                };
                if node.alternative {
                    sum.max_with(&total[c]);
                    if let Some(both) = &with_marking {
                        marked.max_with(both);
                    }
                } else {
                    sum.add(&total[c]);
                    if let Some(both) = &with_marking {
                        marked.add(both);
                    }
                }
            }
            if node.unevaluated {
                sum.add(&marked);
            }
            counts[v] = sum.worst_child();
            total[v] = sum;
            if marks {
                marking[v] = marked;
            }
        }
        counts
    }
}

/// What the subschemas applied to a value cost on one of its children, by the child's
/// property name or index: `every` applies to any child, `keyed` adds per key. Past
/// [`PROFILE_KEYS`] keys the dearest key's cost joins `every` (a bound for all of them).
#[derive(Debug, Clone, Default)]
struct Profile {
    every: u64,
    keyed: Vec<(u32, u64)>,
}

impl Profile {
    fn bound(&self) -> u64 {
        add(
            self.every,
            self.keyed.iter().map(|&(_, c)| c).max().unwrap_or(0),
        )
    }

    fn collapse_if_large(&mut self) {
        if self.keyed.len() > PROFILE_KEYS {
            self.every = self.bound();
            self.keyed.clear();
        }
    }

    /// A profile of `entries` (in any order, keys possibly repeated: their costs add up).
    fn of(every: u64, mut entries: Vec<(u32, u64)>) -> Profile {
        entries.retain(|&(_, c)| c > 0);
        entries.sort_unstable_by_key(|&(k, _)| k);
        let mut keyed: Vec<(u32, u64)> = Vec::with_capacity(entries.len());
        for (key, cost) in entries {
            match keyed.last_mut() {
                Some((k, c)) if *k == key => *c = add(*c, cost),
                _ => keyed.push((key, cost)),
            }
        }
        let mut profile = Profile { every, keyed };
        profile.collapse_if_large();
        profile
    }

    /// Merges two key-sorted lists, combining the costs of a key both hold.
    fn merge(
        a: &[(u32, u64)],
        b: &[(u32, u64)],
        both: impl Fn(u64, u64) -> u64,
    ) -> Vec<(u32, u64)> {
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let (ka, ca) = a[i];
            let (kb, cb) = b[j];
            if ka == kb {
                out.push((ka, both(ca, cb)));
                i += 1;
                j += 1;
            } else if ka < kb {
                out.push((ka, ca));
                i += 1;
            } else {
                out.push((kb, cb));
                j += 1;
            }
        }
        out.extend_from_slice(&a[i..]);
        out.extend_from_slice(&b[j..]);
        out
    }

    fn add(&mut self, other: &Profile) {
        self.every = add(self.every, other.every);
        if !other.keyed.is_empty() {
            self.keyed = Profile::merge(&self.keyed, &other.keyed, add);
            self.collapse_if_large();
        }
    }

    /// A bound of both: for any key, max(a.every + a[k], b.every + b[k]) is at most
    /// max(a.every, b.every) + max(a[k], b[k]).
    fn max_with(&mut self, other: &Profile) {
        self.every = self.every.max(other.every);
        if !other.keyed.is_empty() {
            self.keyed = Profile::merge(&self.keyed, &other.keyed, u64::max);
            self.collapse_if_large();
        }
    }
}

/// A value's children are an object's members or an array's items.
#[derive(Debug, Clone, Default)]
struct Children {
    object: Profile,
    array: Profile,
}

impl Children {
    fn own(node: &Node, previous: &[u64]) -> Children {
        let every = |targets: &[usize]| targets.iter().fold(0, |acc, &t| add(acc, previous[t]));
        let keyed = |targets: &[(u32, usize)]| {
            targets
                .iter()
                .map(|&(key, t)| (key, previous[t]))
                .collect::<Vec<_>>()
        };
        Children {
            object: Profile::of(every(&node.every_object_child), keyed(&node.keyed_object)),
            array: Profile::of(every(&node.every_array_child), keyed(&node.keyed_array)),
        }
    }

    fn add(&mut self, other: &Children) {
        self.object.add(&other.object);
        self.array.add(&other.array);
    }

    fn max_with(&mut self, other: &Children) {
        self.object.max_with(&other.object);
        self.array.max_with(&other.array);
    }

    fn worst_child(&self) -> u64 {
        self.object.bound().max(self.array.bound())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cost(schema: Value) -> u64 {
        judge(&schema).map(|c| c.per_value).unwrap()
    }

    /// `anyOf` of two `$ref`s to the next link, `links` times: 2^links on one value.
    fn chain(links: usize) -> Value {
        let mut defs = Map::new();
        for i in 0..links {
            let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
            defs.insert(format!("d{i}"), json!({"anyOf": [next, next]}));
        }
        defs.insert(format!("d{links}"), json!({"type": "string"}));
        json!({"$ref": "#/$defs/d0", "$defs": defs})
    }

    #[test]
    fn plain_schemas_cost_little() {
        assert_eq!(cost(json!(true)), 1);
        assert_eq!(cost(json!({"type": "string"})), 1);
        let flat = json!({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "array",
            "items": {"type": "string"}}}, "required": ["a"]});
        assert!(cost(flat) <= 3);
        // A recursive tree type costs the same at every depth.
        let tree = json!({"type": "object", "properties": {"children": {"type": "array",
            "items": {"$ref": "#"}}}});
        assert!(cost(tree) <= 3);
    }

    #[test]
    fn a_chain_of_any_of_and_ref_doubles_per_link() {
        let small = cost(chain(5));
        assert!((32..=200).contains(&small), "{small}");
        let e = judge(&chain(20)).unwrap_err();
        assert!(e.contains("subschema applications"), "{e}");
    }

    #[test]
    fn branches_descending_into_the_same_property_double_per_level() {
        // Cheap on any one value, exponential in the instance's depth.
        let mut defs = Map::new();
        for i in 0..20 {
            let branch = json!({"properties": {"x": {"$ref": format!("#/$defs/l{}", i + 1)}}});
            defs.insert(format!("l{i}"), json!({"anyOf": [branch.clone(), branch]}));
        }
        defs.insert("l20".into(), json!({"type": "string"}));
        let e = judge(&json!({"$ref": "#/$defs/l0", "$defs": defs})).unwrap_err();
        assert!(e.contains("instance depth"), "{e}");
    }

    #[test]
    fn a_recursive_union_of_object_types_stays_cheap() {
        // A filter language: each variant descends through its own property names.
        let filter = json!({
            "$ref": "#/$defs/filter",
            "$defs": {"filter": {"anyOf": [
                {"type": "object", "properties": {"and": {"type": "array",
                    "items": {"$ref": "#/$defs/filter"}}}, "required": ["and"]},
                {"type": "object", "properties": {"or": {"type": "array",
                    "items": {"$ref": "#/$defs/filter"}}}, "required": ["or"]},
                {"type": "object", "properties": {"not": {"$ref": "#/$defs/filter"}},
                    "required": ["not"]},
                {"type": "object", "properties": {"field": {"type": "string"},
                    "equals": {}}, "required": ["field"]}
            ]}}
        });
        let c = cost(filter);
        assert!(c <= 20, "{c}");
    }

    #[test]
    fn a_property_name_picks_one_entry_not_all_of_them() {
        let mut props = Map::new();
        for i in 0..5000 {
            props.insert(format!("p{i}"), json!({"type": "string"}));
        }
        assert!(cost(json!({"properties": props})) <= 2);
    }

    #[test]
    fn a_ref_cycle_in_place_is_refused() {
        let e = judge(&json!({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"},
            {"type": "string"}]}}, "$ref": "#/$defs/a"}))
        .unwrap_err();
        assert!(e.contains("never end"), "{e}");
    }

    #[test]
    fn huge_or_deep_documents_are_refused() {
        let mut deep = json!(1);
        for _ in 0..(MAX_SCHEMA_DEPTH + 1) {
            deep = json!([deep]);
        }
        let e = judge(&json!({"enum": [deep]})).unwrap_err();
        assert!(e.contains("deeper"), "{e}");
        let wide = json!({"enum": vec![0; MAX_SCHEMA_VALUES]});
        assert!(judge(&wide).unwrap_err().contains("JSON values"));
    }

    #[test]
    fn unresolvable_references_are_refused() {
        assert!(judge(&json!({"$ref": "#/$defs/nope"})).is_err());
    }

    #[test]
    fn references_by_id_anchor_and_to_the_meta_schema_resolve() {
        let schema = json!({
            "$id": "https://example.com/root.json",
            "$defs": {
                "a": {"$id": "a.json", "type": "string"},
                "b": {"$anchor": "bee", "type": "integer"}
            },
            "properties": {
                "x": {"$ref": "a.json"},
                "y": {"$ref": "#bee"},
                "z": {"$ref": "https://json-schema.org/draft/2020-12/schema"}
            }
        });
        let c = cost(schema);
        assert!(c < MAX_APPLICATIONS_PER_VALUE, "{c}");
    }

    #[test]
    fn many_dynamic_references_are_judged_in_linear_time() {
        // Each `$dynamicRef` may land on any of the anchors of its name: judged through one
        // choice per name, not an edge per pair.
        let mut defs = Map::new();
        for i in 0..5_000 {
            defs.insert(
                format!("d{i}"),
                json!({"$dynamicAnchor": "node", "properties": {
                    "next": {"$dynamicRef": "#node"}}}),
            );
        }
        let schema = json!({"$dynamicAnchor": "node", "$defs": defs,
            "properties": {"next": {"$dynamicRef": "#node"}}});
        let started = std::time::Instant::now();
        let c = cost(schema);
        assert!(c <= 4, "{c}");
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }
}
