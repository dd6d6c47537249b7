//! Extension chains inside a transaction: walking them, the lazy upgrade (allocate the
//! missing groups, run their inits, link them), creating and copying objects with their
//! chains. (`Tx::free` frees an object with its chain: the chain is the object's tail,
//! see `tx::tail`.)
//!
//! Invariant: every change is made through the transaction, so an upgrade commits or
//! vanishes with the rest of it: after a crash an object is either un-upgraded or carries
//! every group the upgrade created. A base object is never moved or copied by an upgrade,
//! so references to it stay valid. Two transactions upgrading one object conflict on the
//! base's write lock; the one that retries finds the groups linked and adds none.

use super::extendible::{Extendible, ExtendibleData, MAX_GROUPS};
use super::inline::{check_inline_count, ObjImage};
use super::link::{base_link, inline_count, separate, ExtLink, MAX_INLINE};
use super::view::{Ext, ExtMut};
use crate::persistent::{group_type_id, Oid, Persistent};
use crate::tx::{GroupScope, Read, Tx};
use crate::{Error, Result};

/// Offsets of groups 1 to `GROUPS` (0 where missing or inline), how many are present,
/// and how many of those the base's reserve holds (groups 1 to `inline`).
struct Chain {
    offs: [u64; MAX_GROUPS],
    present: usize,
    inline: usize,
}

/// Names the part of an extendible `T` in a layout mismatch: `group` 0 is the base.
fn in_part<T: Extendible>(e: Error, group: usize) -> Error {
    match e {
        Error::LayoutMismatch {
            type_name,
            stored_name,
            type_id,
            stored,
            compiled,
            pool_file,
            ..
        } => Error::LayoutMismatch {
            type_name: if group == 0 {
                type_name
            } else {
                format!(
                    "{} extension group {group} ({type_name})",
                    core::any::type_name::<T>()
                )
            },
            stored_name,
            type_id,
            stored,
            compiled,
            group: Some(group as u32),
            pool_file,
        },
        e => e,
    }
}

/// The part of an extendible `T` whose type id is `type_id`: 0 for the base, `k` for group
/// `k` (`group_type_id`, the id `#[extendible]` gives it).
fn part_of<T: Extendible>(type_id: u32) -> Option<usize> {
    if type_id == T::TYPE_ID {
        return Some(0);
    }
    (1..=T::GROUPS).find(|&k| group_type_id(T::TYPE_ID, k as u64) == type_id)
}

/// Names the part of `T` a layout mismatch of one of its types is about (for errors that
/// do not come from a walk, which knows the group it is at).
fn in_own_part<T: Extendible>(e: Error) -> Error {
    match &e {
        Error::LayoutMismatch { type_id, .. } => match part_of::<T>(*type_id) {
            Some(k) => in_part::<T>(e, k),
            None => e,
        },
        _ => e,
    }
}

/// For the fast paths of `ext`/`ext_mut`: a group of another layout is left to the walk,
/// which reports it with its group number; every other error stands.
fn walk_instead<R>(e: Error) -> Result<Option<R>> {
    match e {
        Error::LayoutMismatch { .. } | Error::TypeMismatch { .. } => Ok(None),
        e => Err(e),
    }
}

/// A chain found incomplete right after the upgrade completed it: only a concurrent
/// scribble of the pool can do that.
fn incomplete<T: Extendible>(oid: Oid<T>) -> Error {
    Error::Corrupt {
        what: "extension chain",
        offset: oid.raw(),
        detail: format!(
            "the `{}` object lacks extension groups right after its upgrade; `pgl check` \
             verifies the objects",
            T::TYPE_NAME
        ),
        pool_file: None,
    }
}

/// Where group `k` of `T` lies in the reserve, if it is kept there.
fn inline_at<T: Extendible>(k: usize) -> Option<usize> {
    T::__INLINE_AT
        .get(k.checked_sub(1)?)
        .copied()
        .filter(|&at| at != usize::MAX)
}

/// Whether this build keeps every group of `T` in its reserve (a constant: `const fn` of
/// the generated `__INLINE_AT`). `#[extendible(upgrade = on_write)]` asserts it.
#[doc(hidden)]
#[must_use]
pub const fn all_inline<T: Extendible>() -> bool {
    let mut k = 0;
    while k < T::GROUPS {
        if k >= T::__INLINE_AT.len() || T::__INLINE_AT[k] == usize::MAX || k >= MAX_INLINE {
            return false;
        }
        k += 1;
    }
    true
}

/// How many of the groups this build knows the base's reserve holds, from its link:
/// `Error::Corrupt` if the link counts more inline groups than the reserve has room for
/// (a damaged link; a reserve changed since is a layout mismatch, caught before), or one
/// that this build keeps in an object of its own (`LayoutMismatch` if the pool stored
/// that group with another layout: it grew past the reserve since).
fn inline_known<T: Extendible>(tx: &Tx<'_>, oid: Oid<T>, link: u64) -> Result<usize> {
    check_inline_count(oid.raw(), T::TYPE_NAME, link, T::__RESERVE)?;
    let n = inline_count(link).min(T::GROUPS);
    let Some(k) = (1..=n).find(|&k| inline_at::<T>(k).is_none()) else {
        return Ok(n);
    };
    let (type_id, compiled) = T::GROUP_KEYS[k - 1];
    let stored = crate::tx::list_types(tx.eng)?
        .into_iter()
        .find(|t| t.type_id == type_id);
    if let Some(found) = stored.filter(|t| t.layout != compiled) {
        return Err(Error::LayoutMismatch {
            type_name: format!("{} extension group {k}", core::any::type_name::<T>()),
            stored_name: found.name,
            type_id,
            stored: found.layout,
            compiled,
            group: Some(k as u32),
            pool_file: None,
        });
    }
    Err(Error::Corrupt {
        what: "extension link",
        offset: oid.raw(),
        detail: format!(
            "the `{}` object's link counts {} extension group(s) in its reserve, but this \
             build keeps group {k} in an object of its own: the link is damaged; `pgl check` \
             verifies the objects",
            T::TYPE_NAME,
            inline_count(link),
        ),
        pool_file: None,
    })
}

/// An upgrade asked for by an extension group's init (see `Tx::complete`).
fn upgrade_in_init() -> Error {
    Error::InTransaction {
        what: "an upgrade (tx.ext, tx.ext_mut or tx.upgrade) from an extension group's init",
        instead: "an init computes the new fields from the old ones it is given (`old`) and \
                  must not use the pool",
    }
}

fn too_many_groups<T: Extendible>() -> Error {
    Error::config(format!(
        "`{}` has {} extension groups, more than the {MAX_GROUPS} pgl supports",
        T::TYPE_NAME,
        T::GROUPS
    ))
}

impl<'p> Tx<'p> {
    /// An error of the access to an extendible `T`'s base, naming the part; inside an
    /// upgrade's init, where the base being upgraded is held by the upgrade, the refusal
    /// of an upgrade from an init (which is what an init reaching a base through the pool
    /// comes to).
    fn base_error<T: Extendible>(&self, e: Error) -> Error {
        match e {
            Error::AlreadyBorrowed { .. } if self.group_scope().runs_inits() => upgrade_in_init(),
            e => in_part::<T>(e, 0),
        }
    }

    /// Walks the chain of `oid` through the groups this build knows.
    fn walk<T: Extendible>(&self, oid: Oid<T>) -> Result<Chain> {
        let whole = self.get(oid).map_err(|e| in_part::<T>(e, 0))?.__link();
        self.walk_from(oid, whole)
    }

    /// Walks the chain of `oid` from `whole`, its base's link as this transaction read it
    /// (under the base's lock, which it holds until it ends).
    fn walk_from<T: Extendible>(&self, oid: Oid<T>, whole: u64) -> Result<Chain> {
        if T::GROUPS > MAX_GROUPS {
            return Err(too_many_groups::<T>());
        }
        let inline = inline_known(self, oid, whole)?;
        let mut chain = Chain {
            offs: [0; MAX_GROUPS],
            present: inline,
            inline,
        };
        let mut link = separate(whole);
        while chain.present < T::GROUPS && link != 0 {
            chain.offs[chain.present] = link;
            chain.present += 1;
            let k = chain.present;
            link = self
                .with_groups(GroupScope::Read, || T::__next(self, k, link))
                .map_err(|e| in_part::<T>(e, k))?;
        }
        Ok(chain)
    }

    /// Upgrades the object if it lacks groups: allocates each missing group with the
    /// value of its init, links the groups after the last present one, all in this
    /// transaction.
    fn complete<T: Extendible>(&self, oid: Oid<T>, chain: &mut Chain) -> Result<bool> {
        let have = chain.present;
        if have == T::GROUPS {
            return Ok(false);
        }
        // Inside an upgrade's inits already: an `init` reached the pool through a captured
        // `Pool`, whose `pool.tx` joins this transaction, and asked for an upgrade; of the
        // same object, it would recurse until the stack overflows.
        if self.group_scope().runs_inits() {
            return Err(upgrade_in_init());
        }
        // The links walked say where the new groups hang (the last one present gets a new
        // next link): followed for a change only once the checksums vouch for them, as a
        // damaged link could name another chain's group of the same type. The base's is
        // verified by `open`, which checks its checksum as it buffers it (or has it
        // buffered already, as this transaction last left it); it also takes the write
        // lock and refuses a change to the owner while another thread's Manual migration
        // converts its type (it would lose the new groups). Groups change only under
        // their owner's write lock (see `GroupScope`).
        for &g in chain.offs[..have].iter().filter(|&&g| g != 0) {
            self.verify_link_holder(g)?;
        }
        let mut base = self.open(oid).map_err(|e| in_part::<T>(e, 0))?;
        // Groups allocated and then left unlinked by a later step's error must not commit.
        self.whole(|| {
            // The object's payload: the inits read the value and the inline groups there,
            // and the new inline groups are built there.
            let mut image = ObjImage::from_bytes(base.payload());
            // The last separate group present, if any: new groups hang from it.
            let last_separate = (1..=have).rev().find(|&k| chain.offs[k - 1] != 0);
            let mut inline = chain.inline;
            // The inits are the program's code: not in the write scope, where they could
            // open groups of owners this transaction does not hold (`GroupScope::Init`).
            for k in have + 1..=T::GROUPS {
                // Inline groups are a prefix: group k goes in the reserve only if it fits
                // there and every group before it is there.
                let in_reserve = inline_at::<T>(k).is_some()
                    && last_separate.is_none()
                    && inline == k - 1
                    && k <= MAX_INLINE;
                chain.offs[k - 1] = self
                    .with_groups(GroupScope::Init, || {
                        T::__upgrade(self, k, &mut image, &chain.offs[..k - 1], in_reserve)
                    })
                    // The part at fault: group k, or one it is made from.
                    .map_err(in_own_part::<T>)?;
                if in_reserve {
                    inline += 1;
                }
            }
            self.with_groups(GroupScope::Write, || {
                // The new separate groups, in order, each linked to the next.
                let news: Vec<usize> = (have + 1..=T::GROUPS)
                    .filter(|&k| chain.offs[k - 1] != 0)
                    .collect();
                for w in news.windows(2) {
                    T::__set_next(self, w[0], chain.offs[w[0] - 1], chain.offs[w[1] - 1])?;
                }
                let first_new = news.first().map_or(0, |&k| chain.offs[k - 1]);
                match last_separate {
                    Some(k) => T::__set_next(self, k, chain.offs[k - 1], first_new),
                    None => {
                        let reserve = (inline > chain.inline)
                            .then(|| &image.bytes()[core::mem::size_of::<T>()..]);
                        self.relink(&mut base, base_link(first_new, inline), reserve);
                        Ok(())
                    }
                }
            })
        })?;
        chain.present = T::GROUPS;
        self.note_upgrade();
        Ok(true)
    }

    /// The lazy upgrade of an object of a `T` whose groups this build keeps all in the
    /// reserve, when its link names no separate group: the missing groups are built in
    /// the reserve from their inits and the link counts them, one write of the object
    /// `base` holds open. The link alone says which groups are present, so none of
    /// `complete`'s chain bookkeeping is needed. Whether it upgraded; `None` if the link
    /// names a separate group (an older build's pool), which is `complete`'s case.
    fn upgrade_in_reserve<T: Extendible>(
        &self,
        oid: Oid<T>,
        base: &mut crate::tx::Mut<'_, T>,
    ) -> Result<Option<bool>> {
        debug_assert!(all_inline::<T>());
        let link = base.__link();
        if separate(link) != 0 {
            return Ok(None);
        }
        // Every group this build knows has its place in the reserve: the count is
        // checked against the reserve's room, as the walk would.
        let have = inline_known(self, oid, link)?;
        if have == T::GROUPS {
            return Ok(Some(false));
        }
        // As in `complete`: an init that reached the pool and asked for an upgrade.
        if self.group_scope().runs_inits() {
            return Err(upgrade_in_init());
        }
        // The object changes only in `relink`, but an error part way must still fail the
        // transaction, as in `complete`: the inits before it may have changed the pool (a
        // captured `Pool`'s `pool.tx` joins this transaction), and the groups' layouts
        // may have been registered.
        self.whole(|| {
            // `open` buffers only an object of exactly a `T`'s size. Copied at that size
            // (inlined, where `from_bytes` called `memcpy`).
            let mut image = ObjImage::of::<T>();
            image.fill_from::<T>(base.payload());
            for k in have + 1..=T::GROUPS {
                // No separate group precedes an inline one: `groups` is all zeros.
                self.with_groups(GroupScope::Init, || {
                    T::__upgrade(self, k, &mut image, &[0; MAX_GROUPS][..k - 1], true)
                })
                .map_err(in_own_part::<T>)?;
            }
            let reserve = &image.bytes_of::<T>()[core::mem::size_of::<T>()..];
            self.relink(base, base_link(0, T::GROUPS), Some(reserve));
            Ok(())
        })?;
        self.note_upgrade();
        Ok(Some(true))
    }

    /// Upgrades `oid`, whose link as last read was `link`, if it lacks groups: through
    /// `upgrade_in_reserve` where it applies, else by the walk and `complete`.
    fn upgrade_from<T: Extendible>(&self, oid: Oid<T>, link: u64) -> Result<bool> {
        // The link as read says whether a group is missing: an object already upgraded
        // is not opened (its write lock would turn away its other readers).
        if const { all_inline::<T>() } && separate(link) == 0 && inline_count(link) < T::GROUPS {
            // Refused before the base is opened: an init asking to upgrade another object
            // takes no write lock of it.
            if self.group_scope().runs_inits() {
                return Err(upgrade_in_init());
            }
            let mut base = self.open(oid).map_err(|e| self.base_error::<T>(e))?;
            if let Some(done) = self.upgrade_in_reserve(oid, &mut base)? {
                return Ok(done);
            }
        }
        let mut chain = self.walk_from(oid, link)?;
        self.complete(oid, &mut chain)
    }

    /// For a `T` declared `#[extendible(upgrade = on_write)]` (all its groups in its
    /// reserve), an object of which lacks groups: builds in `image` its value and reserve
    /// with the missing groups made by their inits, as the upgrade would build them: what
    /// its view shows. Nothing is written or locked for update. Whether it did: not for an
    /// object that lacks no group, nor for any other `T`, nor for one whose link names a
    /// separate group (a pool of format 8 or older kept a group separate that this build
    /// keeps inline, or the link is damaged): the walk reads, upgrades (as on read) or
    /// reports those.
    ///
    /// Inlined where the view is made, with `T::__upgrade`: every read of such an object
    /// runs it, and out of line its image and result went through memory.
    #[inline(always)]
    fn read_through<T: Extendible>(
        &self,
        oid: Oid<T>,
        base: &Read<'_, T>,
        image: &mut ObjImage,
    ) -> Result<bool> {
        let link = base.__link();
        if !(const { T::__UPGRADE_ON_WRITE && all_inline::<T>() }) || separate(link) != 0 {
            return Ok(false);
        }
        let have = inline_known(self, oid, link)?;
        if have == T::GROUPS {
            return Ok(false);
        }
        // As for an upgrade: an init that reached the pool must not run inits (of this
        // very object, it would recurse until the stack overflows).
        if self.group_scope().runs_inits() {
            return Err(upgrade_in_init());
        }
        // The groups present are read through the image: their layouts are checked as
        // a view's are (`__reads` checks an inline group's, then finds the chain short).
        // Data no upgrade reached has none: nothing to check.
        if have > 0 {
            self.with_groups(GroupScope::Read, || T::__reads(self, 0, have))
                .map_err(in_own_part::<T>)?;
        }
        // SAFETY: a `Read` shows the value and its reserve, `object_size` bytes, valid
        // and unchanged while it is borrowed (`Read::payload_ptr`); they are the pool's or
        // a buffer's, not the image's.
        unsafe { image.fill_with::<T>(base.payload_ptr()) };
        for k in have + 1..=T::GROUPS {
            // No separate group precedes an inline one: `groups` is all zeros.
            self.with_groups(GroupScope::View, || {
                T::__upgrade(self, k, image, &[0; MAX_GROUPS][..k - 1], true)
            })
            .map_err(in_own_part::<T>)?;
        }
        image.set_link_of::<T>(base_link(0, T::GROUPS));
        Ok(true)
    }

    /// A read view of an `#[extendible]` object with every extension group this build
    /// knows. An object written by an older program is upgraded first, in this
    /// transaction: the missing groups are allocated, initialised by their `init`
    /// expressions and linked (nothing of it is durable unless the transaction commits).
    /// The base object is never moved: every oid of it stays valid.
    ///
    /// For a struct declared `#[extendible(upgrade = on_write)]`, the view shows the
    /// object upgraded in DRAM instead (the inits run on every such read), and the pool
    /// is left as it is: the object is upgraded in the pool when it is written through
    /// [`Tx::ext_mut`] (or by [`Tx::upgrade`]).
    #[inline(always)]
    pub fn ext<T: Extendible>(&self, oid: Oid<T>) -> Result<Ext<'_, T>> {
        // Inlined, as `get` is: the handles are made here (see `tx::ReadAt`).
        let base = self.get(oid).map_err(|e| self.base_error::<T>(e))?;
        if self.all_in_reserve(&base) {
            return Ok(Ext::new(oid, base, Default::default()));
        }
        self.ext_owned_from(oid, base)
    }

    /// `ext` past its fast path: the view upgraded in DRAM (`read_through`; the view owns
    /// the copy), or `ext_from`'s.
    #[inline(never)]
    fn ext_owned_from<'t, T: Extendible>(
        &'t self,
        oid: Oid<T>,
        base: Read<'t, T>,
    ) -> Result<Ext<'t, T>> {
        if const { T::__UPGRADE_ON_WRITE } {
            let mut image = super::view::image_of::<T>();
            match self.read_through(oid, &base, &mut image) {
                Ok(true) => return Ok(Ext::of_image(oid, base, image)),
                done => {
                    super::view::give_back(image);
                    done?;
                }
            }
        }
        self.ext_from(oid, base)
    }

    /// Runs `f` on a read view of an `#[extendible]` object, as [`Tx::ext`] would give
    /// (upgrading the object first if it lacks groups; with `upgrade = on_write`, showing
    /// it upgraded in DRAM), and returns what `f` returns.
    ///
    /// The same view, made where `f` runs: the cheapest way to read a few fields of an
    /// object, as no view is returned and moved (a read of a field kept inline costs
    /// about what [`Tx::get`] does). The book's chapter "Evolving your structs" shows it.
    #[inline(always)]
    pub fn ext_with<T: Extendible, R>(
        &self,
        oid: Oid<T>,
        f: impl FnOnce(&Ext<'_, T>) -> R,
    ) -> Result<R> {
        let base = self.get(oid).map_err(|e| self.base_error::<T>(e))?;
        if self.all_in_reserve(&base) {
            return Ok(Ext::new(oid, base, Default::default()).run(f));
        }
        self.ext_with_from(oid, base, f)
    }

    /// `ext_with` past its fast path: the view upgraded in DRAM (`read_through`, the copy
    /// on the stack), or `ext_from`'s.
    #[inline]
    fn ext_with_from<T: Extendible, R>(
        &self,
        oid: Oid<T>,
        base: Read<'_, T>,
        f: impl FnOnce(&Ext<'_, T>) -> R,
    ) -> Result<R> {
        if const { T::__UPGRADE_ON_WRITE } {
            let mut image = ObjImage::of::<T>();
            if self.read_through(oid, &base, &mut image)? {
                // SAFETY: `image` is an image of a `T` (`ObjImage::of`), and the view is
                // dropped in `run` (or by unwinding, if `f` panics), in either case before
                // `image`, which nothing changes meanwhile.
                let view = unsafe { Ext::over_image(oid, base, &image) };
                return Ok(view.run(f));
            }
        }
        Ok(self.ext_from(oid, base)?.run(f))
    }

    /// Whether `base` has every group this build knows, all of them in its reserve, with
    /// layouts this process has checked: then its view needs no group handle
    /// (`T::Reads::default()`), and `ext_from` would find just that.
    #[inline(always)]
    fn all_in_reserve<T: Extendible>(&self, base: &Read<'_, T>) -> bool {
        (const { all_inline::<T>() })
            && base.__link() == base_link(0, T::GROUPS)
            && T::GROUP_KEYS
                .iter()
                .all(|&(id, layout)| self.eng.types.contains(id, layout))
    }

    /// `ext` from the base's read handle, for every case but `all_in_reserve`'s: groups in
    /// objects of their own, groups missing (the upgrade), group layouts not checked yet
    /// in this process, damage.
    #[inline(never)]
    fn ext_from<'t, T: Extendible>(&'t self, oid: Oid<T>, base: Read<'t, T>) -> Result<Ext<'t, T>> {
        // An upgraded object is read by following its links once; one that lacks groups,
        // or whose group has another layout, takes the walk, which upgrades it or names
        // the group at fault. Other errors (damage, conflicts) go up as they are, for the
        // transaction to repair or retry.
        // The groups are read under the base's lock (see `GroupScope`): `base` holds it.
        // Inline groups are read through `base` itself. The first separate group is read
        // without a lock of its own if the base's checksum vouches for its link (`vouch`).
        let reads = |link| {
            let inline = inline_known(self, oid, link)?;
            let first = separate(link);
            let vouched = if first != 0 && self.vouch::<T>(oid.raw()) {
                first
            } else {
                0
            };
            self.with_groups(GroupScope::Read, || {
                self.with_vouched(vouched, || T::__reads(self, first, inline))
            })
            .map_err(in_own_part::<T>)
        };
        let link = base.__link();
        // An object whose groups all live in its reserve, lacking some, has nothing for
        // `reads` to find: it is upgraded straight away, then read as `ext` reads one
        // that needs no upgrade (`reads`, as below, checks what that fast path does not).
        let short =
            (const { all_inline::<T>() }) && separate(link) == 0 && inline_count(link) < T::GROUPS;
        if !short {
            if let Some(groups) = reads(link).or_else(walk_instead)? {
                return Ok(Ext::new(oid, base, groups));
            }
        }
        drop(base);
        self.upgrade_from(oid, link)?;
        let base = self.get(oid)?;
        if self.all_in_reserve(&base) {
            return Ok(Ext::new(oid, base, Default::default()));
        }
        let groups = reads(base.__link())?.ok_or_else(|| incomplete::<T>(oid))?;
        Ok(Ext::new(oid, base, groups))
    }

    /// Opens an `#[extendible]` object and every extension group this build knows for
    /// update (micro-buffers, like [`Tx::open`]), upgrading it first as [`Tx::ext`] does.
    pub fn ext_mut<T: Extendible>(&self, oid: Oid<T>) -> Result<ExtMut<'_, T>> {
        // `base` holds the owner's write lock, which opening its groups needs.
        let mut base = self.open(oid).map_err(|e| self.base_error::<T>(e))?;
        let muts = |link| {
            let inline = inline_known(self, oid, link)?;
            self.with_groups(GroupScope::Write, || {
                T::__muts(self, separate(link), inline)
            })
            .map_err(in_own_part::<T>)
        };
        let mut link = base.__link();
        if const { all_inline::<T>() } && inline_count(link) < T::GROUPS {
            self.upgrade_in_reserve(oid, &mut base)?;
            link = base.__link();
        }
        if let Some(groups) = muts(link).or_else(walk_instead)? {
            return Ok(ExtMut::new(base, groups));
        }
        drop(base);
        let mut chain = self.walk_from(oid, link)?;
        self.complete(oid, &mut chain)?;
        let base = self.open(oid)?;
        let groups = muts(base.__link())?.ok_or_else(|| incomplete::<T>(oid))?;
        Ok(ExtMut::new(base, groups))
    }

    /// Upgrades an `#[extendible]` object now if it lacks groups this build knows;
    /// whether it did. ([`Tx::ext`] and [`Tx::ext_mut`] do it on their own.)
    pub fn upgrade<T: Extendible>(&self, oid: Oid<T>) -> Result<bool> {
        let link = self.get(oid).map_err(|e| in_part::<T>(e, 0))?.__link();
        self.upgrade_from(oid, link)
    }

    /// How many of the extension groups this build knows the object carries
    /// (`T::GROUPS` once upgraded). Changes nothing.
    pub fn groups_present<T: Extendible>(&self, oid: Oid<T>) -> Result<usize> {
        Ok(self.walk(oid)?.present)
    }

    /// Allocates a new `#[extendible]` object with its full chain of extension groups,
    /// holding `data` (the `<Struct>Data` the attribute generates).
    pub fn alloc_ext<D: ExtendibleData>(&self, data: D) -> Result<Oid<D::Struct>> {
        if D::Struct::GROUPS > MAX_GROUPS {
            return Err(too_many_groups::<D::Struct>());
        }
        // The groups are allocated before the base: a migration of its type (on another
        // thread) refuses the base up front, before any group exists; a later error
        // (a full pool) fails the transaction (`whole`), so no group is left unowned.
        self.eng.migrating.check("create", D::Struct::TYPE_ID, 0)?;
        // New objects only: no owner's lock to hold.
        self.whole(|| self.with_groups(GroupScope::Write, || D::Struct::__alloc(self, data)))
            .map_err(in_own_part::<D::Struct>)
    }

    /// Allocates a copy of an `#[extendible]` object and of its whole chain (groups this
    /// build does not know included); the copy's links point to the copied groups.
    pub fn copy_ext<T: Extendible>(&self, oid: Oid<T>) -> Result<Oid<T>> {
        drop(self.get(oid).map_err(|e| in_part::<T>(e, 0))?);
        // The payload: the value, ending with the link, then the reserve, whose inline
        // groups are copied with it.
        let (_, base) = self.object_bytes(oid.raw())?;
        let link = base
            .get(..core::mem::size_of::<T>())
            .and_then(crate::tx::link_at_end)
            .unwrap_or(0);
        let chain = self.tail::<T>(oid.raw(), link)?;
        // The copied groups come first, as in `alloc_ext`.
        self.eng.migrating.check("create", T::TYPE_ID, 0)?;
        self.whole(|| {
            let mut next = 0;
            for (_, type_id, mut bytes) in chain.into_iter().rev() {
                ExtLink::set_at_end_of(&mut bytes, next);
                next = self.alloc_raw(bytes.len(), type_id, |p| p.copy_from_slice(&bytes))?;
            }
            // The copy's link is pgl's from the start, like that of any base this
            // transaction allocates: a handle of the copy opened in this transaction cannot
            // relink it.
            let link = base_link(next, inline_count(link));
            self.alloc_filled(base.len(), T::TYPE_ID, Some(link), T::__RESERVE, |p| {
                p.copy_from_slice(&base)
            })
            .map(Oid::from_raw)
        })
    }
}
