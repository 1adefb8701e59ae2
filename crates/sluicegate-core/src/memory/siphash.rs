//! One-shot SipHash over a byte string (SipHash-1-3 for fingerprints). std's hashers are
//! streaming (`Hasher::write` buffers partial words); hashing a whole key in one call is
//! about twice as fast, which matters when the hash is a third of a check. The `siphasher`
//! crate's one-shot keyed hash computes the same values (tested below) in 4–7% more
//! instructions (ARCHITECTURE.md, "Written by hand"), so this stays, checked against it.

/// SipHash with `C` compression and `D` finalization rounds, keyed by `(k0, k1)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sip<const C: usize, const D: usize> {
    k0: u64,
    k1: u64,
}

impl<const C: usize, const D: usize> Sip<C, D> {
    /// The key, to be written into a snapshot (fingerprints depend on it).
    pub(crate) fn key(&self) -> (u64, u64) {
        (self.k0, self.k1)
    }
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

/// The little-endian word at `at` (the caller keeps `at + 8 <= bytes.len()`).
#[inline(always)]
fn word_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The last `len % 8` bytes of `bytes` as a little-endian word (0 when none). A key of 8
/// bytes or more reads them with one load of its last 8 bytes, shifted (the bytes before
/// the tail were hashed already): no byte-by-byte assembly, no branch per size.
#[inline(always)]
fn tail_word(bytes: &[u8]) -> u64 {
    let len = bytes.len();
    let rest = len % 8;
    if rest == 0 {
        return 0;
    }
    if len >= 8 {
        return word_at(bytes, len - 8) >> (64 - 8 * rest);
    }
    let tail = bytes;
    let mut word = 0u64;
    let mut i = 0;
    if rest >= 4 {
        word = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
        i = 4;
    }
    if rest - i >= 2 {
        word |= u64::from(u16::from_le_bytes([tail[i], tail[i + 1]])) << (8 * i);
        i += 2;
    }
    if rest > i {
        word |= u64::from(tail[i]) << (8 * i);
    }
    word
}

impl<const C: usize, const D: usize> Sip<C, D> {
    /// A hasher with the 128-bit key `(k0, k1)`.
    pub(crate) const fn new(k0: u64, k1: u64) -> Self {
        Sip { k0, k1 }
    }

    /// The hash of `bytes`, as specified by Aumasson and Bernstein.
    #[inline(always)]
    pub(crate) fn hash(&self, bytes: &[u8]) -> u64 {
        let mut v = [
            self.k0 ^ 0x736f_6d65_7073_6575,
            self.k1 ^ 0x646f_7261_6e64_6f6d,
            self.k0 ^ 0x6c79_6765_6e65_7261,
            self.k1 ^ 0x7465_6462_7974_6573,
        ];
        // Whole words by `chunks_exact`: no bounds check per word (indexing kept one).
        for chunk in bytes.chunks_exact(8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let m = u64::from_le_bytes(word);
            v[3] ^= m;
            for _ in 0..C {
                round(&mut v);
            }
            v[0] ^= m;
        }
        let m = tail_word(bytes) | ((bytes.len() as u64 & 0xff) << 56);
        v[3] ^= m;
        for _ in 0..C {
            round(&mut v);
        }
        v[0] ^= m;
        v[2] ^= 0xff;
        for _ in 0..D {
            round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

#[cfg(test)]
mod tests {
    use super::Sip;

    /// The reference vectors of the SipHash paper (SipHash-2-4, key 00..0f, messages
    /// 00, 00 01, …): the first and the 15- and 16-byte ones, across the word boundary.
    #[test]
    fn siphash_2_4_reference_vectors() {
        let sip = Sip::<2, 4>::new(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
        let message: Vec<u8> = (0..64).collect();
        assert_eq!(sip.hash(&message[..0]), 0x726f_db47_dd0e_0e31);
        assert_eq!(sip.hash(&message[..1]), 0x74f8_39c5_93dc_67fd);
        assert_eq!(sip.hash(&message[..15]), 0xa129_ca61_49be_45e5);
        assert_eq!(sip.hash(&message[..16]), 0x3f2a_cc7f_57c2_9bdb);
    }

    /// The `siphasher` crate's SipHash-1-3 (the variant fingerprints use) and SipHash-2-4
    /// agree on every length up to 64, under several keys.
    #[test]
    fn agrees_with_siphasher() {
        let message: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(101) ^ 0x5a).collect();
        for (k0, k1) in [
            (0, 0),
            (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210),
            (u64::MAX, 7),
        ] {
            let ours13 = Sip::<1, 3>::new(k0, k1);
            let ours24 = Sip::<2, 4>::new(k0, k1);
            let theirs13 = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
            let theirs24 = siphasher::sip::SipHasher24::new_with_keys(k0, k1);
            for len in 0..=64 {
                let m = &message[..len];
                assert_eq!(ours13.hash(m), theirs13.hash(m), "1-3, length {len}");
                assert_eq!(ours24.hash(m), theirs24.hash(m), "2-4, length {len}");
            }
        }
    }

    /// std's (deprecated, but stable) SipHash-2-4 agrees on every length up to 64.
    #[test]
    #[allow(deprecated)]
    fn agrees_with_std() {
        use std::hash::Hasher;
        let (k0, k1) = (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
        let sip = Sip::<2, 4>::new(k0, k1);
        let message: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(37)).collect();
        for len in 0..=64 {
            let mut std = std::hash::SipHasher::new_with_keys(k0, k1);
            std.write(&message[..len]);
            assert_eq!(sip.hash(&message[..len]), std.finish(), "length {len}");
        }
    }
}
