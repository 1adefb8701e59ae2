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

/// One name of the upstream head, where `to_upstream`'s `HeaderMap` holds it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Entry {
    /// The client's field lines of one name, from the first (its index).
    Client(usize),
    ForwardedFor,
    ForwardedProto,
    ForwardedHost,
    Host,
}

/// The order of `to_upstream`'s `HeaderMap`: one entry per name, in the order the names
/// first came; a removal moves the last entry into the removed one's place, as the map's
/// `swap_remove` does; an insert replaces an entry in place or appends one.
pub(super) struct Fields<'h, 'a> {
    pub(super) fields: &'h [h1::Header<'a>],
    pub(super) entries: Vec<Entry>,
}

impl<'h, 'a> Fields<'h, 'a> {
    /// The map `fields` would make: one entry per name, in the order the names first came.
    pub(super) fn of(fields: &'h [h1::Header<'a>], room: usize) -> Fields<'h, 'a> {
        let mut map = Fields {
            fields,
            entries: Vec::with_capacity(fields.len() + room),
        };
        for (i, field) in fields.iter().enumerate() {
            if !fields[..i].iter().any(|f| same_name(f.name, field.name)) {
                map.entries.push(Entry::Client(i));
            }
        }
        map
    }

    /// Each line of the entry `entry` of the client's fields: its name, its value.
    pub(super) fn lines(
        &self,
        first: usize,
    ) -> impl Iterator<Item = (&'a str, &'a [u8])> + use<'h, 'a> {
        let fields: &'h [h1::Header<'a>] = self.fields;
        let name = fields[first].name;
        fields[first..]
            .iter()
            .filter(move |f| same_name(f.name, name))
            .map(|f| (f.name, f.value))
    }

    pub(super) fn position(&self, name: &str) -> Option<usize> {
        self.entries.iter().position(|entry| match *entry {
            Entry::Client(i) => same_name(self.fields[i].name, name),
            _ => false,
        })
    }

    pub(super) fn remove(&mut self, name: &str) {
        if let Some(at) = self.position(name) {
            self.entries.swap_remove(at);
        }
    }

    pub(super) fn insert(&mut self, name: &str, entry: Entry) {
        match self.position(name) {
            Some(at) => self.entries[at] = entry,
            None => self.entries.push(entry),
        }
    }

    /// The values of the client's lines named `name`, if the map still holds them.
    pub(super) fn values<'n>(
        &self,
        name: &'n str,
    ) -> impl Iterator<Item = &'a [u8]> + use<'h, 'a, 'n> {
        let held = self.position(name).is_some();
        let fields: &'h [h1::Header<'a>] = self.fields;
        fields
            .iter()
            .filter(move |f| held && same_name(f.name, name))
            .map(|f| f.value)
    }
}

/// `strip_hop_by_hop` on the model: only when a hop-by-hop name is there, the names the
/// `Connection` lines list (those `HeaderValue::to_str` reads), then the hop-by-hop ones.
pub(super) fn strip_hop_by_hop(map: &mut Fields<'_, '_>) {
    // Most heads carry none: one pass over the lines, not a search for each name.
    if !map.fields.iter().any(|f| is_hop_by_hop(f.name)) {
        return;
    }
    let listed: Vec<&str> = map
        .values("connection")
        .filter_map(|v| std::str::from_utf8(v).ok())
        .filter(|v| v.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect();
    for name in listed {
        map.remove(name);
    }
    for name in HOP_BY_HOP {
        map.remove(name);
    }
}

/// Whether two names are the same (ASCII case ignored); the lengths first, which tell most
/// names apart without a look at their bytes.
fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.eq_ignore_ascii_case(b)
}

/// Whether `name` is one of [`HOP_BY_HOP`] (compared only with those of its length).
fn is_hop_by_hop(name: &str) -> bool {
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
    candidates.iter().any(|c| name.eq_ignore_ascii_case(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_names_are_found_by_length_then_bytes() {
        for name in HOP_BY_HOP {
            assert!(is_hop_by_hop(name), "{name}");
            assert!(is_hop_by_hop(&name.to_ascii_uppercase()), "{name}");
        }
        for name in ["tf", "host", "keep-alivf", "x-forwarded-for", ""] {
            assert!(!is_hop_by_hop(name), "{name}");
        }
    }
}
