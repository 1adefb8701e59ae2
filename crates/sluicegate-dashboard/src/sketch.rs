//! The space-saving sketch (Metwally, Agrawal, El Abbadi, 2005): the heavy hitters of a
//! stream in a fixed number of counters, whatever the number of distinct items.
//!
//! Each counter holds an item, its count and the most that count may overstate. A new item
//! when the sketch is full takes over the counter with the smallest count, inheriting that
//! count as its error. Every item seen more than `total / capacity` times is in the sketch,
//! and no count is low: `count - error <= true count <= count`.

use std::collections::HashMap;
use std::hash::Hash;

/// One tracked item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter<K> {
    /// The item.
    pub item: K,
    /// Its estimated count, never below the true count.
    pub count: u64,
    /// How much `count` may overstate: it was inherited from an evicted item.
    pub error: u64,
}

/// A space-saving sketch of at most `capacity` counters.
///
/// ```
/// use sluicegate_dashboard::sketch::SpaceSaving;
/// let mut sketch = SpaceSaving::new(2);
/// for item in ["a", "b", "a", "c", "a"] {
///     sketch.add(item, 1);
/// }
/// assert_eq!(sketch.len(), 2);
/// let top = sketch.top(1);
/// assert_eq!((top[0].item, top[0].count), ("a", 3));
/// ```
#[derive(Debug, Clone)]
pub struct SpaceSaving<K> {
    capacity: usize,
    /// The counters, in cells that never move, so the index is written only when an item
    /// enters or leaves.
    cells: Vec<Counter<K>>,
    /// A binary min-heap of cells on their `count`: the counter to evict is at the root.
    heap: Vec<usize>,
    /// Where each cell is in `heap`.
    position: Vec<usize>,
    /// Which cell holds each item. Seeded per sketch: the items are client-chosen keys.
    index: HashMap<K, usize, foldhash::fast::RandomState>,
    total: u64,
}

impl<K: Hash + Eq + Clone> SpaceSaving<K> {
    /// A sketch of `capacity` counters (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        SpaceSaving {
            capacity,
            cells: Vec::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            position: Vec::with_capacity(capacity),
            index: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            total: 0,
        }
    }

    /// Counts `weight` occurrences of `item`.
    pub fn add(&mut self, item: K, weight: u64) {
        self.total = self.total.saturating_add(weight);
        if let Some(&cell) = self.index.get(&item) {
            self.cells[cell].count = self.cells[cell].count.saturating_add(weight);
            self.sift_down(self.position[cell]);
        } else if self.cells.len() < self.capacity {
            let cell = self.cells.len();
            self.index.insert(item.clone(), cell);
            self.cells.push(Counter {
                item,
                count: weight,
                error: 0,
            });
            self.position.push(self.heap.len());
            self.heap.push(cell);
            self.sift_up(self.heap.len() - 1);
        } else {
            let cell = self.heap[0];
            let min = self.cells[cell].count;
            let evicted = std::mem::replace(
                &mut self.cells[cell],
                Counter {
                    item: item.clone(),
                    count: min.saturating_add(weight),
                    error: min,
                },
            );
            self.index.remove(&evicted.item);
            self.index.insert(item, cell);
            self.sift_down(0);
        }
    }

    /// The `n` largest counters, largest first.
    pub fn top(&self, n: usize) -> Vec<&Counter<K>> {
        let mut all: Vec<&Counter<K>> = self.cells.iter().collect();
        all.sort_by_key(|c| std::cmp::Reverse(c.count));
        all.truncate(n);
        all
    }

    /// Every counter, in no particular order.
    pub fn counters(&self) -> impl Iterator<Item = &Counter<K>> {
        self.cells.iter()
    }

    /// Counters in use.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The fixed number of counters.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The total weight added.
    pub fn total(&self) -> u64 {
        self.total
    }

    fn count_at(&self, i: usize) -> u64 {
        self.cells[self.heap[i]].count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.position[self.heap[a]] = a;
        self.position[self.heap[b]] = b;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.count_at(parent) <= self.count_at(i) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut smallest = i;
            if l < self.heap.len() && self.count_at(l) < self.count_at(smallest) {
                smallest = l;
            }
            if r < self.heap.len() && self.count_at(r) < self.count_at(smallest) {
                smallest = r;
            }
            if smallest == i {
                return;
            }
            self.swap(i, smallest);
            i = smallest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap_ok<K: Hash + Eq + Clone>(s: &SpaceSaving<K>) -> bool {
        (1..s.heap.len()).all(|i| s.count_at((i - 1) / 2) <= s.count_at(i))
            && s.heap
                .iter()
                .enumerate()
                .all(|(i, cell)| s.position[*cell] == i)
            && s.cells
                .iter()
                .enumerate()
                .all(|(cell, c)| s.index.get(&c.item) == Some(&cell))
            && s.index.len() == s.cells.len()
            && s.heap.len() == s.cells.len()
    }

    #[test]
    fn heavy_hitters_survive_a_flood_of_unique_keys() {
        let mut sketch = SpaceSaving::new(32);
        let heavy = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];
        let mut truth = [0u64; 3];
        // 60k unique keys, and every seventh item a heavy hitter (~4.8% of the stream
        // each, over the 1/32 that space-saving guarantees to find).
        for i in 0..70_000u64 {
            if i % 7 == 0 {
                let h = (i / 7 % 3) as usize;
                truth[h] += 1;
                sketch.add(heavy[h].to_owned(), 1);
            } else {
                sketch.add(format!("flood-{i}"), 1);
            }
            assert!(sketch.len() <= 32);
        }
        assert!(heap_ok(&sketch));
        assert_eq!(sketch.len(), 32);
        assert_eq!(sketch.index.len(), 32);
        assert_eq!(sketch.total(), 70_000);
        let top: Vec<&str> = sketch.top(3).iter().map(|c| c.item.as_str()).collect();
        for h in heavy {
            assert!(top.contains(&h), "{h} missing from {top:?}");
        }
        for c in sketch.top(3) {
            let true_count = truth[heavy.iter().position(|h| *h == c.item).unwrap()];
            assert!(c.count >= true_count && c.count - c.error <= true_count);
        }
    }

    #[test]
    fn memory_stays_fixed_under_unique_keys() {
        let mut sketch = SpaceSaving::new(8);
        for i in 0..50_000u64 {
            sketch.add(i, 1);
        }
        assert_eq!(sketch.len(), 8);
        assert_eq!(sketch.cells.capacity(), 8);
        assert_eq!(sketch.heap.capacity(), 8);
        assert!(sketch.index.capacity() <= 16, "{}", sketch.index.capacity());
        assert!(heap_ok(&sketch));
        // Each count overstates by at most total / capacity.
        assert!(sketch.counters().all(|c| c.error <= 50_000 / 8));
    }

    #[test]
    fn exact_while_under_capacity_and_weights_count() {
        let mut sketch = SpaceSaving::new(4);
        sketch.add("a", 5);
        sketch.add("b", 1);
        sketch.add("b", 1);
        sketch.add("c", 7);
        let top: Vec<(&str, u64, u64)> = sketch
            .top(10)
            .iter()
            .map(|c| (c.item, c.count, c.error))
            .collect();
        assert_eq!(top, [("c", 7, 0), ("a", 5, 0), ("b", 2, 0)]);
        assert!(heap_ok(&sketch));
        assert_eq!(SpaceSaving::<u8>::new(0).capacity(), 1);
    }
}
