//! The one error type of pgl. Every fallible public operation returns [`Result`]; messages say
//! what happened, where (file, offset, type) and what to do.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `Result` with pgl's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything that can go wrong in pgl. Match on the variant; print it for a user.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call on the pool or log file failed.
    #[error("{op} {path}: {source}{}", io_advice(op, source))]
    Io {
        /// What pgl was doing ("open", "open read-only", "open log", "map", "grow", ...).
        op: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// `Pool::inject` could not emulate the fault on this system; the pool is unchanged.
    #[error("{path}: cannot inject a media error at offset {offset:#x}: {reason}; the pool is unchanged")]
    FaultInjection {
        /// The pool file.
        path: PathBuf,
        /// The offset the fault was aimed at.
        offset: u64,
        /// What failed, and what to do.
        reason: String,
        /// The OS error, if a system call failed.
        #[source]
        source: Option<io::Error>,
    },

    /// `Pool::inject` was given a fault that does not fit this pool (a range outside the
    /// pool or the part it names, a zone, lane or header copy the pool does not have, a
    /// bit count outside 1 to 64) or that it does not inject; the pool is unchanged.
    #[error("{path}: cannot inject {fault}: {reason}; the pool is unchanged")]
    InvalidFault {
        /// The pool file.
        path: PathBuf,
        /// The fault, as `Fault`'s `Display` says it.
        fault: String,
        /// What does not fit, and the limits.
        reason: String,
    },

    /// `Pool::create` (or `Log::create`) was given a path that already exists.
    #[error("{path}: {}", if *directory {
        "a directory is there; give the path of the new file (in a directory that exists), not of a directory"
    } else {
        "a file already exists here; open it instead, or remove the file to create a new one"
    })]
    AlreadyExists {
        /// The path.
        path: PathBuf,
        /// Whether what is there is a directory.
        directory: bool,
    },

    /// The pool or log file is open already: in another process, or as another `Pool` or
    /// `Log` of this one. Two handles over one file would share its bytes without sharing
    /// its locks, so the second open is refused and the file left as it is.
    #[error("{path}: the {what} is open already (in another process, or as another handle of this one); {instead}")]
    AlreadyOpen {
        /// The file.
        path: PathBuf,
        /// `"pool"` or `"log"`.
        what: &'static str,
        /// What to do instead.
        instead: &'static str,
    },

    /// The pool was opened read-only ([`Pool::open_read_only`](crate::Pool::open_read_only),
    /// for inspection), and the call would change it: a transaction that changes, creates
    /// or frees an object (creating the root included), `grow`, `inject`, or a scrub with
    /// repair. Nothing was changed. Repairs an inspection makes while opening and reading
    /// stay in its private copy of the bytes; the file is never written.
    #[error("{path}: the pool is open read-only (for inspection): {what} would change it, and a read-only open never writes the file; open it with Pool::open (or `pgl scrub --repair`) to change it")]
    ReadOnly {
        /// The pool file.
        path: PathBuf,
        /// What was refused: "a transaction that changes the pool", "pool.grow", ...
        what: &'static str,
    },

    /// The file is not a pgl pool (no pool header in either copy).
    #[error(
        "{path}: not a pgl pool ({reason}); check the path, or create a pool with `pgl create`"
    )]
    NotAPool {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },

    /// The file is shorter than its header says.
    #[error("{path}: truncated pool file: {actual} bytes, but the header says {expected}; restore the file from a backup")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the pool needs.
        expected: u64,
        /// Bytes the file has.
        actual: u64,
    },

    /// Both copies of the pool header are damaged.
    #[error("{path}: both copies of the pool header are corrupt ({detail}); the pool cannot be opened safely — restore it from a backup")]
    HeaderCorrupt {
        /// The file.
        path: PathBuf,
        /// What failed in each copy.
        detail: String,
    },

    /// The pool was made by an incompatible version of pgl: a newer one (a header copy
    /// whose checksum verifies names a format version past this build's; the file is left
    /// as it is, neither copy rewritten), or a version no release wrote.
    #[error("{path}: {}", version_advice(*found, *supported))]
    Version {
        /// The file.
        path: PathBuf,
        /// Version found in the header.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },

    /// The pool was created for another layout (application).
    #[error("{path}: pool layout is {found:?}, the program expects {expected:?}; open the right file or create a new pool")]
    LayoutName {
        /// The file.
        path: PathBuf,
        /// Layout name the caller asked for.
        expected: String,
        /// Layout name stored in the pool.
        found: String,
    },

    /// A configuration value is out of range.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong and what is allowed.
        reason: String,
    },

    /// The pool has no free space for an allocation.
    #[error("{}pool full: no room for an object of {requested} bytes ({free} bytes free in total, largest possible allocation depends on fragmentation); grow the pool with Pool::grow or free objects", at(pool_file))]
    PoolFull {
        /// The pool file, once the error has left the pool's API (`pool.tx`, `pool.get`,
        /// ...); `None` while a transaction's closure still holds it.
        pool_file: Option<PathBuf>,
        /// Bytes requested.
        requested: u64,
        /// Bytes free in the whole heap.
        free: u64,
    },

    /// An object larger than a zone's data area, or than 4 GiB - 1 bytes, was requested.
    #[error("object of {requested} bytes is larger than the largest possible object ({max} bytes); {}", too_large_advice(*max))]
    ObjectTooLarge {
        /// Bytes requested.
        requested: u64,
        /// The largest object this pool can hold.
        max: u64,
    },

    /// An object of a zero-sized type (such as `[T; 0]`, which is `Persistent`) was to be
    /// allocated: a pool object holds at least one byte.
    #[error("cannot allocate a `{type_name}`: it is a zero-sized type, and a pool object holds at least one byte; store no object for it (a null Oid), or give the type a field")]
    ZeroSized {
        /// The type, as Rust names it.
        type_name: &'static str,
    },

    /// A transaction changes more bytes than its redo lane holds.
    #[error("transaction too large: its redo record needs {needed} bytes, a lane holds {capacity}; split the transaction or create the pool with a larger Config::lane_size")]
    TxTooLarge {
        /// Bytes the record needs.
        needed: u64,
        /// Bytes a lane holds.
        capacity: u64,
    },

    /// An `Oid` does not name a live object of this pool.
    #[error("{}invalid oid {offset:#x}: {reason}", at(pool_file))]
    InvalidOid {
        /// The pool file, once the error has left the pool's API (`pool.tx`, `pool.get`,
        /// ...); `None` while a transaction's closure still holds it.
        pool_file: Option<PathBuf>,
        /// The offset.
        offset: u64,
        /// Why it is not an object.
        reason: String,
    },

    /// The object at `offset` is of another type than the one asked for.
    #[error("{}object at {offset:#x} holds {} of {found_size} bytes, not `{type_name}` (type id {expected:#010x}) of {expected_size} bytes; check which Oid you used", at(pool_file), stored_type(found_name, *found))]
    TypeMismatch {
        /// The pool file, once the error has left the pool's API (`pool.tx`, `pool.get`,
        /// ...); `None` while a transaction's closure still holds it.
        pool_file: Option<PathBuf>,
        /// The offset.
        offset: u64,
        /// The type asked for.
        type_name: &'static str,
        /// Its type id.
        expected: u32,
        /// Its size.
        expected_size: u64,
        /// The type id stored in the object header.
        found: u32,
        /// The name the pool's type registry holds for `found`, once the error has left
        /// the pool's API (`None` before, or when the registry has no entry for it).
        found_name: Option<String>,
        /// The size stored in the object header.
        found_size: u64,
    },

    /// The pool stores a type with another layout than this build compiles: the struct
    /// changed (a field added, removed, retyped or reordered) since the pool was written.
    /// For an `#[extendible]` struct, `group` says which part changed: `Some(0)` its frozen
    /// base, `Some(n)` its extension group `n`.
    #[error("{}type `{type_name}` (type id {type_id:#010x}) has layout {compiled:#018x} in this build, but the pool stored it as `{stored_name}` with layout {stored:#018x}: {}", at(pool_file), layout_advice(*group))]
    LayoutMismatch {
        /// The pool file, once the error has left the pool's API (`pool.tx`, `pool.get`,
        /// ...); `None` while a transaction's closure still holds it.
        pool_file: Option<PathBuf>,
        /// The type as this build names it.
        type_name: String,
        /// The type as the pool registered it.
        stored_name: String,
        /// Its type id.
        type_id: u32,
        /// The layout fingerprint in the pool's type registry.
        stored: u64,
        /// The layout fingerprint of this build.
        compiled: u64,
        /// For an `#[extendible]` struct: 0 when its base changed, `n` when its extension
        /// group `n` changed; `None` for other types.
        group: Option<u32>,
    },

    /// The pool's type registry is full: no further type can be stored in it.
    #[error("{}cannot store `{type_name}`: the pool's type registry is full ({capacity} types); store the values in fewer distinct types (wrap several in one struct, or use one array type for several sizes)", at(pool_file))]
    TooManyTypes {
        /// The pool file, once the error has left the pool's API (`pool.tx`, `pool.get`,
        /// ...); `None` while a transaction's closure still holds it.
        pool_file: Option<PathBuf>,
        /// The type that could not be registered.
        type_name: String,
        /// Types the registry holds.
        capacity: u64,
    },

    /// An object's checksum does not match its contents (a scribble or a media error).
    #[error("{}checksum mismatch in object at {offset:#x}, {} of {size} bytes: stored {stored:#010x}, computed {computed:#010x}; the object was changed outside a transaction (a scribble or a media error) and zone parity could not rebuild it (the pool keeps no parity, or another page of its page column is damaged too); `pgl check` lists every damaged object, `pgl scrub --repair` rebuilds what parity can", at(pool_file), stored_type(type_name, *type_id))]
    ChecksumMismatch {
        /// The pool file, once the error has left the pool's API (`pool.tx`, `pool.get`,
        /// ...); `None` while a transaction's closure still holds it.
        pool_file: Option<PathBuf>,
        /// The object's offset.
        offset: u64,
        /// Type id in its header.
        type_id: u32,
        /// The name the pool's type registry holds for `type_id`, once the error has left
        /// the pool's API (`None` before, or when the registry has no entry for it).
        type_name: Option<String>,
        /// Its size.
        size: u64,
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the bytes found.
        computed: u32,
    },

    /// A word of a run's allocation bitmap does not match its check (a scribble or a
    /// media error in the allocator's metadata) and zone parity could not rebuild it.
    #[error("{}allocation bitmap word at {offset:#x} does not verify: stored check {stored:#010x}, computed {computed:#010x}; the allocator's metadata was changed outside a transaction (a scribble or a media error) and zone parity could not rebuild it (the pool keeps no parity, another page of its page column is damaged too, or a crash left its zone's parity possibly stale); nothing is written over it and the run is taken out of service (its objects stay readable); `pgl check` reports it; if the pool keeps parity and was only damaged once per page column, opening it or `pgl scrub --repair` rebuilds the word", at(pool_file))]
    BitmapMismatch {
        /// The pool file, once the error has left the pool's API (`pool.tx`, `pool.get`,
        /// ...); `None` while a transaction's closure still holds it.
        pool_file: Option<PathBuf>,
        /// Pool offset of the word.
        offset: u64,
        /// The check the word holds.
        stored: u32,
        /// The check of the bits it holds.
        computed: u32,
    },

    /// A micro-buffer's guard word was overwritten: the transaction was aborted, NVMM is unchanged.
    #[error("canary of the micro-buffer of object at {offset:#x} was overwritten (a buffer overrun in this program); the transaction was aborted and the pool is unchanged")]
    CanaryMismatch {
        /// The object's offset.
        offset: u64,
    },

    /// Two transactions wanted the same object; the closure is retried automatically, and this
    /// surfaces only when retries are exhausted or when the caller swallowed it.
    #[error("transaction conflict on object at {offset:#x}: another transaction holds it; retry")]
    Conflict {
        /// The object's offset.
        offset: u64,
    },

    /// A handle to this object is still alive in the same transaction.
    #[error("{}object at {offset:#x} is already borrowed in this transaction; drop the other handle first", at(pool_file))]
    AlreadyBorrowed {
        /// The pool file, once the error has left the pool's API.
        pool_file: Option<PathBuf>,
        /// The object's offset.
        offset: u64,
    },

    /// The object is locked by this same thread: its transaction or a `Detached` from
    /// `pool.open_mut` holds it, or a `Ref` from `pool.get` does while a transaction of the
    /// thread wants to change it.
    #[error("{}object at {offset:#x} is locked by this thread: by its open transaction (read it with tx.get inside the transaction) or by a pool.get Ref or pool.open_mut handle it still holds (drop the Ref or commit the handle first)", at(pool_file))]
    LockedByThisThread {
        /// The pool file, once the error has left the pool's API.
        pool_file: Option<PathBuf>,
        /// The object's offset.
        offset: u64,
    },

    /// A transaction wanted to change, free or create an object of a type that a Manual
    /// migration (`Migration::run`) on another thread is converting: the migration would
    /// lose the change (it has copied the object already, or will free it).
    #[error("cannot {what} {}: a Manual migration on another thread is converting that type, and the change would be lost with the old objects; let the migration end (pool.root waits for it), then make the change on the new objects", object(*offset, *type_id))]
    Migrating {
        /// What the transaction would do: "change", "free" or "create".
        what: &'static str,
        /// The object's type id.
        type_id: u32,
        /// The object's offset (0 for one being created).
        offset: u64,
    },

    /// An operation that must run outside any transaction was called inside one of the same
    /// pool on this thread.
    #[error("{what} was called inside a transaction of the same pool; {instead}")]
    InTransaction {
        /// The operation.
        what: &'static str,
        /// What to do instead.
        instead: &'static str,
    },

    /// An operation that takes the whole pool (every object lock and lane: `pool.scrub`,
    /// `pool.inject`, `pool.verify_parity`) was called by a thread that holds a `Ref`
    /// (`pool.get`) or a `Detached` (`pool.open_mut`) of that pool: it would wait for the
    /// caller itself.
    #[error("{}{what} takes the whole pool, but this thread holds a pool.get Ref or a pool.open_mut handle of it, which it would wait for forever; drop the Ref or commit the handle first", at(pool_file))]
    HeldByThisThread {
        /// The pool file, once the error has left the pool's API.
        pool_file: Option<PathBuf>,
        /// The operation (`"pool.scrub"`, ...).
        what: &'static str,
    },

    /// `tx.free` of the pool's root object, which lives as long as the pool (the root word
    /// would name a free block, and later whatever object takes it).
    #[error("{}object at {offset:#x} is the pool's root, which lives as long as the pool and cannot be freed; free what it links to, or clear its fields, instead", at(pool_file))]
    RootNotFreeable {
        /// The pool file, once the error has left the pool's API.
        pool_file: Option<PathBuf>,
        /// The root object's offset.
        offset: u64,
    },

    /// The object was freed earlier in this transaction.
    #[error("{}object at {offset:#x} was freed in this transaction, which can no longer read, change or free it; free an object last, once the transaction is done with it", at(pool_file))]
    UseAfterFree {
        /// The pool file, once the error has left the pool's API.
        pool_file: Option<PathBuf>,
        /// The object's offset.
        offset: u64,
    },

    /// The transaction was aborted by a nested transaction's error (a pgl error; a nested
    /// [`Error::Abort`] aborts the outer transaction with that same `Abort`).
    #[error("transaction aborted: a nested transaction failed: {reason}")]
    Aborted {
        /// The nested error, as text.
        reason: String,
    },

    /// A transaction's closure aborted it with an error of the caller's own, made by
    /// [`Error::abort`]: the transaction rolled back, and the error comes back as it was
    /// given (get it with [`Error::downcast_ref`], or match `error`). Its message is part of
    /// this error's message, so `source()` gives the caller's error's own source.
    #[error("transaction aborted by its closure: {error}")]
    Abort {
        /// The caller's error. Shared (an `Arc`): a nested transaction's `Abort` is also the
        /// error of the outer transaction it aborts, even when the outer closure swallows it.
        error: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// Persistent metadata is inconsistent in a way pgl cannot repair.
    #[error("{}{what} at offset {offset:#x} is corrupt: {detail}; run `pgl check` and restore from a backup if it cannot repair it", at(pool_file))]
    Corrupt {
        /// The pool file, once the error has left the pool's API (`pool.tx`, `pool.get`,
        /// ...); `None` while a transaction's closure still holds it.
        pool_file: Option<PathBuf>,
        /// Which structure.
        what: &'static str,
        /// Where.
        offset: u64,
        /// What is wrong.
        detail: String,
    },

    /// A value is longer than the fixed capacity of the [`PStr`](crate::PStr) or
    /// [`PBytes`](crate::PBytes) it was to be stored in; the destination is unchanged.
    #[error("{len} bytes do not fit in a {what}<{capacity}>: shorten the value or raise the capacity (`PStr::truncating` cuts a string at a character boundary)")]
    TooLong {
        /// The wrapper: `"PStr"` or `"PBytes"`.
        what: &'static str,
        /// Bytes in the value given.
        len: usize,
        /// Bytes the wrapper holds (its `N`).
        capacity: usize,
    },

    /// The root object exists with another type.
    #[error("{}the pool's root holds {} of {found_size} bytes, not `{type_name}`; open the pool with the program that created it (a Manual migration replaces the root's type: after one, only a build that knows the new type reads it)", at(pool_file), stored_type(found_name, *found))]
    RootType {
        /// The pool file, once the error has left the pool's API (`pool.tx`, `pool.get`,
        /// ...); `None` while a transaction's closure still holds it.
        pool_file: Option<PathBuf>,
        /// The type asked for (its path, as `std::any::type_name` gives it).
        type_name: &'static str,
        /// Type id found.
        found: u32,
        /// The name the pool's type registry holds for `found`, once the error has left
        /// the pool's API (`None` before, or when the registry has no entry for it).
        found_name: Option<String>,
        /// Size found.
        found_size: u64,
    },

    /// The file is not a pgl log: too short, or neither superline copy verifies.
    #[error("{path}: not a pgl log ({reason}); check the path, or create a log with Log::create")]
    NotALog {
        /// The file.
        path: PathBuf,
        /// What was found instead (both superline copies' faults, when neither verifies).
        reason: String,
    },

    /// The log's record area has no room for the record asked for.
    #[error("{path}: log full: a record of {needed} bytes (header and padding included) does not fit: {free} bytes of the {capacity}-byte record area are free, at most {largest} of them in one piece (a record never wraps around the end of the area); reclaim records (Log::reclaim) or create a larger log")]
    LogFull {
        /// The log file.
        path: PathBuf,
        /// Bytes the record needs in the area.
        needed: u64,
        /// Bytes free.
        free: u64,
        /// The most bytes free in one piece: a record never wraps around the end of the
        /// area, so it needs this many.
        largest: u64,
        /// Bytes of the record area.
        capacity: u64,
    },

    /// The log has numbered as many records, bytes or superline writes as its format can:
    /// going on would write a record or superline that no later open reads back. Only a
    /// forged file, or centuries of appends, gets there.
    #[error("{path}: log exhausted: its {what} would reach {at}, past the 2^62 a log can number (no later open could read it back); copy the live records into a new log (Log::create)")]
    LogExhausted {
        /// The log file.
        path: PathBuf,
        /// What ran out: "LSN", "byte offset" or "superline sequence number".
        what: &'static str,
        /// The value it would have reached.
        at: u64,
    },

    /// A record larger than the log can ever hold was asked for.
    #[error("{}: a log record of {len} bytes is larger than this log can hold ({max} bytes of payload); split the record, or create the log with a larger capacity", path.display())]
    LogRecordTooLarge {
        /// The log file.
        path: PathBuf,
        /// Payload bytes asked for.
        len: u64,
        /// The largest payload the log holds.
        max: u64,
    },

    /// A log record failed validation when it was read: damaged after it was written.
    #[error("{path}: log record LSN {lsn} at offset {offset:#x} is corrupt: {detail}; records from this one on cannot be trusted — `pgl log check` reports the damage, reopening the log drops them")]
    LogRecordCorrupt {
        /// The log file.
        path: PathBuf,
        /// The LSN expected there.
        lsn: u64,
        /// File offset of the record.
        offset: u64,
        /// What failed.
        detail: String,
    },

    /// An LSN outside the log's live records was given, or an iterator's next record was
    /// reclaimed under it.
    #[error("{}: {}: LSN {lsn} is out of range: the log holds LSNs {first} to {next} (exclusive); {}", path.display(), call(op), lsn_advice(op, *lsn, *first))]
    LsnOutOfRange {
        /// The log file.
        path: PathBuf,
        /// The operation ("force", "reclaim", "iter_from", "iter": an iterator made by
        /// `Log::iter_from` whose next record was reclaimed; resume from `first`, or
        /// "inspect": `Inspection::records` met a record a live log has written over since
        /// the inspection's scan, which found `first` to `next`).
        op: &'static str,
        /// The LSN given.
        lsn: u64,
        /// The first live LSN.
        first: u64,
        /// The next LSN to be reserved.
        next: u64,
    },

    /// A call needed a log record durable that comes after one the calling thread reserved
    /// and has not completed: waiting would be waiting for itself, forever. Records are
    /// made durable in LSN order, so none past the held one can be until it is completed
    /// or dropped.
    #[error("{}: {op}: LSN {held} is a reservation this thread holds open (reserved, not completed or dropped), {}", path.display(), held_advice(op, *lsn, *held, *completed))]
    LogReservationHeld {
        /// The log file.
        path: PathBuf,
        /// The call: "force", "append", "complete", "reclaim" or "reserve" (whose slots for
        /// records ahead of the oldest unforced one ran out).
        op: &'static str,
        /// The LSN the call needed durable.
        lsn: u64,
        /// The oldest record up to `lsn` that the calling thread holds open.
        held: u64,
        /// The record the call completed before it found `held` in the way (`append`,
        /// `complete`), if any.
        completed: Option<u64>,
    },
}

/// `$then` with `$file` bound to the `pool_file` of an error about a pool's contents (the
/// variants that carry one), else `$else`: the one list of those variants.
macro_rules! about_contents {
    ($e:expr, $file:ident => $then:expr, $else:expr) => {
        match $e {
            Error::PoolFull {
                pool_file: $file, ..
            }
            | Error::InvalidOid {
                pool_file: $file, ..
            }
            | Error::TypeMismatch {
                pool_file: $file, ..
            }
            | Error::LayoutMismatch {
                pool_file: $file, ..
            }
            | Error::TooManyTypes {
                pool_file: $file, ..
            }
            | Error::ChecksumMismatch {
                pool_file: $file, ..
            }
            | Error::BitmapMismatch {
                pool_file: $file, ..
            }
            | Error::Corrupt {
                pool_file: $file, ..
            }
            | Error::RootType {
                pool_file: $file, ..
            }
            | Error::HeldByThisThread {
                pool_file: $file, ..
            }
            | Error::RootNotFreeable {
                pool_file: $file, ..
            }
            | Error::AlreadyBorrowed {
                pool_file: $file, ..
            }
            | Error::LockedByThisThread {
                pool_file: $file, ..
            }
            | Error::UseAfterFree {
                pool_file: $file, ..
            } => $then,
            _ => $else,
        }
    };
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn config(reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            reason: reason.into(),
        }
    }

    /// An error that aborts a transaction with `error`, the caller's own: return it from a
    /// `pool.tx` closure (`Err(Error::abort(e))?`) and the transaction rolls back, and
    /// `pool.tx` returns it; [`Error::downcast_ref`] gives `error` back. Anything that
    /// converts into a boxed error will do: a type implementing `std::error::Error`, a
    /// `String` or a `&str`.
    pub fn abort(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        Error::Abort {
            error: Arc::from(error.into()),
        }
    }

    /// The caller's error this [`Error::Abort`] carries, if it is one of type `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Abort { error } => error.downcast_ref::<E>(),
            _ => None,
        }
    }

    pub(crate) fn already_borrowed(offset: u64) -> Self {
        Error::AlreadyBorrowed {
            pool_file: None,
            offset,
        }
    }

    pub(crate) fn locked_by_this_thread(offset: u64) -> Self {
        Error::LockedByThisThread {
            pool_file: None,
            offset,
        }
    }

    pub(crate) fn use_after_free(offset: u64) -> Self {
        Error::UseAfterFree {
            pool_file: None,
            offset,
        }
    }

    pub(crate) fn invalid_oid(offset: u64, reason: impl Into<String>) -> Self {
        Error::InvalidOid {
            offset,
            reason: reason.into(),
            pool_file: None,
        }
    }

    /// The pool file this error is about, if it is about a pool's contents and has left
    /// the pool's API (errors about other files carry their own `path`).
    pub fn pool_file(&self) -> Option<&Path> {
        about_contents!(self, pool_file => pool_file.as_deref(), None)
    }

    /// Completes an error about a pool's contents as it leaves the pool's API: the pool
    /// file `path`, and the registered name (`name_of`) of a stored type it gives only by
    /// id. What the error already says is kept: an error of another pool, returned from
    /// inside this pool's transaction, still names its own.
    pub(crate) fn in_pool(mut self, path: &Path, name_of: impl Fn(u32) -> Option<String>) -> Self {
        let fresh = about_contents!(
            &mut self,
            pool_file => pool_file.get_or_insert_with(|| path.to_owned()) == path,
            false
        );
        if !fresh {
            return self;
        }
        match &mut self {
            Error::TypeMismatch {
                found: id,
                found_name: name,
                ..
            }
            | Error::RootType {
                found: id,
                found_name: name,
                ..
            }
            | Error::ChecksumMismatch {
                type_id: id,
                type_name: name,
                ..
            } if name.is_none() => *name = name_of(*id),
            _ => {}
        }
        self
    }
}

/// The pool file a message is about, as its prefix (nothing while it is unknown).
fn at(pool_file: &Option<PathBuf>) -> String {
    match pool_file {
        Some(p) => format!("{}: ", p.display()),
        None => String::new(),
    }
}

/// What to do about an `ObjectTooLarge` whose limit is `max`: larger zones help only
/// while a zone's data area, not the 32-bit bound of every object, sets it.
fn too_large_advice(max: u64) -> &'static str {
    if max >= u64::from(u32::MAX) {
        "split it: no object holds more than 4 GiB - 1 bytes, whatever the pool's zones \
         (micro-buffers track changes with 32-bit offsets)"
    } else {
        "split it, or create the pool with larger zones (Config::rows / chunk_size)"
    }
}

/// An object of type id `type_id` at `offset` (0: a new one), as a message names it.
fn object(offset: u64, type_id: u32) -> String {
    match offset {
        0 => format!("a new object of type id {type_id:#010x}"),
        o => format!("the object at {o:#x} (type id {type_id:#010x})"),
    }
}

/// A stored type: its registered name when known, and its id.
fn stored_type(name: &Option<String>, id: u32) -> String {
    match name {
        Some(n) => format!("`{n}` (type id {id:#010x})"),
        None => format!("type id {id:#010x}"),
    }
}

/// What went wrong and what to do, for `LogReservationHeld` (after its first words).
/// The call an `LsnOutOfRange` came from, as its message names it.
fn call(op: &str) -> String {
    match op {
        "iter" => "iterating".to_string(),
        "inspect" => "inspecting".to_string(),
        _ => format!("Log::{op}"),
    }
}

/// What to do about an `LsnOutOfRange` of `op` for `lsn`, the first live LSN being
/// `first`.
fn lsn_advice(op: &str, lsn: u64, first: u64) -> &'static str {
    match op {
        "inspect" => {
            "the inspection's scan found it, but the live log has since reclaimed it and \
             written over it: inspect the log again"
        }
        "iter" => {
            "it was reclaimed before this iterator (Log::iter_from, which never skips a \
             record) reached it: resume with Log::iter_from at the first live LSN if the gap \
             is acceptable, or iterate with Log::iter, which follows the log's start"
        }
        _ if lsn < first => {
            "it was reclaimed: give a live LSN (Log::start_lsn is the first), or start from the \
             beginning (Log::iter)"
        }
        _ => {
            "it has not been reserved yet: give an LSN that reserve or append returned \
             (Log::next_lsn is the next to be handed out)"
        }
    }
}

fn held_advice(op: &str, lsn: u64, held: u64, completed: Option<u64>) -> String {
    let why = if op == "reserve" {
        "and the log's 16,384 completion slots past the durable LSN are all taken behind it: \
         no record can be reserved until it is completed"
            .to_string()
    } else if lsn == held {
        format!("and {op} needs it durable: waiting for it would never end")
    } else {
        format!(
            "and {op} needs LSN {lsn} durable, which records become in LSN order: waiting \
             for LSN {held} would never end"
        )
    };
    let again = match (op, completed) {
        (_, Some(c)) => format!(
            "; record {c} is complete and becomes durable with the first force after that, \
             so do not {op} it again (that would write it twice)"
        ),
        ("reserve", None) => "; reserve again after that".to_string(),
        (_, None) => format!("; {op} again after that"),
    };
    format!("{why}; complete or drop the held reservation first{again}")
}

/// What `Error::Version` says of format version `found`, this build reading `supported`.
fn version_advice(found: u32, supported: u32) -> String {
    if found > supported {
        format!(
            "the pool was written by a newer pgl (format version {found}; this pgl reads \
             versions up to {supported}); upgrade pgl to open it (this pgl left the file \
             unchanged)"
        )
    } else {
        format!(
            "pool format version {found}, which no pgl release wrote (this pgl reads versions \
             up to {supported}); the header is damaged: restore the pool from a backup"
        )
    }
}

/// What to do about an `Io` error, where the cause is plain: a missing file or
/// directory, a directory where a file should be, missing permissions, a read-only or
/// full file system, a file past the size limit.
fn io_advice(op: &str, source: &io::Error) -> &'static str {
    match source.kind() {
        io::ErrorKind::NotFound if op == "open" => {
            "; check the path, or create the pool (Pool::create, `pgl create`)"
        }
        io::ErrorKind::NotFound if op == "open read-only" => {
            "; check the path, or create the pool (Pool::create, `pgl create`)"
        }
        io::ErrorKind::PermissionDenied if op == "open" => {
            "; a pool is opened for reading and writing: this user needs both permissions \
             (Pool::open_read_only, and `pgl info`, `check` and `dump`, need only read \
             permission)"
        }
        io::ErrorKind::PermissionDenied if op == "open read-only" => {
            "; inspecting a pool needs read permission for this user"
        }
        io::ErrorKind::IsADirectory if op == "open read-only" => {
            "; give the path of a pool file, not of a directory"
        }
        io::ErrorKind::NotFound if op == "open log" => {
            "; check the path, or create the log (Log::create)"
        }
        io::ErrorKind::PermissionDenied if op == "open log" => {
            "; a log is opened for reading and writing: this user needs both permissions"
        }
        io::ErrorKind::IsADirectory if op == "open" => {
            "; give the path of a pool file, not of a directory"
        }
        io::ErrorKind::IsADirectory if op == "reset (open the old pool)" => {
            "; give the path of a pool file, not of a directory (reset left it alone)"
        }
        io::ErrorKind::IsADirectory if op == "open log" => {
            "; give the path of a log file, not of a directory"
        }
        io::ErrorKind::NotFound if op == "create" => {
            "; its directory does not exist: create the directory first, or choose another path"
        }
        io::ErrorKind::PermissionDenied if op == "create" => {
            "; this user may not create files in its directory: choose another directory, or \
             change its permissions"
        }
        io::ErrorKind::ReadOnlyFilesystem if op == "open" => {
            "; its file system is mounted read-only: remount it read-write to open the pool, \
             or inspect it without writing (Pool::open_read_only; `pgl info`, `check`, `dump`)"
        }
        io::ErrorKind::ReadOnlyFilesystem if op == "open log" => {
            "; its file system is mounted read-only: remount it read-write to open the log"
        }
        io::ErrorKind::ReadOnlyFilesystem if op == "create" => {
            "; its file system is mounted read-only: create the file on a writable one"
        }
        io::ErrorKind::StorageFull => {
            "; the file system is full: free space on it (or choose a smaller size, or another \
             file system), then retry"
        }
        io::ErrorKind::FileTooLarge => {
            "; the file would be larger than this process may write (`ulimit -f`) or than its \
             file system holds: raise the limit, or choose a smaller size"
        }
        _ => "",
    }
}

/// What to do about a `LayoutMismatch`, by the part of the struct that changed.
fn layout_advice(group: Option<u32>) -> String {
    match group {
        None => "the struct changed since the pool was written. Either reset the pool (create a \
                 new one), migrate its objects (read them with the old definition, write them \
                 with the new one), or make the type `#[extendible]` so that it can grow in place"
            .to_owned(),
        Some(0) => "the base of this `#[extendible]` struct changed, but the base is frozen once \
                    objects are stored: restore the fields without `#[extension]` and the \
                    `reserve = N` of `#[extendible(..)]` (its objects' size) as they were, and \
                    add new fields in a new `#[extension(N)]` group (a changed type with \
                    `replaces = field`)"
            .to_owned(),
        Some(n) => format!(
            "extension group {n} of this `#[extendible]` struct changed, but a group is frozen \
             once objects carry it: restore the fields of `#[extension({n})]` as they were, and \
             add new fields in a new group"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    fn io_message(op: &'static str, errno: i32) -> String {
        Error::io(op, "/x/p.pool", std::io::Error::from_raw_os_error(errno)).to_string()
    }

    /// A file system mounted read-only, full, or a file past `ulimit -f`: the message says
    /// what happened and what to do, whichever step met it.
    #[test]
    fn file_system_conditions_say_what_to_do() {
        let m = io_message("open", libc::EROFS);
        assert!(
            m.contains("mounted read-only") && m.contains("Pool::open_read_only"),
            "{m}"
        );
        let m = io_message("open log", libc::EROFS);
        assert!(m.contains("remount it read-write"), "{m}");
        let m = io_message("create", libc::EROFS);
        assert!(m.contains("create the file on a writable one"), "{m}");
        for op in ["allocate space for", "grow", "size", "fsync"] {
            let m = io_message(op, libc::ENOSPC);
            assert!(
                m.contains("the file system is full: free space on it"),
                "{m}"
            );
            let m = io_message(op, libc::EFBIG);
            assert!(m.contains("`ulimit -f`"), "{m}");
        }
    }
}
