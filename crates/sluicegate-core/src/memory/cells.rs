//! [`Cells`]: the owned cell array of one [`RawTable`](super::raw::RawTable), like a
//! `Box<[T]>`, except that an array of 2 MiB or more is placed on 2 MiB boundaries and,
//! on Linux, offered huge pages (`madvise(MADV_HUGEPAGE)`).
//!
//! Why: at a million keys every decision touches one random cell of a multi-megabyte
//! table. On 4 KiB pages that is a TLB miss as well as a cache miss (a page walk of its
//! own); on 2 MiB pages the TLB covers the table. Transparent huge pages are often enabled
//! for `madvise`d memory only (`/sys/kernel/mm/transparent_hugepage/enabled` = `madvise`),
//! so the advice is what gets them. Where the kernel refuses, or elsewhere than Linux, the
//! memory is ordinary memory with a stricter alignment: nothing else changes.
//!
//! Memory is counted honestly: [`Cells::allocated_bytes`] is the size asked of the
//! allocator. The advice covers only the whole 2 MiB pages inside the array, so the kernel
//! commits no huge page beyond it.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A huge page (x86-64 and aarch64 with 4 KiB base pages).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// An owned, initialised array of `T`, possibly huge-page backed (see the module doc).
pub(crate) struct Cells<T> {
    ptr: NonNull<T>,
    len: usize,
    _owns: PhantomData<T>,
}

// SAFETY: `Cells<T>` owns its `T`s exactly as a `Box<[T]>` does (no sharing, no interior
// mutability of its own), so it may cross and be shared between threads when `T` may.
unsafe impl<T: Send> Send for Cells<T> {}
// SAFETY: as above: `&Cells<T>` gives only `&[T]`.
unsafe impl<T: Sync> Sync for Cells<T> {}

impl<T> Cells<T> {
    /// No cells (no allocation).
    pub(crate) fn empty() -> Self {
        Cells {
            ptr: NonNull::dangling(),
            len: 0,
            _owns: PhantomData,
        }
    }

    /// The layout of `len` cells: huge-page aligned from [`HUGE_PAGE`] bytes on.
    fn layout(len: usize) -> Layout {
        let layout = Layout::array::<T>(len).unwrap_or_else(|_| capacity_overflow());
        if layout.size() >= HUGE_PAGE {
            // A power of two no smaller than `T`'s own alignment (at most a page).
            layout
                .align_to(HUGE_PAGE)
                .unwrap_or_else(|_| capacity_overflow())
        } else {
            layout
        }
    }

    /// Bytes of cells asked of the allocator (what the table holds).
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.len * size_of::<T>()
    }
}

impl<T: Default> Cells<T> {
    /// `len` cells, each `T::default()`.
    pub(crate) fn new(len: usize) -> Self {
        if len == 0 || size_of::<T>() == 0 {
            // No memory to ask for: a dangling pointer is a valid array of zero-sized `T`s
            // (never the case here: cells carry a tag), and `T::default()` has no effect.
            let mut cells = Cells::empty();
            cells.len = len;
            return cells;
        }
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size (len > 0, T not zero-sized).
        let raw = unsafe { alloc(layout) }.cast::<T>();
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        advise_huge(ptr.as_ptr().cast(), layout);
        for i in 0..len {
            // SAFETY: `i < len`, inside the allocation of `len` `T`s; writes without reading
            // or dropping the uninitialised memory.
            unsafe { ptr.as_ptr().add(i).write(T::default()) };
        }
        Cells {
            ptr,
            len,
            _owns: PhantomData,
        }
    }
}

/// Advises huge pages for the whole 2 MiB pages of a huge-page aligned allocation.
#[cfg(all(target_os = "linux", not(miri)))]
fn advise_huge(ptr: *mut u8, layout: Layout) {
    if layout.align() < HUGE_PAGE {
        return;
    }
    let len = layout.size() / HUGE_PAGE * HUGE_PAGE;
    // SAFETY: `ptr` starts an allocation of `layout.size() >= len` bytes that this process
    // owns, aligned to 2 MiB (so to the base page); MADV_HUGEPAGE changes only how the
    // kernel backs the range, never its contents or validity. Its failure (THP disabled,
    // an old kernel) leaves ordinary pages, which is fine, so the result is ignored.
    unsafe {
        libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE);
    }
}

/// Elsewhere (and under Miri, which has no `madvise`): ordinary pages.
#[cfg(not(all(target_os = "linux", not(miri))))]
fn advise_huge(_ptr: *mut u8, _layout: Layout) {}

#[cold]
fn capacity_overflow() -> ! {
    panic!("table cells overflow the address space")
}

impl<T> Deref for Cells<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialised `T`s owned by `self` (or is dangling
        // with `len == 0`, a valid empty slice).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for Cells<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for Cells<T> {
    fn drop(&mut self) {
        let slice: *mut [T] = &mut **self;
        // SAFETY: the `len` `T`s are initialised and dropped once, here.
        unsafe { std::ptr::drop_in_place(slice) };
        if self.len > 0 && size_of::<T>() > 0 {
            // SAFETY: allocated in `new` with this very layout (same `len`, same `T`).
            unsafe { dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) };
        }
    }
}

impl<T> Default for Cells<T> {
    fn default() -> Self {
        Cells::empty()
    }
}

impl<T: fmt::Debug> fmt::Debug for Cells<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_arrays_are_ordinary_and_initialised() {
        let mut cells = Cells::<(u64, u64)>::new(100);
        assert_eq!(cells.len(), 100);
        assert_eq!(cells.allocated_bytes(), 1600);
        assert!(cells.iter().all(|&c| c == (0, 0)));
        cells[99] = (1, 2);
        assert_eq!(cells[99], (1, 2));
        assert!(Cells::<(u64, u64)>::empty().is_empty());
    }

    #[test]
    fn huge_arrays_are_aligned_counted_and_dropped() {
        // 4 MiB + 16 bytes: two whole huge pages and a tail on ordinary pages.
        let len = 2 * HUGE_PAGE / 16 * 2 + 1;
        let mut cells = Cells::<(u64, u64)>::new(len);
        assert_eq!(cells.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(cells.allocated_bytes(), len * 16);
        assert!(cells.iter().all(|&c| c == (0, 0)));
        cells[len - 1] = (7, 7);
        cells.swap(0, len - 1);
        assert_eq!((cells[0], cells[len - 1]), ((7, 7), (0, 0)));
    }

    #[test]
    fn states_with_heap_memory_are_dropped() {
        // Miri's leak check (and its use-after-free check) covers the drop here.
        let mut cells = Cells::<Vec<u8>>::new(3);
        cells[1].extend_from_slice(b"abc");
        let taken = std::mem::take(&mut cells[1]);
        cells[2] = taken;
        assert_eq!(cells[2], b"abc");
        drop(cells);
    }
}
