//! The order in which an `http::HeaderMap` holds the fields of a head, modelled on the
//! head's own field lines, so that the gateway's lean path writes a head in the order
//! hyper's path would, without building the map: one entry per name, in the order the
//! names first came, each with all its lines; a removal moves the last entry into the
//! removed one's place (the map's `swap_remove`); an insert replaces an entry in place or
//! appends one. `strip_hop_by_hop` is `gateway::strip_hop_by_hop` on the model.

use crate::h1;

/// The names `strip_hop_by_hop` removes, in its order.
pub(super) const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// One name of the head, where the `HeaderMap` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// The lines of one name, from the first (its index).
    Client(u8),
    ForwardedFor,
    ForwardedProto,
    ForwardedHost,
    Host,
}

/// The most entries a model holds: every line of the largest head either side parses
/// (the lean front's [`h1::MAX_FIELDS`], the lane's [`crate::lane::MAX_HEADERS`]) and the
/// four the gateway inserts. Indices fit an `u8`, so the entries fit 2 bytes each and the
/// model lives on the stack (no allocation a request).
const CAP: usize = {
    let (a, b) = (h1::MAX_FIELDS, crate::lane::MAX_HEADERS);
    (if a > b { a } else { b }) + 4
};
const _: () = assert!(CAP <= u8::MAX as usize);

/// The field lines a model is made of: the client's (as `httparse` parsed them) or the
/// upstream's (offsets into the lane's head), read as bytes.
pub(super) trait Lines<'a>: Copy {
    fn count(self) -> usize;
    fn name(self, i: usize) -> &'a [u8];
    fn value(self, i: usize) -> &'a [u8];
}

impl<'a> Lines<'a> for &'a [h1::Header<'a>] {
    fn count(self) -> usize {
        self.len()
    }
    fn name(self, i: usize) -> &'a [u8] {
        self[i].name.as_bytes()
    }
    fn value(self, i: usize) -> &'a [u8] {
        self[i].value
    }
}

/// A head's field lines by where they are in it: name start, end, value start, end (the
/// lane's `Conn::offsets`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Offsets<'a> {
    pub(super) head: &'a [u8],
    pub(super) offsets: &'a [[usize; 4]],
}

impl<'a> Lines<'a> for Offsets<'a> {
    fn count(self) -> usize {
        self.offsets.len()
    }
    fn name(self, i: usize) -> &'a [u8] {
        let [start, end, ..] = self.offsets[i];
        &self.head[start..end]
    }
    fn value(self, i: usize) -> &'a [u8] {
        let [.., start, end] = self.offsets[i];
        &self.head[start..end]
    }
}

/// The order of a `HeaderMap` made of `lines`: one entry per name, in the order the names
/// first came; a removal moves the last entry into the removed one's place, as the map's
/// `swap_remove` does; an insert replaces an entry in place or appends one.
pub(super) struct Fields<L> {
    pub(super) lines: L,
    entries: [Entry; CAP],
    len: usize,
}

impl<'a, L: Lines<'a>> Fields<L> {
    /// The map `lines` would make: one entry per name, in the order the names first came.
    /// (Both parsers bound their lines below [`CAP`]; any beyond would not be seen.)
    pub(super) fn of(lines: L) -> Fields<L> {
        let mut map = Fields {
            lines,
            entries: [Entry::Host; CAP],
            len: 0,
        };
        let count = lines.count().min(CAP - 4);
        for i in 0..count {
            let name = lines.name(i);
            if !(0..i).any(|j| same_name(lines.name(j), name)) {
                map.push(Entry::Client(i as u8));
            }
        }
        map
    }

    /// The entries, in the map's order.
    pub(super) fn entries(&self) -> &[Entry] {
        &self.entries[..self.len]
    }

    fn push(&mut self, entry: Entry) {
        if let Some(slot) = self.entries.get_mut(self.len) {
            *slot = entry;
            self.len += 1;
        }
    }

    /// Each line of the entry `first` of the lines: its name, its value.
    pub(super) fn lines(
        &self,
        first: u8,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a, L> {
        let (lines, first) = (self.lines, usize::from(first));
        let name = lines.name(first);
        (first..lines.count())
            .filter(move |&i| same_name(lines.name(i), name))
            .map(move |i| (lines.name(i), lines.value(i)))
    }

    pub(super) fn position(&self, name: &[u8]) -> Option<usize> {
        self.entries().iter().position(|entry| match *entry {
            Entry::Client(i) => same_name(self.lines.name(usize::from(i)), name),
            _ => false,
        })
    }

    pub(super) fn remove(&mut self, name: &[u8]) {
        if let Some(at) = self.position(name) {
            self.len -= 1;
            self.entries[at] = self.entries[self.len];
        }
    }

    pub(super) fn insert(&mut self, name: &[u8], entry: Entry) {
        match self.position(name) {
            Some(at) => self.entries[at] = entry,
            None => self.push(entry),
        }
    }

    /// The values of the lines named `name`, if the map still holds them.
    pub(super) fn values<'n>(
        &self,
        name: &'n [u8],
    ) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n, L> {
        let held = self.position(name).is_some();
        let lines = self.lines;
        (0..lines.count())
            .filter(move |&i| held && same_name(lines.name(i), name))
            .map(move |i| lines.value(i))
    }
}

/// `strip_hop_by_hop` on the model: only when a hop-by-hop name is there, the names the
/// `Connection` lines list (those `HeaderValue::to_str` reads), then the hop-by-hop ones.
pub(super) fn strip_hop_by_hop<'a, L: Lines<'a>>(map: &mut Fields<L>) {
    // Most heads carry none: one pass over the lines, not a search for each name.
    let lines = map.lines;
    if !(0..lines.count()).any(|i| is_hop_by_hop(lines.name(i))) {
        return;
    }
    let listed: Vec<&[u8]> = map
        .values(b"connection")
        .filter(|v| v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)))
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|name| !name.is_empty())
        .collect();
    for name in listed {
        map.remove(name);
    }
    for name in HOP_BY_HOP {
        map.remove(name.as_bytes());
    }
}

/// Whether two names are the same (ASCII case ignored); the lengths first, which tell most
/// names apart without a look at their bytes.
fn same_name(a: &[u8], b: &[u8]) -> bool {
    h1::same_name(a, b)
}

/// Whether `name` is one of [`HOP_BY_HOP`] (compared only with those of its length).
pub(super) fn is_hop_by_hop(name: &[u8]) -> bool {
    let candidates: &[&str] = match name.len() {
        2 => &["te"],
        7 => &["trailer", "upgrade"],
        10 => &["connection", "keep-alive"],
        16 => &["proxy-connection"],
        17 => &["transfer-encoding"],
        18 => &["proxy-authenticate"],
        19 => &["proxy-authorization"],
        _ => return false,
    };
    candidates.iter().any(|c| h1::same_name(name, c.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_names_are_found_by_length_then_bytes() {
        for name in HOP_BY_HOP {
            assert!(is_hop_by_hop(name.as_bytes()), "{name}");
            assert!(
                is_hop_by_hop(name.to_ascii_uppercase().as_bytes()),
                "{name}"
            );
        }
        for name in ["tf", "host", "keep-alivf", "x-forwarded-for", ""] {
            assert!(!is_hop_by_hop(name.as_bytes()), "{name}");
        }
    }
}
