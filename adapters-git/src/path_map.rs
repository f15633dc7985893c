//! `PathMap`: the stat cache's map from worktree-relative paths to their entries (and `StrList`, its
//! lookup-less sibling, below), built for a re-track of a big worktree. A `HashMap<String, _>` costs one
//! allocation and one hash insert per path to load and one hash per path to look up; at 100,000 files that
//! was a quarter of an unchanged re-track. Here every path lives in one string and every value in one
//! vector, in the order they were added (the walk's order, which the next walk repeats when nothing
//! moved), so a load is two allocations and a lookup that names the position it expects the path at is
//! one string comparison. The hash index is built only when a lookup
//! misses its position or the map is changed.
//!
//! Duplicate paths never come from this crate (every writer adds distinct paths or goes through `insert`),
//! but a map read from a file is not trusted to be free of them: `len` counts each, a lookup finds one of
//! them, and the first change to the map drops all but the first. (A track trusts the cache only when every
//! path it walked found a distinct entry and the counts are equal, which a duplicate makes them not.)

use std::hash::BuildHasher;
use std::sync::OnceLock;

use hashbrown::{DefaultHashBuilder, HashTable};

#[derive(Clone, Debug)]
struct Slot<V> {
    start: usize,
    len: usize,
    /// None once removed (the path stays, so adding it again reuses the slot).
    value: Option<V>,
}

/// The hash index: slot numbers, and whether building it met a path twice.
#[derive(Clone, Debug)]
struct Index {
    table: HashTable<usize>,
    has_duplicates: bool,
}

/// A map from paths to values, in the order they were added.
#[derive(Clone, Debug)]
pub struct PathMap<V> {
    text: String,
    slots: Vec<Slot<V>>,
    live: usize,
    hasher: DefaultHashBuilder,
    index: OnceLock<Index>,
}

impl<V> Default for PathMap<V> {
    fn default() -> Self {
        PathMap::with_capacity(0, 0)
    }
}

impl<V> PathMap<V> {
    /// An empty map with room for `paths` paths of `bytes` bytes in all.
    pub fn with_capacity(paths: usize, bytes: usize) -> Self {
        PathMap {
            text: String::with_capacity(bytes),
            slots: Vec::with_capacity(paths),
            live: 0,
            hasher: DefaultHashBuilder::default(),
            index: OnceLock::new(),
        }
    }

    /// How many paths it holds.
    pub fn len(&self) -> usize {
        self.live
    }

    fn path(&self, slot: usize) -> &str {
        slot_path(&self.text, &self.slots, slot)
    }

    fn hash(&self, path: &str) -> u64 {
        self.hasher.hash_one(path)
    }

    fn index(&self) -> &Index {
        self.index.get_or_init(|| {
            let mut table = HashTable::with_capacity(self.slots.len());
            let mut has_duplicates = false;
            for slot in 0..self.slots.len() {
                let path = self.path(slot);
                let hash = self.hash(path);
                if table.find(hash, |&s| self.path(s) == path).is_some() {
                    has_duplicates = true;
                    continue;
                }
                table.insert_unique(hash, slot, |&s| self.hash(self.path(s)));
            }
            Index {
                table,
                has_duplicates,
            }
        })
    }

    /// Builds the hash index now, on this thread, rather than at the first lookup that needs it (a map
    /// built on one thread and asked on others: seeding's index entries).
    pub fn prepare_lookups(&self) {
        self.index();
    }

    /// The slot of `path`, from the index.
    fn find(&self, path: &str) -> Option<usize> {
        self.index()
            .table
            .find(self.hash(path), |&s| self.path(s) == path)
            .copied()
    }

    /// The value of `path`.
    pub fn get(&self, path: &str) -> Option<&V> {
        self.slots[self.find(path)?].value.as_ref()
    }

    /// The value of `path`, looked for first at position `hint` (no index is needed when it is there), with
    /// the position it was found at (the hint for the path after it, in the order of the last walk).
    pub fn get_near(&self, hint: usize, path: &str) -> Option<(usize, &V)> {
        let slot = if hint < self.slots.len() && self.path(hint) == path {
            hint
        } else {
            self.find(path)?
        };
        self.slots[slot].value.as_ref().map(|value| (slot, value))
    }

    /// Whether it holds `path`.
    pub fn contains_key(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// How many positions it has (removed paths keep theirs).
    pub fn positions(&self) -> usize {
        self.slots.len()
    }

    /// The path and value at position `at`, unless it was removed.
    pub fn at(&self, at: usize) -> Option<(&str, &V)> {
        let value = self.slots.get(at)?.value.as_ref()?;
        Some((self.path(at), value))
    }

    /// Whether position `at` holds `path` (and it was not removed).
    pub fn holds_at(&self, at: usize, path: &str) -> bool {
        self.at(at).is_some_and(|(held, _)| held == path)
    }

    /// Replaces the value at position `at`, which `holds_at` said holds a path; returns the value it had.
    pub fn set_at(&mut self, at: usize, value: V) -> Option<V> {
        let slot = self.slots.get_mut(at)?;
        let old = slot.value.replace(value);
        if old.is_none() {
            self.live += 1;
        }
        old
    }

    /// Adds `path`, which the caller knows is not in the map yet (a walk's paths are distinct).
    pub fn push_new(&mut self, path: &str, value: V) {
        self.append(path, value);
        self.index.take();
    }

    /// A new slot for `path` at the end, left out of the index; returns its position.
    fn append(&mut self, path: &str, value: V) -> usize {
        self.slots.push(Slot {
            start: self.text.len(),
            len: path.len(),
            value: Some(value),
        });
        self.text.push_str(path);
        self.live += 1;
        self.slots.len() - 1
    }

    /// Makes sure the index is built and every path has one slot (the later slot of a path met twice is
    /// dropped), before the map is changed.
    fn prepare_change(&mut self) {
        if !self.index().has_duplicates {
            return;
        }
        let mut table = HashTable::with_capacity(self.slots.len());
        for slot in 0..self.slots.len() {
            let path = self.path(slot);
            let hash = self.hash(path);
            if table.find(hash, |&s| self.path(s) == path).is_some() {
                if self.slots[slot].value.take().is_some() {
                    self.live -= 1;
                }
                continue;
            }
            table.insert_unique(hash, slot, |&s| self.hash(self.path(s)));
        }
        self.index = OnceLock::from(Index {
            table,
            has_duplicates: false,
        });
    }

    /// Sets the value of `path`; returns the one it replaces.
    pub fn insert(&mut self, path: &str, value: V) -> Option<V> {
        self.prepare_change();
        if let Some(slot) = self.find(path) {
            let old = self.slots[slot].value.replace(value);
            if old.is_none() {
                self.live += 1;
            }
            return old;
        }
        let slot = self.append(path, value);
        let hash = self.hash(path);
        let PathMap {
            text,
            slots,
            hasher,
            index,
            ..
        } = self;
        // (Without an index, the next lookup builds one that has the new slot.)
        if let Some(index) = index.get_mut() {
            index
                .table
                .insert_unique(hash, slot, |&s| hasher.hash_one(slot_path(text, slots, s)));
        }
        None
    }

    /// Removes `path`; returns its value.
    pub fn remove(&mut self, path: &str) -> Option<V> {
        self.prepare_change();
        let slot = self.find(path)?;
        let old = self.slots[slot].value.take();
        if old.is_some() {
            self.live -= 1;
        }
        old
    }

    /// Keeps only the paths for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &V) -> bool) {
        self.prepare_change();
        let PathMap {
            text, slots, live, ..
        } = self;
        for slot in slots.iter_mut() {
            let Some(value) = &slot.value else {
                continue;
            };
            if !keep(&text[slot.start..slot.start + slot.len], value) {
                slot.value = None;
                *live -= 1;
            }
        }
    }

    /// Every path with its value, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.slots.iter().filter_map(|slot| {
            let value = slot.value.as_ref()?;
            Some((&self.text[slot.start..slot.start + slot.len], value))
        })
    }

    /// Every value, in the order they were added.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().filter_map(|slot| slot.value.as_ref())
    }
}

fn slot_path<'t, V>(text: &'t str, slots: &[Slot<V>], slot: usize) -> &'t str {
    let Slot { start, len, .. } = &slots[slot];
    &text[*start..*start + *len]
}

/// Strings kept one after the other in one string, each with a value, in the order they were added: a list
/// of many short strings costs two allocations, not one per string (the walk's files, a directory
/// listing's names). No lookup by string: that is `PathMap`'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrList<V> {
    text: String,
    /// Per string: where it ends in `text`, and its value.
    items: Vec<(usize, V)>,
}

impl<V> Default for StrList<V> {
    fn default() -> Self {
        StrList {
            text: String::new(),
            items: Vec::new(),
        }
    }
}

impl<V: Copy> StrList<V> {
    /// An empty list with room for `items` strings of `bytes` bytes in all.
    pub fn with_capacity(items: usize, bytes: usize) -> Self {
        StrList {
            text: String::with_capacity(bytes),
            items: Vec::with_capacity(items),
        }
    }

    /// Adds the string made of `parts`, one after the other, with `value`.
    pub fn push(&mut self, parts: &[&str], value: V) {
        for part in parts {
            self.text.push_str(part);
        }
        self.items.push((self.text.len(), value));
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The string at position `at`, with its value.
    pub fn get(&self, at: usize) -> Option<(&str, V)> {
        let (end, value) = *self.items.get(at)?;
        let start = match at.checked_sub(1) {
            Some(before) => self.items.get(before)?.0,
            None => 0,
        };
        debug_assert!(start <= end && end <= self.text.len());
        Some((self.text.get(start..end)?, value))
    }

    /// Every string with its value, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (&str, V)> {
        (0..self.len()).filter_map(|at| self.get(at))
    }

    /// The value of the string at position `at`, to change.
    pub fn value_mut(&mut self, at: usize) -> Option<&mut V> {
        self.items.get_mut(at).map(|(_, value)| value)
    }

    /// The same strings with their values, in the order of the strings' bytes (equal strings keep their
    /// order).
    pub fn sorted(&self) -> Self {
        let mut order: Vec<(&str, V)> = self.iter().collect();
        order.sort_by(|a, b| a.0.cmp(b.0));
        let mut sorted = StrList::with_capacity(self.len(), self.text.len());
        for (text, value) in order {
            sorted.push(&[text], value);
        }
        sorted
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Push(u8),
        Insert(u8, u32),
        Remove(u8),
        RetainEven,
        GetNear(usize, u8),
    }

    fn name(n: u8) -> String {
        format!("dir/{}/file-{n}", n % 3)
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u8>().prop_map(|n| Op::Push(n % 16)),
            (any::<u8>(), any::<u32>()).prop_map(|(n, v)| Op::Insert(n % 16, v)),
            any::<u8>().prop_map(|n| Op::Remove(n % 16)),
            Just(Op::RetainEven),
            (0usize..20, any::<u8>()).prop_map(|(h, n)| Op::GetNear(h, n % 16)),
        ]
    }

    proptest! {
        /// Against `HashMap` plus a list of the order paths were first added: every operation answers the
        /// same, iteration keeps that order, and a hint never changes an answer.
        #[test]
        fn behaves_like_an_ordered_map(ops in proptest::collection::vec(op(), 0..60)) {
            let mut map = PathMap::default();
            let mut model: HashMap<String, u32> = HashMap::new();
            let mut order: Vec<String> = Vec::new();
            for op in ops {
                match op {
                    Op::Push(n) => {
                        let path = name(n);
                        if !model.contains_key(&path) && !order.contains(&path) {
                            map.push_new(&path, u32::from(n));
                            model.insert(path.clone(), u32::from(n));
                            order.push(path);
                        }
                    }
                    Op::Insert(n, v) => {
                        let path = name(n);
                        prop_assert_eq!(map.insert(&path, v), model.insert(path.clone(), v));
                        if !order.contains(&path) {
                            order.push(path);
                        }
                    }
                    Op::Remove(n) => {
                        prop_assert_eq!(map.remove(&name(n)), model.remove(&name(n)));
                    }
                    Op::RetainEven => {
                        map.retain(|_, v| v % 2 == 0);
                        model.retain(|_, v| *v % 2 == 0);
                    }
                    Op::GetNear(hint, n) => {
                        let found = map.get_near(hint, &name(n)).map(|(_, v)| *v);
                        prop_assert_eq!(found, model.get(&name(n)).copied());
                    }
                }
                prop_assert_eq!(map.len(), model.len());
                let listed: Vec<(String, u32)> =
                    map.iter().map(|(p, v)| (p.to_owned(), *v)).collect();
                let expected: Vec<(String, u32)> = order
                    .iter()
                    .filter_map(|p| model.get(p).map(|v| (p.clone(), *v)))
                    .collect();
                prop_assert_eq!(listed, expected);
            }
        }
    }

    /// A hint at the right position answers without the index; one at the wrong position still finds the
    /// path, and says where.
    #[test]
    fn hints_find_the_position() {
        let mut map = PathMap::default();
        for (i, path) in ["a", "b/c", "b/d"].into_iter().enumerate() {
            map.push_new(path, i);
        }
        assert_eq!(map.get_near(1, "b/c"), Some((1, &1)));
        assert!(map.index.get().is_none(), "a hit needs no index");
        assert_eq!(map.get_near(0, "b/d"), Some((2, &2)));
        assert_eq!(map.get_near(7, "b/e"), None);
        assert!(map.holds_at(2, "b/d") && !map.holds_at(2, "b/c") && !map.holds_at(3, "b/d"));
        assert_eq!(map.set_at(2, 9), Some(2));
        assert_eq!(map.get("b/d"), Some(&9));
        map.remove("b/d");
        assert!(!map.holds_at(2, "b/d"), "removed");
        assert_eq!(map.positions(), 3);
        assert_eq!(map.at(1), Some(("b/c", &1)));
        assert_eq!(map.at(2), None);
    }

    /// Paths read twice (a file this crate never writes): counted twice, so a track does not trust them;
    /// the first change keeps only the first.
    #[test]
    fn duplicates_are_dropped_on_the_first_change() {
        let mut map = PathMap::default();
        map.push_new("a", 1);
        map.push_new("b", 2);
        map.push_new("a", 3);
        assert_eq!(map.len(), 3);
        map.insert("c", 4);
        assert_eq!(map.len(), 3);
        let all: Vec<(&str, &i32)> = map.iter().collect();
        assert_eq!(all, vec![("a", &1), ("b", &2), ("c", &4)]);
        assert_eq!(map.remove("a"), Some(1));
        assert_eq!(map.get("a"), None);
    }
}
