//! A minimal exact rational number, for reference models independent of the fixed-point
//! arithmetic of the implementation.

use std::cmp::Ordering;
use std::ops::{Add, Sub};

/// An exact fraction `num / den`, always reduced, `den > 0`.
#[derive(Debug, Clone, Copy)]
pub struct Ratio {
    num: i128,
    den: i128,
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 { a.abs() } else { gcd(b, a % b) }
}

impl Ratio {
    /// `num / den`; panics when `den <= 0`.
    pub fn new(num: i128, den: i128) -> Self {
        assert!(den > 0);
        let g = gcd(num, den).max(1);
        Ratio {
            num: num / g,
            den: den / g,
        }
    }
    /// The integer `n`.
    pub fn int(n: i128) -> Self {
        Ratio::new(n, 1)
    }
    /// `self * n`.
    pub fn mul_int(self, n: i128) -> Ratio {
        Ratio::new(self.num * n, self.den)
    }
    /// The smaller of the two.
    pub fn min(self, o: Ratio) -> Ratio {
        if self <= o { self } else { o }
    }
}

impl PartialEq for Ratio {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Ratio {}
impl PartialOrd for Ratio {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ratio {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.num * o.den).cmp(&(o.num * self.den))
    }
}

impl Add for Ratio {
    type Output = Ratio;
    fn add(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.den + o.num * self.den, self.den * o.den)
    }
}

impl Sub for Ratio {
    type Output = Ratio;
    fn sub(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.den - o.num * self.den, self.den * o.den)
    }
}
