//! Places: typed views of part of a micro-buffer — the object, one of its fields, a field
//! of a nested struct, an array element — that mark only their own bytes modified when
//! written, so that commit logs and checksums only what changed.
//!
//! Invariant: a `Place<'a, T>` covers `size_of::<T>()` bytes at `base` inside its buffer's
//! payload, suitably aligned for `T`, and holds the buffer's exclusive borrow (through the
//! handle it was made from) for `'a`. Every write through it marks exactly the bytes it
//! changed.

use super::buffer::Buffer;
use super::handle::Mut;
use crate::persistent::Persistent;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

/// A writable view of a `T` inside a transaction's micro-buffer: the whole object
/// ([`Mut::place`]) or a part of it ([`Place::project`], [`Place::at`], the `*_mut` field
/// accessors `#[derive(Persistent)]` generates).
///
/// Reading derefs to `&T`. [`set`](Place::set) and the generated setters mark only the
/// place's bytes modified; `DerefMut` also marks the whole place (and only the place).
///
/// ```
/// # use pgl_runtime::{Config, Pool};
/// # let dir = std::env::temp_dir().join(format!("pgl-doc-place-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let pool = Pool::create(dir.join("p.pgl"), &Config::small("doc")).unwrap();
/// let oid = pool.tx(|tx| tx.alloc([[0u32; 4]; 8]))?;
/// pool.tx(|tx| {
///     let mut grid = tx.open(oid)?;
///     // Only the 4 bytes of grid[2][3] are logged and checksummed.
///     grid.place().at(2).set_at(3, 7);
///     Ok(())
/// })?;
/// assert_eq!(pool.get(oid)?[2][3], 7);
/// # drop(pool);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), pgl_runtime::Error>(())
/// ```
pub struct Place<'a, T: Persistent> {
    buf: NonNull<Buffer>,
    base: usize,
    _p: PhantomData<(&'a mut Buffer, *mut T)>,
}

impl<'a, T: Persistent> Place<'a, T> {
    /// # Safety
    /// `buf` is live and exclusively borrowed for `'a` by the caller's handle, and
    /// `base..base + size_of::<T>()` lies inside its payload, aligned for `T`.
    pub(crate) unsafe fn new(buf: NonNull<Buffer>, base: usize) -> Self {
        Place {
            buf,
            base,
            _p: PhantomData,
        }
    }

    /// The buffer and offset, for a view of part of the place that takes over its borrow
    /// (`leds::GroupPlace`).
    pub(crate) fn into_parts(self) -> (NonNull<Buffer>, usize) {
        (self.buf, self.base)
    }

    fn buf_mut(&mut self) -> &mut Buffer {
        // SAFETY: live and exclusively borrowed for 'a (see `new`); `&mut self` makes this
        // the only access.
        unsafe { self.buf.as_mut() }
    }

    fn ptr(&self) -> *const T {
        // SAFETY: the buffer is live (see `new`); `base` lies inside the payload, so the
        // offset stays in bounds.
        unsafe { self.buf.as_ref().payload().as_ptr().add(self.base) as *const T }
    }

    fn ptr_mut(&mut self) -> *mut T {
        let base = self.base;
        // SAFETY: as in `ptr`, from the exclusive borrow.
        unsafe { self.buf_mut().payload_ptr().add(base) as *mut T }
    }

    /// Byte offset of this place inside the object.
    pub fn offset(&self) -> usize {
        self.base
    }

    /// Replaces the value and marks its bytes modified.
    pub fn set(&mut self, value: T) {
        let p = self.ptr_mut();
        // SAFETY: `p` is valid for writes of a `T` and aligned (see `new`), and no reference
        // into the buffer is alive while `&mut self` is held. `write` does not drop the old
        // bytes, which are only bytes.
        unsafe { p.write(value) };
        let (start, end) = (self.base, self.base + core::mem::size_of::<T>());
        self.buf_mut().mark(start, end);
    }

    /// A shorter-lived place for the same bytes, so that this one can be used again after.
    pub fn reborrow(&mut self) -> Place<'_, T> {
        // SAFETY: the same buffer and range; the new place borrows `self` exclusively.
        unsafe { Place::new(self.buf, self.base) }
    }

    /// The place of a part of this value, chosen by a closure that returns a reference into
    /// it: `place.project(|s| &s.pos.x)`.
    ///
    /// # Panics
    /// If the closure returns a reference that does not lie inside this value (a bug in the
    /// caller, like an index out of bounds).
    pub fn project<F: Persistent>(self, part: impl FnOnce(&T) -> &F) -> Place<'a, F> {
        let whole: &T = &self;
        let start = whole as *const T as usize;
        let at = part(whole) as *const F as usize;
        let offset = at.wrapping_sub(start);
        let size = core::mem::size_of::<T>();
        if at < start || offset > size || size - offset < core::mem::size_of::<F>() {
            panic!(
                "Place::project: the closure returned a reference outside the {} it was given",
                T::TYPE_NAME
            );
        }
        // SAFETY: the closure returned a reference to an `F` inside this value, so
        // `base + offset` is in the payload and aligned for `F`; the new place takes over
        // this place's borrow (`self` is consumed).
        unsafe { Place::new(self.buf, self.base + offset) }
    }

    /// Runs `f` on the value and marks the whole place modified.
    pub fn update<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        f(self)
    }
}

impl<'a, T: Persistent, const N: usize> Place<'a, [T; N]> {
    /// The place of element `i`.
    ///
    /// # Panics
    /// If `i >= N`.
    pub fn at(self, i: usize) -> Place<'a, T> {
        assert!(
            i < N,
            "index {i} out of bounds of a [{}; {N}]",
            T::TYPE_NAME
        );
        let base = self.base + i * core::mem::size_of::<T>();
        // SAFETY: element `i < N` lies inside the array, aligned as `T`; the new place takes
        // over this place's borrow.
        unsafe { Place::new(self.buf, base) }
    }

    /// Sets element `i`, marking only its bytes modified.
    ///
    /// # Panics
    /// If `i >= N`.
    pub fn set_at(&mut self, i: usize, value: T) {
        self.reborrow().at(i).set(value);
    }
}

impl<T: Persistent> Deref for Place<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: in bounds, aligned and initialised (see `new`); every bit pattern is a valid
        // `T`; no `&mut` into the buffer exists while `&self` is borrowed.
        unsafe { &*self.ptr() }
    }
}

impl<T: Persistent> DerefMut for Place<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        let (start, end) = (self.base, self.base + core::mem::size_of::<T>());
        self.buf_mut().mark(start, end);
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
        unsafe { &mut *self.ptr_mut() }
    }
}

impl<T: Persistent + core::fmt::Debug> core::fmt::Debug for Place<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}

/// Handles through which a `T` may be changed: [`Mut`], [`Place`] and
/// [`Detached`](crate::Detached). The setters `#[derive(Persistent)]` generates require it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is a read-only view of a `{T}`",
    label = "this handle cannot change the object",
    note = "open the object for update with `tx.open(oid)` in a transaction, or \
            `pool.open_mut(oid)` and `.commit()`"
)]
pub trait AsPlace<T: Persistent> {
    /// The place of the whole value.
    fn place(&mut self) -> Place<'_, T>;
}

impl<T: Persistent> AsPlace<T> for Mut<'_, T> {
    fn place(&mut self) -> Place<'_, T> {
        Mut::place(self)
    }
}

impl<T: Persistent> AsPlace<T> for Place<'_, T> {
    fn place(&mut self) -> Place<'_, T> {
        self.reborrow()
    }
}
